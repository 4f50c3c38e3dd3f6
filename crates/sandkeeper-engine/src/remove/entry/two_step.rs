//! The two-step removal: [`quarantine()`] moves an entry into the quarantine
//! under a *pending* name and hands out a [`Quarantined`] handle; the
//! caller checks it there, then removes or restores it.
//! [`pending_leftovers`] hands out what earlier, interrupted reaps left
//! pending, the same way.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;
use rustix::io::Errno;

use super::{check_name, give_back, io_error, Job, MAX_TRIES};
use crate::error::{Error, ErrorKind, Result};
use crate::fs_at::{self, Fence, FileId, Meta, Opened};
use crate::remove::quarantine_dir::{self, Owner, Quarantine};
use crate::remove::report::{RemovalReport, Tally};
use crate::remove::RemoveOptions;
use crate::remove::{ATIME, NO_STATX};

mod checked_walk;

pub(crate) use checked_walk::{Limits, Listed, Listing, Seen};

/// See [`crate::remove::quarantine_entry`].
pub(crate) fn quarantine<'a>(
    parent: BorrowedFd<'a>,
    name: &'a OsStr,
    display: &'a Path,
    options: &RemoveOptions,
) -> Result<Quarantined<'a>> {
    check_name(parent, name, display)?;
    let job = Job::new(parent, name, display, options)?;
    quarantine_job(job, None)
}

/// Moves many entries of one parent into its quarantine, one after
/// another, as [`quarantine_entry`](crate::remove::quarantine_entry) moves
/// one, but with the parent inspected once and the quarantine opened,
/// checked (ours, 0700, on the parent's filesystem, still linked) and
/// locked once for the batch instead of once per entry: every handle of
/// the batch shares its descriptor and its `LOCK_SH`, and the last one out
/// (or the batch, when it is dropped last) removes it if it is empty.
///
/// Every check *of the entry* is made per entry, exactly as by
/// [`quarantine_entry`](crate::remove::quarantine_entry): its name, its
/// identity when [expected](RemoveOptions::expect) (opened without
/// following a symlink, on the parent's filesystem), the
/// `RENAME_NOREPLACE` move and the identity of what arrived. When the
/// shared quarantine vanishes under the batch (someone not taking part in
/// its locking removed it), the next move opens one afresh, and the batch
/// goes on with that one.
///
/// ```
/// use std::os::fd::AsFd;
/// use sandkeeper_engine::remove::{QuarantineBatch, RemoveOptions};
/// # let sandbox = sandkeeper_engine::Sandbox::new()?;
/// # for name in ["a", "b"] { std::fs::create_dir(sandbox.path().join(name))?; }
/// let parent = std::fs::File::open(sandbox.path())?;
/// let mut batch = QuarantineBatch::new(parent.as_fd())?;
/// let a = batch.quarantine_entry("a".as_ref(), &RemoveOptions::new())?;
/// let b = batch.quarantine_entry("b".as_ref(), &RemoveOptions::new())?;
/// assert_eq!(a.path_in_parent().parent(), b.path_in_parent().parent(), "one quarantine");
/// assert!(a.remove()?.is_complete());
/// b.restore();
/// drop(batch);
/// assert!(sandbox.path().join("b").is_dir());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct QuarantineBatch<'a> {
    parent: BorrowedFd<'a>,
    parent_st: Meta,
    /// Opened by the first move, shared by the rest.
    q: Option<Quarantine>,
}

impl std::fmt::Debug for QuarantineBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuarantineBatch")
            .field("quarantine", &self.q.as_ref().map(Quarantine::name))
            .finish_non_exhaustive()
    }
}

impl<'a> QuarantineBatch<'a> {
    /// A batch of moves into the quarantine of `parent` (inspected here,
    /// once; the quarantine is opened by the first move).
    ///
    /// # Errors
    ///
    /// When `parent` cannot be inspected (the error's path is `.`: the
    /// caller knows the parent's).
    pub fn new(parent: BorrowedFd<'a>) -> Result<QuarantineBatch<'a>> {
        // Once per batch, not per name made (see `remember_pid`).
        quarantine_dir::remember_pid();
        let parent_st = fs_at::fstat_dir(parent, NO_STATX)
            .map_err(|e| io_error("cannot inspect the parent directory", e, Path::new(".")))?;
        Ok(QuarantineBatch {
            parent,
            parent_st,
            q: None,
        })
    }

    /// Moves the entry `name` into the batch's quarantine: see
    /// [`quarantine_entry`](crate::remove::quarantine_entry), whose checks
    /// and errors are the same.
    ///
    /// # Errors
    ///
    /// As [`quarantine_entry`](crate::remove::quarantine_entry).
    pub fn quarantine_entry(
        &mut self,
        name: &'a OsStr,
        options: &RemoveOptions,
    ) -> Result<Quarantined<'a>> {
        self.quarantine_opened(name, None, options)
    }

