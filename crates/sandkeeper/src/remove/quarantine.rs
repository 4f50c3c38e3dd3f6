//! The quarantine: a private directory beside the entries, where an entry
//! is moved before it is emptied.
//!
//! `.sandkeeper-trash` (mode 0700, owned by the remover, created on demand
//! in the parent, so on the same filesystem). Moving an entry there makes
//! it disappear from the parent at once, gives it a name nobody else can
//! swap, and means a half-removed tree is never mistaken for a live one.
//!
//! Concurrent removers in one parent share the quarantine and coordinate
//! with `flock` on it: each holds `LOCK_SH` while its entry is inside. A
//! remover that gets `LOCK_EX` is alone, so whatever is in the quarantine
//! was left by a remover that died: it finishes that first. The last one
//! out (again `LOCK_EX`) removes the empty quarantine; a remover that
//! opened it just before finds it unlinked (`st_nlink == 0`) once it has
//! its lock, and starts over.
//!
//! If `.sandkeeper-trash` in the parent belongs to another user (a shared
//! `/tmp`), `.sandkeeper-trash-<uid>` is used instead.
//!
//! # Names inside
//!
//! Every entry in the quarantine is in one of two states, told by its name:
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
//!   be put back.
//!
//! [`remove_entry`]: super::remove_entry

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::{FlockOperation, Mode};
use rustix::io::Errno;

use super::at::{self, DirStat, Fence, Opened};
use super::engine::Plan;
use super::node::Node;
use super::report::Tally;
use super::walk::Walker;

/// The quarantine's name in the parent.
pub(crate) const TRASH: &str = ".sandkeeper-trash";

/// How often the quarantine may vanish under us (another remover removed it
/// as empty) before giving up.
const MAX_ATTEMPTS: usize = 16;

/// Distinguishes names made by one process in the same nanosecond.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// The prefix of an entry not yet cleared by a check (see the module docs).
pub(crate) const PENDING: &[u8] = b"pending-";
/// The prefix of an entry that is to be deleted.
pub(crate) const CONDEMNED: &[u8] = b"condemned-";
/// The longest name a directory entry may have.
const NAME_MAX: usize = 255;

/// An open, locked quarantine directory.
pub(crate) struct Quarantine {
    fd: OwnedFd,
    st: DirStat,
    name: CString,
    /// Pending entries left by killed reapers, found when this opener was
    /// alone in the quarantine (empty otherwise).
    pending: Vec<CString>,
}

/// Why no quarantine could be had.
pub(crate) enum Unusable {
    /// Both names are taken by other users, or are not directories.
    Taken,
    /// A system call failed.
    Errno(Errno),
}

/// Whether `name` is one of the quarantine names (which are not entries to
/// remove, but the remover's own).
pub(crate) fn is_quarantine(name: &[u8]) -> bool {
    name == TRASH.as_bytes()
        || name
            .strip_prefix(TRASH.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"-"))
            .is_some_and(|uid| !uid.is_empty() && uid.iter().all(u8::is_ascii_digit))
}

impl Quarantine {
    /// Opens (creating it if needed) and locks the quarantine of `parent`,
    /// finishing what earlier, interrupted removals left in it when no
    /// other removal is running there.
    pub(crate) fn open(
        parent: BorrowedFd<'_>,
        fence: &Fence,
        plan: &Plan,
        leftovers: &mut Tally,
    ) -> Result<Quarantine, Unusable> {
        let euid = rustix::process::geteuid().as_raw();
        let names = [
            CString::from(c".sandkeeper-trash"),
            CString::new(format!("{TRASH}-{euid}")).map_err(|_| Unusable::Errno(Errno::INVAL))?,
        ];
        for name in names {
            if let Some(quarantine) = Self::open_one(parent, name, euid, fence, plan, leftovers)? {
                return Ok(quarantine);
            }
        }
        Err(Unusable::Taken)
    }

