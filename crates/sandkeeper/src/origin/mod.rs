//! Who made each top-level entry of a root: the creator's pid, executable,
//! argv, cwd, uid, cgroup and parent, recorded when the entry appeared.
//!
//! - [`Tracker`] watches one root directory with fanotify (`FAN_CREATE |
//!   FAN_MOVED_TO | FAN_ONDIR`, reported with the directory's file handle
//!   and the name): for each new direct child it reads the creating
//!   process from `/proc` and records it on the entry ([`write()`]). `watch`
//!   runs one per root whose config sets `track_origins = true`.
//! - The record is the extended attribute [`XATTR`] (`trusted.*`: only a
//!   process with `CAP_SYS_ADMIN` can write it, so users cannot forge one;
//!   it goes with the entry). It is written once (`XATTR_CREATE`): a
//!   restarted watcher, or a rename inside the root, never replaces it.
//! - [`read`] gives an entry's origin for the renderers: `scan`, `explain`
//!   and `ls` show it, `--json` carries it (`docs/scan-json.md`).
//! - `sandkeeper run` records its command as the creator of its own
//!   directory ([`record_run`]).
//!
//! ```
//! use sandkeeper::origin;
//!
//! let root = sandkeeper::Sandbox::new()?;
//! std::fs::create_dir(root.path().join("app-1"))?;
//! let dir = sandkeeper::root::Root::open(root.path())?;
//! // Nothing recorded it: no origin (and a `user.*` attribute never is one).
//! assert!(origin::read(dir.fd(), "app-1".as_ref()).is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Safety & security
//!
//! - Every field but the inode and the time is text a user's process
//!   chose: bounded ([`MAX_ARGS`], [`MAX_FIELD`], [`MAX_RECORD`]) when
//!   written and again when read, to be escaped by every renderer.
//!   Origins never change what is reaped: no decision reads them.
//! - A record counts only where it was written: the `trusted.*` name
//!   (`user.*` attributes, which any owner can set, are never read), and
//!   the entry's inode must be the one recorded (a record copied onto
//!   another entry by a privileged tool is ignored).
//! - Entries are reached relative to the root's descriptor with
//!   `O_PATH | O_NOFOLLOW` and `RESOLVE_NO_XDEV` (never opened for
//!   reading, so a FIFO or device is not opened; a symlink is not followed
//!   and gets no record; a mount point, possibly a dead FUSE mount, is not
//!   entered and gets none either).
//! - The tracker writes only on what the creator made: a file with more
//!   than one link (a hard link made into the root) gets no record, so
//!   root never writes on an inode someone else made elsewhere.
//! - The creator is read after the event and then checked alive through
//!   its pidfd: a process that exited before it could be read — whose pid
//!   may already be another's — is [`Creator::Exited`], never a guess.
//!
//! # Platform behavior
//!
//! Linux only. Tracking needs `CAP_SYS_ADMIN` (fanotify, `trusted.*`);
//! reading needs it too (unprivileged callers see no origins). Linux 5.15
//! gives each event a pidfd; 5.17 the new entry's own file handle, so a
//! name replaced before the event is read is not given the first entry's
//! creator. See `docs/origins.md` for the limits.

mod capture;
mod listen;
mod record;
mod set;

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{fstat, FileType, Mode, OFlags, XattrFlags};
use rustix::io::Errno;

pub use listen::{Tracker, TrackerStats};
pub use record::{Creator, Origin, Process, Recorder, MAX_ARGS, MAX_FIELD, MAX_RECORD};
pub use set::{TrackerChange, Trackers};

/// The extended attribute that holds an entry's origin record.
pub const XATTR: &str = "trusted.sandkeeper.origin";

/// Whether `name` is one plain component (not empty, `.`, `..`, no `/`).
fn plain(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/') && !b.contains(&0)
}

