//! What a group's entries become on their way (see
//! [`execute`](super::execute)): moved, checked, doomed or put back, and
//! the outcome each is recorded with; the bounds the pool and the checks
//! share.

use super::events::Recorder;
use super::{removed, skipped, KeepReason, ReapError, ReapReason, Skipped};
use crate::error::Result;
use crate::remove::{self, LeftBy, Quarantined, RemovalReport, Restore};
use crate::scan::{self, Entry, EntryState};
use std::os::fd::BorrowedFd;
use std::path::Path;

/// The most worker threads a root's pool starts (as the remover's own
/// automatic choice: unlinking contends on filesystem locks).
pub(super) const POOL_MAX: usize = 8;

/// How much nicer than the calling thread the workers are (they inherit
/// its priority, then add this; a failure leaves them as they are).
pub(super) const WORKER_NICE: i32 = 5;

/// Entries with at least this many files and directories (as scanned) may
/// use the remover's helper threads besides their worker; smaller ones
/// are deleted on their worker alone.
pub(super) const LARGE: u64 = 512;

/// Entries with fewer files and directories than this (as scanned) are
/// checked and deleted in one walk (`remove::Quarantined::list`); the listing
/// itself stops at twice as many, handing the entry back to the two
/// walks (it grew since the scan).
pub(super) const SMALL: u64 = 4096;

/// Directories such a listing holds open at most (each until it is
/// deleted); an entry with more is checked and deleted by the two walks.
/// Lower when the descriptor limit is low: the pool's workers together
/// hold at most a quarter of it ([`small_dirs`]).
pub(super) const SMALL_DIRS: u64 = 128;

/// [`SMALL_DIRS`], or less, so that `workers` listings together hold at
/// most a quarter of the soft `RLIMIT_NOFILE` (1024 by default for a
/// service: 8 workers then list up to 32 directories each). Besides them,
/// the entries in flight hold one descriptor each (their claim's, which
/// the move and the removal use): at most two batches' worth.
pub(super) fn small_dirs(workers: usize) -> u64 {
    (soft_nofile() / 4 / workers.max(1) as u64).min(SMALL_DIRS)
}

/// The soft `RLIMIT_NOFILE` (unlimited: `u64::MAX`), which the reap's
/// descriptors in flight are kept within ([`small_dirs`],
/// [`most_per_batch`](super::most_per_batch)).
pub(super) fn soft_nofile() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// An entry of a batch that is in the quarantine. A directory's claim
/// went with it: its locked descriptor is the handle's (the lock is let go
/// when the entry is removed or put back).
pub(super) struct Moved<'d> {
    pub(super) entry: Entry,
    pub(super) reason: ReapReason,
    pub(super) q: Quarantined<'d>,
}

/// A checked entry nothing holds, renamed to its condemned name: only its
/// deletion is left (or, when a stop or the target comes first, its way
/// back to its name).
pub(super) enum Doomed<'d> {
    /// Listed whole by its check: deleted from the listing.
    Listed(remove::Listing<'d>),
    /// Checked by a walk: deleted by the remover's own.
    Walked(Quarantined<'d>),
}

impl<'d> Doomed<'d> {
    pub(super) fn condemn(&mut self) -> Result<()> {
        match self {
            Doomed::Listed(l) => l.condemn(),
            Doomed::Walked(q) => q.condemn(),
        }
    }

    pub(super) fn delete(self) -> Result<RemovalReport> {
        match self {
            Doomed::Listed(l) => l.remove(),
            Doomed::Walked(q) => q.remove(),
        }
    }

    pub(super) fn into_quarantined(self) -> Quarantined<'d> {
        match self {
            Doomed::Listed(l) => l.into_quarantined(),
            Doomed::Walked(q) => q,
        }
    }
}

