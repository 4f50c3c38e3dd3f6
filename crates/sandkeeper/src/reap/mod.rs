//! The collector: removes orphaned sandboxes (and unmanaged leftovers an
//! explicit rule selects), safely beside live work.
//!
//! A reap scans each root ([`scan`]), decides per entry
//! ([`Verdict`], with the reason), and then, oldest first, for each entry
//! to remove:
//!
//! 1. takes its lock (`flock(LOCK_EX|LOCK_NB)` on the directory, managed or
//!    not): a creator reclaiming the same keyed name, or a second reaper,
//!    now sees it as held and leaves it;
//! 2. checks it is still the inode that was scanned;
//! 3. re-checks, against a fresh pass over `/proc`, that nothing inside is
//!    in use (things change between the scan and the removal);
//! 4. with a free-space target, stops if the target is already met
//!    (re-measured after each removal: unlinked-but-open files free nothing);
//!    with a [stop flag](PolicyBuilder::stop_flag), stops if it is raised;
//! 5. removes it through [`remove`]: renamed into the root's
//!    quarantine first, then deleted, never leaving its tree.
//!
//! A dry run decides with the same probes and removes nothing.
//!
//! ```
//! use sandkeeper::reap::{Policy, Reaper};
//! # let root = sandkeeper::Sandbox::new()?;
//! let policy = Policy::builder().matching("app-*").dry_run(true).build()?;
//! let report = Reaper::new(policy).reap(&[root.path()])?;
//! assert!(report.roots[0].removed.is_empty());
//! # Ok::<(), sandkeeper::Error>(())
//! ```

mod clock;
mod policy;
mod verdict;

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

pub use policy::{Filters, FreeTarget, Policy, PolicyBuilder, DEFAULT_MAX_KEEP};
pub use verdict::{KeepReason, ReapReason, Verdict};

use crate::error::{Error, ErrorKind, Result};
use crate::inuse::InUse;
use crate::lease::{self, Claim, Probe};
use crate::remove::{self, RemoveOptions};
use crate::root::Root;
use crate::scan::{self, Entry, EntryState, RootReport, Scanner};
use crate::walk::{self, FileKind, WalkState};

/// How many entries are locked and re-checked against one fresh `/proc`
/// pass: amortizes the pass, bounds the descriptors held.
const BATCH: usize = 64;

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
    /// The scan the decisions were made on.
    pub scan: scan::Report,
}

impl ReapReport {
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
    /// Removed entries (in a dry run: those that would be).
    pub removed: Vec<Removed>,
    /// Entries left, with the reason.
    pub skipped: Vec<Skipped>,
    /// Entries that should have gone but could not be removed (fully).
    pub errors: Vec<ReapError>,
    /// Disk bytes freed (in a dry run: the scanned sizes of `removed`).
    pub freed_bytes: u64,
    /// Entries finished from the quarantine a killed reaper left.
    pub quarantine_finished: u64,
}

