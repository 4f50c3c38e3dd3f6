//! The collector: removes orphaned sandboxes (and unmanaged leftovers an
//! explicit rule selects), safely beside live work.
//!
//! A reap scans each root ([`scan`]), decides per entry
//! ([`Verdict`], with the reason), and then first deals with what a killed
//! reaper left in the root's quarantine, when the scan listed one
//! (entries that had passed their check are deleted; *pending* ones,
//! moved in but never checked, are checked against a fresh `/proc` pass
//! like new ones), then, oldest first,
//! for each entry to remove:
//!
//! 1. takes its lock (`flock(LOCK_EX|LOCK_NB)` on the opened directory,
//!    managed or not): a creator reclaiming the same keyed name, or a
//!    second reaper, now sees it as held and leaves it; a file, socket or
//!    symlink has no lock;
//! 2. checks it is still the inode that was scanned;
//! 3. moves it into the root's quarantine under a pending name
//!    ([`remove::quarantine_entry`](crate::remove::quarantine_entry); a
//!    directory through the descriptor its claim locked, not a second
//!    open of its name), checking that the inode that arrived
//!    is the one claimed: from now on no new path lookup reaches it (on a
//!    filesystem without a free inode or block, a directory becomes its
//!    own quarantine: made the reaper's, mode 0700, renamed in place);
//! 4. checks it: the entry is walked in the quarantine through
//!    descriptors, every inode matched against open files, working
//!    directories, mappings and kernel users (loop devices, overlays), and
//!    mounts and bound unix sockets are asked about both its old and its
//!    new path (a mount of another mount namespace moves with the
//!    directory) — against a `/proc` pass taken **after** the move, or, as
//!    root, against one taken just **before** it plus what fanotify saw
//!    other processes open or change on the root's filesystem since that
//!    pass began and every working and root directory re-read after the
//!    move (`touches`, `inuse::cwds`): a full pass beside a thousand
//!    processes takes 200 ms, which would be that long away from the
//!    name. Anything held, or anything that cannot be told: it is put back
//!    under its name at once (`RENAME_NOREPLACE`; if that name was taken
//!    meanwhile, it gets it back by an exchange, and the newcomer is kept
//!    beside it);
//! 5. with a free-space target (bytes, inodes, or both: then both must be
//!    met), starts no new removal once the target is met (re-measured
//!    after each removal: unlinked-but-open files free nothing);
//!    with a [stop flag](PolicyBuilder::stop_flag), starts no new removal
//!    once it is raised; the removals under way finish, the entries
//!    already moved but not started are put back;
//! 6. removes it: renamed to a condemned name inside the quarantine as
//!    soon as its check found nothing (so a reaper killed from here on
//!    leaves it to be finished, one killed before leaves it pending), then
//!    deleted by a worker, never leaving its tree.
//!
//! Steps 1–3 run for a group of entries, then step 4 for each of them on
//! the calling thread, so that an entry is away from its name only while
//! it is checked; each entry's check still follows its own move. Checked
//! against a pass after the moves, a group is 64 entries, or four per
//! process the last pass read when that is more (up to 512, and a quarter
//! of the descriptor limit for two groups): on a host of hundreds of
//! processes the passes would otherwise be most of a reap. Checked against
//! a pass before them (root), a group is as many entries as fit in 15 ms
//! at the last group's cost (`Batches::after_group`), and a pass serves
//! groups for 250 ms (or four times its cost). Step 6's deletions run on
//! one pool of worker threads kept for the whole root, each group's
//! largest first, while the calling thread claims, moves and checks the
//! next group; the records come in the groups' order, as if they ran one
//! after another. With a free-space target the groups grow 1, 2, 4, 8,
//! one worker takes them in the group's order, re-measuring the free
//! space after each removal, and each group is done before the next is
//! claimed; with a stop flag every worker looks at it before it starts on
//! an entry.
//!
//! # Memory
//!
//! The scan streams each root's entries
//! ([`Scanner::scan_root_with`]): each is decided as it comes, as far as
//! the entry alone tells, and what is kept of it is 28 bytes in two
//! columns (mtime, inode, size in blocks, item count, owner number, glob,
//! tag and state bits; exact values that do not fit go to a side table),
//! not the scanned [`Entry`] (about 300 bytes and up) or a [`Verdict`] (a
//! `Matched` one held its own string). Its name is the scan's own buffer
//! (a name costs its bytes plus 8), handed over when the scan ends, not a
//! copy; past the scan's budget of names ([`Scanner::name_memory`]) it is
//! a fingerprint, and the names of the entries a reap records or claims
//! are loaded back by listing the root again, a batch at a time (a
//! quarter of the budget each; a name not found again is gone, and its
//! entry is left alone). Its family is told by runs over the sorted names. What needs
//! the whole root is finished after the scan: `--keep-last N` from each
//! family's N newest (mtime, order) pairs, a forward clock step from the
//! lease records gathered as they passed. Candidates are then held as
//! 4-byte numbers, sorted; a batch of at most 64 is rebuilt as small
//! [`Entry`]s for the claim, the move and the in-use check after it. The
//! report's records (`removed`, `skipped`: what `reap --json` lists) are
//! one per entry unless the policy asks for none
//! ([`PolicyBuilder::records`]); [`RootReap::counts`] sums them either
//! way, by family, by reason and rule, and by keep reason: `watch` asks
//! for none, and counts its metrics from these. [`ReapReport::scan`] has the totals and families of each root,
//! but no entries (and so no family members).
//!
//! A dry run decides on the scan alone, which takes no lock (live or free
//! is read from `/proc/locks`), and removes nothing.
//!
//! ```
//! use sandkeeper_engine::reap::{Policy, Reaper};
//! # let root = sandkeeper_engine::Sandbox::new()?;
//! let policy = Policy::builder().matching("app-*").dry_run(true).build()?;
//! let report = Reaper::new(policy).reap(&[root.path()])?;
//! assert!(report.roots[0].removed.is_empty());
//! # Ok::<(), sandkeeper_engine::Error>(())
//! ```

