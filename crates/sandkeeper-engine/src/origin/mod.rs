//! Who made each top-level entry of a root: the creator's pid, name,
//! executable, cwd, uid, cgroup and parent, recorded when the entry
//! appeared — never its arguments (only `sandkeeper run` records its own
//! command).
//!
//! - [`Tracker`] watches one root directory with fanotify (`FAN_CREATE |
//!   FAN_ONDIR`, reported with the directory's file handle and the name):
//!   for each new direct child it reads the creating process from `/proc`
//!   (never its memory: no `cmdline`) and records it on the entry
//!   ([`write()`]). `watch` runs one per root whose config sets
//!   `track_origins = true`.
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
//! use sandkeeper_engine::origin;
//!
//! let root = sandkeeper_engine::Sandbox::new()?;
//! std::fs::create_dir(root.path().join("app-1"))?;
//! let dir = sandkeeper_engine::root::Root::open(root.path())?;
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
//! - The tracker writes only on what the creator made: an inode owned by
//!   the creator's real, effective or filesystem uid, and for a file with
//!   no other link; for a creator that could not be read, only a new
//!   directory (`FAN_CREATE`, its own handle checked). An entry moved in
//!   is not reported at all. So root never writes on an inode someone
//!   else made (issue 25), in the attribute or in the [`Store`].
//! - Reading a creator touches none of its memory (`comm`, `stat`,
//!   `status`, `cgroup`, the `exe` and `cwd` links: no `mmap` lock, no
//!   filesystem asked), so a creator cannot stall the tracker.
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
mod store;

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{fstat, FileType, Mode, OFlags, XattrFlags};
use rustix::io::Errno;

pub use listen::{Tracker, TrackerStats};
pub use record::{Creator, Origin, Process, Recorder, MAX_ARGS, MAX_FIELD, MAX_RECORD};
pub use set::{TrackerChange, Trackers};
pub use store::{store_path, Store, DEFAULT_STORE, MAX_STORED, MAX_STORE_FILE, STORE_ENV};

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

/// The entry `name` of `root` if it is a directory, opened for reading
/// (a directory opens nothing else), with the same resolution as
/// [`entry`]: `ENOTDIR` for anything else, `ELOOP` for a symlink, `EXDEV`
/// for a mount point.
fn directory(root: BorrowedFd<'_>, name: &OsStr) -> Result<(OwnedFd, u64), Errno> {
    use rustix::fs::ResolveFlags;
    if !plain(name) {
        return Err(Errno::INVAL);
    }
    let fd = rustix::fs::openat2(
        root,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_XDEV | ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
    )?;
    let ino = fstat(&fd)?.st_ino;
    Ok((fd, ino))
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
/// bounded, recorded for this very inode — or, on a filesystem without
/// `trusted.*` attributes, the record of the [`Store`] at
/// [`store_path`]`(None)` for this very entry (inode, name, birth time).
///
/// `None` when nothing was recorded, the caller may not read `trusted.*`
/// attributes (not root), `name` is a symlink or is gone, or the value is
/// not a record. Never reads `user.*`. Reading many entries of one root,
/// a [`Reader`] asks the filesystem (and reads the store) once.
pub fn read(root: BorrowedFd<'_>, name: &OsStr) -> Option<Origin> {
    Reader::new(root)?.read(name)
}

/// Whether the filesystem of `fd` has `trusted.*` attributes: asking for
/// ours gives `ENODATA` (or the value) there, `EOPNOTSUPP` elsewhere.
fn has_xattrs(fd: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 1];
    !matches!(
        rustix::fs::getxattr(fd_path(fd), XATTR, &mut buf[..]),
        Err(Errno::OPNOTSUPP)
    )
}