/// A removed entry.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Removed {
    /// Its path.
    pub path: PathBuf,
    /// Its family.
    pub pattern: String,
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
    /// Its family.
    pub pattern: String,
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
        Reaper {
            policy,
            scanner: Scanner::new(),
        }
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
        for root in roots {
            refuse_filesystem_root(root)?;
        }
        let scan = self.scanner.scan_roots(roots)?;
        let now = scan.started_ms;
        let mut out = Vec::with_capacity(scan.roots.len());
        for (root, report) in roots.iter().zip(&scan.roots) {
            out.push(self.reap_root(root, report, now)?);
        }
        Ok(ReapReport {
            dry_run: self.policy.dry_run,
            roots: out,
            scan,
        })
    }

    fn reap_root(&self, root: &Root, report: &RootReport, now_ms: i64) -> Result<RootReap> {
        let path = report.path.clone();
        let dir = root.fd();
        let quarantine_finished = if self.policy.dry_run || self.policy.stop_requested() {
            0
        } else {
            remove::finish_quarantine(dir, &RemoveOptions::new())
                .map(|r| r.removed().entries())
                .unwrap_or(0)
        };
        let verdicts = self.decide(report, now_ms);
        let mut result = RootReap {
            path: path.clone(),
            removed: Vec::new(),
            skipped: Vec::new(),
            errors: Vec::new(),
            freed_bytes: 0,
            quarantine_finished,
        };
        let mut candidates: Vec<(usize, ReapReason)> = Vec::new();
        for (i, verdict) in verdicts.into_iter().enumerate() {
            match verdict {
                Verdict::Reap(reason) => candidates.push((i, reason)),
                Verdict::Keep(reason) => {
                    result
                        .skipped
                        .push(skipped(&path, &report.entries[i], reason))
                }
            }
        }
        // Oldest first, so a free-space target takes the stalest; entries
        // kept on purpose (taken only under pressure) after all others.
        candidates.sort_by_key(|(i, reason)| {
            (
                matches!(reason, ReapReason::KeptUnderPressure(_)),
                report.entries[*i].newest_mtime_ms,
                *i,
            )
        });
        let target = self
            .policy
            .target_free
            .map(|t| t.bytes(report.filesystem.total_bytes));
        // Measured afresh: an earlier root on the same filesystem, or
        // another reaper, may have freed space since the scan.
        let mut free = match target {
            Some(_) => scan::free_bytes(dir).unwrap_or(report.filesystem.free_bytes),
            None => report.filesystem.free_bytes,
        };
        let mut target_met = target.is_some_and(|t| free >= t);
        for batch in candidates.chunks(BATCH) {
            if self.policy.dry_run {
                for (i, reason) in batch {
                    let entry = &report.entries[*i];
                    if target_met {
                        result
                            .skipped
                            .push(skipped(&path, entry, KeepReason::TargetMet));
                        continue;
                    }
                    free = free.saturating_add(entry.disk_bytes);
                    target_met = target.is_some_and(|t| free >= t);
                    result.freed_bytes += entry.disk_bytes;
                    result.removed.push(removed(&path, entry, reason.clone()));
                }
                continue;
            }
            self.reap_batch(dir, report, batch, target, &mut target_met, &mut result)?;
        }
        Ok(result)
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

    /// Locks a batch, re-checks it against a fresh `/proc` pass, removes.
    fn reap_batch(
        &self,
        dir: BorrowedFd<'_>,
        report: &RootReport,
        batch: &[(usize, ReapReason)],
        target: Option<u64>,
        target_met: &mut bool,
        result: &mut RootReap,
    ) -> Result<()> {
        let path = &report.path;
        let mut locked: Vec<(usize, &ReapReason, Option<Claim>)> = Vec::new();
        for (i, reason) in batch {
            let entry = &report.entries[*i];
            if let Some(why) = self.halted(*target_met) {
                result.skipped.push(skipped(path, entry, why));
                continue;
            }
            match claim(dir, path, entry) {
                Ok(claim) => locked.push((*i, reason, claim)),
                Err(Gone) => {}
                Err(Changed(what)) => {
                    result
                        .skipped
                        .push(skipped(path, entry, KeepReason::Changed(what)))
                }
            }
        }
        if locked.is_empty() {
            return Ok(());
        }
        let inuse = self.scanner.in_use()?;
        for (i, reason, claim) in locked {
            let entry = &report.entries[i];
            if let Some(why) = self.halted(*target_met) {
                result.skipped.push(skipped(path, entry, why));
                continue;
            }
            if let Some(what) = still_unused(dir, path, entry, &inuse) {
                result
                    .skipped
                    .push(skipped(path, entry, KeepReason::Changed(what)));
                continue;
            }
            let (dev, ino) = entry.identity;
            let mut opts = RemoveOptions::new();
            opts.expect(dev, ino);
            match remove::remove_entry(dir, &entry.name, &opts) {
                Ok(removal) if removal.is_complete() => {
                    // The scan measured it; the remover does not re-stat.
                    result.freed_bytes += entry.disk_bytes;
                    result.removed.push(removed(path, entry, reason.clone()));
                }
                Ok(removal) => {
                    let left: Vec<String> = removal
                        .left()
                        .iter()
                        .take(5)
                        .map(|l| format!("{}: {}", l.path().display(), l.reason()))
                        .collect();
                    result.errors.push(ReapError {
                        path: path.join(&entry.name),
                        error: format!(
                            "{} item(s) could not be removed: {}",
                            removal.left().len(),
                            left.join("; ")
                        ),
                    });
                }
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) => {}
                Err(e) => result.errors.push(ReapError {
                    path: path.join(&entry.name),
                    error: e.to_string(),
                }),
            }
            drop(claim);
            if let Some(t) = target {
                *target_met = scan::free_bytes(dir).is_ok_and(|free| free >= t);
            }
        }
        Ok(())
    }
}

