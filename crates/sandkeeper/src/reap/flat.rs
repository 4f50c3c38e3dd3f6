//! A reap's decisions made while the scan streams its entries
//! ([`Scanner::scan_root_with`](crate::scan::Scanner::scan_root_with)):
//! what is kept of an entry is one compact [`Rec`] (80 bytes) plus its
//! name in one shared buffer, never the scanned [`Entry`] (about 300
//! bytes, more with holders or a lease record).
//!
//! Two parts of a decision need the whole root: `--keep-last N` (an
//! entry's rank among all of its family) and a forward clock step (any
//! lease record of the root may betray one). So an entry is decided as
//! far as the entry alone allows ([`verdict::decide_before_rank`]); each
//! family keeps only its N newest (mtime, arrival) pairs; the steps are
//! gathered as the entries pass ([`clock::StepFinder`]); and after the
//! scan [`Decisions::verdict`] finishes each decision exactly as
//! [`Reaper::decide`](super::Reaper::decide) does on a collecting scan.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::clock;
use super::policy::Policy;
use super::verdict::{self, Pending};
use super::{KeepReason, ReapReason, Removed, Skipped, Verdict};
use crate::scan::{Entry, EntryState, StateReason};
use crate::walk::FileKind;

/// What a decision is, as far as the entry alone told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    /// Kept for a reason told by the entry alone (`payload` per [`keep_of`]).
    Keep(KeepTag),
    /// To be removed (unless a clock step or its rank keeps it).
    Reap(ReapTag),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeepTag {
    Live,
    InUse,
    Unknown,
    /// `payload`: the age in ms.
    InGrace,
    /// `payload`: until (ms).
    KeptUntil,
    NotSelected,
    /// `payload`: the age in ms.
    TooNew,
    /// `payload`: the uid.
    OtherOwner,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReapTag {
    Orphaned,
    /// `payload`: the glob's index in the policy.
    Matched,
    /// `payload`: until (ms).
    KeptUnderPressure,
}

/// One entry, compactly: what deciding, removing and recording it needs.
#[derive(Debug, Clone)]
struct Rec {
    /// Where its name starts in [`Decisions::names`].
    name_at: u64,
    newest_mtime_ms: Option<i64>,
    disk_bytes: u64,
    /// Files and directories (as scanned), summed.
    items: u64,
    identity: (u64, u64),
    payload: u64,
    name_len: u32,
    /// Index into [`Decisions::families`].
    family: u32,
    uid: u32,
    /// The `keep_last` of its filters when its rank decides (0: it does not).
    keep_last: u32,
    tag: Tag,
    state: EntryState,
    kind: FileKind,
    has_lease: bool,
}

/// The decisions of one root, made as its entries stream by.
pub(super) struct Decisions<'p> {
    policy: &'p Policy,
    now_ms: i64,
    recs: Vec<Rec>,
    names: Vec<u8>,
    families: Vec<Arc<str>>,
    family_of: HashMap<*const u8, u32>,
    /// Per family, with `--keep-last`: its `keep` newest members, newest
    /// first, as (mtime, arrival); ties go to the earlier name, as in
    /// [`verdict::decide`].
    newest: Vec<Vec<(Option<i64>, u32)>>,
    keep: usize,
    steps: Option<clock::StepFinder>,
    found_steps: Option<clock::Steps>,
}

