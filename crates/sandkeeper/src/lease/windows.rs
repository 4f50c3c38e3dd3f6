//! The lease on Windows: the record file held open with a share mode that
//! refuses any exclusive open (see `docs/lease-protocol.md`, "Windows").
//!
//! Windows has no lock on a directory, and `LockFileEx` on the record would
//! forbid its own holder to rewrite it (`keep_until_ms`). A share mode does
//! what `flock` does on Unix: the owner opens [`LEASE_FILE`] for reading
//! and writing, sharing reading only; a prober asks for the file with no
//! sharing at all, which the system refuses (`ERROR_SHARING_VIOLATION`)
//! while any handle is open, and grants once every holder is gone, however
//! it died: the system closes a dead process's handles. A cooperating
//! process ([`hold`]) opens it to read, sharing reading and writing.
//!
//! What is weaker than on Unix, and said in the docs: the directory is made
//! under its final name and then given its record (a directory cannot be
//! renamed while a file in it is open), so a prober may see it for a moment
//! without one (the engine's grace period covers new directories); and
//! nothing is descriptor-relative: paths are resolved at each call (std's
//! `remove_dir_all` removes links and junctions without following them).
//! The engine, which reaps, is Linux-only; a Linux reaper never sees these
//! sandboxes.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::windows::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{LeaseRecord, RecordState, LEASE_FILE, MAX_RECORD_BYTES};
use crate::error::{Error, ErrorKind, IoResultExt, Result};
use crate::names::split_parent;

/// `GENERIC_READ`, `GENERIC_WRITE`: the access rights asked for.
const READ: u32 = 0x8000_0000;
const WRITE: u32 = 0x4000_0000;
/// `FILE_SHARE_READ`, `FILE_SHARE_WRITE`.
const SHARE_READ: u32 = 0x1;
const SHARE_WRITE: u32 = 0x2;
/// `ERROR_SHARING_VIOLATION`: someone holds the file.
const SHARING_VIOLATION: i32 = 32;

/// The owner's side of a lease: the record file, open and shared for
/// reading only, until this value is dropped.
#[derive(Debug)]
pub struct Lease {
    file: Option<File>,
    path: PathBuf,
    record: LeaseRecord,
}

/// The result of trying to create a leased directory under a fixed name.
#[allow(clippy::large_enum_variant)] // returned once and matched at once
#[doc(hidden)]
pub enum Created {
    /// The directory was created and its record written and held.
    New(Lease),
    /// Something already has that name; nothing was changed.
    NameTaken,
}

impl Lease {
    /// Creates the directory `parent/name` with `record` written inside and
    /// held (`mode` is ignored: Windows has no permission bits).
    ///
    /// # Errors
    ///
    /// An [`ErrorKind::Io`] error whose io kind is `AlreadyExists` when
    /// `name` exists; any other failure to create or write, with the path.
    pub fn create(parent: &Path, name: &OsStr, record: &LeaseRecord, mode: u32) -> Result<Lease> {
        match create_at(parent, parent, name, record, mode)? {
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

    /// Device and inode of the leased directory: not known on Windows,
    /// `(0, 0)`.
    pub fn identity(&self) -> (u64, u64) {
        (0, 0)
    }

    /// Replaces the record, in place: the lease is never let go meanwhile.
    /// After [`release_record`](Self::release_record), writes it anew and
    /// holds it again.
    ///
    /// # Errors
    ///
    /// When the new record cannot be written, with the path.
    pub fn update_record(&mut self, record: LeaseRecord) -> Result<()> {
        let path = self.path.join(LEASE_FILE);
        let line = record.to_line();
        let result = match &mut self.file {
            Some(file) => file
                .set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| file.write_all(line.as_bytes())),
            None => open_owned(&path, false).and_then(|mut file| {
                file.set_len(0)?;
                file.write_all(line.as_bytes())?;
                self.file = Some(file);
                Ok(())
            }),
        };
        result.with_path("cannot write lease record", || path)?;
        self.record = record;
        Ok(())
    }

    /// Deletes the record, so that the directory is no longer a managed
    /// sandbox (and lets the lease go).
    #[doc(hidden)]
    #[allow(clippy::disallowed_methods)] // Windows: no descriptor-relative unlink in std
    pub fn forget_record(&mut self) -> io::Result<()> {
        self.file = None;
        std::fs::remove_file(self.path.join(LEASE_FILE))
    }

    /// Closes the record file: the lease is let go, and the directory can
    /// be removed (Windows removes no directory with a file open in it).
    #[doc(hidden)]
    pub fn release_record(&mut self) {
        self.file = None;
    }
}

/// Opens the record at `path` as its owner: read and write, sharing
/// reading only. `new`: create it, failing when it exists.
fn open_owned(path: &Path, new: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).share_mode(SHARE_READ);
    match new {
        true => opts.create_new(true),
        false => opts.create(true),
    };
    opts.open(path)
}

