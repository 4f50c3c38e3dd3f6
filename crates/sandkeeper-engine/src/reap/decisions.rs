//! A reap's decisions made while the scan streams its entries
//! ([`Scanner::scan_root_with`](crate::scan::Scanner::scan_root_with)):
//! what is kept of an entry is 28 bytes in two columns ([`Wide`],
//! [`Narrow`]), never the scanned [`Entry`] (about 300 bytes, more with
//! holders or a lease record); its name is the scan's own (one buffer,
//! handed over when the scan ends), not a copy, and its family is told by
//! runs (names are sorted, so a family's members mostly follow each other).

//!
//! Two parts of a decision need the whole root: `--keep-last N` (an
//! entry's rank among all of its family) and a forward clock step (any
//! lease record of the root may betray one). So an entry is decided as
//! far as the entry alone allows ([`verdict::decide_before_rank`]); each
//! family keeps only its N newest (mtime, arrival) pairs; the steps are
//! gathered as the entries pass ([`clock::StepFinder`]); and after the
//! scan [`Decisions::verdict`] finishes each decision exactly as
//! [`Reaper::decide`](super::Reaper::decide) does on a collecting scan.
//!
//! What does not fit the columns (a size that is not whole 512-byte
//! blocks or passes 2 TiB, 65,536 files and directories or more, a device
//! other than the root's first entry's, an owner past the root's first
//! 65,535, a `keep_until_ms`, a glob numbered past 65,534) goes into a
//! side table ([`Rare`]): exact values always, compact ones where they
//! suffice.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::clock;
use super::policy::Policy;
use super::verdict::{self, Pending};
use super::{KeepReason, ReapReason, Removed, Skipped, Verdict};
use crate::error::Result;
use crate::scan::listing::ScanNames;
use crate::scan::{Entry, EntryState, StateReason};
use crate::walk::FileKind;

