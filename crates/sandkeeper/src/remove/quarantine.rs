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

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::{FlockOperation, Mode};
use rustix::io::Errno;

use super::at::{self, DirStat, Fence, Opened};
use super::engine::{self, Plan};
use super::node::Node;
use super::report::Tally;

/// The quarantine's name in the parent.
pub(crate) const TRASH: &str = ".sandkeeper-trash";

/// How often the quarantine may vanish under us (another remover removed it
/// as empty) before giving up.
const MAX_ATTEMPTS: usize = 16;

/// Distinguishes names made by one process in the same nanosecond.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// An open, locked quarantine directory.
pub(crate) struct Quarantine {
    fd: OwnedFd,
    st: DirStat,
    name: CString,
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
            let quarantine = Quarantine {
                fd,
                st,
                name: name.clone(),
            };
            if !alone {
                return Ok(Some(quarantine));
            }
            quarantine.finish_leftovers(fence, plan, leftovers);
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

    /// Removes everything in the quarantine: entries of removers that were
    /// killed. Only called while holding `LOCK_EX`, so none is in progress.
    fn finish_leftovers(&self, fence: &Fence, plan: &Plan, leftovers: &mut Tally) {
        let Ok(fd) = self.fd.try_clone() else { return };
        let display: Box<CStr> = self.name.clone().into_boxed_c_str();
        let node = Arc::new(Node::root(fd, self.st, display));
        leftovers.merge(engine::empty_dir(&node, fence, plan, true));
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
    fn unique_names_differ() {
        let a = Quarantine::unique_name();
        let b = Quarantine::unique_name();
        assert_ne!(a, b);
        assert!(!a.as_bytes().contains(&b'/'));
    }
}
