//! Removal that cannot escape: deletes one entry of a directory and nothing
//! outside it, whatever other processes do meanwhile.
//!
//! [`remove_entry`] takes an open parent directory and a name;
//! [`remove_path`] is the same for callers that hold a path. Both return a
//! [`RemovalReport`]: what was removed, and what was left and why.
//! [`quarantine_entry`] is the first half of a removal, for callers that
//! must check the entry after it left its name.
//!
//! # Guarantees
//!
//! - **Descriptor-relative.** Every step is `openat2`/`statx`/`unlinkat`/
//!   `renameat2` relative to a directory the removal opened itself, one name
//!   at a time, with `O_NOFOLLOW`/`AT_SYMLINK_NOFOLLOW`. No path is
//!   resolved from the root again once the parent is open, so renaming or
//!   swapping directories during the removal cannot redirect it.
//! - **Quarantine first.** A directory entry is first renamed into the
//!   parent's quarantine `.sandkeeper-trash-<euid>-<random>/` (mode 0700,
//!   owned by the remover, same filesystem; an existing one of the
//!   caller's is reused, a new one gets a random name, so no other user can
//!   take its name first) under a unique name, and what arrived there must be
//!   the very inode that was opened; if it is not, it is put back and
//!   nothing is removed. The entry leaves the parent atomically, so a
//!   half-removed tree is never mistaken for a live one. A quarantine left
//!   half full by a killed remover is finished by the next removal of a
//!   directory in that parent; the quarantine itself is removed when empty.
//! - **Checked after the move, when asked.** [`quarantine_entry`] stops
//!   after the move and returns a [`Quarantined`] handle, so a caller (the
//!   reaper) can check the entry where no new path lookup reaches it, then
//!   [`remove`](Quarantined::remove) or [`restore`](Quarantined::restore)
//!   it. Such an entry waits under a *pending* name and becomes
//!   *condemned* (one rename) only when it is to be deleted; a pending
//!   leftover of a killed caller is never deleted without a fresh check
//!   ([`pending_leftovers`]).
//! - **Never follows a symlink** (a symlink is unlinked as a link) and
//!   **never opens** a FIFO, socket or device node: everything that is not a
//!   directory is unlinked by name.
//! - **Never leaves the mount.** A directory on another mount or device (a
//!   tmpfs, or a bind mount of the same filesystem: told apart by the mount
//!   id from `statx`) is neither entered nor removed, and is reported as
//!   [`LeftReason::MountPoint`]. With `openat2`, a mount point is refused by
//!   the kernel before it is even opened.
//! - **Unwritable directories** inside the tree (mode 0500 as in Go's
//!   module cache, 0000) are made writable with `fchmod` on the descriptor
//!   the walk opened, never by path and never on a file (a hard link would
//!   carry a file's mode change outside the tree).
//! - **Soft failures.** An entry that cannot be removed (immutable, `EBUSY`,
//!   `EROFS`, …) is reported with its path and errno, and the rest of the
//!   tree is still removed. What is left of an incomplete removal is put
//!   back under its name (see [`RemovalReport::remnant`]).
//! - **Bounded.** The walk is iterative: depth costs memory for one small
//!   frame per level, not stack, and each worker keeps at most
//!   [`max_open`](RemoveOptions::max_open) directories open, reopening an
//!   ancestor through `..` and checking it is the same inode.
//! - **Parallel.** Independent subtrees are removed by several threads
//!   ([`threads`](RemoveOptions::threads)); one thread gives a deterministic
//!   order for tests.
//!
//! What is not guaranteed: a process that can write inside the tree can
//! move things into it (they are then removed, as `rm -rf` would) or out of
//! it (they are then left; a directory moved out while the remover was
//! inside it is reported as [`LeftReason::Moved`], and the remover never
//! follows it to its new parent). A directory that is a mount point only in
//! *another* mount namespace looks like a plain directory here; the scanner
//! checks mounts of every namespace before an entry is reaped.
//!
//! # Platform behavior
//!
//! Linux only: `statx` mount ids need Linux 5.8 (before, only the device is
//! compared), `openat2` 5.6 (before, `openat` and the checks after it), and
//! making an unreadable directory readable uses `/proc/thread-self/fd`.

mod engine;
mod entry;
mod finish;
mod node;
mod plan;
mod quarantine_dir;
mod report;
mod worker;

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags, CWD};

use crate::error::{Error, ErrorKind, IoResultExt, Result};
use crate::fs_at::{self, Atime, NoStatx};

/// The remover's confinement compares mount ids, which only `statx`
/// reports: on a kernel without it, every removal fails (`ENOSYS`) rather
/// than fall back to comparing devices alone.
const NO_STATX: NoStatx = NoStatx::Fail;

