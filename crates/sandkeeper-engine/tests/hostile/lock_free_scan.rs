//! Finding 10: a scan tells live from free by `/proc/locks`, never by
//! taking the lock itself, and still tells them apart: a live sandbox is
//! `live` (holder named), an orphan `orphaned`, a directory its owner
//! locked exclusively (its own `flock`, no lease) `live`. The binary's
//! `flock` calls are traced in the CLI's `hostile::scan_locks`.

use std::fs;
use std::os::fd::AsFd;

use rustix::fs::FlockOperation;
use sandkeeper_engine::lease::{Lease, LeaseRecord};
use sandkeeper_engine::sandbox;
use sandkeeper_engine::scan::{EntryState, Scanner, StateReason};
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};

#[test]
fn look_only_scan_still_tells_live_from_orphaned() {
    run_in_pid_namespace(
        "look_only_scan_still_tells_live_from_orphaned",
        "lock_free_scan::inner_look_only_scan",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_look_only_scan() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let record = || LeaseRecord::for_current_process("app");
    let live = Lease::create(root.path(), "app-live".as_ref(), &record(), 0o700).unwrap();
    drop(Lease::create(root.path(), "app-orphan".as_ref(), &record(), 0o700).unwrap());
    fs::create_dir(root.path().join("app-own-lock")).unwrap();
    let own = fs::File::open(root.path().join("app-own-lock")).unwrap();
    rustix::fs::flock(own.as_fd(), FlockOperation::NonBlockingLockExclusive).unwrap();
    fs::create_dir(root.path().join("app-plain")).unwrap();

    let report = Scanner::new().scan(&[root.path()]).unwrap();
    let state = |name: &str| {
        let e = report.roots[0]
            .entries
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} not scanned"));
        (e.state, e.reason.clone())
    };
    let me = std::process::id();
    assert_eq!(
        state("app-live"),
        (EntryState::Live, StateReason::LockHeld { pids: vec![me] })
    );
    assert_eq!(
        state("app-own-lock"),
        (EntryState::Live, StateReason::LockHeld { pids: vec![me] })
    );
    assert_eq!(state("app-orphan").0, EntryState::Orphaned);
    assert_eq!(state("app-plain").0, EntryState::Idle);

    // The scan left the owner's exclusive lock alone, and took none of its
    // own: the owner can drop and retake its lock without blocking, and
    // the orphan can be locked exclusively at once.
    rustix::fs::flock(own.as_fd(), FlockOperation::Unlock).unwrap();
    rustix::fs::flock(own.as_fd(), FlockOperation::NonBlockingLockExclusive).unwrap();
    let orphan = fs::File::open(root.path().join("app-orphan")).unwrap();
    rustix::fs::flock(orphan.as_fd(), FlockOperation::NonBlockingLockExclusive).unwrap();
    drop((own, orphan, live));
}