impl<'p> Decisions<'p> {
    /// Decisions under `policy` at `now_ms`.
    pub(super) fn new(policy: &'p Policy, now_ms: i64) -> Decisions<'p> {
        let keep = if policy.pressure {
            0
        } else {
            std::iter::once(policy.filters())
                .chain(policy.rule_filters.iter().flatten().copied())
                .filter_map(|f| f.keep_last)
                .max()
                .unwrap_or(0)
        };
        Decisions {
            policy,
            now_ms,
            recs: Vec::new(),
            names: Vec::new(),
            families: Vec::new(),
            family_of: HashMap::new(),
            newest: Vec::new(),
            keep,
            steps: clock::StepFinder::new(),
            found_steps: None,
        }
    }

    /// How many entries were decided.
    pub(super) fn len(&self) -> usize {
        self.recs.len()
    }

    /// Decides `entry` as far as it alone tells, and keeps what is needed
    /// of it; the entry itself is dropped.
    pub(super) fn add(&mut self, entry: Entry) {
        let at = self.recs.len() as u32;
        let family = self.family(&entry.pattern);
        if self.keep > 0 {
            let list = &mut self.newest[family as usize];
            let key = entry.newest_mtime_ms;
            // After every member at least as new (earlier names first).
            let pos = list.partition_point(|&(m, _)| m >= key);
            if pos < self.keep {
                list.insert(pos, (key, at));
                list.truncate(self.keep);
            }
        }
        if let Some(steps) = &mut self.steps {
            steps.add(&entry);
        }
        let (tag, payload, keep_last) =
            match verdict::decide_before_rank(&entry, self.policy, self.now_ms) {
                Pending::Decided(Verdict::Keep(reason)) => {
                    let (tag, payload) = keep_of(&reason);
                    (Tag::Keep(tag), payload, 0)
                }
                Pending::Decided(Verdict::Reap(reason)) => {
                    let (tag, payload) = self.reap_of(&reason);
                    (Tag::Reap(tag), payload, 0)
                }
                Pending::Rank { keep_last, reason } => {
                    let (tag, payload) = self.reap_of(&reason);
                    // `keep` is at least this `keep_last`: the family list
                    // holds every member that could outrank it.
                    (
                        Tag::Reap(tag),
                        payload,
                        keep_last.min(u32::MAX as usize) as u32,
                    )
                }
            };
        let name = entry.name.as_bytes();
        self.recs.push(Rec {
            name_at: self.names.len() as u64,
            newest_mtime_ms: entry.newest_mtime_ms,
            disk_bytes: entry.disk_bytes,
            items: entry.files.saturating_add(entry.dirs),
            identity: entry.identity,
            payload,
            name_len: name.len() as u32,
            family,
            uid: entry.uid,
            keep_last,
            tag,
            state: entry.state,
            kind: entry.kind,
            has_lease: entry.lease.is_some(),
        });
        self.names.extend_from_slice(name);
    }

    /// Ends the stream: the clock steps the root's records betray are known.
    pub(super) fn finish(&mut self) {
        self.found_steps = self.steps.take().and_then(clock::StepFinder::finish);
        self.names.shrink_to_fit();
        self.recs.shrink_to_fit();
    }

    /// The finished decision on entry `i` (after [`finish`](Self::finish)):
    /// the verdict [`Reaper::decide`](super::Reaper::decide) gives.
    pub(super) fn verdict(&self, i: usize) -> Verdict {
        let r = &self.recs[i];
        let reap = match r.tag {
            Tag::Keep(tag) => return Verdict::Keep(self.keep_reason(tag, r.payload)),
            Tag::Reap(tag) => tag,
        };
        if r.keep_last > 0 {
            let rank = self.newest[r.family as usize]
                .iter()
                .position(|&(_, at)| at as usize == i);
            if rank.is_some_and(|rank| rank < r.keep_last as usize) {
                return Verdict::Keep(KeepReason::AmongNewest);
            }
        }
        // As `verdict::distrust_ages`: an orphan whose lease proves it
        // dead goes whatever the clock says; every other candidate's
        // removal depends on its age.
        let proven_dead =
            reap == ReapTag::Orphaned && r.has_lease && r.state == EntryState::Orphaned;
        if !proven_dead {
            if let Some(step) = self.found_steps.as_ref().and_then(|s| s.for_uid(r.uid)) {
                return Verdict::Keep(KeepReason::ClockStepped(step));
            }
        }
        Verdict::Reap(self.reap_reason(reap, r.payload))
    }

    /// The order of removal: entries kept on purpose (taken only under
    /// pressure) after all others, then oldest first, then by name.
    pub(super) fn removal_key(&self, i: usize) -> (bool, Option<i64>, usize) {
        let r = &self.recs[i];
        (
            r.tag == Tag::Reap(ReapTag::KeptUnderPressure),
            r.newest_mtime_ms,
            i,
        )
    }

    /// A small [`Entry`] rebuilt from entry `i`'s record: its name,
    /// family, kind, state, sizes (`files` holds files and directories
    /// summed; `dirs` is 0), newest mtime, owner and identity. What a
    /// removal and its records use; nothing else is carried (no holders,
    /// no lease record: the in-use check after the move asks a fresh
    /// `/proc` pass, never the scan's).
    pub(super) fn entry(&self, i: usize) -> Entry {
        let r = &self.recs[i];
        Entry {
            name: self.name(i).to_owned(),
            pattern: Arc::clone(&self.families[r.family as usize]),
            kind: r.kind,
            state: r.state,
            reason: StateReason::NoLease,
            disk_bytes: r.disk_bytes,
            apparent_bytes: 0,
            files: r.items,
            dirs: 0,
            newest_mtime_ms: r.newest_mtime_ms,
            uid: r.uid,
            mode: 0,
            identity: r.identity,
            holders: Vec::new(),
            kernel: Vec::new(),
            sockets: Vec::new(),
            lease: None,
            lease_invalid: false,
            unreadable: 0,
            mount_points: Vec::new(),
        }
    }

    /// The record of keeping entry `i` for `reason`.
    pub(super) fn skipped(&self, root: &Path, i: usize, reason: KeepReason) -> Skipped {
        let r = &self.recs[i];
        Skipped {
            path: root.join(self.name(i)),
            pattern: Arc::clone(&self.families[r.family as usize]),
            state: r.state,
            reason,
            disk_bytes: r.disk_bytes,
        }
    }

    /// The record of removing entry `i` for `reason` (a dry run's).
    pub(super) fn removed(&self, root: &Path, i: usize, reason: ReapReason) -> Removed {
        let r = &self.recs[i];
        Removed {
            path: root.join(self.name(i)),
            pattern: Arc::clone(&self.families[r.family as usize]),
            state: r.state,
            reason,
            disk_bytes: r.disk_bytes,
        }
    }

    /// Entry `i`'s disk bytes and files and directories (as scanned).
    pub(super) fn sizes(&self, i: usize) -> (u64, u64) {
        let r = &self.recs[i];
        (r.disk_bytes, r.items)
    }

    fn name(&self, i: usize) -> &OsStr {
        let r = &self.recs[i];
        let at = r.name_at as usize;
        OsStr::from_bytes(&self.names[at..at + r.name_len as usize])
    }

    /// The family number of `pattern` (one shared string per family).
    fn family(&mut self, pattern: &Arc<str>) -> u32 {
        let key = Arc::as_ptr(pattern).cast::<u8>();
        if let Some(&n) = self.family_of.get(&key) {
            return n;
        }
        let n = self.families.len() as u32;
        self.families.push(Arc::clone(pattern));
        self.family_of.insert(key, n);
        if self.keep > 0 {
            self.newest.push(Vec::new());
        }
        n
    }

    fn reap_of(&self, reason: &ReapReason) -> (ReapTag, u64) {
        match reason {
            ReapReason::Orphaned => (ReapTag::Orphaned, 0),
            ReapReason::Matched(glob) => {
                let at = self.policy.globs.iter().position(|g| g == glob);
                (ReapTag::Matched, at.unwrap_or(0) as u64)
            }
            ReapReason::KeptUnderPressure(until) => (ReapTag::KeptUnderPressure, *until),
        }
    }

    fn reap_reason(&self, tag: ReapTag, payload: u64) -> ReapReason {
        match tag {
            ReapTag::Orphaned => ReapReason::Orphaned,
            ReapTag::Matched => ReapReason::Matched(self.policy.globs[payload as usize].clone()),
            ReapTag::KeptUnderPressure => ReapReason::KeptUnderPressure(payload),
        }
    }

    fn keep_reason(&self, tag: KeepTag, payload: u64) -> KeepReason {
        match tag {
            KeepTag::Live => KeepReason::Live,
            KeepTag::InUse => KeepReason::InUse,
            KeepTag::Unknown => KeepReason::Unknown,
            KeepTag::InGrace => KeepReason::InGrace {
                age: Duration::from_millis(payload),
            },
            KeepTag::KeptUntil => KeepReason::KeptUntil(payload),
            KeepTag::NotSelected => KeepReason::NotSelected,
            KeepTag::TooNew => KeepReason::TooNew {
                age: Duration::from_millis(payload),
            },
            KeepTag::OtherOwner => KeepReason::OtherOwner(payload as u32),
        }
    }
}

/// A keep decision told by the entry alone, as a tag and a payload. Ages
/// are whole milliseconds ([`verdict::age_of`] makes them so).
fn keep_of(reason: &KeepReason) -> (KeepTag, u64) {
    let ms = |d: &Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    match reason {
        KeepReason::Live => (KeepTag::Live, 0),
        KeepReason::InUse => (KeepTag::InUse, 0),
        KeepReason::Unknown => (KeepTag::Unknown, 0),
        KeepReason::InGrace { age } => (KeepTag::InGrace, ms(age)),
        KeepReason::KeptUntil(until) => (KeepTag::KeptUntil, *until),
        KeepReason::NotSelected => (KeepTag::NotSelected, 0),
        KeepReason::TooNew { age } => (KeepTag::TooNew, ms(age)),
        KeepReason::OtherOwner(uid) => (KeepTag::OtherOwner, u64::from(*uid)),
        // Not told by the entry alone (rank, clock, removal time).
        other => unreachable!("not a decision of the entry alone: {other:?}"),
    }
}
