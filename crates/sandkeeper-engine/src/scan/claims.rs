//! What a lease record claims, kept apart from what was verified.
//!
//! A lease record is written by whoever made the directory, and anyone may
//! make a directory in a shared root: its `uid`, `host`, `cmd`, `site`,
//! `pid` and times are claims. The facts come from the kernel: the
//! directory's owner (`fstat` in the scan, [`Entry::uid`]), the holders of
//! its lease lock (`/proc/locks`, [`StateReason::LockHeld`]) and what those
//! processes are (`/proc`, [`Entry::holders`]). A renderer shows facts as
//! facts and claims labelled as claims; these say which is which.

use super::{Entry, StateReason};
use crate::lease::LeaseRecord;

impl Entry {
    /// The pids that hold the entry's lease lock, from `/proc/locks`: facts.
    pub fn lock_holders(&self) -> &[u32] {
        match &self.reason {
            StateReason::LockHeld { pids } => pids,
            _ => &[],
        }
    }

    /// The command name (`comm`, from `/proc`) of `pid` when the scan saw
    /// it use the entry.
    pub fn holder_comm(&self, pid: u32) -> Option<&str> {
        self.holders.iter().find(|h| h.pid == pid).map(|h| &*h.comm)
    }

    /// What could be verified about the pid `record` names.
    pub fn check_record_pid(&self, record: &LeaseRecord) -> PidCheck {
        if self.lock_holders().contains(&record.pid) {
            PidCheck::HoldsLock
        } else if matches!(self.reason, StateReason::LockHeld { .. }) {
            PidCheck::NotHolder
        } else if matches!(self.reason, StateReason::RecordOwnerAlive) {
            PidCheck::RunningSameStart
        } else {
            PidCheck::Unverified
        }
    }

    /// Whether `record` claims another uid than the directory's owner.
    pub fn record_uid_differs(&self, record: &LeaseRecord) -> bool {
        record.uid != self.uid
    }
}

/// What could be verified about the pid a lease record names
/// ([`Entry::check_record_pid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// A few words for people.
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
