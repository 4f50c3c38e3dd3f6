//! Attacks on the `sandkeeper` binary running as root, by an unprivileged
//! local user (uid 65534, via `setpriv`) in a shared root: one module per
//! finding of the hostile trial, each a regression test for a fix. See
//! `docs/security.md` for the threat model and the invariants these tests
//! pin.
//!
//! Races are timed with inotify, not sleeps, so the tests are
//! deterministic; every test is bounded in time and leaves nothing behind.

mod config_input;
mod full_fs;
mod fuzz_render;
mod hang;
mod kernelusers;
mod messages;
mod metrics_privacy;
mod output;
mod records;
mod roots;
mod run_tmpdir;
mod scan_locks;
mod visibility;

use std::ffi::OsStr;
use std::process::{Command, Stdio};

/// The `sandkeeper` binary, with sandkeeper's own variables cleared and no
/// standard input.
pub fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandkeeper"));
    cmd.env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .stdin(Stdio::null());
    cmd
}

/// `setpriv` to uid/gid 65534 with no supplementary groups: prefix a
/// command with it to run that command as the attacker.
pub fn as_nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .stdin(Stdio::null());
    cmd
}

/// Runs `script` with `sh -ec` as uid 65534, with `env` set; panics with
/// its output when it fails.
pub fn nobody_sh(script: &str, env: &[(&str, &OsStr)]) {
    let mut cmd = as_nobody();
    cmd.args(["sh", "-ec", script]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run setpriv (util-linux)");
    assert!(
        out.status.success(),
        "as nobody: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
