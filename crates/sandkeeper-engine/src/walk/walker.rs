//! The iterative walk: a stack of directories, a reused listing buffer and
//! an arena of subdirectory names still to enter.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::fs::{FileType, RawDir};
use rustix::io::Errno;

use super::links::HardLinks;
use super::{FileKind, Usage, WalkError, WalkState};
use crate::error::{Error, ErrorKind, IoResultExt, Result};
use crate::fs_at::{self, Atime, Fence, FileId, Meta, NoStatx, Opened};

/// Directories kept open per walk besides the entry itself; deeper ones are
/// closed and reopened through `..` when the walk comes back to them.
const MAX_OPEN: usize = 32;

/// The walker only measures: on a kernel without `statx` it goes on with
/// `fstatat`, comparing devices only (see the module's platform notes).
const NO_STATX: NoStatx = NoStatx::Fstatat;

/// The `getdents64` buffer: large enough for hundreds of names per call.
const LISTING_BUFFER: usize = 64 * 1024;

/// Measures entries one after the other, reusing its buffers: keep one per
/// thread.
///
/// A walker holds a 64 KiB listing buffer, the stack of directories being
/// walked and the names of subdirectories still to enter; all of them are
/// emptied, not freed, between entries.
///
/// ```
/// use std::os::fd::AsFd;
/// use sandkeeper_engine::walk::{HardLinks, WalkState, Walker};
/// # let scratch = sandkeeper_engine::Sandbox::new()?;
/// # let root = scratch.path();
/// # for name in ["a", "b", "c"] { std::fs::create_dir(root.join(name))?; }
/// let parent = std::fs::File::open(root)?;
/// let mut walker = Walker::new();
/// let mut links = HardLinks::new();
/// for name in ["a", "b", "c"] {
///     let usage = walker.usage_at(parent.as_fd(), name.as_ref(), &mut links,
///         &mut |_| WalkState::Continue)?;
///     assert_eq!(usage.dirs, 1);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Walker {
    listing: Vec<u8>,
    /// Child records: `ino: u64`, `uid: u32`, `len: u32`, name, NUL.
    arena: Vec<u8>,
    stack: Vec<Frame>,
    euid: u32,
}

/// A directory on the walk's current path.
#[derive(Debug)]
struct Frame {
    /// Open while the frame is among the deepest [`MAX_OPEN`] (or is the
    /// entry); reopened through a child's `..` when needed again.
    fd: Option<OwnedFd>,
    ino: u64,
    /// The frame's name: a range of the arena (empty for the entry).
    name: (usize, usize),
    /// The frame's child records: `start..end` of the arena, `next` the
    /// first not yet entered.
    start: usize,
    next: usize,
    end: usize,
}

/// One inode the walk reached, shown to the visitor.
///
/// Valid only during the visitor call; [`Visit::path`] builds the path on
/// demand, so a visitor that only checks `(dev, ino)` costs no allocation.
pub struct Visit<'a> {
    meta: &'a Meta,
    name: &'a OsStr,
    depth: usize,
    /// The directories from the entry down to the one holding this inode
    /// (empty for the entry itself).
    ancestors: &'a [Frame],
    arena: &'a [u8],
    mount_point: bool,
    /// The entry's own descriptor (depth 0, a directory the walk opened).
    dir: Option<BorrowedFd<'a>>,
}

