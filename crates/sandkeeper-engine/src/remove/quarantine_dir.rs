//! The quarantine: a private directory beside the entries, where an entry
//! is moved before it is emptied.
//!
//! `.sandkeeper-trash-<euid>-<16 random hex digits>` (mode 0700, owned by
//! the remover, in the parent, so on the same filesystem). Moving an entry
//! there makes it disappear from the parent at once, gives it a name nobody
//! else can swap, and means a half-removed tree is never mistaken for a
//! live one.
//!
//! # No name can be taken first
//!
//! A fresh quarantine is made with `mkdirat` under a random name; `EEXIST`
//! (someone made that name, or anything else there) just means another
//! random name. It is found again — by later removals of this process
//! (which remember the name per parent), by later runs, by concurrent
//! removers — only by listing the parent and opening each name of that
//! form (and the fixed names of older versions) with `O_NOFOLLOW`,
//! trusting only a directory that `fstat` on the opened descriptor shows
//! owned by the effective uid with mode 0700. Others' look-alikes (their
//! directories, symlinks, files) are never used and are ordinary entries
//! of the parent ([`crate::root::is_own_dir`] decides the same way). So a
//! user who squats every fixed name changes nothing.
//!
//! A removal uses an existing quarantine of the caller's when there is one
//! and makes one only when there is none, so on a filesystem without a
//! free inode or block (`ENOSPC`, `EDQUOT`) any existing one still serves
//! (see `remove::entry` for the case where there is none).
//!
//! # Concurrent removers
//!
//! Concurrent removers in one parent usually share one quarantine and
//! coordinate with `flock` on it: each holds `LOCK_SH` while its entry is
//! inside. A remover that gets `LOCK_EX` is alone, so whatever is in the
//! quarantine was left by a remover that died: it finishes that first. The
//! last one out (again `LOCK_EX`) removes the empty quarantine; a remover
//! that opened it just before finds it unlinked (`st_nlink == 0`) once it
//! has its lock, and moves on. Two removers that both found none may each
//! make one: every quarantine of the caller's in a parent is finished and
//! removed alike ([`finish_quarantine`](super::finish_quarantine)).
//!
//! # Names inside
//!
//! Every entry in the quarantine is in one of three states, told by its
//! name:
//!
//! - `condemned-<unique>`: its remover decided to delete it ([`remove_entry`]
//!   moves entries straight in under such a name; a reaper renames a
//!   checked entry from pending to condemned, atomically, before deleting
//!   it). Leftovers in this state are deleted by the next remover that is
//!   alone in the quarantine. Names of older versions (no prefix) count as
//!   condemned: those removers checked before moving.
//! - `pending-<unique>[.<hex of the original name>]`: moved in by a reaper
//!   and not yet checked against a `/proc` pass taken after the move (or
//!   found in use by it and its name taken meanwhile). It is **never
//!   deleted without a fresh check**: a remover alone in the quarantine
//!   leaves it, and lists it (`Quarantine::pending`) for the reaper, which
//!   checks it again ([`pending_leftovers`](super::pending_leftovers)). The
//!   original name is kept in hex when it fits, so an entry found in use can
//!   be put back. One whose check found it in use but whose name could not
//!   be given back (the exchange below failed) is renamed to
//!   `pending-kept-<unique>[.<hex>]`: the same state (older versions read it
//!   as pending too), told apart only so that the next reap can say why it
//!   was there.
//! - `returning-<16 random hex>.<hex of the original name>`: found in use,
//!   and going back to its name, which someone else took meanwhile. The
//!   put-back renames the entry from pending to returning (atomically),
//!   swaps it with the newcomer that has its name (`RENAME_EXCHANGE`: the
//!   entry has its name again, the newcomer is under the returning name),
//!   then moves the newcomer out beside it as
//!   `<name>.taken-during-reap-<8 hex>` ([`taken_name`]). So what is under a
//!   returning name is either the entry (before the exchange) or the
//!   newcomer (after it), and in both cases it is something **no rule
//!   selected or no check cleared**: a returning leftover is never deleted
//!   and never checked; the next remover alone in the quarantine moves it
//!   back out into the parent, under its original name if that is free,
//!   else beside it under the taken form (`Tally::returned`, reported by
//!   [`RemovalReport::leftovers_returned`](super::RemovalReport::leftovers_returned)).
//!
//! Versions before the returning state count every name that is not
//! pending as condemned: one of them finishing a quarantine that holds a
//! returning leftover (a reaper of this version killed within the
//! microseconds between its exchange and its move-out) would delete it.
//!
//! [`remove_entry`]: super::remove_entry

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::{FlockOperation, Mode};
use rustix::io::Errno;

use super::node::Node;
use super::plan::Plan;
use super::report::Tally;
use super::worker::Walker;
use super::{ATIME, NO_STATX};
use crate::fs_at::{self, Fence, FileId, Meta, NoStatx, Opened};

/// The prefix of every quarantine's name in the parent.
pub(crate) const TRASH: &str = ".sandkeeper-trash";

