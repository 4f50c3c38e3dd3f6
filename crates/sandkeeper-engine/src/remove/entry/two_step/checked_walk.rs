//! One walk that both checks and deletes a small quarantined entry.
//!
//! [`Quarantined::list`] walks the entry where it waits in the quarantine
//! and keeps, in memory, what it met: every name, each directory open (its
//! descriptor, device and inode from `fstat` on that descriptor), each
//! other inode's identity: the directory's device and the entry's `d_ino`
//! on the filesystems where that is what `stat` reports (tmpfs, ext2/3/4,
//! xfs, btrfs; not when bytes are counted, which needs each file's
//! blocks), else from `statx` of the name. It shows the caller every inode
//! (the caller's in-use check: [`Seen`]), and only when the caller found
//! nothing on any of them and the whole entry was listed is the
//! [`Listing`] handed out, ready to be deleted from memory
//! ([`Listing::remove`]): no second walk, no second listing of any
//! directory, no second open.
//!
//! The bounds ([`Limits`]) bound the memory and the descriptors held: an
//! entry that turns out larger (it grew since the scan), anything that
//! cannot be listed exactly (an error, a name that changed kind between
//! the listing and the `statx`, no descriptor left) or an entry that is
//! its own quarantine is handed back untouched ([`Listed::Unlisted`]) for
//! the two walks of before: the caller's check walk, then
//! [`Quarantined::remove`].
//!
//! # Confinement
//!
//! The walk opens each directory as the remover does (`openat2` with
//! `RESOLVE_BENEATH|RESOLVE_NO_XDEV|RESOLVE_NO_SYMLINKS` relative to its
//! parent's descriptor, then checked by `fstat` to be on the entry's
//! mount); nothing else is opened, nothing is followed, a mount point is
//! never entered (and keeps the entry: it is reported to the caller as the
//! reason). The deletion first renames the entry to its condemned name,
//! then checks, parents first, that every listed directory is still the
//! very inode under its listed name in its listed parent (one `statx`
//! each); then unlinks each directory's listed files through that
//! directory's own descriptor and removes the directories children first
//! (`unlinkat` relative to the parent's descriptor). Every call is one
//! name relative to a descriptor the walk opened inside the entry.
//!
//! Whatever does not go as listed — a directory no longer where it was, a
//! name that became a directory, a directory that is not empty (something
//! was added since it was listed: only a process that already had a
//! descriptor or working directory inside could, and the caller's check
//! looked for those), any error — hands the rest of the entry to the
//! remover as it is now ([`Quarantined::remove`]'s deletion: a fresh
//! listing from the entry's top, every rule of the remover), exactly what
//! became of something added between a check walk and the deletion
//! before.

use std::ffi::{CStr, OsStr};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::fs::{FileType, RawDir};
use rustix::io::Errno;

use super::super::io_error as io_error_at;
use super::Quarantined;
use crate::error::Result;
use crate::fs_at::{self, FileId, Meta, Opened};
use crate::remove::report::{RemovalReport, Tally};
use crate::remove::{ATIME, NO_STATX};

/// The `getdents64` buffer of a listing.
const BUF_SIZE: usize = 32 * 1024;

/// How much a listing may hold; past either bound the entry is handed back
/// unlisted ([`Listed::Unlisted`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Inodes (names) in all, the entry included.
    pub(crate) inodes: usize,
    /// Directories, the entry included: each one's descriptor is held
    /// until it is deleted.
    pub(crate) dirs: usize,
}

/// One inode the listing met, shown to the caller's check.
pub(crate) struct Seen<'l> {
    /// Device and inode: of the opened descriptor for a directory, of a
    /// `statx` of the name for anything else.
    pub(crate) id: (u64, u64),
    /// Its type (a directory, a regular file, …).
    pub(crate) kind: FileType,
    /// The open directory that holds it (the quarantine, for the entry
    /// itself).
    pub(crate) parent: BorrowedFd<'l>,
    /// Its name in `parent`.
    pub(crate) name: &'l CStr,
    dirs: &'l [Dir],
    names: &'l [u8],
    /// Its parent's index in `dirs`; `None` for the entry itself.
    at: Option<usize>,
}