impl Visit<'_> {
    /// Whether the inode is the root of a mount other than its directory's
    /// (compared by mount id where the kernel reports it, else by device).
    /// Only ever true for the entry itself (depth 0): mount points deeper
    /// down are neither visited nor entered
    /// ([`Usage::mount_points`](super::Usage)). The walk enters such an
    /// entry (measuring a mount is allowed) unless the visitor returns
    /// [`WalkState::Skip`] for it: then the entry is counted as itself and
    /// listed in `mount_points` as `.`. Nothing above asked the mounted
    /// filesystem anything but a cached `statx`, so a dead FUSE or network
    /// filesystem cannot block the visit.
    pub fn is_mount_point(&self) -> bool {
        self.mount_point
    }

    /// The device the inode is on (`st_dev`).
    pub fn dev(&self) -> u64 {
        self.meta.id.dev
    }

    /// The inode number (`st_ino`).
    pub fn ino(&self) -> u64 {
        self.meta.id.ino
    }

    /// The inode's type.
    pub fn kind(&self) -> FileKind {
        FileKind::from_type(self.meta.kind)
    }

    /// The inode's link count (`st_nlink`): a file with more than one may
    /// be seen again under another name, and is counted only once.
    pub fn nlink(&self) -> u64 {
        self.meta.nlink
    }

    /// Disk usage of this inode alone (`st_blocks × 512`).
    pub fn disk_bytes(&self) -> u64 {
        self.meta.disk
    }

    /// Modification time, milliseconds since the Unix epoch.
    pub fn mtime_ms(&self) -> i64 {
        self.meta.mtime_ms
    }

    /// The owner's user id.
    pub fn uid(&self) -> u32 {
        self.meta.uid
    }

    /// The permission bits (`st_mode & 0o7777`).
    pub fn mode(&self) -> u32 {
        self.meta.perm
    }

    /// How deep the inode is: 0 for the entry itself, 1 for its children.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The entry's own directory, open for reading (`O_DIRECTORY`, no
    /// symlink followed, checked to be the inode `statx`ed): at depth 0
    /// only, for a directory the walk could open and is about to list.
    /// `None` for anything else: deeper inodes, files, a mount point (not
    /// opened before its visit: the mounted filesystem may not answer), a
    /// directory that could not be opened (the walk's result is then that
    /// error). What the visitor needs to read from the entry
    /// itself (a record inside it, an attribute) it reads through this,
    /// without opening the name a second time.
    pub fn dir(&self) -> Option<BorrowedFd<'_>> {
        self.dir
    }

    /// The inode's name in its directory (the entry's own name at depth 0).
    pub fn name(&self) -> &OsStr {
        self.name
    }

    /// The path relative to the entry (empty for the entry itself), built
    /// anew on each call.
    pub fn path(&self) -> PathBuf {
        if self.depth == 0 {
            return PathBuf::new();
        }
        relative_path(self.ancestors, self.arena, Some(self.name))
    }
}

impl std::fmt::Debug for Visit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Visit")
            .field("path", &self.path())
            .field("dev", &self.dev())
            .field("ino", &self.ino())
            .field("kind", &self.kind())
            .finish()
    }
}

/// The mount the directory `parent` is on; `None` when it cannot be told
/// (every entry then counts as a mount point: fail closed).
pub(super) fn parent_fence_of(parent: BorrowedFd<'_>) -> Option<Fence> {
    fs_at::fstat(parent, NO_STATX).ok().map(|p| Fence::of(&p))
}

/// The path of `leaf` (or of the last ancestor) relative to the entry:
/// the names of `ancestors[1..]`, then `leaf`.
fn relative_path(ancestors: &[Frame], arena: &[u8], leaf: Option<&OsStr>) -> PathBuf {
    let mut path = PathBuf::new();
    for frame in ancestors.iter().skip(1) {
        path.push(OsStr::from_bytes(&arena[frame.name.0..frame.name.1]));
    }
    if let Some(leaf) = leaf {
        path.push(leaf);
    }
    path
}

impl Default for Walker {
    fn default() -> Self {
        Walker::new()
    }
}

/// The state of one walk besides the walker's buffers.
struct Tally<'v> {
    usage: Usage,
    links: &'v mut HardLinks,
    seq: u32,
    visit: &'v mut dyn FnMut(&Visit<'_>) -> WalkState,
    fence: Fence,
    euid: u32,
}

impl Tally<'_> {
    /// Adds one inode to the totals (a hard-linked file only at its first
    /// sighting).
    fn count(&mut self, meta: &Meta) {
        if meta.kind == FileType::Directory {
            self.usage.dirs += 1;
        } else {
            if meta.nlink > 1 && !self.links.claim(meta, self.seq) {
                return;
            }
            self.usage.files += 1;
        }
        self.usage.disk_bytes += meta.disk;
        self.usage.apparent_bytes += meta.size;
        self.usage.newest_mtime_ms = Some(match self.usage.newest_mtime_ms {
            Some(t) => t.max(meta.mtime_ms),
            None => meta.mtime_ms,
        });
    }
}

impl Walker {
    /// A walker with empty buffers (the listing buffer is allocated here,
    /// once).
    pub fn new() -> Walker {
        Walker {
            listing: Vec::with_capacity(LISTING_BUFFER),
            arena: Vec::new(),
            stack: Vec::new(),
            euid: rustix::process::geteuid().as_raw(),
        }
    }