/// How many fresh names are tried when the one made vanished or was taken
/// (`EEXIST`) before giving up.
const MAX_ATTEMPTS: usize = 16;

/// The parents this process used a quarantine in, by identity (device and
/// inode), with the name it used last: removals in a root reuse it while it
/// exists without listing the parent (a batch of a reap shares one).
static LAST_USED: Mutex<Vec<(FileId, CString)>> = Mutex::new(Vec::new());
/// Parents remembered in [`LAST_USED`], at most.
const MAX_REMEMBERED: usize = 64;

/// Distinguishes names made by one process in the same nanosecond.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// This process's id as [`remember_pid`] last read it (0: not yet), for
/// [`Quarantine::unique_name`].
static PID: AtomicU32 = AtomicU32::new(0);

/// Reads this process's id (`getpid`) for the names made from now on.
///
/// A name carries the pid so that people can tell whose it is and two
/// processes' names differ; it is never parsed, and no name's uniqueness
/// rests on it alone (nanoseconds, a sequence number and 64 random bits;
/// every rename into a name is `RENAME_NOREPLACE` anyway). So it is read
/// once per removal or batch of moves (`Job::new`, `QuarantineBatch::new`)
/// rather than once per name: a reap of 5,000 entries made 10,000
/// `getpid` calls. A child forked since the last read (where the library
/// is embedded, such as in Python) reads its own at its first removal;
/// until then, and only for a handle it inherited mid-removal, its names
/// carry its parent's pid and are still unique.
pub(crate) fn remember_pid() {
    PID.store(std::process::id(), Ordering::Relaxed);
}

/// The pid [`remember_pid`] read, reading it now if it never did.
fn pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            remember_pid();
            PID.load(Ordering::Relaxed)
        }
        pid => pid,
    }
}

/// The prefix of an entry not yet cleared by a check (see the module docs).
pub(crate) const PENDING: &[u8] = b"pending-";
/// The prefix of an entry that is to be deleted.
pub(crate) const CONDEMNED: &[u8] = b"condemned-";
/// The prefix of a pending entry a check found in use and whose name could
/// not be given back (still pending: see the module docs).
pub(crate) const KEPT: &[u8] = b"pending-kept-";
/// The prefix of an entry (or of the newcomer it was swapped with) on its
/// way back to the parent: never deleted, never checked (see the module
/// docs).
pub(crate) const RETURNING: &[u8] = b"returning-";
/// What follows the original part of the name a newcomer is moved to when
/// an entry got its name back from it ([`taken_name`]).
pub(crate) const TAKEN: &[u8] = b".taken-during-reap-";
/// The longest name a directory entry may have.
const NAME_MAX: usize = 255;

/// An open, locked quarantine directory.
pub(crate) struct Quarantine {
    /// Shared by the handles of one batch ([`Quarantine::share`]): one
    /// open file description, one `LOCK_SH`, held while any of them lives;
    /// the last one out [closes](Quarantine::close) it.
    fd: Arc<OwnedFd>,
    st: Meta,
    name: CString,
    /// Pending entries left by killed reapers, found when this opener was
    /// alone in the quarantine (empty otherwise).
    pending: Vec<CString>,
}

/// Why no quarantine could be had.
pub(crate) enum Unusable {
    /// No fresh name could be made and kept (every try was taken or
    /// vanished at once).
    Taken,
    /// The filesystem has no free inode or block for a new quarantine
    /// (`ENOSPC`, `EDQUOT`), and this user has none there to reuse.
    NoSpace(Errno),
    /// A system call failed.
    Errno(Errno),
}

/// Whether `name` has the form of a quarantine's name: `.sandkeeper-trash`
/// followed by nothing, `-<uid>` (older versions) or `-<uid>-<hex>`. A name
/// alone proves nothing: only a directory owned by the caller with mode
/// 0700 is one (see [`crate::root::is_own_dir`]).
pub(crate) fn is_quarantine(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(TRASH.as_bytes()) else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    let Some(rest) = rest.strip_prefix(b"-") else {
        return false;
    };
    let (uid, random) = match rest.iter().position(|&b| b == b'-') {
        Some(dash) => (&rest[..dash], Some(&rest[dash + 1..])),
        None => (rest, None),
    };
    !uid.is_empty()
        && uid.iter().all(u8::is_ascii_digit)
        && random.is_none_or(|r| !r.is_empty() && r.iter().all(u8::is_ascii_hexdigit))
}

/// A fresh quarantine name: `.sandkeeper-trash-<euid>-<16 random hex>`.
fn fresh_name(euid: u32) -> CString {
    let name = format!("{TRASH}-{euid}-{:016x}", fastrand::u64(..));
    // Digits, dashes and a fixed prefix: no NUL.
    CString::new(name).unwrap_or_default()
}

/// The names of the quarantines of `parent` that may be the caller's
/// (those of the right form; [`Quarantine::open_existing`] checks the
/// rest on the opened directory).
pub(crate) fn candidates(parent: BorrowedFd<'_>) -> Result<Vec<CString>, Errno> {
    // Kept as the directory is read: a root of a million entries is not
    // copied name by name first.
    let mut names = list_where(parent, is_quarantine)?;
    names.sort();
    Ok(names)
}

