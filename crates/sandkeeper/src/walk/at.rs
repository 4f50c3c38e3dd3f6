//! The descriptor-relative system calls the walker is made of.
//!
//! Every call takes an open directory and one name; none resolves a path
//! from the root or the working directory, none follows a symlink, and only
//! directories are ever opened (a FIFO, device or socket is only `statx`ed).

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, StatxFlags};
use rustix::io::Errno;

/// Flags for opening a directory of the tree: never a symlink, never a
/// controlling terminal, never blocking (`O_DIRECTORY` already refuses a
/// FIFO before opening it; `O_NONBLOCK` is a second fence).
const DIR_OPEN: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY);

/// What the walker asks `statx` for: type, identity, link count, sizes,
/// mtime, owner (for `O_NOATIME`) and the mount id. Nothing else.
const MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::INO)
    .union(StatxFlags::NLINK)
    .union(StatxFlags::UID)
    .union(StatxFlags::SIZE)
    .union(StatxFlags::BLOCKS)
    .union(StatxFlags::MTIME)
    .union(StatxFlags::MNT_ID);

/// `statx` flags: never follow the last component, never trigger an
/// automount, never make a network filesystem sync attributes.
const STAT_FLAGS: AtFlags = AtFlags::SYMLINK_NOFOLLOW
    .union(AtFlags::NO_AUTOMOUNT)
    .union(AtFlags::STATX_DONT_SYNC);

/// Set once `statx` turned out to be missing (Linux < 4.11, old seccomp
/// profiles): later calls go straight to `fstatat`.
static NO_STATX: AtomicBool = AtomicBool::new(false);

/// Set once `openat2` turned out to be missing (Linux < 5.6, some seccomp
/// profiles): later opens use `openat` and check the mount afterwards.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// What the walker knows about an inode.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meta {
    pub(super) kind: FileType,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) nlink: u64,
    pub(super) uid: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub(super) perm: u32,
    /// `st_size`.
    pub(super) size: u64,
    /// `st_blocks × 512`.
    pub(super) disk: u64,
    /// Milliseconds since the Unix epoch.
    pub(super) mtime_ms: i64,
    /// The mount id, where the kernel reports it (Linux 5.8+).
    pub(super) mnt: Option<u64>,
}

/// The mount a walk is confined to: one device and, where the kernel
/// reports it, one mount id (a bind mount of the same filesystem shares the
/// device but not the mount id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fence {
    pub(super) dev: u64,
    mnt: Option<u64>,
}

impl Fence {
    /// The mount `meta` lives on.
    pub(super) fn of(meta: &Meta) -> Fence {
        Fence {
            dev: meta.dev,
            mnt: meta.mnt,
        }
    }

    /// Whether `meta` is on this mount (fails closed when only one side
    /// knows its mount id).
    pub(super) fn admits(&self, meta: &Meta) -> bool {
        self.dev == meta.dev && self.mnt == meta.mnt
    }
}

/// `statx(dirfd, name, AT_SYMLINK_NOFOLLOW|AT_NO_AUTOMOUNT, mask)`—what the
/// walker needs to know about a name, without following or opening it.
///
/// Falls back to `fstatat(…, AT_SYMLINK_NOFOLLOW)` where `statx` is missing;
/// then no mount id is known.
///
/// # References
///
/// - [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html)
pub(super) fn stat(dirfd: BorrowedFd<'_>, name: &CStr) -> Result<Meta, Errno> {
    if !NO_STATX.load(Ordering::Relaxed) {
        match rustix::fs::statx(dirfd, name, STAT_FLAGS, MASK) {
            Ok(stx) => return Ok(from_statx(&stx)),
            // ENOSYS: no statx; rustix reports old seccomp profiles' EPERM
            // for it the same way.
            Err(Errno::NOSYS) => NO_STATX.store(true, Ordering::Relaxed),
            Err(e) => return Err(e),
        }
    }
    let st = rustix::fs::statat(dirfd, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(from_stat(&st))
}

/// `statx(fd, "", AT_EMPTY_PATH, mask)`—the same facts about an open file.
pub(super) fn fstat(fd: BorrowedFd<'_>) -> Result<Meta, Errno> {
    if !NO_STATX.load(Ordering::Relaxed) {
        match rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, MASK) {
            Ok(stx) => return Ok(from_statx(&stx)),
            Err(Errno::NOSYS) => NO_STATX.store(true, Ordering::Relaxed),
            Err(e) => return Err(e),
        }
    }
    Ok(from_stat(&rustix::fs::fstat(fd)?))
}