/// A shared hold on someone else's lease: while it lives, the sandbox is
/// live for every prober, even after its creator exits.
#[derive(Debug)]
pub struct Hold {
    _file: File,
}

/// Takes a shared hold on the sandbox at `path`: its record, opened to
/// read, sharing reading and writing with its owner.
///
/// # Errors
///
/// [`ErrorKind::Held`] when a prober holds the record exclusively (it is
/// about to remove the directory); an io error when `path` has no record.
pub fn hold(path: &Path) -> Result<Hold> {
    let record = path.join(LEASE_FILE);
    match OpenOptions::new()
        .read(true)
        .share_mode(SHARE_READ | SHARE_WRITE)
        .open(&record)
    {
        Ok(file) => Ok(Hold { _file: file }),
        Err(e) if e.raw_os_error() == Some(SHARING_VIOLATION) => {
            Err(Error::new(ErrorKind::Held, "sandbox is being removed by a reaper").at(path))
        }
        Err(e) => Err(e).with_path("cannot hold sandbox", || record),
    }
}

/// What a probe found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Probe {
    /// Some process holds the record: the sandbox is live and must not be
    /// touched.
    Live {
        /// Always empty on Windows (no lock table to read).
        holders: Vec<u32>,
        /// The record, if it could be read.
        record: Option<LeaseRecord>,
    },
    /// Nobody held the record; the prober holds it exclusively now (or
    /// the directory has no record at all).
    Free(Claim),
}

/// An exclusive hold on a directory whose owner is gone. While the claim
/// lives, no creator and no other prober can take the directory.
#[derive(Debug)]
pub struct Claim {
    /// `None`: the directory has no record.
    file: Option<File>,
    path: PathBuf,
    record: RecordState,
}

impl Claim {
    /// The directory's path as given to the probe.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Device and inode of the claimed directory: not known on Windows,
    /// `(0, 0)`.
    pub fn identity(&self) -> (u64, u64) {
        (0, 0)
    }

    /// The lease record found in the directory.
    pub fn record(&self) -> &RecordState {
        &self.record
    }

    /// Lets go of the record, so that the directory can be removed.
    #[doc(hidden)]
    pub fn release_record(&mut self) {
        self.file = None;
    }
}

/// Probes the directory at `path`: is its lease held?
///
/// # Errors
///
/// An io error (with the path) when `path` does not exist or is not a
/// directory.
pub fn probe(path: &Path) -> Result<Probe> {
    let (parent, name) = split_parent(path)?;
    probe_at(parent, parent, name)
}

