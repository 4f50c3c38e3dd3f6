//! Disk usage of a tree, like `du -x`, streaming and in bounded memory.
//!
//! [`usage`] and [`usage_at`] measure one entry (a file or a whole
//! directory tree); [`usage_many`] measures many entries of one directory on
//! several threads with the same results as measuring them one after the
//! other; a [`Walker`] keeps its buffers between entries.
//!
//! ```
//! use sandkeeper_engine::walk;
//! # let scratch = sandkeeper_engine::Sandbox::new()?;
//! # let dir = scratch.path().join("project");
//! std::fs::create_dir_all(dir.join("src"))?;
//! std::fs::write(dir.join("src/main.rs"), "fn main() {}\n")?;
//!
//! let usage = walk::usage(&dir)?;
//! assert_eq!((usage.dirs, usage.files), (2, 1));
//! assert!(usage.apparent_bytes >= 13);
//! assert!(usage.errors.is_empty() && usage.mount_points.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What is counted
//!
//! - **Sizes** are disk usage, `st_blocks × 512` ([`Usage::disk_bytes`]),
//!   and apparent size, `st_size` ([`Usage::apparent_bytes`]), of every
//!   inode in the tree, directories and the entry itself included: what
//!   `du -sxB1` and `du -sxB1 --apparent-size` print.
//! - **Hard links** count once: an inode with more than one link is counted
//!   at its first sighting only. The set of inodes already counted is a
//!   [`HardLinks`] the caller passes in, so that measuring several entries
//!   with one set gives what `du -x --max-depth=1` gives for them (a
//!   hard-linked inode is counted in the first entry, in walking order, that
//!   holds it). Only inodes with more than one link go into the set.
//! - **One filesystem**: the walk never enters a directory whose device
//!   differs from the entry's, nor one on another mount of the same device
//!   (a bind mount: compared by the mount id `statx` reports, Linux 5.8+).
//!   Such a mount point is neither counted nor entered; its path is listed
//!   in [`Usage::mount_points`]. (`du -x` compares devices only, and so
//!   enters bind mounts of the same filesystem.)
//! - **Symlinks** are counted as themselves, never followed. FIFOs,
//!   sockets and devices are `statx`ed by name, never opened.
//! - **Newest mtime**: the latest modification time of any inode in the
//!   tree, the entry included ([`Usage::newest_mtime_ms`]).
//!
//! # Visiting
//!
//! The walk calls a visitor for every name it reaches, the entry itself
//! first (depth 0), with the inode's device, inode number and type, and its
//! path on demand ([`Visit::path`]). The visitor's [`WalkState`] decides:
//! go on, do not descend into this directory, or stop the walk. The scan
//! uses this to check every inode against the set of files processes hold.
//!
//! # Errors
//!
//! Only a failure on the entry itself (it cannot be `statx`ed, or, being a
//! directory, opened) is an `Err`. Failures inside the tree (`EACCES` on an
//! unreadable directory, `ENOENT` when something vanishes during the walk)
//! are collected in [`Usage::errors`] and counted in
//! [`Usage::error_count`], and the walk goes on.
//!
//! # Design
//!
//! The walk is iterative: a stack of directories, each listed completely
//! (`getdents64` into one reused buffer) before any of its subdirectories is
//! entered, with the names of the subdirectories still to enter kept in one
//! byte arena. Memory is bounded by the depth of the tree and the number of
//! subdirectories of the directories on the current path (plus the
//! hard-link set), not by the size of the tree; no allocation happens per
//! entry. At most 32 directories are open per walk besides the entry: a
//! directory deeper in the stack is closed and reopened through `..` of its
//! child (checked to be the same inode) when the walk comes back to it, so
//! a 100,000-deep tree needs neither a deep call stack nor 100,000
//! descriptors.
//!
//! Every call is descriptor-relative: one `statx(AT_SYMLINK_NOFOLLOW)` per
//! inode, with only the fields the walk needs; `openat2` with
//! `RESOLVE_NO_XDEV` (so a mount cannot appear between the `statx` and the
//! open) and `O_NOATIME` where the kernel permits it (the directory's owner
//! or `CAP_FOWNER`; it is dropped on `EPERM`).
//!
//! # Platform behavior
//!
//! Linux only in what it guarantees: on kernels without `statx` (< 4.11) it
//! falls back to `fstatat` and cannot tell bind mounts of the same
//! filesystem (no mount id); without `openat2` (< 5.6) it opens with
//! `openat` and checks device and mount id afterwards.

