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
