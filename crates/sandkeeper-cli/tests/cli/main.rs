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

/// Whether privileged tests can run: skips (printing why) only when not
/// root and `CI` is unset.
pub fn require_root(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root, and CI is set"
    );
    eprintln!("skipping {test}: needs root (run as root or in CI)");
    false
}

/// Runs the ignored test `inner` of this binary in a new PID namespace,
/// where every process can be inspected (on some machines even root cannot
/// inspect PID 1). Returns false if skipped.
pub fn run_in_pid_namespace(outer: &str, inner: &str) -> bool {
    if !require_root(outer) {
        return false;
    }
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            inner,
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SK_IN_NAMESPACE", "1")
        .output()
        .expect("run unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{inner} failed in the namespace:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "{inner} did not run:\n{stdout}"
    );
    true
}

/// Whether this process is the inner half of `run_in_pid_namespace`.
pub fn in_namespace() -> bool {
    std::env::var_os("SK_IN_NAMESPACE").is_some()
}
