//! The tests a run skipped (privileged ones without root, ones whose tool
//! is not installed), said once at the end of each test binary (after
//! libtest's `test result:` line), so that such a run cannot pass for a
//! full one: libtest has no "skipped" of its own, and a passing test's own
//! output is captured. With `CI` set nothing is skipped: the test fails.

use std::sync::{Mutex, Once};

static SKIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// Whether `program` runs (`program --version`). When it does not, `test`
/// is skipped: said now and listed at the end of the binary; with `CI`
/// set, it fails instead (`.ci/run` installs the Debian `package`).
///
/// ```no_run
/// if !sandkeeper_testkit::skips::tool("promtool_checks_the_rules", "promtool", "prometheus") {
///     return;
/// }
/// ```
pub fn tool(test: &str, program: &str, package: &str) -> bool {
    let runs = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        unless_ci(
            test,
            &format!("{program} is not installed (Debian package {package})"),
        );
    }
    runs
}

/// Skips `test` for `why` (said now, listed at the end of the binary),
/// or fails it when `CI` is set: a CI run is a full run.
pub fn unless_ci(test: &str, why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {why}, and CI is set (.ci/run installs what the tests need)"
    );
    eprintln!("skipping {test}: {why}");
    record(test, why);
}

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
            "\nskipped {} test(s) of this binary; run as root with the tools installed, or with CI set, for a full run:",
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
