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

use crate::clock::now_ms;
use std::ffi::OsStr;
use std::io;

use crate::error::{Error, ErrorKind, Result};

#[cfg(unix)]
mod locks;

mod record_json;

/// The fields of a record (protocol v1), in the order they are written;
/// the first eight are required. (For the engine's fuzzers.)
#[doc(hidden)]
pub const RECORD_FIELDS: [&str; 12] = record_json::FIELDS;

#[cfg(unix)]
pub use locks::{lock_holders, Locks};
#[doc(hidden)]
#[cfg(unix)]
pub use locks::{LocksReading, PendingLocks};
#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// A directory sandboxes are made in, as the platform opens it: a
/// descriptor on Unix (everything after is relative to it), its path on
/// Windows.
#[cfg(unix)]
#[doc(hidden)]
pub type RootDir = std::os::fd::OwnedFd;
/// See the Unix one.
#[cfg(windows)]
#[doc(hidden)]
pub type RootDir = std::path::PathBuf;
/// A borrowed [`RootDir`].
#[cfg(unix)]
#[doc(hidden)]
pub type RootRef<'a> = std::os::fd::BorrowedFd<'a>;
/// See the Unix one.
#[cfg(windows)]
#[doc(hidden)]
pub type RootRef<'a> = &'a std::path::Path;

/// Borrows a [`RootDir`].
#[doc(hidden)]
pub fn root_ref(dir: &RootDir) -> RootRef<'_> {
    #[cfg(unix)]
    return std::os::fd::AsFd::as_fd(dir);
    #[cfg(windows)]
    return dir.as_path();
}

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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub site: Option<String>,
    /// The creator's command line (lossy UTF-8).
    pub cmd: Vec<String>,
    /// The checkout (source tree or executable) the sandbox belongs to.
    pub checkout: Option<String>,
    /// When set, the sandbox was kept on purpose (for debugging) and reapers
    /// leave it alone until this time, milliseconds since the Unix epoch.
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
            uid: current_uid(),
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
        let record: LeaseRecord = record_json::decode(bytes).map_err(|e| {
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
        let mut line = record_json::encode(self);
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
#[doc(hidden)]
pub struct ProcessIdentity {
    #[doc(hidden)]
    pub pid: u32,
    #[doc(hidden)]
    pub start_ticks: u64,
    #[doc(hidden)]
    pub boot_id: String,
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

/// Field 22 (`starttime`) of `/proc/PID/stat`.
#[doc(hidden)]
pub fn process_start_ticks(pid: u32) -> io::Result<u64> {
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

#[cfg(unix)]
fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

#[cfg(windows)]
fn host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_default()
}

/// The real user id; 0 on Windows, which has none (a record made there is
/// only ever read there).
fn current_uid() -> u32 {
    #[cfg(unix)]
    return rustix::process::getuid().as_raw();
    #[cfg(windows)]
    return 0;
}

/// Whether `name` is an internal name of the protocol (a sandbox being
/// created) rather than a sandbox.
pub fn is_internal_name(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(NEW_PREFIX.as_bytes())
}

#[cfg(test)]
mod tests {
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
        #[cfg(unix)]
        check::<Look>();
        #[cfg(unix)]
        check::<Locks>();
        check::<Hold>();
        check::<LeaseRecord>();
    }
}
