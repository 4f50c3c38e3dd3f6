//! Deciding, per entry, whether a reap removes it, and why (or why not).

use std::fmt;
use std::time::Duration;

use super::clock;
use super::policy::{Filters, Policy};
use crate::scan::{Entry, EntryState, RootReport};

/// What a reap does with an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Remove it.
    Reap(ReapReason),
    /// Leave it.
    Keep(KeepReason),
}

impl Verdict {
    /// Whether the entry is to be removed.
    pub fn is_reap(&self) -> bool {
        matches!(self, Verdict::Reap(_))
    }
}

/// Why an entry is removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReapReason {
    /// A managed sandbox whose owner is gone.
    Orphaned,
    /// An unmanaged entry selected by a `--match` glob.
    Matched(String),
    /// Kept on purpose until this time (ms), but the root is above its high
    /// watermark and every other candidate is gone: taken last, oldest
    /// first, each only while the low watermark is still not reached.
    KeptUnderPressure(u64),
}

impl ReapReason {
    /// A stable name for the reason: `orphaned`, `matched` or
    /// `kept_under_pressure` (the rule's glob is not part of it).
    pub fn as_str(&self) -> &'static str {
        match self {
            ReapReason::Orphaned => "orphaned",
            ReapReason::Matched(_) => "matched",
            ReapReason::KeptUnderPressure(_) => "kept_under_pressure",
        }
    }

    /// The glob of the rule that selected the entry ([`Matched`](Self::Matched));
    /// empty for the other reasons.
    pub fn rule(&self) -> &str {
        match self {
            ReapReason::Matched(glob) => glob,
            _ => "",
        }
    }
}

/// Why an entry is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeepReason {
    /// Its lease is held.
    Live,
    /// A process or the kernel uses something inside.
    InUse,
    /// Its state could not be told.
    Unknown,
    /// Younger than the grace period.
    InGrace {
        /// Its age.
        age: Duration,
    },
    /// Kept on purpose (`SANDKEEPER_KEEP`) until this time (ms).
    KeptUntil(u64),
    /// Unmanaged, and no `--match` glob selects it.
    NotSelected,
    /// Not older than `--older-than`.
    TooNew {
        /// Its age.
        age: Duration,
    },
    /// Among the `--keep-last` newest of its family.
    AmongNewest,
    /// Owned by another user than `--owner`.
    OtherOwner(u32),
    /// `--target-free` was met before its turn.
    TargetMet,
    /// Between the scan and the removal it became live, in use, or was
    /// replaced (a race with its owner or another reaper).
    Changed(String),
    /// The reap was asked to stop ([`stop_flag`](super::PolicyBuilder::stop_flag))
    /// before its turn.
    Stopped,
    /// The wall clock was stepped forward (by about this much) since
    /// sandboxes of this boot were made: ages cannot be trusted, so only
    /// orphans whose lease proves them dead may go.
    ClockStepped(Duration),
}

impl fmt::Display for ReapReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReapReason::Orphaned => f.write_str("orphaned sandbox"),
            ReapReason::Matched(glob) => write!(f, "matches {glob:?}"),
            ReapReason::KeptUnderPressure(ms) => write!(
                f,
                "{} on purpose, taken under pressure after everything else",
                crate::human::kept_until(*ms, None)
            ),
        }
    }
}

impl KeepReason {
    /// A short stable name, for counts and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            KeepReason::Live => "live",
            KeepReason::InUse => "in_use",
            KeepReason::Unknown => "unknown",
            KeepReason::InGrace { .. } => "grace",
            KeepReason::KeptUntil(_) => "kept",
            KeepReason::NotSelected => "not_selected",
            KeepReason::TooNew { .. } => "too_new",
            KeepReason::AmongNewest => "keep_last",
            KeepReason::OtherOwner(_) => "owner",
            KeepReason::TargetMet => "target_met",
            KeepReason::Changed(_) => "changed",
            KeepReason::Stopped => "stopped",
            KeepReason::ClockStepped(_) => "clock_stepped",
        }
    }
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepReason::Live => f.write_str("live: its lease is held"),
            KeepReason::InUse => f.write_str("in use"),
            KeepReason::Unknown => f.write_str("unknown state: never removed"),
            KeepReason::InGrace { age } => write!(
                f,
                "younger than the grace period ({} old)",
                crate::human::duration(*age)
            ),
            KeepReason::KeptUntil(ms) => {
                write!(f, "{} on purpose", crate::human::kept_until(*ms, None))
            }
            KeepReason::NotSelected => f.write_str("unmanaged and no --match rule selects it"),
            KeepReason::TooNew { age } => write!(
                f,
                "not older than --older-than ({} old)",
                crate::human::duration(*age)
            ),
            KeepReason::AmongNewest => f.write_str("among the --keep-last newest of its family"),
            KeepReason::OtherOwner(uid) => write!(f, "owned by uid {uid}, not --owner"),
            KeepReason::TargetMet => f.write_str("the --target-free goal was met"),
            KeepReason::Changed(what) => write!(f, "changed since the scan: {what}"),
            KeepReason::Stopped => f.write_str("the reap was stopped before its turn"),
            KeepReason::ClockStepped(by) => write!(
                f,
                "the clock was stepped forward by about {} since boot; ages cannot be trusted",
                crate::human::duration(*by)
            ),
        }
    }
}

/// The age of an entry at `now_ms`: a future-dated entry (a clock that
/// jumped back, a bad mtime) counts as brand new, never as old.
pub(crate) fn age_of(entry: &Entry, now_ms: i64) -> Duration {
    entry.age(now_ms)
}