mod check;
mod clock;
mod decisions;
mod events;
mod execute;
mod fate;
mod policy;
mod pool;
#[cfg(target_os = "linux")]
mod touches;
mod verdict;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use events::ReapEvent;
pub use policy::{Filters, FreeInodes, FreeTarget, Policy, PolicyBuilder, Rules, DEFAULT_MAX_KEEP};
pub use verdict::{KeepReason, ReapReason, Verdict};

use crate::error::{Error, ErrorKind, Result};
use crate::root::Root;
use crate::scan::{self, Entry, EntryState, RootReport, Scanner};
use events::Recorder;

/// How many entries are claimed and moved into the quarantine before one
/// fresh `/proc` pass checks them all, at least: amortizes the pass (about
/// 25 ms on a busy host), bounds the descriptors held.
const BATCH: usize = 64;

/// Entries per process the last pass read that a batch holds (from
/// [`BATCH`] up to [`most_per_batch`]): a pass costs about 0.2 ms per
/// process (its descriptors, its maps), a claim and a move about 0.05 ms
/// per entry, so the pass of a batch this large takes about as long as the
/// batch's moves. At 64 a host of 300 processes spent most of a reap of
/// small entries in passes (6.2 s for the replica at scale 0.1, against
/// 2.2 s at 256 a batch).
const ENTRIES_PER_PROCESS: usize = 4;

/// The largest batch: 512, or fewer so that two batches in flight (one
/// descriptor per entry, its claim's) hold at most a quarter of the soft
/// `RLIMIT_NOFILE`; never fewer than [`BATCH`].
fn most_per_batch() -> usize {
    usize::try_from(fate::soft_nofile() / 8)
        .unwrap_or(usize::MAX)
        .clamp(BATCH, 512)
}

/// Cuts the candidates of a root into batches: [`BATCH`] at first, then
/// as many as the last pass suggests ([`Batches::after_pass`]); with a
/// free-space target 1, 2, 4, … up to [`BATCH`] instead, so that few
/// entries are moved out of their names only to be put back once the
/// target is met.
struct Batches<'c, T> {
    rest: &'c [T],
    size: usize,
    target: bool,
    /// Checked against a pass taken before the moves (root, with
    /// fanotify): sized by how long a group is away from its names.
    ahead: bool,
    most: usize,
}

