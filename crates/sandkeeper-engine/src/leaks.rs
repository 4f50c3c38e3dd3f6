//! Per-test leak records: what each run of a command (each test, under
//! cargo-nextest) left in its `TMPDIR`, one small file per run in a shared
//! directory, and the summary of a directory of them.
//!
//! `sandkeeper run --report-dir DIR` ends every run by writing one
//! [`Record`] into DIR ([`RecordDir::write`]); `sandkeeper report DIR`
//! reads them all back ([`read_dir`]) and ranks the tests that leaked
//! ([`Summary::of`]). Under nextest each test runs in its own process, and
//! with `sandkeeper run` as its wrapper script each test gets its own
//! record, named by the variables nextest sets for it ([`TestId::from_env`]).
//! A caller that runs tests itself (the Python package's pytest plugin)
//! measures each test's directory and writes its record with
//! [`Record::of_leftovers`].
//!
//! ```
//! use sandkeeper_engine::leaks::{self, Record, RecordDir, Summary, TestId};
//! use sandkeeper_engine::run::Run;
//!
//! # let scratch = sandkeeper_engine::Sandbox::new()?;
//! let dir = RecordDir::open(&scratch.path().join("leaks"))?;
//! let outcome = Run::new("sh")
//!     .args(["-c", r#"mkdir "$TMPDIR/app-1""#])
//!     .root(scratch.path())
//!     .execute()?;
//! let test = TestId { binary_id: Some("demo".into()), test_name: Some("leaks_a_dir".into()) };
//! dir.write(&Record::of(&outcome, test, &["sh".into()]))?;
//!
//! let read = leaks::read_dir(&scratch.path().join("leaks"))?;
//! let summary = Summary::of(&read.records);
//! assert_eq!(summary.leaking[0].label(), "demo leaks_a_dir");
//! assert_eq!(summary.leaking[0].entries, 1);
//! # Ok::<(), sandkeeper_engine::Error>(())
//! ```
//!
//! # Safety & security
//!
//! - **Writing.** The directory is made (mode 0700) if missing, below a
//!   parent resolved and vetted as [`output`](crate::output) does; then it
//!   is opened without following a link and must be a directory owned by
//!   the caller and writable by nobody else, or it is refused. Each record
//!   is created under a temp name starting with `.` with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW`, written, and renamed to its final name
//!   with `RENAME_NOREPLACE`: parallel runs never share a file, and a
//!   reader never sees half a record. A record is at most
//!   [`MAX_RECORD_BYTES`]: the families beyond [`MAX_FAMILIES`] are
//!   counted, not listed, and long names are cut.
//! - **Reading.** The directory must pass the rule for writing: owned by
//!   the caller, writable by nobody else; a directory anyone else could
//!   have filled is refused, never summarized. Every record is hostile
//!   input all the same (a test runs as the caller, and may write there):
//!   opened without following a link and without blocking, only a regular
//!   file owned by the directory's owner, of at most [`MAX_RECORD_BYTES`],
//!   is read, every field is type- and length-checked, and a record that
//!   fails any check is reported as a [`Problem`], never guessed at. Each
//!   inode is read once (its other hard links are counted, not read), and
//!   at most [`MAX_RECORDS`] records and [`MAX_TOTAL_BYTES`] are read: what
//!   a report holds is bounded whatever the directory holds. Names are
//!   returned as written: a renderer must escape them before they reach a
//!   terminal.

use std::collections::{BTreeMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use serde_json::{json, Map, Value};

use crate::error::{Error, ErrorKind, IoResultExt, Result};
use crate::run::{LeftoverFamily, Leftovers, RunOutcome};
use crate::supervise::Exit;

/// The `schema` of a record: `sandkeeper.test-leak/v1`.
pub const RECORD_SCHEMA: &str = "sandkeeper.test-leak/v1";
/// The largest record written or read, in bytes.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// The most families a record lists (biggest first); the rest are counted
/// in [`Record::families_omitted`].
pub const MAX_FAMILIES: usize = 32;
/// The longest name (test, binary id, pattern, argument) a record holds,
/// in bytes; longer ones are cut when written and refused when read.
pub const MAX_TEXT: usize = 1024;
/// The most command arguments a record holds.
pub const MAX_ARGS: usize = 16;
/// The most records [`read_dir`] reads from one directory.
pub const MAX_RECORDS: usize = 100_000;
/// The most bytes of records [`read_dir`] reads from one directory (64
/// MiB): with [`MAX_RECORDS`], what bounds a report's memory (a parsed
/// record holds no more than its file's bytes, plus a few hundred bytes).
pub const MAX_TOTAL_BYTES: u64 = 64 * 1024 * 1024;

/// Which test a run was: nextest's `NEXTEST_BINARY_ID` and
/// `NEXTEST_TEST_NAME` (both `None` outside nextest).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct TestId {
    /// The test binary's id (`my-crate`, `my-crate::integration`).
    pub binary_id: Option<String>,
    /// The test's name (`tests::it_works`).
    pub test_name: Option<String>,
}