fn last_used(parent: FileId) -> Option<CString> {
    let remembered = LAST_USED.lock().unwrap_or_else(PoisonError::into_inner);
    remembered
        .iter()
        .find(|(id, _)| *id == parent)
        .map(|(_, name)| name.clone())
}

fn remember(parent: FileId, name: &CStr) {
    let mut remembered = LAST_USED.lock().unwrap_or_else(PoisonError::into_inner);
    remembered.retain(|(id, _)| *id != parent);
    if remembered.len() >= MAX_REMEMBERED {
        remembered.remove(0);
    }
    remembered.push((parent, name.to_owned()));
}

impl Quarantine {
    /// Opens and locks a quarantine of `parent`, finishing what earlier,
    /// interrupted removals left in it when no other removal is running
    /// there.
    ///
    /// No name can be taken first: the quarantine this process used last
    /// in `parent`, if it is still there and still ours; else any other
    /// of ours (found by listing the parent, trusted by owner and mode
    /// only: an earlier or concurrent run's, whose leftovers are finished
    /// when no one else is in it); else a fresh one under a random name
    /// made with `mkdirat` (another name on `EEXIST`). So a new quarantine
    /// is made only when the caller has none there, and on a full
    /// filesystem any existing one serves.
    pub(crate) fn open(
        parent: BorrowedFd<'_>,
        fence: &Fence,
        plan: &Plan,
        leftovers: &mut Tally,
    ) -> Result<Quarantine, Unusable> {
        let euid = rustix::process::geteuid().as_raw();
        let parent_id = fs_at::fstat_dir(parent, NO_STATX)
            .map_err(Unusable::Errno)?
            .id;
        if let Some(name) = last_used(parent_id) {
            if let Some(q) = Self::open_existing(parent, &name, euid, fence, plan, leftovers)? {
                return Ok(q);
            }
        }
        // An earlier run's quarantine (or a concurrent one's), with
        // whatever it left to finish. A caller that finished the leftovers
        // itself (a reaper, once per root) skips this listing of the
        // parent: done for every entry, it made a reap quadratic in the
        // root's entries, since the last remover out of a quarantine
        // removes it and the remembered one is then gone. On a full
        // filesystem the listing is done anyway, below: it is the only
        // way to get a quarantine there.
        if plan.find_leftovers {
            if let Some(q) = Self::reuse(parent, euid, fence, plan, leftovers)? {
                remember(parent_id, &q.name);
                return Ok(q);
            }
        }
        for _ in 0..MAX_ATTEMPTS {
            let name = fresh_name(euid);
            match rustix::fs::mkdirat(parent, name.as_c_str(), Mode::RWXU) {
                Ok(()) => {}
                // Someone took this name: another one.
                Err(Errno::EXIST) => continue,
                Err(errno @ (Errno::NOSPC | Errno::DQUOT)) => {
                    // One may have appeared since the listing.
                    return match Self::reuse(parent, euid, fence, plan, leftovers)? {
                        Some(q) => {
                            remember(parent_id, &q.name);
                            Ok(q)
                        }
                        None => Err(Unusable::NoSpace(errno)),
                    };
                }
                Err(errno) => return Err(Unusable::Errno(errno)),
            }
            if let Some(q) = Self::open_one(parent, &name, euid, true, fence, plan, leftovers)? {
                remember(parent_id, &q.name);
                return Ok(q);
            }
        }
        Err(Unusable::Taken)
    }

    /// The first of the caller's quarantines in `parent` that can be
    /// opened and locked (finishing their leftovers when alone in them).
    fn reuse(
        parent: BorrowedFd<'_>,
        euid: u32,
        fence: &Fence,
        plan: &Plan,
        leftovers: &mut Tally,
    ) -> Result<Option<Quarantine>, Unusable> {
        for name in candidates(parent).map_err(Unusable::Errno)? {
            if let Some(q) = Self::open_existing(parent, &name, euid, fence, plan, leftovers)? {
                return Ok(Some(q));
            }
        }
        Ok(None)
    }

    /// Opens the existing quarantine `name` of `parent`: `Ok(None)` unless
    /// it is a directory owned by `euid` with mode 0700, on the parent's
    /// filesystem, and still linked once locked.
    pub(crate) fn open_existing(
        parent: BorrowedFd<'_>,
        name: &CStr,
        euid: u32,
        fence: &Fence,
        plan: &Plan,
        leftovers: &mut Tally,
    ) -> Result<Option<Quarantine>, Unusable> {
        Self::open_one(parent, name, euid, false, fence, plan, leftovers)
    }