    /// As [`quarantine_entry`](Self::quarantine_entry), for a directory
    /// the caller claimed ([`Claim::into_dir`](crate::lease::Claim): its
    /// locked descriptor and `statx`): the move uses that descriptor
    /// instead of opening the name again, after the same checks on it (a
    /// directory on the parent's mount, the [expected](RemoveOptions::expect)
    /// inode), and checks that what arrives in the quarantine is it. The
    /// handle keeps the descriptor, and so the claim's lock, until the
    /// entry is removed or put back.
    ///
    /// # Errors
    ///
    /// As [`quarantine_entry`](Self::quarantine_entry).
    pub(crate) fn quarantine_claimed(
        &mut self,
        name: &'a OsStr,
        claimed: (OwnedFd, Meta),
        options: &RemoveOptions,
    ) -> Result<Quarantined<'a>> {
        self.quarantine_opened(name, Some(claimed), options)
    }

    fn quarantine_opened(
        &mut self,
        name: &'a OsStr,
        claimed: Option<(OwnedFd, Meta)>,
        options: &RemoveOptions,
    ) -> Result<Quarantined<'a>> {
        let display = Path::new(name);
        check_name(self.parent, name, display)?;
        let mut job = Job::with_parent(self.parent, &self.parent_st, name, display, options)?;
        job.shared = self.q.as_ref().map(Quarantine::share);
        let moved = quarantine_job(job, claimed)?;
        // Go on with the quarantine this move used (a fresh one when the
        // shared one vanished).
        if let Some(q) = &moved.q {
            if !self.q.as_ref().is_some_and(|mine| mine.same_as(q)) {
                if let Some(old) = self.q.replace(q.share()) {
                    old.close(self.parent);
                }
            }
        }
        Ok(moved)
    }
}

impl Drop for QuarantineBatch<'_> {
    fn drop(&mut self) {
        if let Some(q) = self.q.take() {
            q.close(self.parent);
        }
    }
}

/// Moves the entry of `job` into the quarantine (see [`quarantine`]);
/// `claimed`: the entry's descriptor and `statx` as its claim opened it,
/// used instead of opening it again ([`Job::take_over`]).
fn quarantine_job(
    mut job: Job<'_>,
    mut claimed: Option<(OwnedFd, Meta)>,
) -> Result<Quarantined<'_>> {
    for _ in 0..MAX_TRIES {
        let opened = match claimed.take() {
            Some((fd, st)) => Some(job.take_over(fd, st)?),
            None => job.open_one()?,
        };
        if let Some((fd, st)) = opened {
            if job.expect.is_some_and(|want| want != st.id) {
                return Err(job.mismatch());
            }
            let pending = Quarantine::pending_name(job.name.as_bytes());
            let (q, unique, own) =
                match job.quarantine_and_move(st.id, Some((fd.as_fd(), st.perm)), &pending) {
                    Ok((q, unique)) => (Some(q), unique, None),
                    Err(e) if job.no_space => {
                        let (unique, owner) = job.become_own(fd.as_fd(), st, e)?;
                        (None, unique, Some(owner))
                    }
                    Err(e) => return Err(e),
                };
            return Ok(Quarantined {
                id: st.id,
                dir: Some((fd, st)),
                original: Some(job.name.clone()),
                job,
                q,
                own,
                unique,
                condemned: false,
                left_by: LeftBy::ThisCaller,
            });
        }
        // Not a directory: identity, then the move.
        let st = match fs_at::stat(job.parent, &job.name, NO_STATX) {
            Ok(st) => st,
            Err(errno) => return Err(io_error("cannot inspect", errno, job.display)),
        };
        if st.is_dir() {
            continue;
        }
        if job.expect.is_some_and(|want| want != st.id) {
            return Err(job.mismatch());
        }
        let pending = Quarantine::pending_name(job.name.as_bytes());
        let (q, unique) = job.quarantine_and_move(st.id, None, &pending)?;
        return Ok(Quarantined {
            id: st.id,
            dir: None,
            original: Some(job.name.clone()),
            job,
            q: Some(q),
            own: None,
            unique,
            condemned: false,
            left_by: LeftBy::ThisCaller,
        });
    }
    Err(job.flapping())
}

