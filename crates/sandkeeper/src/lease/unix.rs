//! The lease on Unix: `flock` on the sandbox directory itself, every call
//! relative to a descriptor (see the [module docs](super)).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
#[cfg(target_os = "linux")]
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use super::{
    lock_holders, LeaseRecord, Locks, OwnerStatus, RecordState, LEASE_FILE, MAX_RECORD_BYTES,
    NEW_PREFIX,
};
use crate::error::{Error, ErrorKind, IoResultExt, Result};
#[cfg(target_os = "linux")]
use crate::fs_at;
use crate::names::{random_suffix, split_parent};

/// The owner's side of a lease: a shared lock on the sandbox directory,
/// held until this value is dropped.
///
/// ```
/// use sandkeeper::lease::{Lease, LeaseRecord};
/// # let scratch = sandkeeper::Sandbox::new()?;
/// let lease = Lease::create(scratch.path(), "job-7".as_ref(),
///     &LeaseRecord::for_current_process("job"), 0o700)?;
/// assert!(lease.path().join(".sandkeeper-lease").is_file());
/// # Ok::<(), sandkeeper::Error>(())
/// ```
#[derive(Debug)]
pub struct Lease {
    dir: OwnedFd,
    path: PathBuf,
    record: LeaseRecord,
    dev: u64,
    ino: u64,
}

/// The result of trying to create a leased directory under a fixed name.
#[allow(clippy::large_enum_variant)] // returned once and matched at once
#[doc(hidden)]
pub enum Created {
    /// The directory was created, locked and renamed into place.
    New(Lease),
    /// Something already has that name; nothing was changed.
    NameTaken,
}

impl Lease {
    /// Creates the directory `parent/name`, already locked, with `record`
    /// written inside and permissions `mode`.
    ///
    /// The directory is made under a temporary name, locked, filled with
    /// the record and then renamed into place without replacing anything,
    /// so no prober ever sees it unlocked or without its record.
    ///
    /// # Errors
    ///
    /// An [`ErrorKind::Io`] error whose io kind is `AlreadyExists` when
    /// `name` exists; any other failure to create, lock, write or rename,
    /// with the path. On error nothing is left behind.
    pub fn create(parent: &Path, name: &OsStr, record: &LeaseRecord, mode: u32) -> Result<Lease> {
        let parent_fd = open_dir(parent).with_path("cannot open directory", || parent)?;
        match create_at(parent_fd.as_fd(), parent, name, record, mode)? {
            Created::New(lease) => Ok(lease),
            Created::NameTaken => Err(Error::io(
                "cannot create sandbox",
                io::Error::from(io::ErrorKind::AlreadyExists),
            )
            .at(parent.join(name))),
        }
    }

    /// The absolute path of the leased directory, as it was created.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The record written when the lease was created (or last updated).
    pub fn record(&self) -> &LeaseRecord {
        &self.record
    }

    /// The open, locked directory.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Device and inode of the leased directory, fixed at creation.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// Replaces the record (atomically: a temporary file renamed over it).
    ///
    /// # Errors
    ///
    /// When the new record cannot be written, with the path.
    pub fn update_record(&mut self, record: LeaseRecord) -> Result<()> {
        let tmp = format!("{LEASE_FILE}.{}", random_suffix(8));
        write_new_file(self.dir.as_fd(), tmp.as_ref(), record.to_line().as_bytes())
            .with_path("cannot write lease record", || self.path.join(&tmp))?;
        rustix::fs::renameat(&self.dir, tmp.as_str(), &self.dir, LEASE_FILE)
            .with_path("cannot replace lease record", || self.path.join(LEASE_FILE))?;
        self.record = record;
        Ok(())
    }

    /// Deletes the record, so that the directory is no longer a managed
    /// sandbox (the lock is released when the lease is dropped).
    #[doc(hidden)]
    pub fn forget_record(&mut self) -> io::Result<()> {
        rustix::fs::unlinkat(&self.dir, LEASE_FILE, AtFlags::empty()).map_err(Into::into)
    }

    /// On Windows, closes the record file so that the directory can be
    /// removed; on Unix nothing: the lock is on the directory.
    #[doc(hidden)]
    pub fn release_record(&mut self) {}

