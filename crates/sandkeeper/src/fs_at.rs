//! The descriptor-relative system calls the lease probe ([`crate::lease`])
//! and the engine's size walker and remover (`sandkeeper-engine`'s `walk`
//! and `remove`) are made of. Here because the probe needs them and the
//! engine depends on this crate, never the other way; not part of this
//! crate's API.
//!
//! Every call takes an open directory and one name; none resolves a path
//! from the root or the working directory, none follows a symlink, and only
//! directories are ever opened (a FIFO, device or socket is only `statx`ed
//! or unlinked by name).
//!
//! Where the walker and the remover need different things, the difference
//! is a parameter the caller names, never a second copy of the call:
//!
//! - [`NoStatx`]: what a kernel without `statx` gets (the walker measures
//!   with `fstatat`; the remover, which compares mount ids, refuses);
//! - [`Atime`]: whether `O_NOATIME` is asked for (the walker, which only
//!   reads, leaves access times alone where the kernel lets it);
//! - [`open_dir`] and [`open_dir_stat`]: the same fenced open; the first
//!   leaves the mount check to the kernel where `openat2` made it, the
//!   second always checks the opened directory and returns what it is;
//!   [`open_dir_unmounted`] (the lease's probe of a top-level entry, which
//!   may be a dead mount) checks the name *before* opening it where
//!   `openat2` is missing, so a mount point is never opened.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags, StatxFlags, CWD};
use rustix::io::Errno;

/// Flags for opening a directory of a tree: never a symlink, never a
/// controlling terminal, never blocking (`O_DIRECTORY` already refuses a
/// FIFO before opening it; `O_NONBLOCK` is a second fence).
#[doc(hidden)]
pub const DIR_OPEN: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY);

/// What is asked of `statx`: type and mode, identity, link count, owner
/// (for `O_NOATIME`), sizes, mtime and the mount id. Nothing else.
const MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::MODE)
    .union(StatxFlags::INO)
    .union(StatxFlags::NLINK)
    .union(StatxFlags::UID)
    .union(StatxFlags::SIZE)
    .union(StatxFlags::BLOCKS)
    .union(StatxFlags::MTIME)
    .union(StatxFlags::MNT_ID);

/// `statx` flags for a name: never follow the last component, never
/// trigger an automount, never make a network filesystem sync attributes.
const NAME_FLAGS: AtFlags = AtFlags::SYMLINK_NOFOLLOW
    .union(AtFlags::NO_AUTOMOUNT)
    .union(AtFlags::STATX_DONT_SYNC);

/// Set once `statx` turned out to be missing (Linux < 4.11, old seccomp
/// profiles): later calls go straight to the [`NoStatx`] rule.
static NO_STATX: AtomicBool = AtomicBool::new(false);

/// Set once `openat2` turned out to be missing (Linux < 5.6, some seccomp
/// profiles): later opens use `openat` and check the mount afterwards.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// A file's identity: device and inode, as `stat` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub struct FileId {
    #[doc(hidden)]
    pub dev: u64,
    #[doc(hidden)]
    pub ino: u64,
}

/// What `statx` says about an inode.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct Meta {
    #[doc(hidden)]
    pub kind: FileType,
    #[doc(hidden)]
    pub id: FileId,
    #[doc(hidden)]
    pub nlink: u64,
    #[doc(hidden)]
    pub uid: u32,
    /// The permission bits (`st_mode & 0o7777`).
    #[doc(hidden)]
    pub perm: u32,
    /// `st_size`.
    #[doc(hidden)]
    pub size: u64,
    /// Disk usage in bytes (`st_blocks × 512`).
    #[doc(hidden)]
    pub disk: u64,
    /// Milliseconds since the Unix epoch.
    #[doc(hidden)]
    pub mtime_ms: i64,
    /// The mount id, where the kernel reports it (Linux 5.8+).
    #[doc(hidden)]
    pub mnt: Option<u64>,
}

impl Meta {
    /// Whether the inode is a directory.
    #[doc(hidden)]
    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }
}

/// What a call does on a kernel without `statx` (Linux < 4.11, or a
/// seccomp profile that refuses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum NoStatx {
    /// Fail with `ENOSYS`. The remover's confinement compares mount ids,
    /// which only `statx` reports, so it does not run without it.
    Fail,
    /// Fall back to `fstatat`/`fstat`; then no mount id is known, and the
    /// fence compares devices only. The size walker, which only measures.
    Fstatat,
}