/// The remover opens directories without `O_NOATIME`: it deletes them, so
/// their access time does not matter (and no `EPERM` retry is needed).
const ATIME: Atime = Atime::Update;

pub use entry::{LeftBy, NotRestored, QuarantineBatch, Quarantined, Restore};
pub(crate) use entry::{Limits, Listed, Listing, Seen};
pub use finish::finish_quarantine;
pub(crate) use finish::may_hold_leftovers;
pub(crate) use quarantine_dir::{is_own_quarantine_at, tidy as tidy_quarantine};
pub use report::{Counts, Errno, Left, LeftReason, Op, RemovalReport};

/// The most worker threads the automatic choice uses: unlinking contends on
/// filesystem locks, more threads stop paying off.
const AUTO_THREADS_MAX: usize = 8;

/// How [`remove_entry`] and [`remove_path`] behave.
///
/// ```
/// use sandkeeper_engine::remove::RemoveOptions;
///
/// let mut options = RemoveOptions::new();
/// options.threads(1).max_open(16);
/// ```
#[derive(Debug, Clone, Default)]
pub struct RemoveOptions {
    expect: Option<fs_at::FileId>,
    threads: usize,
    max_open: usize,
    count_bytes: bool,
    /// `None`: the default, `true`.
    find_leftovers: Option<bool>,
}

impl RemoveOptions {
    /// Default options: no identity check, one thread per CPU (at most 8),
    /// 32 open directories per thread, bytes not counted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only remove the entry if it is this inode (`st_dev`, `st_ino` as
    /// `stat` reports them, e.g. from
    /// [`MetadataExt`](std::os::unix::fs::MetadataExt)). Otherwise nothing
    /// is removed and the removal fails with [`ErrorKind::Removal`].
    ///
    /// Default: no check. A reaper that decided on an entry from an earlier
    /// `stat` uses this so that an entry replaced since is not removed.
    pub fn expect(&mut self, dev: u64, ino: u64) -> &mut Self {
        self.expect = Some(fs_at::FileId { dev, ino });
        self
    }

    /// How many threads remove independent subtrees, the calling thread
    /// included. `1` does everything on the calling thread, in an order
    /// that depends only on the filesystem (for tests). `0`, the default,
    /// means one per CPU, at most 8. Helper threads start only when the tree
    /// has at least two subtrees to share.
    pub fn threads(&mut self, threads: usize) -> &mut Self {
        self.threads = threads;
        self
    }

    /// How many directory descriptors each thread keeps open at most
    /// (deeper ancestors are reopened when the walk climbs back to them).
    /// Default 32; values below 2 are raised to 2. Shared directories near
    /// the top of the tree add at most 64 descriptors in all.
    pub fn max_open(&mut self, max_open: usize) -> &mut Self {
        self.max_open = max_open;
        self
    }

    /// Whether to count the disk space freed ([`Counts::bytes`]). Default
    /// `false`: it costs one `statx` per file, about a fifth more time on a
    /// tree of small files, and callers that decided what to remove from a
    /// scan already know the sizes.
    pub fn count_bytes(&mut self, yes: bool) -> &mut Self {
        self.count_bytes = yes;
        self
    }

    /// Whether a removal that finds the quarantine it used last in this
    /// parent gone lists the parent for other quarantines of the caller's
    /// (an earlier, killed run's) and finishes what they left (default
    /// `true`). A caller that removes thousands of entries of one parent
    /// and finishes the leftovers itself first
    /// ([`finish_quarantine`], [`pending_leftovers`]: the reaper does)
    /// turns it off: the listing costs a pass over the whole parent per
    /// entry.
    pub fn find_leftovers(&mut self, yes: bool) -> &mut Self {
        self.find_leftovers = Some(yes);
        self
    }

    fn plan(&self) -> plan::Plan {
        let threads = match self.threads {
            0 => crate::walk::cores().min(AUTO_THREADS_MAX),
            n => n,
        };
        let max_open = match self.max_open {
            0 => 32,
            n => n.max(2),
        };
        plan::Plan {
            threads,
            max_open,
            count_bytes: self.count_bytes,
            find_leftovers: self.find_leftovers.unwrap_or(true),
        }
    }
}