impl<'c, T> Batches<'c, T> {
    fn new(candidates: &'c [T], target: bool, ahead: bool) -> Batches<'c, T> {
        Batches {
            rest: candidates,
            size: match (target, ahead) {
                (true, _) => 1,
                (false, true) => AHEAD_FIRST,
                (false, false) => BATCH,
            },
            target,
            ahead,
            most: most_per_batch(),
        }
    }

    /// Told how many processes the check of the group just claimed read,
    /// how long its `count` entries were away from their names (moved,
    /// checked, put back or condemned), and how much of that was the
    /// check's own cost whatever the group's size (`fixed`: the re-read of
    /// the working directories, the events). Checked by a pass after the
    /// moves, the next group holds [`ENTRIES_PER_PROCESS`] entries per
    /// process, from [`BATCH`] up to [`most_per_batch`]; checked by one
    /// before them (root), the next group is as large as fits in
    /// [`WINDOW`] at this group's cost per entry (at least one, at most
    /// twice this group), so that no entry is away from its name much
    /// longer, whatever the processes or the entries. A target reap keeps
    /// its doubling up to [`TARGET_MOST`].
    fn after_group(
        &mut self,
        processes: usize,
        away: std::time::Duration,
        fixed: std::time::Duration,
        count: usize,
    ) {
        if self.target {
            return;
        }
        self.size = match self.ahead {
            false => processes
                .saturating_mul(ENTRIES_PER_PROCESS)
                .clamp(BATCH, self.most),
            true => {
                let per_entry = away.saturating_sub(fixed).as_nanos() / count.max(1) as u128;
                let room = WINDOW.saturating_sub(fixed).as_nanos();
                let fits = usize::try_from(room / per_entry.max(1)).unwrap_or(usize::MAX);
                fits.min(self.size.saturating_mul(2)).clamp(1, self.most)
            }
        };
    }
}

/// The first group of a reap checked by a pass taken before the moves.
const AHEAD_FIRST: usize = 16;
/// How long a group checked by a pass taken before its moves is meant to
/// be away from its names, at most (see [`Batches::after_group`]).
const WINDOW: std::time::Duration = std::time::Duration::from_millis(15);
/// The largest group of a reap with a free-space target: its entries wait,
/// condemned, for the removals before them, and go back to their names
/// once the target is met.
const TARGET_MOST: usize = 8;

impl<'c, T> Iterator for Batches<'c, T> {
    type Item = &'c [T];

    fn next(&mut self) -> Option<&'c [T]> {
        if self.rest.is_empty() {
            return None;
        }
        let (batch, tail) = self.rest.split_at(self.size.min(self.rest.len()));
        self.rest = tail;
        if self.target {
            self.size = (self.size * 2).min(TARGET_MOST);
        }
        Some(batch)
    }
}

/// What a reap with a free-space target aims for on one filesystem: free
/// bytes, free inodes, or both (then both must be met).
#[derive(Debug, Clone, Copy)]
struct Target {
    bytes: Option<u64>,
    inodes: Option<u64>,
}

impl Target {
    /// The policy's targets on `fs`; `None` when it has none.
    fn of(policy: &Policy, fs: &scan::Filesystem) -> Option<Target> {
        let bytes = policy.target_free.map(|t| t.bytes(fs.total_bytes));
        let inodes = policy.target_free_inodes.map(|t| t.count(fs.total_inodes));
        (bytes.is_some() || inodes.is_some()).then_some(Target { bytes, inodes })
    }

    /// Whether `free` meets every target set.
    fn met(self, free: scan::filesystem::Free) -> bool {
        self.bytes.is_none_or(|b| free.bytes >= b) && self.inodes.is_none_or(|n| free.inodes >= n)
    }
}

/// Runs reaps with one policy.
#[derive(Debug, Clone)]
pub struct Reaper {
    policy: Policy,
    scanner: Scanner,
}