    /// `Ok(None)`: the name is someone else's or not a directory.
    /// `Ok(Some(q))`: open, with `LOCK_SH` held.
    fn open_one(
        parent: BorrowedFd<'_>,
        name: CString,
        euid: u32,
        fence: &Fence,
        plan: &Plan,
        leftovers: &mut Tally,
    ) -> Result<Option<Quarantine>, Unusable> {
        for _ in 0..MAX_ATTEMPTS {
            match rustix::fs::mkdirat(parent, name.as_c_str(), Mode::RWXU) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(Unusable::Errno(errno)),
            }
            let (fd, st) = match at::open_dir(parent, &name, fence) {
                Ok(Opened::Dir(fd, st)) => (fd, st),
                // Another mount on it, a symlink or a file: not usable.
                Ok(Opened::Fenced) | Err(Errno::NOTDIR | Errno::LOOP) => return Ok(None),
                // Removed as empty between mkdir and open: again.
                Err(Errno::NOENT) => continue,
                Err(errno) => return Err(Unusable::Errno(errno)),
            };
            if st.uid != euid {
                return Ok(None);
            }
            if st.perm != 0o700 {
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
            let st = at::fstat_dir(fd.as_fd()).map_err(Unusable::Errno)?;
            if st.nlink == 0 {
                // The last remover out removed it after we opened it.
                continue;
            }
            let mut quarantine = Quarantine {
                fd,
                st,
                name: name.clone(),
                pending: Vec::new(),
            };
            if !alone {
                return Ok(Some(quarantine));
            }
            quarantine.pending = quarantine.finish_leftovers(fence, plan, leftovers);
            // From LOCK_EX to LOCK_SH is not atomic: in between, the last
            // remover out of another removal may have removed it.
            rustix::fs::flock(&quarantine.fd, FlockOperation::LockShared)
                .map_err(Unusable::Errno)?;
            if at::fstat_dir(quarantine.fd.as_fd())
                .map_err(Unusable::Errno)?
                .nlink
                == 0
            {
                continue;
            }
            return Ok(Some(quarantine));
        }
        Err(Unusable::Errno(Errno::AGAIN))
    }

    /// The quarantine directory.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
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
        if name.len() + 1 + 2 * original.len() <= NAME_MAX {
            name.push(b'.');
            for b in original {
                name.extend_from_slice(format!("{b:02x}").as_bytes());
            }
        }
        // Hex digits, dashes, a dot: no NUL.
        CString::new(name).unwrap_or_default()
    }

    /// A fresh name for an entry in the quarantine.
    pub(crate) fn unique_name() -> CString {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{}-{nanos:x}-{seq:x}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        );
        // Hex digits and dashes only: no NUL.
        CString::new(name).unwrap_or_default()
    }

    /// Removes the condemned entries of removers that were killed, and
    /// returns the names of their pending ones, which are left alone (they
    /// are removed only after a fresh check). Only called while holding
    /// `LOCK_EX`, so no removal is in progress.
    fn finish_leftovers(&self, fence: &Fence, plan: &Plan, leftovers: &mut Tally) -> Vec<CString> {
        let names = match list(self.fd.as_fd()) {
            Ok(names) => names,
            Err(_) => return Vec::new(),
        };
        let (pending, condemned): (Vec<CString>, Vec<CString>) = names
            .into_iter()
            .partition(|n| n.as_bytes().starts_with(PENDING));
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
    pub(crate) fn close(self, parent: BorrowedFd<'_>) {
        if rustix::fs::flock(&self.fd, FlockOperation::NonBlockingLockExclusive).is_ok()
            && at::lstat(parent, &self.name).is_ok_and(|st| st.id == self.st.id)
        {
            let _ = at::rmdir(parent, &self.name);
        }
    }
}

/// The names in the directory `dir`, without `.` and `..`.
fn list(dir: BorrowedFd<'_>) -> Result<Vec<CString>, Errno> {
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
        let name = entry?.file_name().to_owned();
        if !at::is_dot(name.to_bytes()) {
            names.push(name);
        }
    }
    Ok(names)
}

/// The original name carried by a pending name, if any (and if it is a
/// valid name: the quarantine is ours, but a name is checked all the same).
pub(crate) fn original_of(pending: &[u8]) -> Option<Vec<u8>> {
    let rest = pending.strip_prefix(PENDING)?;
    let hex = &rest[rest.iter().position(|&b| b == b'.')? + 1..];
    if hex.is_empty() || hex.len() % 2 != 0 {
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
    let valid =
        !at::is_dot(&name) && !name.contains(&b'/') && !name.contains(&0) && !is_quarantine(&name);
    valid.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantine_names() {
        let cases: [(&[u8], bool); 7] = [
            (b".sandkeeper-trash", true),
            (b".sandkeeper-trash-0", true),
            (b".sandkeeper-trash-1000", true),
            (b".sandkeeper-trash-", false),
            (b".sandkeeper-trash-x", false),
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
    fn unique_names_differ() {
        let a = Quarantine::unique_name();
        let b = Quarantine::unique_name();
        assert_ne!(a, b);
        assert!(!a.as_bytes().contains(&b'/'));
    }
}
