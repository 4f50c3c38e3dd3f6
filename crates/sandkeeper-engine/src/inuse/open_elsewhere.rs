//! The kernel's own answer to "is this file open anywhere else?", for a
//! caller who cannot inspect every process: a write lease
//! ([`open_elsewhere`]).
//!
//! A normal user cannot read other users' (or root's) `/proc/PID/fd`, so a
//! pass over `/proc` cannot tell whether their processes hold a file.
//! Permissions on the path prove nothing either: a descriptor opened
//! before a `chmod`, inherited, or passed over a unix socket needs no path
//! access. But for a regular file the caller owns, the kernel answers
//! directly: `fcntl(F_SETLEASE, F_WRLCK)` is granted only when no other
//! open file description of the file for reading or writing exists (the
//! kernel compares the inode's reader and writer counts) — whoever holds it, however
//! they got it: a descriptor (of any process, opened before a `chmod` or
//! received over `SCM_RIGHTS`), one still in flight in a socket queue, a
//! memory mapping whose descriptor was closed, an executable being run.
//! The lease is released at once.
//!
//! What it does not see: `O_PATH` descriptors (they open nothing),
//! descriptors opened with access mode 3 (`O_RDONLY | O_WRONLY`, for
//! ioctls: they count neither as a reader nor as a writer, and a holder
//! can reopen the file through `/proc/self/fd`), and anything about
//! directories, which cannot be leased — a working
//! directory, root or open directory of a process the caller cannot
//! inspect stays unknown.

use std::ffi::OsStr;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;

use crate::lease::Locks;

/// Whether a regular file is open anywhere but in the caller
/// ([`open_elsewhere`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenElsewhere {
    /// No other open file description of the file exists: the kernel
    /// granted a write lease (released at once).
    No,
    /// Something has it open (for reading, writing or executing, a mapping,
    /// a descriptor in flight): the kernel refused the write lease, or
    /// `/proc/locks` lists a lock or lease on it.
    Yes,
    /// Could not tell, and why: fail closed.
    CannotTell(CannotTell),
}

/// Why [`open_elsewhere`] could not tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CannotTell {
    /// Not a regular file (a directory, FIFO, socket, device or symlink):
    /// only regular files can be leased. It is never opened.
    NotRegular,
    /// The file belongs to another user: only its owner may lease it.
    NotOwner {
        /// The file's owner.
        uid: u32,
    },
    /// The name no longer leads to the inode expected (renamed, replaced).
    Changed,
    /// It could not be opened or leased (unreadable by its owner, a
    /// filesystem without leases, `fs.leases-enable = 0`).
    Failed {
        /// The error number.
        errno: i32,
    },
}

impl fmt::Display for CannotTell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CannotTell::NotRegular => f.write_str("not a regular file (cannot be leased)"),
            CannotTell::NotOwner { uid } => {
                write!(f, "owned by uid {uid} (only its owner may lease it)")
            }
            CannotTell::Changed => f.write_str("replaced while it was looked at"),
            CannotTell::Failed { errno } => write!(
                f,
                "cannot lease it: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

/// Whether the regular file `name` below `dir` (one name, or a relative
/// path resolved beneath `dir` through no symlink and no mount) — the
/// inode `expected`
/// (`(device, inode)` as `stat` gives them) — is open anywhere but here,
/// by the kernel's own answer: a write lease (`fcntl(F_SETLEASE,
/// F_WRLCK)`), granted only when no other open file description of it
/// exists, and released at once.
///
/// Unlike a pass over `/proc`, this needs no access to other processes: it
/// counts the descriptors of processes the caller cannot inspect (root's,
/// other users'), however they got them (before a `chmod`, over
/// `SCM_RIGHTS`, inherited), descriptors in flight in a socket queue,
/// mappings whose descriptor was closed, and running executables. It does
/// not count `O_PATH` descriptors nor those opened with access mode 3
/// (`O_RDONLY | O_WRONLY`, for ioctls), which touch neither the reader nor
/// the writer count the kernel compares, and says nothing about
/// directories.
///
/// How it looks, so that it never blocks or disturbs a holder:
///
/// 1. `name` is opened `O_PATH | O_NOFOLLOW` (which opens nothing) and
///    checked with `fstat` to be a regular file, the inode `expected`,
///    owned by the caller's effective uid (or the caller is root);
/// 2. a file `locks` (a snapshot of `/proc/locks`) lists a lock or lease
///    on is open: answered [`OpenElsewhere::Yes`] without opening it (an
///    open would break the holder's lease and signal it);
/// 3. the `O_PATH` descriptor is reopened read-only through
///    `/proc/self/fd/N` — the same inode, no second lookup —
///    `O_NONBLOCK | O_NOATIME | O_NOCTTY`, and checked again;
/// 4. the lease is asked for and released at once; its break signal, should
///    another process open the file in between, is `SIGURG`, ignored by
///    default (that opener waits for two system calls).
///
/// # Platform behavior
///
/// Linux only (leases, `O_PATH`, `/proc/self/fd`); elsewhere always
/// [`CannotTell::Failed`] with `ENOSYS`.
///
/// ```
/// use sandkeeper_engine::inuse::{open_elsewhere, OpenElsewhere};
/// use std::os::unix::fs::MetadataExt;
///
/// let sandbox = sandkeeper_engine::Sandbox::new()?;
/// std::fs::write(sandbox.path().join("data"), b"x")?;
/// let dir = std::fs::File::open(sandbox.path())?;
/// let meta = std::fs::metadata(sandbox.path().join("data"))?;
/// let locks = sandkeeper_engine::lease::Locks::read()?;
/// let answer = open_elsewhere(&dir, "data".as_ref(), (meta.dev(), meta.ino()), &locks);
/// assert_eq!(answer, OpenElsewhere::No);
///
/// let held = std::fs::File::open(sandbox.path().join("data"))?;
/// let answer = open_elsewhere(&dir, "data".as_ref(), (meta.dev(), meta.ino()), &locks);
/// assert_eq!(answer, OpenElsewhere::Yes);
/// # drop(held);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn open_elsewhere(
    dir: impl AsFd,
    name: &OsStr,
    expected: (u64, u64),
    locks: &Locks,
) -> OpenElsewhere {
    match look(dir.as_fd(), name, expected, locks) {
        Ok(answer) => answer,
        Err(errno) => OpenElsewhere::CannotTell(CannotTell::Failed {
            errno: errno.raw_os_error(),
        }),
    }
}

