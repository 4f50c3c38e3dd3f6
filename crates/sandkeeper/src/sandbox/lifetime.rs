//! Process-lifetime sandboxes: removed by an exit hook, since Rust never
//! drops `static`s.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, Once, Weak};

use super::Inner;

static REGISTERED: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// Registers a sandbox to be finished at normal process exit.
pub(super) fn register(inner: &Arc<Inner>) {
    HOOK.call_once(|| {
        // If the hook cannot be registered, the sandbox is still reclaimed
        // by the next run or a reaper: the lease makes that safe.
        let _ = crate::sys::register_exit_hook(finish_all_at_exit);
    });
    let mut list = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(inner));
}

/// The exit hook. It must not unwind into C, and must not block: another
/// thread may hold a lock while the process exits, so it only `try_lock`s
/// and leaves anything busy to the next run or a reaper.
extern "C" fn finish_all_at_exit() {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Ok(list) = REGISTERED.try_lock() else {
            return;
        };
        for inner in list.iter().filter_map(Weak::upgrade) {
            if inner.state.try_lock().is_ok() {
                let _ = inner.finish(false);
            }
        }
    }));
}
