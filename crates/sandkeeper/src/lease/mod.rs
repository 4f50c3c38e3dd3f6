//! The lease protocol (v1): how a sandbox says "I am in use" so that a
//! garbage collector can trust it.
//!
//! A *managed* sandbox is a directory that carries a lease:
//!
//! - **a lock**: the owner holds `flock(LOCK_SH)` on an open descriptor of the
//!   directory itself for as long as the sandbox lives. The kernel drops it
//!   when the owner dies by any means (exit, panic, SIGKILL, OOM kill), so
//!   *lock free = owner gone*, with no pid guessing and no pid-reuse risk.
//!   `systemd-tmpfiles --clean` (v242+) skips locked directories too.
//! - **a record**: the file [`LEASE_FILE`] inside the directory, one line of
//!   JSON ([`LeaseRecord`]) saying who made the sandbox, where and when.
//!
//! A sandbox appears already locked: it is made under a temporary name
//! (prefix [`NEW_PREFIX`]), opened, locked, its record written, then renamed
//! into place (a rename keeps the inode, so it keeps the lock).
//!
//! To [`probe`] a directory, open it and try `flock(LOCK_EX|LOCK_NB)`:
//! success means no owner, and the prober now holds the lock ([`Claim`]) so it
//! can remove the directory without racing a second prober or a creator that
//! wants to reclaim the same name.
//!
//! Readers that only report ([`look_at`]: a scan, a dry run) take no lock:
//! they read `/proc/locks` once ([`Locks`]) and match each directory's
//! device and inode against it, so a program's own `flock(LOCK_NB)` on its
//! directory never fails because a scan was looking. Only an entry about to
//! be removed is claimed.
//!
//! The full protocol, with an example in Python, is in `docs/lease-protocol.md`.
//!
//! ```
//! use sandkeeper::lease::{self, LeaseRecord, Probe};
//! # let scratch = sandkeeper::Sandbox::new()?;
//! # let root = scratch.path();
//!
//! let record = LeaseRecord::for_current_process("vm-run");
//! let lease = lease::Lease::create(root, "vm-1".as_ref(), &record, 0o700)?;
//! // While `lease` lives, the directory is live for every prober.
//! assert!(matches!(lease::probe(&root.join("vm-1"))?, Probe::Live { .. }));
//! drop(lease);
//! // Once the owner is gone, a prober can claim it.
//! assert!(matches!(lease::probe(&root.join("vm-1"))?, Probe::Free(_)));
//! # Ok::<(), sandkeeper::Error>(())
//! ```

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, IoResultExt, Result};
use crate::fs_at;

mod locks;

pub use locks::{lock_holders, Locks};
pub(crate) use locks::{LocksReading, PendingLocks};

/// The name of the lease record file inside a managed sandbox.
pub const LEASE_FILE: &str = ".sandkeeper-lease";

/// The name prefix of a sandbox that is still being created (not yet locked
/// and renamed into place).
pub const NEW_PREFIX: &str = ".sandkeeper-new-";

/// The lease protocol version this library writes.
pub const PROTOCOL_VERSION: u32 = 1;

