//! What a scan found: entries, their families, and totals.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::filesystem::Filesystem;
use super::state::{EntryState, StateReason};
use crate::dirlist::Names;
use crate::inuse::{BlindSpot, Holder, KernelUse, Uninspectable};
use crate::lease::LeaseRecord;
use crate::pattern;
use crate::walk::FileKind;

/// The result of scanning one or more roots.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Report {
    /// One report per root, in the order given.
    pub roots: Vec<RootReport>,
    /// Processes that could not be inspected: entries they might use are
    /// `unknown`.
    pub uninspectable: Vec<Uninspectable>,
    /// Processes that could not be inspected but were vouched for
    /// (`ignore_pid`): assumed to use nothing.
    pub assumed: Vec<Uninspectable>,
    /// Other things the in-use check could not see (hidden processes,
    /// unreadable socket table, …).
    pub blind_spots: Vec<BlindSpot>,
    /// Blind spots assumed away because the pid namespace was trusted
    /// ([`Scanner::trust_pid_namespace`](super::Scanner::trust_pid_namespace)):
    /// processes there are assumed to use nothing.
    pub assumed_blind_spots: Vec<BlindSpot>,
    /// Whether every process that could not be inspected was assumed to
    /// hold nothing (`SANDKEEPER_ASSUME_UNSEEN_FREE=1`,
    /// [`Scanner::assume_unseen_free`](super::Scanner::assume_unseen_free)):
    /// they are listed in [`assumed`](Self::assumed), and output should say
    /// so. Regular files the caller owns were still asked (a write lease),
    /// so the assumption covers only their directories (a working
    /// directory, root or open directory of such a process), `O_PATH`
    /// descriptors, and what could not be asked (`unknown` then).
    pub assumes_unseen_free: bool,
    /// When the scan started, ms since the Unix epoch.
    pub started_ms: i64,
}

impl Report {
    /// The report of `roots`, scanned against the in-use pass `inuse`
    /// from `started_ms` on: what that pass could not see comes from it.
    pub(crate) fn of(
        roots: Vec<RootReport>,
        inuse: &crate::inuse::InUse,
        started_ms: i64,
    ) -> Report {
        Report {
            roots,
            uninspectable: inuse.uninspectable().to_vec(),
            assumed: inuse.assumed().to_vec(),
            blind_spots: inuse.blind_spots().to_vec(),
            assumed_blind_spots: inuse.assumed_blind_spots().to_vec(),
            assumes_unseen_free: inuse.assumes_unseen_free(),
            started_ms,
        }
    }
}

/// What one root holds.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RootReport {
    /// The root, canonicalized.
    pub path: PathBuf,
    /// The filesystem it lives on.
    pub filesystem: Filesystem,
    /// Sums over all entries.
    pub totals: Totals,
    /// Name families, biggest (disk usage) first.
    pub groups: Vec<Group>,
    /// Every top-level entry, sorted by name (bytes); empty when the
    /// scanner does not keep entries
    /// ([`Scanner::keep_entries`](super::Scanner::keep_entries),
    /// [`Scanner::scan_root_with`](super::Scanner::scan_root_with)):
    /// [`totals`](Self::totals) counts them then.
    pub entries: Vec<Entry>,
    /// Entries that vanished or could not be read during the scan.
    pub warnings: Vec<String>,
    /// Whether each entry's origin was read during the scan
    /// ([`Scanner::origins`](super::Scanner::origins), as root): then
    /// [`Entry::origin`] is the answer, and renderers need not ask again.
    pub origins_read: bool,
}

/// Sums over a set of entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Totals {
    /// Number of top-level entries.
    pub entries: u64,
    /// Disk usage in bytes (`st_blocks`, hard links once).
    pub disk_bytes: u64,
    /// Apparent size in bytes (`st_size`).
    pub apparent_bytes: u64,
    /// Non-directories inside (files, links, sockets, …).
    pub files: u64,
    /// Directories inside, the entries themselves included.
    pub dirs: u64,
}

/// Entry counts by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCounts {
    /// `live` entries.
    pub live: u64,
    /// `in_use` entries.
    pub in_use: u64,
    /// `orphaned` entries.
    pub orphaned: u64,
    /// `idle` entries.
    pub idle: u64,
    /// `unknown` entries.
    pub unknown: u64,
}

impl StateCounts {
    fn add(&mut self, state: EntryState) {
        self.add_n(state, 1);
    }

    fn add_n(&mut self, state: EntryState, n: u64) {
        let slot = match state {
            EntryState::Live => &mut self.live,
            EntryState::InUse => &mut self.in_use,
            EntryState::Orphaned => &mut self.orphaned,
            EntryState::Idle => &mut self.idle,
            EntryState::Unknown => &mut self.unknown,
        };
        *slot += n;
    }