/// What a decision is, as far as the entry alone told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    /// Kept for a reason told by the entry alone.
    Keep(KeepTag),
    /// To be removed (unless a clock step or its rank keeps it).
    Reap(ReapTag),
    /// A name the listing showed that vanished before it was measured:
    /// no decision (the scan gave no entry).
    Vanished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeepTag {
    Live,
    InUse,
    Unknown,
    /// The age, from the newest mtime and the reap's time.
    InGrace,
    /// Until: in [`Rare::until`].
    KeptUntil,
    NotSelected,
    /// The age, from the newest mtime and the reap's time.
    TooNew,
    /// The uid: the entry's.
    OtherOwner,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReapTag {
    Orphaned,
    /// The glob's index in the policy: [`Narrow::glob`] (or [`Rare::glob`]).
    Matched,
    /// Until: in [`Rare::until`].
    KeptUnderPressure,
}

const TAGS: [Tag; 12] = [
    Tag::Keep(KeepTag::Live),
    Tag::Keep(KeepTag::InUse),
    Tag::Keep(KeepTag::Unknown),
    Tag::Keep(KeepTag::InGrace),
    Tag::Keep(KeepTag::KeptUntil),
    Tag::Keep(KeepTag::NotSelected),
    Tag::Keep(KeepTag::TooNew),
    Tag::Keep(KeepTag::OtherOwner),
    Tag::Reap(ReapTag::Orphaned),
    Tag::Reap(ReapTag::Matched),
    Tag::Reap(ReapTag::KeptUnderPressure),
    Tag::Vanished,
];
const STATES: [EntryState; 5] = [
    EntryState::Live,
    EntryState::InUse,
    EntryState::Orphaned,
    EntryState::Idle,
    EntryState::Unknown,
];
const KINDS: [FileKind; 8] = [
    FileKind::File,
    FileKind::Dir,
    FileKind::Symlink,
    FileKind::Fifo,
    FileKind::Socket,
    FileKind::CharDevice,
    FileKind::BlockDevice,
    FileKind::Unknown,
];

// The bits of [`Narrow::meta`].
const TAG_MASK: u16 = 0xf;
const STATE_SHIFT: u16 = 4;
const KIND_SHIFT: u16 = 7;
const MASK3: u16 = 0x7;
/// It is a proven orphan ([`verdict::proven_orphan`]).
const PROVEN: u16 = 1 << 10;
/// It has no newest mtime (`None`).
const NO_MTIME: u16 = 1 << 11;
/// Its exact values are in [`Decisions::rare`].
const RARE: u16 = 1 << 12;
/// Its removal waits for its rank in its family (`--keep-last`).
const RANK: u16 = 1 << 13;

fn code<T: PartialEq>(all: &[T], x: &T) -> u16 {
    all.iter().position(|y| y == x).unwrap_or(0) as u16
}

/// The 8-byte-aligned column of one entry: its newest mtime and inode.
#[derive(Debug, Clone, Copy)]
struct Wide {
    /// `i64::MIN` with [`NO_MTIME`] for none.
    newest_mtime_ms: i64,
    ino: u64,
}

/// The 4-byte-aligned column of one entry (12 bytes); when [`RARE`] is
/// set, only `meta` counts.
#[derive(Debug, Clone, Copy)]
struct Narrow {
    /// Disk usage in 512-byte blocks.
    blocks: u32,
    /// Files and directories (as scanned), summed.
    items: u16,
    /// The owner, by its number in [`Decisions::uids`].
    uid: u16,
    /// The glob that matched ([`ReapTag::Matched`]).
    glob: u16,
    /// Tag, state, kind and flags (the bits above).
    meta: u16,
}

/// The exact values of an entry that the columns cannot hold.
#[derive(Debug, Clone, Copy)]
struct Rare {
    disk_bytes: u64,
    items: u64,
    dev: u64,
    /// `KeptUntil`, `KeptUnderPressure`: until when (ms).
    until: u64,
    glob: usize,
    uid: u32,
}

/// The decisions of one root, made as its entries stream by.
pub(super) struct Decisions<'p> {
    policy: &'p Policy,
    now_ms: i64,
    /// Indexed like the scan's names (vanished ones included).
    wide: Vec<Wide>,
    narrow: Vec<Narrow>,
    rare: HashMap<u32, Rare>,
    /// The device of the first entry: that of (nearly) every entry.
    dev: Option<u64>,
    /// The owners seen, numbered in order of appearance (at most 65,535:
    /// the others' entries are [`RARE`]).
    uids: Vec<u32>,
    uid_numbers: HashMap<u32, u16>,
    /// The scan's names and the families' patterns (after
    /// [`finish`](Self::finish)); past the scan's budget of names, only
    /// those [loaded](Self::load_names).
    names: ScanNames,
    patterns: Vec<Arc<str>>,
    /// (first entry, family) of each run of entries of one family, in
    /// name order.
    runs: Vec<(u32, u32)>,
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
            wide: Vec::new(),
            narrow: Vec::new(),
            rare: HashMap::new(),
            dev: None,
            uids: Vec::new(),
            uid_numbers: HashMap::new(),
            names: ScanNames::new(),
            patterns: Vec::new(),
            runs: Vec::new(),
            newest: Vec::new(),
            keep,
            steps: clock::StepFinder::new(),
            found_steps: None,
        }
    }

    /// The scan listed `names` names in `families` families: room for
    /// exactly that many (no doubling).
    pub(super) fn start(&mut self, names: usize, families: usize) {
        self.wide.reserve_exact(names);
        self.narrow.reserve_exact(names);
        if self.keep > 0 {
            self.newest = vec![Vec::new(); families];
        }
    }

    /// How many names (vanished ones included: they decide nothing).
    pub(super) fn len(&self) -> usize {
        self.narrow.len()
    }

    /// Decides `entry`, name number `i` of family `family`, as far as it
    /// alone tells, and keeps what is needed of it; the entry itself is
    /// dropped.
    pub(super) fn add(&mut self, i: usize, family: u32, entry: Entry) {
        while self.narrow.len() < i {
            self.push_vanished();
        }
        let at = i as u32;
        if self.runs.last().is_none_or(|&(_, f)| f != family) {
            self.runs.push((at, family));
        }
        if self.keep > 0 {
            // A family first seen in a later window of names (see
            // `scan::listing`) is one more.
            if self.newest.len() <= family as usize {
                self.newest.resize_with(family as usize + 1, Vec::new);
            }
            if let Some(list) = self.newest.get_mut(family as usize) {
                let key = entry.newest_mtime_ms;
                // After every member at least as new (earlier names first).
                let pos = list.partition_point(|&(m, _)| m >= key);
                if pos < self.keep {
                    list.insert(pos, (key, at));
                    list.truncate(self.keep);
                }
            }
        }
        if let Some(steps) = &mut self.steps {
            steps.add(&entry);
        }
        let mut until = 0;
        let mut glob = 0usize;
        let mut rank = false;
        let tag = match verdict::decide_before_rank(&entry, self.policy, self.now_ms) {
            Pending::Decided(Verdict::Keep(reason)) => {
                if let KeepReason::KeptUntil(u) = reason {
                    until = u;
                }
                Tag::Keep(keep_of(&reason))
            }
            Pending::Decided(Verdict::Reap(reason)) => {
                Tag::Reap(self.reap_of(&reason, &mut until, &mut glob))
            }
            Pending::Rank { reason, .. } => {
                // `keep` is at least this `keep_last`: the family list
                // holds every member that could outrank it.
                rank = true;
                Tag::Reap(self.reap_of(&reason, &mut until, &mut glob))
            }
        };
        let dev = *self.dev.get_or_insert(entry.identity.0);
        let items = entry.files.saturating_add(entry.dirs);
        let blocks = u32::try_from(entry.disk_bytes / 512).ok();
        let uid = self.uid_number(entry.uid);
        let rare = !entry.disk_bytes.is_multiple_of(512)
            || blocks.is_none()
            || u16::try_from(items).is_err()
            || uid.is_none()
            || entry.identity.0 != dev
            || matches!(
                tag,
                Tag::Keep(KeepTag::KeptUntil) | Tag::Reap(ReapTag::KeptUnderPressure)
            )
            || glob >= usize::from(u16::MAX);
        let mut meta = code(&TAGS, &tag)
            | code(&STATES, &entry.state) << STATE_SHIFT
            | code(&KINDS, &entry.kind) << KIND_SHIFT;
        if verdict::proven_orphan(&entry) {
            meta |= PROVEN;
        }
        if entry.newest_mtime_ms.is_none() {
            meta |= NO_MTIME;
        }
        if rank {
            meta |= RANK;
        }
        if rare {
            meta |= RARE;
            self.rare.insert(
                at,
                Rare {
                    disk_bytes: entry.disk_bytes,
                    items,
                    dev: entry.identity.0,
                    until,
                    glob,
                    uid: entry.uid,
                },
            );
        }
        self.wide.push(Wide {
            newest_mtime_ms: entry.newest_mtime_ms.unwrap_or(i64::MIN),
            ino: entry.identity.1,
        });
        let narrow = match rare {
            true => Narrow {
                blocks: 0,
                items: 0,
                uid: 0,
                glob: 0,
                meta,
            },
            false => Narrow {
                blocks: blocks.unwrap_or(0),
                items: items as u16,
                uid: uid.unwrap_or(0),
                glob: glob as u16,
                meta,
            },
        };
        self.narrow.push(narrow);
    }

    /// The number of owner `uid` (`None` past 65,535 owners).
    fn uid_number(&mut self, uid: u32) -> Option<u16> {
        if let Some(&n) = self.uid_numbers.get(&uid) {
            return Some(n);
        }
        let n = u16::try_from(self.uids.len()).ok()?;
        self.uids.push(uid);
        self.uid_numbers.insert(uid, n);
        Some(n)
    }

    fn uid(&self, i: usize) -> u32 {
        match self.rare(i) {
            Some(r) => r.uid,
            None => self.uids[usize::from(self.narrow[i].uid)],
        }
    }

    fn push_vanished(&mut self) {
        self.wide.push(Wide {
            newest_mtime_ms: i64::MIN,
            ino: 0,
        });
        self.narrow.push(Narrow {
            blocks: 0,
            items: 0,
            uid: 0,
            glob: 0,
            meta: code(&TAGS, &Tag::Vanished) | NO_MTIME,
        });
    }

    /// Ends the stream: takes the scan's names and the families'
    /// patterns; the clock steps the root's records betray are known.
    pub(super) fn finish(&mut self, names: ScanNames, patterns: Vec<Arc<str>>) {
        while self.narrow.len() < names.len() {
            self.push_vanished();
        }
        self.names = names;
        self.patterns = patterns;
        self.runs.shrink_to_fit();
        self.found_steps = self.steps.take().and_then(clock::StepFinder::finish);
    }

    /// The family number of entry `i` (not a vanished one).
    fn family(&self, i: usize) -> usize {
        let run = self.runs.partition_point(|&(first, _)| first as usize <= i);
        self.runs[run.saturating_sub(1)].1 as usize
    }

    fn tag(&self, i: usize) -> Tag {
        TAGS[usize::from(self.narrow[i].meta & TAG_MASK)]
    }

    fn state(&self, i: usize) -> EntryState {
        STATES[usize::from(self.narrow[i].meta >> STATE_SHIFT & MASK3)]
    }

    fn kind(&self, i: usize) -> FileKind {
        KINDS[usize::from(self.narrow[i].meta >> KIND_SHIFT & MASK3)]
    }

    fn rare(&self, i: usize) -> Option<&Rare> {
        match self.narrow[i].meta & RARE {
            0 => None,
            _ => self.rare.get(&(i as u32)),
        }
    }

    fn newest_mtime_ms(&self, i: usize) -> Option<i64> {
        match self.narrow[i].meta & NO_MTIME {
            0 => Some(self.wide[i].newest_mtime_ms),
            _ => None,
        }
    }

    fn glob(&self, i: usize) -> usize {
        self.rare(i)
            .map_or(usize::from(self.narrow[i].glob), |r| r.glob)
    }

    fn until(&self, i: usize) -> u64 {
        self.rare(i).map_or(0, |r| r.until)
    }

    fn identity(&self, i: usize) -> (u64, u64) {
        let dev = self.rare(i).map_or(self.dev.unwrap_or(0), |r| r.dev);
        (dev, self.wide[i].ino)
    }

    /// Entry `i`'s disk bytes and files and directories (as scanned).
    pub(super) fn sizes(&self, i: usize) -> (u64, u64) {
        match self.rare(i) {
            Some(r) => (r.disk_bytes, r.items),
            None => {
                let n = &self.narrow[i];
                (u64::from(n.blocks) * 512, u64::from(n.items))
            }
        }
    }

    /// The finished decision on entry `i` (after [`finish`](Self::finish)):
    /// the verdict [`Reaper::decide`](super::Reaper::decide) gives; `None`
    /// for a name that vanished before it was measured.
    pub(super) fn verdict(&self, i: usize) -> Option<Verdict> {
        let reap = match self.tag(i) {
            Tag::Vanished => return None,
            Tag::Keep(tag) => return Some(Verdict::Keep(self.keep_reason(i, tag))),
            Tag::Reap(tag) => tag,
        };
        if self.narrow[i].meta & RANK != 0 {
            let keep_last = self.keep_last(reap, i);
            let rank = self
                .newest
                .get(self.family(i))
                .and_then(|list| list.iter().position(|&(_, at)| at as usize == i));
            if rank.is_some_and(|rank| rank < keep_last) {
                return Some(Verdict::Keep(KeepReason::AmongNewest));
            }
        }
        // As `verdict::distrust_ages`: an orphan whose lease proves it
        // dead goes whatever the clock says; every other candidate's
        // removal depends on its age.
        let proven_dead = reap == ReapTag::Orphaned && self.narrow[i].meta & PROVEN != 0;
        if !proven_dead {
            let uid = self.uid(i);
            if let Some(step) = self.found_steps.as_ref().and_then(|s| s.for_uid(uid)) {
                return Some(Verdict::Keep(KeepReason::ClockStepped(step)));
            }
        }
        Some(Verdict::Reap(self.reap_reason(i, reap)))
    }

    /// The `keep_last` of the filters that decided entry `i` (as
    /// [`verdict::decide_before_rank`] chose them).
    fn keep_last(&self, reap: ReapTag, i: usize) -> usize {
        let filters = match reap {
            ReapTag::Matched => self
                .policy
                .rule_filters
                .get(self.glob(i))
                .copied()
                .flatten()
                .unwrap_or_else(|| self.policy.filters()),
            _ => self.policy.filters(),
        };
        filters.keep_last.unwrap_or(0)
    }

    /// The order of removal: entries kept on purpose (taken only under
    /// pressure) after all others, then oldest first, then by name.
    pub(super) fn removal_key(&self, i: usize) -> (bool, Option<i64>, usize) {
        (
            self.tag(i) == Tag::Reap(ReapTag::KeptUnderPressure),
            self.newest_mtime_ms(i),
            i,
        )
    }

    /// A small [`Entry`] rebuilt from entry `i`'s columns: its name,
    /// family, kind, state, sizes (`files` holds files and directories
    /// summed; `dirs` is 0), newest mtime, owner and identity. What a
    /// removal and its records use; nothing else is carried (no holders,
    /// no lease record: the in-use check after the move asks a fresh
    /// `/proc` pass, never the scan's).
    ///
    /// `None` when its name is not at hand (see [`name`](Self::name)).
    pub(super) fn entry(&self, i: usize) -> Option<Entry> {
        let (disk_bytes, items) = self.sizes(i);
        Some(Entry {
            name: self.name(i)?.to_owned(),
            pattern: self.pattern(i),
            kind: self.kind(i),
            state: self.state(i),
            reason: StateReason::NoLease,
            disk_bytes,
            apparent_bytes: 0,
            files: items,
            dirs: 0,
            newest_mtime_ms: self.newest_mtime_ms(i),
            uid: self.uid(i),
            mode: 0,
            identity: self.identity(i),
            holders: Vec::new(),
            kernel: Vec::new(),
            sockets: Vec::new(),
            lease: None,
            lease_invalid: false,
            #[cfg(target_os = "linux")]
            origin: None,
            unreadable: 0,
            mount_points: Vec::new(),
        })
    }

    /// The record of keeping entry `i` for `reason`; `None` when its name
    /// is not at hand (see [`name`](Self::name)).
    pub(super) fn skipped(&self, root: &Path, i: usize, reason: KeepReason) -> Option<Skipped> {
        Some(Skipped {
            path: root.join(self.name(i)?),
            pattern: self.pattern(i),
            state: self.state(i),
            reason,
            disk_bytes: self.sizes(i).0,
        })
    }

    /// The record of removing entry `i` for `reason` (a dry run's);
    /// `None` when its name is not at hand (see [`name`](Self::name)).
    pub(super) fn removed(&self, root: &Path, i: usize, reason: ReapReason) -> Option<Removed> {
        Some(Removed {
            path: root.join(self.name(i)?),
            pattern: self.pattern(i),
            state: self.state(i),
            reason,
            disk_bytes: self.sizes(i).0,
        })
    }

    /// Entry `i`'s name: the scan's own buffer, which lives as long as the
    /// decisions (the reaper moves entries by it). Past the scan's budget
    /// of names, only those of the batch last
    /// [loaded](Self::load_names): `None` for the others, and for a name
    /// not found again (gone or renamed since the scan).
    pub(super) fn name(&self, i: usize) -> Option<&OsStr> {
        self.names.get(i)
    }

    /// Cuts `numbers` into batches whose names can be
    /// [loaded](Self::load_names) at once: one batch while the scan held
    /// its names.
    pub(super) fn name_batches<'n>(&self, numbers: &'n [u32]) -> Vec<&'n [u32]> {
        self.names.batches(numbers)
    }

    /// Makes the names of `numbers` (one of
    /// [`name_batches`](Self::name_batches)) those at hand: one more
    /// listing of the root past the scan's budget of names, nothing
    /// before it.
    ///
    /// # Errors
    ///
    /// When the root cannot be listed.
    pub(super) fn load_names(
        &mut self,
        dir: BorrowedFd<'_>,
        path: &Path,
        numbers: &[u32],
    ) -> Result<()> {
        self.names.load(dir, path, numbers)
    }

    fn pattern(&self, i: usize) -> Arc<str> {
        Arc::clone(&self.patterns[self.family(i)])
    }

    fn reap_of(&self, reason: &ReapReason, until: &mut u64, glob: &mut usize) -> ReapTag {
        match reason {
            ReapReason::Orphaned => ReapTag::Orphaned,
            ReapReason::Matched(g) => {
                *glob = self.policy.globs.iter().position(|x| x == g).unwrap_or(0);
                ReapTag::Matched
            }
            ReapReason::KeptUnderPressure(u) => {
                *until = *u;
                ReapTag::KeptUnderPressure
            }
        }
    }

    fn reap_reason(&self, i: usize, tag: ReapTag) -> ReapReason {
        match tag {
            ReapTag::Orphaned => ReapReason::Orphaned,
            ReapTag::Matched => ReapReason::Matched(self.policy.globs[self.glob(i)].clone()),
            ReapTag::KeptUnderPressure => ReapReason::KeptUnderPressure(self.until(i)),
        }
    }

    fn keep_reason(&self, i: usize, tag: KeepTag) -> KeepReason {
        // As `verdict::age_of`: whole milliseconds from the newest mtime.
        let age = || {
            let newest = self.newest_mtime_ms(i).unwrap_or(self.now_ms);
            Duration::from_millis(self.now_ms.saturating_sub(newest).max(0) as u64)
        };
        match tag {
            KeepTag::Live => KeepReason::Live,
            KeepTag::InUse => KeepReason::InUse,
            KeepTag::Unknown => KeepReason::Unknown,
            KeepTag::InGrace => KeepReason::InGrace { age: age() },
            KeepTag::KeptUntil => KeepReason::KeptUntil(self.until(i)),
            KeepTag::NotSelected => KeepReason::NotSelected,
            KeepTag::TooNew => KeepReason::TooNew { age: age() },
            KeepTag::OtherOwner => KeepReason::OtherOwner(self.uid(i)),
        }
    }
}