fn from_statx(stx: &rustix::fs::Statx) -> Meta {
    let mnt = (stx.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(stx.stx_mnt_id);
    Meta {
        kind: FileType::from_raw_mode(u32::from(stx.stx_mode)),
        dev: rustix::fs::makedev(stx.stx_dev_major, stx.stx_dev_minor),
        ino: stx.stx_ino,
        nlink: u64::from(stx.stx_nlink),
        uid: stx.stx_uid,
        perm: u32::from(stx.stx_mode) & 0o7777,
        size: stx.stx_size,
        disk: stx.stx_blocks.saturating_mul(512),
        mtime_ms: stx
            .stx_mtime
            .tv_sec
            .saturating_mul(1000)
            .saturating_add(i64::from(stx.stx_mtime.tv_nsec / 1_000_000)),
        mnt,
    }
}

#[allow(clippy::unnecessary_cast)] // `Stat`'s field types vary by target
fn from_stat(st: &rustix::fs::Stat) -> Meta {
    Meta {
        kind: FileType::from_raw_mode(st.st_mode as u32),
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        nlink: st.st_nlink as u64,
        uid: st.st_uid as u32,
        perm: st.st_mode as u32 & 0o7777,
        size: st.st_size as u64,
        disk: (st.st_blocks as u64).saturating_mul(512),
        mtime_ms: (st.st_mtime as i64)
            .saturating_mul(1000)
            .saturating_add(st.st_mtime_nsec as i64 / 1_000_000),
        mnt: None,
    }
}

/// What opening a subdirectory found.
pub(super) enum Opened {
    /// A directory on the walk's mount, open for reading.
    Dir(OwnedFd),
    /// A mount point appeared since the name was `statx`ed: not entered.
    Mount,
}

/// Whether `O_NOATIME` is worth trying on a directory owned by `owner`:
/// the kernel allows it to the owner and to holders of `CAP_FOWNER`.
fn noatime(owner: u32, euid: u32) -> OFlags {
    if euid == 0 || owner == euid {
        OFlags::NOATIME
    } else {
        OFlags::empty()
    }
}

/// `openat2(dirfd, name, O_DIRECTORY|O_NOFOLLOW|O_NOATIME, RESOLVE_NO_XDEV|…)`
/// —opens a subdirectory of the walk, never crossing into another mount.
///
/// A mount point is refused by the kernel before it is opened
/// (`RESOLVE_NO_XDEV` gives `EXDEV`); where `openat2` is missing, `openat`
/// is used and the device and mount id of what it opened decide. A symlink
/// fails with `ELOOP`, anything else that is not a directory with
/// `ENOTDIR`. `O_NOATIME` is dropped when the kernel refuses it (`EPERM`:
/// not the owner and no `CAP_FOWNER`).
///
/// # References
///
/// - [openat2(2)](https://man7.org/linux/man-pages/man2/openat2.2.html)
pub(super) fn open_dir(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    owner: u32,
    euid: u32,
    fence: &Fence,
) -> Result<Opened, Errno> {
    let flags = DIR_OPEN | noatime(owner, euid);
    let result = match open_no_xdev(dirfd, name, flags) {
        Err(Errno::PERM) if flags.contains(OFlags::NOATIME) => open_no_xdev(dirfd, name, DIR_OPEN),
        other => other,
    };
    match result {
        Ok((fd, checked)) => {
            if !checked && !fence.admits(&fstat(fd.as_fd())?) {
                return Ok(Opened::Mount);
            }
            Ok(Opened::Dir(fd))
        }
        Err(Errno::XDEV) => Ok(Opened::Mount),
        Err(e) => Err(e),
    }
}

/// Opens with `openat2(RESOLVE_NO_XDEV)` where available; the flag says
/// whether the kernel checked the mount.
fn open_no_xdev(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    flags: OFlags,
) -> Result<(OwnedFd, bool), Errno> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let resolve = ResolveFlags::NO_XDEV
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::BENEATH;
        match rustix::fs::openat2(dirfd, name, flags, Mode::empty(), resolve) {
            Ok(fd) => return Ok((fd, true)),
            // ENOSYS: kernel before 5.6; EPERM without O_NOATIME: a seccomp
            // filter that rejects unknown syscalls this way. Both mean "no
            // openat2". (EPERM with O_NOATIME is the caller's to handle.)
            Err(Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            Err(Errno::PERM) if !flags.contains(OFlags::NOATIME) => {
                NO_OPENAT2.store(true, Ordering::Relaxed)
            }
            Err(e) => return Err(e),
        }
    }
    rustix::fs::openat(dirfd, name, flags, Mode::empty()).map(|fd| (fd, false))
}

/// `openat(dirfd, name, O_DIRECTORY|O_NOFOLLOW|O_NOATIME)` checked against
/// `want`—opens the entry a walk starts at (which may itself be a mount
/// point, so no `RESOLVE_NO_XDEV` here).
///
/// Fails with `ESTALE` when the name is no longer the inode `want` describes
/// (replaced between the `statx` and the open).
pub(super) fn open_entry(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    want: &Meta,
    euid: u32,
) -> Result<OwnedFd, Errno> {
    let flags = DIR_OPEN | noatime(want.uid, euid);
    let fd = match rustix::fs::openat(dirfd, name, flags, Mode::empty()) {
        Err(Errno::PERM) if flags.contains(OFlags::NOATIME) => {
            rustix::fs::openat(dirfd, name, DIR_OPEN, Mode::empty())?
        }
        other => other?,
    };
    let got = fstat(fd.as_fd())?;
    if got.dev != want.dev || got.ino != want.ino {
        return Err(Errno::STALE);
    }
    Ok(fd)
}

/// `openat(fd, "..")` checked against the identity it must have—reopens
/// the parent of a directory after its descriptor was closed to bound the
/// number of open descriptors.
///
/// Fails with `ESTALE` when `..` is no longer that directory (the child was
/// moved elsewhere while the walk was inside it).
pub(super) fn reopen_parent(fd: BorrowedFd<'_>, dev: u64, ino: u64) -> Result<OwnedFd, Errno> {
    let parent = rustix::fs::openat(fd, c"..", DIR_OPEN, Mode::empty())?;
    let got = fstat(parent.as_fd())?;
    if got.dev != dev || got.ino != ino {
        return Err(Errno::STALE);
    }
    Ok(parent)
}
