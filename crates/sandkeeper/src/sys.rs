//! The one C call the sandbox needs that rustix does not offer. All of
//! the crate's `unsafe` is here.

#![allow(unsafe_code)]

/// `atexit(hook)`—runs `hook` when the process exits normally (`main`
/// returns or `std::process::exit` is called), not on a signal or abort.
///
/// Neither std nor rustix offers `atexit`: process-lifetime sandboxes live
/// in `static`s, whose destructors Rust never runs, so this is the only way
/// to remove them at a normal exit. Declared here rather than taken from
/// the `libc` crate: it is one function of the C standard library, in
/// every C runtime Rust links (glibc, musl, the BSDs', macOS's, Windows'
/// CRT), and `libc` would be a sizeable build for every test suite that
/// adds this crate.
///
/// Returns `false` if the C library could not register the hook.
///
/// # References
///
/// - [atexit(3)](https://man7.org/linux/man-pages/man3/atexit.3.html)
pub(crate) fn register_exit_hook(hook: extern "C" fn()) -> bool {
    // SAFETY: `hook` is a plain `extern "C" fn()` with a 'static lifetime;
    // atexit only stores the pointer and calls it once at exit. The hook
    // itself must not unwind across the C boundary: callers catch panics.
    unsafe { atexit(hook) == 0 }
}

extern "C" {
    /// C's `int atexit(void (*)(void))`.
    fn atexit(hook: extern "C" fn()) -> std::os::raw::c_int;
}