/// Renames `at` in the quarantine `q` to a fresh returning name for
/// `original` (`RENAME_NOREPLACE`, another random part on `EEXIST`), and
/// returns it.
fn returning(
    q: BorrowedFd<'_>,
    at: &CStr,
    original: &[u8],
) -> std::result::Result<CString, NotRestored> {
    let mut last = Errno::EXIST;
    for _ in 0..MAX_TRIES {
        let returning = Quarantine::returning_name(original);
        match fs_at::rename_noreplace(q, at, q, &returning) {
            Ok(()) => return Ok(returning),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(errno) => {
                last = errno;
                break;
            }
        }
    }
    Err(NotRestored::Failed {
        step: "mark as returning",
        errno: last,
    })
}

/// After the exchange: the newcomer is `at` in the quarantine `q`. Moves
/// it out into `parent` beside the entry, under a taken name
/// ([`quarantine_dir::move_beside`]), and says where it is; if that fails it
/// stays under its returning name, which the next removal alone in the
/// quarantine moves out.
fn move_newcomer_out(q: &Quarantine, at: &CStr, parent: BorrowedFd<'_>, name: &CStr) -> Restore {
    let st = fs_at::stat(q.fd(), at, NO_STATX).ok();
    let newcomer = match quarantine_dir::move_beside(q.fd(), at, parent, name.to_bytes()) {
        Ok(taken) => PathBuf::from(OsStr::from_bytes(taken.as_bytes())),
        Err(_) => PathBuf::from(OsStr::from_bytes(q.name().to_bytes()))
            .join(OsStr::from_bytes(at.to_bytes())),
    };
    Restore::Exchanged {
        newcomer,
        kind: st.as_ref().map(kind_of),
        uid: st.map(|st| st.uid),
    }
}

/// What an inode is, in words.
fn kind_of(st: &Meta) -> &'static str {
    use rustix::fs::FileType;
    match st.kind {
        FileType::Directory => "directory",
        FileType::RegularFile => "file",
        FileType::Symlink => "symlink",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice | FileType::BlockDevice => "device",
        FileType::Unknown => "entry",
    }
}

/// See [`crate::remove::pending_leftovers`].
pub(crate) fn pending_leftovers<'a>(
    parent: BorrowedFd<'a>,
    display: &'a Path,
    options: &RemoveOptions,
) -> Result<Vec<Quarantined<'a>>> {
    let job = Job::new(parent, OsStr::new("."), display, options)?;
    let euid = rustix::process::geteuid().as_raw();
    let names = quarantine_dir::candidates(parent)
        .map_err(|errno| io_error("cannot list the directory", errno, display))?;
    let mut out = Vec::new();
    for qname in names {
        let mut leftovers = Tally::default();
        let open = |leftovers: &mut Tally| {
            Quarantine::open_existing(parent, &qname, euid, &job.fence, &job.plan, leftovers)
                .map_err(|e| job.unusable(e, &qname))
        };
        let Some(mut first) = open(&mut leftovers)? else {
            continue;
        };
        let names = first.take_pending();
        let mut q = Some(first);
        for unique in names {
            // Each handle keeps a share of the quarantine (`LOCK_SH`), so no
            // other remover takes these over while they are checked.
            let share = match q.take() {
                Some(q) => q,
                None => match open(&mut leftovers)? {
                    Some(q) => q,
                    None => break,
                },
            };
            let original =
                quarantine_dir::original_of(unique.as_bytes()).and_then(|n| CString::new(n).ok());
            let (id, dir) =
                match fs_at::open_dir_stat(share.fd(), &unique, ATIME, &job.fence, NO_STATX) {
                    Ok(Opened::Dir(fd, st)) => (st.id, Some((fd, st))),
                    Ok(Opened::Fenced) => {
                        // A mount on it: leave it pending, it is not ours to judge.
                        q = Some(share);
                        continue;
                    }
                    Err(Errno::NOTDIR | Errno::LOOP) => {
                        match fs_at::stat(share.fd(), &unique, NO_STATX) {
                            Ok(st) if !st.is_dir() => (st.id, None),
                            _ => {
                                q = Some(share);
                                continue;
                            }
                        }
                    }
                    Err(_) => {
                        q = Some(share);
                        continue;
                    }
                };
            let mut entry_job = Job::new(parent, OsStr::new("."), display, options)?;
            if let Some(name) = &original {
                entry_job.name = name.clone();
            }
            let left_by = match unique.as_bytes().starts_with(quarantine_dir::KEPT) {
                true => LeftBy::NotPutBack,
                false => LeftBy::InterruptedReap,
            };
            out.push(Quarantined {
                id,
                dir,
                original,
                job: entry_job,
                q: Some(share),
                own: None,
                unique,
                condemned: false,
                left_by,
            });
        }
        if let Some(q) = q {
            q.close(parent);
        }
    }
    out.extend(own_pending_leftovers(parent, display, options, &job.fence)?);
    Ok(out)
}