/// Records larger than this are rejected rather than read into memory.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// Who made a sandbox, where and when: the lease record, stored as one line
/// of JSON in [`LEASE_FILE`].
///
/// Readers ignore fields they do not know, so later protocol versions can
/// add fields; the struct is `#[non_exhaustive]` for the same reason. Build
/// one with [`LeaseRecord::for_current_process`].
///
/// ```
/// use sandkeeper::lease::LeaseRecord;
///
/// let record = LeaseRecord::parse(br#"{"v":1,"pid":42,"start_ticks":7,"boot_id":"b",
///     "uid":0,"host":"h","created_ms":1,"tag":"t","future_field":true}"#)?;
/// assert_eq!(record.pid, 42);
/// # Ok::<(), sandkeeper::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LeaseRecord {
    /// Protocol version of the writer (1).
    pub v: u32,
    /// Process id of the creator.
    pub pid: u32,
    /// Start time of the creator in clock ticks since boot (field 22 of
    /// `/proc/PID/stat`); with `pid` and `boot_id` it names one process.
    pub start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id` when the record was written.
    pub boot_id: String,
    /// Real user id of the creator.
    pub uid: u32,
    /// Host name of the creator.
    pub host: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// The sandbox's tag (the name without its unique suffix).
    pub tag: String,
    /// Source location (`file:line`) of the code that made the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// The creator's command line (lossy UTF-8).
    #[serde(default)]
    pub cmd: Vec<String>,
    /// The checkout (source tree or executable) the sandbox belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkout: Option<String>,
    /// When set, the sandbox was kept on purpose (for debugging) and reapers
    /// leave it alone until this time, milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_until_ms: Option<u64>,
}

impl LeaseRecord {
    /// A record describing the calling process, tagged `tag`.
    ///
    /// Facts that cannot be read (no `/proc`) are left empty or zero; the
    /// lock, not the record, is what decides liveness.
    pub fn for_current_process(tag: &str) -> LeaseRecord {
        let me = ProcessIdentity::current();
        LeaseRecord {
            v: PROTOCOL_VERSION,
            pid: me.pid,
            start_ticks: me.start_ticks,
            boot_id: me.boot_id,
            uid: rustix::process::getuid().as_raw(),
            host: host_name(),
            created_ms: now_ms(),
            tag: tag.to_owned(),
            site: None,
            cmd: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            checkout: None,
            keep_until_ms: None,
        }
    }

    /// Sets [`LeaseRecord::site`].
    pub fn with_site(mut self, site: impl Into<String>) -> Self {
        self.site = Some(site.into());
        self
    }

    /// Sets [`LeaseRecord::checkout`].
    pub fn with_checkout(mut self, checkout: impl Into<String>) -> Self {
        self.checkout = Some(checkout.into());
        self
    }

    /// Parses a record from the bytes of a lease file.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidLease`] when the bytes are empty, not UTF-8 JSON,
    /// truncated, lack a required field, or carry version 0.
    pub fn parse(bytes: &[u8]) -> Result<LeaseRecord> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(Error::new(ErrorKind::InvalidLease, "lease record is empty"));
        }
        let record: LeaseRecord = serde_json::from_slice(bytes).map_err(|e| {
            Error::new(
                ErrorKind::InvalidLease,
                format!("lease record is not valid JSON for protocol v1 ({e})"),
            )
        })?;
        if record.v == 0 {
            return Err(Error::new(
                ErrorKind::InvalidLease,
                "lease record has version 0; valid versions start at 1",
            ));
        }
        Ok(record)
    }

    /// The record as one line of JSON, newline included.
    pub fn to_line(&self) -> String {
        // Serializing a struct of strings and integers cannot fail.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// Whether the record's creator is still running, judged from `/proc`
    /// (the fallback for when the directory itself cannot be locked).
    ///
    /// # Platform behavior
    ///
    /// Without `/proc` (non-Linux) the answer is [`OwnerStatus::Unknown`].
    pub fn owner_status(&self) -> OwnerStatus {
        if self.host != host_name() {
            return OwnerStatus::Unknown;
        }
        let current_boot = boot_id();
        if !self.boot_id.is_empty() && !current_boot.is_empty() && self.boot_id != current_boot {
            return OwnerStatus::Dead;
        }
        match process_start_ticks(self.pid) {
            Ok(ticks) if ticks == self.start_ticks => OwnerStatus::Alive,
            Ok(_) => OwnerStatus::Dead,
            Err(e) if e.kind() == io::ErrorKind::NotFound => OwnerStatus::Dead,
            Err(_) => OwnerStatus::Unknown,
        }
    }

    /// Whether the record asks reapers to keep the sandbox at time `now_ms`.
    pub fn is_kept_at(&self, now_ms: u64) -> bool {
        self.keep_until_ms.is_some_and(|until| now_ms < until)
    }
}

/// Whether the process named by a lease record is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerStatus {
    /// The same pid runs with the same start time on the same boot.
    Alive,
    /// The pid is gone, was reused, or the machine rebooted.
    Dead,
    /// It could not be told (another host, no access to `/proc`).
    Unknown,
}

/// A process named so that pid reuse cannot fool us: pid, start time and
/// boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessIdentity {
    pub(crate) pid: u32,
    pub(crate) start_ticks: u64,
    pub(crate) boot_id: String,
}

impl ProcessIdentity {
    fn current() -> ProcessIdentity {
        let pid = std::process::id();
        ProcessIdentity {
            pid,
            start_ticks: process_start_ticks(pid).unwrap_or(0),
            boot_id: boot_id(),
        }
    }
}

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
pub(crate) enum Created {
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
    meta: fs_at::Meta,
    /// Read on the first [`Claim::record`], through `dir`: the reaper,
    /// which removes what it claims, never asks, and a `statx` of a file
    /// that is not there is most of a claim's cost.
    record: std::sync::OnceLock<RecordState>,
}

