//! The open sandboxes of this process, for the two ways a sandbox is
//! finished without its owner dropping it: the exit hook (process-lifetime
//! sandboxes live in `static`s, which Rust never drops) and the teardown
//! on a termination signal (every open sandbox, newest first:
//! [`teardown_on_signals`](crate::teardown_on_signals)).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
#[cfg(unix)]
use std::time::{Duration, Instant};

use super::Inner;

/// One open sandbox; `at_exit` for a process-lifetime one.
struct Entry {
    sandbox: Weak<Inner>,
    at_exit: bool,
}

/// In creation order. Entries whose sandbox is gone are dropped at the
/// next registration, so the list is as long as the open sandboxes.
static OPEN: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();
/// Finishes under way, in any thread (see [`Finishing`]).
static FINISHING: AtomicUsize = AtomicUsize::new(0);

/// Records a new sandbox; one that is `at_exit` is finished at normal
/// process exit if nobody finished it before.
pub(super) fn register(inner: &Arc<Inner>, at_exit: bool) {
    if at_exit {
        HOOK.call_once(|| {
            // If the hook cannot be registered, the sandbox is still
            // reclaimed by the next run or a reaper: the lease makes that
            // safe.
            let _ = crate::sys::register_exit_hook(finish_all_at_exit);
        });
    }
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|e| e.sandbox.strong_count() > 0);
    open.push(Entry {
        sandbox: Arc::downgrade(inner),
        at_exit,
    });
}

/// The exit hook. It must not unwind into C, and must not block: another
/// thread may hold a lock while the process exits, so it only `try_lock`s
/// and leaves anything busy to the next run or a reaper.
extern "C" fn finish_all_at_exit() {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Ok(open) = OPEN.try_lock() else {
            return;
        };
        for inner in open
            .iter()
            .filter(|e| e.at_exit)
            .filter_map(|e| e.sandbox.upgrade())
        {
            if inner.state.try_lock().is_ok() {
                let _ = inner.finish(false);
            }
        }
    }));
}

/// Finishes every open sandbox, the newest first (a launcher's VM sandbox
/// before the run directory it was made in), as a drop would: teardown
/// stack, then removal (or keeping, as `SANDKEEPER_KEEP` says). Then waits,
/// up to `patience`, for the finishes other threads had begun, so that
/// none is cut off halfway when the caller ends the process.
#[cfg(unix)]
pub(super) fn finish_all_newest_first(patience: Duration) {
    let sandboxes: Vec<Arc<Inner>> = {
        let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.iter().filter_map(|e| e.sandbox.upgrade()).collect()
    };
    for inner in sandboxes.into_iter().rev() {
        let _ = catch_unwind(AssertUnwindSafe(|| inner.finish_and_say_if(false)));
    }
    let deadline = Instant::now() + patience;
    while FINISHING.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Held while a sandbox is being finished (teardown, then removal or
/// keeping), in whichever thread: the signal teardown waits for these
/// before it ends the process.
pub(super) struct Finishing(());

impl Finishing {
    pub(super) fn begin() -> Finishing {
        FINISHING.fetch_add(1, Ordering::AcqRel);
        Finishing(())
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        FINISHING.fetch_sub(1, Ordering::AcqRel);
    }
}