    /// `Ok(None)`: the name is someone else's, not a directory, not 0700
    /// (unless `fresh`: then made so), or gone. `Ok(Some(q))`: open, with
    /// `LOCK_SH` held.
    fn open_one(
        parent: BorrowedFd<'_>,
        name: &CStr,
        euid: u32,
        fresh: bool,
        fence: &Fence,
        plan: &Plan,
        leftovers: &mut Tally,
    ) -> Result<Option<Quarantine>, Unusable> {
        let (fd, st) = match fs_at::open_dir_stat(parent, name, ATIME, fence, NO_STATX) {
            Ok(Opened::Dir(fd, st)) => (fd, st),
            // Another mount on it, a symlink or a file: not usable.
            Ok(Opened::Fenced) | Err(Errno::NOTDIR | Errno::LOOP) => return Ok(None),
            // Removed as empty meanwhile.
            Err(Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(Unusable::Errno(errno)),
        };
        if st.uid != euid {
            return Ok(None);
        }
        if st.perm != 0o700 {
            // Ours only if we just made it (the umask may have taken bits).
            if !fresh {
                return Ok(None);
            }
            rustix::fs::fchmod(&fd, Mode::RWXU).map_err(Unusable::Errno)?;
        }
        let alone = match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => true,
            Err(Errno::WOULDBLOCK) => {
                rustix::fs::flock(&fd, FlockOperation::LockShared).map_err(Unusable::Errno)?;
                false
            }
            Err(errno) => return Err(Unusable::Errno(errno)),
        };
        let st = fs_at::fstat_dir(fd.as_fd(), NO_STATX).map_err(Unusable::Errno)?;
        if st.nlink == 0 {
            // The last remover out removed it after we opened it.
            return Ok(None);
        }
        let mut quarantine = Quarantine {
            fd: Arc::new(fd),
            st,
            name: name.to_owned(),
            pending: Vec::new(),
        };
        if !alone {
            return Ok(Some(quarantine));
        }
        quarantine.pending = quarantine.finish_leftovers(parent, fence, plan, leftovers);
        // From LOCK_EX to LOCK_SH is not atomic: in between, the last
        // remover out of another removal may have removed it.
        rustix::fs::flock(&quarantine.fd, FlockOperation::LockShared).map_err(Unusable::Errno)?;
        if fs_at::fstat_dir(quarantine.fd.as_fd(), NO_STATX)
            .map_err(Unusable::Errno)?
            .nlink
            == 0
        {
            return Ok(None);
        }
        Ok(Some(quarantine))
    }

    /// Another handle on the same open quarantine (the same descriptor
    /// and `LOCK_SH`), for the next entry of a batch: no reopening, no
    /// re-checking of the quarantine per entry. Carries no pending names.
    pub(crate) fn share(&self) -> Quarantine {
        Quarantine {
            fd: Arc::clone(&self.fd),
            st: self.st,
            name: self.name.clone(),
            pending: Vec::new(),
        }
    }

    /// Whether this is a share of the quarantine `other` is of.
    pub(crate) fn same_as(&self, other: &Quarantine) -> bool {
        Arc::ptr_eq(&self.fd, &other.fd)
    }

    /// The quarantine directory.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What `statx` said of it when it was opened (its device and mount
    /// are those of its descriptor for good).
    pub(crate) fn meta(&self) -> &Meta {
        &self.st
    }

    /// Its name in the parent.
    pub(crate) fn name(&self) -> &CStr {
        &self.name
    }

    /// Pending entries of killed reapers (found when this opener was alone;
    /// empty otherwise). Taking them makes the caller responsible for them.
    pub(crate) fn take_pending(&mut self) -> Vec<CString> {
        std::mem::take(&mut self.pending)
    }

    /// A fresh name for an entry that is to be deleted.
    pub(crate) fn condemned_name() -> CString {
        let mut name = CONDEMNED.to_vec();
        name.extend_from_slice(Self::unique_name().as_bytes());
        CString::new(name).unwrap_or_default()
    }

    /// A fresh name for an entry that is not yet cleared, carrying the
    /// entry's `original` name (hex) when it fits.
    pub(crate) fn pending_name(original: &[u8]) -> CString {
        let mut name = PENDING.to_vec();
        name.extend_from_slice(Self::unique_name().as_bytes());
        push_hex_if_it_fits(&mut name, original);
        // Hex digits, dashes, a dot: no NUL.
        CString::new(name).unwrap_or_default()
    }

    /// A fresh name for a pending entry whose name could not be given back
    /// (`pending-kept-…`, still pending), carrying its `original` name
    /// (hex) when it fits.
    pub(crate) fn kept_name(original: Option<&[u8]>) -> CString {
        let mut name = KEPT.to_vec();
        name.extend_from_slice(Self::unique_name().as_bytes());
        if let Some(original) = original {
            push_hex_if_it_fits(&mut name, original);
        }
        CString::new(name).unwrap_or_default()
    }