mod links;
mod many;
mod walker;

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

pub use links::HardLinks;
pub use many::usage_many;
pub(crate) use many::{cores, usage_many_after};
pub use walker::{Visit, Walker};

use crate::error::Result;

/// What a visitor tells the walk to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalkState {
    /// Count the inode and, if it is a directory, walk into it.
    #[default]
    Continue,
    /// Count the inode but do not walk into it (the same as `Continue` for
    /// anything but a directory).
    Skip,
    /// Stop the walk now, without counting this inode; the [`Usage`] covers
    /// what was counted before and has [`Usage::stopped`] set.
    Quit,
}

/// The type of an inode, as the walk saw it (never following symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A named pipe (never opened).
    Fifo,
    /// A unix domain socket (never opened).
    Socket,
    /// A character device (never opened).
    CharDevice,
    /// A block device (never opened).
    BlockDevice,
    /// Something the kernel reported with an unknown type.
    Unknown,
}

impl FileKind {
    fn from_type(kind: rustix::fs::FileType) -> FileKind {
        use rustix::fs::FileType as T;
        match kind {
            T::RegularFile => FileKind::File,
            T::Directory => FileKind::Dir,
            T::Symlink => FileKind::Symlink,
            T::Fifo => FileKind::Fifo,
            T::Socket => FileKind::Socket,
            T::CharacterDevice => FileKind::CharDevice,
            T::BlockDevice => FileKind::BlockDevice,
            _ => FileKind::Unknown,
        }
    }
}

/// At most this many [`WalkError`]s are kept per walk; the rest are only
/// counted in [`Usage::error_count`].
pub const MAX_ERRORS: usize = 32;

/// The disk usage of one entry and what the walk met inside it.
///
/// The default value is all zeros and empty lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usage {
    /// Disk usage in bytes: `st_blocks × 512` summed over the inodes
    /// counted (like `du -B1`).
    pub disk_bytes: u64,
    /// Apparent size in bytes: `st_size` summed over the inodes counted
    /// (like `du -B1 --apparent-size`).
    pub apparent_bytes: u64,
    /// Non-directory inodes counted (regular files, symlinks, FIFOs,
    /// sockets, devices), each hard-linked inode once.
    pub files: u64,
    /// Directories counted, the entry itself included.
    pub dirs: u64,
    /// The newest modification time among the inodes counted, in
    /// milliseconds since the Unix epoch; `None` only when nothing was
    /// counted (the visitor quit at the entry itself).
    pub newest_mtime_ms: Option<i64>,
    /// Mount points met inside the tree, relative to the entry: neither
    /// counted nor entered. `.` when the entry itself is one and the
    /// visitor skipped it ([`Visit::is_mount_point`]).
    pub mount_points: Vec<PathBuf>,
    /// The first [`MAX_ERRORS`] failures inside the tree, in walking order.
    pub errors: Vec<WalkError>,
    /// How many failures there were in all (at least `errors.len()`).
    pub error_count: u64,
    /// Whether the visitor stopped the walk with [`WalkState::Quit`]: the
    /// totals then cover only part of the tree.
    pub stopped: bool,
}

impl Usage {
    /// Records a failure inside the tree (kept if there is room).
    fn push_error(&mut self, error: impl FnOnce() -> WalkError) {
        self.error_count += 1;
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(error());
        }
    }
}

/// A failure on one inode inside a tree; the walk went on without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkError {
    path: PathBuf,
    operation: &'static str,
    errno: i32,
}

impl WalkError {
    /// Where it happened, relative to the entry walked (`""` is the entry
    /// itself).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the walk was doing, e.g. `cannot open directory`.
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The system error number (`EACCES` is 13).
    pub fn raw_os_error(&self) -> i32 {
        self.errno
    }

    /// The system error as an [`io::Error`].
    pub fn io_error(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno)
    }
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.operation,
            self.path.display(),
            self.io_error()
        )
    }
}

impl std::error::Error for WalkError {}