/// What a reap did, per root.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReapReport {
    /// Whether nothing was removed on purpose.
    pub dry_run: bool,
    /// One report per root, in the order given.
    pub roots: Vec<RootReap>,
    /// The scan the decisions were made on: totals, families and warnings
    /// per root; its entries were decided as they streamed and are not
    /// kept (`entries` and the families' `members` are empty).
    pub scan: scan::Report,
}

impl ReapReport {
    /// Adds `other`'s roots (a reap of more roots, as `reap --config` does
    /// one root at a time) to this report; what the scans could not see or
    /// assumed is merged without repeats ([`scan::Report::merge`]).
    pub fn merge(&mut self, other: ReapReport) {
        self.roots.extend(other.roots);
        self.scan.merge(other.scan);
    }

    /// Bytes freed (or, in a dry run, that would be) over all roots.
    pub fn freed_bytes(&self) -> u64 {
        self.roots.iter().map(|r| r.freed_bytes).sum()
    }

    /// Whether anything could not be removed.
    pub fn has_errors(&self) -> bool {
        self.roots.iter().any(|r| !r.errors.is_empty())
    }
}

/// What a reap did in one root.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RootReap {
    /// The root.
    pub path: PathBuf,
    /// Removed entries (in a dry run: those that would be); empty when the
    /// policy keeps no records ([`PolicyBuilder::records`]).
    pub removed: Vec<Removed>,
    /// Entries left, with the reason; empty when the policy keeps no
    /// records.
    pub skipped: Vec<Skipped>,
    /// Entries that should have gone but could not be removed (fully).
    pub errors: Vec<ReapError>,
    /// Disk bytes freed (in a dry run: the scanned sizes of `removed`).
    pub freed_bytes: u64,
    /// Files and directories removed, first, of what interrupted (killed)
    /// reapers left in the root's quarantine: entries that had passed their
    /// check, and pending ones that a fresh check cleared (pending ones
    /// still in use are put back, or kept there, and listed in `skipped`).
    pub quarantine_finished: u64,
    /// Files and directories removed, first, of entries an earlier reap
    /// kept pending in the quarantine on purpose (found in use, and their
    /// name could not be given back: [`Restore::KeptInQuarantine`](crate::remove::Restore::KeptInQuarantine)),
    /// which a fresh check now found unused. No reaper was killed for
    /// these. (Entries such a put-back left on their way back to their
    /// name are moved back out, never removed, and listed in `skipped`.)
    pub quarantine_rechecked: u64,
    /// With a free-space target (`--target-free`, `--target-free-inodes`,
    /// a watermark under pressure): what it asked for and whether it was
    /// reached when the reap ended; `None` without one.
    pub target: Option<TargetOutcome>,
    /// [`removed`](Self::removed) and [`skipped`](Self::skipped) summed,
    /// kept also when the reap keeps no record per entry
    /// ([`PolicyBuilder::records`]).
    pub counts: ReapCounts,
}

/// What a reap of one root removed and left, summed as it happens: what a
/// summary needs, without a record per entry.
///
/// ```
/// use sandkeeper_engine::reap::{Policy, Reaper};
/// # let root = sandkeeper_engine::Sandbox::new()?;
/// # std::fs::create_dir(root.path().join("app-1"))?;
/// let policy = Policy::builder().matching("app-*").dry_run(true).records(false).build()?;
/// let report = Reaper::new(policy).reap(&[root.path()])?;
/// let counts = &report.roots[0].counts;
/// assert!(report.roots[0].skipped.is_empty());
/// // Young (in the grace period), or unknown where processes are hidden.
/// assert!(counts.skipped >= 1);
/// assert_eq!(counts.skipped_by_reason.values().map(|t| t.entries).sum::<u64>(), counts.skipped);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReapCounts {
    /// Entries removed (in a dry run: that would be).
    pub removed: u64,
    /// Entries left in place.
    pub skipped: u64,
    /// The removed entries by family pattern.
    pub removed_by_family: BTreeMap<Arc<str>, Tally>,
    /// The removed entries by reason ([`ReapReason::as_str`]) and rule
    /// ([`ReapReason::rule`]: the glob of a `matched` one, else empty):
    /// what the metrics count, without a record per entry.
    pub removed_by_reason: BTreeMap<(&'static str, String), Tally>,
    /// The entries left by reason ([`KeepReason::as_str`]).
    pub skipped_by_reason: BTreeMap<&'static str, Tally>,
}