/// The lease record of a directory as found on disk.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecordState {
    /// No [`LEASE_FILE`]: the directory is unmanaged.
    Missing,
    /// A valid record.
    Valid(LeaseRecord),
    /// A record that could not be read or parsed (the error says why).
    Invalid(Error),
}

impl RecordState {
    /// The record, if it was valid.
    pub fn record(&self) -> Option<&LeaseRecord> {
        match self {
            RecordState::Valid(r) => Some(r),
            _ => None,
        }
    }
}

impl Claim {
    /// The directory's path as given to the probe.
    pub fn path(&self) -> &Path {
        &self.path
    }

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
    pub(crate) fn into_dir(self) -> (OwnedFd, fs_at::Meta) {
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
    Dir(OwnedFd, fs_at::Meta),
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
    let stat = fs_at::fstat(dir.as_fd(), fs_at::NoStatx::Fstatat)
        .with_path("cannot inspect sandbox", path)?;
    Ok(Opened::Dir(dir, stat))
}

/// [`fs_at::open_dir_unmounted`]—opens the directory `name` unless another
/// filesystem is mounted on it (`EXDEV`): the kernel refuses before asking
/// the mounted filesystem anything, so a dead FUSE or network mount cannot
/// block here. A mount point is in use by definition, and its lease would
/// not be the entry's anyway.
fn entry_on_same_mount(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    let name = CString::new(name.as_bytes()).map_err(|_| Errno::INVAL)?;
    fs_at::open_dir_unmounted(parent, &name)
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
pub(crate) fn judge(identity: (u64, u64), record: RecordState, locks: &Locks) -> Look {
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
    match read_record_file(dir, LEASE_FILE.as_ref()) {
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
    Ok(read_record_file(parent, &rel)?.and_then(|b| LeaseRecord::parse(&b).ok()))
}

/// Reads a small regular file, refusing symlinks, FIFOs, devices and
/// sockets. `Ok(None)` when it does not exist.
fn read_record_file(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<Vec<u8>>> {
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

/// Field 22 (`starttime`) of `/proc/PID/stat`.
pub(crate) fn process_start_ticks(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat"))?;
    parse_start_ticks(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("cannot parse /proc/{pid}/stat"),
        )
    })
}

/// Parses `starttime` out of a `/proc/PID/stat` line. The command name
/// (field 2) may contain spaces and parentheses, so fields are counted from
/// the last `)`.
fn parse_start_ticks(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After ')' come field 3 (state) onwards; starttime is field 22.
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The random part of a sandbox's name: 8 lowercase letters and digits
/// with a digit somewhere before a letter, so that even a lone sandbox reads
/// as random to the name families (`run-true-togrbepj` could be a word,
/// and `run-true-build123` a word and a counter; `run-true-to9rbepj` is
/// neither). Redrawn until it fits: about two draws in three do.
pub(crate) fn name_suffix() -> String {
    loop {
        let suffix = random_suffix(8);
        let b = suffix.as_bytes();
        let first_digit = b.iter().position(u8::is_ascii_digit);
        if first_digit.is_some_and(|i| b[i..].iter().any(u8::is_ascii_lowercase)) {
            return suffix;
        }
    }
}

/// `n` random lowercase letters and digits.
pub(crate) fn random_suffix(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..n)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// `open(path, O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC)`.
pub(crate) fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// `openat(dir, name, O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC)`.
pub(crate) fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Splits an absolute or relative path into its parent and last name.
pub(crate) fn split_parent(path: &Path) -> Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            Ok((parent, name))
        }
        _ => Err(Error::new(
            ErrorKind::InvalidInput,
            "path has no final name (it is `/`, ends in `..`, or is empty)",
        )
        .at(path)),
    }
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
pub(crate) fn create_at(
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
        rustix::fs::fchmod(&dir, Mode::from_raw_mode(mode & 0o7777))
            .with_path("cannot set permissions of new sandbox", || {
                parent_path.join(&tmp)
            })?;
        write_new_file(
            dir.as_fd(),
            LEASE_FILE.as_ref(),
            record.to_line().as_bytes(),
        )
        .with_path("cannot write lease record", || {
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
                dev: st.st_dev,
                ino: st.st_ino,
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
pub(crate) fn unusable_root(errno: Errno, root: &Path) -> Error {
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
pub(crate) fn unusable_root_at(errno: Errno, dir: BorrowedFd<'_>, root: &Path) -> Error {
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

/// `renameat2(from, to, RENAME_NOREPLACE)` within one directory.
/// `Ok(false)` when `to` exists.
fn rename_noreplace(dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> io::Result<bool> {
    match rustix::fs::renameat_with(dir, from, dir, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) => Ok(false),
        // Filesystems without RENAME_NOREPLACE (EINVAL) and kernels without
        // renameat2 (NOSYS): check, then rename. The window only lets us
        // replace an *empty* directory created in between, since rename
        // refuses to replace a non-empty one (ENOTEMPTY/EEXIST).
        Err(Errno::INVAL | Errno::NOSYS) => {
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
        Err(e) => Err(e.into()),
    }
}

/// Whether `name` is an internal name of the protocol (a sandbox being
/// created) rather than a sandbox.
pub fn is_internal_name(name: &OsStr) -> bool {
    name.as_bytes().starts_with(NEW_PREFIX.as_bytes())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_lone_sandbox_name_reads_as_random() {
        fastrand::seed(17);
        for tag in ["run-true", "live", "cli-scan-rs-42", "tests-it_works-7"] {
            for _ in 0..500 {
                let name = format!("{tag}-{}", name_suffix());
                let families = crate::pattern::group(&[name.as_str()]);
                assert_eq!(families[0].pattern, format!("{tag}-*"), "{name}");
            }
        }
    }

    use super::*;

    #[test]
    fn parse_start_ticks_cases() {
        let cases: &[(&[u8], Option<u64>)] = &[
            (
                b"123 (cat) R 1 123 123 0 -1 4194304 90 0 0 0 0 0 0 0 20 0 1 0 98765 5000 100",
                Some(98765),
            ),
            (
                b"7 (a) b) (c) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0",
                Some(42),
            ),
            (b"7 (short) S 1", None),
            (b"no parenthesis", None),
        ];
        for (line, want) in cases {
            assert_eq!(
                parse_start_ticks(line),
                *want,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn record_parse_rejects_bad_input() {
        let cases: &[(&str, &[u8])] = &[
            ("empty", b""),
            ("blank", b"  \n"),
            ("not json", b"hello"),
            ("truncated", br#"{"v":1,"pid":4"#),
            ("missing fields", br#"{"v":1}"#),
            ("version zero", br#"{"v":0,"pid":1,"start_ticks":1,"boot_id":"","uid":0,"host":"","created_ms":0,"tag":""}"#),
            ("wrong type", br#"{"v":"1","pid":1,"start_ticks":1,"boot_id":"","uid":0,"host":"","created_ms":0,"tag":""}"#),
        ];
        for (name, bytes) in cases {
            let err = LeaseRecord::parse(bytes).expect_err(name);
            assert_eq!(err.kind(), ErrorKind::InvalidLease, "{name}");
        }
    }

    #[test]
    fn record_round_trips_and_ignores_unknown_fields() {
        let record = LeaseRecord::for_current_process("t").with_site("a.rs:1");
        let line = record.to_line();
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        assert_eq!(LeaseRecord::parse(line.as_bytes()).unwrap(), record);
        let mut value: serde_json::Value = serde_json::from_str(&line).unwrap();
        value["v"] = 2.into();
        value["added_in_v2"] = serde_json::json!({"x": [1, 2]});
        let parsed = LeaseRecord::parse(value.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.v, 2);
        assert_eq!(parsed.pid, record.pid);
    }

    #[test]
    fn current_process_is_alive_and_a_fake_one_is_not() {
        let record = LeaseRecord::for_current_process("t");
        assert_eq!(record.owner_status(), OwnerStatus::Alive);
        let mut reused = record.clone();
        reused.start_ticks += 1;
        assert_eq!(reused.owner_status(), OwnerStatus::Dead);
        let mut rebooted = record.clone();
        rebooted.boot_id = "00000000-0000-0000-0000-000000000000".into();
        assert_eq!(rebooted.owner_status(), OwnerStatus::Dead);
        let mut elsewhere = record;
        elsewhere.host = "another-host.invalid".into();
        assert_eq!(elsewhere.owner_status(), OwnerStatus::Unknown);
    }

    #[test]
    fn keep_until() {
        let mut record = LeaseRecord::for_current_process("t");
        assert!(!record.is_kept_at(5));
        record.keep_until_ms = Some(10);
        assert!(record.is_kept_at(9));
        assert!(!record.is_kept_at(10));
    }

    #[test]
    fn public_types_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Lease>();
        check::<Claim>();
        check::<Probe>();
        check::<Look>();
        check::<Locks>();
        check::<Hold>();
        check::<LeaseRecord>();
    }
}
