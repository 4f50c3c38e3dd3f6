//! What a reap did, given to the caller as it happens: each decision to
//! keep, each removal, each failure ([`ReapEvent`]), so a daemon can log a
//! removal when it happens rather than when the root is done.

use std::path::Path;

use super::{ReapError, Removed, RootReap, Skipped};
use crate::scan::RootReport;

/// One thing a reap decided or did, in the order it happened; see
/// [`Reaper::reap_roots_with`](super::Reaper::reap_roots_with).
///
/// The same records end up in the [`ReapReport`](super::ReapReport): the
/// events are a live view of it, not extra information.
///
/// ```
/// use sandkeeper_engine::reap::{Policy, ReapEvent, Reaper};
/// use sandkeeper_engine::root::Root;
///
/// let dir = sandkeeper_engine::Sandbox::new()?;
/// std::fs::create_dir(dir.path().join("app-1"))?;
/// // A dry run tells what would go, and removes nothing.
/// let policy = Policy::builder()
///     .matching("app-*")
///     .grace(std::time::Duration::ZERO)
///     .dry_run(true)
///     .build()?;
/// let root = Root::open_exact(dir.path())?;
/// let mut told = Vec::new();
/// Reaper::new(policy).reap_roots_with(&[root], &mut |event| match event {
///     ReapEvent::Removed(r) => told.push(format!("would remove {}", r.path.display())),
///     ReapEvent::Kept(k) => told.push(format!("keep {}: {}", k.path.display(), k.reason)),
///     _ => {}
/// })?;
/// // Removed, or kept with why (here, when some process cannot be
/// // inspected, it is `unknown` and kept).
/// let app = dir.path().join("app-1").display().to_string();
/// assert!(told.iter().any(|t| t.contains(&app)), "{told:?}");
/// assert!(dir.path().join("app-1").exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum ReapEvent<'a> {
    /// A root was scanned; its decisions and removals follow.
    Scanned(&'a RootReport),
    /// What killed reapers left in a root's quarantine was finished: this
    /// many files and directories removed.
    QuarantineFinished {
        /// The root.
        root: &'a Path,
        /// Files and directories removed.
        items: u64,
    },
    /// An entry an earlier reap kept pending in a root's quarantine (in
    /// use then, and its name taken) was checked again, found unused and
    /// removed: this many files and directories
    /// ([`RootReap::quarantine_rechecked`](super::RootReap::quarantine_rechecked)).
    QuarantineRechecked {
        /// The root.
        root: &'a Path,
        /// Files and directories removed.
        items: u64,
    },
    /// An entry is left in place, with the reason.
    Kept(&'a Skipped),
    /// An entry was removed (in a dry run: would be).
    Removed(&'a Removed),
    /// An entry should have gone but could not be removed (fully).
    Failed(&'a ReapError),
}

/// Where a reap of one root records what it does: into the root's
/// [`RootReap`], and to the caller's event sink at the same moment.
/// `records`: whether the [`RootReap`] keeps each record, or only its
/// [`counts`](RootReap::counts).
pub(super) struct Recorder<'s> {
    pub(super) reap: RootReap,
    records: bool,
    sink: &'s mut dyn FnMut(ReapEvent<'_>),
}

impl<'s> Recorder<'s> {
    pub(super) fn new(
        reap: RootReap,
        records: bool,
        sink: &'s mut dyn FnMut(ReapEvent<'_>),
    ) -> Recorder<'s> {
        Recorder {
            reap,
            records,
            sink,
        }
    }

    pub(super) fn kept(&mut self, skipped: Skipped) {
        (self.sink)(ReapEvent::Kept(&skipped));
        self.reap.counts.skipped(&skipped);
        if self.records {
            self.reap.skipped.push(skipped);
        }
    }

    pub(super) fn removed(&mut self, removed: Removed) {
        (self.sink)(ReapEvent::Removed(&removed));
        self.reap.freed_bytes += removed.disk_bytes;
        self.reap.counts.removed(&removed);
        if self.records {
            self.reap.removed.push(removed);
        }
    }

    pub(super) fn failed(&mut self, error: ReapError) {
        (self.sink)(ReapEvent::Failed(&error));
        self.reap.errors.push(error);
    }

    pub(super) fn finished_leftovers(&mut self, items: u64) {
        if items > 0 {
            (self.sink)(ReapEvent::QuarantineFinished {
                root: &self.reap.path,
                items,
            });
        }
        self.reap.quarantine_finished += items;
    }

    /// Counts what was removed of an entry an earlier reap had kept
    /// pending on purpose (see [`RootReap::quarantine_rechecked`](super::RootReap::quarantine_rechecked)).
    pub(super) fn rechecked_leftovers(&mut self, items: u64) {
        if items > 0 {
            (self.sink)(ReapEvent::QuarantineRechecked {
                root: &self.reap.path,
                items,
            });
        }
        self.reap.quarantine_rechecked += items;
    }
}