/// A number of entries and their disk usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tally {
    /// Entries.
    pub entries: u64,
    /// Their disk usage in bytes (as scanned).
    pub disk_bytes: u64,
}

impl Tally {
    fn add(&mut self, disk_bytes: u64) {
        self.entries += 1;
        self.disk_bytes = self.disk_bytes.saturating_add(disk_bytes);
    }
}

impl ReapCounts {
    fn removed(&mut self, r: &Removed) {
        self.removed += 1;
        match self.removed_by_family.get_mut(&*r.pattern) {
            Some(t) => t.add(r.disk_bytes),
            None => {
                let mut t = Tally::default();
                t.add(r.disk_bytes);
                self.removed_by_family.insert(Arc::clone(&r.pattern), t);
            }
        }
        // Few rules: found by a look along them, not by a key made (and
        // allocated) per entry.
        let (reason, rule) = (r.reason.as_str(), r.reason.rule());
        match self
            .removed_by_reason
            .iter_mut()
            .find(|((k, g), _)| *k == reason && g == rule)
        {
            Some((_, t)) => t.add(r.disk_bytes),
            None => {
                let mut t = Tally::default();
                t.add(r.disk_bytes);
                self.removed_by_reason.insert((reason, rule.to_owned()), t);
            }
        }
    }

    fn skipped(&mut self, s: &Skipped) {
        self.skipped += 1;
        self.skipped_by_reason
            .entry(s.reason.as_str())
            .or_default()
            .add(s.disk_bytes);
    }
}

/// How a reap's free-space target ended in one root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TargetOutcome {
    /// Free bytes asked for, if the target counts bytes.
    pub want_free_bytes: Option<u64>,
    /// Free inodes asked for, if the target counts inodes.
    pub want_free_inodes: Option<u64>,
    /// Free bytes when the reap ended (in a dry run: the free bytes
    /// measured plus the sizes of what would be removed).
    pub free_bytes: u64,
    /// Free inodes when the reap ended (in a dry run: estimated the same way).
    pub free_inodes: u64,
    /// Whether every part of the target was reached. `false` means
    /// nothing else was allowed to go: the rest is kept (live, in use,
    /// unknown, young, kept on purpose, not selected).
    pub met: bool,
}

/// A removed entry.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Removed {
    /// Its path.
    pub path: PathBuf,
    /// Its family (shared with the scan's entry).
    pub pattern: std::sync::Arc<str>,
    /// Its state when removed.
    pub state: EntryState,
    /// Why it went.
    pub reason: ReapReason,
    /// Its disk usage.
    pub disk_bytes: u64,
}

/// An entry left in place.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Skipped {
    /// Its path.
    pub path: PathBuf,
    /// Its family (shared with the scan's entry).
    pub pattern: std::sync::Arc<str>,
    /// Its state.
    pub state: EntryState,
    /// Why it was left.
    pub reason: KeepReason,
    /// Its disk usage.
    pub disk_bytes: u64,
}

/// An entry that could not be removed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReapError {
    /// Its path.
    pub path: PathBuf,
    /// What went wrong.
    pub error: String,
}

impl Reaper {
    /// A reaper with `policy` and a default [`Scanner`].
    pub fn new(policy: Policy) -> Reaper {
        let mut scanner = Scanner::new();
        if let Some(stop) = &policy.stop {
            // A stop asked for during the scan ends the scan too.
            scanner.stop_flag(std::sync::Arc::clone(stop));
        }
        Reaper { policy, scanner }
    }