/// Directories a killed reaper left as their own quarantine
/// (`.sandkeeper-pending-…` in the parent: see
/// [`quarantine_dir::own_pending_name`]), as handles to check. Only ours (owner
/// and mode), and only those whose lock no live reaper holds.
fn own_pending_leftovers<'a>(
    parent: BorrowedFd<'a>,
    display: &'a Path,
    options: &RemoveOptions,
    fence: &Fence,
) -> Result<Vec<Quarantined<'a>>> {
    let euid = rustix::process::geteuid().as_raw();
    let names = quarantine_dir::list(parent)
        .map_err(|errno| io_error("cannot list the directory", errno, display))?;
    let mut out = Vec::new();
    for unique in names {
        let Some((owner, original)) = quarantine_dir::parse_own_pending(unique.as_bytes()) else {
            continue;
        };
        let (fd, st) = match fs_at::open_dir_stat(parent, &unique, ATIME, fence, NO_STATX) {
            Ok(Opened::Dir(fd, st)) if st.uid == euid && st.perm == 0o700 => (fd, st),
            _ => continue,
        };
        // A live reaper holds the entry's lock from its claim to its end.
        if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let _ = rustix::fs::flock(&fd, FlockOperation::Unlock);
        let original = original.and_then(|n| CString::new(n).ok());
        let mut job = Job::new(parent, OsStr::new("."), display, options)?;
        if let Some(name) = &original {
            job.name = name.clone();
        }
        out.push(Quarantined {
            id: st.id,
            dir: Some((fd, st)),
            original,
            job,
            q: None,
            own: Some(owner),
            unique,
            condemned: false,
            // Not told apart: a directory left as its own quarantine keeps
            // its one name whether a reaper was killed or could not give
            // its name back.
            left_by: LeftBy::InterruptedReap,
        });
    }
    Ok(out)
}

/// An entry moved into its parent's quarantine under a *pending* name and
/// not yet cleared: no new path lookup reaches it (the quarantine is the
/// remover's own 0700 directory), processes that had it open still can.
///
/// The caller checks it (against a `/proc` pass taken after the move:
/// [`dir`](Self::dir) and [`name_in_quarantine`](Self::name_in_quarantine)
/// reach it through descriptors), then either [`remove`](Self::remove)s
/// it or [`restore`](Self::restore)s it. Dropped without either, it stays
/// pending in the quarantine, where nothing deletes it without a fresh
/// check ([`pending_leftovers`](crate::remove::pending_leftovers)).
#[must_use = "an entry left pending stays in the quarantine until a check clears it"]
pub struct Quarantined<'a> {
    job: Job<'a>,
    q: Option<Quarantine>,
    /// Set when the entry is its own quarantine (renamed to `unique` in the
    /// parent, owned by us, 0700): who owned it and its mode before.
    own: Option<Owner>,
    unique: CString,
    /// Whether `unique` is a condemned name already ([`Quarantined::condemn`]).
    condemned: bool,
    /// Its name in the parent, when known.
    original: Option<CString>,
    id: FileId,
    dir: Option<(OwnedFd, Meta)>,
    left_by: LeftBy,
}

/// Who left a [`Quarantined`] entry pending, and why it is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeftBy {
    /// Moved in by this caller ([`quarantine_entry`](crate::remove::quarantine_entry),
    /// [`QuarantineBatch`]).
    ThisCaller,
    /// A leftover of a remover that stopped (was killed) between moving it
    /// in and checking it ([`pending_leftovers`](crate::remove::pending_leftovers)).
    InterruptedReap,
    /// A leftover that an earlier check found in use and whose name could
    /// not be given back ([`Restore::KeptInQuarantine`]): kept pending
    /// since, on purpose, until a check clears it or its name is free.
    NotPutBack,
}

