//! The trackers of a set of roots, kept in step with a config.

use std::path::{Path, PathBuf};

use super::Tracker;
use crate::error::{Error, Result};
use crate::root::Root;

/// One [`Tracker`] per root that asks for one: what `watch` holds for the
/// roots whose config sets `track_origins = true`. Dropping it stops them.
#[derive(Debug, Default)]
pub struct Trackers {
    running: Vec<Tracker>,
    /// Where records go on filesystems without `trusted.*` attributes
    /// (`None`: [`store_path`](super::store_path)`(None)`).
    store: Option<PathBuf>,
}

/// What [`Trackers::sync`] did for one root.
#[derive(Debug)]
#[non_exhaustive]
pub enum TrackerChange {
    /// Tracking started.
    Started(PathBuf),
    /// Tracking stopped (the root no longer asks for it).
    Stopped(PathBuf),
    /// Tracking could not start (not root, no fanotify, no root dir).
    Failed(PathBuf, Error),
}

impl Trackers {
    /// No trackers.
    pub fn new() -> Trackers {
        Trackers::default()
    }

    /// Where trackers started from now on keep the records of roots
    /// without `trusted.*` attributes (the config's `origin_store`).
    pub fn set_store(&mut self, store: Option<&Path>) {
        self.store = store.map(Path::to_owned);
    }

    /// Drops the store's records of entries that are gone, for every
    /// tracker that records in a store: what `watch` does on each pass.
    /// Returns (root, records dropped) for those that dropped any, and the
    /// errors.
    pub fn prune(&self) -> Vec<(&Path, Result<usize>)> {
        self.running
            .iter()
            .filter(|t| t.store().is_some())
            .map(|t| (t.path(), t.prune()))
            .collect()
    }

    /// Tracks exactly the roots `wanted`: starts the missing ones (each
    /// root opened afresh, without following links), stops the others,
    /// keeps those running. Returns what changed.
    pub fn sync<'a>(&mut self, wanted: impl IntoIterator<Item = &'a Path>) -> Vec<TrackerChange> {
        let wanted: Vec<&Path> = wanted.into_iter().collect();
        let mut changes = Vec::new();
        let (keep, stop): (Vec<Tracker>, Vec<Tracker>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|t| wanted.contains(&t.path()));
        for t in stop {
            changes.push(TrackerChange::Stopped(t.path().to_owned()));
            t.stop();
        }
        self.running = keep;
        for path in wanted {
            if self.running.iter().any(|t| t.path() == path) {
                continue;
            }
            let store = super::store_path(self.store.as_deref());
            match Root::open_exact(path).and_then(|root| Tracker::start_with_store(&root, &store)) {
                Ok(t) => {
                    self.running.push(t);
                    changes.push(TrackerChange::Started(path.to_owned()));
                }
                Err(e) => changes.push(TrackerChange::Failed(path.to_owned(), e)),
            }
        }
        changes
    }

    /// The trackers running.
    pub fn running(&self) -> &[Tracker] {
        &self.running
    }
}