/// Removes the entry `name` of the open directory `parent` and everything
/// below it, confined to that entry.
///
/// A directory is moved into `parent`'s quarantine (`.sandkeeper-trash-<euid>-<random>/`),
/// checked to be the inode that was opened, emptied and removed (see the
/// [module docs](self) for every guarantee). A file, symlink, FIFO, socket
/// or device node is unlinked as a name (moved through the quarantine first
/// when [`expect`](RemoveOptions::expect) is set, so the check and the
/// unlink concern the same inode). Failures inside the tree do not stop the
/// removal: they are listed in [`RemovalReport::left`], and what is left of
/// the entry is put back under `name`.
///
/// `parent` must be a directory descriptor, opened for reading
/// (`O_RDONLY|O_DIRECTORY`; `O_PATH` cannot be listed). `name` is one path
/// component: any bytes but `/` and NUL.
///
/// # Errors
///
/// Only for the entry itself; the error's path is `name`.
///
/// - It does not exist: an [`ErrorKind::Io`] error whose
///   [`io_error`](Error::io_error) has kind
///   [`NotFound`](std::io::ErrorKind::NotFound).
/// - It is not the [expected](RemoveOptions::expect) inode, it was
///   replaced between being opened and moved to the quarantine, it is a
///   mount point, or it kept changing type: [`ErrorKind::Removal`], and
///   nothing was removed.
/// - The quarantine cannot be created or used, or the entry cannot be
///   renamed into it (`EBUSY`, `EACCES`, `EXDEV`, `ENOSPC` when no
///   quarantine can be had on a full filesystem, …): [`ErrorKind::Io`]
///   (or [`ErrorKind::Removal`] when every fresh quarantine name tried was
///   taken at once).
/// - `name` is empty, `.`, `..`, contains `/`, or is one of the caller's
///   quarantines (a directory of the effective uid, mode 0700, with a
///   quarantine's name; another user's look-alike is an ordinary entry):
///   [`ErrorKind::InvalidInput`].
///
/// # Examples
///
/// ```
/// use std::fs::{self, File};
/// use std::os::fd::AsFd;
/// use sandkeeper_engine::remove::{remove_entry, RemoveOptions};
///
/// # let sandbox = sandkeeper_engine::Sandbox::new()?;
/// # let root = sandbox.path();
/// let scratch = root.join("entry");
/// fs::create_dir_all(scratch.join("deep/er"))?;
/// fs::write(scratch.join("deep/er/file"), "data")?;
///
/// let parent = File::open(root)?;
/// let report = remove_entry(parent.as_fd(), "entry".as_ref(), &RemoveOptions::new())?;
/// assert!(report.is_complete());
/// assert_eq!(report.removed().files(), 1);
/// assert_eq!(report.removed().dirs(), 3);
/// assert!(!scratch.exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn remove_entry(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    options: &RemoveOptions,
) -> Result<RemovalReport> {
    entry::remove(parent, name, Path::new(name), options)
}

/// Moves the entry `name` of the open directory `parent` into the
/// parent's quarantine under a *pending* name, and returns a handle to it
/// there: the first half of a removal that must be checked after the entry
/// left its name (a reaper: see [`crate::reap`]).
///
/// Like [`remove_entry`]: the entry is opened without following links
/// (`O_NOFOLLOW`; a file, symlink, socket or FIFO is looked at by name,
/// never opened), must be the [expected](RemoveOptions::expect) inode, and
/// what arrives in the quarantine must be the very inode that was looked
/// at (else it is put back and this fails). Once it is in, no new path
/// lookup by anyone else reaches it; processes that already had it open
/// (or a working directory inside) still can, which is what the caller
/// checks for next. Then [`Quarantined::remove`] or
/// [`Quarantined::restore`]; a handle dropped without either leaves the
/// entry pending, never deleted without a fresh check.
///
/// # Errors
///
/// As [`remove_entry`]; nothing was moved then.
///
/// # Examples
///
/// ```
/// use std::os::fd::AsFd;
/// use sandkeeper_engine::remove::{quarantine_entry, RemoveOptions, Restore};
///
/// # let sandbox = sandkeeper_engine::Sandbox::new()?;
/// # let root = sandbox.path();
/// std::fs::create_dir(root.join("entry"))?;
/// let parent = std::fs::File::open(root)?;
/// let held = quarantine_entry(parent.as_fd(), "entry".as_ref(), &RemoveOptions::new())?;
/// assert!(!root.join("entry").exists(), "no path reaches it now");
/// assert!(root.join(held.path_in_parent()).exists());
/// assert_eq!(held.restore(), Restore::Restored);
/// assert!(root.join("entry").exists());
///
/// let held = quarantine_entry(parent.as_fd(), "entry".as_ref(), &RemoveOptions::new())?;
/// assert!(held.remove()?.is_complete());
/// assert!(!root.join("entry").exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn quarantine_entry<'a>(
    parent: BorrowedFd<'a>,
    name: &'a OsStr,
    options: &RemoveOptions,
) -> Result<Quarantined<'a>> {
    entry::quarantine(parent, name, Path::new(name), options)
}