/// What a check decided for a moved entry.
pub(super) enum Checked<'d> {
    /// Something holds it, or the check cannot tell: why.
    Held(String, Quarantined<'d>),
    /// Nothing holds it.
    Clear(Doomed<'d>),
}

/// What became of an entry of a batch.
pub(super) enum Outcome {
    /// Checked, found unused, and deleted (or what deleting it left).
    Removed(Result<RemovalReport>),
    /// Kept: put back (or left pending), and why.
    Kept(Skipped),
    /// Could not be marked condemned after its check: left pending.
    Failed(ReapError),
}

/// A record of a batch's claims and moves, told only once the batch
/// before it is recorded (so the records stay in the batches' order).
pub(super) enum Note {
    Kept(Skipped),
    Failed(ReapError),
}

pub(super) fn tell(notes: Vec<Note>, result: &mut Recorder<'_>) {
    for note in notes {
        match note {
            Note::Kept(s) => result.kept(s),
            Note::Failed(e) => result.failed(e),
        }
    }
}

/// What the batch's quarantine itself takes on the filesystem (one inode
/// and its blocks), freed when the batch is done; nothing when the entry
/// is its own quarantine (a full filesystem).
pub(super) fn own_quarantine(dir: BorrowedFd<'_>, q: &Quarantined<'_>) -> scan::filesystem::Free {
    match (rustix::fs::fstat(q.dir()), rustix::fs::fstat(dir)) {
        (Ok(qst), Ok(parent)) if (qst.st_dev, qst.st_ino) != (parent.st_dev, parent.st_ino) => {
            scan::filesystem::Free {
                bytes: (qst.st_blocks as u64).saturating_mul(512),
                inodes: 1,
            }
        }
        _ => scan::filesystem::Free::default(),
    }
}

/// Records a removal's outcome: removed, what was left of it, or why it
/// could not be started.
pub(super) fn record_outcome(
    root: &Path,
    entry: &Entry,
    reason: ReapReason,
    removal: Result<RemovalReport>,
    result: &mut Recorder<'_>,
) {
    match removal {
        Ok(removal) => record_removal(root, entry, reason, &removal, result),
        Err(e) => result.failed(ReapError {
            path: root.join(&entry.name),
            error: e.to_string(),
        }),
    }
}

/// Keeps a pending leftover of an interrupted reap: put back, or left in
/// the quarantine when its name is taken or unknown.
pub(super) fn keep_leftover(
    out: &mut Recorder<'_>,
    root: &Path,
    shown: &Path,
    q: Quarantined<'_>,
    why: &str,
) {
    let left = match q.left_by() {
        LeftBy::NotPutBack => {
            "kept in the quarantine by an earlier reap (in use then, its name could not be given back)"
        }
        _ => "left in the quarantine by an interrupted reap",
    };
    let note = format!("{left}; {why}: {}", q.restore().describe(root));
    out.kept(Skipped {
        path: shown.to_owned(),
        pattern: std::sync::Arc::from(""),
        state: EntryState::Unknown,
        reason: KeepReason::Changed(note),
        disk_bytes: 0,
    });
}

/// Puts a quarantined entry back, and returns the record of why it stays.
/// If its name was taken meanwhile it stays pending in the quarantine
/// (never deleted without a fresh check), and the record says where.
pub(super) fn put_back(root: &Path, entry: &Entry, q: Quarantined<'_>, why: KeepReason) -> Skipped {
    let why = match q.restore() {
        Restore::Restored => why,
        other => KeepReason::Changed(format!("{}; {}", why_text(&why), other.describe(root))),
    };
    skipped(root, entry, why)
}

pub(super) fn why_text(why: &KeepReason) -> String {
    match why {
        KeepReason::Changed(what) => what.clone(),
        other => other.to_string(),
    }
}

/// Records a finished removal: removed, or what was left of it.
pub(super) fn record_removal(
    root: &Path,
    entry: &Entry,
    reason: ReapReason,
    removal: &RemovalReport,
    result: &mut Recorder<'_>,
) {
    if removal.is_complete() {
        // The scan measured it (its disk usage is what was freed); the
        // remover does not re-stat.
        result.removed(removed(root, entry, reason));
        return;
    }
    let left: Vec<String> = removal
        .left()
        .iter()
        .take(5)
        .map(|l| format!("{}: {}", l.path().display(), l.reason()))
        .collect();
    result.failed(ReapError {
        path: root.join(&entry.name),
        error: format!(
            "{} could not be removed: {}",
            crate::human::plural(removal.left().len() as u64, "item", "items"),
            left.join("; ")
        ),
    });
}
