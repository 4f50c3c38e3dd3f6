//! The privileged tests a run skipped, said once at the end of each test
//! binary (after libtest's `test result:` line), so that a run without root
//! cannot pass for a full one: libtest has no "skipped" of its own, and a
//! passing test's own output is captured.

use std::sync::{Mutex, Once};

static SKIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// Records that `test` was skipped, and why.
pub(crate) fn record(test: &str, why: &str) {
    HOOK.call_once(|| {
        // SAFETY: `atexit` only stores the pointer of a plain `extern "C"`
        // function with a 'static lifetime; the hook catches its panics.
        #[allow(unsafe_code)]
        unsafe {
            atexit(say_at_exit);
        }
    });
    SKIPPED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{test} ({why})"));
}

extern "C" fn say_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Ok(skipped) = SKIPPED.try_lock() else {
            return;
        };
        if skipped.is_empty() {
            return;
        }
        eprintln!(
            "\nskipped {} privileged test(s) of this binary; run as root, or with CI set, for a full run:",
            skipped.len()
        );
        for test in skipped.iter() {
            eprintln!("  {test}");
        }
    });
}

extern "C" {
    /// C's `int atexit(void (*)(void))`.
    fn atexit(hook: extern "C" fn()) -> std::os::raw::c_int;
}