/// What [`Quarantined::restore`] did. [`describe`](Restore::describe)
/// says it in words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Restore {
    /// Back under its own name.
    Restored,
    /// Its name had been taken meanwhile (another user's directory, file or
    /// symlink, or a job's `mkdir -p` re-creating it): the entry got its
    /// name back all the same, atomically (`renameat2(RENAME_EXCHANGE)`
    /// with the newcomer, which is never followed, opened or deleted), and
    /// the newcomer was moved out beside it, unchanged.
    #[non_exhaustive]
    Exchanged {
        /// Where the newcomer is now, relative to the parent:
        /// `<name>.taken-during-reap-<8 hex>` (the name cut short to fit),
        /// or, when that move failed, still in the quarantine under a
        /// `returning-` name, from where the next removal alone in the
        /// quarantine moves it out so
        /// ([`RemovalReport::leftovers_returned`](crate::remove::RemovalReport::leftovers_returned)).
        newcomer: PathBuf,
        /// What the newcomer is, in words (`directory`, `file`, `symlink`,
        /// `FIFO`, `socket`, `device`), as `lstat` saw it after the
        /// exchange; `None` when it could not be inspected.
        kind: Option<&'static str>,
        /// Who owns the newcomer (`None` when it could not be inspected).
        uid: Option<u32>,
    },
    /// Its name could not be given back: it stays pending in the
    /// quarantine, is never deleted without a fresh check (every reap
    /// checks it again, [`LeftBy::NotPutBack`]), and goes home when its
    /// name is free again.
    #[non_exhaustive]
    KeptInQuarantine {
        /// Where it is, relative to the parent
        /// (`.sandkeeper-trash-<euid>-<random>/pending-kept-…`, or, for a
        /// directory that is its own quarantine, its
        /// `.sandkeeper-pending-…` name in the parent).
        at: PathBuf,
        /// Why it could not be given its name back.
        why: NotRestored,
    },
}

/// Why a [`Quarantined`] entry could not be given its name back
/// ([`Restore::KeptInQuarantine`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotRestored {
    /// Its original name is not known: a leftover whose name was too long
    /// to be carried in its pending name.
    NameUnknown,
    /// A step failed (`renameat2`): which, and the error. An exchange fails
    /// with `EINVAL` on a filesystem without `RENAME_EXCHANGE`, `EBUSY`
    /// when the newcomer is a mount point, `EPERM`/`EACCES` when the caller
    /// may not move the newcomer (a reaper that is not root, in a sticky
    /// directory).
    Failed {
        /// What was being done: `rename back`, `mark as returning`,
        /// `exchange with the newcomer`.
        step: &'static str,
        /// The error.
        errno: Errno,
    },
    /// Its name kept being freed and taken again while it was being put
    /// back.
    KeptChanging,
}

impl std::fmt::Display for NotRestored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotRestored::NameUnknown => f.write_str(
                "its name is not known (too long to be carried by an interrupted reap's pending name)",
            ),
            NotRestored::Failed { step, errno } => write!(
                f,
                "its name was taken meanwhile, and it could not be given back ({step}: {})",
                std::io::Error::from(*errno)
            ),
            NotRestored::KeptChanging => f.write_str(
                "its name kept being freed and taken again while it was being put back",
            ),
        }
    }
}

impl Restore {
    /// What happened, in words, for a report about the entry (`parent`:
    /// the parent's path, which the paths are joined to). For example,
    /// for [`Exchanged`](Restore::Exchanged): `its name was taken meanwhile
    /// by a directory of uid 65534; it got its name back, and the
    /// newcomer is now at /tmp/app-1.taken-during-reap-0a1b2c3d`.
    pub fn describe(&self, parent: &Path) -> String {
        match self {
            Restore::Restored => "put back under its name".to_owned(),
            Restore::Exchanged {
                newcomer,
                kind,
                uid,
            } => {
                let by = match (kind, uid) {
                    (Some(kind), Some(uid)) => format!(" by a {kind} of uid {uid}"),
                    _ => String::new(),
                };
                format!(
                    "its name was taken meanwhile{by}; it got its name back, and the newcomer \
                     is now at {}",
                    parent.join(newcomer).display()
                )
            }
            Restore::KeptInQuarantine { at, why } => format!(
                "{why}: it stays in the quarantine at {}, checked again by every reap and \
                 removed only once nothing uses it",
                parent.join(at).display()
            ),
        }
    }
}

