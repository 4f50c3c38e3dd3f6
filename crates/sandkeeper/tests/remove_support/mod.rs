//! Fixtures for the remover's tests: scratch directories removed with the
//! remover itself, mounts undone on drop, tree builders, and snapshots that
//! prove a directory outside the removed tree was not touched.
#![allow(dead_code)] // not every test uses every helper

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

pub use sandkeeper_testkit::require_root;

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A fresh sandbox under `CARGO_TARGET_TMPDIR` (the project's own: it
/// carries a lease and is removed, with the remover under test, when
/// dropped). Declare mount and flag guards *after* it, so they are undone
/// first.
pub struct Scratch {
    path: PathBuf,
    dir: Option<File>,
    tmpfs: bool,
    sandbox: Option<sandkeeper::Sandbox>,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        Scratch::in_root(Path::new(env!("CARGO_TARGET_TMPDIR")), tag)
    }

    /// A scratch directory another user can reach (see
    /// [`sandkeeper_testkit::reachable_by_others`]).
    pub fn reachable_by_others(tag: &str) -> Scratch {
        Scratch::in_root(&sandkeeper_testkit::reachable_by_others(), tag)
    }

    fn in_root(root: &Path, tag: &str) -> Scratch {
        let sandbox = sandkeeper::Sandbox::builder()
            .root(root)
            .tag(format!("remove-{tag}"))
            // Some tests work inside it as `nobody`.
            .permissions(0o755)
            .create()
            .unwrap_or_else(|e| panic!("scratch sandbox: {e}"));
        let path = sandbox.path().to_owned();
        let dir = Some(File::open(&path).unwrap());
        Scratch {
            path,
            dir,
            tmpfs: false,
            sandbox: Some(sandbox),
        }
    }

    /// A scratch directory that is a fresh tmpfs of `size` (e.g. `"1g"`),
    /// for the tests that create hundreds of thousands of entries: on a
    /// disk filesystem they measure the disk, not the remover. Without root
    /// it is a plain scratch directory (the caller then uses smaller sizes).
    pub fn tmpfs(tag: &str, size: &str) -> Scratch {
        let mut scratch = Scratch::new(tag);
        if !is_root() {
            return scratch;
        }
        let data = std::ffi::CString::new(format!("size={size},mode=0755")).unwrap();
        rustix::mount::mount(
            "sandkeeper-test",
            &scratch.path,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            Some(data.as_c_str()),
        )
        .unwrap_or_else(|e| panic!("tmpfs on {}: {e}", scratch.path.display()));
        scratch.tmpfs = true;
        scratch.dir = Some(File::open(&scratch.path).unwrap());
        scratch
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// The scratch directory, open, as the parent for `remove_entry`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.dir.as_ref().expect("scratch is open").as_fd()
    }

    /// Entry names in the scratch directory, sorted.
    pub fn names(&self) -> Vec<OsString> {
        names(&self.path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.dir = None;
        if self.tmpfs {
            let _ = rustix::mount::unmount(&self.path, rustix::mount::UnmountFlags::DETACH);
        }
        if let Some(sandbox) = self.sandbox.take() {
            if let Err(e) = sandbox.close() {
                eprintln!("scratch {} not removed: {e}", self.path.display());
            }
        }
    }
}

/// Entry names of `dir`, sorted, without a sandbox's lease record.
pub fn names(dir: &Path) -> Vec<OsString> {
    let mut names: Vec<OsString> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.as_os_str() != OsStr::new(sandkeeper::lease::LEASE_FILE))
        .collect();
    names.sort();
    names
}

/// A mount, lazily unmounted when dropped (even when the test fails).
pub struct Mount(PathBuf);

impl Mount {
    /// Bind-mounts `source` (a directory or a file) onto `target`.
    pub fn bind(source: &Path, target: &Path) -> Mount {
        rustix::mount::mount_bind(source, target)
            .unwrap_or_else(|e| panic!("bind {} on {}: {e}", source.display(), target.display()));
        Mount(target.to_path_buf())
    }