    /// Lets child processes inherit the locked descriptor, so the lease
    /// stays held while any of them runs (used by `sandkeeper run`).
    ///
    /// Returns the descriptor number the children will see.
    ///
    /// # Errors
    ///
    /// When `fcntl(F_SETFD)` fails.
    pub fn inherit_into_children(&self) -> Result<BorrowedFd<'_>> {
        rustix::io::fcntl_setfd(&self.dir, rustix::io::FdFlags::empty())
            .with_path("cannot clear close-on-exec", || self.path.clone())?;
        Ok(self.dir.as_fd())
    }
}

/// A shared hold on someone else's lease: while it lives, the sandbox is
/// live for every prober, even after its creator exits.
///
/// This is how a cooperating process (a VM that outlives its launcher)
/// keeps a sandbox alive. See [`hold`].
#[derive(Debug)]
pub struct Hold {
    _dir: OwnedFd,
}

/// Takes a shared hold (`flock(LOCK_SH|LOCK_NB)`) on the sandbox at `path`.
///
/// ```
/// # let scratch = sandkeeper::Sandbox::new()?;
/// use sandkeeper::lease;
/// let hold = lease::hold(scratch.path())?;
/// # drop(hold);
/// # Ok::<(), sandkeeper::Error>(())
/// ```
///
/// # Errors
///
/// [`ErrorKind::Held`] when a prober holds the exclusive lock (it is about
/// to remove the directory); an io error when `path` is missing, not a
/// directory, or a symlink.
pub fn hold(path: &Path) -> Result<Hold> {
    let dir = open_dir(path).with_path("cannot open sandbox", || path)?;
    match rustix::fs::flock(&dir, FlockOperation::NonBlockingLockShared) {
        Ok(()) => Ok(Hold { _dir: dir }),
        Err(Errno::WOULDBLOCK) => {
            Err(Error::new(ErrorKind::Held, "sandbox is being removed by a reaper").at(path))
        }
        Err(e) => Err(e).with_path("cannot lock sandbox", || path),
    }
}

/// What a probe found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Probe {
    /// Some process holds the lock: the sandbox is live and must not be
    /// touched.
    Live {
        /// Pids that hold a lock on it, from `/proc/locks` (may be empty
        /// when `/proc/locks` is unreadable or the holder is in another pid
        /// namespace).
        holders: Vec<u32>,
        /// The record, if it could be read.
        record: Option<LeaseRecord>,
    },
    /// Nobody held the lock; the prober holds it exclusively now.
    Free(Claim),
    /// The directory could not be opened (permissions); liveness was
    /// judged from the record's pid and start time instead.
    Unopenable {
        /// Why the directory could not be opened.
        error: io::Error,
        /// The record, if it could be read.
        record: Option<LeaseRecord>,
        /// The verdict of the record fallback.
        owner: OwnerStatus,
    },
    /// Another filesystem is mounted on the entry: it is in use by
    /// definition, and was not opened (a dead FUSE or network filesystem
    /// would not answer).
    MountPoint,
}

/// An exclusive lock on a directory whose owner is gone. While the claim
/// lives, no creator and no other prober can take the directory, so the
/// holder can inspect and remove it safely. Dropping it releases the lock.
#[derive(Debug)]
pub struct Claim {
    dir: OwnedFd,
    path: PathBuf,
    dev: u64,
    ino: u64,
    /// What `statx` on `dir` said when it was claimed (the mount id
    /// included, where the kernel reports it): what a removal that takes
    /// the descriptor over ([`Claim::into_dir`]) checks it by.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    meta: EntryMeta,
    /// Read on the first [`Claim::record`], through `dir`: the reaper,
    /// which removes what it claims, never asks, and a `statx` of a file
    /// that is not there is most of a claim's cost.
    record: std::sync::OnceLock<RecordState>,
}

impl Claim {
    /// The directory's path as given to the probe.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// On Windows, lets go of the record so that the directory can be
    /// removed; on Unix nothing: the lock is on the directory.
    #[doc(hidden)]
    pub fn release_record(&mut self) {}

    /// The open, exclusively locked directory.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Device and inode of the claimed directory.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// The lease record found in the directory (read through the locked
    /// descriptor on the first call).
    pub fn record(&self) -> &RecordState {
        self.record
            .get_or_init(|| read_record(self.dir.as_fd(), &self.path))
    }