impl std::fmt::Debug for Quarantined<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quarantined")
            .field("original", &self.original)
            .field("in_quarantine", &self.path_in_parent())
            .field("identity", &(self.id.dev, self.id.ino))
            .finish_non_exhaustive()
    }
}

impl Quarantined<'_> {
    /// The quarantine directory (open), which holds the entry under
    /// [`name_in_quarantine`](Self::name_in_quarantine).
    pub fn dir(&self) -> BorrowedFd<'_> {
        match &self.q {
            Some(q) => q.fd(),
            None => self.job.parent,
        }
    }

    /// The entry's name in the quarantine (`pending-…`).
    pub fn name_in_quarantine(&self) -> &OsStr {
        OsStr::from_bytes(self.unique.as_bytes())
    }

    /// The entry's path relative to the parent
    /// (`.sandkeeper-trash-<euid>-<random>/pending-…`): join it to the parent's path to ask
    /// path-based questions (mounts, sockets) about where it is now.
    pub fn path_in_parent(&self) -> PathBuf {
        let q = self.q.as_ref().map_or(&b""[..], |q| q.name().to_bytes());
        PathBuf::from(OsStr::from_bytes(q)).join(self.name_in_quarantine())
    }

    /// Its name in the parent before it was moved, when known (a leftover
    /// of a killed reaper carries it only when it was short enough).
    pub fn original_name(&self) -> Option<&OsStr> {
        self.original
            .as_deref()
            .map(|n| OsStr::from_bytes(n.to_bytes()))
    }

    /// Device and inode of the entry (checked when it arrived).
    pub fn identity(&self) -> (u64, u64) {
        (self.id.dev, self.id.ino)
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.dir.is_some()
    }

    /// Who left it pending, and why: a fresh move, an interrupted reap's
    /// leftover, or one an earlier check kept because its name could not be
    /// given back.
    pub fn left_by(&self) -> LeftBy {
        self.left_by
    }

    /// Puts it back under its own name (`renameat2(RENAME_NOREPLACE)`):
    /// for an entry found in use, which must never be lost.
    ///
    /// If that name was taken meanwhile, the entry gets it back all the
    /// same ([`Restore::Exchanged`]): first renamed inside the quarantine
    /// from pending to *returning* (so that, should the caller be killed
    /// from here on, whatever is under that name is only ever moved back
    /// out, never checked nor deleted: see the quarantine's names in
    /// `docs/remove.md`), then swapped with the newcomer
    /// (`renameat2(RENAME_EXCHANGE)`: atomic, follows no symlink), and the
    /// newcomer, which no rule selected, moved out beside it as
    /// `<name>.taken-during-reap-<8 hex>`, as it was (owner, mode,
    /// content). When its name is not known or the exchange fails, it is
    /// **not** deleted: it stays pending in the quarantine
    /// ([`Restore::KeptInQuarantine`], saying why).
    pub fn restore(mut self) -> Restore {
        let Some(name) = self.original.clone() else {
            let at = self.path_in_parent();
            let kept = NotRestored::NameUnknown;
            if let Some(q) = self.q.take() {
                // Marked, so that the next reap says why it is there.
                let (at, _) = self.keep_pending(&q, self.unique.clone(), None);
                drop(q);
                return Restore::KeptInQuarantine { at, why: kept };
            }
            return Restore::KeptInQuarantine { at, why: kept };
        };
        if let Some(owner) = self.own {
            return self.restore_own(&name, owner);
        }
        let Some(q) = self.q.take() else {
            return Restore::KeptInQuarantine {
                at: self.path_in_parent(),
                why: NotRestored::KeptChanging,
            };
        };
        let mut at = self.unique.clone();
        let mut why = NotRestored::KeptChanging;
        for _ in 0..MAX_TRIES {
            match rename_back(q.fd(), &at, self.job.parent, &name) {
                Ok(true) => {
                    q.close(self.job.parent);
                    return Restore::Restored;
                }
                Ok(false) => {}
                Err(not) => {
                    why = not;
                    break;
                }
            }
            // Taken: first the returning state, then the exchange.
            if !at.as_bytes().starts_with(quarantine_dir::RETURNING) {
                match returning(q.fd(), &at, name.as_bytes()) {
                    Ok(returning) => at = returning,
                    Err(not) => {
                        why = not;
                        break;
                    }
                }
            }
            match fs_at::rename_exchange(q.fd(), &at, self.job.parent, &name) {
                Ok(()) => {
                    let newcomer = move_newcomer_out(&q, &at, self.job.parent, &name);
                    // The quarantine may be empty now: the last one out
                    // removes it.
                    q.close(self.job.parent);
                    return newcomer;
                }
                // The name was freed again meanwhile: the plain rename.
                Err(Errno::NOENT) => continue,
                Err(errno) => {
                    why = NotRestored::Failed {
                        step: "exchange with the newcomer",
                        errno,
                    };
                    break;
                }
            }
        }
        let (at, _) = self.keep_pending(&q, at, Some(&name));
        // Still pending: the quarantine is not empty, so it stays.
        drop(q);
        Restore::KeptInQuarantine { at, why }
    }

    /// Leaves the entry (`at` in the quarantine `q`) pending, renamed to a
    /// `pending-kept-…` name that says why (best effort: it stays as it is
    /// when that fails). Returns where it is, relative to the parent, and
    /// its name in the quarantine.
    fn keep_pending(
        &self,
        q: &Quarantine,
        at: CString,
        original: Option<&CStr>,
    ) -> (PathBuf, CString) {
        let mut now = at;
        if !now.as_bytes().starts_with(quarantine_dir::KEPT) {
            let kept = Quarantine::kept_name(original.map(CStr::to_bytes));
            if fs_at::rename_noreplace(q.fd(), &now, q.fd(), &kept).is_ok() {
                now = kept;
            }
        }
        let path = PathBuf::from(OsStr::from_bytes(q.name().to_bytes()))
            .join(OsStr::from_bytes(now.as_bytes()));
        (path, now)
    }

    /// [`restore`](Self::restore) for a directory that is its own
    /// quarantine (renamed to `self.unique` in the parent, made ours, mode
    /// 0700): renamed back, then its owner and mode given back.
    ///
    /// When its name was taken meanwhile, it gets it back by an exchange
    /// within the parent, as in the quarantine, with its owner and mode
    /// given back first (so that a caller killed half-way leaves no entry
    /// the remover owns under the job's name). There is no returning state
    /// here: the name the newcomer lands on is the entry's
    /// `.sandkeeper-pending-…` name in the parent, which is trusted as a
    /// pending leftover only when it is a directory of the remover's with
    /// mode 0700 whose lock is free ([`own_pending_leftovers`]); a
    /// newcomer of another user's (the attack) is never that, so a reaper
    /// killed between the exchange and the move-out leaves it there under
    /// that name, as an ordinary entry of the parent, never checked nor
    /// deleted as a leftover. (Only a 0700 directory the remover's own uid
    /// made under the job's name within that window would be taken for
    /// one, and checked like any leftover before removal.) Failing the
    /// exchange, it is made the remover's again and stays pending.
    fn restore_own(self, name: &CStr, owner: Owner) -> Restore {
        let parent = self.job.parent;
        let mut why = NotRestored::KeptChanging;
        for _ in 0..MAX_TRIES {
            match rename_back(parent, &self.unique, parent, name) {
                Ok(true) => {
                    if let Some((fd, _)) = &self.dir {
                        give_back(fd.as_fd(), owner);
                    }
                    return Restore::Restored;
                }
                Ok(false) => {}
                Err(not) => {
                    why = not;
                    break;
                }
            }
            if let Some((fd, _)) = &self.dir {
                give_back(fd.as_fd(), owner);
            }
            match fs_at::rename_exchange(parent, &self.unique, parent, name) {
                Ok(()) => {
                    let st = fs_at::stat(parent, &self.unique, NO_STATX).ok();
                    let newcomer = match quarantine_dir::move_beside(
                        parent,
                        &self.unique,
                        parent,
                        name.to_bytes(),
                    ) {
                        Ok(taken) => taken,
                        Err(_) => self.unique.clone(),
                    };
                    return Restore::Exchanged {
                        newcomer: PathBuf::from(OsStr::from_bytes(newcomer.as_bytes())),
                        kind: st.as_ref().map(kind_of),
                        uid: st.map(|st| st.uid),
                    };
                }
                Err(errno) => {
                    if let Some((fd, _)) = &self.dir {
                        // Private again until a check clears it.
                        let _ = rustix::fs::fchown(
                            fd,
                            Some(rustix::process::geteuid()),
                            Some(rustix::process::getegid()),
                        )
                        .and_then(|()| rustix::fs::fchmod(fd, rustix::fs::Mode::RWXU));
                    }
                    if errno == Errno::NOENT {
                        continue;
                    }
                    why = NotRestored::Failed {
                        step: "exchange with the newcomer",
                        errno,
                    };
                    break;
                }
            }
        }
        Restore::KeptInQuarantine {
            at: self.path_in_parent(),
            why,
        }
    }

    /// Renames it from its pending name to a condemned one inside the
    /// quarantine (atomic: a reaper killed from here on leaves it to be
    /// finished, never put back), without deleting anything yet: the
    /// reaper's verdict, given as soon as the check is done, while the
    /// deletion waits for a worker. [`remove`](Self::remove) then deletes
    /// it. An entry that is its own quarantine (a full filesystem) has no
    /// other name to take: it is already where no one else can look in.
    ///
    /// # Errors
    ///
    /// When the rename fails: it stays pending, and nothing was removed.
    pub(crate) fn condemn(&mut self) -> Result<()> {
        if self.condemned || self.own.is_some() {
            return Ok(());
        }
        let Some(q) = &self.q else {
            return Err(
                Error::new(ErrorKind::Removal, "is no longer in the quarantine")
                    .at(self.job.display),
            );
        };
        condemn_in(q.fd(), &mut self.unique).map_err(|errno| {
            io_error(
                "cannot mark as condemned in the quarantine; left pending there",
                errno,
                self.job.display,
            )
        })?;
        self.condemned = true;
        Ok(())
    }

    /// Removes it: first renamed from its pending name to a condemned one
    /// inside the quarantine (atomic: a reaper killed after this point
    /// leaves it to be finished, one killed before leaves it pending), then
    /// emptied and deleted as [`remove_entry`](crate::remove::remove_entry) does.
    /// What cannot be removed is put back under its own name if free.
    ///
    /// # Errors
    ///
    /// When it cannot be renamed to its condemned name (then nothing was
    /// removed and it stays pending).
    pub fn remove(mut self) -> Result<RemovalReport> {
        if let Some(owner) = self.own {
            // Its own quarantine: already where no one else can look in.
            let Some((fd, st)) = self.dir.take() else {
                return Err(
                    Error::new(ErrorKind::Removal, "is not a directory").at(self.job.display)
                );
            };
            return Ok(self.job.delete_own(&self.unique, fd, st, owner));
        }
        let Some(q) = self.q.take() else {
            return Err(
                Error::new(ErrorKind::Removal, "is no longer in the quarantine")
                    .at(self.job.display),
            );
        };
        if !self.condemned {
            if let Err(errno) = condemn_in(q.fd(), &mut self.unique) {
                drop(q);
                return Err(io_error(
                    "cannot mark as condemned in the quarantine; left pending there",
                    errno,
                    self.job.display,
                ));
            }
        }
        let condemned = std::mem::take(&mut self.unique);
        let id = self.id;
        match self.dir.take() {
            Some((fd, st)) => self.job.delete_dir(q, condemned, fd, st),
            None => {
                let freed = match fs_at::stat(q.fd(), &condemned, NO_STATX) {
                    Ok(st) if st.id == id && st.nlink <= 1 => st.disk,
                    _ => 0,
                };
                let result = fs_at::unlink(q.fd(), &condemned).map_err(|errno| {
                    self.job.put_back(&q, &condemned);
                    io_error("cannot unlink", errno, self.job.display)
                });
                q.close(self.job.parent);
                result?;
                let mut tally = Tally::default();
                tally.counts.files = 1;
                tally.counts.bytes = freed;
                Ok(self.job.report(tally, None))
            }
        }
    }
}

/// One try at putting an entry back under its name: `at` in `dir` renamed
/// to `name` in `parent` with `RENAME_NOREPLACE`. `Ok(true)` when it is
/// back, `Ok(false)` when the name is taken (the caller exchanges).
fn rename_back(
    dir: BorrowedFd<'_>,
    at: &CStr,
    parent: BorrowedFd<'_>,
    name: &CStr,
) -> std::result::Result<bool, NotRestored> {
    match fs_at::rename_noreplace(dir, at, parent, name) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) => Ok(false),
        Err(errno) => Err(NotRestored::Failed {
            step: "rename back",
            errno,
        }),
    }
}

/// Renames `name` (in the quarantine `q`) to a fresh condemned name, which
/// `name` then holds.
pub(crate) fn condemn_in(q: BorrowedFd<'_>, name: &mut CString) -> std::result::Result<(), Errno> {
    let condemned = Quarantine::condemned_name();
    fs_at::rename_noreplace(q, name, q, &condemned)?;
    *name = condemned;
    Ok(())
}