/// The records of `root` in the store at `store` (none when it does not
/// exist or is refused), read once per store file version (a process-wide
/// cache of one file: `explain`, `ls` and `scan --json --entries` ask per
/// entry).
fn stored_records(root: BorrowedFd<'_>, store: &Path) -> std::sync::Arc<store::Records> {
    use std::sync::{Arc, Mutex};
    type Key = (PathBuf, u64, u64, i64, i64, u64, u64);
    static CACHE: Mutex<Option<(Key, Arc<store::Records>)>> = Mutex::new(None);
    let Ok(Some(store)) = Store::open_existing(store) else {
        return Arc::default();
    };
    let Ok(root_st) = fstat(root) else {
        return Arc::default();
    };
    let file = format!("root-{:x}-{:x}.json", root_st.st_dev, root_st.st_ino);
    let Ok(st) = rustix::fs::statat(
        store.dir(),
        file.as_str(),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    ) else {
        return Arc::default();
    };
    let key: Key = (
        store.path().to_owned(),
        root_st.st_dev,
        root_st.st_ino,
        st.st_mtime,
        st.st_mtime_nsec as i64,
        st.st_size as u64,
        st.st_ino,
    );
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((k, records)) = cache.as_ref() {
        if *k == key {
            return Arc::clone(records);
        }
    }
    let records = Arc::new(store.load(root));
    *cache = Some((key, Arc::clone(&records)));
    records
}

/// Reads the origins of one root's entries, as cheaply as it can: made
/// once per root, it knows whether reading can give anything at all.
///
/// - Not root: [`Reader::new`] is `None` (no `trusted.*` attribute can be
///   read): a scan that asks for origins costs nothing more then.
/// - Root: one `getxattr` per entry (after an `openat2` and `fstat` of
///   it); on a filesystem without `trusted.*` attributes, a `statx` per
///   entry against the [`Store`]'s records of the root, read once.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    root: BorrowedFd<'a>,
    /// The store's records, when the root's filesystem has no `trusted.*`
    /// attributes.
    stored: Option<std::sync::Arc<store::Records>>,
}