    /// The open, locked directory and what `statx` said of it when it was
    /// claimed, for a removal that moves this very inode (the reaper's:
    /// `remove::QuarantineBatch::quarantine_claimed`), so that it does not
    /// open the entry's name a second time. The lock stays with the
    /// descriptor: it is released when the last copy of it is closed.
    #[doc(hidden)]
    #[cfg(target_os = "linux")]
    pub fn into_dir(self) -> (OwnedFd, fs_at::Meta) {
        (self.dir, self.meta)
    }
}

/// Probes the directory at `path`: is its lease held?
///
/// # Errors
///
/// An io error (with the path) when `path` does not exist, is a symlink or
/// is not a directory.
pub fn probe(path: &Path) -> Result<Probe> {
    let (parent, name) = split_parent(path)?;
    let parent_fd = open_dir(parent).with_path("cannot open directory", || parent)?;
    probe_at(parent_fd.as_fd(), parent, name)
}

/// An entry opened for a [`probe_at`] or a [`look_at`], or, when it
/// cannot be opened, what its record says instead.
enum Opened {
    /// Open, with what `statx` (`fstat` where there is none) says of it.
    Dir(OwnedFd, EntryMeta),
    /// Another filesystem is mounted on the entry: not opened.
    MountPoint,
    Unopenable {
        error: io::Error,
        record: Option<LeaseRecord>,
        owner: OwnerStatus,
    },
}

/// Opens the entry `name` of `parent` without following a symlink, for a
/// probe or a look, and never when it is a mount point
/// ([`entry_on_same_mount`]).
fn open_entry(parent: BorrowedFd<'_>, parent_path: &Path, name: &OsStr) -> Result<Opened> {
    let path = || parent_path.join(name);
    let dir = match entry_on_same_mount(parent, name) {
        Ok(dir) => dir,
        Err(Errno::XDEV) => return Ok(Opened::MountPoint),
        Err(Errno::ACCESS | Errno::PERM) => {
            let record = read_record_beneath(parent, name).ok().flatten();
            let owner = record
                .as_ref()
                .map_or(OwnerStatus::Unknown, LeaseRecord::owner_status);
            return Ok(Opened::Unopenable {
                error: io::Error::from(Errno::ACCESS),
                record,
                owner,
            });
        }
        Err(Errno::LOOP) => {
            return Err(
                Error::new(ErrorKind::InvalidInput, "refusing to probe a symlink").at(path()),
            )
        }
        Err(e) => return Err(e).with_path("cannot open sandbox", path),
    };
    let stat = entry_meta(dir.as_fd()).with_path("cannot inspect sandbox", path)?;
    Ok(Opened::Dir(dir, stat))
}

/// What a probe learns of the entry it opened: on Linux everything
/// `statx` says (the engine's remover checks a claimed entry by it),
/// elsewhere its identity.
#[cfg(target_os = "linux")]
type EntryMeta = fs_at::Meta;

#[cfg(target_os = "linux")]
fn entry_meta(dir: BorrowedFd<'_>) -> rustix::io::Result<EntryMeta> {
    fs_at::fstat(dir, fs_at::NoStatx::Fstatat)
}

/// See the Linux one.
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Copy)]
struct EntryMeta {
    id: EntryId,
}

#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Copy)]
struct EntryId {
    dev: u64,
    ino: u64,
}

#[cfg(not(target_os = "linux"))]
fn entry_meta(dir: BorrowedFd<'_>) -> rustix::io::Result<EntryMeta> {
    let st = rustix::fs::fstat(dir)?;
    Ok(EntryMeta {
        id: EntryId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        },
    })
}

/// [`fs_at::open_dir_unmounted`]—opens the directory `name` unless another
/// filesystem is mounted on it (`EXDEV`): the kernel refuses before asking
/// the mounted filesystem anything, so a dead FUSE or network mount cannot
/// block here. A mount point is in use by definition, and its lease would
/// not be the entry's anyway.
#[cfg(target_os = "linux")]
fn entry_on_same_mount(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    let name = std::ffi::CString::new(name.as_bytes()).map_err(|_| Errno::INVAL)?;
    fs_at::open_dir_unmounted(parent, &name)
}

