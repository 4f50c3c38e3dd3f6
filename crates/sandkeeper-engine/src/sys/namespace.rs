//! Entering another mount namespace from one thread.
#![allow(unsafe_code)]

use std::os::fd::BorrowedFd;

use rustix::thread::{LinkNameSpaceType, UnshareFlags};

/// Moves the *calling thread* into the mount namespace open at `ns` (an
/// `nsfs` descriptor): first `unshare(CLONE_FS)`, as `setns(CLONE_NEWNS)`
/// demands of a thread that shares its filesystem information with
/// others, then `setns`. The thread's root and working directory become
/// that namespace's root; the other threads of the process are not
/// affected.
///
/// Meant for a thread that exits afterwards: it cannot come back.
///
/// # References
///
/// - [setns(2)](https://man7.org/linux/man-pages/man2/setns.2.html)
/// - [unshare(2)](https://man7.org/linux/man-pages/man2/unshare.2.html)
pub(crate) fn enter_mount_namespace(ns: BorrowedFd<'_>) -> rustix::io::Result<()> {
    // SAFETY: rustix marks unshare unsafe because of CLONE_FILES (threads
    // could then see different descriptor tables); CLONE_FS only gives this
    // thread its own root, working directory and umask, which no memory
    // or descriptor of the program depends on.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::FS) }?;
    rustix::thread::move_into_link_name_space(ns, Some(LinkNameSpaceType::Mount))
}