impl<'a> Reader<'a> {
    /// A reader of the entries of the root open as `root` (the store, where
    /// needed, at [`store_path`]`(None)`); `None` when this process may not
    /// read `trusted.*` attributes (not root).
    pub fn new(root: BorrowedFd<'a>) -> Option<Reader<'a>> {
        Reader::with_store(root, &store_path(None))
    }

    /// As [`new`](Self::new), with the store at `store` (the config's
    /// `origin_store`).
    pub fn with_store(root: BorrowedFd<'a>, store: &Path) -> Option<Reader<'a>> {
        if !rustix::process::geteuid().is_root() {
            return None;
        }
        let stored = (!has_xattrs(root)).then(|| stored_records(root, store));
        Some(Reader { root, stored })
    }

    /// The origin of the directory entry `name`, which the caller has open
    /// as `dir` (inode `ino`): as [`read`](Self::read), without opening it
    /// again.
    pub fn read_open(&self, name: &OsStr, dir: BorrowedFd<'_>, ino: u64) -> Option<Origin> {
        if let Some(stored) = &self.stored {
            return stored.get(name, dir);
        }
        // On the stack: most entries have no record, and this runs once per
        // entry on the scan's walking threads.
        let mut buf = [0u8; MAX_RECORD];
        let n = rustix::fs::fgetxattr(dir, XATTR, &mut buf[..]).ok()?;
        let origin = Origin::decode(&buf[..n])?;
        (origin.ino == ino).then_some(origin)
    }

    /// The origin of the entry `name`, as [`read`] gives it.
    pub fn read(&self, name: &OsStr) -> Option<Origin> {
        // A directory (most entries) is opened for reading, which opens
        // nothing else and lets `fgetxattr` ask it directly; anything else
        // is reached `O_PATH` and asked through `/proc/self/fd`.
        let (fd, ino) = match directory(self.root, name) {
            Ok((fd, ino)) => return self.read_open(name, fd.as_fd(), ino),
            Err(Errno::NOTDIR) => entry(self.root, name).ok()?,
            Err(_) => return None,
        };
        if let Some(stored) = &self.stored {
            return stored.get(name, fd.as_fd());
        }
        let mut buf = [0u8; MAX_RECORD];
        let n = rustix::fs::getxattr(fd_path(fd.as_fd()), XATTR, &mut buf[..]).ok()?;
        let origin = Origin::decode(&buf[..n])?;
        (origin.ino == ino).then_some(origin)
    }
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
/// it has one already (`XATTR_CREATE`); on a filesystem without
/// `trusted.*` attributes, in the [`Store`] at [`store_path`]`(None)`.
///
/// # Errors
///
/// The errno: `ENOENT` (gone), `EOPNOTSUPP` (a symlink), `EPERM` (not
/// root), `EINVAL` (not one plain name); `EACCES` when the store is
/// needed and cannot be used (refused as unsafe, or not writable).
pub fn write(
    root: BorrowedFd<'_>,
    name: &OsStr,
    by: Recorder,
    creator: Creator,
) -> Result<Written, Errno> {
    write_with_store(root, name, by, creator, &store_path(None))
}

/// As [`write()`], with the store (where needed) at `store`.
///
/// # Errors
///
/// As [`write()`].
pub fn write_with_store(
    root: BorrowedFd<'_>,
    name: &OsStr,
    by: Recorder,
    creator: Creator,
    store: &Path,
) -> Result<Written, Errno> {
    let (fd, ino) = entry(root, name)?;
    match write_fd(fd.as_fd(), ino, by, creator.clone()) {
        Err(Errno::OPNOTSUPP) => {
            let store = Store::open(store).map_err(|_| Errno::ACCESS)?;
            store_one(&store, root, name, fd, ino, by, creator)
        }
        other => other,
    }
}

/// Records one origin in `store` (see [`Store`]).
fn store_one(
    store: &Store,
    root: BorrowedFd<'_>,
    name: &OsStr,
    fd: OwnedFd,
    ino: u64,
    by: Recorder,
    creator: Creator,
) -> Result<Written, Errno> {
    let origin = Origin::now(ino, by, creator);
    let (now, born) = store::identity(fd.as_fd())?;
    if now != ino {
        return Err(Errno::NOENT);
    }
    store
        .put(root, vec![(name.as_bytes().to_vec(), born, origin)])
        .map_err(|_| Errno::IO)?
        .pop()
        .ok_or(Errno::IO)
}

fn write_fd(
    fd: BorrowedFd<'_>,
    ino: u64,
    by: Recorder,
    creator: Creator,
) -> Result<Written, Errno> {
    let origin = Origin::now(ino, by, creator);
    match rustix::fs::setxattr(fd_path(fd), XATTR, &origin.encode(), XattrFlags::CREATE) {
        Ok(()) => Ok(Written::Recorded),
        Err(Errno::EXIST) => Ok(Written::AlreadyRecorded),
        Err(e) => Err(e),
    }
}

/// Records this process, running `command`, as the creator of the
/// directory open as `dir`, whose path is `path` (what `sandkeeper run`
/// does for its own directory); on a filesystem without `trusted.*`
/// attributes, in the [`Store`] at [`store_path`]`(None)`, if the entry
/// at `path` is still `dir`. Best effort: `false` when it could not (not
/// root, no store, recorded already).
pub fn record_run(dir: BorrowedFd<'_>, path: &Path, command: &[impl AsRef<OsStr>]) -> bool {
    let Ok(st) = fstat(dir) else { return false };
    let argv = command
        .iter()
        .map(|a| String::from_utf8_lossy(a.as_ref().as_bytes()).into_owned())
        .collect();
    let creator = Creator::Process(capture::this_process(argv));
    let origin = Origin::now(st.st_ino, Recorder::Run, creator);
    match rustix::fs::fsetxattr(dir, XATTR, &origin.encode(), XattrFlags::CREATE) {
        Ok(()) => true,
        Err(Errno::OPNOTSUPP) => run_to_store(path, st.st_ino, origin).unwrap_or(false),
        Err(_) => false,
    }
}

/// `record_run`'s fallback: the entry `path` (its parent opened without
/// following links), if it is still the inode `ino`.
fn run_to_store(path: &Path, ino: u64, origin: Origin) -> Option<bool> {
    let parent = crate::root::Root::open_exact(path.parent()?).ok()?;
    let name = path.file_name()?;
    let (fd, now) = entry(parent.fd(), name).ok()?;
    if now != ino {
        return Some(false);
    }
    let (_, born) = store::identity(fd.as_fd()).ok()?;
    let store = Store::open(&store_path(None)).ok()?;
    let written = store
        .put(parent.fd(), vec![(name.as_bytes().to_vec(), born, origin)])
        .ok()?;
    Some(written.first() == Some(&Written::Recorded))
}

fn now_ms() -> i64 {
    crate::clock::now_ms() as i64
}
