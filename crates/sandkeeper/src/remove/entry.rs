//! Removing one entry of an open parent directory: check it, move it into
//! the quarantine, check it again, empty it, remove it.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rustix::io::Errno;

use super::at::{self, DirStat, Fence, FileId, Opened};
use super::engine::{self, Plan};
use super::node::Node;
use super::quarantine::{self, Quarantine, Unusable};
use super::report::{LeftReason, Op, RemovalReport, Tally};
use super::RemoveOptions;
use crate::error::{Error, ErrorKind, Result};

/// How often the entry may flip between directory and non-directory while
/// it is being looked at before the removal gives up.
const MAX_TRIES: usize = 4;
/// How often the emptied entry is emptied again when something was added
/// to it meanwhile.
const MAX_SWEEPS: usize = 3;

/// Everything the steps of one removal share.
struct Job<'a> {
    parent: BorrowedFd<'a>,
    name: CString,
    /// The entry's path for errors: the caller's path, or just the name.
    display: &'a Path,
    fence: Fence,
    plan: Plan,
    expect: Option<FileId>,
    leftovers: Tally,
}

/// See [`super::remove_entry`].
pub(crate) fn remove(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    display: &Path,
    options: &RemoveOptions,
) -> Result<RemovalReport> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || at::is_dot(bytes) || bytes.contains(&b'/') || bytes.contains(&0) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a name of a directory entry (empty, `.`, `..`, or containing `/` or NUL)",
        )
        .at(display));
    }
    if quarantine::is_quarantine(bytes) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "the quarantine is emptied by every removal in its directory, not removed as an entry",
        )
        .at(display)
        .with_hint("remove any other entry of that directory, or the directory itself"));
    }
    let parent_st = at::fstat_dir(parent)
        .map_err(|e| io_error("cannot inspect the parent directory", e, parent_of(display)))?;
    let mut job = Job {
        parent,
        name: CString::new(bytes)
            .map_err(|_| Error::new(ErrorKind::InvalidInput, "NUL in name"))?,
        display,
        fence: Fence::of(&parent_st),
        plan: options.plan(),
        expect: options.expect,
        leftovers: Tally::default(),
    };
    for _ in 0..MAX_TRIES {
        let opened = match at::open_dir(parent, &job.name, &job.fence) {
            Err(Errno::ACCESS) => {
                at::open_unreadable_dir(parent, &job.name, &job.fence, job.expect)
            }
            other => other,
        };
        match opened {
            Ok(Opened::Dir(fd, st)) => return job.remove_dir(fd, st),
            Ok(Opened::Fenced) => {
                return Err(Error::new(
                    ErrorKind::Removal,
                    "is a mount point (or on another filesystem than its parent); not removing it",
                )
                .at(display));
            }
            Err(Errno::NOTDIR | Errno::LOOP) => {
                if let Some(report) = job.remove_file()? {
                    return Ok(report);
                }
            }
            Err(Errno::STALE) => return Err(job.mismatch()),
            Err(errno) => return Err(io_error("cannot open", errno, display)),
        }
    }
    Err(Error::new(
        ErrorKind::Removal,
        "kept changing between a directory and something else; not removing it",
    )
    .at(display))
}