    /// The count for `state`.
    pub fn get(&self, state: EntryState) -> u64 {
        match state {
            EntryState::Live => self.live,
            EntryState::InUse => self.in_use,
            EntryState::Orphaned => self.orphaned,
            EntryState::Idle => self.idle,
            EntryState::Unknown => self.unknown,
        }
    }
}

/// A family of entries whose names differ only in what varies (pids,
/// counters, random suffixes): `app-235-*`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Group {
    /// The family's pattern (see [`pattern`](crate::pattern)).
    pub pattern: String,
    /// Sums over the members.
    pub totals: Totals,
    /// Oldest newest-mtime among the members (ms since the epoch).
    pub oldest_ms: Option<i64>,
    /// Newest mtime among the members (ms since the epoch).
    pub newest_ms: Option<i64>,
    /// Members by state.
    pub states: StateCounts,
    /// Disk usage of the members by state, in bytes (the members'
    /// [`disk_bytes`](Entry::disk_bytes) summed per state).
    pub state_disk_bytes: StateCounts,
    /// Disk usage of the members a reap with the default rules removes
    /// ([`Entry::goes_by_default`]: `orphaned`, not kept on purpose, past
    /// the grace unless proven dead); `idle` members need a rule, and are
    /// in [`state_disk_bytes`](Self::state_disk_bytes) only.
    pub reclaimable_bytes: u64,
    /// Members kept on purpose (`SANDKEEPER_KEEP`) at the time of the scan,
    /// under the default cap ([`Entry::kept_until`] with
    /// [`DEFAULT_MAX_KEEP`](crate::defaults::MAX_KEEP)): counted in
    /// their state (`orphaned`), never in `reclaimable_bytes`, since a
    /// reap keeps them.
    pub kept: u64,
    /// Indexes of the members in [`RootReport::entries`], ascending; empty
    /// when the report does not keep its entries
    /// ([`Scanner::keep_entries`](super::Scanner::keep_entries),
    /// [`Scanner::scan_root_with`](super::Scanner::scan_root_with)).
    pub members: Vec<usize>,
    /// The members grouped by who made them, when the scan read origins
    /// ([`Scanner::origins`](super::Scanner::origins)) and at least one
    /// member has one; else `None`. Bounded (see
    /// [`Creators`](super::Creators)).
    pub creators: Option<Box<super::Creators>>,
}

/// One top-level entry of a root.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Entry {
    /// The name (bytes, lossless).
    pub name: OsString,
    /// The pattern of its family (one string shared by the family's
    /// entries).
    pub pattern: Arc<str>,
    /// What it is (directory, file, …).
    pub kind: FileKind,
    /// Its state.
    pub state: EntryState,
    /// Why it is in that state.
    pub reason: StateReason,
    /// Disk usage in bytes.
    pub disk_bytes: u64,
    /// Apparent size in bytes.
    pub apparent_bytes: u64,
    /// Non-directories inside.
    pub files: u64,
    /// Directories inside, itself included.
    pub dirs: u64,
    /// Newest mtime anywhere inside, itself included (ms since the epoch).
    pub newest_mtime_ms: Option<i64>,
    /// Owner of the entry itself.
    pub uid: u32,
    /// Permission bits of the entry itself (`st_mode & 0o7777`).
    pub mode: u32,
    /// Device and inode of the entry itself.
    pub identity: (u64, u64),
    /// Processes that use something inside.
    pub holders: Vec<Holder>,
    /// Kernel objects that use something inside.
    pub kernel: Vec<KernelUse>,
    /// Bound unix sockets inside.
    pub sockets: Vec<PathBuf>,
    /// Its lease record, when it has a valid one (boxed: most entries
    /// have none, and an entry stays small).
    pub lease: Option<Box<LeaseRecord>>,
    /// Whether a lease file is present but invalid.
    pub lease_invalid: bool,
    /// Places inside that could not be read.
    pub unreadable: u64,
    /// Mount points inside that were not descended.
    pub mount_points: Vec<PathBuf>,
    /// Who made it, as `watch` or `sandkeeper run` recorded it, when the
    /// scan read origins ([`RootReport::origins_read`]; boxed: most
    /// entries have none).
    #[cfg(target_os = "linux")]
    pub origin: Option<Box<crate::origin::Origin>>,
}

impl Entry {
    /// Whether it has a lease (valid or not): a managed sandbox.
    pub fn is_managed(&self) -> bool {
        self.lease.is_some() || self.lease_invalid
    }

