//! Removing one entry of an open parent directory: check it, move it into
//! the quarantine, check it again, empty it, remove it.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rustix::fs::Mode;
use rustix::io::Errno;

use super::engine;
use super::node::Node;
use super::plan::Plan;
use super::quarantine_dir::{self, Owner, Quarantine, Unusable};
use super::report::{LeftReason, Op, RemovalReport, Tally};
use super::RemoveOptions;
use super::{ATIME, NO_STATX};
use crate::error::{Error, ErrorKind, Result};
use crate::fs_at::{self, Fence, FileId, Meta, Opened};

mod two_step;

pub use two_step::QuarantineBatch;
pub(crate) use two_step::{pending_leftovers, quarantine};
pub use two_step::{LeftBy, NotRestored, Quarantined, Restore};
pub(crate) use two_step::{Limits, Listed, Listing, Seen};

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
    /// Set when the last quarantine could not be had for want of a free
    /// inode or block (a directory then becomes its own: [`Job::become_own`]).
    no_space: bool,
    /// A share of a batch's open quarantine, used by the first move (a
    /// retry, when it vanished, opens one afresh).
    shared: Option<Quarantine>,
}

/// See [`super::remove_entry`].
pub(crate) fn remove(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    display: &Path,
    options: &RemoveOptions,
) -> Result<RemovalReport> {
    check_name(parent, name, display)?;
    let mut job = Job::new(parent, name, display, options)?;
    match job.open_entry()? {
        Target::Dir(fd, st) => job.remove_dir(fd, st),
        Target::File(report) => Ok(report),
    }
}

/// Refuses what is not one name of a directory entry, and the caller's own
/// quarantines (and directories that are their own quarantine) in
/// `parent`. A look-alike another user made (not a directory owned by the
/// effective uid with mode 0700) is an ordinary entry.
fn check_name(parent: BorrowedFd<'_>, name: &OsStr, display: &Path) -> Result<()> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || fs_at::is_dot(bytes) || bytes.contains(&b'/') || bytes.contains(&0) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a name of a directory entry (empty, `.`, `..`, or containing `/` or NUL)",
        )
        .at(display));
    }
    if quarantine_dir::is_own_quarantine_at(parent, name) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "the quarantine is emptied by every removal in its directory, not removed as an entry",
        )
        .at(display)
        .with_hint("remove any other entry of that directory, or the directory itself"));
    }
    Ok(())
}

/// What [`Job::open_entry`] found.
enum Target {
    /// A directory, open.
    Dir(OwnedFd, Meta),
    /// Not a directory: already removed.
    File(RemovalReport),
}