impl Seen<'_> {
    /// Its path relative to the entry (empty for the entry itself).
    pub(crate) fn path(&self) -> PathBuf {
        match self.at {
            None => PathBuf::new(),
            Some(at) => {
                path_of(self.dirs, self.names, at).join(OsStr::from_bytes(self.name.to_bytes()))
            }
        }
    }
}

/// What [`Quarantined::list`] found.
pub(crate) enum Listed<'a> {
    /// Listed whole, and the check found nothing on any inode: ready to be
    /// deleted.
    Clear(Listing<'a>),
    /// The check found something (or a mount point is inside): why. The
    /// entry is untouched.
    Kept(String, Quarantined<'a>),
    /// Not listed exactly (too large, an error, a name that changed kind,
    /// its own quarantine): untouched, to be checked and removed the
    /// two-walk way.
    Unlisted(Quarantined<'a>),
}

/// A directory of the listing.
struct Dir {
    /// Held from its listing to its deletion.
    fd: Option<OwnedFd>,
    id: FileId,
    /// Disk usage, for the bytes freed.
    disk: u64,
    /// Index of its parent (`0` for the entry's children; the entry's own
    /// is unused).
    parent: usize,
    /// Its name with the NUL, in `names`.
    name: (usize, usize),
    /// Its files (everything that is not a directory), in `files`.
    files: (usize, usize),
}

/// What the listing tells of anything but a directory, from its directory
/// entry or a `statx` of its name.
struct Other {
    id: (u64, u64),
    kind: FileType,
    disk: u64,
    nlink: u64,
}

/// Anything but a directory, listed in its directory.
struct File {
    name: (usize, usize),
    disk: u64,
    nlink: u64,
}

/// A quarantined entry listed whole and cleared by the caller's check;
/// [`remove`](Listing::remove) deletes it from the listing. Dropped, it
/// stays pending in the quarantine (as its [`Quarantined`] would).
pub(crate) struct Listing<'a> {
    q: Quarantined<'a>,
    /// The entry's own metadata (its descriptor is `dirs[0].fd`).
    root: Meta,
    dirs: Vec<Dir>,
    files: Vec<File>,
    names: Vec<u8>,
}

fn name_at(names: &[u8], (from, to): (usize, usize)) -> &CStr {
    // Written with exactly one NUL, at the end (copied from a `CStr`).
    CStr::from_bytes_with_nul(&names[from..to]).unwrap_or(c"")
}

fn push_name(names: &mut Vec<u8>, name: &CStr) -> (usize, usize) {
    let from = names.len();
    names.extend_from_slice(name.to_bytes_with_nul());
    (from, names.len())
}

/// The path of directory `at` relative to the entry.
/// Why a listing stops at `name` in the directory `at`: a mount point
/// (never entered; the entry is kept).
fn mount_point_inside(dirs: &[Dir], names: &[u8], at: usize, name: &CStr) -> Stop {
    let path = path_of(dirs, names, at).join(OsStr::from_bytes(name.to_bytes()));
    Stop::Kept(format!("a mount point inside ({})", path.display()))
}

fn path_of(dirs: &[Dir], names: &[u8], at: usize) -> PathBuf {
    let mut chain = Vec::new();
    let mut i = at;
    while i != 0 {
        chain.push(i);
        i = dirs[i].parent;
    }
    let mut path = PathBuf::new();
    for i in chain.into_iter().rev() {
        path.push(OsStr::from_bytes(name_at(names, dirs[i].name).to_bytes()));
    }
    path
}

/// Why a listing stopped.
enum Stop {
    Kept(String),
    Unlisted,
}

impl<'a> Quarantined<'a> {
    /// Lists the whole entry into memory and shows `check` every inode (see
    /// the [module docs](self)); `check` returns why the entry must be
    /// kept, if it must.
    pub(crate) fn list(
        mut self,
        limits: Limits,
        check: &mut dyn FnMut(&Seen<'_>) -> Option<String>,
    ) -> Listed<'a> {
        // A file, or a directory that is its own quarantine: not this way.
        if self.own.is_some() || self.q.is_none() {
            return Listed::Unlisted(self);
        }
        let Some((fd, root)) = self.dir.take() else {
            return Listed::Unlisted(self);
        };
        let mut dirs = vec![Dir {
            fd: Some(fd),
            id: root.id,
            disk: root.disk,
            parent: 0,
            name: (0, 0),
            files: (0, 0),
        }];
        let mut files = Vec::new();
        let mut names = Vec::new();
        let stop = walk(
            &self, &root, limits, check, &mut dirs, &mut files, &mut names,
        );
        match stop {
            None => Listed::Clear(Listing {
                q: self,
                root,
                dirs,
                files,
                names,
            }),
            Some(stop) => {
                // Every other descriptor goes; the entry's stays with it.
                self.dir = dirs.swap_remove(0).fd.map(|fd| (fd, root));
                match stop {
                    Stop::Kept(why) => Listed::Kept(why, self),
                    Stop::Unlisted => Listed::Unlisted(self),
                }
            }
        }
    }
}

/// The listing walk: the entry itself, then every directory in the order
/// it was found (each listed whole, to the `getdents64` call that returns
/// nothing: a name missed would be a holder missed).
#[allow(clippy::too_many_arguments)]
fn walk(
    q: &Quarantined<'_>,
    root: &Meta,
    limits: Limits,
    check: &mut dyn FnMut(&Seen<'_>) -> Option<String>,
    dirs: &mut Vec<Dir>,
    files: &mut Vec<File>,
    names: &mut Vec<u8>,
) -> Option<Stop> {
    let fence = q.job.fence;
    // The entry itself: still the inode claimed, and nothing mounted on
    // it (as the check walk asked of the name in the quarantine).
    let qdir = q.dir();
    let unique = q.unique.as_c_str();
    // (The quarantine's own mount is known from its opening: a
    // descriptor's device and mount never change.)
    let Some(quarantine) = q.q.as_ref() else {
        return Some(Stop::Unlisted);
    };
    match fs_at::stat(qdir, unique, NO_STATX) {
        Ok(st) if st.id == root.id && st.is_dir() => {
            if !fs_at::Fence::of(quarantine.meta()).admits(&st) {
                return Some(Stop::Kept("a filesystem is mounted on it".into()));
            }
        }
        _ => return Some(Stop::Unlisted),
    }
    let seen = Seen {
        id: (root.id.dev, root.id.ino),
        kind: FileType::Directory,
        parent: qdir,
        name: unique,
        dirs: &[],
        names: &[],
        at: None,
    };
    if let Some(why) = check(&seen) {
        return Some(Stop::Kept(why));
    }
    let by_dirent = !q.job.plan.count_bytes && dirents_name_inodes(dirs[0].fd.as_ref());
    let mut buf: Vec<MaybeUninit<u8>> = vec![MaybeUninit::uninit(); BUF_SIZE];
    let mut inodes = 1usize;
    let mut at = 0;
    while at < dirs.len() {
        let Some(fd) = dirs[at].fd.take() else {
            return Some(Stop::Unlisted);
        };
        let first = files.len();
        let listed = list_dir(
            fd.as_fd(),
            at,
            &fence,
            by_dirent,
            limits,
            &mut inodes,
            &mut buf,
            check,
            dirs,
            files,
            names,
        );
        dirs[at].fd = Some(fd);
        dirs[at].files = (first, files.len());
        if let Some(stop) = listed {
            return Some(stop);
        }
        at += 1;
    }
    None
}

/// Whether the directory entries of the filesystem `dir` is on carry, as
/// `d_ino`, the inode number `stat` reports for the name (and `d_type` its
/// type): the local filesystems that always do. Not overlayfs (whose
/// `d_ino` may be a lower layer's), FUSE, or network filesystems: there
/// every name is `statx`ed.
fn dirents_name_inodes(dir: Option<&OwnedFd>) -> bool {
    const TMPFS: u64 = 0x0102_1994;
    const EXT2_3_4: u64 = 0xEF53;
    const XFS: u64 = 0x5846_5342;
    const BTRFS: u64 = 0x9123_683E;
    dir.and_then(|fd| rustix::fs::fstatfs(fd).ok())
        .is_some_and(|st| matches!(st.f_type as u64, TMPFS | EXT2_3_4 | XFS | BTRFS))
}

/// Lists the directory `fd` (index `at`): opens and shows each
/// subdirectory, shows everything else: by its directory entry when
/// `by_dirent` (its identity is the directory's device and the entry's
/// inode number, its type the entry's; see [`dirents_name_inodes`]),
/// else as `statx` describes the name.
#[allow(clippy::too_many_arguments)]
fn list_dir(
    fd: BorrowedFd<'_>,
    at: usize,
    fence: &fs_at::Fence,
    by_dirent: bool,
    limits: Limits,
    inodes: &mut usize,
    buf: &mut [MaybeUninit<u8>],
    check: &mut dyn FnMut(&Seen<'_>) -> Option<String>,
    dirs: &mut Vec<Dir>,
    files: &mut Vec<File>,
    names: &mut Vec<u8>,
) -> Option<Stop> {
    // The entry's descriptor came from the move into the quarantine;
    // every other one was opened just now, at its start.
    if at == 0 && fs_at::rewind(fd).is_err() {
        return Some(Stop::Unlisted);
    }
    let mut listing = RawDir::new(fd, buf);
    while let Some(entry) = listing.next() {
        let Ok(entry) = entry else {
            return Some(Stop::Unlisted);
        };
        let name = entry.file_name();
        if fs_at::is_dot(name.to_bytes()) {
            continue;
        }
        *inodes += 1;
        if *inodes > limits.inodes {
            return Some(Stop::Unlisted);
        }
        // A directory is opened (its identity is that of what was
        // opened); anything else is told by its directory entry where that
        // is the truth (`by_dirent`), else looked at by name; never opened.
        let kind = entry.file_type();
        let other = if kind == FileType::Directory {
            None
        } else if by_dirent && kind != FileType::Unknown {
            Some(Other {
                id: (fence.dev(), entry.ino()),
                kind,
                // Bytes are not counted (`by_dirent`).
                disk: 0,
                nlink: 1,
            })
        } else {
            match fs_at::stat(fd, name, NO_STATX) {
                // A directory after all: opened below.
                Ok(meta) if meta.is_dir() => None,
                Ok(meta) if !fence.admits(&meta) => {
                    return Some(mount_point_inside(dirs, names, at, name))
                }
                Ok(meta) => Some(Other {
                    id: (meta.id.dev, meta.id.ino),
                    kind: meta.kind,
                    disk: meta.disk,
                    nlink: meta.nlink,
                }),
                Err(_) => return Some(Stop::Unlisted),
            }
        };
        match other {
            Some(other) => {
                let seen = Seen {
                    id: other.id,
                    kind: other.kind,
                    parent: fd,
                    name,
                    dirs,
                    names,
                    at: Some(at),
                };
                if let Some(why) = check(&seen) {
                    return Some(Stop::Kept(why));
                }
                let name = push_name(names, name);
                files.push(File {
                    name,
                    disk: other.disk,
                    nlink: other.nlink,
                });
            }
            _ => {
                if dirs.len() >= limits.dirs {
                    return Some(Stop::Unlisted);
                }
                let (sub, st) = match fs_at::open_dir_stat(fd, name, ATIME, fence, NO_STATX) {
                    Ok(Opened::Dir(sub, st)) => (sub, st),
                    Ok(Opened::Fenced) => return Some(mount_point_inside(dirs, names, at, name)),
                    // Not a directory any more, unreadable, out of
                    // descriptors, …: the two walks decide.
                    Err(_) => return Some(Stop::Unlisted),
                };
                let seen = Seen {
                    id: (st.id.dev, st.id.ino),
                    kind: FileType::Directory,
                    parent: fd,
                    name,
                    dirs,
                    names,
                    at: Some(at),
                };
                if let Some(why) = check(&seen) {
                    return Some(Stop::Kept(why));
                }
                let name = push_name(names, name);
                dirs.push(Dir {
                    fd: Some(sub),
                    id: st.id,
                    disk: st.disk,
                    parent: at,
                    name,
                    files: (0, 0),
                });
            }
        }
    }
    None
}

impl<'a> Listing<'a> {
    /// Renames the entry to a condemned name, deleting nothing yet (see
    /// [`Quarantined::condemn`]); [`remove`](Self::remove) then deletes it.
    ///
    /// # Errors
    ///
    /// When the rename fails: it stays pending, and nothing was removed.
    pub(crate) fn condemn(&mut self) -> Result<()> {
        self.q.condemn()
    }

    /// How many descriptors the listing holds (its directories'), until
    /// it is deleted or given up.
    pub(crate) fn descriptors(&self) -> usize {
        self.dirs.iter().filter(|d| d.fd.is_some()).count()
    }

    /// The quarantined entry, for what it is asked by path.
    pub(crate) fn quarantined(&self) -> &Quarantined<'a> {
        &self.q
    }

    /// Gives up the listing (its descriptors are closed): the entry is
    /// left as its [`Quarantined`] handle, to be put back.
    pub(crate) fn into_quarantined(self) -> Quarantined<'a> {
        let Listing {
            mut q,
            root,
            mut dirs,
            ..
        } = self;
        // The entry's own descriptor (and with it its claim's lock) goes
        // back to its handle.
        q.dir = dirs
            .first_mut()
            .and_then(|d| d.fd.take())
            .map(|fd| (fd, root));
        q
    }

    /// Deletes the entry from the listing (see the [module docs](self)):
    /// renamed to a condemned name first, exactly as
    /// [`Quarantined::remove`] does; what does not go as listed is left to
    /// that removal's deletion, which lists it afresh.
    ///
    /// # Errors
    ///
    /// When it cannot be renamed to its condemned name (then nothing was
    /// removed and it stays pending).
    pub(crate) fn remove(self) -> Result<RemovalReport> {
        let Listing {
            mut q,
            root,
            mut dirs,
            files,
            names,
        } = self;
        let Some(quarantine) = q.q.take() else {
            // Not reached: a listing is only made of an entry in a
            // quarantine.
            return Err(io_error_at(
                "is no longer in the quarantine",
                Errno::NOENT,
                q.job.display,
            ));
        };
        if !q.condemned {
            if let Err(errno) = super::condemn_in(quarantine.fd(), &mut q.unique) {
                drop(quarantine);
                return Err(io_error_at(
                    "cannot mark as condemned in the quarantine; left pending there",
                    errno,
                    q.job.display,
                ));
            }
        }
        let condemned = std::mem::take(&mut q.unique);
        let mut tally = Tally::default();
        // Parents first: every listed directory must still be that inode
        // under its name in its parent, or nothing is deleted from the
        // listing (the remover lists what is there now).
        let mut as_listed = (1..dirs.len()).all(|i| {
            let parent = dirs[dirs[i].parent].fd.as_ref().map(|fd| fd.as_fd());
            parent.is_some_and(|parent| {
                fs_at::stat(parent, name_at(&names, dirs[i].name), NO_STATX)
                    .is_ok_and(|st| st.is_dir() && st.id == dirs[i].id)
            })
        });
        if as_listed {
            // Children first: a directory's index is above its parent's.
            for i in (1..dirs.len()).rev() {
                let Some(fd) = dirs[i].fd.take() else {
                    as_listed = false;
                    continue;
                };
                if !unlink_files(
                    fd.as_fd(),
                    &files[dirs[i].files.0..dirs[i].files.1],
                    &names,
                    &mut tally,
                ) {
                    as_listed = false;
                }
                drop(fd);
                let parent = dirs[dirs[i].parent].fd.as_ref().map(|fd| fd.as_fd());
                let removed = parent.map_or(Err(Errno::BADF), |parent| {
                    fs_at::rmdir(parent, name_at(&names, dirs[i].name))
                });
                match removed {
                    Ok(()) => {
                        tally.counts.dirs += 1;
                        tally.counts.bytes += dirs[i].disk;
                    }
                    // Someone who could reach it removed it.
                    Err(Errno::NOENT) => {}
                    Err(_) => as_listed = false,
                }
            }
        }
        let own = dirs[0].files;
        let root_fd = dirs.swap_remove(0).fd;
        drop(dirs);
        let Some(root_fd) = root_fd else {
            // Not reached: the entry's descriptor is held to the end.
            drop(quarantine);
            return Err(io_error_at(
                "lost its descriptor; left condemned in the quarantine",
                Errno::BADF,
                q.job.display,
            ));
        };
        // The entry's own files, then the entry.
        if as_listed && unlink_files(root_fd.as_fd(), &files[own.0..own.1], &names, &mut tally) {
            match fs_at::rmdir(quarantine.fd(), &condemned) {
                Ok(()) => {
                    tally.counts.dirs += 1;
                    tally.counts.bytes += root.disk;
                    drop(root_fd);
                    quarantine.close(q.job.parent);
                    return Ok(q.job.report(tally, None));
                }
                // Only processes that had it open before could reach it
                // once it left its name; one of them removed it.
                Err(Errno::NOENT) => {
                    drop(root_fd);
                    quarantine.close(q.job.parent);
                    return Ok(q.job.report(tally, None));
                }
                Err(_) => {}
            }
        }
        // What did not go as listed: the remover, on what is there now.
        let counted = tally.finished(q.job.plan.count_bytes).counts;
        let mut report = q.job.delete_dir(quarantine, condemned, root_fd, root)?;
        report.removed.add(&counted);
        Ok(report)
    }
}

/// Unlinks `files` (listed in the directory `fd`) by name; returns whether
/// every one went (or was gone already).
fn unlink_files(fd: BorrowedFd<'_>, files: &[File], names: &[u8], tally: &mut Tally) -> bool {
    let mut all = true;
    for file in files {
        match fs_at::unlink(fd, name_at(names, file.name)) {
            Ok(()) => {
                tally.counts.files += 1;
                if file.nlink <= 1 {
                    tally.counts.bytes += file.disk;
                }
            }
            Err(Errno::NOENT) => {}
            // A directory now, not writable, …: the remover decides.
            Err(_) => all = false,
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::process::Stdio;

    use super::*;
    use crate::remove::{quarantine_entry, RemoveOptions};
    use sandkeeper_testkit::privilege::{require_root, setpriv_nobody, NOBODY};
    use sandkeeper_testkit::scratch::Scratch;

    const LIMITS: Limits = Limits {
        inodes: 4096,
        dirs: 128,
    };

    /// `entry/a/b/c/file`, `entry/a/x`, `entry/top`.
    fn tree(root: &Path) {
        fs::create_dir_all(root.join("entry/a/b/c")).unwrap();
        fs::write(root.join("entry/a/b/c/file"), b"deep").unwrap();
        fs::write(root.join("entry/a/x"), b"x").unwrap();
        fs::write(root.join("entry/top"), b"top").unwrap();
    }

    fn chown_tree(path: &Path, uid: u32) {
        let mut stack = vec![path.to_owned()];
        while let Some(p) = stack.pop() {
            std::os::unix::fs::lchown(&p, Some(uid), Some(uid)).unwrap();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.extend(fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            }
        }
    }

    #[test]
    fn every_inode_is_shown_before_anything_is_deleted() {
        let scratch = Scratch::reachable_by_others("listed-shown");
        tree(scratch.path());
        let q = quarantine_entry(scratch.fd(), "entry".as_ref(), &RemoveOptions::new()).unwrap();
        let mut seen = Vec::new();
        let listed = q.list(LIMITS, &mut |s| {
            seen.push(s.path());
            None
        });
        let Listed::Clear(listing) = listed else {
            panic!("listed whole")
        };
        seen.sort();
        let want: Vec<PathBuf> = ["", "a", "a/b", "a/b/c", "a/b/c/file", "a/x", "top"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(seen, want);
        let report = listing.remove().unwrap();
        assert!(report.is_complete(), "{:?}", report.left());
        assert_eq!((report.removed().files(), report.removed().dirs()), (3, 4));
        assert!(scratch.names().is_empty(), "{:?}", scratch.names());
    }

    /// What a listing shows of every name is what `lstat` says of it
    /// (device, inode, type), whether it was told by the directory entry
    /// (tmpfs, ext4, …) or `statx`ed (bytes counted): the in-use check
    /// compares exactly these with what processes hold.
    #[test]
    fn the_identity_shown_is_the_one_stat_reports() {
        fn check(base: &Path, count_bytes: bool) {
            tree(base);
            let entry = base.join("entry");
            std::os::unix::fs::symlink("a/x", entry.join("link")).unwrap();
            fs::hard_link(entry.join("top"), entry.join("a/top-again")).unwrap();
            drop(std::os::unix::net::UnixListener::bind(entry.join("a/sock")).unwrap());
            rustix::fs::mknodat(
                rustix::fs::CWD,
                entry.join("fifo"),
                FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap();
            let mut want: Vec<(PathBuf, (u64, u64), FileType)> = Vec::new();
            let mut stack = vec![PathBuf::new()];
            while let Some(rel) = stack.pop() {
                let st = fs::symlink_metadata(entry.join(&rel)).unwrap();
                let kind = FileType::from_raw_mode(st.mode());
                want.push((rel.clone(), (st.dev(), st.ino()), kind));
                if st.is_dir() {
                    for e in fs::read_dir(entry.join(&rel)).unwrap() {
                        stack.push(rel.join(e.unwrap().file_name()));
                    }
                }
            }
            want.sort_by(|a, b| a.0.cmp(&b.0));
            let dir = rustix::fs::open(
                base,
                rustix::fs::OFlags::DIRECTORY,
                rustix::fs::Mode::empty(),
            )
            .unwrap();
            let mut opts = RemoveOptions::new();
            opts.count_bytes(count_bytes);
            let q = quarantine_entry(dir.as_fd(), "entry".as_ref(), &opts).unwrap();
            let mut seen = Vec::new();
            let Listed::Clear(listing) = q.list(LIMITS, &mut |s| {
                seen.push((s.path(), s.id, s.kind));
                None
            }) else {
                panic!("listed whole")
            };
            seen.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(seen, want, "count_bytes {count_bytes}");
            let report = listing.remove().unwrap();
            assert!(report.is_complete(), "{:?}", report.left());
            assert_eq!(report.removed().bytes().is_some(), count_bytes);
            if count_bytes {
                assert!(report.removed().bytes().unwrap() > 0);
            }
        }
        // A tmpfs as root; else a plain directory, like the first.
        for scratch in [
            Scratch::reachable_by_others("listed-identity"),
            Scratch::reachable_by_others("listed-identity-tmpfs").tmpfs("4m"),
        ] {
            for count_bytes in [false, true] {
                let base = scratch.join(format!("{count_bytes}"));
                fs::create_dir(&base).unwrap();
                check(&base, count_bytes);
            }
        }
    }

    #[test]
    fn a_held_inode_deep_inside_keeps_everything() {
        let scratch = Scratch::reachable_by_others("listed-held");
        tree(scratch.path());
        let deep = fs::metadata(scratch.join("entry/a/b/c/file")).unwrap();
        let q = quarantine_entry(scratch.fd(), "entry".as_ref(), &RemoveOptions::new()).unwrap();
        let listed = q.list(LIMITS, &mut |s| {
            (s.id == (deep.dev(), deep.ino())).then(|| format!("held: {}", s.path().display()))
        });
        let Listed::Kept(why, q) = listed else {
            panic!("kept")
        };
        assert_eq!(why, "held: a/b/c/file");
        assert_eq!(q.restore(), crate::remove::Restore::Restored);
        for file in ["entry/a/b/c/file", "entry/a/x", "entry/top"] {
            assert!(scratch.join(file).is_file(), "{file} is still there");
        }
    }

    #[test]
    fn larger_than_the_limits_is_handed_back_unlisted() {
        let scratch = Scratch::reachable_by_others("listed-large");
        tree(scratch.path());
        for limits in [
            Limits {
                inodes: 6,
                dirs: 128,
            },
            Limits {
                inodes: 4096,
                dirs: 3,
            },
        ] {
            let q =
                quarantine_entry(scratch.fd(), "entry".as_ref(), &RemoveOptions::new()).unwrap();
            let Listed::Unlisted(q) = q.list(limits, &mut |_| None) else {
                panic!("{limits:?}: unlisted")
            };
            assert!(q.is_dir(), "its descriptor is still with it");
            assert_eq!(q.restore(), crate::remove::Restore::Restored);
        }
        assert!(scratch.join("entry/a/b/c/file").is_file());
    }

    /// Something added deep inside after the listing (by a process that
    /// had a directory there open) goes too, as the remover after a check
    /// walk removes it.
    #[test]
    fn a_file_added_deep_inside_after_the_listing_is_removed_too() {
        let scratch = Scratch::reachable_by_others("listed-added");
        tree(scratch.path());
        let q = quarantine_entry(scratch.fd(), "entry".as_ref(), &RemoveOptions::new()).unwrap();
        let inside = scratch.join(q.path_in_parent());
        let Listed::Clear(listing) = q.list(LIMITS, &mut |_| None) else {
            panic!("listed whole")
        };
        fs::write(inside.join("a/b/c/added"), b"new").unwrap();
        fs::create_dir(inside.join("a/b/new-dir")).unwrap();
        fs::write(inside.join("a/b/new-dir/f"), b"new").unwrap();
        let report = listing.remove().unwrap();
        assert!(report.is_complete(), "{:?}", report.left());
        assert_eq!((report.removed().files(), report.removed().dirs()), (5, 5));
        assert!(scratch.names().is_empty(), "{:?}", scratch.names());
    }

    /// The attacker, `nobody`, works inside the entry (its working
    /// directory was there before the move: a holder a check could miss,
    /// like a descriptor in flight). Between the listing and the deletion
    /// it swaps a listed directory for a symlink to a directory outside
    /// and moves another listed directory out of the entry. Neither is
    /// followed: the link is unlinked as a link, the moved directory and
    /// its files stay where they went, the victim is untouched.
    #[test]
    fn a_directory_swapped_for_a_symlink_or_moved_out_is_not_followed() {
        if !require_root("a_directory_swapped_for_a_symlink_or_moved_out_is_not_followed") {
            return;
        }
        let scratch = Scratch::reachable_by_others("listed-swap");
        tree(scratch.path());
        fs::create_dir_all(scratch.join("entry/a/d")).unwrap();
        fs::write(scratch.join("entry/a/d/listed"), b"d").unwrap();
        fs::create_dir_all(scratch.join("entry/a/m")).unwrap();
        fs::write(scratch.join("entry/a/m/listed"), b"m").unwrap();
        chown_tree(&scratch.join("entry"), NOBODY);
        fs::create_dir(scratch.join("victim")).unwrap();
        fs::write(scratch.join("victim/canary"), b"root's").unwrap();
        fs::write(scratch.join("victim/listed"), b"root's").unwrap();
        fs::create_dir(scratch.join("outside")).unwrap();
        chown_tree(&scratch.join("outside"), NOBODY);
        let mut attacker = setpriv_nobody()
            .args([
                "sh",
                "-ec",
                "echo ready; read go; mv d d.moved; ln -s \"$1\" d; mv m \"$2/m\"; echo done",
                "sh",
            ])
            .arg(scratch.join("victim"))
            .arg(scratch.join("outside"))
            .current_dir(scratch.join("entry/a"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(attacker.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");

        let q = quarantine_entry(scratch.fd(), "entry".as_ref(), &RemoveOptions::new()).unwrap();
        let Listed::Clear(listing) = q.list(LIMITS, &mut |_| None) else {
            panic!("listed whole")
        };
        writeln!(attacker.stdin.take().unwrap(), "go").unwrap();
        assert_eq!(lines.next().unwrap().unwrap(), "done");
        assert!(attacker.wait().unwrap().success());
        let report = listing.remove().unwrap();

        assert_eq!(fs::read(scratch.join("victim/canary")).unwrap(), b"root's");
        assert_eq!(fs::read(scratch.join("victim/listed")).unwrap(), b"root's");
        assert_eq!(
            fs::read(scratch.join("outside/m/listed")).unwrap(),
            b"m",
            "moved out: left where it went"
        );
        assert!(report.is_complete(), "{:?}", report.left());
        let names: Vec<String> = scratch
            .names()
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["outside", "victim"],
            "the entry went, the link as a link"
        );
    }
}
