//! The teardown stack: actions that run, last registered first, before a
//! sandbox's directory is removed (kill and wait a VM, then unmount, then
//! remove — never the directory under a running process).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Child;
use std::thread::sleep;
use std::time::{Duration, Instant};

#[cfg(unix)]
use rustix::process::{kill_process, Pid, Signal};

/// One registered action.
pub(crate) enum Action {
    /// A closure from [`Sandbox::defer`](crate::Sandbox::defer).
    Deferred(Box<dyn FnOnce() + Send>),
    /// A child from [`Sandbox::spawn`](crate::Sandbox::spawn): SIGTERM, wait
    /// up to the grace period, SIGKILL, wait.
    Child(Child),
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Deferred(_) => f.write_str("Deferred(..)"),
            Action::Child(c) => write!(f, "Child({})", c.id()),
        }
    }
}

/// Runs `actions` last-first. A panicking action does not stop the others
/// (and cannot abort a process that is already unwinding); the number of
/// actions that panicked is returned.
pub(crate) fn run_stack(actions: Vec<Action>, kill_grace: Duration) -> usize {
    let mut panicked = 0;
    for action in actions.into_iter().rev() {
        let result = catch_unwind(AssertUnwindSafe(|| match action {
            Action::Deferred(f) => f(),
            Action::Child(child) => stop_child(child, kill_grace),
        }));
        if result.is_err() {
            panicked += 1;
        }
    }
    panicked
}

/// Stops a child: SIGTERM, up to `grace` for it to exit, then SIGKILL;
/// always reaps it, so it is dead (not a zombie holding nothing, but truly
/// gone) when this returns.
fn stop_child(mut child: Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // A pid we have not reaped cannot have been reused, so signalling it
    // by number is safe. (Windows has no SIGTERM: the child is ended at
    // once, below, with `TerminateProcess`.)
    #[cfg(unix)]
    if let Some(pid) = Pid::from_raw(child.id() as i32) {
        let _ = kill_process(pid, Signal::TERM);
    }
    #[cfg(windows)]
    let grace = {
        let _ = grace;
        Duration::ZERO
    };
    let deadline = Instant::now() + grace;
    let mut pause = Duration::from_millis(1);
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) => sleep(pause),
            Err(_) => break,
        }
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn runs_last_first_and_survives_panics() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let push = |n: u32| {
            let log = Arc::clone(&log);
            Action::Deferred(Box::new(move || log.lock().unwrap().push(n)))
        };
        let actions = vec![
            push(1),
            Action::Deferred(Box::new(|| panic!("teardown failure"))),
            push(2),
            push(3),
        ];
        let panicked = run_stack(actions, Duration::ZERO);
        assert_eq!(panicked, 1);
        assert_eq!(*log.lock().unwrap(), vec![3, 2, 1]);
    }
}
