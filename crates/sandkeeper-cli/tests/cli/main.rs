//! The `sandkeeper` binary, end to end: exit statuses, output formats, and
//! agreement with `du`.

mod completions;
mod config;
mod consistency;
mod job_control;
mod launcher;
mod nextest;
mod origins;
mod reap;
mod run;
mod scan;
mod watch;

use std::ffi::OsStr;
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

/// Runs `sandkeeper args…` with `env` set, over an environment cleared of
/// `SANDKEEPER_KEEP` and `COLUMNS` (output as wide as it wants, unless
/// `env` sets it).
pub fn sandkeeper_env<V: AsRef<OsStr>>(args: &[&str], env: &[(&str, V)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandkeeper"));
    cmd.args(args)
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run sandkeeper")
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

/// Issue 11, item 12: a negative value is an invalid value, said as such
/// (not clap's "unexpected argument '-1' found"), with exit status 2.
#[test]
fn negative_values_say_what_is_wrong() {
    let root = sandkeeper_engine::sandbox!().unwrap();
    let root = root.path().to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["reap", "--older-than", "-1s", root],
            "negative durations are not allowed",
        ),
        (
            &["reap", "--grace", "-1s", root],
            "negative durations are not allowed",
        ),
        (
            &["reap", "--max-keep", "-2h", root],
            "negative durations are not allowed",
        ),
        (
            &["reap", "--target-free", "-5%", root],
            "negative percentages are not allowed",
        ),
        (
            &["reap", "--target-free", "-5GiB", root],
            "negative sizes are not allowed",
        ),
        (
            &["reap", "--keep-last", "-1", root],
            "negative counts are not allowed",
        ),
        (
            &["explain", "--keep-last", "-3", root],
            "negative counts are not allowed",
        ),
        (
            &["run", "--kill-grace", "-1s", "--", "true"],
            "negative durations are not allowed",
        ),
        (
            &["run", "--keep-for", "-1d", "--", "true"],
            "negative durations are not allowed",
        ),
        (
            &["scan", "--ignore-pid", "-1", root],
            "negative pids are not allowed",
        ),
    ];
    for (args, want) in cases {
        let out = sandkeeper(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(want) && !err.contains("unexpected argument"),
            "{args:?}: {err}"
        );
    }
}

/// Issue 11, item 12: explaining a root itself says that it is a root,
/// not that it is "not inside any root".
#[test]
fn explaining_a_root_says_it_is_a_root() {
    let root = sandkeeper_engine::sandbox!().unwrap();
    let path = root.path().to_str().unwrap();
    let out = sandkeeper(&["explain", "--root", path, path]);
    let err = stderr(&out, root.path());
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("[DIR] is a root, not an entry") && !err.contains("not inside any root"),
        "{err}"
    );
    assert!(
        err.contains("hint: explain an entry inside it, such as [DIR]/NAME"),
        "{err}"
    );
}