    /// Measures the entry `name` of the open directory `parent`; see
    /// [`usage_at`](super::usage_at) and the [module docs](super).
    ///
    /// # Errors
    ///
    /// When `name` cannot be `statx`ed or, being a directory, opened (or it
    /// contains a NUL byte: [`ErrorKind::InvalidInput`]); the error's path
    /// is `name`.
    pub fn usage_at(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        links: &mut HardLinks,
        visit: &mut dyn FnMut(&Visit<'_>) -> WalkState,
    ) -> Result<Usage> {
        let seq = links.next_seq();
        self.walk(parent, None, name, links, seq, visit)
    }

    /// The walk itself, with hard links claimed for entry number `seq`;
    /// `parent_fence`: the mount `parent` is on, when the caller has it
    /// (`None`: not known, asked here; `Some(None)`: it could not be told).
    pub(super) fn walk(
        &mut self,
        parent: BorrowedFd<'_>,
        parent_fence: Option<Option<Fence>>,
        name: &OsStr,
        links: &mut HardLinks,
        seq: u32,
        visit: &mut dyn FnMut(&Visit<'_>) -> WalkState,
    ) -> Result<Usage> {
        let cname = CString::new(name.as_bytes()).map_err(|_| {
            Error::new(ErrorKind::InvalidInput, "entry name contains a NUL byte").at(name)
        })?;
        let meta = fs_at::stat(parent, &cname, NO_STATX).with_path("cannot inspect", || name)?;
        // A mount on the entry itself is told to the visitor, which may
        // skip it unopened (the `statx` above asked the mounted filesystem
        // nothing). When the parent cannot be told, it counts as one (fail
        // closed).
        let parent_fence = parent_fence.unwrap_or_else(|| parent_fence_of(parent));
        let mount_point = parent_fence.is_none_or(|fence| !fence.admits(&meta));
        // A directory is opened before it is shown, so that the visitor can
        // read the entry through the walk's own descriptor; a mount point
        // only after its visit, if the visitor lets the walk in.
        let atime = Atime::Keep {
            owner: meta.uid,
            euid: self.euid,
        };
        let open = || fs_at::open_dir_checked(parent, &cname, meta.id, atime, NO_STATX);
        let opened = (meta.kind == FileType::Directory && !mount_point).then(open);
        let mut tally = Tally {
            usage: Usage::default(),
            links,
            seq,
            visit,
            fence: Fence::of(&meta),
            euid: self.euid,
        };
        let state = (tally.visit)(&Visit {
            meta: &meta,
            name,
            depth: 0,
            ancestors: &[],
            arena: &[],
            mount_point,
            dir: match &opened {
                Some(Ok(fd)) => Some(fd.as_fd()),
                _ => None,
            },
        });
        if state == WalkState::Quit {
            tally.usage.stopped = true;
            return Ok(tally.usage);
        }
        tally.count(&meta);
        if meta.kind != FileType::Directory || state == WalkState::Skip {
            if mount_point {
                tally.usage.mount_points.push(PathBuf::from("."));
            }
            return Ok(tally.usage);
        }
        // A mount point the visitor let the walk into is opened now: its
        // mount is walked.
        let opened = opened.unwrap_or_else(open);
        let fd = opened.with_path("cannot open directory", || name)?;

        self.stack.clear();
        self.arena.clear();
        self.stack.push(Frame {
            fd: Some(fd),
            ino: meta.id.ino,
            name: (0, 0),
            start: 0,
            next: 0,
            end: 0,
        });
        let result = self.run(&mut tally);
        // Leave no descriptors behind in the walker between entries.
        self.stack.clear();
        self.arena.clear();
        result?;
        Ok(tally.usage)
    }

    /// Walks until the stack is empty or the visitor quits.
    fn run(&mut self, tally: &mut Tally<'_>) -> Result<()> {
        self.list_top(tally);
        while !tally.usage.stopped {
            let Some(top) = self.stack.last_mut() else {
                break;
            };
            if top.next < top.end {
                let record = Record::read(&self.arena, top.next);
                top.next = record.end;
                self.enter(tally, &record);
            } else {
                self.leave(tally);
            }
        }
        Ok(())
    }

    /// Opens the subdirectory `record` of the top frame and lists it.
    fn enter(&mut self, tally: &mut Tally<'_>, record: &Record) {
        let Some(top) = self.stack.last() else { return };
        let name = record.name(&self.arena);
        let Some(dir) = top.fd.as_ref() else {
            // Not reached: the top frame is always open (`leave` reopens it
            // or gives up on what it had left to enter).
            self.soft_error(tally, Some(name), "cannot open directory", Errno::BADF);
            return;
        };
        let atime = Atime::Keep {
            owner: record.uid,
            euid: tally.euid,
        };
        let fd = match fs_at::open_dir(dir.as_fd(), name, atime, &tally.fence, NO_STATX) {
            Ok(Opened::Dir(fd, ())) => fd,
            Ok(Opened::Fenced) => {
                let path = self.path_to(Some(name));
                tally.usage.mount_points.push(path);
                return;
            }
            Err(e) => {
                self.soft_error(tally, Some(name), "cannot open directory", e);
                return;
            }
        };
        let at = self.arena.len();
        self.stack.push(Frame {
            fd: Some(fd),
            ino: record.ino,
            name: record.name_range(),
            start: at,
            next: at,
            end: at,
        });
        // Bound the open descriptors: close the one that just left the
        // window (never the entry's, which is frame 0).
        if let Some(old) = self.stack.len().checked_sub(MAX_OPEN + 1) {
            if old > 0 {
                self.stack[old].fd = None;
            }
        }
        self.list_top(tally);
    }

    /// Pops the top frame; reopens the new top through `..` if it was
    /// closed.
    fn leave(&mut self, tally: &mut Tally<'_>) {
        let Some(done) = self.stack.pop() else { return };
        self.arena.truncate(done.start);
        let Some(parent) = self.stack.last() else {
            return;
        };
        if parent.fd.is_some() {
            return;
        }
        // Reopened even when nothing is left to enter in it: its own parent
        // may need reopening through it next.
        let reopened = match &done.fd {
            Some(child) => {
                let want = FileId {
                    dev: tally.fence.dev(),
                    ino: parent.ino,
                };
                fs_at::reopen_parent(child.as_fd(), want, NO_STATX).map(|(fd, _)| fd)
            }
            // The child could not be reopened itself: its error is recorded.
            None => Err(Errno::STALE),
        };
        match reopened {
            Ok(fd) => {
                if let Some(parent) = self.stack.last_mut() {
                    parent.fd = Some(fd);
                }
            }
            Err(e) => {
                if done.fd.is_some() {
                    self.soft_error(tally, None, "cannot reopen directory", e);
                }
                // Give up on the rest of this directory.
                if let Some(parent) = self.stack.last_mut() {
                    parent.next = parent.end;
                }
            }
        }
    }

    /// Lists the top frame: counts and visits every name, records the
    /// subdirectories to enter.
    fn list_top(&mut self, tally: &mut Tally<'_>) {
        let Walker {
            listing,
            arena,
            stack,
            ..
        } = self;
        let Some(frame) = stack.last() else { return };
        let Some(fd) = frame.fd.as_ref() else { return };
        let dir = fd.as_fd();
        let start = arena.len();
        let mut failure = None;
        let mut entries = RawDir::new(dir, listing.spare_capacity_mut());
        while let Some(entry) = entries.next() {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            let cname = entry.file_name();
            let bytes = cname.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let name = OsStr::from_bytes(bytes);
            let meta = match fs_at::stat(dir, cname, NO_STATX) {
                Ok(meta) => meta,
                Err(e) => {
                    tally.usage.push_error(|| WalkError {
                        path: relative_path(stack, arena, Some(name)),
                        operation: "cannot inspect",
                        errno: e.raw_os_error(),
                    });
                    continue;
                }
            };
            if !tally.fence.admits(&meta) {
                tally
                    .usage
                    .mount_points
                    .push(relative_path(stack, arena, Some(name)));
                continue;
            }
            let state = (tally.visit)(&Visit {
                meta: &meta,
                name,
                depth: stack.len(),
                ancestors: stack,
                arena,
                mount_point: false,
                dir: None,
            });
            match state {
                WalkState::Quit => {
                    tally.usage.stopped = true;
                    break;
                }
                WalkState::Skip => tally.count(&meta),
                WalkState::Continue => {
                    tally.count(&meta);
                    if meta.kind == FileType::Directory {
                        Record::write(arena, meta.id.ino, meta.uid, bytes);
                    }
                }
            }
        }
        if let Some(frame) = stack.last_mut() {
            frame.start = start;
            frame.next = start;
            frame.end = arena.len();
        }
        if let Some(e) = failure {
            self.soft_error(tally, None, "cannot read directory", e);
        }
    }

    /// The path of the top frame (or of its child `leaf`), relative to the
    /// entry.
    fn path_to(&self, leaf: Option<&CStr>) -> PathBuf {
        let leaf = leaf.map(|c| OsStr::from_bytes(c.to_bytes()));
        relative_path(&self.stack, &self.arena, leaf)
    }

    fn soft_error(
        &self,
        tally: &mut Tally<'_>,
        leaf: Option<&CStr>,
        operation: &'static str,
        e: Errno,
    ) {
        tally.usage.push_error(|| WalkError {
            path: self.path_to(leaf),
            operation,
            errno: e.raw_os_error(),
        });
    }
}

/// A subdirectory still to enter, as stored in the arena.
struct Record {
    ino: u64,
    uid: u32,
    /// The name with its NUL: `name_at..end`.
    name_at: usize,
    end: usize,
}

impl Record {
    const HEADER: usize = 8 + 4 + 4;

    fn write(arena: &mut Vec<u8>, ino: u64, uid: u32, name: &[u8]) {
        arena.extend_from_slice(&ino.to_ne_bytes());
        arena.extend_from_slice(&uid.to_ne_bytes());
        arena.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        arena.extend_from_slice(name);
        arena.push(0);
    }

    fn read(arena: &[u8], at: usize) -> Record {
        let field = |from: usize, n: usize| &arena[at + from..at + from + n];
        let u32_at = |from| u32::from_ne_bytes(field(from, 4).try_into().unwrap_or_default());
        let ino = u64::from_ne_bytes(field(0, 8).try_into().unwrap_or_default());
        let len = u32_at(12) as usize;
        let name_at = at + Self::HEADER;
        Record {
            ino,
            uid: u32_at(8),
            name_at,
            end: name_at + len + 1,
        }
    }

    fn name<'a>(&self, arena: &'a [u8]) -> &'a CStr {
        // Written with exactly one NUL, at the end; an empty name cannot
        // come from getdents.
        CStr::from_bytes_with_nul(&arena[self.name_at..self.end]).unwrap_or(c"")
    }

