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

/// Makes the child that `command` starts get SIGKILL when this process
/// dies, by any means (SIGKILL and OOM included): `PR_SET_PDEATHSIG` on
/// Linux, `PROC_PDEATHSIG_CTL` on FreeBSD, set in the child between fork
/// and exec. Should this process be gone before the child set it, the
/// child was reparented already and nothing would ever signal it: it
/// checks its parent afterwards and then does not start (`ESRCH`).
///
/// The kernel sends the signal when the *thread* that forked exits; the
/// caller forks from a thread that lives as long as the process
/// (`sandbox/spawn.rs`).
#[cfg(any(target_os = "linux", target_os = "freebsd"))]
pub(crate) fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe work is allowed: it makes two system calls
    // and builds an `io::Error` from a number, allocating nothing and
    // taking no lock.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(
                    rustix::io::Errno::SRCH.raw_os_error(),
                ));
            }
            Ok(())
        });
    }
}
