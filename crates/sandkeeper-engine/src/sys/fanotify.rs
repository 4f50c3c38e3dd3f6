//! fanotify and file handles: the system calls that `origin`'s listener
//! needs and that neither std nor rustix wraps.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK |
/// FAN_REPORT_DFID_NAME [| FAN_REPORT_FID | FAN_REPORT_TARGET_FID]
/// [| FAN_REPORT_PIDFD], O_RDONLY | O_CLOEXEC)`—a notification group that
/// reports a directory's file handle and a name per event (no open
/// descriptor of the object), with `target` the new entry's own handle too
/// (Linux 5.17), and with `pidfd` a pidfd of the process that caused it
/// (Linux 5.15).
///
/// Needs `CAP_SYS_ADMIN` (`EPERM` without). `EINVAL` on a kernel that
/// lacks a flag (`FAN_REPORT_PIDFD` before 5.15, `FAN_REPORT_DFID_NAME`
/// before 5.9).
///
/// # References
///
/// - [fanotify_init(2)](https://man7.org/linux/man-pages/man2/fanotify_init.2.html)
pub(crate) fn fanotify_init(target: bool, pidfd: bool) -> io::Result<OwnedFd> {
    let mut flags =
        libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK | libc::FAN_REPORT_DFID_NAME;
    if target {
        flags |= libc::FAN_REPORT_FID | libc::FAN_REPORT_TARGET_FID;
    }
    if pidfd {
        flags |= libc::FAN_REPORT_PIDFD;
    }
    let event_flags = (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint;
    // SAFETY: fanotify_init takes two integers and touches no memory of
    // the caller.
    let fd = unsafe { libc::fanotify_init(flags, event_flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success fanotify_init returns a fresh descriptor that
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fanotify_mark(group, FAN_MARK_ADD, FAN_CREATE | FAN_ONDIR, dir,
/// NULL)`—events for every name created in the directory `dir` itself
/// (its direct children, directories included; not deeper). Not
/// `FAN_MOVED_TO`: what is moved in was made by someone, somewhere else.
///
/// # References
///
/// - [fanotify_mark(2)](https://man7.org/linux/man-pages/man2/fanotify_mark.2.html)
pub(crate) fn mark_creates(group: BorrowedFd<'_>, dir: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a NULL pathname makes the kernel mark `dir` itself; both
    // descriptors are valid for the call.
    let r = unsafe {
        libc::fanotify_mark(
            group.as_raw_fd(),
            libc::FAN_MARK_ADD,
            libc::FAN_CREATE | libc::FAN_ONDIR,
            dir.as_raw_fd(),
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `name_to_handle_at(fd, "", &handle, &mount_id, AT_EMPTY_PATH)`—the file
/// handle of the open file `fd`: its type and its bytes, as fanotify
/// reports them in an event's fid record.
///
/// # References
///
/// - [name_to_handle_at(2)](https://man7.org/linux/man-pages/man2/name_to_handle_at.2.html)
pub(crate) fn file_handle(fd: BorrowedFd<'_>) -> io::Result<(i32, Vec<u8>)> {
    /// `struct file_handle` with room for the largest handle.
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: i32,
        f_handle: [u8; libc::MAX_HANDLE_SZ as usize],
    }
    let mut handle = Handle {
        bytes: libc::MAX_HANDLE_SZ as u32,
        kind: 0,
        f_handle: [0; libc::MAX_HANDLE_SZ as usize],
    };
    let mut mount_id: libc::c_int = 0;
    /// `AT_HANDLE_FID` (Linux 6.5): a handle that identifies only, as
    /// fanotify reports for a filesystem that cannot export handles (ramfs,
    /// some FUSE ones): asked for only where the plain call is refused.
    const AT_HANDLE_FID: libc::c_int = 0x200;
    for flags in [libc::AT_EMPTY_PATH, libc::AT_EMPTY_PATH | AT_HANDLE_FID] {
        handle.bytes = libc::MAX_HANDLE_SZ as u32;
        // SAFETY: `handle` is laid out as `struct file_handle` followed by
        // MAX_HANDLE_SZ bytes, and `handle_bytes` says so; the empty C
        // string with AT_EMPTY_PATH names `fd` itself; both pointers
        // outlive the call.
        let r = unsafe {
            libc::name_to_handle_at(
                fd.as_raw_fd(),
                c"".as_ptr(),
                (&raw mut handle).cast::<libc::file_handle>(),
                &raw mut mount_id,
                flags,
            )
        };
        if r == 0 {
            break;
        }
        let err = io::Error::last_os_error();
        // EOPNOTSUPP: the filesystem exports no handles; try an
        // identifying one (EINVAL before 6.5: the flag is unknown).
        if err.raw_os_error() != Some(libc::EOPNOTSUPP) || flags & AT_HANDLE_FID != 0 {
            return Err(err);
        }
    }
    let len = (handle.bytes as usize).min(handle.f_handle.len());
    Ok((handle.kind, handle.f_handle[..len].to_vec()))
}

/// Takes ownership of a descriptor that the kernel installed in this
/// process's table for one fanotify event (its pidfd), so that it is
/// closed.
///
/// Returns `None` for a negative value (`FAN_NOPIDFD`, `FAN_EPIDFD`).
pub(crate) fn own_event_fd(raw: i32) -> Option<OwnedFd> {
    if raw < 0 {
        return None;
    }
    // SAFETY: the kernel installed this descriptor in our table while
    // copying the event out (fanotify(7), "FAN_EVENT_INFO_TYPE_PIDFD");
    // the event buffer is parsed once, so nothing else takes ownership.
    Some(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// `fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK |
/// FAN_REPORT_FID, O_RDONLY | O_CLOEXEC)`—a notification group whose
/// events carry the object's file handle (for a name created, removed or
/// moved: its directory's), never an open descriptor of it (opening what
/// others open could start a device's driver or wait on a FIFO). Its queue
/// keeps the kernel's bound (`max_queued_events`): any user can make
/// events faster than they are read, and an unbounded queue would be
/// memory charged to the listener; past the bound the kernel reports an
/// overflow instead.
///
/// Needs `CAP_SYS_ADMIN` (`EPERM` without); `EINVAL` before Linux 5.1.
///
/// # References
///
/// - [fanotify_init(2)](https://man7.org/linux/man-pages/man2/fanotify_init.2.html)
pub(crate) fn fanotify_init_fid() -> io::Result<OwnedFd> {
    let flags =
        libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK | libc::FAN_REPORT_FID;
    let event_flags = (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint;
    // SAFETY: fanotify_init takes two integers and touches no memory of
    // the caller.
    let fd = unsafe { libc::fanotify_init(flags, event_flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success fanotify_init returns a fresh descriptor that
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, mask, dir,
/// NULL)`—`mask`'s events for every object of the filesystem `dir` is on,
/// through any of its mounts.
///
/// # References
///
/// - [fanotify_mark(2)](https://man7.org/linux/man-pages/man2/fanotify_mark.2.html)
pub(crate) fn mark_filesystem(
    group: BorrowedFd<'_>,
    dir: BorrowedFd<'_>,
    mask: u64,
) -> io::Result<()> {
    // SAFETY: a NULL pathname makes the kernel mark the filesystem of
    // `dir` itself; both descriptors are valid for the call.
    let r = unsafe {
        libc::fanotify_mark(
            group.as_raw_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            mask,
            dir.as_raw_fd(),
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `open_by_handle_at(mount, handle, O_PATH | O_CLOEXEC)`—the object a file
/// handle (`kind` and its bytes, as an fanotify fid record carries them)
/// names on the filesystem of `mount`, opened `O_PATH`: nothing is asked
/// of it but its identity, no device driver is started, no FIFO waited on.
/// `ESTALE` when the object no longer exists.
///
/// Needs `CAP_DAC_READ_SEARCH`.
///
/// # References
///
/// - [open_by_handle_at(2)](https://man7.org/linux/man-pages/man2/open_by_handle_at.2.html)
pub(crate) fn open_by_handle(
    mount: BorrowedFd<'_>,
    kind: i32,
    bytes: &[u8],
) -> io::Result<OwnedFd> {
    /// `struct file_handle` with room for the largest handle.
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: i32,
        f_handle: [u8; libc::MAX_HANDLE_SZ as usize],
    }
    if bytes.len() > libc::MAX_HANDLE_SZ as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut handle = Handle {
        bytes: bytes.len() as u32,
        kind,
        f_handle: [0; libc::MAX_HANDLE_SZ as usize],
    };
    handle.f_handle[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `handle` is laid out as `struct file_handle` followed by
    // MAX_HANDLE_SZ bytes, `handle_bytes` says how many are used; the
    // kernel only reads it; `mount` is valid for the call.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            (&raw mut handle).cast::<libc::file_handle>(),
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success open_by_handle_at returns a fresh descriptor that
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