/// Decides every entry of `report` under `policy` at `now_ms`, without
/// the free-space target (which is applied while removing).
pub(crate) fn decide(report: &RootReport, policy: &Policy, now_ms: i64) -> Vec<Verdict> {
    let ranks = if policy.uses_keep_last() {
        family_ranks(report)
    } else {
        Vec::new()
    };
    report
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| decide_one(e, policy, now_ms, ranks.get(i).copied()))
        .collect()
}

/// Until when (ms) the entry is kept on purpose, if it still is at
/// `now_ms` ([`Entry::kept_until`] under the policy's
/// [`max_keep`](super::PolicyBuilder::max_keep)).
fn kept_until(entry: &Entry, policy: &Policy, now_ms: i64) -> Option<u64> {
    entry.kept_until(now_ms, policy.max_keep)
}

/// `rank`: the entry's place among its family, newest first (0 = the
/// newest), when some rule keeps the newest N.
fn decide_one(entry: &Entry, policy: &Policy, now_ms: i64, rank: Option<usize>) -> Verdict {
    match decide_before_rank(entry, policy, now_ms) {
        Pending::Decided(verdict) => verdict,
        Pending::Rank { keep_last, reason } => match rank {
            Some(rank) if rank < keep_last => Verdict::Keep(KeepReason::AmongNewest),
            _ => Verdict::Reap(reason),
        },
    }
}

/// A decision as far as it can be made from the entry alone.
pub(crate) enum Pending {
    /// Decided.
    Decided(Verdict),
    /// Removed for `reason` unless the entry is among the `keep_last`
    /// newest of its family (which takes the whole family to tell).
    Rank {
        /// The `keep_last` of the filters that apply.
        keep_last: usize,
        /// Why it goes otherwise.
        reason: ReapReason,
    },
}

/// Decides `entry` up to its place in its family: the same steps as
/// [`decide_one`], in the same order, which stops where the rank is needed.
pub(crate) fn decide_before_rank(entry: &Entry, policy: &Policy, now_ms: i64) -> Pending {
    let keep = |reason| Pending::Decided(Verdict::Keep(reason));
    let (reason, filters): (ReapReason, Filters) = match entry.state {
        EntryState::Live => return keep(KeepReason::Live),
        EntryState::InUse => return keep(KeepReason::InUse),
        EntryState::Unknown => return keep(KeepReason::Unknown),
        EntryState::Orphaned => (ReapReason::Orphaned, policy.filters()),
        EntryState::Idle => match policy.matching_rule(&entry.name) {
            Some((glob, filters)) => (ReapReason::Matched(glob.to_owned()), filters),
            None => return keep(KeepReason::NotSelected),
        },
    };
    let age = age_of(entry, now_ms);
    // The grace protects directories still being made; a proven orphan is
    // not one (see `proven_orphan`).
    if age < policy.grace && !proven_orphan(entry) {
        return keep(KeepReason::InGrace { age });
    }
    // The owner filter never relaxes, for a kept sandbox neither.
    if let Some(uid) = filters.owner {
        if entry.uid != uid {
            return keep(KeepReason::OtherOwner(entry.uid));
        }
    }
    if let Some(until) = kept_until(entry, policy, now_ms) {
        // Under pressure, a candidate after every other (`removal_key`).
        if policy.pressure && policy.take_kept {
            return Pending::Decided(Verdict::Reap(ReapReason::KeptUnderPressure(until)));
        }
        return keep(KeepReason::KeptUntil(until));
    }
    if !policy.pressure {
        if let Some(limit) = filters.older_than {
            if age <= limit {
                return keep(KeepReason::TooNew { age });
            }
        }
        if let Some(keep_last) = filters.keep_last {
            return Pending::Rank { keep_last, reason };
        }
    }
    Pending::Decided(Verdict::Reap(reason))
}

/// [`Entry::is_proven_orphan`]: needs no grace, and its age is no witness.
pub(crate) fn proven_orphan(entry: &Entry) -> bool {
    entry.is_proven_orphan()
}

/// After a forward clock step, keeps every entry whose removal depends on
/// its age — every candidate but the orphans: a sandbox whose lease lock
/// is free is provably dead whatever the clock says. Each entry is judged
/// by the step its own witnesses allow ([`clock::Steps::for_entry`]).
pub(crate) fn distrust_ages(verdicts: &mut [Verdict], report: &RootReport, steps: &clock::Steps) {
    for (verdict, entry) in verdicts.iter_mut().zip(&report.entries) {
        let proven_dead =
            matches!(verdict, Verdict::Reap(ReapReason::Orphaned)) && proven_orphan(entry);
        if !verdict.is_reap() || proven_dead {
            continue;
        }
        if let Some(step) = steps.for_entry(entry) {
            *verdict = Verdict::Keep(KeepReason::ClockStepped(step));
        }
    }
}

/// Each entry's place in its family, newest first (all states count: a
/// family's newest runs are its newest runs), indexed like the entries.
fn family_ranks(report: &RootReport) -> Vec<usize> {
    let mut ranks = vec![usize::MAX; report.entries.len()];
    for group in &report.groups {
        let mut members = group.members.clone();
        members.sort_by(|&a, &b| {
            let (ea, eb) = (&report.entries[a], &report.entries[b]);
            eb.newest_mtime_ms
                .cmp(&ea.newest_mtime_ms)
                .then_with(|| ea.name.cmp(&eb.name))
        });
        for (rank, &i) in members.iter().enumerate() {
            ranks[i] = rank;
        }
    }
    ranks
}
