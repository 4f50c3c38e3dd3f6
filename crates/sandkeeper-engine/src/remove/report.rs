//! What a removal did: counts, and what it left behind and why.

use std::fmt;
use std::path::{Path, PathBuf};

pub use rustix::io::Errno;

/// How much a removal (or part of it) took away.
///
/// Files are every entry that is not a directory (regular files, symlinks,
/// FIFOs, sockets, device nodes). Bytes, when
/// [counted](super::RemoveOptions::count_bytes), are disk usage
/// (`st_blocks` × 512) of the directories removed and of the files whose
/// *last* link was removed; a file that is still open elsewhere frees its
/// space only when it is closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub(crate) files: u64,
    pub(crate) dirs: u64,
    pub(crate) bytes: u64,
    pub(crate) bytes_counted: bool,
}

impl Counts {
    /// Entries that are not directories that were unlinked.
    pub fn files(&self) -> u64 {
        self.files
    }

    /// Directories that were removed.
    pub fn dirs(&self) -> u64 {
        self.dirs
    }

    /// All entries removed: [`files`](Self::files) plus
    /// [`dirs`](Self::dirs).
    pub fn entries(&self) -> u64 {
        self.files + self.dirs
    }

    /// Disk space freed, in bytes (see the type's docs for what counts);
    /// `None` unless the removal was asked to
    /// [count it](super::RemoveOptions::count_bytes).
    pub fn bytes(&self) -> Option<u64> {
        self.bytes_counted.then_some(self.bytes)
    }

    pub(crate) fn add(&mut self, other: &Counts) {
        self.files += other.files;
        self.dirs += other.dirs;
        self.bytes += other.bytes;
        self.bytes_counted |= other.bytes_counted;
    }
}

/// The system call that failed on an entry that was left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// `openat` of a directory to empty it.
    Open,
    /// `getdents64` listing a directory.
    ReadDir,
    /// `statx` of an entry whose type the listing did not give.
    Stat,
    /// `unlinkat(…, 0)` of a file, symlink, FIFO, socket or device node.
    Unlink,
    /// `unlinkat(…, AT_REMOVEDIR)` of an emptied directory.
    Rmdir,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::ReadDir => "list",
            Op::Stat => "inspect",
            Op::Unlink => "unlink",
            Op::Rmdir => "remove directory",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an entry inside the tree was left in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeftReason {
    /// A directory on another mount or device (a mount point, bind mounts
    /// included): never descended into, never removed.
    MountPoint,
    /// A system call on the entry failed (`EPERM` for an immutable file,
    /// `EBUSY` for a file something is mounted on, `EROFS`, …).
    Errno {
        /// What was being done.
        op: Op,
        /// The error the kernel returned.
        errno: Errno,
    },
    /// The entry kept changing between a directory and something else
    /// while the remover worked on it; it gave up after a few tries.
    Replaced,
    /// A directory was moved out of the tree while the remover was inside
    /// it: the remover could no longer reach it from the tree and left it,
    /// and everything below it, alone.
    Moved,
}

impl fmt::Display for LeftReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeftReason::MountPoint => f.write_str("mount point (not descended)"),
            LeftReason::Errno { op, errno } => write!(f, "cannot {op}: {errno}"),
            LeftReason::Replaced => f.write_str("kept being replaced while being removed"),
            LeftReason::Moved => f.write_str("moved out of the tree while being removed"),
        }
    }
}

/// One entry a removal left, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub(crate) path: PathBuf,
    pub(crate) reason: LeftReason,
}

impl Left {
    /// The entry, relative to the parent directory the removal was given:
    /// its first component is the removed entry's name (for quarantine
    /// leftovers, `.sandkeeper-trash-<euid>-<random>/<name>`). The bytes are exactly the
    /// names on disk; escape them before showing them on a terminal.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why it was left.
    pub fn reason(&self) -> LeftReason {
        self.reason
    }
}