    /// Until when (ms since the epoch) the entry is kept on purpose, if it
    /// still is at `now_ms`: its lease's `keep_until_ms`, capped at
    /// `max_keep` after its newest change inside (the record is written by
    /// whoever made the directory). Only an `orphaned` entry can be kept:
    /// any other state keeps or refuses it already, and an unmanaged entry
    /// has no record. The reaper's rule, and the scan's and `ls`'s.
    ///
    /// ```
    /// # let dir = sandkeeper_engine::Sandbox::new()?;
    /// # let roots = [sandkeeper_engine::root::Root::open(dir.path())?];
    /// let report = sandkeeper_engine::scan::Scanner::new().scan_roots(&roots)?;
    /// for e in &report.roots[0].entries {
    ///     let _ = e.kept_until(report.started_ms, sandkeeper_engine::reap::DEFAULT_MAX_KEEP);
    /// }
    /// # Ok::<(), sandkeeper_engine::Error>(())
    /// ```
    pub fn kept_until(&self, now_ms: i64, max_keep: std::time::Duration) -> Option<u64> {
        if self.state != EntryState::Orphaned {
            return None;
        }
        let asked = self.lease.as_ref()?.keep_until_ms?;
        let now = now_ms.max(0) as u64;
        let newest = self.newest_mtime_ms.map_or(now, |m| m.max(0) as u64);
        let cap_ms = u64::try_from(max_keep.as_millis()).unwrap_or(u64::MAX);
        let until = asked.min(newest.saturating_add(cap_ms));
        (now < until).then_some(until)
    }

    /// Until when it is kept on purpose at `now_ms` under the default cap
    /// (what a reap without `--max-keep` does): the one test `scan`, `ls`
    /// and `explain` use.
    pub fn kept_by_default(&self, now_ms: i64) -> Option<u64> {
        self.kept_until(now_ms, crate::defaults::MAX_KEEP)
    }

    /// The state as tables show it: `kept` for an orphaned sandbox kept on
    /// purpose (a reap keeps it), else the state's name.
    pub fn state_word(&self, now_ms: i64) -> &'static str {
        match self.kept_by_default(now_ms) {
            Some(_) => "kept",
            None => self.state.as_str(),
        }
    }

    /// How long ago its newest change inside was, at `now_ms` (zero for a
    /// change in the future, or none seen).
    pub fn age(&self, now_ms: i64) -> std::time::Duration {
        let newest = self.newest_mtime_ms.unwrap_or(now_ms);
        std::time::Duration::from_millis(now_ms.saturating_sub(newest).max(0) as u64)
    }

    /// Whether it is a sandbox proven dead: its lease lock is free
    /// (`orphaned`) and it carries a valid record (one not owned by the
    /// directory's owner is refused as invalid when read, in
    /// `sandkeeper::lease`, so nobody can make another user's directory
    /// look like this). The protocol publishes a sandbox under its name
    /// only once its lock is held, so no sandbox being made looks like
    /// this: it needs no grace period, and its age is no witness.
    pub fn is_proven_orphan(&self) -> bool {
        self.state == EntryState::Orphaned && self.lease.is_some()
    }

    /// Whether a reap with the default rules (no `--match`, the default
    /// grace and cap on keeping) removes it, by the reaper's own parts
    /// ([`is_proven_orphan`](Self::is_proven_orphan),
    /// [`kept_until`](Self::kept_until), the grace): what a scan calls
    /// reclaimable. An `idle` entry needs a rule; nothing else is ever
    /// removed.
    pub fn goes_by_default(&self, now_ms: i64) -> bool {
        self.state == EntryState::Orphaned
            && self.kept_by_default(now_ms).is_none()
            && (self.is_proven_orphan() || self.age(now_ms) >= crate::defaults::GRACE)
    }
}

impl Group {
    /// A family of `pattern` with no member counted yet.
    pub(crate) fn empty(pattern: String) -> Group {
        Group {
            pattern,
            totals: Totals::default(),
            oldest_ms: None,
            newest_ms: None,
            states: StateCounts::default(),
            state_disk_bytes: StateCounts::default(),
            reclaimable_bytes: 0,
            kept: 0,
            members: Vec::new(),
            creators: None,
        }
    }
}

impl Report {
    /// Adds `other`'s roots to this report, and what its pass could not see
    /// or assumed (each process and blind spot once); the switches assumed
    /// in either are assumed in the whole.
    pub fn merge(&mut self, other: Report) {
        self.roots.extend(other.roots);
        for u in other.uninspectable {
            if !self.uninspectable.iter().any(|x| x.pid == u.pid) {
                self.uninspectable.push(u);
            }
        }
        for a in other.assumed {
            if !self.assumed.iter().any(|x| x.pid == a.pid) {
                self.assumed.push(a);
            }
        }
        for b in other.blind_spots {
            if !self.blind_spots.contains(&b) {
                self.blind_spots.push(b);
            }
        }
        for b in other.assumed_blind_spots {
            if !self.assumed_blind_spots.contains(&b) {
                self.assumed_blind_spots.push(b);
            }
        }
        self.assumes_unseen_free |= other.assumes_unseen_free;
    }
}