/// Without `openat2` and `statx`: opens the directory `name` (never
/// through a symlink), then refuses it (`EXDEV`) when it is on another
/// device than `parent`.
#[cfg(not(target_os = "linux"))]
fn entry_on_same_mount(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    let dir = open_dir_at(parent, name)?;
    if rustix::fs::fstat(&dir)?.st_dev != rustix::fs::fstat(parent)?.st_dev {
        return Err(Errno::XDEV);
    }
    Ok(dir)
}

/// Probes the entry `name` of the open directory `parent` (whose path,
/// for messages, is `parent_path`).
///
/// # Errors
///
/// As [`probe`].
pub fn probe_at(parent: BorrowedFd<'_>, parent_path: &Path, name: &OsStr) -> Result<Probe> {
    let path = || parent_path.join(name);
    let (dir, stat) = match open_entry(parent, parent_path, name)? {
        Opened::Dir(dir, stat) => (dir, stat),
        Opened::MountPoint => return Ok(Probe::MountPoint),
        Opened::Unopenable {
            error,
            record,
            owner,
        } => {
            return Ok(Probe::Unopenable {
                error,
                record,
                owner,
            })
        }
    };
    match rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Probe::Free(Claim {
            record: std::sync::OnceLock::new(),
            dir,
            path: path(),
            dev: stat.id.dev,
            ino: stat.id.ino,
            meta: stat,
        })),
        Err(Errno::WOULDBLOCK) => Ok(Probe::Live {
            holders: lock_holders(stat.id.dev, stat.id.ino).unwrap_or_default(),
            record: read_record(dir.as_fd(), &path()).record().cloned(),
        }),
        Err(e) => Err(e).with_path("cannot lock sandbox", path),
    }
}

/// What a look-only probe ([`look_at`]) found. Unlike [`Probe`], nothing
/// is locked: a look tells live from free by [`Locks`], a snapshot of
/// `/proc/locks`, so it never disturbs the owner's own `flock` calls.
#[derive(Debug)]
#[non_exhaustive]
pub enum Look {
    /// `/proc/locks` lists a lock on the directory: live.
    Live {
        /// Pids that hold a lock on it (empty when `/proc/locks` names none,
        /// such as for open file description locks).
        holders: Vec<u32>,
        /// The record, if it could be read.
        record: Option<LeaseRecord>,
    },
    /// `/proc/locks` lists no lock on the directory (when the snapshot was
    /// taken): its owner is gone. Nothing is held; a caller that wants to
    /// remove it must still [`probe_at`] it and remove only with the claim.
    Free {
        /// Device and inode of the directory that was looked at.
        identity: (u64, u64),
        /// The lease record found in the directory.
        record: RecordState,
    },
    /// The directory could not be opened (permissions); liveness was
    /// judged from the record's pid and start time instead.
    Unopenable {
        /// Why the directory could not be opened.
        error: io::Error,
        /// The record, if it could be read.
        record: Option<LeaseRecord>,
        /// The verdict of the record fallback.
        owner: OwnerStatus,
    },
    /// Another filesystem is mounted on the entry: it is in use by
    /// definition, and was not opened.
    MountPoint,
}

/// Looks at the entry `name` of the open directory `parent` (whose path,
/// for messages, is `parent_path`) without locking it: live or free
/// according to `locks`, and its record, read through the directory's own
/// descriptor (`O_RDONLY|O_DIRECTORY|O_NOFOLLOW`).
///
/// For read-only callers (a scan, a dry run). To remove a directory, or
/// to reuse its name, use [`probe_at`] and keep its [`Claim`].
///
/// # Errors
///
/// As [`probe`].
pub fn look_at(
    parent: BorrowedFd<'_>,
    parent_path: &Path,
    name: &OsStr,
    locks: &Locks,
) -> Result<Look> {
    let path = || parent_path.join(name);
    let (dir, stat) = match open_entry(parent, parent_path, name)? {
        Opened::Dir(dir, stat) => (dir, stat),
        Opened::MountPoint => return Ok(Look::MountPoint),
        Opened::Unopenable {
            error,
            record,
            owner,
        } => {
            return Ok(Look::Unopenable {
                error,
                record,
                owner,
            })
        }
    };
    Ok(look_at_open(
        dir.as_fd(),
        &path(),
        (stat.id.dev, stat.id.ino),
        locks,
    ))
}