impl TestId {
    /// The test nextest is running in this process, from the variables it
    /// sets for every test it starts (and its wrapper script):
    /// `NEXTEST_BINARY_ID`, `NEXTEST_TEST_NAME`. Values that are not
    /// UTF-8 or empty count as missing.
    pub fn from_env() -> TestId {
        let var = |name| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| cut(&v))
        };
        TestId {
            binary_id: var("NEXTEST_BINARY_ID"),
            test_name: var("NEXTEST_TEST_NAME"),
        }
    }
}

/// One run's record: which test it was, how it ended, what it left.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The test (or nothing, outside nextest).
    pub test: TestId,
    /// The command run (at most [`MAX_ARGS`] arguments): names the run
    /// when there is no test name.
    pub command: Vec<String>,
    /// How the command ended.
    pub exit: Exit,
    /// Entries left in its `TMPDIR`.
    pub entries: u64,
    /// Their disk usage, in bytes.
    pub disk_bytes: u64,
    /// The leftovers by name family, biggest first (at most
    /// [`MAX_FAMILIES`]).
    pub families: Vec<LeftoverFamily>,
    /// Families not listed.
    pub families_omitted: u64,
    /// Descendants still running when the command exited (daemons it
    /// left), all stopped by the run.
    pub daemons_stopped: u64,
    /// How many of them needed SIGKILL.
    pub daemons_killed: u64,
}

impl Record {
    /// The record of a finished run of `command` as test `test`.
    pub fn of(outcome: &RunOutcome, test: TestId, command: &[OsString]) -> Record {
        Record::build(
            test,
            command,
            outcome.exit,
            &outcome.leftovers,
            outcome.stopped.signalled as u64,
            outcome.stopped.killed as u64,
        )
    }

