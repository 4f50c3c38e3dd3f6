//! Finishing a quarantine that a killed remover left behind, without
//! removing anything else (a reaper does this first on every run, even
//! when it has nothing new to remove).

use std::os::fd::BorrowedFd;
use std::path::Path;

use rustix::io::Errno;

use super::at::{self, Fence};
use super::quarantine::{self, Quarantine};
use super::report::{RemovalReport, Tally};
use super::RemoveOptions;
use crate::error::{Error, Result};

/// Empties the quarantine (`.sandkeeper-trash/`) of `parent` of what
/// interrupted removals left in it to be deleted (*condemned*), then removes
/// it if it is empty. Entries a killed reaper left *pending* (moved in, not
/// yet checked) are left alone: see [`pending_leftovers`](super::pending_leftovers).
///
/// Does nothing when there is no quarantine, and leaves it alone while
/// another removal is using it (that one finishes it). What was removed
/// is in [`RemovalReport::leftovers_removed`].
///
/// ```
/// use std::os::fd::AsFd;
/// # let root = sandkeeper::Sandbox::new()?;
/// let dir = std::fs::File::open(root.path())?;
/// let report = sandkeeper::remove::finish_quarantine(dir.as_fd(), &Default::default())?;
/// assert_eq!(report.leftovers_removed().entries(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// When `parent` cannot be inspected or the quarantine cannot be opened.
pub fn finish_quarantine(parent: BorrowedFd<'_>, options: &RemoveOptions) -> Result<RemovalReport> {
    if !quarantine_exists(parent) {
        return Ok(RemovalReport::default());
    }
    let parent_st = at::fstat_dir(parent)
        .map_err(|e| Error::io("cannot inspect the directory", e.into()).at(Path::new(".")))?;
    let fence = Fence::of(&parent_st);
    let plan = options.plan();
    let mut leftovers = Tally::default();
    let quarantine = Quarantine::open(parent, &fence, &plan, &mut leftovers).map_err(|e| {
        let errno = match e {
            quarantine::Unusable::Errno(errno) => errno,
            quarantine::Unusable::Taken => Errno::EXIST,
        };
        Error::io("cannot open the quarantine", errno.into()).at(Path::new(quarantine::TRASH))
    })?;
    quarantine.close(parent);
    let leftovers = leftovers.finished(plan.count_bytes);
    Ok(RemovalReport {
        leftovers: leftovers.counts,
        leftovers_left: leftovers.left,
        ..RemovalReport::default()
    })
}

/// Whether `parent` has an entry under one of the quarantine names.
pub(crate) fn quarantine_exists(parent: BorrowedFd<'_>) -> bool {
    [
        quarantine::TRASH.to_owned(),
        format!(
            "{}-{}",
            quarantine::TRASH,
            rustix::process::geteuid().as_raw()
        ),
    ]
    .iter()
    .any(|name| {
        rustix::fs::statat(parent, name.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
    })
}
