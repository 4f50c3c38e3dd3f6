//! Removal of a test sandbox's own directory tree.
//!
//! On unix the removal is written for a hostile setting: it runs as root, in
//! directories that other users can write, while someone may rename, swap,
//! symlink and mount things at any moment. Therefore:
//!
//! * every operation is relative to a directory file descriptor that the walk
//!   opened itself; no path string is ever resolved, so none is resolved twice;
//! * nothing is ever followed: directories are opened with
//!   `O_DIRECTORY | O_NOFOLLOW`, entries are examined with
//!   `fstatat(AT_SYMLINK_NOFOLLOW)`, and a symlink (to a directory or to
//!   anything else) is unlinked as a name;
//! * before a directory is entered, the `(dev, ino)` of the opened descriptor
//!   must equal the `(dev, ino)` that `fstatat` showed for the name, and `dev`
//!   must be the device of the top directory. A directory on another device
//!   (a mount point), or one whose inode in the directory listing differs from
//!   its `fstatat` inode (as a same-device bind mount shows), is never entered
//!   nor unmounted: it is reported in [`Leftovers::mounts`];
//! * the only permission change ever made is `fchmod(fd, mode | u+rwx)` on a
//!   directory descriptor opened by the walk, when listing or unlinking in it
//!   failed with `EACCES`/`EPERM` (read-only trees such as a Go module cache);
//! * resources are bounded: the walk is iterative over an explicit stack;
//!   at most [`MAX_OPEN_DIRS`] directory descriptors are held at once
//!   (ancestors beyond that are closed and reopened when the walk climbs back,
//!   through the child's `..` or else by walking down again from the nearest
//!   open ancestor, each step verified by `(dev, ino)`), and a directory more
//!   than [`MAX_DEPTH`] levels below the top is not entered but reported as a
//!   failure.
//!
//! On Windows the removal is `std::fs::remove_dir_all`, which removes symlinks
//! and junctions without following them.

use std::io;
use std::path::PathBuf;

/// What a removal could not remove.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    /// Entries that could not be removed (or examined), with the error.
    /// The paths are for display only: `display` joined with the components
    /// relative to the removed directory.
    pub failures: Vec<(PathBuf, io::Error)>,
    /// Directories that were not entered because they are mount points
    /// (another device than the removed directory, or a same-device bind
    /// mount). Their contents, and so their ancestors, are left in place.
    pub mounts: Vec<PathBuf>,
}

impl Leftovers {
    /// True when everything was removed.
    pub fn is_empty(&self) -> bool {
        self.failures.is_empty() && self.mounts.is_empty()
    }
}

/// Removes the directory `path` and everything under it with
/// [`std::fs::remove_dir_all`], which does not follow symlinks or junctions.
/// An error of that call is returned as the one failure in [`Leftovers`];
/// this function itself always returns `Ok`.
/// Removes `name` in the sandbox root `root` (see [`crate::lease::RootDir`])
/// and all under it, if it is still the directory `expect` (Unix; Windows
/// cannot tell); `display` is its path, for what is reported.
pub(crate) fn remove_in(
    root: crate::lease::RootRef<'_>,
    name: &std::ffi::OsStr,
    expect: (u64, u64),
    display: &std::path::Path,
) -> io::Result<Leftovers> {
    #[cfg(unix)]
    return remove_dir_tree(root, name, expect, display);
    #[cfg(windows)]
    {
        let _ = (expect, display);
        remove_dir_tree(&root.join(name))
    }
}

#[cfg(windows)]
#[allow(clippy::disallowed_methods)] // std's is link- and junction-safe on Windows
pub(crate) fn remove_dir_tree(path: &std::path::Path) -> io::Result<Leftovers> {
    let mut left = Leftovers::default();
    if let Err(e) = std::fs::remove_dir_all(path) {
        left.failures.push((path.to_path_buf(), e));
    }
    Ok(left)
}

#[cfg(unix)]
pub(crate) use imp::remove_dir_tree;

#[cfg(unix)]
mod imp {
    /// Whether the directory `name` in `dir` is the root of a mount, as
    /// `statx` says (`STATX_ATTR_MOUNT_ROOT`, Linux 5.8); `None` where it
    /// cannot say. Overlayfs lists some directories under another inode
    /// than `stat` gives, so the listing's inode alone would take them for
    /// bind mounts and leave them.
    #[cfg(target_os = "linux")]
    fn is_mount_root(dir: BorrowedFd<'_>, name: &CStr) -> Option<bool> {
        let mask = rfs::StatxAttributes::MOUNT_ROOT.bits();
        let sx = rfs::statx(
            dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            rfs::StatxFlags::empty(),
        )
        .ok()?;
        (sx.stx_attributes_mask.bits() & mask != 0).then(|| sx.stx_attributes.bits() & mask != 0)
    }

    #[cfg(not(target_os = "linux"))]
    fn is_mount_root(_dir: BorrowedFd<'_>, _name: &CStr) -> Option<bool> {
        None
    }

    use super::Leftovers;
    use rustix::fs::{self as rfs, AtFlags, Dir, FileType, Mode, OFlags};
    use rustix::io::Errno;
    use std::ffi::{CStr, CString, OsStr};
    use std::io;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    /// The most directory descriptors the walk holds open at once (the
    /// top directory's included; listing briefly uses one more).
    pub const MAX_OPEN_DIRS: usize = 64;
    /// The deepest level below the top directory that is entered; a directory
    /// deeper than this is left and reported as a failure.
    pub const MAX_DEPTH: usize = 4096;
    /// How often one directory is listed at most (re-listed when entries
    /// appeared or changed while it was being emptied).
    const MAX_PASSES: u8 = 3;

    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Limits {
        pub(crate) max_open: usize,
        pub(crate) max_depth: usize,
    }

