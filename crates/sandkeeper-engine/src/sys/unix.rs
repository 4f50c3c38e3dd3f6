//! Unix: mount namespaces and the terminal's job-control signals.
#![allow(unsafe_code)]

/// `unshare(CLONE_NEWNS)`, with `CLONE_NEWUSER` when `user` is set—gives
/// the calling thread (and the processes it starts) a private mount
/// namespace.
///
/// # References
///
/// - [unshare(2)](https://man7.org/linux/man-pages/man2/unshare.2.html)
#[cfg(target_os = "linux")]
pub(crate) fn unshare_mounts(user: bool) -> std::io::Result<()> {
    use rustix::thread::UnshareFlags;
    let mut flags = UnshareFlags::NEWNS;
    if user {
        flags |= UnshareFlags::NEWUSER;
    }
    // SAFETY: rustix marks unshare unsafe because of CLONE_FILES (threads
    // could then see different descriptor tables); we never pass it. A new
    // mount or user namespace changes no memory or descriptor the program
    // relies on.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(Into::into)
}

/// Runs `f` with SIGTTOU ignored (`signal(SIGTTOU, SIG_IGN)`, restored
/// after)—so a process in a background process group can take its
/// terminal back with `tcsetpgrp` instead of being stopped.
///
/// # References
///
/// - [tcsetpgrp(3)](https://man7.org/linux/man-pages/man3/tcsetpgrp.3.html)
/// - [signal(2)](https://man7.org/linux/man-pages/man2/signal.2.html)
pub(crate) fn with_sigttou_ignored<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: installing SIG_IGN involves no handler code; the previous
    // disposition is restored below. No other code of this crate changes
    // SIGTTOU's disposition.
    let previous = unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
    let result = f();
    if previous != libc::SIG_ERR {
        // SAFETY: restores exactly the disposition that was in place.
        unsafe { libc::signal(libc::SIGTTOU, previous) };
    }
    result
}

/// `kcmp(pid1, pid2, KCMP_FILES, 0, 0)`—whether two tasks (pids or thread
/// ids of the caller's pid namespace) share one descriptor table.
///
/// Neither std nor rustix wraps `kcmp`. It needs ptrace read access to
/// both tasks; `ESRCH` when one is gone, `ENOSYS` without `CONFIG_KCMP`.
///
/// # References
///
/// - [kcmp(2)](https://man7.org/linux/man-pages/man2/kcmp.2.html)
#[cfg(target_os = "linux")]
pub(crate) fn kcmp_files(pid1: u32, pid2: u32) -> std::io::Result<bool> {
    /// `KCMP_FILES` from `<linux/kcmp.h>`.
    const KCMP_FILES: libc::c_int = 2;
    let (Ok(a), Ok(b)) = (libc::pid_t::try_from(pid1), libc::pid_t::try_from(pid2)) else {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    };
    // SAFETY: kcmp takes five integer arguments and touches no memory of
    // the caller for KCMP_FILES; the idx arguments are unused (0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a,
            b,
            KCMP_FILES,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    match r {
        0 => Ok(true),
        1..=3 => Ok(false), // ordered: less, greater, not equal
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `ioctl(fd, NS_GET_USERNS)`—the user namespace that owns the namespace
/// of the nsfs file `fd`, as a new descriptor.
///
/// rustix offers only a generic, unsafe `ioctl`. `EPERM` when the owner
/// is outside the caller's user namespace; `ENOTTY` for a file that is not
/// a namespace.
///
/// # References
///
/// - [ioctl_ns(2)](https://man7.org/linux/man-pages/man2/ioctl_ns.2.html)
#[cfg(target_os = "linux")]
pub(crate) fn ns_owner(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    /// `NS_GET_USERNS` from `<linux/nsfs.h>`: `_IO(0xb7, 0x1)`.
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor
    // (or -1); `fd` is a valid descriptor for the duration of the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_USERNS as _) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: on success the ioctl returns a fresh descriptor that nothing
    // else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r) })
}

/// `fcntl(fd, F_SETLEASE, F_WRLCK)`, released at once with `F_UNLCK`—
/// whether the kernel grants a write lease on the regular file `fd`, which
/// it does only when no other open file description of the file exists
/// (for reading, writing or executing; in any process, mapping or socket
/// queue). `Ok(false)` when it refuses with `EAGAIN`: the file is open
/// elsewhere.
///
/// Neither std nor rustix wraps `F_SETLEASE` or `F_SETSIG`. While the lease
/// is held (two system calls), another process opening the file waits for
/// its release and the kernel signals the lease holder: `F_SETSIG` makes
/// that signal `SIGURG`, whose default action is to ignore it, instead of
/// `SIGIO`, which would end this process.
///
/// # References
///
/// - [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html), "Leases"
#[cfg(target_os = "linux")]
pub(crate) fn write_lease_granted(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    /// `F_SETSIG` from `<asm-generic/fcntl.h>` (the libc crate does not
    /// export it); 10 on every architecture Rust targets (parisc, which
    /// uses 13, is not one).
    const F_SETSIG: libc::c_int = 10;
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl with F_SETSIG and an integer argument touches no
    // memory; `fd` is a valid descriptor borrowed for the call.
    if unsafe { libc::fcntl(fd, F_SETSIG, libc::SIGURG) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above, F_SETLEASE takes an integer argument.
    if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK) } != 0 {
        let e = std::io::Error::last_os_error();
        // EAGAIN: another open file description of the file exists.
        return match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(false),
            _ => Err(e),
        };
    }
    // SAFETY: as above. Releasing a lease we hold cannot fail but for a
    // bad descriptor; closing the descriptor would release it anyway.
    unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
    Ok(true)
}