    /// The record of a test its caller ran and measured itself, not
    /// through a [`Run`](crate::run::Run): what it left in its directory
    /// (`leftovers`, measured with [`Leftovers::of`] through the
    /// directory's descriptor), how it ended as the caller decides
    /// (`exit`), and no daemons (the caller supervised no process, so
    /// [`daemons_stopped`](Record::daemons_stopped) and
    /// [`daemons_killed`](Record::daemons_killed) are 0). Cut to the
    /// limits as [`Record::of`] cuts: at most [`MAX_ARGS`] arguments,
    /// [`MAX_FAMILIES`] families, names of [`MAX_TEXT`] bytes, a record of
    /// [`MAX_RECORD_BYTES`].
    ///
    /// The pytest plugin of the Python package writes one per test this
    /// way, into a [`RecordDir`]: `sandkeeper report` reads them as it
    /// reads those of `sandkeeper run --nextest`.
    ///
    /// ```
    /// use sandkeeper_engine::leaks::{Record, TestId};
    /// use sandkeeper_engine::run::Leftovers;
    /// use sandkeeper_engine::supervise::Exit;
    ///
    /// let tmp = sandkeeper_engine::Sandbox::new()?;
    /// std::fs::create_dir(tmp.path().join("app-1"))?;
    /// std::fs::write(tmp.path().join("app-2"), b"x")?;
    /// let left = Leftovers::of(tmp.try_clone_dir()?);
    /// let test = TestId {
    ///     binary_id: Some("pytest:demo".into()),
    ///     test_name: Some("test_demo.py::test_leaks".into()),
    /// };
    /// let record = Record::of_leftovers(test, &["pytest".into()], Exit::Code(1), &left);
    /// assert_eq!(record.entries, 2);
    /// assert_eq!(record.families[0].pattern, "app-*");
    /// assert_eq!((record.daemons_stopped, record.daemons_killed), (0, 0));
    /// assert!(record.leaked() && !record.exit.success());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn of_leftovers(
        test: TestId,
        command: &[OsString],
        exit: Exit,
        leftovers: &Leftovers,
    ) -> Record {
        Record::build(test, command, exit, leftovers, 0, 0)
    }

    /// What [`Record::of`] and [`Record::of_leftovers`] share: the fields
    /// cut to the limits, the record fit to [`MAX_RECORD_BYTES`].
    fn build(
        test: TestId,
        command: &[OsString],
        exit: Exit,
        left: &Leftovers,
        daemons_stopped: u64,
        daemons_killed: u64,
    ) -> Record {
        let families: Vec<LeftoverFamily> = left
            .families
            .iter()
            .take(MAX_FAMILIES)
            .map(|f| LeftoverFamily {
                pattern: cut(&f.pattern),
                count: f.count,
                disk_bytes: f.disk_bytes,
            })
            .collect();
        Record {
            test,
            command: command
                .iter()
                .take(MAX_ARGS)
                .map(|a| cut(&a.to_string_lossy()))
                .collect(),
            exit,
            entries: left.entries,
            disk_bytes: left.disk_bytes,
            families_omitted: (left.families.len() - families.len()) as u64,
            families,
            daemons_stopped,
            daemons_killed,
        }
        .fit()
    }

    /// Drops listed families (counting them as omitted), then trailing
    /// arguments, until the record is at most [`MAX_RECORD_BYTES`]: names
    /// full of characters JSON escapes can be six times their length.
    fn fit(mut self) -> Record {
        while self.to_json().len() > MAX_RECORD_BYTES {
            if self.families.pop().is_some() {
                self.families_omitted += 1;
            } else if self.command.pop().is_none() {
                break;
            }
        }
        self
    }

    /// Whether the run left anything: an entry, or a daemon.
    pub fn leaked(&self) -> bool {
        self.entries > 0 || self.daemons_stopped > 0
    }

    /// The record as its file holds it: one JSON object, one line.
    pub fn to_json(&self) -> String {
        let (code, signal) = match self.exit {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
        };
        let value = json!({
            "schema": RECORD_SCHEMA,
            "binary_id": self.test.binary_id,
            "test_name": self.test.test_name,
            "command": self.command,
            "exit_code": code,
            "signal": signal,
            "entries": self.entries,
            "disk_bytes": self.disk_bytes,
            "families": self.families.iter().map(|f| json!({
                "pattern": f.pattern, "count": f.count, "disk_bytes": f.disk_bytes,
            })).collect::<Vec<_>>(),
            "families_omitted": self.families_omitted,
            "daemons_stopped": self.daemons_stopped,
            "daemons_killed": self.daemons_killed,
        });
        let mut text = value.to_string();
        text.push('\n');
        text
    }

    /// Parses a record file's content, checking every field.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] naming the first thing wrong: not JSON,
    /// another schema, a missing or mistyped field, a name longer than
    /// [`MAX_TEXT`], more than [`MAX_FAMILIES`] families or [`MAX_ARGS`]
    /// arguments, a record over [`MAX_RECORD_BYTES`].
    pub fn parse(bytes: &[u8]) -> Result<Record> {
        let bad = |what: String| Error::new(ErrorKind::InvalidInput, what);
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(bad(format!(
                "record of {} bytes, over the limit of {MAX_RECORD_BYTES}",
                bytes.len()
            )));
        }
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not a JSON record: {e}")))?;
        let m = value
            .as_object()
            .ok_or_else(|| bad("not a JSON object".into()))?;
        match m.get("schema").and_then(Value::as_str) {
            Some(RECORD_SCHEMA) => {}
            _ => return Err(bad(format!("not a {RECORD_SCHEMA} record"))),
        }
        let exit = match (opt_i32(m, "exit_code")?, opt_i32(m, "signal")?) {
            (Some(c), None) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            _ => return Err(bad("needs exactly one of exit_code and signal".into())),
        };
        let families = array(m, "families", MAX_FAMILIES)?
            .iter()
            .map(|f| {
                let f = f
                    .as_object()
                    .ok_or_else(|| bad("a family is not an object".into()))?;
                Ok(LeftoverFamily {
                    pattern: text(f, "pattern")?
                        .ok_or_else(|| bad("a family has no pattern".into()))?,
                    count: number(f, "count")?,
                    disk_bytes: number(f, "disk_bytes")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let command = array(m, "command", MAX_ARGS)?
            .iter()
            .map(|a| match a.as_str() {
                Some(s) if s.len() <= MAX_TEXT => Ok(s.to_owned()),
                _ => Err(bad(format!(
                    "a command argument is not a string of at most {MAX_TEXT} bytes"
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Record {
            test: TestId {
                binary_id: text(m, "binary_id")?,
                test_name: text(m, "test_name")?,
            },
            command,
            exit,
            entries: number(m, "entries")?,
            disk_bytes: number(m, "disk_bytes")?,
            families,
            families_omitted: number(m, "families_omitted")?,
            daemons_stopped: number(m, "daemons_stopped")?,
            daemons_killed: number(m, "daemons_killed")?,
        })
    }
}

fn field_error(key: &str, want: &str) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("field `{key}` is missing or not {want}"),
    )
}

fn number(m: &Map<String, Value>, key: &str) -> Result<u64> {
    m.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| field_error(key, "a non-negative integer"))
}

fn opt_i32(m: &Map<String, Value>, key: &str) -> Result<Option<i32>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| field_error(key, "a 32-bit integer or null")),
    }
}

fn text(m: &Map<String, Value>, key: &str) -> Result<Option<String>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= MAX_TEXT => Ok(Some(s.clone())),
        Some(_) => Err(field_error(
            key,
            &format!("a string of at most {MAX_TEXT} bytes or null"),
        )),
    }
}

fn array<'a>(m: &'a Map<String, Value>, key: &str, max: usize) -> Result<&'a [Value]> {
    match m.get(key) {
        Some(Value::Array(a)) if a.len() <= max => Ok(a),
        _ => Err(field_error(
            key,
            &format!("an array of at most {max} elements"),
        )),
    }
}