/// [`look_at`] for a directory the caller has open already: `dir`, the
/// inode `identity` (device and inode, as the caller's `statx` of it said),
/// at `dir_path` (for messages). Never [`Look::Unopenable`] or
/// [`Look::MountPoint`]: the caller opened it, on its parent's mount.
///
/// ```
/// use std::os::fd::AsFd;
/// use std::os::unix::fs::MetadataExt;
/// use sandkeeper::lease::{self, Look, Locks, RecordState};
/// let sandbox = sandkeeper::Sandbox::new()?;
/// let dir = std::fs::File::open(sandbox.path())?;
/// let st = dir.metadata()?;
/// let locks = Locks::read()?;
/// match lease::look_at_open(dir.as_fd(), sandbox.path(), (st.dev(), st.ino()), &locks) {
///     // Its creator (this process) holds its lock.
///     Look::Live { record, .. } => assert!(record.is_some()),
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn look_at_open(
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    identity: (u64, u64),
    locks: &Locks,
) -> Look {
    judge(identity, read_record(dir, dir_path), locks)
}

/// What [`look_at_open`] tells of the directory `identity` whose record
/// was read as `record`: live when `locks` lists a lock on it. For a
/// caller that reads the record before it has the snapshot (the scan's
/// walk does, while `/proc/locks` is still being read).
#[doc(hidden)]
pub fn judge(identity: (u64, u64), record: RecordState, locks: &Locks) -> Look {
    match locks.holders(identity.0, identity.1) {
        Some(holders) => Look::Live {
            holders: holders.to_vec(),
            record: record.record().cloned(),
        },
        None => Look::Free { identity, record },
    }
}

/// Reads the lease record of an open directory.
///
/// Never opens anything but a regular file, and never follows a symlink.
pub fn read_record(dir: BorrowedFd<'_>, dir_path: &Path) -> RecordState {
    let owner = match rustix::fs::fstat(dir) {
        Ok(st) => st.st_uid,
        Err(e) => {
            return RecordState::Invalid(
                Error::io("cannot inspect sandbox", e.into()).at(dir_path.to_owned()),
            )
        }
    };
    match read_record_file(dir, LEASE_FILE.as_ref(), owner) {
        Ok(None) => RecordState::Missing,
        Ok(Some(bytes)) => match LeaseRecord::parse(&bytes) {
            Ok(r) => RecordState::Valid(r),
            Err(e) => RecordState::Invalid(e.at(dir_path.join(LEASE_FILE))),
        },
        Err(e) => RecordState::Invalid(
            Error::io("cannot read lease record", e).at(dir_path.join(LEASE_FILE)),
        ),
    }
}

/// Reads `name/LEASE_FILE` relative to `parent` without opening `name`
/// itself (for directories that are searchable but not readable).
fn read_record_beneath(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<LeaseRecord>> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Ok(None);
    }
    let mut rel = OsString::from(name);
    rel.push("/");
    rel.push(LEASE_FILE);
    Ok(read_record_file(parent, &rel, st.st_uid)?.and_then(|b| LeaseRecord::parse(&b).ok()))
}

/// Reads a small regular file, refusing symlinks, FIFOs, devices and
/// sockets, and one not owned by `owner` (the directory's). `Ok(None)`
/// when it does not exist.
fn read_record_file(dir: BorrowedFd<'_>, name: &OsStr, owner: u32) -> io::Result<Option<Vec<u8>>> {
    // Look before opening: a FIFO, socket or device node is never opened.
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {}
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "lease record is not a regular file",
            ))
        }
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // O_NONBLOCK: should a FIFO have been swapped in after the check, the
    // open still returns at once instead of waiting for a writer.
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "lease record is not a regular file",
        ));
    }
    // The creator makes the directory and its record: a record someone
    // else wrote into a directory they could write (a 0777 one) vouches
    // for nothing, and must not make that directory a proven orphan.
    if st.st_uid != owner {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "lease record is not owned by the directory's owner",
        ));
    }
    if st.st_size as u64 > MAX_RECORD_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("lease record is larger than {MAX_RECORD_BYTES} bytes"),
        ));
    }
    let mut bytes = Vec::with_capacity(st.st_size as usize);
    File::from(fd)
        .take(MAX_RECORD_BYTES)
        .read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Opens a directory that sandboxes are made in (following symlinks: the
/// caller chose it).
#[doc(hidden)]
pub fn open_root_dir(root: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| unusable_root(e, root))
}