    const DEFAULT_LIMITS: Limits = Limits {
        max_open: MAX_OPEN_DIRS,
        max_depth: MAX_DEPTH,
    };

    /// `(device, inode)`, as `std::os::unix::fs::MetadataExt::{dev, ino}` give them.
    type Id = (u64, u64);

    // st_dev / st_ino have different integer types on different systems;
    // the casts are the ones std's `MetadataExt` makes.
    #[allow(clippy::unnecessary_cast)]
    fn id_of(st: &rfs::Stat) -> Id {
        (st.st_dev as u64, st.st_ino as u64)
    }

    fn is_dir(st: &rfs::Stat) -> bool {
        FileType::from_raw_mode(st.st_mode) == FileType::Directory
    }

    fn to_os(name: &CStr) -> &OsStr {
        OsStr::from_bytes(name.to_bytes())
    }

    /// Why [`open_dir_checked`] did not give a descriptor.
    #[derive(Debug)]
    pub(crate) enum OpenError {
        /// The name is no longer the expected directory: it is a symlink or
        /// another non-directory now, or the opened directory has another
        /// `(dev, ino)`. Nothing was followed.
        Changed,
        /// Any other error (`NOENT`: it vanished).
        Io(Errno),
    }

    /// The descent step: opens the directory `name` of `dirfd` with
    /// `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC` and checks with `fstat` that
    /// what was opened is the directory `expect`.
    pub(crate) fn open_dir_checked<P: rustix::path::Arg>(
        dirfd: BorrowedFd<'_>,
        name: P,
        expect: Id,
    ) -> Result<OwnedFd, OpenError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rfs::openat(dirfd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            // A symlink under O_NOFOLLOW: ELOOP (Linux, macOS), EMLINK
            // (FreeBSD); a non-directory under O_DIRECTORY: ENOTDIR.
            Err(Errno::LOOP | Errno::MLINK | Errno::NOTDIR) => return Err(OpenError::Changed),
            Err(e) => return Err(OpenError::Io(e)),
        };
        match rfs::fstat(&fd) {
            Ok(st) if is_dir(&st) && id_of(&st) == expect => Ok(fd),
            Ok(_) => Err(OpenError::Changed),
            Err(e) => Err(OpenError::Io(e)),
        }
    }

    /// Adds `u+rwx` to the directory open as `fd` (by descriptor only).
    fn add_owner_rwx(fd: BorrowedFd<'_>) -> Result<bool, Errno> {
        let st = rfs::fstat(fd)?;
        if !is_dir(&st) {
            return Ok(false);
        }
        let mode = Mode::from_raw_mode(st.st_mode);
        if mode.contains(Mode::RWXU) {
            return Ok(false);
        }
        rfs::fchmod(fd, mode | Mode::RWXU)?;
        Ok(true)
    }

    /// Runs `op` on the directory `fd`; if it fails with `EACCES`/`EPERM`
    /// and this directory was not chmodded yet, adds `u+rwx` to it by
    /// descriptor and runs `op` once more.
    fn with_chmod<T>(
        fd: BorrowedFd<'_>,
        chmodded: &mut bool,
        mut op: impl FnMut() -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        match op() {
            Err(e @ (Errno::ACCESS | Errno::PERM)) if !*chmodded => {
                *chmodded = true;
                match add_owner_rwx(fd) {
                    Ok(true) => op(),
                    _ => Err(e),
                }
            }
            r => r,
        }
    }

    #[cfg(test)]
    type Hook = Option<Box<dyn FnMut(&OsStr)>>;

    #[cfg(test)]
    thread_local! {
        /// Test hook: called with an entry's name after `fstatat` showed a
        /// directory and before it is opened.
        pub(crate) static BEFORE_DESCENT: std::cell::RefCell<Hook> =
            const { std::cell::RefCell::new(None) };
    }

    struct Frame {
        /// `None` when closed to keep within `max_open`; never for frame 0.
        fd: Option<OwnedFd>,
        id: Id,
        /// Its name in its parent.
        name: CString,
        /// Entries still to handle: name and the inode the listing showed.
        pending: Vec<(CString, u64)>,
        chmodded: bool,
        /// Something under it was left on purpose or failed, and is recorded:
        /// its removal is expected to fail with ENOTEMPTY, not re-listed.
        incomplete: bool,
        passes: u8,
    }

    struct Walk<'a> {
        parent: BorrowedFd<'a>,
        display: &'a Path,
        dev: u64,
        limits: Limits,
        stack: Vec<Frame>,
        left: Leftovers,
    }

    /// Removes the directory `name` of the open directory `parent` and
    /// everything under it, provided that `name` is still the directory
    /// identified by `expect` `(device, inode)` (as
    /// `std::os::unix::fs::MetadataExt::{dev, ino}` report them).
    ///
    /// `display` is the path of that directory, used only to build the paths
    /// in the result; it is never resolved.
    ///
    /// Returns `Err` only when `name` cannot be opened as a directory without
    /// following a symlink, or is not the directory `expect` (then nothing is
    /// removed, and the error, of kind `Other`, says it was replaced).
    /// Everything else that could not be removed is in the returned
    /// [`Leftovers`]; entries that vanish meanwhile are not errors.
    /// See the module documentation for the guarantees.
    pub fn remove_dir_tree(
        parent: BorrowedFd<'_>,
        name: &OsStr,
        expect: (u64, u64),
        display: &Path,
    ) -> io::Result<Leftovers> {
        remove_dir_tree_with(parent, name, expect, display, DEFAULT_LIMITS)
    }

    pub(crate) fn remove_dir_tree_with(
        parent: BorrowedFd<'_>,
        name: &OsStr,
        expect: (u64, u64),
        display: &Path,
        limits: Limits,
    ) -> io::Result<Leftovers> {
        assert!(limits.max_open >= 2, "max_open must be at least 2");
        let cname = CString::new(name.as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "directory name contains a NUL byte",
            )
        })?;
        let fd = match open_dir_checked(parent, cname.as_c_str(), expect) {
            Ok(fd) => fd,
            Err(OpenError::Changed) => return Err(replaced(display, expect)),
            Err(OpenError::Io(e)) => {
                let e = io::Error::from(e);
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot open directory {}: {e}", display.display()),
                ));
            }
        };
        let mut walk = Walk {
            parent,
            display,
            dev: expect.0,
            limits,
            stack: vec![Frame {
                fd: Some(fd),
                id: expect,
                name: cname,
                pending: Vec::new(),
                chmodded: false,
                incomplete: false,
                passes: 0,
            }],
            left: Leftovers::default(),
        };
        walk.run();
        Ok(walk.left)
    }

    fn replaced(display: &Path, expect: Id) -> io::Error {
        io::Error::other(format!(
            "directory {} was replaced: it is no longer the directory (dev {}, ino {}); nothing was removed",
            display.display(),
            expect.0,
            expect.1
        ))
    }

    fn moved(what: &str) -> io::Error {
        io::Error::other(format!(
            "directory was moved or replaced during removal; {what}"
        ))
    }

    impl Walk<'_> {
        /// Display path of frame `i`, or of its entry `entry`.
        fn path(&self, i: usize, entry: Option<&CStr>) -> PathBuf {
            let mut p = self.display.to_path_buf();
            for f in &self.stack[1..=i] {
                p.push(to_os(&f.name));
            }
            if let Some(e) = entry {
                p.push(to_os(e));
            }
            p
        }

        fn fail(&mut self, i: usize, entry: Option<&CStr>, err: io::Error) {
            let p = self.path(i, entry);
            self.left.failures.push((p, err));
            self.stack[i].incomplete = true;
        }

        fn run(&mut self) {
            self.list(0);
            while let Some(i) = self.stack.len().checked_sub(1) {
                if self.stack[i].fd.is_none() && !self.reopen(i, None) {
                    self.lose(i);
                    continue;
                }
                if let Some((name, d_ino)) = self.stack[i].pending.pop() {
                    self.entry(i, &name, d_ino);
                } else {
                    self.finish(i);
                }
            }
        }

        /// Lists frame `i` (whose descriptor is open) into its `pending`.
        fn list(&mut self, i: usize) {
            let frame = &mut self.stack[i];
            frame.passes += 1;
            let fd = frame.fd.as_ref().expect("listed frame is open").as_fd();
            let dir = with_chmod(fd, &mut frame.chmodded, || Dir::read_from(fd));
            let mut err = None;
            match dir {
                Ok(mut dir) => {
                    while let Some(ent) = dir.read() {
                        match ent {
                            Ok(ent) => {
                                let n = ent.file_name();
                                if n != c"." && n != c".." {
                                    frame.pending.push((n.to_owned(), ent.ino()));
                                }
                            }
                            Err(e) => {
                                err = Some(e);
                                break;
                            }
                        }
                    }
                }
                Err(e) => err = Some(e),
            }
            if let Some(e) = err {
                self.fail(i, None, e.into());
            }
            if i == 0 {
                // The sandbox's lease record goes last (`pending` is taken
                // from its end): a remover killed halfway leaves a sandbox
                // that still has its record, which any reaper proves
                // orphaned and takes, not an unmanaged leftover that only
                // a rule would.
                let frame = &mut self.stack[0];
                if let Some(at) = frame
                    .pending
                    .iter()
                    .position(|(n, _)| n.as_bytes() == crate::lease::LEASE_FILE.as_bytes())
                {
                    let record = frame.pending.remove(at);
                    frame.pending.insert(0, record);
                }
            }
        }

        /// Handles the entry `name` of frame `i` (whose descriptor is open).
        fn entry(&mut self, i: usize, name: &CStr, d_ino: u64) {
            let Frame { fd, chmodded, .. } = &mut self.stack[i];
            let fd = fd.as_ref().expect("deepest frame is open").as_fd();
            let st = match with_chmod(fd, chmodded, || {
                rfs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
            }) {
                Ok(st) => st,
                Err(Errno::NOENT) => return,
                Err(e) => return self.fail(i, Some(name), e.into()),
            };
            if !is_dir(&st) {
                // Files, symlinks (to directories too), fifos, sockets, devices:
                // the name is unlinked, nothing is opened or followed.
                match with_chmod(fd, chmodded, || rfs::unlinkat(fd, name, AtFlags::empty())) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    // It became a directory meanwhile: left for re-listing.
                    Err(Errno::ISDIR) => {}
                    Err(e) => self.fail(i, Some(name), e.into()),
                }
                return;
            }
            let id = id_of(&st);
            // A mount point: another device, or (a bind mount of the same
            // device) what the kernel says of the name where it can say
            // it, else an inode that differs from the listing's.
            let mount_root = match is_mount_root(fd, name) {
                Some(known) => known,
                None => d_ino != 0 && d_ino != id.1,
            };
            if id.0 != self.dev || mount_root {
                let p = self.path(i, Some(name));
                self.left.mounts.push(p);
                self.stack[i].incomplete = true;
                return;
            }
            if i + 1 > self.limits.max_depth {
                let msg = format!(
                    "directory is more than {} levels deep; not entered",
                    self.limits.max_depth
                );
                return self.fail(i, Some(name), io::Error::other(msg));
            }
            #[cfg(test)]
            BEFORE_DESCENT.with(|h| {
                if let Some(h) = h.borrow_mut().as_mut() {
                    h(to_os(name))
                }
            });
            match open_dir_checked(fd, name, id) {
                Ok(child) => {
                    self.push(child, id, name.to_owned());
                    let j = self.stack.len() - 1;
                    self.list(j);
                }
                Err(OpenError::Io(Errno::NOENT)) => {}
                // Swapped since fstatat: not entered; the directory's
                // re-listing (on ENOTEMPTY) looks at the name again.
                Err(OpenError::Changed) => {}
                Err(OpenError::Io(e)) => self.fail(i, Some(name), e.into()),
            }
        }

        fn push(&mut self, fd: OwnedFd, id: Id, name: CString) {
            self.stack.push(Frame {
                fd: Some(fd),
                id,
                name,
                pending: Vec::new(),
                chmodded: false,
                incomplete: false,
                passes: 0,
            });
            let open = self.stack.iter().filter(|f| f.fd.is_some()).count();
            if open > self.limits.max_open {
                // Close the shallowest open one except the top directory.
                if let Some(f) = self.stack[1..].iter_mut().find(|f| f.fd.is_some()) {
                    f.fd = None;
                }
            }
        }

        /// Reopens the closed frame `i` (`i >= 1`): through `..` of its open
        /// child `child`, or else by walking down from the nearest open
        /// ancestor by the recorded names; every step verified by `(dev, ino)`.
        fn reopen(&mut self, i: usize, child: Option<BorrowedFd<'_>>) -> bool {
            if let Some(c) = child {
                if let Ok(fd) = open_dir_checked(c, c"..", self.stack[i].id) {
                    self.stack[i].fd = Some(fd);
                    return true;
                }
            }
            let j = (0..i)
                .rev()
                .find(|&k| self.stack[k].fd.is_some())
                .expect("the top directory stays open");
            let mut cur: Option<OwnedFd> = None;
            for k in j + 1..=i {
                let base = match &cur {
                    Some(fd) => fd.as_fd(),
                    None => self.stack[j].fd.as_ref().expect("open").as_fd(),
                };
                let f = &self.stack[k];
                match open_dir_checked(base, f.name.as_c_str(), f.id) {
                    Ok(fd) => cur = Some(fd),
                    Err(_) => return false,
                }
            }
            self.stack[i].fd = cur;
            true
        }

        /// Frame `i` (`i >= 1`) cannot be reached again: what remains of it
        /// is left and recorded.
        fn lose(&mut self, i: usize) {
            let p = self.path(i, None);
            self.left
                .failures
                .push((p, moved("what remains of it was left")));
            self.stack.truncate(i);
            self.stack[i - 1].incomplete = true;
        }

        /// Frame `i` is emptied: removes it from its parent, or re-lists it.
        fn finish(&mut self, i: usize) {
            if i > 0 && self.stack[i - 1].fd.is_none() {
                let child = self.stack[i].fd.take();
                let ok = self.reopen(i - 1, child.as_ref().map(|f| f.as_fd()));
                self.stack[i].fd = child;
                if !ok {
                    return self.lose(i - 1);
                }
            }
            let (id, incomplete, passes) = {
                let f = &self.stack[i];
                (f.id, f.incomplete, f.passes)
            };
            let name = self.stack[i].name.clone();
            let (pfd, chmodded) = if i == 0 {
                (self.parent, None)
            } else {
                let p = &mut self.stack[i - 1];
                (
                    p.fd.as_ref().expect("reopened").as_fd(),
                    Some(&mut p.chmodded),
                )
            };
            let mut no_chmod = true;
            let chmodded = chmodded.unwrap_or(&mut no_chmod);
            // Remove the name only while it is still this directory.
            let still = with_chmod(pfd, chmodded, || {
                rfs::statat(pfd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
            });
            let result = match still {
                Ok(st) if id_of(&st) == id => with_chmod(pfd, chmodded, || {
                    rfs::unlinkat(pfd, name.as_c_str(), AtFlags::REMOVEDIR)
                }),
                // Moved away or replaced by someone else: for the top, that
                // is a failure; below it, the parent's re-listing sees the name.
                Ok(_) | Err(Errno::NOENT) if i == 0 => {
                    let p = self.path(0, None);
                    self.left
                        .failures
                        .push((p, moved("it was emptied but not removed")));
                    self.stack.pop();
                    return;
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            match result {
                Ok(()) | Err(Errno::NOENT) => {
                    self.stack.pop();
                }
                Err(Errno::NOTEMPTY | Errno::EXIST) if !incomplete && passes < MAX_PASSES => {
                    // Entries appeared or changed meanwhile: look again.
                    self.list(i);
                }
                Err(e) => {
                    let expected = incomplete && matches!(e, Errno::NOTEMPTY | Errno::EXIST);
                    if !expected {
                        let p = self.path(i, None);
                        self.left.failures.push((p, e.into()));
                    }
                    self.stack.pop();
                    if let Some(parent) = self.stack.last_mut() {
                        parent.incomplete = true;
                    }
                }
            }
        }
    }

    #[cfg(test)]
    #[allow(clippy::print_stderr)] // a skip says why
    mod tests {
        use super::*;
        use std::fs;
        use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
        use std::process::Command;
        use std::sync::atomic::{AtomicUsize, Ordering};

        /// A unique scratch directory under `temp_dir()`, removed on drop.
        struct Scratch(PathBuf);

        /// The temp directory if every component of its path can be
        /// searched by other users, else `/tmp`: the unprivileged half of a
        /// test (uid 65534) must reach its scratch even when `TMPDIR` is a
        /// private (0700) directory.
        fn reachable_by_others() -> PathBuf {
            let searchable = |dir: &Path| {
                dir.ancestors().all(|p| {
                    p.as_os_str().is_empty()
                        || fs::metadata(p)
                            .is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0)
                })
            };
            let tmp = std::env::temp_dir();
            match searchable(&tmp) {
                true => tmp,
                false => PathBuf::from("/tmp"),
            }
        }

        impl Scratch {
            fn new(tag: &str) -> Scratch {
                static N: AtomicUsize = AtomicUsize::new(0);
                let p = reachable_by_others().join(format!(
                    "remove-tree-test-{}-{}-{tag}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::SeqCst)
                ));
                fs::create_dir(&p).unwrap();
                Scratch(p)
            }
            fn path(&self) -> &Path {
                &self.0
            }
        }

        impl Drop for Scratch {
            #[allow(clippy::disallowed_methods)] // the test's own scratch
            fn drop(&mut self) {
                make_owner_writable(&self.0);
                let _ = fs::remove_dir_all(&self.0);
            }
        }

        /// Test cleanup only (shallow test trees): chmod u+rwx every directory.
        fn make_owner_writable(p: &Path) {
            let Ok(md) = fs::symlink_metadata(p) else {
                return;
            };
            if md.is_dir() {
                let mode = md.permissions().mode() | 0o700;
                let _ = fs::set_permissions(p, fs::Permissions::from_mode(mode));
                if let Ok(rd) = fs::read_dir(p) {
                    for e in rd.flatten() {
                        make_owner_writable(&e.path());
                    }
                }
            }
        }

        /// Unmounts on drop, even when the test fails.
        struct Mount(PathBuf);

        impl Mount {
            fn new(args: &[&OsStr], target: &Path) -> Option<Mount> {
                let ok = Command::new("mount").args(args).arg(target).status();
                match ok {
                    Ok(s) if s.success() => Some(Mount(target.to_path_buf())),
                    _ => None,
                }
            }
        }

        impl Drop for Mount {
            fn drop(&mut self) {
                let ok = Command::new("umount").arg(&self.0).status();
                if !matches!(ok, Ok(s) if s.success()) {
                    let _ = Command::new("umount").arg("-l").arg(&self.0).status();
                }
            }
        }

        fn is_root() -> bool {
            fs::metadata("/proc/self")
                .map(|m| m.uid() == 0)
                .unwrap_or(false)
        }

        fn id(p: &Path) -> Id {
            let md = fs::symlink_metadata(p).unwrap();
            (md.dev(), md.ino())
        }

        fn remove_with(dir: &Path, name: &str, limits: Limits) -> io::Result<Leftovers> {
            let parent = fs::File::open(dir).unwrap();
            let expect = id(&dir.join(name));
            remove_dir_tree_with(
                parent.as_fd(),
                OsStr::new(name),
                expect,
                &dir.join(name),
                limits,
            )
        }

        fn remove(dir: &Path, name: &str) -> io::Result<Leftovers> {
            remove_with(dir, name, DEFAULT_LIMITS)
        }

        fn gone(p: &Path) -> bool {
            matches!(fs::symlink_metadata(p), Err(e) if e.kind() == io::ErrorKind::NotFound)
        }

        fn mode(p: &Path) -> u32 {
            fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
        }

        fn chmod(p: &Path, m: u32) {
            fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
        }

        fn names(p: &Path) -> Vec<String> {
            let mut v: Vec<String> = fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        }

        /// An outside directory (mode 0750) with a file, and an outside file.
        fn outside(base: &Path) -> (PathBuf, PathBuf) {
            let od = base.join("outside");
            fs::create_dir(&od).unwrap();
            fs::write(od.join("keep.txt"), "keep").unwrap();
            chmod(&od, 0o750);
            let of = base.join("outside.txt");
            fs::write(&of, "keep too").unwrap();
            (od, of)
        }

        fn assert_outside_intact(od: &Path, of: &Path, dir_mode: u32) {
            assert_eq!(fs::read_to_string(od.join("keep.txt")).unwrap(), "keep");
            assert_eq!(fs::read_to_string(of).unwrap(), "keep too");
            assert_eq!(mode(od), dir_mode, "outside directory was chmodded");
        }

        #[test]
        fn removes_mixed_tree_and_touches_nothing_outside() {
            let s = Scratch::new("mixed");
            let base = s.path();
            let (od, of) = outside(base);
            let t = base.join("tree");
            fs::create_dir_all(t.join("d1/d2/d3")).unwrap();
            fs::write(t.join("a.txt"), "a").unwrap();
            fs::write(t.join("d1/d2/d3/deep.txt"), "d").unwrap();
            symlink(&od, t.join("link_to_dir")).unwrap();
            symlink(&od, t.join("d1/link_to_dir")).unwrap();
            symlink(&of, t.join("link_to_file")).unwrap();
            symlink(base.join("nowhere"), t.join("dangling")).unwrap();
            assert!(Command::new("mkfifo")
                .arg(t.join("fifo"))
                .status()
                .unwrap()
                .success());
            let _sock = std::os::unix::net::UnixListener::bind(t.join("sock")).unwrap();
            // A read-only (0555) directory holding files, a subdirectory and a
            // symlink to the outside directory.
            let ro = t.join("ro");
            fs::create_dir_all(ro.join("sub")).unwrap();
            fs::write(ro.join("f1"), "1").unwrap();
            fs::write(ro.join("sub/f2"), "2").unwrap();
            symlink(&od, ro.join("link_to_dir")).unwrap();
            chmod(&ro.join("sub"), 0o555);
            chmod(&ro, 0o555);
            // A 0000 directory with a file, and a 0444 one.
            let none = t.join("none");
            fs::create_dir(&none).unwrap();
            fs::write(none.join("f"), "x").unwrap();
            chmod(&none, 0o000);
            let rnox = t.join("rnox");
            fs::create_dir(&rnox).unwrap();
            fs::write(rnox.join("f"), "x").unwrap();
            chmod(&rnox, 0o444);

            let left = remove(base, "tree").unwrap();
            if is_root() {
                assert!(left.is_empty(), "{left:?}");
            } else {
                // Its owner cannot open a 0000 directory (nor can `rm
                // -rf`): it is reported and the rest goes, as
                // read_only_scenario says.
                assert_eq!(left.failures.len(), 1, "{left:?}");
                assert_eq!(left.failures[0].0, none, "{left:?}");
                assert_eq!(names(&t), ["none"]);
                chmod(&none, 0o700);
                let left = remove(base, "tree").unwrap();
                assert!(left.is_empty(), "{left:?}");
            }
            assert!(gone(&t));
            assert_outside_intact(&od, &of, 0o750);
            assert_eq!(names(base), ["outside", "outside.txt"]);
        }

        /// The chmod path needs an unprivileged user (root ignores modes):
        /// as root, re-run `nonroot_inner` under uid/gid 65534 with setpriv.
        #[test]
        fn read_only_trees_as_unprivileged_user() {
            let s = Scratch::new("nonroot");
            if !is_root() {
                return read_only_scenario(s.path());
            }
            chmod(s.path(), 0o777);
            // A copy of this test binary the other user can run: the
            // checkout (`target/`) may sit in a private directory.
            let bin = s.path().join("bin");
            fs::create_dir(&bin).unwrap();
            let exe = bin.join("remove-tree-test");
            fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
            chmod(&exe, 0o755);
            chmod(&bin, 0o755);
            let work = s.path().join("work");
            fs::create_dir(&work).unwrap();
            chmod(&work, 0o777);
            let out = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&exe)
                .args([
                    "nonroot_inner",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("REMOVE_TREE_NONROOT_BASE", &work)
                .output();
            let out = match out {
                Ok(o) => o,
                // setpriv is part of util-linux, on every machine that runs
                // these tests: its absence is a broken setup, not a skip.
                Err(e) => panic!("cannot run setpriv to act as uid 65534: {e}"),
            };
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("1 passed"), "{text}");
        }

        #[test]
        #[ignore = "run by read_only_trees_as_unprivileged_user under another uid"]
        fn nonroot_inner() {
            let Some(base) = std::env::var_os("REMOVE_TREE_NONROOT_BASE") else {
                return;
            };
            let base = PathBuf::from(base);
            assert!(!is_root());
            read_only_scenario(&base);
        }

        fn read_only_scenario(base: &Path) {
            let od = base.join("outside_ro");
            fs::create_dir(&od).unwrap();
            fs::write(od.join("keep.txt"), "keep").unwrap();
            chmod(&od, 0o555);
            // tree: a Go-module-cache-like 0555 tree, a 0444 directory (can
            // be read, not searched), a symlink to a 0555 outside directory.
            let t = base.join("tree");
            fs::create_dir_all(t.join("mod/pkg@v1/sub")).unwrap();
            fs::write(t.join("mod/pkg@v1/go.mod"), "m").unwrap();
            fs::write(t.join("mod/pkg@v1/sub/a.go"), "a").unwrap();
            for d in ["mod/pkg@v1/sub", "mod/pkg@v1", "mod"] {
                chmod(&t.join(d), 0o555);
            }
            fs::create_dir(t.join("rnox")).unwrap();
            fs::write(t.join("rnox/f"), "f").unwrap();
            chmod(&t.join("rnox"), 0o444);
            symlink(&od, t.join("link")).unwrap();
            chmod(&t, 0o555);
            let left = remove(base, "tree").unwrap();
            assert!(left.is_empty(), "{left:?}");
            assert!(gone(&t));
            assert_eq!(fs::read_to_string(od.join("keep.txt")).unwrap(), "keep");
            assert_eq!(mode(&od), 0o555, "outside directory was chmodded");

            // tree2: a 0000 directory cannot even be opened by its owner
            // without a chmod by name, which is never done: it is reported.
            let t2 = base.join("tree2");
            fs::create_dir_all(t2.join("none")).unwrap();
            fs::write(t2.join("none/f"), "f").unwrap();
            fs::write(t2.join("other"), "o").unwrap();
            chmod(&t2.join("none"), 0o000);
            let left = remove(base, "tree2").unwrap();
            if is_root() {
                assert!(left.is_empty(), "{left:?}");
            } else {
                assert_eq!(left.failures.len(), 1, "{left:?}");
                assert_eq!(left.failures[0].0, t2.join("none"));
                assert_eq!(left.failures[0].1.kind(), io::ErrorKind::PermissionDenied);
                assert!(left.mounts.is_empty());
                assert_eq!(names(&t2), ["none"]);
                chmod(&t2.join("none"), 0o700);
            }
        }

        #[test]
        fn replaced_directory_is_not_touched() {
            let s = Scratch::new("replaced");
            let base = s.path();
            let t = base.join("tree");
            fs::create_dir(&t).unwrap();
            fs::write(t.join("f"), "mine").unwrap();
            let expect = id(&t);
            let other = base.join("other");
            fs::create_dir(&other).unwrap();
            fs::write(other.join("g"), "theirs").unwrap();
            fs::rename(&t, base.join("tree_old")).unwrap();
            fs::rename(&other, &t).unwrap();

            let parent = fs::File::open(base).unwrap();
            let err = remove_dir_tree(parent.as_fd(), OsStr::new("tree"), expect, &t).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::Other);
            assert!(err.to_string().contains("replaced"), "{err}");
            assert_eq!(fs::read_to_string(t.join("g")).unwrap(), "theirs");
            assert_eq!(fs::read_to_string(base.join("tree_old/f")).unwrap(), "mine");

            // A symlink in its place is not followed either.
            fs::rename(&t, base.join("target")).unwrap();
            symlink(base.join("target"), &t).unwrap();
            let err = remove_dir_tree(parent.as_fd(), OsStr::new("tree"), expect, &t).unwrap_err();
            assert!(err.to_string().contains("replaced"), "{err}");
            let err = remove_dir_tree(
                parent.as_fd(),
                OsStr::new("tree"),
                id(&base.join("target")),
                &t,
            )
            .unwrap_err();
            assert!(err.to_string().contains("replaced"), "{err}");
            assert_eq!(fs::read_to_string(base.join("target/g")).unwrap(), "theirs");
            assert!(fs::symlink_metadata(&t).unwrap().file_type().is_symlink());
        }

        #[test]
        fn mount_points_are_not_entered() {
            let s = Scratch::new("mounts");
            let base = s.path();
            let (od, of) = outside(base);
            let t = base.join("tree");
            fs::create_dir_all(t.join("a/tmpfs")).unwrap();
            fs::create_dir_all(t.join("b/bind")).unwrap();
            fs::write(t.join("a/f"), "f").unwrap();
            fs::write(t.join("b/g"), "g").unwrap();
            fs::create_dir_all(t.join("c/d")).unwrap();
            let Some(_tmpfs) = Mount::new(
                &["-t", "tmpfs", "tmpfs"].map(OsStr::new),
                &t.join("a/tmpfs"),
            ) else {
                assert!(
                    !rustix::process::geteuid().is_root() && std::env::var_os("CI").is_none(),
                    "cannot mount a tmpfs as root or under CI"
                );
                eprintln!("skipped mount_points_are_not_entered: not root and CI unset, so no tmpfs can be mounted");
                return;
            };
            fs::write(t.join("a/tmpfs/inside.txt"), "in tmpfs").unwrap();
            fs::create_dir(t.join("a/tmpfs/dir")).unwrap();
            // A bind mount of the outside directory: same device as the tree.
            let _bind = Mount::new(&[OsStr::new("--bind"), od.as_os_str()], &t.join("b/bind"))
                .expect("bind mount");
            assert_eq!(
                id(&t.join("b/bind")).0,
                id(&t).0,
                "bind mount is on the same device"
            );

            let left = remove(base, "tree").unwrap();
            assert!(left.failures.is_empty(), "{left:?}");
            let mut mounts = left.mounts.clone();
            mounts.sort();
            assert_eq!(mounts, [t.join("a/tmpfs"), t.join("b/bind")]);
            assert_eq!(
                fs::read_to_string(t.join("a/tmpfs/inside.txt")).unwrap(),
                "in tmpfs"
            );
            assert!(t.join("a/tmpfs/dir").is_dir());
            assert_eq!(names(&t), ["a", "b"]);
            assert_eq!(names(&t.join("a")), ["tmpfs"]);
            assert_eq!(names(&t.join("b")), ["bind"]);
            assert_outside_intact(&od, &of, 0o750);
        }

        #[test]
        fn descent_refuses_symlink_and_other_inode() {
            let s = Scratch::new("descent");
            let base = s.path();
            let (od, _) = outside(base);
            fs::create_dir(base.join("sub")).unwrap();
            symlink(&od, base.join("link")).unwrap();
            let dir = fs::File::open(base).unwrap();
            let fd = dir.as_fd();
            assert!(open_dir_checked(fd, c"sub", id(&base.join("sub"))).is_ok());
            // A symlink to a directory, even with the target's own id: not followed.
            assert!(matches!(
                open_dir_checked(fd, c"link", id(&od)),
                Err(OpenError::Changed)
            ));
            // Another directory than the one fstatat showed.
            assert!(matches!(
                open_dir_checked(fd, c"sub", id(&od)),
                Err(OpenError::Changed)
            ));
            // A file.
            assert!(matches!(
                open_dir_checked(fd, c"outside.txt", id(&base.join("outside.txt"))),
                Err(OpenError::Changed)
            ));
            assert!(matches!(
                open_dir_checked(fd, c"missing", (0, 0)),
                Err(OpenError::Io(Errno::NOENT))
            ));
        }

        #[test]
        fn directory_swapped_for_symlink_mid_walk_is_not_followed() {
            let s = Scratch::new("swap");
            let base = s.path();
            let (od, of) = outside(base);
            let t = base.join("tree");
            fs::create_dir_all(t.join("sub/deeper")).unwrap();
            fs::write(t.join("sub/f"), "f").unwrap();
            fs::write(t.join("x"), "x").unwrap();
            let (t2, base2, od2) = (t.clone(), base.to_path_buf(), od.clone());
            let swaps = std::rc::Rc::new(std::cell::Cell::new(0));
            let swaps2 = swaps.clone();
            BEFORE_DESCENT.with(|h| {
                *h.borrow_mut() = Some(Box::new(move |name: &OsStr| {
                    // After fstatat showed "sub" as a directory, and before
                    // it is opened: move it away, put a symlink to the
                    // outside directory in its place.
                    if name == "sub" && swaps2.get() == 0 {
                        swaps2.set(1);
                        fs::rename(t2.join("sub"), base2.join("sub_moved")).unwrap();
                        symlink(&od2, t2.join("sub")).unwrap();
                    }
                }))
            });
            let left = remove(base, "tree");
            BEFORE_DESCENT.with(|h| h.borrow_mut().take());
            let left = left.unwrap();
            assert_eq!(swaps.get(), 1, "the hook ran");
            assert!(left.is_empty(), "{left:?}");
            assert!(gone(&t));
            assert_outside_intact(&od, &of, 0o750);
            // What was moved away mid-walk, before being entered, is not ours any more.
            assert_eq!(fs::read_to_string(base.join("sub_moved/f")).unwrap(), "f");
            assert!(base.join("sub_moved/deeper").is_dir());
        }

        fn nest(t: &Path, depth: usize) -> PathBuf {
            let mut p = t.to_path_buf();
            for i in 0..depth {
                p.push("d");
                fs::create_dir_all(&p).unwrap();
                if i % 7 == 0 {
                    fs::write(p.with_file_name(format!("f{i}")), "f").unwrap();
                }
            }
            fs::write(p.join("bottom"), "b").unwrap();
            p
        }

        #[test]
        fn depth_300_is_removed_without_recursion() {
            let s = Scratch::new("deep");
            let t = s.path().join("tree");
            nest(&t, 300);
            let left = remove(s.path(), "tree").unwrap();
            assert!(left.is_empty(), "{left:?}");
            assert!(gone(&t));
        }

        #[test]
        fn small_fd_window_reopens_ancestors() {
            let s = Scratch::new("window");
            let t = s.path().join("tree");
            nest(&t, 60);
            fs::create_dir_all(t.join("d/d/side/d/d")).unwrap();
            let limits = Limits {
                max_open: 2,
                max_depth: MAX_DEPTH,
            };
            let left = remove_with(s.path(), "tree", limits).unwrap();
            assert!(left.is_empty(), "{left:?}");
            assert!(gone(&t));
        }

        #[test]
        fn too_deep_subtree_is_reported_and_left() {
            let s = Scratch::new("toodeep");
            let t = s.path().join("tree");
            nest(&t, 15);
            let limits = Limits {
                max_open: 4,
                max_depth: 10,
            };
            let left = remove_with(s.path(), "tree", limits).unwrap();
            let eleventh: PathBuf = std::iter::once(t.clone())
                .chain((0..11).map(|_| "d".into()))
                .collect();
            assert_eq!(left.failures.len(), 1, "{left:?}");
            assert_eq!(left.failures[0].0, eleventh);
            assert!(left.failures[0].1.to_string().contains("levels deep"));
            assert!(left.mounts.is_empty());
            // Level 10 keeps only the over-deep directory; files above are gone.
            let tenth = eleventh.parent().unwrap();
            assert_eq!(names(tenth), ["d"]);
            assert_eq!(names(&t), ["d"]);
            assert!(eleventh.join("d/d/d/d/bottom").is_file());
        }

        /// A remover killed halfway leaves the lease record (a proven
        /// orphan, which any reaper takes), never a directory without it:
        /// the record is the top directory's last entry to go.
        #[test]
        fn the_lease_record_goes_last() {
            let s = Scratch::new("record-last");
            let t = s.path().join("sandbox");
            fs::create_dir(&t).unwrap();
            fs::write(t.join(crate::lease::LEASE_FILE), "{}").unwrap();
            for i in 0..40 {
                fs::create_dir(t.join(format!("d{i}"))).unwrap();
                fs::write(t.join(format!("f{i}")), "x").unwrap();
            }
            let record = t.join(crate::lease::LEASE_FILE);
            let missing = std::rc::Rc::new(std::cell::Cell::new(0));
            let seen = std::rc::Rc::clone(&missing);
            BEFORE_DESCENT.with(|h| {
                *h.borrow_mut() = Some(Box::new(move |_: &OsStr| {
                    if !record.exists() {
                        seen.set(seen.get() + 1);
                    }
                }))
            });
            let left = remove(s.path(), "sandbox");
            BEFORE_DESCENT.with(|h| h.borrow_mut().take());
            assert!(left.unwrap().is_empty());
            assert!(gone(&t));
            assert_eq!(missing.get(), 0, "the record went before other entries");
        }

        #[test]
        fn ancestor_moved_out_while_closed_is_reported() {
            let s = Scratch::new("lost");
            let base = s.path();
            let t = base.join("tree");
            fs::create_dir_all(t.join("a/b/c/d/e")).unwrap();
            fs::write(t.join("a/zz_left_in_a"), "a").unwrap();
            fs::write(t.join("a/b/c/d/e/f"), "f").unwrap();
            let (t2, base2) = (t.clone(), base.to_path_buf());
            BEFORE_DESCENT.with(|h| {
                *h.borrow_mut() = Some(Box::new(move |name: &OsStr| {
                    if name == "e" {
                        // a and b are closed now (window of 2): move b out
                        // of a, and a out of the tree.
                        fs::rename(t2.join("a/b"), base2.join("b_moved")).unwrap();
                        fs::rename(t2.join("a"), base2.join("a_moved")).unwrap();
                    }
                }))
            });
            let limits = Limits {
                max_open: 2,
                max_depth: MAX_DEPTH,
            };
            let left = remove_with(base, "tree", limits);
            BEFORE_DESCENT.with(|h| h.borrow_mut().take());
            let left = left.unwrap();
            assert_eq!(left.failures.len(), 1, "{left:?}");
            assert_eq!(left.failures[0].0, t.join("a"));
            assert!(left.failures[0].1.to_string().contains("moved"), "{left:?}");
            assert!(gone(&t));
            // b's contents were being removed through held descriptors.
            assert_eq!(names(&base.join("b_moved")), Vec::<String>::new());
        }
    }
}
