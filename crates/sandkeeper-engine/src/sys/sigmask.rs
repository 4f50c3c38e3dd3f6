//! `pthread_sigmask(2)`: which signals the calling thread accepts.

#![allow(unsafe_code)]

use std::io;

/// `pthread_sigmask(how, {signals}, NULL)`—blocks (`block`) or unblocks
/// `signals` (raw numbers) in the calling thread. Threads started later by
/// this thread inherit its mask.
///
/// # References
///
/// - [pthread_sigmask(3)](https://man7.org/linux/man-pages/man3/pthread_sigmask.3.html)
pub(crate) fn set(signals: &[i32], block: bool) -> io::Result<()> {
    // SAFETY: an all-zero sigset_t is a valid value, and sigemptyset
    // initialises it anyway.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, exclusively borrowed sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for &signal in signals {
        // SAFETY: as above; an invalid number only makes sigaddset fail.
        if unsafe { libc::sigaddset(&mut set, signal) } != 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
    }
    let how = if block {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: `set` is initialised; the old mask is not asked for (NULL).
    let rc = unsafe { libc::pthread_sigmask(how, &set, std::ptr::null_mut()) };
    match rc {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// `pthread_sigmask(SIG_BLOCK, {SIGCONT}, &old)` then
/// `pthread_sigmask(SIG_SETMASK, &old, NULL)`—changes the calling thread's
/// mask for an instant and puts it back, so that the kernel looks at the
/// signals pending for the process again before this returns.
///
/// A stop signal sent to the caller's own process (`kill(0, SIGTSTP)`)
/// may be taken by another of its threads, which then stops the others
/// only a moment later. A changed mask makes the kernel recompute which
/// signals this thread must handle (`recalc_sigpending`), and a pending
/// stop, or a group stop another thread began, takes this thread at the
/// end of the call: when this returns, the process has been stopped and
/// continued (or was never going to stop). SIGCONT is the one blocked
/// because blocking it defers nothing that matters: it continues a
/// stopped process when it is sent, whatever the mask. When SIGCONT is
/// blocked already, SIGWINCH is used instead; when both are, nothing is
/// changed.
///
/// # References
///
/// - [pthread_sigmask(3)](https://man7.org/linux/man-pages/man3/pthread_sigmask.3.html)
/// - [signal(7)](https://man7.org/linux/man-pages/man7/signal.7.html)
pub(crate) fn settle() {
    // SAFETY: an all-zero sigset_t is a valid value; pthread_sigmask fills
    // it in below.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a NULL new set only reads the current mask into `old`.
    if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut old) } != 0 {
        return;
    }
    for signal in [libc::SIGCONT, libc::SIGWINCH] {
        // SAFETY: `old` is an initialised sigset_t; `signal` is valid.
        if unsafe { libc::sigismember(&old, signal) } == 1 {
            continue;
        }
        let mut one = old;
        // SAFETY: `one` is an initialised sigset_t; `signal` is valid.
        unsafe { libc::sigaddset(&mut one, signal) };
        // SAFETY: both sets are initialised; the second call restores
        // exactly the mask read above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &one, std::ptr::null_mut());
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        return;
    }
}