impl Job<'_> {
    fn remove_dir(&mut self, fd: OwnedFd, st: DirStat) -> Result<RemovalReport> {
        if self.expect.is_some_and(|want| want != st.id) {
            return Err(self.mismatch());
        }
        let (q, unique) = self.quarantine_and_move(st.id, Some((fd.as_fd(), st.perm)))?;
        let root = Arc::new(Node::root(fd, st, Box::from(self.name.as_c_str())));
        let mut tally = engine::empty_dir(&root, &self.fence, &self.plan, false);
        let mut sweeps = 0;
        while !root.left_inside.load(Ordering::Acquire) {
            match at::rmdir(q.fd(), &unique) {
                Ok(()) => {
                    tally.counts.dirs += 1;
                    tally.counts.bytes += st.bytes;
                    break;
                }
                // Only processes that had it open before could reach it in
                // the quarantine; one of them removed it.
                Err(Errno::NOENT) => break,
                Err(Errno::NOTEMPTY) if sweeps < MAX_SWEEPS => {
                    sweeps += 1;
                    tally.merge(engine::empty_dir(&root, &self.fence, &self.plan, true));
                }
                Err(errno) => {
                    let path = PathBuf::from(OsStr::from_bytes(self.name.as_bytes()));
                    tally.leave(
                        path,
                        LeftReason::Errno {
                            op: Op::Rmdir,
                            errno,
                        },
                    );
                    root.left_inside.store(true, Ordering::Release);
                }
            }
        }
        let remnant = root
            .left_inside
            .load(Ordering::Acquire)
            .then(|| self.put_back(&q, &unique));
        q.close(self.parent);
        Ok(self.report(tally, remnant))
    }

    /// A file, symlink, FIFO, socket or device node: unlinked by name.
    /// `Ok(None)` when it turned out to be a directory after all.
    fn remove_file(&mut self) -> Result<Option<RemovalReport>> {
        let st = match at::lstat(self.parent, &self.name) {
            Ok(st) => st,
            Err(errno) => return Err(io_error("cannot inspect", errno, self.display)),
        };
        if st.is_dir {
            return Ok(None);
        }
        let freed = if st.nlink <= 1 { st.bytes } else { 0 };
        let mut tally = Tally::default();
        let Some(want) = self.expect else {
            return match at::unlink(self.parent, &self.name) {
                Ok(()) => {
                    tally.counts.files = 1;
                    tally.counts.bytes = freed;
                    Ok(Some(self.report(tally, None)))
                }
                Err(Errno::ISDIR) => Ok(None),
                Err(errno) => Err(io_error("cannot unlink", errno, self.display)),
            };
        };
        if st.id != want {
            return Err(self.mismatch());
        }
        // Move it aside first, so the name cannot be swapped between the
        // identity check and the unlink.
        let (q, unique) = self.quarantine_and_move(want, None)?;
        let result = at::unlink(q.fd(), &unique).map_err(|errno| {
            self.put_back(&q, &unique);
            io_error("cannot unlink", errno, self.display)
        });
        q.close(self.parent);
        result?;
        tally.counts.files = 1;
        tally.counts.bytes = freed;
        Ok(Some(self.report(tally, None)))
    }

    /// Opens the quarantine and moves the entry in (see `move_in`). If the
    /// quarantine was removed under us (by someone not taking part in its
    /// locking, such as a cleaner of empty directories), starts over.
    fn quarantine_and_move(
        &mut self,
        want: FileId,
        dir: Option<(BorrowedFd<'_>, u32)>,
    ) -> Result<(Quarantine, CString)> {
        let mut attempts = 0;
        loop {
            let q = self.quarantine()?;
            match self.move_in(&q, want, dir) {
                Ok(unique) => return Ok((q, unique)),
                Err(err) => {
                    let vanished = at::fstat_dir(q.fd()).is_ok_and(|st| st.nlink == 0);
                    q.close(self.parent);
                    attempts += 1;
                    if !vanished || attempts >= 3 {
                        return Err(err);
                    }
                }
            }
        }
    }

    fn quarantine(&mut self) -> Result<Quarantine> {
        Quarantine::open(self.parent, &self.fence, &self.plan, &mut self.leftovers).map_err(|e| {
            let at = parent_of(self.display).join(quarantine::TRASH);
            match e {
                Unusable::Taken => Error::new(
                    ErrorKind::UnsafeRoot,
                    "no usable quarantine: the names are taken by other users or are not directories",
                )
                .at(at),
                Unusable::Errno(errno) => io_error("cannot set up the quarantine", errno, &at),
            }
        })
    }

    /// Renames the entry into the quarantine under a fresh name, then checks
    /// that what arrived there is `want`; if not, puts it back and fails.
    ///
    /// `dir` is the entry when it is a directory: moving a directory to
    /// another parent needs write permission on it (its `..` changes), so an
    /// unwritable one is made writable through that descriptor first.
    fn move_in(
        &self,
        q: &Quarantine,
        want: FileId,
        dir: Option<(BorrowedFd<'_>, u32)>,
    ) -> Result<CString> {
        let mut unique = Quarantine::unique_name();
        let mut moved = at::rename_noreplace(self.parent, &self.name, q.fd(), &unique);
        if moved == Err(Errno::EXIST) {
            unique = Quarantine::unique_name();
            moved = at::rename_noreplace(self.parent, &self.name, q.fd(), &unique);
        }
        if let (Err(Errno::ACCESS), Some((fd, perm))) = (moved, dir) {
            if perm & 0o200 == 0 && at::make_writable(fd, perm).is_ok() {
                moved = at::rename_noreplace(self.parent, &self.name, q.fd(), &unique);
            }
        }
        if let Err(errno) = moved {
            return Err(io_error(
                "cannot move into the quarantine",
                errno,
                self.display,
            ));
        }
        match at::lstat(q.fd(), &unique) {
            Ok(st) if st.id == want => Ok(unique),
            _ => {
                let back = self.put_back(q, &unique);
                Err(Error::new(
                    ErrorKind::Removal,
                    "was replaced between being opened and being moved to the quarantine; \
                     nothing removed",
                )
                .at(self.display)
                .with_hint(format!(
                    "the replacement was put back at {}",
                    back.display()
                )))
            }
        }
    }

    /// Moves `unique` from the quarantine back to the parent: under its own
    /// name if that is free, else under `.sandkeeper-restored-<unique>`.
    /// Returns where it is now, relative to the parent.
    fn put_back(&self, q: &Quarantine, unique: &CStr) -> PathBuf {
        if at::rename_noreplace(q.fd(), unique, self.parent, &self.name).is_ok() {
            return PathBuf::from(OsStr::from_bytes(self.name.as_bytes()));
        }
        let mut restored = b".sandkeeper-restored-".to_vec();
        restored.extend_from_slice(unique.to_bytes());
        if let Ok(restored) = CString::new(restored) {
            if at::rename_noreplace(q.fd(), unique, self.parent, &restored).is_ok() {
                return PathBuf::from(OsStr::from_bytes(restored.as_bytes()));
            }
        }
        PathBuf::from(OsStr::from_bytes(q.name().to_bytes()))
            .join(OsStr::from_bytes(unique.to_bytes()))
    }

    fn mismatch(&self) -> Error {
        let want = self
            .expect
            .map_or_else(String::new, |w| format!(" {}:{}", w.dev, w.ino));
        Error::new(
            ErrorKind::Removal,
            format!("is not the expected inode (device:inode{want}); nothing removed"),
        )
        .at(self.display)
    }

    fn report(&mut self, tally: Tally, remnant: Option<PathBuf>) -> RemovalReport {
        let tally = tally.finished(self.plan.count_bytes);
        let leftovers = std::mem::take(&mut self.leftovers).finished(self.plan.count_bytes);
        RemovalReport {
            removed: tally.counts,
            left: tally.left,
            remnant,
            leftovers: leftovers.counts,
            leftovers_left: leftovers.left,
        }
    }
}

fn io_error(what: &'static str, errno: Errno, path: &Path) -> Error {
    Error::io(what, io::Error::from(errno)).at(path)
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}