/// `s` cut to at most [`MAX_TEXT`] bytes, on a character boundary.
fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// A directory records are written into, opened and vetted once
/// ([`RecordDir::open`]); every [`write`](RecordDir::write) goes through
/// its descriptor.
#[derive(Debug)]
pub struct RecordDir {
    dir: OwnedFd,
    path: PathBuf,
}

impl RecordDir {
    /// Opens `path` for writing records, making it (mode 0700) if it does
    /// not exist; many runs may do so at once.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`]: `path` names no directory (`/`, a
    ///   path ending in `..`).
    /// - [`ErrorKind::UnusableRoot`]/[`ErrorKind::UnsafeRoot`]: its parent
    ///   cannot be used, as for an [`OutputFile`](crate::output::OutputFile).
    /// - [`ErrorKind::UnsafeRoot`]: `path` is a symlink or not a
    ///   directory, is owned by another user, or others may write it.
    /// - [`ErrorKind::Io`]: any other failure, with the path.
    pub fn open(path: &Path) -> Result<RecordDir> {
        let name = path.file_name().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                "the report directory names no directory (it is `/`, ends in `..`, or is empty)",
            )
            .at(path)
        })?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let parent = crate::output::open_dir_safely(parent)?;
        match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e).with_path("cannot make the report directory", || path),
        }
        let unsafe_dir = |why: String| {
            Error::new(ErrorKind::UnsafeRoot, why)
                .at(path)
                .with_hint("give a directory of your own that only you may write (chmod 0700), or a path that does not exist yet")
        };
        let dir = match rustix::fs::openat(
            &parent,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(unsafe_dir(
                    "refusing a report directory that is a symlink or not a directory".into(),
                ))
            }
            Err(e) => return Err(e).with_path("cannot open the report directory", || path),
        };
        vet_dir(&dir, path)?.map_err(|why| unsafe_dir(why.message()))?;
        Ok(RecordDir {
            dir,
            path: path.to_owned(),
        })
    }

    /// The path as given (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `record` as a new file `<pid>-<random>.json` (mode 0600),
    /// atomically, and returns its name.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Io`] with the path when the file cannot be created,
    /// written or renamed into place (a full disk, a removed directory).
    pub fn write(&self, record: &Record) -> Result<OsString> {
        let text = record.to_json();
        let pid = std::process::id();
        let mut last = Errno::EXIST;
        for _ in 0..8 {
            let stem = format!("{pid}-{}", crate::names::random_suffix(12));
            let tmp = format!(".{stem}.tmp");
            let fd = match rustix::fs::openat(
                &self.dir,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => fd,
                Err(Errno::EXIST) => continue,
                Err(e) => {
                    last = e;
                    break;
                }
            };
            let done = std::fs::File::from(fd)
                .write_all(text.as_bytes())
                .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
                .and_then(|()| {
                    let name = format!("{stem}.json");
                    rustix::fs::renameat_with(
                        &self.dir,
                        tmp.as_str(),
                        &self.dir,
                        name.as_str(),
                        RenameFlags::NOREPLACE,
                    )
                    .map(|()| name)
                });
            match done {
                Ok(name) => return Ok(name.into()),
                Err(e) => {
                    // Ours: made with O_EXCL in a directory only we write.
                    let _ = rustix::fs::unlinkat(&self.dir, tmp.as_str(), AtFlags::empty());
                    last = e;
                    if e != Errno::EXIST {
                        break;
                    }
                }
            }
        }
        Err(last).with_path("cannot write a record into the report directory", || {
            self.path.clone()
        })
    }
}

/// Why a report directory cannot be trusted: its owner and mode.
enum Untrusted {
    /// Owned by `owner`, not the caller (`me`).
    Owner { owner: u32, me: u32, mode: u32 },
    /// Group or others may write it.
    Writable { owner: u32, mode: u32 },
}

impl Untrusted {
    fn message(&self) -> String {
        // User names come with the engine's `config` feature (its user
        // database lookup); without it, the number says as much.
        #[cfg(feature = "config")]
        let name = crate::config::value::user_name;
        #[cfg(not(feature = "config"))]
        let name = |uid: u32| uid.to_string();
        match *self {
            Untrusted::Owner { owner, me, mode } => format!(
                "refusing a report directory owned by uid {owner} ({}), mode {mode:04o}: you are uid {me} ({}), and its records would be another user's",
                name(owner),
                name(me)
            ),
            Untrusted::Writable { owner, mode } => format!(
                "refusing a report directory others may write: owned by uid {owner} ({}), mode {mode:04o}; its records could be anyone's",
                name(owner)
            ),
        }
    }
}

/// The rule for a report directory, for writing and reading alike: owned
/// by the caller (whose uid is returned), writable by nobody else.
fn vet_dir(dir: &OwnedFd, path: &Path) -> Result<std::result::Result<u32, Untrusted>> {
    let st = rustix::fs::fstat(dir).with_path("cannot inspect the report directory", || path)?;
    let me = rustix::process::geteuid().as_raw();
    let mode = st.st_mode & 0o7777;
    Ok(if st.st_uid != me {
        Err(Untrusted::Owner {
            owner: st.st_uid,
            me,
            mode,
        })
    } else if st.st_mode & 0o022 != 0 {
        Err(Untrusted::Writable {
            owner: st.st_uid,
            mode,
        })
    } else {
        Ok(me)
    })
}