    /// A fresh name for an entry on its way back to `original`:
    /// `returning-<16 random hex>.<hex of original>` (the random part is
    /// short, so that every name a pending name carries fits here too),
    /// without the original when it is longer than 114 bytes (then a
    /// returning leftover goes back out as `.sandkeeper-restored-…`).
    pub(crate) fn returning_name(original: &[u8]) -> CString {
        let mut name = RETURNING.to_vec();
        name.extend_from_slice(format!("{:016x}", fastrand::u64(..)).as_bytes());
        push_hex_if_it_fits(&mut name, original);
        // Hex digits, a dash, a dot: no NUL.
        CString::new(name).unwrap_or_default()
    }

    /// A fresh name for an entry in the quarantine.
    pub(crate) fn unique_name() -> CString {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-{nanos:x}-{seq:x}-{:016x}", pid(), fastrand::u64(..));
        // Hex digits and dashes only: no NUL.
        CString::new(name).unwrap_or_default()
    }

    /// Removes the condemned entries of removers that were killed, and
    /// returns the names of their pending ones, which are left alone (they
    /// are removed only after a fresh check). Only called while holding
    /// `LOCK_EX`, so no removal is in progress.
    ///
    /// Returning entries (see the module docs) are moved back out into
    /// `parent` first, never deleted: under their original name if it is
    /// free, else beside it ([`taken_name`]); what cannot be moved stays
    /// for the next one.
    fn finish_leftovers(
        &self,
        parent: BorrowedFd<'_>,
        fence: &Fence,
        plan: &Plan,
        leftovers: &mut Tally,
    ) -> Vec<CString> {
        let names = match list(self.fd.as_fd()) {
            Ok(names) => names,
            Err(_) => return Vec::new(),
        };
        let (pending, others): (Vec<CString>, Vec<CString>) = names
            .into_iter()
            .partition(|n| n.as_bytes().starts_with(PENDING));
        let (returning, condemned): (Vec<CString>, Vec<CString>) = others
            .into_iter()
            .partition(|n| n.as_bytes().starts_with(RETURNING));
        for name in &returning {
            if let Some(now) = return_leftover(self.fd.as_fd(), name, parent) {
                leftovers.returned.push(now);
            }
        }
        if condemned.is_empty() {
            return pending;
        }
        let Ok(fd) = self.fd.try_clone() else {
            return pending;
        };
        let display: Box<CStr> = self.name.clone().into_boxed_c_str();
        let node = Arc::new(Node::root(fd, self.st, display));
        let mut walker = Walker::new(plan);
        for name in &condemned {
            walker.remove_child(&node, name, fence);
        }
        leftovers.merge(std::mem::take(&mut walker.tally));
        pending
    }

    /// Unlocks the quarantine and removes it if it is empty and no other
    /// removal is using it (failures, such as `ENOTEMPTY`, are ignored:
    /// the quarantine then stays for the next removal).
    ///
    /// A share of a batch's quarantine ([`Quarantine::share`]) only lets its
    /// share go, unless it is the last one.
    pub(crate) fn close(self, parent: BorrowedFd<'_>) {
        // Exactly one of the shares closing at once gets the descriptor.
        let Some(fd) = Arc::into_inner(self.fd) else {
            return;
        };
        if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_ok()
            && fs_at::stat(parent, &self.name, NO_STATX).is_ok_and(|st| st.id == self.st.id)
        {
            let _ = fs_at::rmdir(parent, &self.name);
        }
    }
}

/// Removes the quarantine this process used last in `parent` if it is
/// empty and no removal (of any process) is using it: what
/// [`Quarantine::close`] does, for when the last removals out of it
/// closed at the same moment (each one's `LOCK_EX` attempt failed on the
/// other's share, so neither removed it). Best effort and quiet: a
/// quarantine still in use, not empty, or not ours stays.
pub(crate) fn tidy(parent: BorrowedFd<'_>) {
    let Ok(parent_st) = fs_at::fstat_dir(parent, NO_STATX) else {
        return;
    };
    let Some(name) = last_used(parent_st.id) else {
        return;
    };
    let euid = rustix::process::geteuid().as_raw();
    let fence = Fence::of(&parent_st);
    let Ok(Opened::Dir(fd, st)) = fs_at::open_dir_stat(parent, &name, ATIME, &fence, NO_STATX)
    else {
        return;
    };
    if st.uid != euid || st.perm != 0o700 {
        return;
    }
    Quarantine {
        fd: Arc::new(fd),
        st,
        name,
        pending: Vec::new(),
    }
    .close(parent);
}

