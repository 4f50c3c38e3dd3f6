//! Who a test runs as: root checks, and acting as the unprivileged user
//! `nobody` (uid and gid 65534) on a thread or through `setpriv`. What
//! `nobody` works on goes in a
//! [`Scratch::reachable_by_others`](crate::scratch::Scratch::reachable_by_others):
//! the temp directory may be private.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::process::{spawn_ready, Spawned};

/// The uid and gid of `nobody`, the attacker in the hostile tests.
pub const NOBODY: u32 = 65534;

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether privileged tests can run. Without root they skip, printing why,
/// unless `CI` is set: there they must run, so the test fails instead.
pub fn require_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root, and CI is set: privileged tests must run in CI"
    );
    eprintln!("skipping {test}: needs root (run as root or in CI)");
    crate::skips::record(test, "needs root");
    false
}

/// Runs `f` on a thread whose credentials are those of `nobody` (uid and
/// gid 65534, no groups, no capabilities); the rest of the process stays
/// root. Linux credentials are per thread; threads `f` starts inherit them.
pub fn as_nobody<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let gid = rustix::process::Gid::from_raw(NOBODY);
            let uid = rustix::process::Uid::from_raw(NOBODY);
            rustix::thread::set_thread_groups(&[]).expect("setgroups");
            rustix::thread::set_thread_res_gid(gid, gid, gid).expect("setresgid");
            rustix::thread::set_thread_res_uid(uid, uid, uid).expect("setresuid");
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// The `setpriv` command line that runs what follows it as uid/gid 65534
/// with no supplementary groups (a wrapper for
/// [`Helper::start_via`](crate::process::Helper::start_via)).
pub const SETPRIV_NOBODY: [&str; 5] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--",
];

/// [`SETPRIV_NOBODY`] as a command with no standard input: add a program
/// and its arguments to run them as the attacker.
pub fn setpriv_nobody() -> Command {
    let mut cmd = Command::new(SETPRIV_NOBODY[0]);
    cmd.args(&SETPRIV_NOBODY[1..]).stdin(Stdio::null());
    cmd
}

/// Runs `script` with `sh -ec` as uid 65534, with `env` set; panics with
/// its output when it fails.
pub fn nobody_sh(script: &str, env: &[(&str, &OsStr)]) {
    let mut cmd = setpriv_nobody();
    cmd.args(["sh", "-ec", script]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_script(script, cmd);
}

/// Runs `script` with `sh -ec` as uid 65534 in `dir`; panics with its
/// output when it fails.
pub fn nobody_sh_in(script: &str, dir: &Path) {
    let mut cmd = setpriv_nobody();
    cmd.args(["sh", "-ec", script]).current_dir(dir);
    run_script(script, cmd);
}

/// A process of uid 65534 living in `dir` (its working directory) until
/// it is dropped: `dir` is in use by another user.
pub fn nobody_living_in(dir: &Path) -> Spawned {
    spawn_ready(
        setpriv_nobody()
            .args([
                "sh",
                "-c",
                "cd \"$1\" && echo ready && exec sleep 600",
                "sh",
            ])
            .arg(dir),
    )
}

fn run_script(script: &str, mut cmd: Command) {
    let out = cmd.output().expect("run setpriv (util-linux)");
    assert!(
        out.status.success(),
        "as nobody: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