/// A file of a report directory that is not a usable record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// Its name in the directory (as found: escape it before showing it).
    pub name: OsString,
    /// What is wrong with it.
    pub reason: String,
}

/// What [`read_dir`] found.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ReadRecords {
    /// The records, in no particular order.
    pub records: Vec<Record>,
    /// The files that are not usable records (at most 20 listed).
    pub problems: Vec<Problem>,
    /// How many unusable files there were in all.
    pub problem_count: u64,
    /// Names that are hard links to a record already read (the same
    /// inode): each record is read, and counted, once.
    pub hard_links_skipped: u64,
    /// Bytes of records read (at most [`MAX_TOTAL_BYTES`]).
    pub bytes_read: u64,
    /// Whether reading stopped at a limit ([`limit`](Self::limit) says
    /// which): the summary is partial.
    pub truncated: bool,
    /// The limit reading stopped at, if any.
    pub limit: Option<ReadLimit>,
    /// Record files (`*.json`) listed after reading stopped, not read.
    pub not_read: u64,
}

/// The limit a [`read_dir`] stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadLimit {
    /// [`MAX_RECORDS`] records were read.
    Records,
    /// The next record would have taken the bytes read past
    /// [`MAX_TOTAL_BYTES`].
    Bytes,
}

impl ReadLimit {
    /// A short stable name, for JSON: `records`, `bytes`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadLimit::Records => "records",
            ReadLimit::Bytes => "bytes",
        }
    }
}

/// Reads every record (`*.json`, not starting with `.`) in `path`; other
/// names are ignored, unusable records become [`Problem`]s. Each inode is
/// read once, and reading stops at [`MAX_RECORDS`] records or
/// [`MAX_TOTAL_BYTES`] (the rest counted in
/// [`not_read`](ReadRecords::not_read)).
///
/// # Errors
///
/// [`ErrorKind::UnsafeRoot`] when `path` is a symlink, is owned by
/// another user than the caller, or others may write it (the rule of
/// [`RecordDir::open`]: records anyone else could have written are not
/// summarized); [`ErrorKind::UnusableRoot`] when it does not exist or is
/// not a directory; [`ErrorKind::Io`] when it cannot be listed.
pub fn read_dir(path: &Path) -> Result<ReadRecords> {
    let dir = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // O_NOFOLLOW|O_DIRECTORY on a symlink says ENOTDIR (or ELOOP).
        Err(Errno::LOOP | Errno::NOTDIR)
            if rustix::fs::lstat(path)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink) =>
        {
            return Err(Error::new(
                ErrorKind::UnsafeRoot,
                "refusing a report directory that is a symlink",
            )
            .at(path)
            .with_hint("give the directory itself"))
        }
        Err(e @ (Errno::NOENT | Errno::NOTDIR)) => {
            return Err(Error::new(
                ErrorKind::UnusableRoot,
                "no report directory there (missing, or not a directory)",
            )
            .at(path)
            .with_source(e.into()))
        }
        Err(e) => return Err(e).with_path("cannot open the report directory", || path),
    };
    let owner = vet_dir(&dir, path)?.map_err(|why| {
        let hint = match why {
            Untrusted::Owner { owner, .. } => format!(
                "read it as its owner if you trust them (sudo -u '#{owner}' sandkeeper report ...), or have the runs write into a directory of your own that only you may write"
            ),
            Untrusted::Writable { .. } => "have the runs write into a directory only its owner may write (chmod 0700; `run --report-dir` makes it so when it does not exist), and read it as that owner".to_owned(),
        };
        Error::new(ErrorKind::UnsafeRoot, why.message())
            .at(path)
            .with_hint(hint)
    })?;
    let list =
        rustix::fs::Dir::read_from(&dir).with_path("cannot list the report directory", || path)?;
    let mut out = ReadRecords::default();
    // The inodes read (16 bytes each, at most MAX_RECORDS).
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    for entry in list {
        let entry = entry.with_path("cannot list the report directory", || path)?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        let bytes = name.as_bytes();
        if bytes.starts_with(b".") || !bytes.ends_with(b".json") {
            continue;
        }
        if out.limit.is_none() && out.records.len() >= MAX_RECORDS {
            out.limit = Some(ReadLimit::Records);
        }
        if out.limit.is_some() {
            // Only counted: the listing goes on, nothing more is held.
            out.not_read += 1;
            continue;
        }
        match read_one(
            &dir,
            name,
            owner,
            &mut seen,
            MAX_TOTAL_BYTES - out.bytes_read,
        ) {
            Read::Record(record, size) => {
                out.bytes_read += size;
                out.records.push(record);
            }
            Read::Link => out.hard_links_skipped += 1,
            Read::OverBudget => {
                out.limit = Some(ReadLimit::Bytes);
                out.not_read += 1;
            }
            Read::Problem(reason, size) => {
                out.bytes_read += size;
                out.problem_count += 1;
                if out.problems.len() < 20 {
                    out.problems.push(Problem {
                        name: name.to_owned(),
                        reason,
                    });
                }
            }
        }
    }
    out.truncated = out.limit.is_some();
    Ok(out)
}