/// `statx(dirfd, name, AT_SYMLINK_NOFOLLOW|AT_NO_AUTOMOUNT|AT_STATX_DONT_SYNC,
/// …)`—what there is to know about a name, without following it, opening
/// it or asking a network filesystem's server.
///
/// # References
///
/// - [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html)
#[doc(hidden)]
pub fn stat(dirfd: BorrowedFd<'_>, name: &CStr, no_statx: NoStatx) -> Result<Meta, Errno> {
    if !NO_STATX.load(Ordering::Relaxed) {
        match rustix::fs::statx(dirfd, name, NAME_FLAGS, MASK) {
            Ok(stx) => return Ok(from_statx(&stx)),
            // ENOSYS: no statx; rustix reports old seccomp profiles' EPERM
            // for it the same way.
            Err(Errno::NOSYS) => NO_STATX.store(true, Ordering::Relaxed),
            Err(e) => return Err(e),
        }
    }
    match no_statx {
        NoStatx::Fail => Err(Errno::NOSYS),
        NoStatx::Fstatat => Ok(from_stat(&rustix::fs::statat(
            dirfd,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?)),
    }
}

/// `statx(fd, "", AT_EMPTY_PATH, …)`—the same facts about an open file.
#[doc(hidden)]
pub fn fstat(fd: BorrowedFd<'_>, no_statx: NoStatx) -> Result<Meta, Errno> {
    if !NO_STATX.load(Ordering::Relaxed) {
        match rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, MASK) {
            Ok(stx) => return Ok(from_statx(&stx)),
            Err(Errno::NOSYS) => NO_STATX.store(true, Ordering::Relaxed),
            Err(e) => return Err(e),
        }
    }
    match no_statx {
        NoStatx::Fail => Err(Errno::NOSYS),
        NoStatx::Fstatat => Ok(from_stat(&rustix::fs::fstat(fd)?)),
    }
}

/// [`fstat`] of what must be a directory (else `ENOTDIR`).
#[doc(hidden)]
pub fn fstat_dir(fd: BorrowedFd<'_>, no_statx: NoStatx) -> Result<Meta, Errno> {
    let meta = fstat(fd, no_statx)?;
    if !meta.is_dir() {
        return Err(Errno::NOTDIR);
    }
    Ok(meta)
}