/// The entry `name` of `root`, as an `O_PATH` descriptor, not followed,
/// and its inode: `openat2` with `RESOLVE_NO_XDEV`, so an entry that is a
/// mount point is `EXDEV` without asking the mounted filesystem anything
/// (a dead FUSE or network mount cannot block a scan that shows origins).
/// A symlink is `EOPNOTSUPP` (it cannot carry a record of its own here);
/// without `openat2` (before Linux 5.6) every entry is `ENOSYS`.
fn entry(root: BorrowedFd<'_>, name: &OsStr) -> Result<(OwnedFd, u64), Errno> {
    use rustix::fs::ResolveFlags;
    if !plain(name) {
        return Err(Errno::INVAL);
    }
    let fd = rustix::fs::openat2(
        root,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_XDEV | ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
    )?;
    let st = fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        return Err(Errno::OPNOTSUPP);
    }
    Ok((fd, st.st_ino))
}

/// `/proc/self/fd/N` of an `O_PATH` descriptor: the xattr calls follow
/// that magic link to the inode itself (the `f*xattr` calls refuse
/// `O_PATH` descriptors, and opening the entry for reading could open a
/// FIFO or a device).
fn fd_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// The origin recorded on the entry `name` of the root open as `root`,
/// if there is one and it is valid: the [`XATTR`] attribute, decoded and
/// bounded, recorded for this very inode.
///
/// `None` when nothing was recorded, the caller may not read `trusted.*`
/// attributes (not root), the filesystem has none, `name` is a symlink or
/// is gone, or the value is not a record. Never reads `user.*`.
pub fn read(root: BorrowedFd<'_>, name: &OsStr) -> Option<Origin> {
    let (fd, ino) = entry(root, name).ok()?;
    let mut buf = vec![0u8; MAX_RECORD];
    let n = rustix::fs::getxattr(fd_path(fd.as_fd()), XATTR, &mut buf[..]).ok()?;
    let origin = Origin::decode(&buf[..n])?;
    (origin.ino == ino).then_some(origin)
}

/// What [`write()`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The record is on the entry now.
    Recorded,
    /// The entry had a record already: it is kept, not replaced.
    AlreadyRecorded,
}

/// Records `creator` as the origin of the entry `name` of `root`, unless
/// it has one already (`XATTR_CREATE`).
///
/// # Errors
///
/// The errno: `ENOENT` (gone), `EOPNOTSUPP` (a symlink, or a filesystem
/// without `trusted.*` attributes), `EPERM` (not root), `EINVAL` (not
/// one plain name).
pub fn write(
    root: BorrowedFd<'_>,
    name: &OsStr,
    by: Recorder,
    creator: Creator,
) -> Result<Written, Errno> {
    let (fd, ino) = entry(root, name)?;
    write_fd(fd.as_fd(), ino, by, creator)
}

fn write_fd(
    fd: BorrowedFd<'_>,
    ino: u64,
    by: Recorder,
    creator: Creator,
) -> Result<Written, Errno> {
    let origin = Origin {
        v: 1,
        ino,
        recorded_ms: now_ms(),
        by,
        creator,
    };
    match rustix::fs::setxattr(fd_path(fd), XATTR, &origin.encode(), XattrFlags::CREATE) {
        Ok(()) => Ok(Written::Recorded),
        Err(Errno::EXIST) => Ok(Written::AlreadyRecorded),
        Err(e) => Err(e),
    }
}

/// Records this process, running `command`, as the creator of the
/// directory open as `dir` (what `sandkeeper run` does for its own
/// directory). Best effort: `false` when it could not (not root, no
/// `trusted.*` attributes, recorded already).
pub fn record_run(dir: BorrowedFd<'_>, command: &[impl AsRef<OsStr>]) -> bool {
    let Ok(st) = fstat(dir) else { return false };
    let argv = command
        .iter()
        .map(|a| String::from_utf8_lossy(a.as_ref().as_bytes()).into_owned())
        .collect();
    let creator = Creator::Process(capture::this_process(argv));
    let origin = Origin {
        v: 1,
        ino: st.st_ino,
        recorded_ms: now_ms(),
        by: Recorder::Run,
        creator,
    };
    rustix::fs::fsetxattr(dir, XATTR, &origin.encode(), XattrFlags::CREATE).is_ok()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