/// What became of one name of a report directory.
enum Read {
    /// A record, and the bytes read.
    Record(Record, u64),
    /// A hard link to an inode already read: not read again.
    Link,
    /// Reading it would have passed the bytes left: not read.
    OverBudget,
    /// Not a usable record: why, and the bytes read (counted too).
    Problem(String, u64),
}

/// Reads the record `name` of `dir` (owned by `owner`), unless its inode
/// is in `seen` (then adds nothing) or it is bigger than `budget` bytes.
fn read_one(
    dir: &OwnedFd,
    name: &OsStr,
    owner: u32,
    seen: &mut HashSet<(u64, u64)>,
    budget: u64,
) -> Read {
    let problem = |why: String| Read::Problem(why, 0);
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return problem(format!("cannot open it: {e}")),
    };
    let st = match rustix::fs::fstat(&fd) {
        Ok(st) => st,
        Err(e) => return problem(format!("cannot inspect it: {e}")),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return problem("not a regular file".into());
    }
    if st.st_uid != owner {
        return problem(format!(
            "owned by uid {}, not by the directory's owner (uid {owner}): `run` did not write it",
            st.st_uid
        ));
    }
    let id = (st.st_dev, st.st_ino);
    if seen.contains(&id) {
        return Read::Link;
    }
    let size = st.st_size as u64;
    if size > MAX_RECORD_BYTES as u64 {
        return problem(format!(
            "{size} bytes, over the limit of {MAX_RECORD_BYTES}"
        ));
    }
    if size > budget {
        return Read::OverBudget;
    }
    let mut bytes = Vec::new();
    let read = std::fs::File::from(fd)
        .take(MAX_RECORD_BYTES as u64 + 1)
        .read_to_end(&mut bytes);
    if let Err(e) = read {
        return problem(format!("cannot read it: {e}"));
    }
    let size = bytes.len() as u64;
    // It grew since the fstat (its owner is writing it).
    if size > budget {
        return Read::OverBudget;
    }
    seen.insert(id);
    match Record::parse(&bytes) {
        Ok(record) => Read::Record(record, size),
        Err(e) => Read::Problem(e.to_string(), size),
    }
}

/// What one test left, over all its records (retries and repeated runs
/// add up).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TestLeaks {
    /// The test.
    pub test: TestId,
    /// The command of its first record (names a run outside nextest).
    pub command: Vec<String>,
    /// Its records.
    pub runs: u64,
    /// Of them, runs that failed (non-zero exit or a signal).
    pub failed_runs: u64,
    /// Entries left, over all runs.
    pub entries: u64,
    /// Their disk usage, in bytes (saturating).
    pub disk_bytes: u64,
    /// By family, biggest first (families are merged by pattern).
    pub families: Vec<LeftoverFamily>,
    /// Families its records did not list.
    pub families_omitted: u64,
    /// Daemons it left (all stopped by the run).
    pub daemons: u64,
    /// Of them, how many needed SIGKILL.
    pub daemons_killed: u64,
}

impl TestLeaks {
    /// How people name it: `binary_id test_name`, else the command.
    pub fn label(&self) -> String {
        match (&self.test.binary_id, &self.test.test_name) {
            (Some(b), Some(t)) => format!("{b} {t}"),
            (None, Some(t)) => t.clone(),
            _ => self.command.join(" "),
        }
    }
}

/// A test (and, outside nextest, its command): what records are grouped by.
type TestKey = (TestId, Vec<String>);

/// The tests of a report directory, leaking ones worst first.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Summary {
    /// Records summarized.
    pub runs: u64,
    /// Distinct tests (or commands) seen.
    pub tests: u64,
    /// The tests that left entries or daemons, worst first: most bytes,
    /// then most entries, then most daemons, then by name.
    pub leaking: Vec<TestLeaks>,
    /// Entries left by all tests.
    pub entries: u64,
    /// Their disk usage, in bytes (saturating).
    pub disk_bytes: u64,
    /// Daemons left by all tests.
    pub daemons: u64,
}