    /// Mounts a small tmpfs on `target`.
    pub fn tmpfs(target: &Path) -> Mount {
        rustix::mount::mount(
            "sandkeeper-test",
            target,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            Some(c"size=8m,mode=0755"),
        )
        .unwrap_or_else(|e| panic!("tmpfs on {}: {e}", target.display()));
        Mount(target.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

/// An immutable file (`chattr +i`), made mutable again when dropped.
pub struct Immutable(PathBuf);

impl Immutable {
    /// `None` when the filesystem does not support the flag.
    pub fn set(path: &Path) -> Option<Immutable> {
        let file = File::open(path).unwrap();
        let flags = rustix::fs::ioctl_getflags(&file).ok()?;
        rustix::fs::ioctl_setflags(&file, flags | rustix::fs::IFlags::IMMUTABLE).ok()?;
        Some(Immutable(path.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        if let Ok(file) = File::open(&self.0) {
            if let Ok(flags) = rustix::fs::ioctl_getflags(&file) {
                let _ = rustix::fs::ioctl_setflags(&file, flags - rustix::fs::IFlags::IMMUTABLE);
            }
        }
    }
}

pub fn mkdirs(path: &Path) {
    fs::create_dir_all(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
}

pub fn write(path: &Path, data: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        mkdirs(parent);
    }
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

pub fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target.as_ref(), link)
        .unwrap_or_else(|e| panic!("symlink {}: {e}", link.display()));
}

pub fn fifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// A unix socket file (the listener is closed; the file stays).
pub fn socket(path: &Path) {
    drop(
        std::os::unix::net::UnixListener::bind(path)
            .unwrap_or_else(|e| panic!("bind {}: {e}", path.display())),
    );
}

/// A character device node like `/dev/null` (root only).
pub fn chardev(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    )
    .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
}

pub fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// `(dev, ino)` of `path` itself (not following a symlink).
pub fn identity(path: &Path) -> (u64, u64) {
    let meta = fs::symlink_metadata(path).unwrap();
    (meta.dev(), meta.ino())
}

/// What a tree looks like: every entry with its type, mode and content (or
/// link target), by relative path. Equal snapshots mean nothing changed.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let path = root.join(&rel);
        let meta = fs::symlink_metadata(&path)
            .unwrap_or_else(|e| panic!("snapshot {}: {e}", path.display()));
        let kind = meta.file_type();
        let desc = if kind.is_dir() {
            for entry in fs::read_dir(&path).unwrap() {
                stack.push(rel.join(entry.unwrap().file_name()));
            }
            format!("dir {:o}", meta.mode())
        } else if kind.is_symlink() {
            format!("link -> {}", fs::read_link(&path).unwrap().display())
        } else if kind.is_file() {
            format!(
                "file {:o} {:?}",
                meta.mode(),
                String::from_utf8_lossy(&fs::read(&path).unwrap())
            )
        } else {
            format!("other {:o}", meta.mode())
        };
        out.insert(rel, desc);
    }
    out
}

/// An "outside" directory full of things that must survive: files, a
/// subdirectory, a read-only file.
pub fn outside_fixture(path: &Path) -> BTreeMap<PathBuf, String> {
    write(&path.join("precious.txt"), "do not delete");
    write(&path.join("sub/deeper/data.bin"), [0u8, 1, 2, 255]);
    write(&path.join("sub/notes"), "still here");
    write(&path.join("ro"), "read-only");
    chmod(&path.join("ro"), 0o444);
    snapshot(path)
}

/// Counts of a generated tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub dirs: u64,
    pub files: u64,
}

/// A pseudo-random tree (seeded): `dirs` directories below `root` (which
/// is created and counted too), spread over up to `max_depth` levels, with
/// `files` small files, symlinks and hard links among them.
pub fn generate(root: &Path, seed: u64, dirs: usize, files: usize, max_depth: usize) -> Shape {
    let mut rng = fastrand::Rng::with_seed(seed);
    mkdirs(root);
    let mut all = vec![(root.to_path_buf(), 0usize)];
    for i in 0..dirs {
        let (parent, depth) = loop {
            let pick = all[rng.usize(..all.len())].clone();
            if pick.1 < max_depth {
                break pick;
            }
        };
        let dir = parent.join(format!("d{i}"));
        fs::create_dir(&dir).unwrap();
        all.push((dir, depth + 1));
    }
    let mut plain = Vec::new();
    for i in 0..files {
        let (dir, _) = &all[rng.usize(..all.len())];
        let path = dir.join(format!("f{i}"));
        match rng.u8(..10) {
            0 => symlink("../../../etc/passwd", &path),
            1 if !plain.is_empty() => {
                let target: &PathBuf = &plain[rng.usize(..plain.len())];
                fs::hard_link(target, &path).unwrap();
            }
            _ => {
                let len = rng.usize(..3000);
                fs::write(&path, vec![b'x'; len]).unwrap();
                plain.push(path);
            }
        }
    }
    Shape {
        dirs: all.len() as u64,
        files: files as u64,
    }
}

/// Runs `f` on another thread and fails the test if it takes longer than
/// `limit` (a remover that opened a FIFO would block forever).
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|e| panic!("did not finish within {limit:?}: {e}"))
}

/// Runs `f` on a thread whose credentials are those of `nobody` (uid and
/// gid 65534, no groups, no capabilities); the rest of the process stays
/// root. Linux credentials are per thread; threads `f` starts inherit them.
pub fn as_nobody<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let gid = rustix::process::Gid::from_raw(65534);
            let uid = rustix::process::Uid::from_raw(65534);
            rustix::thread::set_thread_groups(&[]).expect("setgroups");
            rustix::thread::set_thread_res_gid(gid, gid, gid).expect("setresgid");
            rustix::thread::set_thread_res_uid(uid, uid, uid).expect("setresuid");
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Opens a directory for reading (as a parent for `remove_entry`).
pub fn open_dir(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// A crude concurrent deleter for the "disappears mid-way" test: removes
/// `name` under `dir` depth first, ignoring every error.
pub fn crude_rm(dir: BorrowedFd<'_>, name: &OsStr) {
    if rustix::fs::unlinkat(dir, name, AtFlags::empty()).is_ok() {
        return;
    }
    let Ok(sub) = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let Ok(mut listing) = rustix::fs::Dir::read_from(&sub) else {
        return;
    };
    let mut children = Vec::new();
    while let Some(Ok(entry)) = listing.read() {
        let child = entry.file_name().to_bytes();
        if child != b"." && child != b".." {
            children.push(OsStr::from_bytes(child).to_os_string());
        }
    }
    for child in children {
        crude_rm(sub.as_fd(), &child);
    }
    let _ = rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR);
}

/// Open descriptors of this process right now.
pub fn open_fds() -> usize {
    fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// A stop flag for a test's helper threads, raised when dropped: a test
/// that fails half-way stops its attackers too.
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn new() -> Stop {
        Stop(Arc::new(AtomicBool::new(false)))
    }

    /// The flag, for a helper thread to poll.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }

    pub fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        self.raise();
    }
}
