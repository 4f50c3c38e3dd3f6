//! The C calls the sandbox needs that rustix does not offer (`atexit`, the
//! parent-death signal's `pre_exec`, signal dispositions). All of the
//! crate's `unsafe` is here.

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

/// The signals [`teardown_on_signals`](crate::teardown_on_signals) handles.
#[cfg(unix)]
pub(crate) const TEARDOWN_SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Whether `signal` is ignored (`SIG_IGN`, as `nohup` sets SIGHUP), asked
/// without changing it.
#[cfg(unix)]
pub(crate) fn signal_is_ignored(signal: i32) -> bool {
    let mut current = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only reads the current one into
    // `current`, which is large enough and zero-initialised.
    let read = unsafe { libc::sigaction(signal, std::ptr::null(), current.as_mut_ptr()) };
    // SAFETY: sigaction filled it (and it was zeroed before).
    read == 0 && unsafe { current.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// Runs `action` in the handler of `signal`, after the handler that was
/// there before (chained, never replaced). `action` must be
/// async-signal-safe: system calls only, no allocation, no lock.
///
/// Chaining handlers correctly (the previous one's `SA_SIGINFO`, its mask,
/// handlers added by other libraries later) is what `signal-hook-registry`
/// is made for; it is the one dependency of this crate beyond rustix.
#[cfg(unix)]
pub(crate) fn on_signal(
    signal: i32,
    action: impl Fn() + Send + Sync + 'static,
) -> std::io::Result<()> {
    // SAFETY: the callers' actions are async-signal-safe (see above), and
    // `signal` is one of TEARDOWN_SIGNALS, none of them forbidden.
    unsafe { signal_hook_registry::register(signal, action) }.map(drop)
}

/// Ends the process by `signal` with its default action (so the parent
/// sees it killed by that signal), or with status 128 + `signal` should
/// the signal not end it.
#[cfg(unix)]
pub(crate) fn die_by_signal(signal: i32) -> ! {
    // SAFETY: plain calls on this process with valid arguments; the
    // signal set is initialised by sigemptyset before it is used.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, set.as_ptr(), std::ptr::null_mut());
        libc::raise(signal);
        libc::_exit(128 + signal)
    }
}

/// A pipe, both ends close-on-exec.
#[cfg(unix)]
pub(crate) fn cloexec_pipe() -> std::io::Result<(rustix::fd::OwnedFd, rustix::fd::OwnedFd)> {
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    {
        Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
    }
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    {
        // (No pipe2 on macOS: a child forked between the two calls keeps
        // the ends until it execs, which costs nothing here.)
        let (reader, writer) = rustix::pipe::pipe()?;
        for end in [&reader, &writer] {
            rustix::io::fcntl_setfd(end, rustix::io::FdFlags::CLOEXEC)?;
        }
        Ok((reader, writer))
    }
}