impl Summary {
    /// Groups `records` by test and ranks the leaking ones.
    pub fn of(records: &[Record]) -> Summary {
        let mut by_test: BTreeMap<TestKey, TestLeaks> = BTreeMap::new();
        let mut families: BTreeMap<TestKey, BTreeMap<String, (u64, u64)>> = BTreeMap::new();
        for r in records {
            // Outside nextest the command tells runs apart.
            let key = (
                r.test.clone(),
                if r.test.test_name.is_some() {
                    Vec::new()
                } else {
                    r.command.clone()
                },
            );
            let t = by_test.entry(key.clone()).or_insert_with(|| TestLeaks {
                test: r.test.clone(),
                command: r.command.clone(),
                runs: 0,
                failed_runs: 0,
                entries: 0,
                disk_bytes: 0,
                families: Vec::new(),
                families_omitted: 0,
                daemons: 0,
                daemons_killed: 0,
            });
            t.runs += 1;
            t.failed_runs += u64::from(!r.exit.success());
            t.entries = t.entries.saturating_add(r.entries);
            t.disk_bytes = t.disk_bytes.saturating_add(r.disk_bytes);
            t.families_omitted = t.families_omitted.saturating_add(r.families_omitted);
            t.daemons = t.daemons.saturating_add(r.daemons_stopped);
            t.daemons_killed = t.daemons_killed.saturating_add(r.daemons_killed);
            let fams = families.entry(key).or_default();
            for f in &r.families {
                let e = fams.entry(f.pattern.clone()).or_default();
                e.0 = e.0.saturating_add(f.count);
                e.1 = e.1.saturating_add(f.disk_bytes);
            }
        }
        let mut summary = Summary {
            runs: records.len() as u64,
            tests: by_test.len() as u64,
            ..Summary::default()
        };
        for (key, mut t) in by_test {
            if t.entries == 0 && t.daemons == 0 {
                continue;
            }
            t.families = families
                .remove(&key)
                .unwrap_or_default()
                .into_iter()
                .map(|(pattern, (count, disk_bytes))| LeftoverFamily {
                    pattern,
                    count,
                    disk_bytes,
                })
                .collect();
            t.families.sort_by(|a, b| {
                (b.disk_bytes, b.count)
                    .cmp(&(a.disk_bytes, a.count))
                    .then_with(|| a.pattern.cmp(&b.pattern))
            });
            summary.entries = summary.entries.saturating_add(t.entries);
            summary.disk_bytes = summary.disk_bytes.saturating_add(t.disk_bytes);
            summary.daemons = summary.daemons.saturating_add(t.daemons);
            summary.leaking.push(t);
        }
        summary.leaking.sort_by(|a, b| {
            (b.disk_bytes, b.entries, b.daemons)
                .cmp(&(a.disk_bytes, a.entries, a.daemons))
                .then_with(|| a.label().cmp(&b.label()))
        });
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, entries: u64, bytes: u64, daemons: u64) -> Record {
        Record {
            test: TestId {
                binary_id: Some("bin".into()),
                test_name: Some(name.into()),
            },
            command: vec!["t".into()],
            exit: Exit::Code(0),
            entries,
            disk_bytes: bytes,
            families: if entries > 0 {
                vec![LeftoverFamily {
                    pattern: "app-*".into(),
                    count: entries,
                    disk_bytes: bytes,
                }]
            } else {
                Vec::new()
            },
            families_omitted: 0,
            daemons_stopped: daemons,
            daemons_killed: 0,
        }
    }

    #[test]
    fn round_trip() {
        let r = record("a", 2, 8192, 1);
        assert_eq!(Record::parse(r.to_json().as_bytes()).unwrap(), r);
        let mut s = record("b", 0, 0, 0);
        s.exit = Exit::Signal(9);
        s.test.binary_id = None;
        assert_eq!(Record::parse(s.to_json().as_bytes()).unwrap(), s);
    }

    #[test]
    fn hostile_records_are_refused() {
        let good: Value = serde_json::from_str(&record("a", 1, 1, 0).to_json()).unwrap();
        let long = "x".repeat(MAX_TEXT + 1);
        let cases: [(&str, &str, Value); 10] = [
            ("schema", "schema", json!("sandkeeper.test-leak/v2")),
            ("negative", "entries", json!(-1)),
            ("float", "disk_bytes", json!(1.5)),
            ("string count", "daemons_stopped", json!("1")),
            ("long name", "test_name", json!(long)),
            ("name type", "binary_id", json!(7)),
            ("both exits", "signal", json!(9)),
            ("huge exit", "exit_code", json!(1u64 << 40)),
            (
                "many families",
                "families",
                json!(vec![
                    json!({"pattern":"a","count":1,"disk_bytes":1});
                    MAX_FAMILIES + 1
                ]),
            ),
            (
                "family type",
                "families",
                json!([{"pattern": 1, "count": 1, "disk_bytes": 1}]),
            ),
        ];
        for (row, key, value) in cases {
            let mut v = good.clone();
            v[key] = value;
            assert!(
                Record::parse(v.to_string().as_bytes()).is_err(),
                "{row}: refused"
            );
        }
        for (row, bytes) in [
            ("empty", &b""[..]),
            ("array", b"[]"),
            ("not utf-8", b"\xff\xfe"),
            ("deep", &[b'['; 10_000][..]),
        ] {
            assert!(Record::parse(bytes).is_err(), "{row}: refused");
        }
        let big = vec![b' '; MAX_RECORD_BYTES + 1];
        assert!(Record::parse(&big).is_err(), "oversized: refused");
    }