/// Measures the entry `name` of the open directory `parent`, counting hard
/// links against `links` and asking `visit` about every inode.
///
/// A convenience for [`Walker::usage_at`] with a fresh [`Walker`]; keep one
/// walker per thread to reuse its buffers across many entries.
///
/// ```
/// use std::os::fd::AsFd;
/// use sandkeeper_engine::walk::{self, HardLinks, WalkState};
/// # let scratch = sandkeeper_engine::Sandbox::new()?;
/// # let root = scratch.path();
/// std::fs::create_dir(root.join("a"))?;
/// std::fs::write(root.join("a/data"), vec![1u8; 10_000])?;
/// std::fs::create_dir(root.join("b"))?;
/// std::fs::hard_link(root.join("a/data"), root.join("b/same-data"))?;
///
/// let parent = std::fs::File::open(root)?;
/// let mut links = HardLinks::new();
/// let mut files = 0;
/// let mut visit = |v: &walk::Visit<'_>| {
///     files += usize::from(v.kind() == walk::FileKind::File);
///     WalkState::Continue
/// };
/// let a = walk::usage_at(parent.as_fd(), "a".as_ref(), &mut links, &mut visit)?;
/// let b = walk::usage_at(parent.as_fd(), "b".as_ref(), &mut links, &mut visit)?;
/// assert!(a.apparent_bytes > 10_000 && b.apparent_bytes < 10_000, "counted in `a` only");
/// assert_eq!((a.files, b.files), (1, 0));
/// assert_eq!(files, 2, "the visitor saw both names");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// When `name` cannot be `statx`ed or, being a directory, opened; the
/// error's path is `name`. Failures inside the tree are in
/// [`Usage::errors`].
pub fn usage_at(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    links: &mut HardLinks,
    visit: &mut dyn FnMut(&Visit<'_>) -> WalkState,
) -> Result<Usage> {
    Walker::new().usage_at(parent, name, links, visit)
}

/// Measures the file or tree at `path` on its own (a fresh [`HardLinks`],
/// every inode visited).
///
/// `path` itself is not followed if it is a symlink (the link is
/// measured); its parent directories are.
///
/// # Errors
///
/// When `path`'s parent cannot be opened, or `path` cannot be `statx`ed or,
/// being a directory, opened; the error carries `path`.
pub fn usage(path: &Path) -> Result<Usage> {
    use crate::error::IoResultExt;
    use std::os::fd::AsFd;

    let (parent, name) = match path.file_name() {
        Some(name) => match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => (p, name),
            _ => (Path::new("."), name),
        },
        // `/`, `..` and the like: measure `.` inside it.
        None => (path, OsStr::new(".")),
    };
    let parent_fd = rustix::fs::open(
        parent,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .with_path("cannot open directory", || parent)?;
    let mut links = HardLinks::new();
    Walker::new()
        .usage_at(parent_fd.as_fd(), name, &mut links, &mut |_| {
            WalkState::Continue
        })
        .map_err(|e| e.at(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Usage>();
        check::<WalkError>();
        check::<HardLinks>();
        check::<Walker>();
        check::<WalkState>();
        check::<FileKind>();
    }

    #[test]
    fn file_kinds_from_types() {
        use rustix::fs::FileType as T;
        let cases = [
            (T::RegularFile, FileKind::File),
            (T::Directory, FileKind::Dir),
            (T::Symlink, FileKind::Symlink),
            (T::Fifo, FileKind::Fifo),
            (T::Socket, FileKind::Socket),
            (T::CharacterDevice, FileKind::CharDevice),
            (T::BlockDevice, FileKind::BlockDevice),
            (T::Unknown, FileKind::Unknown),
        ];
        for (kind, want) in cases {
            assert_eq!(FileKind::from_type(kind), want, "{kind:?}");
        }
    }

    #[test]
    fn errors_are_bounded_and_counted() {
        let mut usage = Usage::default();
        for i in 0..MAX_ERRORS + 10 {
            usage.push_error(|| WalkError {
                path: PathBuf::from(format!("d{i}")),
                operation: "cannot open directory",
                errno: 13,
            });
        }
        assert_eq!(usage.errors.len(), MAX_ERRORS);
        assert_eq!(usage.error_count, MAX_ERRORS as u64 + 10);
        assert_eq!(usage.errors[0].path(), Path::new("d0"));
        let text = usage.errors[0].to_string();
        assert!(text.starts_with("cannot open directory: d0: "), "{text}");
        assert!(text.contains("Permission denied"), "{text}");
    }
}
