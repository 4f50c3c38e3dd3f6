//! What a lease record claims, kept apart from what was verified.
//!
//! A lease record is written by whoever made the directory, and anyone may
//! make a directory in a shared root: its `uid`, `host`, `cmd`, `site`,
//! `pid` and times are claims. The facts come from the kernel: the
//! directory's owner (`fstat` in the scan, [`Entry::uid`]), the holders of
//! its lease lock (`/proc/locks`, [`StateReason::LockHeld`]) and what
//! those processes are (`/proc`, [`Entry::holders`]). Renders show facts as
//! facts, and claims labelled as claims, with a plain word where the two
//! disagree.

use sandkeeper::lease::LeaseRecord;
use sandkeeper::scan::{Entry, StateReason};

use super::escape::Untrusted;
use crate::config::user_name;

/// How many characters of a claimed command a table shows.
pub const TABLE_FIELD: usize = 200;

/// The pids that hold the entry's lease lock, from `/proc/locks`: facts.
pub fn lock_holders(e: &Entry) -> &[u32] {
    match &e.reason {
        StateReason::LockHeld { pids } => pids,
        _ => &[],
    }
}

/// The command name (`comm`, from `/proc`) of `pid` when the scan saw it
/// use the entry.
pub fn holder_comm(e: &Entry, pid: u32) -> Option<&str> {
    e.holders.iter().find(|h| h.pid == pid).map(|h| &*h.comm)
}

/// What could be verified about the pid a record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidCheck {
    /// It holds the lease lock (`/proc/locks`).
    HoldsLock,
    /// The lock is held, by other processes.
    NotHolder,
    /// The directory could not be locked; a process with that pid and the
    /// recorded start time runs on this boot (`/proc/PID/stat`). That
    /// proves the process exists, not that it made the directory.
    RunningSameStart,
    /// Nothing verifies it (the lock is free: whoever made it is gone).
    Unverified,
}

impl PidCheck {
    /// Judges `record.pid` against what the scan of `e` found.
    pub fn of(e: &Entry, record: &LeaseRecord) -> PidCheck {
        let holders = lock_holders(e);
        if holders.contains(&record.pid) {
            PidCheck::HoldsLock
        } else if matches!(e.reason, StateReason::LockHeld { .. }) {
            PidCheck::NotHolder
        } else if matches!(e.reason, StateReason::RecordOwnerAlive) {
            PidCheck::RunningSameStart
        } else {
            PidCheck::Unverified
        }
    }

    /// A few words for `explain`.
    pub fn describe(self) -> &'static str {
        match self {
            PidCheck::HoldsLock => "holds the lease lock, by /proc/locks",
            PidCheck::NotHolder => "does not hold the lease lock",
            PidCheck::RunningSameStart => {
                "a process with this pid and start time runs on this boot; that it made the directory is not verified"
            }
            PidCheck::Unverified => "not verified: nothing holds the lease lock",
        }
    }
}

/// A user for people: `nobody (uid 65534)`, or `uid 12345` when it has no
/// name.
pub fn user(uid: u32) -> String {
    let name = user_name(uid);
    if name == uid.to_string() {
        format!("uid {uid}")
    } else {
        format!("{} (uid {uid})", Untrusted::text(&name))
    }
}

/// A user's name alone, or `uid N`.
pub fn user_short(uid: u32) -> String {
    let name = user_name(uid);
    if name == uid.to_string() {
        format!("uid {uid}")
    } else {
        Untrusted::text(&name).to_string()
    }
}

/// `record claims uid 0 (root); the directory belongs to nobody` when the
/// record's uid is not the directory's owner.
pub fn uid_mismatch(e: &Entry, record: &LeaseRecord) -> Option<String> {
    if record.uid == e.uid {
        return None;
    }
    let claimed = match user_name(record.uid) {
        n if n == record.uid.to_string() => format!("uid {n}"),
        n => format!("uid {} ({})", record.uid, Untrusted::text(&n)),
    };
    Some(format!(
        "record claims {claimed}; the directory belongs to {}",
        user_short(e.uid)
    ))
}

/// A claimed command line, escaped and quoted as one value.
pub fn command(record: &LeaseRecord, limit: Option<usize>) -> String {
    let joined = record.cmd.join(" ");
    let value = Untrusted::text(&joined);
    match limit {
        Some(n) => value.max_chars(n).to_string(),
        None => value.to_string(),
    }
}