/// The one conversion of a `statx` answer.
fn from_statx(stx: &rustix::fs::Statx) -> Meta {
    let mnt = (stx.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(stx.stx_mnt_id);
    Meta {
        kind: FileType::from_raw_mode(u32::from(stx.stx_mode)),
        id: FileId {
            dev: rustix::fs::makedev(stx.stx_dev_major, stx.stx_dev_minor),
            ino: stx.stx_ino,
        },
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

/// The same from `fstatat`, where `statx` is missing ([`NoStatx::Fstatat`]).
#[allow(clippy::unnecessary_cast)] // `Stat`'s field types vary by target
fn from_stat(st: &rustix::fs::Stat) -> Meta {
    Meta {
        kind: FileType::from_raw_mode(st.st_mode as u32),
        id: FileId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        },
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

/// The mount a walk or a removal is confined to: one device and, where the
/// kernel reports it, one mount id (a bind mount of the same filesystem
/// shares the device but not the mount id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub struct Fence {
    dev: u64,
    mnt: Option<u64>,
}

impl Fence {
    /// The mount `meta` lives on.
    #[doc(hidden)]
    pub fn of(meta: &Meta) -> Fence {
        Fence {
            dev: meta.id.dev,
            mnt: meta.mnt,
        }
    }

    /// The device of this mount.
    #[doc(hidden)]
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// Whether `meta` is on this mount (fails closed when only one side
    /// knows its mount id).
    #[doc(hidden)]
    pub fn admits(&self, meta: &Meta) -> bool {
        self.dev == meta.id.dev && self.mnt == meta.mnt
    }
}

/// Whether a directory is opened with `O_NOATIME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum Atime {
    /// No `O_NOATIME`: listing the directory updates its access time as
    /// any reader's would (the remover, which deletes it anyway).
    Update,
    /// `O_NOATIME` where the kernel allows it: to the directory's `owner`
    /// and to holders of `CAP_FOWNER` (taken to be `euid` 0); anyone else
    /// gets `EPERM` for it, so it is not asked. Should it be refused all
    /// the same, the open is retried without it (the size walker).
    Keep { owner: u32, euid: u32 },
}

impl Atime {
    /// The one `O_NOATIME` rule.
    fn flags(self) -> OFlags {
        match self {
            Atime::Keep { owner, euid } if euid == 0 || owner == euid => OFlags::NOATIME,
            _ => OFlags::empty(),
        }
    }
}

/// What opening a subdirectory found.
#[doc(hidden)]
pub enum Opened<S> {
    /// A directory on the fence's mount, open for reading, with what the
    /// call knows about it.
    Dir(OwnedFd, S),
    /// A directory on another mount or device: not entered. A mount point
    /// is refused by the kernel before it is opened where `openat2` exists.
    Fenced,
}

/// `openat2(dirfd, name, O_DIRECTORY|O_NOFOLLOW[|O_NOATIME],
/// RESOLVE_NO_XDEV|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|RESOLVE_BENEATH)`
/// —opens a subdirectory, never crossing into another mount; the mount is
/// checked only where the kernel could not check it (the size walker,
/// which opens every directory of a tree and needs nothing else).
///
/// A mount point is refused by the kernel before it is opened
/// (`RESOLVE_NO_XDEV` gives `EXDEV`: no automount fires, no hung network
/// filesystem is touched); where `openat2` is missing, `openat` is used and
/// the device and mount id of what it opened decide. A symlink fails with
/// `ELOOP` (or `ENOTDIR`), anything else that is not a directory with
/// `ENOTDIR` (a FIFO, device or socket is never opened).
///
/// # References
///
/// - [openat2(2)](https://man7.org/linux/man-pages/man2/openat2.2.html)
#[doc(hidden)]
pub fn open_dir(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    atime: Atime,
    fence: &Fence,
    no_statx: NoStatx,
) -> Result<Opened<()>, Errno> {
    let Some((fd, checked)) = open_fenced(dirfd, name, DIR_OPEN, atime)? else {
        return Ok(Opened::Fenced);
    };
    if !checked && !fence.admits(&fstat(fd.as_fd(), no_statx)?) {
        return Ok(Opened::Fenced);
    }
    Ok(Opened::Dir(fd, ()))
}

/// [`open_dir`], then `statx` on the result, whether or not the kernel
/// checked the mount—opens a subdirectory for removal: what was opened must
/// be a directory on the fence's mount, and its metadata is returned.
#[doc(hidden)]
pub fn open_dir_stat(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    atime: Atime,
    fence: &Fence,
    no_statx: NoStatx,
) -> Result<Opened<Meta>, Errno> {
    let Some((fd, _)) = open_fenced(dirfd, name, DIR_OPEN, atime)? else {
        return Ok(Opened::Fenced);
    };
    let meta = fstat_dir(fd.as_fd(), no_statx)?;
    if !fence.admits(&meta) {
        return Ok(Opened::Fenced);
    }
    Ok(Opened::Dir(fd, meta))
}

/// [`open_beneath`] with the [`Atime`] rule: `O_NOATIME` is dropped when
/// the kernel refuses it (`EPERM`: not the owner and no `CAP_FOWNER`).
/// `None` when the kernel refused to cross a mount (`EXDEV`).
fn open_fenced(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    flags: OFlags,
    atime: Atime,
) -> Result<Option<(OwnedFd, bool)>, Errno> {
    let with = flags | atime.flags();
    let result = match open_beneath(dirfd, name, with) {
        Err(Errno::PERM) if with.contains(OFlags::NOATIME) => open_beneath(dirfd, name, flags),
        other => other,
    };
    match result {
        Ok(opened) => Ok(Some(opened)),
        Err(Errno::XDEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens with `openat2(RESOLVE_NO_XDEV|…)` where available, else `openat`;
/// the flag says whether the kernel checked the mount.
fn open_beneath(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    flags: OFlags,
) -> Result<(OwnedFd, bool), Errno> {
    match try_openat2(dirfd, name, flags) {
        Some(opened) => opened.map(|fd| (fd, true)),
        None => rustix::fs::openat(dirfd, name, flags, Mode::empty()).map(|fd| (fd, false)),
    }
}

/// `openat2(dirfd, name, flags, RESOLVE_NO_XDEV|RESOLVE_NO_SYMLINKS|
/// RESOLVE_NO_MAGICLINKS|RESOLVE_BENEATH)`: `None` where the kernel has no
/// `openat2`, and the caller must fall back to `openat` and its own check.
fn try_openat2(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    flags: OFlags,
) -> Option<Result<OwnedFd, Errno>> {
    if NO_OPENAT2.load(Ordering::Relaxed) {
        return None;
    }
    let resolve = ResolveFlags::NO_XDEV
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::BENEATH;
    match rustix::fs::openat2(dirfd, name, flags, Mode::empty(), resolve) {
        // ENOSYS: kernel before 5.6; EPERM without O_NOATIME: a seccomp
        // filter that rejects unknown syscalls this way. Both mean "no
        // openat2". (EPERM with O_NOATIME is the caller's to handle.)
        // EAGAIN only comes with RESOLVE_CACHED, which is not set.
        Err(Errno::NOSYS) => {}
        Err(Errno::PERM) if !flags.contains(OFlags::NOATIME) => {}
        other => return Some(other),
    }
    NO_OPENAT2.store(true, Ordering::Relaxed);
    None
}

/// `openat2(dirfd, name, O_DIRECTORY|O_NOFOLLOW, RESOLVE_NO_XDEV|…)`—opens
/// the directory `name` unless another filesystem is mounted on it
/// (`EXDEV`), without ever asking the mounted filesystem anything: a dead
/// FUSE or network mount on a top-level entry cannot block the caller (the
/// lease probe and look, which judge entries that may be mount points).
///
/// Where `openat2` is missing, the name is first compared with `dirfd` by
/// `statx` mount id (`AT_STATX_DONT_SYNC|AT_NO_AUTOMOUNT`, which asks no
/// server): another mount is `EXDEV`, unopened; then `openat`. When either
/// cannot be `statx`ed the open goes ahead, as it would with no mount ids.
/// A symlink fails with `ELOOP` (or `ENOTDIR`), anything else that is not
/// a directory with `ENOTDIR`.
///
/// # References
///
/// - [openat2(2)](https://man7.org/linux/man-pages/man2/openat2.2.html)
#[doc(hidden)]
pub fn open_dir_unmounted(dirfd: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    if let Some(opened) = try_openat2(dirfd, name, DIR_OPEN) {
        return opened;
    }
    let quiet = AtFlags::STATX_DONT_SYNC | AtFlags::NO_AUTOMOUNT;
    let here = rustix::fs::statx(dirfd, c"", AtFlags::EMPTY_PATH | quiet, MASK);
    let there = rustix::fs::statx(dirfd, name, NAME_FLAGS, MASK);
    if let (Ok(here), Ok(there)) = (&here, &there) {
        if !Fence::of(&from_statx(here)).admits(&from_statx(there)) {
            return Err(Errno::XDEV);
        }
    }
    rustix::fs::openat(dirfd, name, DIR_OPEN, Mode::empty())
}

/// `openat(dirfd, name, O_DIRECTORY|O_NOFOLLOW[|O_NOATIME])` checked against
/// `want`—opens the entry a walk starts at (which may itself be a mount
/// point, so no `RESOLVE_NO_XDEV` here).
///
/// Fails with `ESTALE` when the name is no longer the inode `want`
/// (replaced between the `statx` and the open).
#[doc(hidden)]
pub fn open_dir_checked(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    want: FileId,
    atime: Atime,
    no_statx: NoStatx,
) -> Result<OwnedFd, Errno> {
    let flags = DIR_OPEN | atime.flags();
    let fd = match rustix::fs::openat(dirfd, name, flags, Mode::empty()) {
        Err(Errno::PERM) if flags.contains(OFlags::NOATIME) => {
            rustix::fs::openat(dirfd, name, DIR_OPEN, Mode::empty())?
        }
        other => other?,
    };
    if fstat(fd.as_fd(), no_statx)?.id != want {
        return Err(Errno::STALE);
    }
    Ok(fd)
}

/// Opens a directory the caller may not read (mode `0o000`, `0o300`, as its
/// owner): `openat2(O_PATH)` fenced as [`open_dir`], check the mount, add
/// `u+rwx` through the descriptor, then reopen `"."` relative to it for
/// reading.
///
/// The mode change goes through the descriptor, never through a name that
/// could be swapped: `fchmod` does not take `O_PATH` descriptors, so it is
/// made on `/proc/thread-self/fd/N`, which the kernel resolves to the open
/// inode itself.
///
/// With `want`, the directory must be that inode (else `ESTALE`, and its
/// mode is left alone).
#[doc(hidden)]
pub fn open_unreadable_dir(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    fence: &Fence,
    want: Option<FileId>,
    no_statx: NoStatx,
) -> Result<Opened<Meta>, Errno> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Some((path_fd, _)) = open_fenced(dirfd, name, flags, Atime::Update)? else {
        return Ok(Opened::Fenced);
    };
    let st = fstat_dir(path_fd.as_fd(), no_statx)?;
    if !fence.admits(&st) {
        return Ok(Opened::Fenced);
    }
    if want.is_some_and(|want| want != st.id) {
        return Err(Errno::STALE);
    }
    chmod_path_fd(path_fd.as_fd(), st.perm | 0o700)?;
    let fd = rustix::fs::openat(&path_fd, c".", DIR_OPEN, Mode::empty())?;
    let st = fstat_dir(fd.as_fd(), no_statx)?;
    Ok(Opened::Dir(fd, st))
}

/// `chmod("/proc/thread-self/fd/N", mode)`—changes the mode of the inode an
/// `O_PATH` descriptor refers to (the magic link is resolved to the open
/// file, not by name). `thread-self` rather than `self`: a thread running
/// with other credentials than the main thread may not look into the main
/// thread's `/proc` entry.
fn chmod_path_fd(fd: BorrowedFd<'_>, perm: u32) -> Result<(), Errno> {
    let mode = Mode::from_raw_mode(perm);
    let link = format!("/proc/thread-self/fd/{}", fd.as_raw_fd());
    match rustix::fs::chmodat(CWD, link.as_str(), mode, AtFlags::empty()) {
        // Linux before 3.17 has no /proc/thread-self.
        Err(Errno::NOENT) => {
            let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
            match rustix::fs::chmodat(CWD, link.as_str(), mode, AtFlags::empty()) {
                // No /proc at all: the directory stays unreadable, so the
                // error to report is the original one.
                Err(Errno::NOENT) => Err(Errno::ACCESS),
                other => other,
            }
        }
        other => other,
    }
}

/// `fchmod(fd, mode | 0o700)` on an open directory—adds `u+rwx` so its
/// entries can be listed and removed. Never called on anything but a
/// directory descriptor the caller opened (a hard link would carry a
/// file's mode change outside the tree).
#[doc(hidden)]
pub fn make_writable(fd: BorrowedFd<'_>, perm: u32) -> Result<(), Errno> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(perm | 0o700))
}

/// `openat(fd, "..")` checked against the identity it must have—reopens the
/// parent of a directory whose descriptor was closed to bound the number
/// of open descriptors.
///
/// Fails with `ESTALE` when `..` is no longer that directory (the child was
/// moved elsewhere while the caller was inside it).
#[doc(hidden)]
pub fn reopen_parent(
    fd: BorrowedFd<'_>,
    want: FileId,
    no_statx: NoStatx,
) -> Result<(OwnedFd, Meta), Errno> {
    let parent = rustix::fs::openat(fd, c"..", DIR_OPEN, Mode::empty())?;
    let st = fstat_dir(parent.as_fd(), no_statx)?;
    if st.id != want {
        return Err(Errno::STALE);
    }
    Ok((parent, st))
}

/// `unlinkat(dirfd, name, 0)`—removes a name that is not a directory.
///
/// # References
///
/// - [unlinkat(2)](https://man7.org/linux/man-pages/man2/unlinkat.2.html)
#[doc(hidden)]
pub fn unlink(dirfd: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    rustix::fs::unlinkat(dirfd, name, AtFlags::empty())
}

/// `unlinkat(dirfd, name, AT_REMOVEDIR)`—removes an empty directory.
#[doc(hidden)]
pub fn rmdir(dirfd: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    rustix::fs::unlinkat(dirfd, name, AtFlags::REMOVEDIR)
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`—moves a name
/// without ever replacing what is at the destination.
///
/// # References
///
/// - [renameat2(2)](https://man7.org/linux/man-pages/man2/rename.2.html)
#[doc(hidden)]
pub fn rename_noreplace(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> Result<(), Errno> {
    rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE)
}

/// `renameat2(a_dir, a, b_dir, b, RENAME_EXCHANGE)`—swaps two names
/// atomically: each then names what the other did. Neither is followed
/// (a symlink is swapped as a link), and neither can be missing in
/// between.
///
/// Fails with `EINVAL` on a filesystem without it (overlayfs before Linux
/// 4.9 on some layers, some FUSE and network filesystems) and on kernels
/// before 3.15, `ENOENT` when either name is gone, `EXDEV` across
/// filesystems, `EBUSY` on a mount point.
///
/// # References
///
/// - [renameat2(2)](https://man7.org/linux/man-pages/man2/rename.2.html)
#[doc(hidden)]
pub fn rename_exchange(
    a_dir: BorrowedFd<'_>,
    a: &CStr,
    b_dir: BorrowedFd<'_>,
    b: &CStr,
) -> Result<(), Errno> {
    rustix::fs::renameat_with(a_dir, a, b_dir, b, RenameFlags::EXCHANGE)
}

/// `lseek(fd, 0, SEEK_SET)`—rewinds a directory to list it again.
#[doc(hidden)]
pub fn rewind(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::fs::seek(fd, rustix::fs::SeekFrom::Start(0)).map(drop)
}

/// Whether `name` is `.` or `..`.
#[doc(hidden)]
pub fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Unmounts on drop, even when the test fails.
    struct Mounted<'a>(&'a Path);

    impl Drop for Mounted<'_> {
        fn drop(&mut self) {
            let _ = rustix::mount::unmount(self.0, rustix::mount::UnmountFlags::DETACH);
        }
    }

    fn open(path: &Path) -> OwnedFd {
        rustix::fs::open(path, DIR_OPEN, Mode::empty()).unwrap()
    }

    /// Both fences, each on its own, for every fenced open: `openat2(RESOLVE_NO_XDEV)`
    /// refuses to cross, and without it (old kernels) the `statx` mount id
    /// tells a bind mount of the same filesystem apart, and the device a
    /// tmpfs.
    #[test]
    #[allow(clippy::print_stderr)] // the skip message
    fn mount_points_are_fenced_with_and_without_openat2() {
        if !rustix::process::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "needs root, and CI is set"
            );
            eprintln!("skipping: needs root");
            return;
        }
        let sandbox = crate::sandbox!().unwrap();
        let scratch = sandbox.path().to_owned();
        for sub in ["plain", "bind", "tmpfs", "source"] {
            std::fs::create_dir_all(scratch.join(sub)).unwrap();
        }
        let bind_target = scratch.join("bind");
        rustix::mount::mount_bind(scratch.join("source"), &bind_target).unwrap();
        let _bind = Mounted(&bind_target);
        let tmpfs_target = scratch.join("tmpfs");
        rustix::mount::mount(
            "sandkeeper-test",
            &tmpfs_target,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            Some(c"size=1m"),
        )
        .unwrap();
        let _tmpfs = Mounted(&tmpfs_target);

        let dir = open(&scratch);
        let fence = Fence::of(&fstat_dir(dir.as_fd(), NoStatx::Fail).unwrap());
        let euid = rustix::process::geteuid().as_raw();
        let check = |name: &CStr| {
            let stat = match open_dir_stat(dir.as_fd(), name, Atime::Update, &fence, NoStatx::Fail)
                .unwrap()
            {
                Opened::Dir(..) => "dir",
                Opened::Fenced => "fenced",
            };
            let keep = Atime::Keep { owner: euid, euid };
            let walk = match open_dir(dir.as_fd(), name, keep, &fence, NoStatx::Fstatat).unwrap() {
                Opened::Dir(..) => "dir",
                Opened::Fenced => "fenced",
            };
            assert_eq!(stat, walk, "{name:?}");
            let lease = match open_dir_unmounted(dir.as_fd(), name) {
                Ok(_) => "dir",
                Err(Errno::XDEV) => "fenced",
                Err(e) => panic!("{name:?}: {e}"),
            };
            assert_eq!(stat, lease, "{name:?}");
            stat
        };
        for without_openat2 in [false, true] {
            NO_OPENAT2.store(without_openat2, Ordering::Relaxed);
            assert_eq!(check(c"plain"), "dir", "openat2 off: {without_openat2}");
            assert_eq!(check(c"bind"), "fenced", "openat2 off: {without_openat2}");
            assert_eq!(check(c"tmpfs"), "fenced", "openat2 off: {without_openat2}");
        }
        NO_OPENAT2.store(false, Ordering::Relaxed);
        drop((_tmpfs, _bind));
        drop(dir);
        sandbox.close().unwrap();
    }
}