/// Why an entry could not be claimed.
enum ClaimFailure {
    /// It vanished: someone else removed it; nothing to report.
    Gone,
    /// It became live, or is not what was scanned.
    Changed(String),
}
use ClaimFailure::{Changed, Gone};

/// Takes the entry's lock (directories) and checks it is the scanned inode.
fn claim(
    dir: BorrowedFd<'_>,
    root: &Path,
    entry: &Entry,
) -> std::result::Result<Option<Claim>, ClaimFailure> {
    if entry.kind != FileKind::Dir {
        return match rustix::fs::statat(dir, &entry.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if (st.st_dev, st.st_ino) == entry.identity => Ok(None),
            Ok(_) => Err(Changed("replaced by another file".into())),
            Err(_) => Err(Gone),
        };
    }
    match lease::probe_at(dir, root, &entry.name) {
        Ok(Probe::Free(claim)) if claim.identity() == entry.identity => Ok(Some(claim)),
        Ok(Probe::Free(_)) => Err(Changed("replaced by another directory".into())),
        Ok(Probe::Live { .. }) => Err(Changed("its lock is now held".into())),
        Ok(_) => Err(Changed("it can no longer be opened".into())),
        Err(e)
            if e.io_error()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
        {
            Err(Gone)
        }
        Err(e) => Err(Changed(e.to_string())),
    }
}

/// Re-walks a claimed entry against a fresh in-use index; `Some(what)` if
/// anything inside is in use now, or the index cannot tell.
fn still_unused(dir: BorrowedFd<'_>, root: &Path, entry: &Entry, inuse: &InUse) -> Option<String> {
    if !inuse.is_complete() {
        return Some("some processes cannot be inspected".into());
    }
    let entry_path = root.join(&entry.name);
    if let Some(k) = inuse.kernel_users_under(&entry_path).first() {
        return Some(k.to_string());
    }
    if let Some(s) = inuse.socket_paths_under(&entry_path).first() {
        return Some(format!("unix socket {}", s.display()));
    }
    let mut found: Option<String> = None;
    let mut links = walk::HardLinks::new();
    let walked = walk::usage_at(dir, &entry.name, &mut links, &mut |v| {
        if let Some(h) = inuse.holders(v.dev(), v.ino()).first() {
            found = Some(h.to_string());
            return WalkState::Quit;
        }
        if let Some(k) = inuse.kernel_users_of(v.dev(), v.ino()).next() {
            found = Some(k.to_string());
            return WalkState::Quit;
        }
        WalkState::Continue
    });
    match walked {
        Ok(usage) if found.is_none() && usage.error_count > 0 => Some(format!(
            "{} place(s) inside cannot be read",
            usage.error_count
        )),
        Ok(_) => found,
        Err(e) => Some(e.to_string()),
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