/// The *pending* entries that killed reapers left in the quarantine of
/// `parent` (moved in, never cleared by a check), as handles to check and
/// then remove or restore, exactly as a fresh [`quarantine_entry`].
///
/// Opening the quarantine also finishes its *condemned* leftovers (as
/// every removal does). Pending ones are only listed when no other removal
/// is using the quarantine (they would be that removal's); each handle
/// keeps a shared lock on the quarantine, so no other remover takes them
/// over meanwhile. Empty when there is no quarantine.
///
/// # Errors
///
/// When `parent` cannot be inspected or the quarantine cannot be used.
pub fn pending_leftovers<'a>(
    parent: BorrowedFd<'a>,
    options: &RemoveOptions,
) -> Result<Vec<Quarantined<'a>>> {
    if !finish::quarantine_exists(parent) {
        return Ok(Vec::new());
    }
    entry::pending_leftovers(parent, Path::new("."), options)
}

/// Removes `path` and everything below it: opens its parent
/// (`openat(AT_FDCWD, parent, O_RDONLY|O_DIRECTORY|O_NOFOLLOW)`) and calls
/// [`remove_entry`] with the last component.
///
/// The parent's own path is resolved once, as given (symlinks in its
/// *leading* components are followed, as by `open(2)`; the parent itself
/// must not be a symlink); from there on, everything is as with
/// [`remove_entry`]. A relative path is relative to the working directory.
///
/// # Errors
///
/// As [`remove_entry`], with `path` as the error's path; also an
/// [`ErrorKind::Io`] error when the parent cannot be opened, and
/// [`ErrorKind::InvalidInput`] when `path` has no last component to remove
/// (`/`, or ending in `.` or `..`).
///
/// # Examples
///
/// ```
/// use std::fs;
/// use sandkeeper_engine::remove::{remove_path, RemoveOptions};
///
/// # let sandbox = sandkeeper_engine::Sandbox::new()?;
/// let scratch = sandbox.path().join("tree");
/// fs::create_dir_all(scratch.join("a/b"))?;
/// fs::write(scratch.join("a/b/c"), "data")?;
///
/// let report = remove_path(&scratch, RemoveOptions::new().threads(1))?;
/// assert!(report.is_complete());
/// assert_eq!(report.removed().entries(), 4);
/// assert!(!scratch.exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn remove_path(path: &Path, options: &RemoveOptions) -> Result<RemovalReport> {
    let (parent, name) = split(path)?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let parent_fd = rustix::fs::openat(CWD, parent, flags, Mode::empty())
        .with_path("cannot open the parent directory", || parent.to_path_buf())?;
    entry::remove(parent_fd.as_fd(), name, path, options)
}

/// Splits `path` into the parent to open and the last component, refusing
/// paths whose last component is not a name (`/`, `.`, `..`; `Path`
/// itself would quietly drop a trailing `.`).
fn split(path: &Path) -> Result<(&Path, &OsStr)> {
    let bytes = path.as_os_str().as_bytes();
    let trimmed = match bytes.iter().rposition(|&b| b != b'/') {
        Some(end) => &bytes[..=end],
        None => &[][..],
    };
    let (parent, name) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(slash) => (&trimmed[..=slash], &trimmed[slash + 1..]),
        None => (&b"."[..], trimmed),
    };
    if name.is_empty() || fs_at::is_dot(name) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "path has no last component to remove",
        )
        .at(path));
    }
    Ok((
        Path::new(OsStr::from_bytes(parent)),
        OsStr::from_bytes(name),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_paths() {
        let ok: [(&str, &str, &str); 6] = [
            ("/tmp/x", "/tmp/", "x"),
            ("/tmp/x/", "/tmp/", "x"),
            ("x", ".", "x"),
            ("a/b//", "a/", "b"),
            ("/x", "/", "x"),
            ("./x", "./", "x"),
        ];
        for (path, parent, name) in ok {
            let (p, n) = split(Path::new(path)).unwrap();
            assert_eq!((p, n), (Path::new(parent), OsStr::new(name)), "{path}");
        }
        for bad in ["/", "", "a/.", "a/..", ".", "..", "//"] {
            let err = split(Path::new(bad)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn options_plan() {
        let cases = [((1, 0), (1, 32)), ((3, 1), (3, 2)), ((2, 100), (2, 100))];
        for ((threads, max_open), (want_threads, want_open)) in cases {
            let plan = RemoveOptions::new()
                .threads(threads)
                .max_open(max_open)
                .plan();
            assert_eq!((plan.threads, plan.max_open), (want_threads, want_open));
        }
        let auto = RemoveOptions::new().plan();
        assert!((1..=AUTO_THREADS_MAX).contains(&auto.threads));
    }

    #[test]
    fn options_are_send_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<RemoveOptions>();
    }
}