    #[test]
    fn summary_ranks_worst_first_and_merges_runs() {
        let records = [
            record("clean", 0, 0, 0),
            record("small", 1, 4096, 0),
            record("big", 3, 1 << 20, 0),
            record("big", 1, 4096, 0),
            record("daemon", 0, 0, 2),
        ];
        let s = Summary::of(&records);
        assert_eq!((s.runs, s.tests), (5, 4));
        let names: Vec<String> = s.leaking.iter().map(TestLeaks::label).collect();
        assert_eq!(names, ["bin big", "bin small", "bin daemon"]);
        assert_eq!(s.leaking[0].runs, 2);
        assert_eq!(s.leaking[0].entries, 4);
        assert_eq!(s.leaking[0].families[0].count, 4);
        assert_eq!((s.entries, s.daemons), (5, 2));
        assert!(Summary::of(&[record("clean", 0, 0, 0)]).leaking.is_empty());
    }

    #[test]
    fn records_full_of_escapes_are_cut_to_fit() {
        let nasty = cut(&"\u{1}".repeat(MAX_TEXT));
        let mut r = record(&nasty, 1, 1, 0);
        r.test.binary_id = Some(nasty.clone());
        r.command = vec![nasty.clone(); MAX_ARGS];
        r.families = vec![
            LeftoverFamily {
                pattern: nasty.clone(),
                count: 1,
                disk_bytes: 1
            };
            MAX_FAMILIES
        ];
        assert!(r.to_json().len() > MAX_RECORD_BYTES, "the case is too big");
        let r = r.fit();
        let text = r.to_json();
        assert!(text.len() <= MAX_RECORD_BYTES);
        assert_eq!(
            r.families.len() as u64 + r.families_omitted,
            MAX_FAMILIES as u64
        );
        assert_eq!(Record::parse(text.as_bytes()).unwrap(), r);
    }

    #[test]
    fn of_leftovers_cuts_like_of_and_has_no_daemons() {
        let long = "é".repeat(MAX_TEXT);
        let left = Leftovers {
            entries: MAX_FAMILIES as u64 + 3,
            disk_bytes: 4096,
            families: (0..MAX_FAMILIES + 3)
                .map(|i| LeftoverFamily {
                    pattern: format!("{long}{i}"),
                    count: 1,
                    disk_bytes: 1,
                })
                .collect(),
        };
        let command: Vec<OsString> = (0..MAX_ARGS + 4).map(|_| long.clone().into()).collect();
        let test = TestId {
            binary_id: Some("pytest:suite".into()),
            test_name: Some("test_a.py::test_b".into()),
        };
        let r = Record::of_leftovers(test.clone(), &command, Exit::Code(1), &left);
        assert_eq!(r.test, test);
        assert_eq!(r.exit, Exit::Code(1));
        assert_eq!((r.entries, r.disk_bytes), (MAX_FAMILIES as u64 + 3, 4096));
        assert_eq!((r.daemons_stopped, r.daemons_killed), (0, 0));
        assert_eq!(
            r.families.len() as u64 + r.families_omitted,
            MAX_FAMILIES as u64 + 3
        );
        assert!(r.command.len() <= MAX_ARGS);
        assert!(r.command.iter().all(|a| a.len() <= MAX_TEXT));
        assert!(r.families.iter().all(|f| f.pattern.len() <= MAX_TEXT));
        let text = r.to_json();
        assert!(text.len() <= MAX_RECORD_BYTES);
        assert_eq!(Record::parse(text.as_bytes()).unwrap(), r);
        let clean =
            Record::of_leftovers(TestId::default(), &[], Exit::Code(0), &Leftovers::default());
        assert!(!clean.leaked() && clean.exit.success());
    }

    #[test]
    fn cut_keeps_characters_whole() {
        let s = "é".repeat(MAX_TEXT);
        let c = cut(&s);
        assert!(c.len() <= MAX_TEXT && c.chars().all(|ch| ch == 'é'));
        assert_eq!(cut("short"), "short");
    }

    use proptest::prelude::*;

    proptest! {
        /// Arbitrary bytes never panic the parser (named like the other
        /// record fuzzers, so CI runs it with many more cases).
        #[test]
        fn fuzz_record_parser_leak_records(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = Record::parse(&bytes);
        }

        /// Any record written (any names, cut to the limits) reads back.
        #[test]
        fn written_records_read_back(
            name in any::<String>(),
            pattern in any::<String>(),
            entries in any::<u64>(),
            bytes in any::<u64>(),
        ) {
            let mut r = record(&cut(&name), entries, bytes, 0);
            r.families = vec![LeftoverFamily { pattern: cut(&pattern), count: 1, disk_bytes: bytes }];
            let text = r.to_json();
            prop_assert!(text.len() <= MAX_RECORD_BYTES);
            prop_assert_eq!(Record::parse(text.as_bytes()).unwrap(), r);
        }
    }

    #[test]
    fn send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Record>();
        check::<RecordDir>();
        check::<Summary>();
        check::<ReadRecords>();
    }
}
