//! The `sandkeeper` binary, end to end: exit statuses, output formats, and
//! agreement with `du`.

mod config;
mod reap;
mod run;
mod scan;
mod watch;

use std::path::Path;
use std::process::{Command, Output};

/// Runs `sandkeeper args…` with a clean environment for sandkeeper's own
/// variables.
pub fn sandkeeper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(args)
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .output()
        .expect("run sandkeeper")
}

/// Stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stderr as text, with `dir` replaced by `[DIR]`.
pub fn stderr(out: &Output, dir: &Path) -> String {
    String::from_utf8_lossy(&out.stderr).replace(&*dir.to_string_lossy(), "[DIR]")
}

#[test]
fn help_and_version() {
    let out = sandkeeper(&["--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains("scan") && text.contains("Exit status: 0 success"),
        "{text}"
    );
    let out = sandkeeper(&["--version"]);
    assert_eq!(
        stdout(&out).trim(),
        format!("sandkeeper {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unknown_arguments_are_usage_errors() {
    let out = sandkeeper(&["scan", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bogus"));
}

pub use sandkeeper_testkit::{in_namespace, require_root, run_in_pid_namespace};