impl Totals {
    pub(crate) fn add(&mut self, entry: &Entry) {
        self.entries += 1;
        self.disk_bytes += entry.disk_bytes;
        self.apparent_bytes += entry.apparent_bytes;
        self.files += entry.files;
        self.dirs += entry.dirs;
    }
}

/// The families of one root's names, summed as the entries come: what a
/// scan keeps per entry is the family's number (4 bytes), and per family
/// one [`Group`].
pub(crate) struct Families {
    /// The family of each name, by the name's index.
    of: Vec<u32>,
    /// Each family's pattern, shared by its entries.
    patterns: Vec<Arc<str>>,
    groups: Vec<Group>,
    /// Each family's number by its pattern: windows merge by pattern.
    numbers: HashMap<Arc<str>, u32>,
    /// The scan's time: which members are kept on purpose.
    now_ms: i64,
}

impl Families {
    /// Families of `names` names, none grouped yet: each window of them
    /// is grouped by [`add_window`](Self::add_window). `now_ms` decides
    /// which members are kept on purpose.
    pub(crate) fn new(names: usize, now_ms: i64) -> Families {
        Families {
            of: vec![0u32; names],
            patterns: Vec::new(),
            groups: Vec::new(),
            numbers: HashMap::new(),
            now_ms,
        }
    }

    /// Groups `window`, the names numbered from `first` on, into families
    /// (see [`pattern::group`]), merged by pattern with those of earlier
    /// windows: names that vanish during the scan still take part, so
    /// their neighbours' family is the one the listing showed.
    pub(crate) fn add_window(&mut self, window: &Names, first: usize) {
        // Straight from the names' buffer: no slice of references beside it.
        let families = pattern::group_with(window.len(), |i| window.get(i).as_bytes());
        for family in families {
            let n = match self.numbers.get(family.pattern.as_str()) {
                Some(&n) => n,
                None => {
                    let n = self.patterns.len() as u32;
                    let pattern: Arc<str> = Arc::from(family.pattern.as_str());
                    self.numbers.insert(Arc::clone(&pattern), n);
                    self.patterns.push(pattern);
                    self.groups.push(Group::empty(family.pattern));
                    n
                }
            };
            for &i in &family.members {
                self.of[first + i] = n;
            }
        }
    }

    /// Adds `entry`, name number `i`, to its family; `member`: its index
    /// in the report's entries, when the families list their members.
    /// Returns the family's pattern.
    pub(crate) fn add(&mut self, i: usize, entry: &Entry, member: Option<usize>) -> Arc<str> {
        let n = self.of[i] as usize;
        let group = &mut self.groups[n];
        group.totals.add(entry);
        group.states.add(entry.state);
        group.state_disk_bytes.add_n(entry.state, entry.disk_bytes);
        if entry
            .kept_until(self.now_ms, crate::defaults::MAX_KEEP)
            .is_some()
        {
            group.kept += 1;
        } else if entry.goes_by_default(self.now_ms) {
            group.reclaimable_bytes += entry.disk_bytes;
        }
        if let Some(m) = entry.newest_mtime_ms {
            group.oldest_ms = Some(group.oldest_ms.map_or(m, |o| o.min(m)));
            group.newest_ms = Some(group.newest_ms.map_or(m, |n| n.max(m)));
        }
        group.members.extend(member);
        Arc::clone(&self.patterns[n])
    }

    /// How many families (members or not).
    pub(crate) fn len(&self) -> usize {
        self.patterns.len()
    }

    /// The family number of name `i`.
    pub(crate) fn family_of(&self, i: usize) -> u32 {
        self.of[i]
    }

    /// Each family's pattern, by number.
    pub(crate) fn patterns(&self) -> Vec<Arc<str>> {
        self.patterns.clone()
    }

    /// The families that have members, biggest (disk usage) first, then by
    /// pattern.
    pub(crate) fn into_groups(self) -> Vec<Group> {
        let mut groups: Vec<Group> = self
            .groups
            .into_iter()
            .filter(|g| g.totals.entries > 0)
            .collect();
        groups.sort_by(|a, b| {
            b.totals
                .disk_bytes
                .cmp(&a.totals.disk_bytes)
                .then_with(|| a.pattern.cmp(&b.pattern))
        });
        groups
    }
}
