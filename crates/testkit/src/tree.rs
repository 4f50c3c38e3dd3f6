//! Directory trees for tests: builders that panic with the path, special
//! files, snapshots that prove a tree was not touched, seeded random
//! trees, ageing, and an immutable-file guard.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// `mkdir -p path`.
pub fn mkdirs(path: &Path) {
    fs::create_dir_all(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
}

/// Writes `data` to `path`, creating its parent directories.
pub fn write(path: &Path, data: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        mkdirs(parent);
    }
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A symlink at `link` pointing at `target`.
pub fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target.as_ref(), link)
        .unwrap_or_else(|e| panic!("symlink {}: {e}", link.display()));
}

/// A FIFO (named pipe, mode 0644).
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

/// Sets the permission bits of `path` to `mode`.
pub fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// `(st_dev, st_ino)` of `path` itself, not following a final symlink.
pub fn identity(path: &Path) -> (u64, u64) {
    let meta =
        fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
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
    /// Directories, the root included.
    pub dirs: u64,
    /// Files, symlinks and hard links.
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

/// Entry names of `dir`, sorted, without a sandbox's lease record (the
/// test's own sandbox carries one). [`name_strings`] and [`name_set`] are
/// the same names as text.
pub fn names(dir: &Path) -> Vec<OsString> {
    let mut names: Vec<OsString> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.as_os_str() != OsStr::new(sandkeeper_engine::lease::LEASE_FILE))
        .collect();
    names.sort();
    names
}

/// [`names`] as text (lossy UTF-8), sorted, without the lease record.
pub fn name_strings(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect()
}

/// [`names`] as a set of text (lossy UTF-8), without the lease record:
/// for comparing with what a test expects in any order.
pub fn name_set(dir: &Path) -> BTreeSet<String> {
    name_strings(dir).into_iter().collect()
}

/// [`name_strings`] without the remover's quarantines (names starting
/// with `.sandkeeper-trash`): the entries a root shows, also while a reap
/// is moving them out.
pub fn names_but_quarantines(dir: &Path) -> Vec<String> {
    let mut names = name_strings(dir);
    names.retain(|n| !n.starts_with(".sandkeeper-trash"));
    names
}

/// Sets the mtime (and atime) of `dir` and of the files directly in it to
/// `age` ago.
pub fn age_tree(dir: &Path, age: Duration) {
    let when = SystemTime::now() - age;
    let times = fs::FileTimes::new().set_modified(when).set_accessed(when);
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())) {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            fs::File::options()
                .write(true)
                .open(entry.path())
                .unwrap()
                .set_times(times)
                .unwrap();
        }
    }
    fs::File::open(dir).unwrap().set_times(times).unwrap();
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

/// An orphaned managed sandbox `root/name`, empty: leased (tag `orphan`),
/// then its owner gone (the lease dropped), as a killed creator leaves it.
/// Its path. [`Orphan`] makes one with files in it, aged.
pub fn orphan(root: &Path, name: &str) -> PathBuf {
    use sandkeeper::lease::{Lease, LeaseRecord};
    let record = LeaseRecord::for_current_process("orphan");
    let lease = Lease::create(root, name.as_ref(), &record, 0o700)
        .unwrap_or_else(|e| panic!("cannot make the orphan {}: {e}", root.join(name).display()));
    let path = lease.path().to_owned();
    drop(lease);
    path
}

/// An [`orphan`] with contents and an age:
/// `Orphan::new(root, "orphan-1").files(2, 50_000).age(day).make()` makes
/// the orphaned sandbox `root/orphan-1` holding the files `f0` and `f1` of
/// 50,000 bytes each, then sets its mtime and theirs to a day ago
/// ([`age_tree`]). Without [`files`](Orphan::files) it is empty, without
/// [`age`](Orphan::age) it is as new as it is.
#[must_use = "nothing is made until `make`"]
pub struct Orphan<'a> {
    root: &'a Path,
    name: &'a str,
    files: usize,
    bytes: usize,
    age: Option<Duration>,
}

impl<'a> Orphan<'a> {
    /// The orphan `root/name`, empty and new until told otherwise.
    pub fn new(root: &'a Path, name: &'a str) -> Orphan<'a> {
        Orphan {
            root,
            name,
            files: 0,
            bytes: 0,
            age: None,
        }
    }

    /// `count` files `f0`, `f1`, … of `bytes` bytes each inside.
    pub fn files(mut self, count: usize, bytes: usize) -> Orphan<'a> {
        self.files = count;
        self.bytes = bytes;
        self
    }

    /// Its mtime (and its files') `age` ago.
    pub fn age(mut self, age: Duration) -> Orphan<'a> {
        self.age = Some(age);
        self
    }

    /// Makes it; its path.
    pub fn make(self) -> PathBuf {
        let path = orphan(self.root, self.name);
        for i in 0..self.files {
            write(&path.join(format!("f{i}")), vec![7u8; self.bytes]);
        }
        if let Some(age) = self.age {
            age_tree(&path, age);
        }
        path
    }
}