    /// The scanner used (to vouch for processes, set threads, …).
    pub fn scanner(&mut self) -> &mut Scanner {
        &mut self.scanner
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Decides every entry of a scanned root, as a reap would before its
    /// removal-time re-checks (used by `explain`).
    ///
    /// When the lease records show that the wall clock was stepped forward
    /// since they were written, ages cannot be trusted: everything whose
    /// removal depends on its age is kept ([`KeepReason::ClockStepped`]).
    pub fn decide(&self, report: &RootReport, now_ms: i64) -> Vec<Verdict> {
        let mut verdicts = verdict::decide(report, &self.policy, now_ms);
        if let Some(steps) = clock::forward_steps(report) {
            verdict::distrust_ages(&mut verdicts, report, &steps);
        }
        verdicts
    }

    /// Reaps `roots`, each opened once with [`Root::open_exact`] (a root
    /// that is a symlink is refused).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for the root `/`; the errors of
    /// [`Root::open_exact`] for a root that cannot be used, before anything
    /// is removed. Entries that cannot be removed are reported in
    /// [`RootReap::errors`], not as an error.
    pub fn reap<P: AsRef<Path>>(&self, roots: &[P]) -> Result<ReapReport> {
        let opened: Vec<Root> = roots
            .iter()
            .map(|r| Root::open_exact(r.as_ref()))
            .collect::<Result<_>>()?;
        self.reap_roots(&opened)
    }

    /// Reaps roots the caller opened: the scan, the claims and the removals
    /// all work relative to their descriptors.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for the root `/` (checked for every root
    /// before anything is done); an error when `/proc` cannot be read.
    pub fn reap_roots(&self, roots: &[Root]) -> Result<ReapReport> {
        self.reap_roots_with(roots, &mut |_| {})
    }

    /// As [`reap_roots`](Self::reap_roots), giving each scanned root, each
    /// decision to keep, each removal and each failure to `on_event` as it
    /// happens ([`ReapEvent`]).
    ///
    /// # Errors
    ///
    /// As [`reap_roots`](Self::reap_roots); and
    /// [`ErrorKind::Stopped`] when the policy's
    /// [stop flag](PolicyBuilder::stop_flag) is raised during the scan
    /// (nothing was removed).
    pub fn reap_roots_with(
        &self,
        roots: &[Root],
        on_event: &mut dyn FnMut(ReapEvent<'_>),
    ) -> Result<ReapReport> {
        for root in roots {
            refuse_filesystem_root(root)?;
        }
        // The scan streams each root's entries into compact decisions
        // ([`decisions`]): no root's entries are held as a whole.
        let started_ms = crate::clock::now_ms() as i64;
        if let Some(first) = roots.first() {
            if self.policy.stop_requested() {
                return Err(Error::stopped().at(first.path()));
            }
        }
        let inuse = self.scanner.in_use()?;
        let mut reports = Vec::with_capacity(roots.len());
        let mut decided = Vec::with_capacity(roots.len());
        for root in roots {
            let mut decisions = decisions::Decisions::new(&self.policy, started_ms);
            let (report, streamed) =
                self.scanner
                    .scan_root_streamed(root, &inuse, &mut |step| match step {
                        scan::Streaming::Start { names, families } => {
                            decisions.start(names, families)
                        }
                        scan::Streaming::Entry {
                            index,
                            family,
                            entry,
                        } => decisions.add(index, family, entry),
                    })?;
            decisions.finish(streamed.names, streamed.patterns);
            reports.push(report);
            decided.push((decisions, streamed.leftovers));
        }
        let scan = scan::Report::of(reports, &inuse, started_ms);
        drop(inuse);
        for report in &scan.roots {
            on_event(ReapEvent::Scanned(report));
        }
        let mut out = Vec::with_capacity(scan.roots.len());
        for ((root, report), (decisions, leftovers)) in roots.iter().zip(&scan.roots).zip(decided) {
            out.push(self.reap_root(root, report, decisions, leftovers, on_event)?);
        }
        Ok(ReapReport {
            dry_run: self.policy.dry_run,
            roots: out,
            scan,
        })
    }

    fn reap_root(
        &self,
        root: &Root,
        report: &RootReport,
        mut decisions: decisions::Decisions<'_>,
        leftovers: bool,
        on_event: &mut dyn FnMut(ReapEvent<'_>),
    ) -> Result<RootReap> {
        let path = report.path.clone();
        let dir = root.fd();
        let mut result = Recorder::new(
            RootReap {
                path: path.clone(),
                removed: Vec::new(),
                skipped: Vec::new(),
                errors: Vec::new(),
                freed_bytes: 0,
                quarantine_finished: 0,
                quarantine_rechecked: 0,
                target: None,
                counts: ReapCounts::default(),
            },
            self.policy.records,
            on_event,
        );
        // Only when the scan listed a name that may hold them: else the
        // root would be listed twice more to find none. (One a killed
        // reaper made since is found by the next reap.)
        if leftovers && !self.policy.dry_run && !self.policy.stop_requested() {
            self.finish_leftovers(dir, &path, &mut result);
        }
        // Only the candidates' numbers are held (4 bytes each); their
        // reasons are told again from the compact records when their
        // batch comes. Past the scan's budget of names, the names of the
        // kept entries and of the candidates are loaded back a batch at a
        // time (`scan::listing`).
        // Counted first, so each list is allocated once, at its size (no
        // doubling while a million numbers are pushed).
        let reap_count = (0..decisions.len())
            .filter(|&i| matches!(decisions.verdict(i), Some(Verdict::Reap(_))))
            .count();
        let mut candidates: Vec<u32> = Vec::new();
        candidates.reserve_exact(reap_count);
        let mut kept: Vec<u32> = Vec::new();
        kept.reserve_exact(decisions.len() - reap_count);
        for i in 0..decisions.len() {
            match decisions.verdict(i) {
                Some(Verdict::Reap(_)) => candidates.push(i as u32),
                Some(Verdict::Keep(_)) => kept.push(i as u32),
                None => {}
            }
        }
        for batch in decisions.name_batches(&kept) {
            decisions.load_names(dir, &path, batch)?;
            for &i in batch {
                let i = i as usize;
                if let Some(Verdict::Keep(reason)) = decisions.verdict(i) {
                    if let Some(skipped) = decisions.skipped(&path, i, reason) {
                        result.kept(skipped);
                    }
                }
            }
        }
        drop(kept);
        // Oldest first, so a free-space target takes the stalest; entries
        // kept on purpose (taken only under pressure) after all others.
        candidates.sort_unstable_by_key(|&i| decisions.removal_key(i as usize));
        let target = Target::of(&self.policy, &report.filesystem);
        // Measured afresh: an earlier root on the same filesystem, or
        // another reaper, may have freed space since the scan.
        let mut free = match target {
            Some(_) => scan::filesystem::free(dir).unwrap_or(scan::filesystem::Free {
                bytes: report.filesystem.free_bytes,
                inodes: report.filesystem.free_inodes,
            }),
            None => scan::filesystem::Free {
                bytes: report.filesystem.free_bytes,
                inodes: report.filesystem.free_inodes,
            },
        };
        let mut target_met = target.is_some_and(|t| t.met(free));
        for batch in decisions.name_batches(&candidates) {
            decisions.load_names(dir, &path, batch)?;
            if !self.policy.dry_run {
                self.remove_candidates(
                    dir,
                    &path,
                    &decisions,
                    batch,
                    target,
                    &mut target_met,
                    &mut result,
                )?;
                continue;
            }
            for &i in batch {
                let i = i as usize;
                if target_met {
                    if let Some(skipped) = decisions.skipped(&path, i, KeepReason::TargetMet) {
                        result.kept(skipped);
                    }
                    continue;
                }
                let (disk_bytes, items) = decisions.sizes(i);
                free.bytes = free.bytes.saturating_add(disk_bytes);
                free.inodes = free.inodes.saturating_add(items.max(1));
                target_met = target.is_some_and(|t| t.met(free));
                if let Some(Verdict::Reap(reason)) = decisions.verdict(i) {
                    if let Some(removed) = decisions.removed(&path, i, reason) {
                        result.removed(removed);
                    }
                }
            }
        }
        if let Some(t) = target {
            if !self.policy.dry_run {
                free = scan::filesystem::free(dir).unwrap_or(free);
            }
            result.reap.target = Some(TargetOutcome {
                want_free_bytes: t.bytes,
                want_free_inodes: t.inodes,
                free_bytes: free.bytes,
                free_inodes: free.inodes,
                met: t.met(free),
            });
        }
        Ok(result.reap)
    }

    /// Why no further entry goes: the free-space target is met, or a stop
    /// was asked for.
    fn halted(&self, target_met: bool) -> Option<KeepReason> {
        if target_met {
            Some(KeepReason::TargetMet)
        } else if self.policy.stop_requested() {
            Some(KeepReason::Stopped)
        } else {
            None
        }
    }
}

fn removed(root: &Path, entry: &Entry, reason: ReapReason) -> Removed {
    Removed {
        path: root.join(&entry.name),
        pattern: entry.pattern.clone(),
        state: entry.state,
        reason,
        disk_bytes: entry.disk_bytes,
    }
}

fn skipped(root: &Path, entry: &Entry, reason: KeepReason) -> Skipped {
    Skipped {
        path: root.join(&entry.name),
        pattern: entry.pattern.clone(),
        state: entry.state,
        reason,
        disk_bytes: entry.disk_bytes,
    }
}

/// Refuses `/` as a root (told by device and inode, however it was named).
fn refuse_filesystem_root(root: &Root) -> Result<()> {
    if root.is_filesystem_root() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "refusing to reap the filesystem root `/`; give the directory that holds the leftovers, such as /tmp",
        )
        .at(root.path()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Batches, AHEAD_FIRST, BATCH};

    fn sizes(batches: &mut Batches<'_, u32>, passes: &[usize]) -> Vec<usize> {
        let mut out = Vec::new();
        for &processes in passes {
            let Some(batch) = batches.next() else { break };
            out.push(batch.len());
            batches.after_group(processes, Duration::ZERO, Duration::ZERO, 1);
        }
        out
    }

    #[test]
    fn batches_grow_with_the_processes_a_pass_read() {
        let all: Vec<u32> = (0..5000).collect();
        let mut b = Batches::new(&all, false, false);
        let most = b.most;
        assert!((BATCH..=512).contains(&most), "{most}");
        // Few processes: 64 a batch; 100: 400; many: the most. (The most
        // is the soft RLIMIT_NOFILE's: 128 under a common 1024.)
        let hundred = 400.min(most);
        assert_eq!(
            sizes(&mut b, &[3, 3, 100, 100, 10_000, 3]),
            [64, 64, 64, hundred, hundred, most]
        );
        // Back to 64 once the processes are few again.
        assert_eq!(b.next().map(<[u32]>::len), Some(64));
    }

    #[test]
    fn groups_checked_ahead_fit_the_window_at_their_cost() {
        let ms = Duration::from_millis;
        let all: Vec<u32> = (0..100_000).collect();
        let mut b = Batches::new(&all, false, true);
        assert_eq!(b.next().map(<[u32]>::len), Some(AHEAD_FIRST));
        // Cheap entries: at most twice as many each time, whatever the
        // processes.
        b.after_group(10_000, ms(2), ms(1), 16);
        assert_eq!(b.next().map(<[u32]>::len), Some(32));
        // 0.25 ms an entry beside a fixed 10 ms: 20 fit in 15 ms.
        b.after_group(1, ms(18), ms(10), 32);
        assert_eq!(b.next().map(<[u32]>::len), Some(20));
        // Slower entries: fewer.
        b.after_group(1, ms(30), ms(10), 20);
        assert_eq!(b.next().map(<[u32]>::len), Some(5));
        // A fixed cost beyond the window still moves one at a time.
        b.after_group(1, ms(50), ms(45), 10);
        assert_eq!(b.next().map(<[u32]>::len), Some(1), "never below one");
    }

    #[test]
    fn a_target_reap_doubles_up_to_8_whatever_the_processes() {
        let all: Vec<u32> = (0..100).collect();
        let mut b = Batches::new(&all, true, true);
        assert_eq!(sizes(&mut b, &[500; 9]), [1, 2, 4, 8, 8, 8, 8, 8, 8]);
        // 47 taken: what is left goes 8 at a time.
        assert_eq!(b.next().map(<[u32]>::len), Some(8));
    }
}
