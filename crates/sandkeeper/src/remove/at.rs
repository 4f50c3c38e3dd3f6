//! The descriptor-relative system calls the remover is made of.
//!
//! Every call here takes an open directory and one path component; none
//! resolves a path from the root or the working directory, none follows a
//! symlink, and none opens anything but a directory.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{
    AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags, Statx, StatxFlags, CWD,
};
use rustix::io::Errno;

/// Flags for opening a directory of the tree: never a symlink, never a
/// controlling terminal, never blocking (a FIFO cannot pass `O_DIRECTORY`
/// anyway; `O_NONBLOCK` is a second fence).
const DIR_OPEN: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY);

/// Set once `openat2` turned out to be missing (Linux < 5.6, some seccomp
/// profiles), so later opens go straight to `openat`.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// A file's identity: device and inode, as `stat` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// What the remover needs to know about a directory it opened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirStat {
    pub(crate) id: FileId,
    /// The mount id, when the kernel reports it (Linux 5.8+).
    pub(crate) mnt: Option<u64>,
    /// Permission bits (`0o7777`).
    pub(crate) perm: u32,
    pub(crate) uid: u32,
    pub(crate) nlink: u32,
    /// Disk usage in bytes (`st_blocks` × 512).
    pub(crate) bytes: u64,
}

/// The mount a removal is confined to: one device and, where the kernel
/// reports it, one mount id (a bind mount of the same filesystem shares the
/// device but not the mount id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fence {
    dev: u64,
    mnt: Option<u64>,
}

impl Fence {
    /// The mount `st` lives on.
    pub(crate) fn of(st: &DirStat) -> Self {
        Fence {
            dev: st.id.dev,
            mnt: st.mnt,
        }
    }

    /// Whether a directory with `st` is on this mount (fails closed when
    /// one side knows its mount id and the other does not).
    pub(crate) fn admits(&self, st: &DirStat) -> bool {
        self.dev == st.id.dev && self.mnt == st.mnt
    }
}

/// What opening a subdirectory found.
pub(crate) enum Opened {
    /// A directory on the same mount, open for reading.
    Dir(OwnedFd, DirStat),
    /// A directory on another mount or device: not to be entered.
    Fenced,
}

/// `statx(fd, "", AT_EMPTY_PATH, …)`—identity, mount id, mode and size of
/// an open directory.
pub(crate) fn fstat_dir(fd: BorrowedFd<'_>) -> Result<DirStat, Errno> {
    let stx = rustix::fs::statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::TYPE
            | StatxFlags::MODE
            | StatxFlags::INO
            | StatxFlags::UID
            | StatxFlags::NLINK
            | StatxFlags::BLOCKS
            | StatxFlags::MNT_ID,
    )?;
    if FileType::from_raw_mode(u32::from(stx.stx_mode)) != FileType::Directory {
        return Err(Errno::NOTDIR);
    }
    Ok(dir_stat(&stx))
}

fn dir_stat(stx: &Statx) -> DirStat {
    let mnt = (stx.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(stx.stx_mnt_id);
    DirStat {
        id: FileId {
            dev: rustix::fs::makedev(stx.stx_dev_major, stx.stx_dev_minor),
            ino: stx.stx_ino,
        },
        mnt,
        perm: u32::from(stx.stx_mode) & 0o7777,
        uid: stx.stx_uid,
        nlink: stx.stx_nlink,
        bytes: stx.stx_blocks.saturating_mul(512),
    }
}

/// What `lstat` says about a name, for the few places that need it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryStat {
    pub(crate) id: FileId,
    pub(crate) is_dir: bool,
    pub(crate) nlink: u32,
    pub(crate) bytes: u64,
}

/// `statx(dirfd, name, AT_SYMLINK_NOFOLLOW, …)`—type, identity, link count
/// and disk usage of a name, without following it or opening it.
pub(crate) fn lstat(dirfd: BorrowedFd<'_>, name: &CStr) -> Result<EntryStat, Errno> {
    let stx = rustix::fs::statx(
        dirfd,
        name,
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::STATX_DONT_SYNC | AtFlags::NO_AUTOMOUNT,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::NLINK | StatxFlags::BLOCKS,
    )?;
    Ok(EntryStat {
        id: FileId {
            dev: rustix::fs::makedev(stx.stx_dev_major, stx.stx_dev_minor),
            ino: stx.stx_ino,
        },
        is_dir: FileType::from_raw_mode(u32::from(stx.stx_mode)) == FileType::Directory,
        nlink: stx.stx_nlink,
        bytes: stx.stx_blocks.saturating_mul(512),
    })
}