/// Appends `.<hex of original>` to `name` if the result fits in a name
/// (`NAME_MAX`); says whether it did.
fn push_hex_if_it_fits(name: &mut Vec<u8>, original: &[u8]) -> bool {
    if name.len() + 1 + 2 * original.len() > NAME_MAX {
        return false;
    }
    name.push(b'.');
    for b in original {
        name.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    true
}

/// The name a newcomer that had taken the name `original` is moved to
/// when the entry gets its name back: `<original>.taken-during-reap-<8
/// random hex>`, its original part cut short (at a UTF-8 character
/// boundary when it is UTF-8) so that the whole fits in `NAME_MAX` (255)
/// bytes. Never a quarantine's name, nor a name of the tool's own.
pub(crate) fn taken_name(original: &[u8]) -> CString {
    let suffix = format!("{:08x}", fastrand::u32(..));
    let room = NAME_MAX - TAKEN.len() - suffix.len();
    let mut cut = original.len().min(room);
    if cut < original.len() && std::str::from_utf8(original).is_ok() {
        // Not inside a character: back to the start of the one cut.
        while cut > 0 && original[cut] & 0b1100_0000 == 0b1000_0000 {
            cut -= 1;
        }
    }
    let mut name = original[..cut].to_vec();
    name.extend_from_slice(TAKEN);
    name.extend_from_slice(suffix.as_bytes());
    // `original` is a name (no NUL), the rest is ours.
    CString::new(name).unwrap_or_default()
}

/// Moves `name` of `dir` into `parent` beside the name `original`, under a
/// fresh [`taken_name`] (`RENAME_NOREPLACE`; another random suffix when one
/// is taken). Returns the name it now has.
pub(crate) fn move_beside(
    dir: BorrowedFd<'_>,
    name: &CStr,
    parent: BorrowedFd<'_>,
    original: &[u8],
) -> Result<CString, Errno> {
    let mut last = Errno::EXIST;
    for _ in 0..MAX_ATTEMPTS {
        let taken = taken_name(original);
        match fs_at::rename_noreplace(dir, name, parent, &taken) {
            Ok(()) => return Ok(taken),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(errno) => return Err(errno),
        }
    }
    Err(last)
}

/// Moves the returning leftover `name` of the quarantine `q` back out into
/// `parent`: under its original name if that is free, else beside it
/// ([`move_beside`]); one whose name carries no valid original (not made
/// by this version) as `.sandkeeper-restored-<name>`. Never deletes,
/// never follows a symlink (a rename moves the link). Returns where it is
/// now, relative to `parent`, or `None` when it could not be moved (it
/// stays for the next remover).
fn return_leftover(q: BorrowedFd<'_>, name: &CStr, parent: BorrowedFd<'_>) -> Option<PathBuf> {
    let as_path = |n: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(n));
    let Some(original) = original_of(name.to_bytes()) else {
        let mut restored = b".sandkeeper-restored-".to_vec();
        restored.extend_from_slice(name.to_bytes());
        let restored = CString::new(restored).ok()?;
        return fs_at::rename_noreplace(q, name, parent, &restored)
            .ok()
            .map(|()| as_path(restored.as_bytes()));
    };
    let back = CString::new(original.clone()).ok()?;
    match fs_at::rename_noreplace(q, name, parent, &back) {
        Ok(()) => Some(as_path(&original)),
        Err(Errno::EXIST) => move_beside(q, name, parent, &original)
            .ok()
            .map(|taken| as_path(taken.as_bytes())),
        Err(_) => None,
    }
}

/// The names in the directory `dir`, without `.` and `..`.
pub(crate) fn list(dir: BorrowedFd<'_>) -> Result<Vec<CString>, Errno> {
    list_where(dir, |_| true)
}

/// The names in `dir` (but `.` and `..`) for which `keep` is true.
pub(crate) fn list_where(
    dir: BorrowedFd<'_>,
    keep: fn(&[u8]) -> bool,
) -> Result<Vec<CString>, Errno> {
    let fd = rustix::fs::openat(
        dir,
        c".",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut iter = rustix::fs::RawDir::new(&fd, buf.spare_capacity_mut());
    while let Some(entry) = iter.next() {
        let entry = entry?;
        let name = entry.file_name();
        if !fs_at::is_dot(name.to_bytes()) && keep(name.to_bytes()) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// The original name carried by a pending (or returning) name, if any
/// (and if it is a valid name: the quarantine is ours, but a name is
/// checked all the same).
pub(crate) fn original_of(pending: &[u8]) -> Option<Vec<u8>> {
    let rest = pending
        .strip_prefix(PENDING)
        .or_else(|| pending.strip_prefix(RETURNING))?;
    decode_name(&rest[rest.iter().position(|&b| b == b'.')? + 1..])
}

/// A name from its hex form, if it is a valid name of an entry (not `.`,
/// `..`, no `/` or NUL, not one of the tool's own).
fn decode_name(hex: &[u8]) -> Option<Vec<u8>> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) {
        return None;
    }
    let name: Vec<u8> = hex
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
        })
        .collect::<Option<_>>()?;
    let valid = !fs_at::is_dot(&name)
        && !name.contains(&b'/')
        && !name.contains(&0)
        && !is_quarantine(&name)
        && !is_own_pending(&name);
    valid.then_some(name)
}

/// The prefix of a directory that is its own quarantine (see
/// [`own_pending_name`]).
pub(crate) const OWN_PENDING: &[u8] = b".sandkeeper-pending-";

/// Who owned a directory and its mode, before the remover made it its own
/// quarantine (put back with it if it is restored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Permission bits, `0o7777`.
    pub(crate) perm: u32,
}

