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

    /// Who holds the sandbox, as `ls` shows it: the lease lock's holder
    /// as `/proc` names it, or the record's claim where nobody holds the
    /// lock. The record's command line may stand for the holder only when
    /// it is corroborated: the record names the holder's pid, and the
    /// holder's `comm` (the kernel's first 15 bytes of its program's name)
    /// is the start of the record's program name; then it says more than
    /// 15 characters of `comm`.
    ///
    /// ```
    /// # let dir = sandkeeper_engine::Sandbox::new()?;
    /// # let roots = [sandkeeper_engine::root::Root::open(dir.path())?];
    /// use sandkeeper_engine::scan::{Held, Scanner};
    ///
    /// let report = Scanner::new().scan_roots(&roots)?;
    /// for e in report.roots[0].entries.iter().filter(|e| e.is_managed()) {
    ///     match e.held() {
    ///         Held::Lock { pid, name, .. } => println!("{pid} {name:?}"),
    ///         Held::Claimed { command, .. } => println!("record: {command}"),
    ///         _ => println!("(invalid lease)"),
    ///     }
    /// }
    /// # Ok::<(), sandkeeper_engine::Error>(())
    /// ```
    pub fn held(&self) -> Held {
        let holders = self.lock_holders();
        match (holders.first(), self.lease.as_deref()) {
            (Some(&pid), lease) => {
                let name = match (self.holder_comm(pid), lease) {
                    (Some(comm), Some(l)) if Entry::corroborates(l, pid, comm) => {
                        HolderName::Program(program(&l.cmd))
                    }
                    (Some(comm), _) => HolderName::Comm(comm.to_owned()),
                    (None, _) => HolderName::Unknown,
                };
                Held::Lock {
                    pid,
                    others: holders.len() > 1,
                    name,
                }
            }
            (None, Some(l)) => Held::Claimed {
                running: (self.check_record_pid(l) == PidCheck::RunningSameStart).then_some(l.pid),
                command: program(&l.cmd),
            },
            (None, None) => Held::Invalid,
        }
    }

    /// Whether the record's command line may stand for `pid`, the lock's
    /// holder named `comm` (see [`Entry::held`]).
    fn corroborates(l: &LeaseRecord, pid: u32, comm: &str) -> bool {
        let Some(first) = l.cmd.first() else {
            return false;
        };
        let name = first.rsplit('/').next().unwrap_or(first);
        // `pid` holds the lock (`/proc/locks`): the record naming it is
        // the record naming a holder.
        l.pid == pid && !comm.is_empty() && name.starts_with(comm)
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

/// Who holds a managed sandbox ([`Entry::held`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Held {
    /// Its lease lock is held (`/proc/locks`: a fact).
    Lock {
        /// The first holder.
        pid: u32,
        /// Whether other processes hold it too.
        others: bool,
        /// What the holder is called.
        name: HolderName,
    },
    /// Nobody holds the lock: what the record claims.
    Claimed {
        /// The record's pid, when a process with that pid and the
        /// recorded start time runs (which does not prove it made the
        /// directory).
        running: Option<u32>,
        /// The record's command line, as [`program`] shortens it.
        command: String,
    },
    /// It has no valid lease record.
    Invalid,
}

/// What the holder of a lease lock is called ([`Held::Lock`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HolderName {
    /// The record's command line ([`program`]), corroborated by the
    /// holder's pid and `comm`.
    Program(String),
    /// The holder's `comm` as `/proc` shows it.
    Comm(String),
    /// The holder was not seen in `/proc`.
    Unknown,
}

/// The program of a command line as a person names it: the file name of
/// `argv[0]` without the hash cargo appends to test binaries
/// (`deps/cli-0123456789abcdef` → `cli`), then the arguments.
///
/// ```
/// use sandkeeper_engine::scan::program;
///
/// let cmd = ["/w/target/debug/deps/cli-0123456789abcdef", "--exact", "x"].map(String::from);
/// assert_eq!(program(&cmd), "cli --exact x");
/// ```
pub fn program(cmd: &[String]) -> String {
    let Some(first) = cmd.first() else {
        return String::new();
    };
    let name = first.rsplit('/').next().unwrap_or(first);
    let mut out = strip_cargo_hash(name).to_owned();
    for arg in &cmd[1..] {
        out.push(' ');
        out.push_str(arg);
    }
    out
}

/// `NAME-<16 hex digits>` → `NAME` (how cargo names test and bench
/// binaries); anything else unchanged.
fn strip_cargo_hash(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((stem, hash))
            if !stem.is_empty()
                && hash.len() == 16
                && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            stem
        }
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs() {
        let s = |v: &[&str]| v.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        let cases: [(&[&str], &str); 6] = [
            (
                &[
                    "/w/target/debug/deps/cli-0123456789abcdef",
                    "--exact",
                    "scan::x",
                ],
                "cli --exact scan::x",
            ),
            (&["/usr/sbin/sshd", "-D"], "sshd -D"),
            (&["cargo"], "cargo"),
            (&["app-0123456789abcdeg"], "app-0123456789abcdeg"),
            (&["-0123456789abcdef"], "-0123456789abcdef"),
            (&[], ""),
        ];
        for (cmd, want) in cases {
            assert_eq!(program(&s(cmd)), want, "{cmd:?}");
        }
    }
}