/// `open(path, O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC)`.
#[doc(hidden)]
pub fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// `openat(dir, name, O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC)`.
#[doc(hidden)]
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Creates `name` with `bytes` and mode 0644, failing if it exists.
fn write_new_file(dir: BorrowedFd<'_>, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    File::from(fd).write_all(bytes)
}

/// The protocol's create step: make `name` in `parent` already locked and
/// carrying `record`, or report that the name is taken.
#[doc(hidden)]
pub fn create_at(
    parent: BorrowedFd<'_>,
    parent_path: &Path,
    name: &OsStr,
    record: &LeaseRecord,
    mode: u32,
) -> Result<Created> {
    let final_path = || parent_path.join(name);
    let (tmp, dir) = make_temp_dir(parent, parent_path)?;
    let result = (|| {
        rustix::fs::flock(&dir, FlockOperation::LockShared)
            .with_path("cannot lock new sandbox", || parent_path.join(&tmp))?;
        // mkdir applied the umask; the caller asked for exactly `mode`.
        rustix::fs::fchmod(&dir, Mode::from_raw_mode((mode & 0o7777) as _))
            .with_path("cannot set permissions of new sandbox", || {
                parent_path.join(&tmp)
            })?;
        let written = write_new_file(
            dir.as_fd(),
            LEASE_FILE.as_ref(),
            record.to_line().as_bytes(),
        );
        // A filesystem with inodes but no blocks left fails here, not at
        // the mkdir: the same full root for the caller.
        let full = (written.as_ref().err())
            .and_then(Errno::from_io_error)
            .filter(|&e| e == Errno::NOSPC || e == Errno::DQUOT);
        if let Some(errno) = full {
            return Err(unusable_root(errno, parent_path));
        }
        written.with_path("cannot write lease record", || {
            parent_path.join(&tmp).join(LEASE_FILE)
        })?;
        rename_noreplace(parent, &tmp, name)
            .with_path("cannot rename new sandbox into place", final_path)
    })();
    match result {
        Ok(true) => {
            let st = rustix::fs::fstat(&dir).with_path("cannot inspect new sandbox", final_path)?;
            Ok(Created::New(Lease {
                dir,
                path: final_path(),
                record: record.clone(),
                dev: st.st_dev as u64,
                ino: st.st_ino as u64,
            }))
        }
        Ok(false) => {
            discard_temp_dir(parent, dir.as_fd(), &tmp);
            Ok(Created::NameTaken)
        }
        Err(e) => {
            discard_temp_dir(parent, dir.as_fd(), &tmp);
            Err(e)
        }
    }
}

/// Makes and opens `.sandkeeper-new-<random>` in `parent`, mode 0700.
fn make_temp_dir(parent: BorrowedFd<'_>, parent_path: &Path) -> Result<(OsString, OwnedFd)> {
    let mut attempts = 0;
    loop {
        let tmp = OsString::from(format!("{NEW_PREFIX}{}", random_suffix(12)));
        match rustix::fs::mkdirat(parent, &tmp, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(Errno::EXIST) if attempts < 100 => {
                attempts += 1;
                continue;
            }
            Err(e) => return Err(unusable_root_at(e, parent, parent_path)),
        }
        let dir = open_dir_at(parent, &tmp)
            .with_path("cannot open new sandbox", || parent_path.join(&tmp));
        match dir {
            Ok(dir) => return Ok((tmp, dir)),
            Err(e) => {
                let _ = rustix::fs::unlinkat(parent, &tmp, AtFlags::REMOVEDIR);
                return Err(e);
            }
        }
    }
}

/// The error for a sandbox root we cannot create directories in, saying
/// which of the usual reasons applies.
#[doc(hidden)]
pub fn unusable_root(errno: Errno, root: &Path) -> Error {
    let what = match errno {
        Errno::NOENT => "sandbox root does not exist",
        Errno::NOTDIR => "sandbox root is not a directory",
        Errno::ACCESS | Errno::PERM | Errno::ROFS => "sandbox root is not writable",
        Errno::NOSPC | Errno::DQUOT => "sandbox root's filesystem is full",
        _ => "cannot create a sandbox in root",
    };
    Error::new(ErrorKind::UnusableRoot, what)
        .at(root)
        .with_source(errno.into())
        .with_hint("pass a writable directory as the root, or set SANDKEEPER_ROOT or TMPDIR")
}