    /// The name without its NUL.
    fn name_range(&self) -> (usize, usize) {
        (self.name_at, self.end - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut arena = Vec::new();
        let names: [&[u8]; 3] = [b"a", b"long-name-\xff", b"x"];
        for (i, name) in names.iter().enumerate() {
            Record::write(&mut arena, 1000 + i as u64, 7 * i as u32, name);
        }
        let mut at = 0;
        for (i, name) in names.iter().enumerate() {
            let r = Record::read(&arena, at);
            assert_eq!(r.ino, 1000 + i as u64);
            assert_eq!(r.uid, 7 * i as u32);
            assert_eq!(r.name(&arena).to_bytes(), *name);
            assert_eq!(&arena[r.name_range().0..r.name_range().1], *name);
            at = r.end;
        }
        assert_eq!(at, arena.len());
    }

    #[test]
    fn relative_paths_skip_the_entry() {
        let mut arena = Vec::new();
        Record::write(&mut arena, 1, 0, b"sub");
        let sub = Record::read(&arena, 0);
        let frame = |name| Frame {
            fd: None,
            ino: 0,
            name,
            start: 0,
            next: 0,
            end: 0,
        };
        let stack = [frame((0, 0)), frame(sub.name_range())];
        let cases: [(&[Frame], Option<&str>, &str); 4] = [
            (&stack[..1], None, ""),
            (&stack[..1], Some("f"), "f"),
            (&stack, None, "sub"),
            (&stack, Some("f"), "sub/f"),
        ];
        for (ancestors, leaf, want) in cases {
            let got = relative_path(ancestors, &arena, leaf.map(OsStr::new));
            assert_eq!(got, PathBuf::from(want), "{leaf:?}");
        }
    }
}