#[cfg(target_os = "linux")]
fn look(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    expected: (u64, u64),
    locks: &Locks,
) -> Result<OpenElsewhere, Errno> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // Below `dir`, through no link and no mount: a path with several
    // components (`entry/sub/file`) cannot lead anywhere else.
    let resolve = ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV;
    let path = match rustix::fs::openat2(dir, name, flags, Mode::empty(), resolve) {
        // Before Linux 5.6: one name needs no resolution.
        Err(Errno::NOSYS) if !name.as_bytes().contains(&b'/') => {
            rustix::fs::openat(dir, name, flags, Mode::empty())?
        }
        other => other?,
    };
    let euid = rustix::process::geteuid();
    if let Some(answer) = judge(path.as_fd(), expected, euid.as_raw())? {
        return Ok(answer);
    }
    if locks.holders(expected.0, expected.1).is_some() {
        return Ok(OpenElsewhere::Yes);
    }
    let magic = format!("/proc/self/fd/{}", path.as_raw_fd());
    let mut read = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if !euid.is_root() {
        // Allowed to the owner only, which `judge` checked.
        read |= OFlags::NOATIME;
    }
    let file = rustix::fs::openat(CWD, magic.as_str(), read, Mode::empty())?;
    if let Some(answer) = judge(file.as_fd(), expected, euid.as_raw())? {
        return Ok(answer);
    }
    match crate::sys::write_lease_granted(file.as_fd()) {
        Ok(true) => Ok(OpenElsewhere::No),
        Ok(false) => Ok(OpenElsewhere::Yes),
        Err(e) => Err(Errno::from_io_error(&e).unwrap_or(Errno::IO)),
    }
}

/// `None` when `fd` is the regular file `expected`, owned by `euid` (or
/// `euid` is root); else why not.
#[cfg(target_os = "linux")]
fn judge(
    fd: BorrowedFd<'_>,
    expected: (u64, u64),
    euid: u32,
) -> Result<Option<OpenElsewhere>, Errno> {
    let st = rustix::fs::fstat(fd)?;
    #[allow(clippy::useless_conversion)] // the types vary by target
    let key = (u64::from(st.st_dev), u64::from(st.st_ino));
    let cannot = |why| Ok(Some(OpenElsewhere::CannotTell(why)));
    if key != expected {
        return cannot(CannotTell::Changed);
    }
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return cannot(CannotTell::NotRegular);
    }
    if st.st_uid != euid && euid != 0 {
        return cannot(CannotTell::NotOwner { uid: st.st_uid });
    }
    Ok(None)
}

#[cfg(not(target_os = "linux"))]
fn look(
    _dir: BorrowedFd<'_>,
    _name: &OsStr,
    _expected: (u64, u64),
    _locks: &Locks,
) -> Result<OpenElsewhere, Errno> {
    Err(Errno::NOSYS)
}
