//! Finishing a quarantine that a killed remover left behind, without
//! removing anything else (a reaper does this first on every run, even
//! when it has nothing new to remove).

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::io::Errno;

use super::quarantine_dir::{self, Quarantine};
use super::report::{RemovalReport, Tally};
use super::RemoveOptions;
use super::NO_STATX;
use crate::error::{Error, Result};
use crate::fs_at::{self, Fence};

/// Empties every quarantine (`.sandkeeper-trash-<euid>-<random>/`) of
/// `parent` that belongs to the caller of what interrupted removals left in
/// it to be deleted (*condemned*), then removes it if it is empty. Entries
/// a killed reaper left *pending* (moved in, not yet checked) are left
/// alone: see [`pending_leftovers`](super::pending_leftovers).
///
/// A quarantine is the caller's when it is a directory owned by the
/// effective uid with mode 0700, whatever its name: look-alikes other
/// users made are ordinary entries. Several quarantines (of concurrent
/// runs) are all finished. Does nothing when there is none, and leaves one
/// alone while another removal is using it (that one finishes it). What
/// was removed is in [`RemovalReport::leftovers_removed`].
///
/// ```
/// use std::os::fd::AsFd;
/// # let root = sandkeeper_engine::Sandbox::new()?;
/// let dir = std::fs::File::open(root.path())?;
/// let report = sandkeeper_engine::remove::finish_quarantine(dir.as_fd(), &Default::default())?;
/// assert_eq!(report.leftovers_removed().entries(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// When `parent` cannot be inspected or listed, or a quarantine of the
/// caller's cannot be opened.
pub fn finish_quarantine(parent: BorrowedFd<'_>, options: &RemoveOptions) -> Result<RemovalReport> {
    let parent_st = fs_at::fstat_dir(parent, NO_STATX)
        .map_err(|e| Error::io("cannot inspect the directory", e.into()).at(Path::new(".")))?;
    let names = quarantine_dir::candidates(parent)
        .map_err(|e| Error::io("cannot list the directory", e.into()).at(Path::new(".")))?;
    let fence = Fence::of(&parent_st);
    let plan = options.plan();
    let euid = rustix::process::geteuid().as_raw();
    let mut leftovers = Tally::default();
    for name in names {
        let opened = Quarantine::open_existing(parent, &name, euid, &fence, &plan, &mut leftovers)
            .map_err(|e| {
                let errno = match e {
                    quarantine_dir::Unusable::Errno(errno)
                    | quarantine_dir::Unusable::NoSpace(errno) => errno,
                    quarantine_dir::Unusable::Taken => Errno::EXIST,
                };
                Error::io("cannot open the quarantine", errno.into())
                    .at(Path::new(OsStr::from_bytes(name.as_bytes())))
            })?;
        if let Some(q) = opened {
            q.close(parent);
        }
    }
    let leftovers = leftovers.finished(plan.count_bytes);
    Ok(RemovalReport {
        leftovers: leftovers.counts,
        leftovers_left: leftovers.left,
        leftovers_returned: leftovers.returned,
        ..RemovalReport::default()
    })
}

/// Whether `parent` has an entry that may be one of the caller's
/// quarantines, or a directory left as its own (checked further when
/// opened).
pub(crate) fn quarantine_exists(parent: BorrowedFd<'_>) -> bool {
    // Only such names are kept as `parent` is read: a root of a million
    // entries is not copied name by name.
    quarantine_dir::list_where(parent, may_hold_leftovers).map_or(true, |names| !names.is_empty())
}

/// Whether an entry named `name` may be one of the caller's quarantines,
/// or a directory left as its own: what [`quarantine_exists`] looks for,
/// for a caller that has listed the directory already.
pub(crate) fn may_hold_leftovers(name: &[u8]) -> bool {
    quarantine_dir::is_quarantine(name) || quarantine_dir::is_own_pending(name)
}