/// `openat2(dirfd, name, O_DIRECTORY|O_NOFOLLOW, RESOLVE_NO_XDEV|…)`, then
/// `statx` on the result—opens a subdirectory for removal.
///
/// A symlink fails with `ELOOP` or `ENOTDIR`, anything else that is not a
/// directory with `ENOTDIR` (a FIFO, device or socket is never opened). A
/// mount point is refused by the kernel before it is opened
/// (`RESOLVE_NO_XDEV` gives `EXDEV`: no automount fires, no hung network
/// filesystem is touched); where `openat2` is missing, `openat` is used and
/// the mount id and device of what it opened decide.
pub(crate) fn open_dir(dirfd: BorrowedFd<'_>, name: &CStr, fence: &Fence) -> Result<Opened, Errno> {
    let fd = match open_raw(dirfd, name, DIR_OPEN) {
        Ok(fd) => fd,
        Err(Errno::XDEV) => return Ok(Opened::Fenced),
        Err(e) => return Err(e),
    };
    let st = fstat_dir(fd.as_fd())?;
    if !fence.admits(&st) {
        return Ok(Opened::Fenced);
    }
    Ok(Opened::Dir(fd, st))
}

fn open_raw(dirfd: BorrowedFd<'_>, name: &CStr, flags: OFlags) -> Result<OwnedFd, Errno> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let resolve = ResolveFlags::NO_XDEV
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::BENEATH;
        match rustix::fs::openat2(dirfd, name, flags, Mode::empty(), resolve) {
            // ENOSYS: kernel before 5.6; EPERM: a seccomp filter that
            // rejects unknown syscalls this way. Both mean "no openat2".
            Err(Errno::NOSYS | Errno::PERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
            // EAGAIN only comes with RESOLVE_CACHED, which is not set.
            other => return other,
        }
    }
    rustix::fs::openat(dirfd, name, flags, Mode::empty())
}

/// Opens a directory the caller may not read (mode `0o000`, `0o300`, as its
/// owner): `openat(O_PATH)`, check the mount, add `u+rwx` through the
/// descriptor, then reopen `"."` relative to it for reading.
///
/// The mode change goes through the descriptor, never through a name that
/// could be swapped: `fchmod` does not take `O_PATH` descriptors, so it is
/// made on `/proc/thread-self/fd/N`, which the kernel resolves to the open
/// inode itself.
///
/// With `want`, the directory must be that inode (else `ESTALE`, and its
/// mode is left alone).
pub(crate) fn open_unreadable_dir(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    fence: &Fence,
    want: Option<FileId>,
) -> Result<Opened, Errno> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let path_fd = match open_raw(dirfd, name, flags) {
        Ok(fd) => fd,
        Err(Errno::XDEV) => return Ok(Opened::Fenced),
        Err(e) => return Err(e),
    };
    let st = fstat_dir(path_fd.as_fd())?;
    if !fence.admits(&st) {
        return Ok(Opened::Fenced);
    }
    if want.is_some_and(|want| want != st.id) {
        return Err(Errno::STALE);
    }
    chmod_path_fd(path_fd.as_fd(), st.perm | 0o700)?;
    let fd = rustix::fs::openat(&path_fd, c".", DIR_OPEN, Mode::empty())?;
    let st = fstat_dir(fd.as_fd())?;
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

/// `fchmod(fd, mode)` on an open directory of the tree—adds `u+rwx` so its
/// entries can be listed and removed. Never called on anything but a
/// directory descriptor the walk opened.
pub(crate) fn make_writable(fd: BorrowedFd<'_>, perm: u32) -> Result<(), Errno> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(perm | 0o700))
}

/// `openat(fd, "..")` checked against the identity it must have—reopens the
/// parent of a directory whose descriptor the walk had closed.
///
/// Fails with `ESTALE` when `..` is no longer that directory (the child was
/// moved elsewhere while the walk was inside it).
pub(crate) fn reopen_parent(fd: BorrowedFd<'_>, want: FileId) -> Result<(OwnedFd, DirStat), Errno> {
    let parent = rustix::fs::openat(fd, c"..", DIR_OPEN, Mode::empty())?;
    let st = fstat_dir(parent.as_fd())?;
    if st.id != want {
        return Err(Errno::STALE);
    }
    Ok((parent, st))
}

/// `unlinkat(dirfd, name, 0)`—removes a name that is not a directory.
pub(crate) fn unlink(dirfd: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    rustix::fs::unlinkat(dirfd, name, AtFlags::empty())
}

/// `unlinkat(dirfd, name, AT_REMOVEDIR)`—removes an empty directory.
pub(crate) fn rmdir(dirfd: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    rustix::fs::unlinkat(dirfd, name, AtFlags::REMOVEDIR)
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`—moves a name
/// without ever replacing what is at the destination.
pub(crate) fn rename_noreplace(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> Result<(), Errno> {
    rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE)
}

/// `lseek(fd, 0, SEEK_SET)`—rewinds a directory to list it again.
pub(crate) fn rewind(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::fs::seek(fd, rustix::fs::SeekFrom::Start(0)).map(drop)
}

/// Whether `name` is `.` or `..`.
pub(crate) fn is_dot(name: &[u8]) -> bool {
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

    /// Both fences, each on its own: `openat2(RESOLVE_NO_XDEV)` refuses to
    /// cross, and without it (old kernels) the `statx` mount id tells a bind
    /// mount of the same filesystem apart, and the device a tmpfs.
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
        let fence = Fence::of(&fstat_dir(dir.as_fd()).unwrap());
        let check = |name: &CStr| match open_dir(dir.as_fd(), name, &fence).unwrap() {
            Opened::Dir(..) => "dir",
            Opened::Fenced => "fenced",
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