/// A keep decision told by the entry alone, as a tag (its payload is told
/// again from the entry's columns).
fn keep_of(reason: &KeepReason) -> KeepTag {
    match reason {
        KeepReason::Live => KeepTag::Live,
        KeepReason::InUse => KeepTag::InUse,
        KeepReason::Unknown => KeepTag::Unknown,
        KeepReason::InGrace { .. } => KeepTag::InGrace,
        KeepReason::KeptUntil(_) => KeepTag::KeptUntil,
        KeepReason::NotSelected => KeepTag::NotSelected,
        KeepReason::TooNew { .. } => KeepTag::TooNew,
        KeepReason::OtherOwner(_) => KeepTag::OtherOwner,
        // Not told by the entry alone (rank, clock, removal time).
        other => unreachable!("not a decision of the entry alone: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::LeaseRecord;
    use crate::reap::Filters;
    use crate::scan::{Group, RootReport, Totals};

    const NOW: i64 = 1_000_000_000_000;
    const MIN: i64 = 60_000;

    /// An entry as a scan gives it.
    fn entry(name: &str, state: EntryState, age_ms: Option<i64>) -> Entry {
        Entry {
            name: name.into(),
            pattern: Arc::from(""),
            kind: FileKind::Dir,
            state,
            reason: StateReason::NoLease,
            disk_bytes: 4096,
            apparent_bytes: 10,
            files: 3,
            dirs: 2,
            newest_mtime_ms: age_ms.map(|a| NOW - a),
            uid: 1000,
            mode: 0o755,
            identity: (7, 100),
            holders: Vec::new(),
            kernel: Vec::new(),
            sockets: Vec::new(),
            lease: None,
            lease_invalid: false,
            #[cfg(target_os = "linux")]
            origin: None,
            unreadable: 0,
            mount_points: Vec::new(),
        }
    }

    fn lease(keep_until_ms: Option<u64>) -> Option<Box<LeaseRecord>> {
        let mut r = LeaseRecord::parse(
            br#"{"v":1,"pid":42,"start_ticks":7,"boot_id":"not-this-boot","uid":1000,"host":"h","created_ms":1,"tag":"t"}"#,
        )
        .unwrap();
        r.keep_until_ms = keep_until_ms;
        Some(Box::new(r))
    }

    /// Every kind of decision the entry alone tells, every value the
    /// columns cannot hold, and ranks: the streamed decisions and records
    /// are those of [`verdict::decide`] over the same entries, collected.
    #[test]
    fn streamed_decisions_equal_the_collected_ones() {
        let mut entries = vec![
            entry("app-1", EntryState::Idle, Some(10 * MIN)),
            entry("app-2", EntryState::Idle, Some(20 * MIN)),
            entry("app-3", EntryState::Idle, Some(30 * MIN)),
            entry("app-4", EntryState::Idle, Some(5_000)),
            entry("app-5", EntryState::Idle, None),
            entry("app-6", EntryState::Live, Some(MIN)),
            entry("app-7", EntryState::InUse, Some(MIN)),
            entry("app-8", EntryState::Unknown, Some(MIN)),
            entry("box-1", EntryState::Orphaned, Some(40 * MIN)),
            entry("box-2", EntryState::Orphaned, Some(50 * MIN)),
            entry("box-3", EntryState::Orphaned, Some(60 * MIN)),
            entry("odd-1", EntryState::Idle, Some(90 * MIN)),
            entry("odd-2", EntryState::Idle, Some(90 * MIN)),
            entry("odd-3", EntryState::Idle, Some(90 * MIN)),
            entry("odd-4", EntryState::Idle, Some(2 * MIN)),
            entry("zzz", EntryState::Idle, Some(90 * MIN)),
        ];
        entries[1].uid = 0; // another owner
        entries[8].lease = lease(Some((NOW + 3_600_000) as u64)); // kept on purpose
        entries[9].lease = lease(None);
        entries[11].disk_bytes = 1000; // not whole blocks
        entries[12].disk_bytes = 600 << 40; // past 2 TiB
        entries[12].files = 5 << 32; // past u32
        entries[10].files = 70_000; // past u16
        entries[13].identity = (8, 5); // another device
        entries[14].kind = FileKind::Socket;
        // Families need not follow each other in name order (the
        // entry "app-3" is put in the family of "zzz").
        let families = ["app-*", "box-*", "odd-*", "zzz"];
        let family_of: Vec<u32> = vec![0, 0, 3, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3];
        let mut groups = Vec::new();
        let mut patterns = Vec::new();
        for (n, pattern) in families.iter().enumerate() {
            let members: Vec<usize> = (0..entries.len())
                .filter(|&i| family_of[i] == n as u32)
                .collect();
            for &i in &members {
                entries[i].pattern = Arc::from(*pattern);
            }
            patterns.push(Arc::from(*pattern));
            groups.push(Group {
                members,
                ..Group::empty(pattern.to_string())
            });
        }
        let mut names = crate::dirlist::Names::new();
        for e in &entries {
            names.push(e.name.as_encoded_bytes());
        }
        let report = RootReport {
            path: "/r".into(),
            filesystem: crate::scan::Filesystem {
                fstype: "tmpfs".into(),
                total_bytes: 0,
                free_bytes: 0,
                total_inodes: 0,
                free_inodes: 0,
            },
            totals: Totals::default(),
            groups,
            entries: entries.clone(),
            warnings: Vec::new(),
            origins_read: false,
        };
        let mut policies = Vec::new();
        let mut b = Policy::builder();
        b.grace(Duration::from_secs(60))
            .rule(
                "app-*",
                Filters::new()
                    .older_than(Duration::from_secs(900))
                    .owner(1000),
            )
            .rule("odd-*", Filters::new().keep_last(1))
            .matching("zzz")
            .keep_last(1);
        policies.push(b.build().unwrap());
        b.under_pressure(true);
        policies.push(b.build().unwrap());
        for (n, policy) in policies.iter().enumerate() {
            let want = verdict::decide(&report, policy, NOW);
            let told: std::collections::BTreeSet<String> = want
                .iter()
                .map(|v| match v {
                    Verdict::Keep(k) => k.as_str().to_owned(),
                    Verdict::Reap(r) => format!("{r:?}"),
                })
                .collect();
            let every = match n {
                0 => &[
                    "grace",
                    "too_new",
                    "owner",
                    "kept",
                    "keep_last",
                    "live",
                    "in_use",
                    "unknown",
                    "Orphaned",
                ][..],
                _ => &[
                    "KeptUnderPressure(",
                    "Matched(\"odd-*\")",
                    "Matched(\"zzz\")",
                    "Orphaned",
                ][..],
            };
            for want in every {
                assert!(
                    told.iter().any(|t| t.starts_with(want)),
                    "{want} not in {told:?}"
                );
            }
            let mut d = Decisions::new(policy, NOW);
            d.start(names.len(), patterns.len());
            // One name vanished before it was measured.
            for (i, e) in entries.iter().enumerate().filter(|(i, _)| *i != 3) {
                d.add(i, family_of[i], e.clone());
            }
            d.finish(ScanNames::Held(names.clone()), patterns.clone());
            assert_eq!(d.len(), entries.len());
            for (i, e) in entries.iter().enumerate() {
                let got = d.verdict(i);
                if i == 3 {
                    assert!(got.is_none());
                    continue;
                }
                assert_eq!(got.as_ref(), Some(&want[i]), "{:?}", e.name);
                let r = d.entry(i).unwrap();
                assert_eq!(
                    (
                        &r.name,
                        &r.pattern,
                        r.kind,
                        r.state,
                        r.newest_mtime_ms,
                        r.uid
                    ),
                    (
                        &e.name,
                        &e.pattern,
                        e.kind,
                        e.state,
                        e.newest_mtime_ms,
                        e.uid
                    )
                );
                assert_eq!(
                    (r.identity, r.disk_bytes, r.files),
                    (e.identity, e.disk_bytes, e.files + e.dirs)
                );
                assert_eq!(d.sizes(i), (e.disk_bytes, e.files + e.dirs));
                let s = d
                    .skipped(Path::new("/r"), i, KeepReason::TargetMet)
                    .unwrap();
                assert_eq!(
                    (s.path, s.pattern, s.state, s.disk_bytes),
                    (
                        Path::new("/r").join(&e.name),
                        e.pattern.clone(),
                        e.state,
                        e.disk_bytes
                    )
                );
            }
        }
    }
}