/// Like [`unusable_root`], for a root that is open as `dir` and in which
/// `mkdirat` failed: a root on a special filesystem (`/proc`, `/sys`, a
/// cgroup tree …) says so, whatever the errno (procfs answers `ENOENT`,
/// which would read "does not exist"), and a root removed meanwhile says
/// that.
#[doc(hidden)]
pub fn unusable_root_at(errno: Errno, dir: BorrowedFd<'_>, root: &Path) -> Error {
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)] // the type varies by target
    let special = rustix::fs::fstatfs(dir)
        .ok()
        .and_then(|st| special_filesystem(st.f_type as u64));
    if let Some(fs) = special {
        // The errno (ENOENT from procfs) would only mislead.
        return Error::new(
            ErrorKind::UnusableRoot,
            format!(
                "sandbox root is on a special filesystem ({fs}) where no directory can be made"
            ),
        )
        .at(root)
        .with_hint(
            "pass a directory on a real filesystem (such as /tmp) as the root, or set SANDKEEPER_ROOT or TMPDIR",
        );
    }
    if errno == Errno::NOENT && rustix::fs::fstat(dir).is_ok_and(|st| st.st_nlink == 0) {
        return Error::new(ErrorKind::UnusableRoot, "sandbox root was removed")
            .at(root)
            .with_source(errno.into())
            .with_hint("pass an existing directory as the root, or set SANDKEEPER_ROOT or TMPDIR");
    }
    unusable_root(errno, root)
}

/// The name of a kernel's special filesystem, from `statfs`'s `f_type`
/// (`<linux/magic.h>`): filesystems that show kernel state, where no
/// scratch directory can be made.
fn special_filesystem(f_type: u64) -> Option<&'static str> {
    Some(match f_type {
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x1cd1 => "devpts",
        0x0027_e0eb => "cgroup",
        0x6367_7270 => "cgroup2",
        0x6462_6720 => "debugfs",
        0x7472_6163 => "tracefs",
        0x7363_6673 => "securityfs",
        0xcafe_4a11 => "bpf",
        0x6265_6570 => "configfs",
        0x6165_676c => "pstore",
        0xde5e_81e4 => "efivarfs",
        0x4249_4e4d => "binfmt_misc",
        0xf97c_ff8c => "selinuxfs",
        0x6e73_6673 => "nsfs",
        _ => return None,
    })
}

/// Best-effort removal of a temporary directory we created and filled with
/// at most the lease record (and its temporary twin).
fn discard_temp_dir(parent: BorrowedFd<'_>, dir: BorrowedFd<'_>, tmp: &OsStr) {
    let _ = rustix::fs::unlinkat(dir, LEASE_FILE, AtFlags::empty());
    let _ = rustix::fs::unlinkat(parent, tmp, AtFlags::REMOVEDIR);
}

/// `renameat2(from, to, RENAME_NOREPLACE)` within one directory
/// (`renameatx_np(RENAME_EXCL)` on macOS). `Ok(false)` when `to` exists.
fn rename_noreplace(dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> io::Result<bool> {
    #[cfg(any(target_os = "linux", target_vendor = "apple"))]
    match rustix::fs::renameat_with(dir, from, dir, to, rustix::fs::RenameFlags::NOREPLACE) {
        Ok(()) => return Ok(true),
        Err(Errno::EXIST) => return Ok(false),
        // Filesystems without RENAME_NOREPLACE (EINVAL) and kernels without
        // renameat2 (NOSYS): check, then rename, below.
        Err(Errno::INVAL | Errno::NOSYS) => {}
        Err(e) => return Err(e.into()),
    }
    // Check, then rename. The window only lets us replace an *empty*
    // directory created in between, since rename refuses to replace a
    // non-empty one (ENOTEMPTY/EEXIST). (FreeBSD has no no-replace rename.)
    match rustix::fs::statat(dir, to, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => return Ok(false),
        Err(Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    match rustix::fs::renameat(dir, from, dir, to) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST | Errno::NOTEMPTY | Errno::ISDIR | Errno::NOTDIR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