/// The name of a directory entry that is its own quarantine, in its
/// parent, because no quarantine could be made (no free inode or block):
/// `.sandkeeper-pending-<euid>-<16 random hex>-<uid>-<gid>-<octal
/// mode>[.<hex of the original name>]`, carrying what is needed to put it
/// back as it was (the original name only when it fits). Such an entry is
/// owned by the remover with mode 0700 and pending: never deleted without
/// a fresh check.
pub(crate) fn own_pending_name(euid: u32, owner: Owner, original: &[u8]) -> CString {
    let mut name = OWN_PENDING.to_vec();
    name.extend_from_slice(
        format!(
            "{euid}-{:016x}-{}-{}-{:o}",
            fastrand::u64(..),
            owner.uid,
            owner.gid,
            owner.perm & 0o7777
        )
        .as_bytes(),
    );
    if name.len() + 1 + 2 * original.len() <= NAME_MAX {
        name.push(b'.');
        for b in original {
            name.extend_from_slice(format!("{b:02x}").as_bytes());
        }
    }
    // Digits, dashes, a dot: no NUL.
    CString::new(name).unwrap_or_default()
}

/// What an [`own_pending_name`] says: the owner and mode to put back and
/// the original name (when it was carried and is valid).
pub(crate) fn parse_own_pending(name: &[u8]) -> Option<(Owner, Option<Vec<u8>>)> {
    let rest = name.strip_prefix(OWN_PENDING)?;
    let (fields, original) = match rest.iter().position(|&b| b == b'.') {
        Some(dot) => (&rest[..dot], Some(&rest[dot + 1..])),
        None => (rest, None),
    };
    let fields = std::str::from_utf8(fields).ok()?;
    let parts: Vec<&str> = fields.split('-').collect();
    let [euid, random, uid, gid, perm] = parts[..] else {
        return None;
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(euid) || random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    if !digits(uid) || !digits(gid) {
        return None;
    }
    let owner = Owner {
        uid: uid.parse().ok()?,
        gid: gid.parse().ok()?,
        perm: u32::from_str_radix(perm, 8).ok().filter(|p| *p <= 0o7777)?,
    };
    let original = match original {
        Some(hex) => Some(decode_name(hex)?),
        None => None,
    };
    Some((owner, original))
}

/// Whether `name` has the form of a directory that is its own quarantine.
pub(crate) fn is_own_pending(name: &[u8]) -> bool {
    name.starts_with(OWN_PENDING) && parse_own_pending(name).is_some()
}

/// Whether the entry `name` of `dir` is one of the caller's own quarantines
/// (or a directory that is its own quarantine): a name of that form *and*,
/// by `lstat` relative to `dir`, a directory owned by the effective uid
/// with mode 0700. A look-alike anyone else made is an ordinary entry.
pub(crate) fn is_own_quarantine_at(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> bool {
    let bytes = name.as_bytes();
    // A look for the scan's filter, not a removal: without `statx` it goes
    // on with `fstatat`, as the scan's other looks do.
    (is_quarantine(bytes) || is_own_pending(bytes))
        && CString::new(bytes).is_ok_and(|name| {
            fs_at::stat(dir, &name, NoStatx::Fstatat).is_ok_and(|st| {
                st.is_dir() && st.uid == rustix::process::geteuid().as_raw() && st.perm == 0o700
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantine_names() {
        let cases: [(&[u8], bool); 12] = [
            (b".sandkeeper-trash", true),
            (b".sandkeeper-trash-0", true),
            (b".sandkeeper-trash-1000", true),
            (b".sandkeeper-trash-0-0123456789abcdef", true),
            (b".sandkeeper-trash-1000-ff", true),
            (b".sandkeeper-trash-", false),
            (b".sandkeeper-trash-x", false),
            (b".sandkeeper-trash-0-", false),
            (b".sandkeeper-trash-0-xyz", false),
            (b".sandkeeper-trash--ff", false),
            (b".sandkeeper-trashy", false),
            (b"app-1", false),
        ];
        for (name, want) in cases {
            assert_eq!(
                is_quarantine(name),
                want,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn pending_names_carry_the_original_when_it_fits() {
        let p = Quarantine::pending_name(b"app-235-4242");
        assert!(p.as_bytes().starts_with(PENDING));
        assert_eq!(
            original_of(p.as_bytes()).as_deref(),
            Some(&b"app-235-4242"[..])
        );
        let long = vec![b'x'; 120];
        let p = Quarantine::pending_name(&long);
        assert!(p.as_bytes().len() <= NAME_MAX);
        assert_eq!(original_of(p.as_bytes()), None, "too long to carry");
        for forged in [
            &b"pending-1-2-3-4.2f"[..], // "/"
            b"pending-1-2-3-4.2e2e",    // ".."
            b"pending-1-2-3-4.00",      // NUL
            b"pending-1-2-3-4.zz",
            b"pending-1-2-3-4.6",
            b"condemned-1-2-3-4.61",
        ] {
            assert_eq!(original_of(forged), None, "{forged:?}");
        }
        assert!(Quarantine::condemned_name()
            .as_bytes()
            .starts_with(CONDEMNED));
    }

    #[test]
    fn taken_names_fit_in_name_max() {
        let long_utf8 = "é".repeat(127); // 254 bytes, two per character
        let cases: [(&str, Vec<u8>, usize); 5] = [
            ("short", b"app-1".to_vec(), 5),
            ("exactly the room", vec![b'x'; 228], 228),
            ("one byte over", vec![b'x'; 229], 228),
            ("NAME_MAX", vec![b'x'; NAME_MAX], 228),
            // 228 would cut the 115th character in two: 114 kept.
            ("UTF-8 at a boundary", long_utf8.clone().into_bytes(), 228),
        ];
        for (case, original, kept) in cases {
            let name = taken_name(&original);
            let bytes = name.as_bytes();
            assert!(bytes.len() <= NAME_MAX, "{case}: {}", bytes.len());
            assert_eq!(&bytes[..kept], &original[..kept], "{case}");
            let rest = &bytes[kept..];
            let hex = rest
                .strip_prefix(TAKEN)
                .unwrap_or_else(|| panic!("{case}: {name:?}"));
            assert!(
                hex.len() == 8 && hex.iter().all(u8::is_ascii_hexdigit),
                "{case}"
            );
            assert!(!is_quarantine(bytes) && !is_own_pending(bytes), "{case}");
        }
        let cut = taken_name("é".repeat(127).as_bytes());
        assert!(
            std::str::from_utf8(cut.as_bytes()).is_ok(),
            "no character cut in two"
        );
        // A name just short enough keeps all of it, one over is cut by one.
        assert_eq!(taken_name(&[b'y'; 228]).as_bytes().len(), NAME_MAX);
        assert_ne!(taken_name(b"a"), taken_name(b"a"), "random suffixes");
    }

    #[test]
    fn returning_and_kept_names_carry_the_original() {
        let r = Quarantine::returning_name(b"app-1");
        assert!(r.as_bytes().starts_with(RETURNING));
        assert_eq!(original_of(r.as_bytes()).as_deref(), Some(&b"app-1"[..]));
        // Every original a pending name carries fits in a returning name.
        let longest = vec![b'z'; (NAME_MAX - PENDING.len() - 1 - 40) / 2];
        let p = Quarantine::pending_name(&longest);
        if original_of(p.as_bytes()).is_some() {
            let r = Quarantine::returning_name(&longest);
            assert_eq!(original_of(r.as_bytes()), Some(longest.clone()));
        }
        let too_long = Quarantine::returning_name(&[b'z'; 115]);
        assert!(too_long.as_bytes().len() <= NAME_MAX);
        assert_eq!(original_of(too_long.as_bytes()), None);
        let k = Quarantine::kept_name(Some(b"app-1"));
        assert!(k.as_bytes().starts_with(KEPT) && k.as_bytes().starts_with(PENDING));
        assert_eq!(original_of(k.as_bytes()).as_deref(), Some(&b"app-1"[..]));
        assert_eq!(original_of(Quarantine::kept_name(None).as_bytes()), None);
    }

    #[test]
    fn fresh_quarantine_names_are_quarantine_names_and_differ() {
        let a = fresh_name(0);
        assert!(is_quarantine(a.as_bytes()), "{a:?}");
        assert_ne!(a, fresh_name(0));
        assert!(a.as_bytes().starts_with(b".sandkeeper-trash-0-"));
    }

    #[test]
    fn own_pending_names_carry_the_owner_and_the_name() {
        let owner = Owner {
            uid: 65534,
            gid: 100,
            perm: 0o2755,
        };
        let name = own_pending_name(0, owner, b"app-1");
        assert!(is_own_pending(name.as_bytes()), "{name:?}");
        assert!(
            !is_quarantine(name.as_bytes()),
            "never used as a quarantine"
        );
        assert_eq!(
            parse_own_pending(name.as_bytes()),
            Some((owner, Some(b"app-1".to_vec())))
        );
        let long = own_pending_name(0, owner, &[b'x'; 200]);
        assert!(long.as_bytes().len() <= NAME_MAX);
        assert_eq!(parse_own_pending(long.as_bytes()), Some((owner, None)));
        for forged in [
            &b".sandkeeper-pending-0-0123456789abcdef-1-2"[..],
            b".sandkeeper-pending-0-0123456789abcdef-1-2-99999",
            b".sandkeeper-pending-0-0123456789abcdef-1-2-755.2f",
            b".sandkeeper-pending-0-0123-1-2-755",
            b".sandkeeper-pending-x-0123456789abcdef-1-2-755",
        ] {
            assert_eq!(parse_own_pending(forged), None, "{forged:?}");
        }
    }

    #[test]
    fn unique_names_differ() {
        let a = Quarantine::unique_name();
        let b = Quarantine::unique_name();
        assert_ne!(a, b);
        assert!(!a.as_bytes().contains(&b'/'));
        let ours = format!("{}-", std::process::id());
        assert!(a.as_bytes().starts_with(ours.as_bytes()), "{a:?}");
    }
}