impl<'a> Job<'a> {
    fn new(
        parent: BorrowedFd<'a>,
        name: &OsStr,
        display: &'a Path,
        options: &RemoveOptions,
    ) -> Result<Job<'a>> {
        // Once per removal, not per name made (see `remember_pid`).
        quarantine_dir::remember_pid();
        let parent_st = fs_at::fstat_dir(parent, NO_STATX)
            .map_err(|e| io_error("cannot inspect the parent directory", e, parent_of(display)))?;
        Job::with_parent(parent, &parent_st, name, display, options)
    }

    /// As [`Job::new`], with the parent already inspected (once for a
    /// batch of entries: [`QuarantineBatch`](super::QuarantineBatch)).
    fn with_parent(
        parent: BorrowedFd<'a>,
        parent_st: &Meta,
        name: &OsStr,
        display: &'a Path,
        options: &RemoveOptions,
    ) -> Result<Job<'a>> {
        let bytes = name.as_bytes();
        Ok(Job {
            parent,
            name: CString::new(bytes)
                .map_err(|_| Error::new(ErrorKind::InvalidInput, "NUL in name"))?,
            display,
            fence: Fence::of(parent_st),
            plan: options.plan(),
            expect: options.expect,
            leftovers: Tally::default(),
            no_space: false,
            shared: None,
        })
    }

    /// Opens the entry: `Some(Dir)` for a directory, `None` when it is not
    /// one (the caller looks at it by name).
    fn open_one(&mut self) -> Result<Option<(OwnedFd, Meta)>> {
        let opened =
            match fs_at::open_dir_stat(self.parent, &self.name, ATIME, &self.fence, NO_STATX) {
                Err(Errno::ACCESS) => fs_at::open_unreadable_dir(
                    self.parent,
                    &self.name,
                    &self.fence,
                    self.expect,
                    NO_STATX,
                ),
                other => other,
            };
        match opened {
            Ok(Opened::Dir(fd, st)) => Ok(Some((fd, st))),
            Ok(Opened::Fenced) => Err(self.fenced()),
            Err(Errno::NOTDIR | Errno::LOOP) => Ok(None),
            Err(Errno::STALE) => Err(self.mismatch()),
            Err(errno) => Err(io_error("cannot open", errno, self.display)),
        }
    }

    /// The entry as its claim opened it and `statx`ed it
    /// ([`Claim::into_dir`](crate::lease::Claim)), instead of opening its
    /// name a second time: the claim opened it as [`Job::open_one`] does
    /// (`openat2` beneath the parent with `O_DIRECTORY|O_NOFOLLOW`,
    /// `RESOLVE_NO_XDEV|RESOLVE_NO_SYMLINKS`: never a symlink, never a
    /// mount point), and what it opened must pass the same check: a
    /// directory on the parent's mount (device and `statx` mount id). Its
    /// identity is then checked as an entry opened here is: against
    /// [`expect`](RemoveOptions::expect), and that of what arrives in the
    /// quarantine against it, so a name swapped since the claim is put
    /// back, never removed.
    fn take_over(&self, fd: OwnedFd, st: Meta) -> Result<(OwnedFd, Meta)> {
        if !st.is_dir() {
            return Err(Error::new(ErrorKind::Removal, "is not a directory").at(self.display));
        }
        if !self.fence.admits(&st) {
            return Err(self.fenced());
        }
        Ok((fd, st))
    }

    fn fenced(&self) -> Error {
        Error::new(
            ErrorKind::Removal,
            "is a mount point (or on another filesystem than its parent); not removing it",
        )
        .at(self.display)
    }

    /// Opens the entry for [`remove`]: a directory is returned open, any
    /// other kind is removed at once.
    fn open_entry(&mut self) -> Result<Target> {
        for _ in 0..MAX_TRIES {
            if let Some((fd, st)) = self.open_one()? {
                return Ok(Target::Dir(fd, st));
            }
            if let Some(report) = self.remove_file()? {
                return Ok(Target::File(report));
            }
        }
        Err(self.flapping())
    }

    fn flapping(&self) -> Error {
        Error::new(
            ErrorKind::Removal,
            "kept changing between a directory and something else; not removing it",
        )
        .replaced_name()
        .at(self.display)
    }

    fn remove_dir(&mut self, fd: OwnedFd, st: Meta) -> Result<RemovalReport> {
        if self.expect.is_some_and(|want| want != st.id) {
            return Err(self.mismatch());
        }
        let condemned = Quarantine::condemned_name();
        match self.quarantine_and_move(st.id, Some((fd.as_fd(), st.perm)), &condemned) {
            Ok((q, unique)) => self.delete_dir(q, unique, fd, st),
            Err(e) if self.no_space => {
                let (unique, owner) = self.become_own(fd.as_fd(), st, e)?;
                Ok(self.delete_own(&unique, fd, st, owner))
            }
            Err(e) => Err(e),
        }
    }

    /// Makes the directory `fd` (the entry, `st`) its own quarantine, for
    /// when no quarantine can be made (no free inode or block; `no_space`
    /// is the error that said so): first, on its descriptor, owned by us
    /// (`fchown`) with mode 0700 (`fchmod`), so no one else can look up
    /// anything inside any more; then renamed in the parent to a pending
    /// name carrying its owner, mode and name
    /// ([`quarantine_dir::own_pending_name`]); then checked to be the inode
    /// that was opened. Needs no new inode or block: the rename stays in
    /// the parent. On any failure everything is put back as it was.
    fn become_own(
        &self,
        fd: BorrowedFd<'_>,
        st: Meta,
        no_space: Error,
    ) -> Result<(CString, Owner)> {
        let full =
            rustix::fs::fstat(fd).map_err(|e| io_error("cannot inspect", e, self.display))?;
        let owner = Owner {
            uid: full.st_uid,
            gid: full.st_gid,
            perm: full.st_mode & 0o7777,
        };
        let euid = rustix::process::geteuid();
        let made_ours = rustix::fs::fchown(fd, Some(euid), Some(rustix::process::getegid()))
            .and_then(|()| rustix::fs::fchmod(fd, Mode::RWXU));
        if made_ours.is_err() {
            give_back(fd, owner);
            return Err(no_space);
        }
        let mut moved = Err(Errno::EXIST);
        let mut name = CString::default();
        for _ in 0..MAX_TRIES {
            name = quarantine_dir::own_pending_name(euid.as_raw(), owner, self.name.as_bytes());
            moved = fs_at::rename_noreplace(self.parent, &self.name, self.parent, &name);
            if moved != Err(Errno::EXIST) {
                break;
            }
        }
        if let Err(errno) = moved {
            give_back(fd, owner);
            return Err(io_error(
                "no free inode or block for a quarantine, and it cannot be renamed to be its own",
                errno,
                self.display,
            ));
        }
        match fs_at::stat(self.parent, &name, NO_STATX) {
            Ok(now) if now.id == st.id => Ok((name, owner)),
            _ => {
                // Not what was opened: the name was swapped. Put both back.
                let _ = fs_at::rename_noreplace(self.parent, &name, self.parent, &self.name);
                give_back(fd, owner);
                Err(Error::new(
                    ErrorKind::Removal,
                    "was replaced between being opened and being moved aside; nothing removed",
                )
                .at(self.display))
            }
        }
    }

    /// Empties the directory `root` (`st`), named `unique` in `dir`, and
    /// removes it, sweeping again while something new appears inside (at
    /// most [`MAX_SWEEPS`] times); what could not go is in the tally and
    /// `root.left_inside` is set.
    fn empty_and_rmdir(
        &self,
        root: &Arc<Node>,
        dir: BorrowedFd<'_>,
        unique: &CStr,
        st: Meta,
    ) -> Tally {
        let mut tally = engine::empty_dir(root, &self.fence, &self.plan, false);
        let mut sweeps = 0;
        while !root.left_inside.load(Ordering::Acquire) {
            match fs_at::rmdir(dir, unique) {
                Ok(()) => {
                    tally.counts.dirs += 1;
                    tally.counts.bytes += st.disk;
                    break;
                }
                // Only processes that had it open before could reach it
                // once it left its name; one of them removed it.
                Err(Errno::NOENT) => break,
                Err(Errno::NOTEMPTY) if sweeps < MAX_SWEEPS => {
                    sweeps += 1;
                    tally.merge(engine::empty_dir(root, &self.fence, &self.plan, true));
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
        tally
    }

    /// Empties and removes the directory `fd` (`st`), which is its own
    /// quarantine as `unique` in the parent; what is left of it is put
    /// back under its name (as it was: owner and mode) when that is free.
    fn delete_own(&mut self, unique: &CStr, fd: OwnedFd, st: Meta, owner: Owner) -> RemovalReport {
        let root = Arc::new(Node::root(fd, st, Box::from(self.name.as_c_str())));
        let tally = self.empty_and_rmdir(&root, self.parent, unique, st);
        let remnant = root.left_inside.load(Ordering::Acquire).then(|| {
            if fs_at::rename_noreplace(self.parent, unique, self.parent, &self.name).is_ok() {
                give_back(root.fd.as_fd(), owner);
                PathBuf::from(OsStr::from_bytes(self.name.as_bytes()))
            } else {
                PathBuf::from(OsStr::from_bytes(unique.to_bytes()))
            }
        });
        self.report(tally, remnant)
    }

    /// Empties and removes the directory `fd` (`st`), which is in the
    /// quarantine `q` as `unique`; puts back what is left.
    fn delete_dir(
        &mut self,
        q: Quarantine,
        unique: CString,
        fd: OwnedFd,
        st: Meta,
    ) -> Result<RemovalReport> {
        let root = Arc::new(Node::root(fd, st, Box::from(self.name.as_c_str())));
        let tally = self.empty_and_rmdir(&root, q.fd(), &unique, st);
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
        let st = match fs_at::stat(self.parent, &self.name, NO_STATX) {
            Ok(st) => st,
            Err(errno) => return Err(io_error("cannot inspect", errno, self.display)),
        };
        if st.is_dir() {
            return Ok(None);
        }
        let freed = if st.nlink <= 1 { st.disk } else { 0 };
        let mut tally = Tally::default();
        let Some(want) = self.expect else {
            return match fs_at::unlink(self.parent, &self.name) {
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
        let condemned = Quarantine::condemned_name();
        let (q, unique) = self.quarantine_and_move(want, None, &condemned)?;
        let result = fs_at::unlink(q.fd(), &unique).map_err(|errno| {
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
        unique: &CStr,
    ) -> Result<(Quarantine, CString)> {
        let mut attempts = 0;
        loop {
            let q = self.quarantine()?;
            match self.move_in(&q, want, dir, unique) {
                Ok(unique) => return Ok((q, unique)),
                Err(err) if is_no_space(&err) => {
                    // The quarantine's directory has no room for one more
                    // name (a full ext4 needs a block for it).
                    q.close(self.parent);
                    self.no_space = true;
                    return Err(err);
                }
                Err(err) => {
                    let vanished = fs_at::fstat_dir(q.fd(), NO_STATX).is_ok_and(|st| st.nlink == 0);
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
        if let Some(q) = self.shared.take() {
            return Ok(q);
        }
        let opened = Quarantine::open(self.parent, &self.fence, &self.plan, &mut self.leftovers);
        self.no_space = matches!(opened, Err(Unusable::NoSpace(_)));
        opened.map_err(|e| self.unusable(e, c".sandkeeper-trash-*"))
    }

    /// The error for a quarantine (`name` in the parent) that cannot be had.
    fn unusable(&self, e: Unusable, name: &CStr) -> Error {
        let at = parent_of(self.display).join(OsStr::from_bytes(name.to_bytes()));
        match e {
            Unusable::Taken => Error::new(
                ErrorKind::Removal,
                "no quarantine could be made: every fresh name was taken or vanished at once",
            )
            .at(at)
            .with_hint("something is racing the remover in this directory; try again"),
            Unusable::NoSpace(errno) => io_error(
                "no free inode or block for a quarantine, and this entry cannot be its own",
                errno,
                &at,
            ),
            Unusable::Errno(errno) => io_error("cannot set up the quarantine", errno, &at),
        }
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
        unique: &CStr,
    ) -> Result<CString> {
        let mut unique = unique.to_owned();
        let mut moved = fs_at::rename_noreplace(self.parent, &self.name, q.fd(), &unique);
        if moved == Err(Errno::EXIST) {
            // Only another remover of ours could have made the name: the
            // same state, another unique part.
            unique = if unique.as_bytes().starts_with(quarantine_dir::PENDING) {
                Quarantine::pending_name(self.name.as_bytes())
            } else {
                Quarantine::condemned_name()
            };
            moved = fs_at::rename_noreplace(self.parent, &self.name, q.fd(), &unique);
        }
        if let (Err(Errno::ACCESS), Some((fd, perm))) = (moved, dir) {
            if perm & 0o200 == 0 && fs_at::make_writable(fd, perm).is_ok() {
                moved = fs_at::rename_noreplace(self.parent, &self.name, q.fd(), &unique);
            }
        }
        if let Err(errno) = moved {
            return Err(io_error(
                "cannot move into the quarantine",
                errno,
                self.display,
            ));
        }
        match fs_at::stat(q.fd(), &unique, NO_STATX) {
            Ok(st) if st.id == want => Ok(unique),
            _ => {
                let back = self.put_back(q, &unique);
                Err(Error::new(
                    ErrorKind::Removal,
                    "was replaced between being opened and being moved to the quarantine; \
                     nothing removed",
                )
                .replaced_name()
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
        if fs_at::rename_noreplace(q.fd(), unique, self.parent, &self.name).is_ok() {
            return PathBuf::from(OsStr::from_bytes(self.name.as_bytes()));
        }
        let mut restored = b".sandkeeper-restored-".to_vec();
        restored.extend_from_slice(unique.to_bytes());
        if let Ok(restored) = CString::new(restored) {
            if fs_at::rename_noreplace(q.fd(), unique, self.parent, &restored).is_ok() {
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
        .replaced_name()
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
            leftovers_returned: leftovers.returned,
        }
    }
}

/// Whether `err` says the filesystem is full (`ENOSPC`, `EDQUOT`).
fn is_no_space(err: &Error) -> bool {
    err.io_error()
        .and_then(io::Error::raw_os_error)
        .is_some_and(|e| e == Errno::NOSPC.raw_os_error() || e == Errno::DQUOT.raw_os_error())
}

/// Gives the directory `fd` back its owner and mode (best effort: this
/// undoes [`Job::become_own`]).
fn give_back(fd: BorrowedFd<'_>, owner: Owner) {
    let _ = rustix::fs::fchown(
        fd,
        Some(rustix::process::Uid::from_raw(owner.uid)),
        Some(rustix::process::Gid::from_raw(owner.gid)),
    );
    let _ = rustix::fs::fchmod(fd, Mode::from_raw_mode(owner.perm));
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
