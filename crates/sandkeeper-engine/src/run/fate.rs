//! What became of a run's directory, and of its cleanup.

use std::os::fd::BorrowedFd;
use std::path::Path;

use crate::error::Error;

/// What became of a run's directory under its name, as far as the command
/// could change it.
///
/// Only [`Fate::InPlace`] directories are removed or kept by the run; in
/// every other case the name is left as the command left it (the removal
/// checks the inode and never touches a replacement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fate {
    /// The name still holds the directory the run made.
    InPlace,
    /// The command removed it (the name is gone, the directory deleted).
    Removed,
    /// The name is gone but the directory lives on elsewhere (moved).
    MovedAway,
    /// Something else now has the name (a symlink, another directory …).
    Replaced {
        /// What has the name now.
        by: Replacement,
        /// Whether the directory the run made still exists elsewhere.
        alive: bool,
    },
}

/// What took the name of a run's directory ([`Fate::Replaced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replacement {
    /// A symbolic link (never followed).
    Symlink,
    /// Another directory.
    Directory,
    /// A regular file.
    File,
    /// A FIFO, socket or device node.
    Special,
}

impl Replacement {
    /// Its name in reports: `symlink`, `directory`, `file`, `special file`.
    pub fn as_str(self) -> &'static str {
        match self {
            Replacement::Symlink => "symlink",
            Replacement::Directory => "directory",
            Replacement::File => "file",
            Replacement::Special => "special file",
        }
    }
}

impl Fate {
    /// Looks at `path` without following it and compares it with the
    /// directory that was created there (`identity`, and `dir`, its
    /// descriptor, for its link count).
    pub(crate) fn of(path: &Path, identity: (u64, u64), dir: BorrowedFd<'_>) -> Fate {
        use rustix::fs::FileType;
        let alive = rustix::fs::fstat(dir).is_ok_and(|st| st.st_nlink > 0);
        match rustix::fs::lstat(path) {
            Ok(st) if (st.st_dev, st.st_ino) == identity => Fate::InPlace,
            Ok(st) => Fate::Replaced {
                by: match FileType::from_raw_mode(st.st_mode) {
                    FileType::Symlink => Replacement::Symlink,
                    FileType::Directory => Replacement::Directory,
                    FileType::RegularFile => Replacement::File,
                    _ => Replacement::Special,
                },
                alive,
            },
            Err(_) if alive => Fate::MovedAway,
            Err(_) => Fate::Removed,
        }
    }

    /// Whether the directory the run made lives on under another name
    /// (moved away, with or without something new at its name): the run
    /// does not remove it, and its lease is released.
    pub fn moved_away(self) -> bool {
        matches!(self, Fate::MovedAway | Fate::Replaced { alive: true, .. })
    }
}

/// How the end of a run went for its directory.
#[derive(Debug)]
#[non_exhaustive]
pub enum Cleanup {
    /// Removed completely, kept as asked, or (when the command removed,
    /// moved or replaced it) left to what the command did.
    Done,
    /// Part of it could not be removed, or it could not be marked kept:
    /// the error of [`Sandbox::close`](crate::Sandbox::close) or
    /// [`Sandbox::persist_for`](crate::Sandbox::persist_for), whose source
    /// names what was left and why (`left mnt: mount point (not
    /// descended)`) and whose [hint](Error::hint) says what to do.
    Failed(Error),
}

impl Cleanup {
    /// Why it failed, when it did: the error's cause (which names what was
    /// left and why), and its hint.
    pub fn failure(&self) -> Option<(String, Option<&str>)> {
        match self {
            Cleanup::Failed(e) => Some((
                std::error::Error::source(e).map_or_else(|| e.to_string(), ToString::to_string),
                e.hint(),
            )),
            Cleanup::Done => None,
        }
    }

    /// Whether nothing went wrong.
    pub fn is_done(&self) -> bool {
        matches!(self, Cleanup::Done)
    }
}
