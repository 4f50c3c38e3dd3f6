//! Which thread of a process takes its signals.
//!
//! A handled signal is delivered to one thread of the process that does
//! not block it, the main thread first. A thread stuck in a system call
//! that a handled signal does not interrupt (a request to a FUSE server
//! that does not answer, an NFS mount whose server is gone) never runs
//! the handler: the signal is lost for as long as it is stuck. A program
//! that must always see SIGTERM blocks it in every thread that does
//! such work ([`block_in_this_thread`] before starting them; they
//! inherit the mask) and leaves it open in one thread that only waits
//! ([`unblock_in_this_thread`] there).
//!
//! # Platform behavior
//!
//! Unix only; elsewhere both functions fail with
//! [`std::io::ErrorKind::Unsupported`].

use std::io;

use rustix::process::Signal;

/// Blocks `signals` in the calling thread and in the threads it starts
/// from now on: they stay pending for a thread that accepts them.
///
/// # Errors
///
/// When the mask cannot be changed (`EINVAL`: not a signal).
pub fn block_in_this_thread(signals: &[Signal]) -> io::Result<()> {
    set(signals, true)
}

/// Unblocks `signals` in the calling thread only.
///
/// # Errors
///
/// As [`block_in_this_thread`].
pub fn unblock_in_this_thread(signals: &[Signal]) -> io::Result<()> {
    set(signals, false)
}

#[cfg(unix)]
fn set(signals: &[Signal], block: bool) -> io::Result<()> {
    let raw: Vec<i32> = signals.iter().map(|s| s.as_raw()).collect();
    crate::sys::sigmask::set(&raw, block)
}

#[cfg(not(unix))]
fn set(_: &[Signal], _: bool) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