/// Probes the entry `name` of the directory `parent` (whose path, for
/// messages, is `parent_path`).
///
/// # Errors
///
/// As [`probe`].
pub fn probe_at(parent: &Path, parent_path: &Path, name: &OsStr) -> Result<Probe> {
    let path = parent.join(name);
    let meta = std::fs::symlink_metadata(&path)
        .with_path("cannot open sandbox", || parent_path.join(name))?;
    if !meta.is_dir() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "refusing to probe what is not a directory",
        )
        .at(parent_path.join(name)));
    }
    let record_path = path.join(LEASE_FILE);
    match OpenOptions::new()
        .access_mode(READ | WRITE)
        .share_mode(0)
        .open(&record_path)
    {
        Ok(mut file) => {
            let record = read_open(&mut file, &record_path);
            Ok(Probe::Free(Claim {
                file: Some(file),
                path: parent_path.join(name),
                record,
            }))
        }
        Err(e) if e.raw_os_error() == Some(SHARING_VIOLATION) => Ok(Probe::Live {
            holders: Vec::new(),
            record: read_record(&path).record().cloned(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Probe::Free(Claim {
            file: None,
            path: parent_path.join(name),
            record: RecordState::Missing,
        })),
        Err(e) => Err(e).with_path("cannot probe sandbox", || record_path),
    }
}

/// The lease record of the directory at `dir`, read while its owner may
/// hold it.
pub fn read_record(dir: &Path) -> RecordState {
    let path = dir.join(LEASE_FILE);
    match OpenOptions::new()
        .read(true)
        .share_mode(SHARE_READ | SHARE_WRITE)
        .open(&path)
    {
        Ok(mut file) => read_open(&mut file, &path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => RecordState::Missing,
        Err(e) => RecordState::Invalid(Error::io("cannot read lease record", e).at(path)),
    }
}

fn read_open(file: &mut File, path: &Path) -> RecordState {
    let mut bytes = Vec::new();
    match file.take(MAX_RECORD_BYTES + 1).read_to_end(&mut bytes) {
        Ok(_) if bytes.len() as u64 > MAX_RECORD_BYTES => RecordState::Invalid(
            Error::new(ErrorKind::InvalidLease, "lease record is too large").at(path),
        ),
        Ok(_) => match LeaseRecord::parse(&bytes) {
            Ok(r) => RecordState::Valid(r),
            Err(e) => RecordState::Invalid(e.at(path)),
        },
        Err(e) => RecordState::Invalid(Error::io("cannot read lease record", e).at(path)),
    }
}

/// Opens a directory that sandboxes are made in: on Windows, its path.
#[doc(hidden)]
pub fn open_root_dir(root: &Path) -> Result<PathBuf> {
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => Ok(root.to_owned()),
        Ok(_) => {
            Err(Error::new(ErrorKind::UnusableRoot, "sandbox root is not a directory").at(root))
        }
        Err(e) => Err(Error::io("cannot open sandbox root", e)
            .at(root)
            .with_hint("create it, or choose another root")),
    }
}

/// Creates `parent/name` holding `record`: made under its final name, then
/// its record written and held (see the module docs).
#[doc(hidden)]
pub fn create_at(
    parent: &Path,
    parent_path: &Path,
    name: &OsStr,
    record: &LeaseRecord,
    _mode: u32,
) -> Result<Created> {
    let path = parent.join(name);
    match std::fs::create_dir(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(Created::NameTaken),
        Err(e) => return Err(e).with_path("cannot create sandbox", || parent_path.join(name)),
    }
    let record_path = path.join(LEASE_FILE);
    let written = open_owned(&record_path, true).and_then(|mut file| {
        file.write_all(record.to_line().as_bytes())?;
        Ok(file)
    });
    match written {
        Ok(file) => Ok(Created::New(Lease {
            file: Some(file),
            path: parent_path.join(name),
            record: record.clone(),
        })),
        Err(e) => {
            // What we just made: the directory and, at most, a part of
            // its record.
            #[allow(clippy::disallowed_methods)]
            let _ = std::fs::remove_dir_all(&path);
            Err(e).with_path("cannot write lease record", || record_path)
        }
    }
}