impl fmt::Display for Left {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// What [`remove_entry`](super::remove_entry) did.
///
/// A report is complete when the entry is gone; otherwise
/// [`left`](Self::left) lists what stayed and why, and
/// [`remnant`](Self::remnant) says where the rest of the entry now is.
#[derive(Debug, Clone, Default)]
pub struct RemovalReport {
    pub(crate) removed: Counts,
    pub(crate) left: Vec<Left>,
    pub(crate) remnant: Option<PathBuf>,
    pub(crate) leftovers: Counts,
    pub(crate) leftovers_left: Vec<Left>,
    pub(crate) leftovers_returned: Vec<PathBuf>,
}

impl RemovalReport {
    /// Whether the entry was removed completely.
    pub fn is_complete(&self) -> bool {
        self.remnant.is_none() && self.left.is_empty()
    }

    /// What was removed of the entry.
    pub fn removed(&self) -> Counts {
        self.removed
    }

    /// Entries inside the tree that were left in place, with why, sorted by
    /// path. Directories that stayed only because something below them
    /// stayed are not listed.
    pub fn left(&self) -> &[Left] {
        &self.left
    }

    /// Where what is left of an incomplete removal now is, relative to the
    /// parent: the entry's own name when the remainder was put back, or
    /// `.sandkeeper-trash-<euid>-<random>/<unique>` when its name had been taken again in
    /// the meantime. `None` when the removal is complete.
    pub fn remnant(&self) -> Option<&Path> {
        self.remnant.as_deref()
    }

    /// What this call removed of the quarantine leftovers of earlier,
    /// interrupted removals in the same parent.
    pub fn leftovers_removed(&self) -> Counts {
        self.leftovers
    }

    /// Quarantine leftovers that could not be removed, with why (paths start
    /// with `.sandkeeper-trash-<euid>-<random>/`).
    pub fn leftovers_left(&self) -> &[Left] {
        &self.leftovers_left
    }

    /// Entries that an interrupted put-back left in the quarantine under a
    /// *returning* name (an entry found in use on its way back to its name,
    /// or the newcomer that had taken that name and was swapped out), moved
    /// back out into the parent by this call, never deleted: where each is
    /// now, relative to the parent (its own name, or
    /// `<name>.taken-during-reap-<8 hex>` beside it when that was taken).
    pub fn leftovers_returned(&self) -> &[PathBuf] {
        &self.leftovers_returned
    }
}

/// A worker's private tally, merged into the report at the end.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) counts: Counts,
    pub(crate) left: Vec<Left>,
    /// Returning leftovers moved back out of a quarantine, where they are
    /// now (see [`RemovalReport::leftovers_returned`]).
    pub(crate) returned: Vec<PathBuf>,
}

impl Tally {
    pub(crate) fn merge(&mut self, other: Tally) {
        self.counts.add(&other.counts);
        self.left.extend(other.left);
        self.returned.extend(other.returned);
    }

    pub(crate) fn leave(&mut self, path: PathBuf, reason: LeftReason) {
        self.left.push(Left { path, reason });
    }

    /// Sorts the left entries by path so reports do not depend on thread
    /// scheduling, and says whether bytes were counted.
    pub(crate) fn finished(mut self, bytes_counted: bool) -> Self {
        self.left.sort_by(|a, b| a.path.cmp(&b.path));
        self.counts.bytes_counted = bytes_counted;
        if !bytes_counted {
            self.counts.bytes = 0;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_types_are_send_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<RemovalReport>();
        check::<Left>();
        check::<LeftReason>();
        check::<Counts>();
    }

    #[test]
    fn reasons_explain_themselves() {
        let cases = [
            (LeftReason::MountPoint, "mount point (not descended)"),
            (
                LeftReason::Errno {
                    op: Op::Unlink,
                    errno: Errno::PERM,
                },
                "cannot unlink: Operation not permitted (os error 1)",
            ),
            (
                LeftReason::Replaced,
                "kept being replaced while being removed",
            ),
            (
                LeftReason::Moved,
                "moved out of the tree while being removed",
            ),
        ];
        for (reason, want) in cases {
            assert_eq!(reason.to_string(), want);
        }
    }

    #[test]
    fn empty_report_is_complete() {
        let report = RemovalReport::default();
        assert!(report.is_complete());
        assert_eq!(report.removed().entries(), 0);
    }
}
