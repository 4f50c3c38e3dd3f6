//! Re-running a test as PID 1 of a private PID and mount namespace, where
//! every process can be inspected and everything the test starts dies
//! with the namespace.
//!
//! The outer `#[test]` calls [`run_in_pid_namespace`]; the inner one is
//! `#[ignore]`d and starts with `if !in_namespace() { return; }`.

use std::process::Stdio;
use std::time::Duration;

use crate::privilege::require_root;
use crate::process::{test_command, wait_with_deadline, CHILD_ENV};

pub use crate::process::IN_NAMESPACE_ENV;

/// sandkeeper's switch that trusts the PID namespace it runs in
/// (`SANDKEEPER_TRUST_PID_NAMESPACE=1`), set for the inner half of
/// [`run_in_pid_namespace`]: without it, a scan in a child PID namespace
/// cannot see the host and calls every entry `unknown`.
pub const TRUST_PID_NAMESPACE_ENV: &str = "SANDKEEPER_TRUST_PID_NAMESPACE";

/// `unshare` making a new PID and mount namespace, `/proc` remounted for
/// it, whose PID 1 is what follows; everything in it is killed when that
/// process dies, and its mounts are private.
pub const UNSHARE_PID_NAMESPACE: [&str; 7] = [
    "unshare",
    "--pid",
    "--fork",
    "--mount-proc",
    "--kill-child",
    "--propagation",
    "private",
];

/// How long the inner half may take before it is killed and fails.
const NAMESPACE_DEADLINE: Duration = Duration::from_secs(600);

/// Runs the ignored test `inner` of the calling test binary as PID 1 of a
/// new PID and mount namespace (`unshare --pid --fork --mount-proc`), where
/// every process can be inspected (on some machines even root cannot
/// inspect the host's PID 1), and fails if it fails. Everything the inner
/// test starts dies with the namespace (`--kill-child`), its mounts with its
/// private mount namespace. The inner run trusts its PID namespace
/// ([`TRUST_PID_NAMESPACE_ENV`]). Returns false when skipped (not root, no
/// CI).
pub fn run_in_pid_namespace(outer: &str, inner: &str) -> bool {
    if !require_root(outer) {
        return false;
    }
    let mut child = test_command(&UNSHARE_PID_NAMESPACE, inner)
        .env(IN_NAMESPACE_ENV, "1")
        // The namespace is the test's own: nothing outside it uses what the
        // test scans (issue 10, finding 5(a)).
        .env(TRUST_PID_NAMESPACE_ENV, "1")
        .env_remove(CHILD_ENV)
        .env_remove("SANDKEEPER_KEEP")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run unshare (util-linux)");
    let out = wait_with_deadline(&mut child, NAMESPACE_DEADLINE);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{inner} failed in the namespace ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{inner} did not run:\n{stdout}"
    );
    print!("{stdout}");
    eprint!("{stderr}");
    true
}

/// Whether this process is the inner half of [`run_in_pid_namespace`]
/// (or was started as if it were, with [`IN_NAMESPACE_ENV`] set).
pub fn in_namespace() -> bool {
    std::env::var_os(IN_NAMESPACE_ENV).is_some()
}
