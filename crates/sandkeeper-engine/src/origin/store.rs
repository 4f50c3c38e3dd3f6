//! The fallback store: origins of the entries of roots whose filesystem
//! has no `trusted.*` attributes (ramfs, vfat, some FUSE and network
//! filesystems), kept in files of the tool's own.
//!
//! - One directory, root's only: [`DEFAULT_STORE`] (the config's
//!   `origin_store`, or `SANDKEEPER_ORIGIN_STORE`, may name another). It
//!   is made `0700`, owned by root; an existing one that is a symlink, is
//!   not root's, is open to group or others, or lies below a directory
//!   that others could rename it out of, is refused ([`Store::open`]).
//! - One small file per root, named by the root directory's device and
//!   inode (`root-<dev>-<ino>.json`): a JSON document of records keyed by
//!   the entry's inode and name, each with the entry's birth time (or,
//!   where the filesystem gives none, its ctime) as it was when recorded.
//!   A record counts only for the entry with that inode, name and birth
//!   time: a new entry reusing the name, or the inode number, has another
//!   one and gets nothing.
//! - Bounded: at most [`MAX_STORED`] records per root and
//!   [`MAX_STORE_FILE`] bytes per file, the oldest dropped first. Readers
//!   skip records whose entry is gone or is another one; `watch`'s passes
//!   drop them from the file ([`Store::prune`]).
//! - Written whole: to a temporary name made with `O_EXCL`, flushed, then
//!   renamed over the file, under an exclusive `flock` of a lock file
//!   beside it (so two writers never lose each other's records).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, StatxFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use super::record::Origin;
use super::{entry, Written};
use crate::error::{Error, ErrorKind, IoResultExt, Result};

/// Where the store lives unless the config (`origin_store`) or
/// `SANDKEEPER_ORIGIN_STORE` says otherwise.
pub const DEFAULT_STORE: &str = "/var/lib/sandkeeper/origins";
/// The environment variable that names another store directory (for
/// commands that read no config: `scan`, `ls`, `explain`, `run`).
pub const STORE_ENV: &str = "SANDKEEPER_ORIGIN_STORE";
/// The most records kept per root; past it the oldest are dropped.
pub const MAX_STORED: usize = 10_000;
/// The largest store file, in bytes; past it the oldest records are
/// dropped, and a bigger file found there is not read.
pub const MAX_STORE_FILE: usize = 4 << 20;

/// The store directory to use: `configured` (the config's
/// `origin_store`), else [`STORE_ENV`] when set to an absolute path, else
/// [`DEFAULT_STORE`].
pub fn store_path(configured: Option<&Path>) -> PathBuf {
    if let Some(p) = configured {
        return p.to_owned();
    }
    match std::env::var_os(STORE_ENV).map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        _ => PathBuf::from(DEFAULT_STORE),
    }
}

/// When an entry came to be, as the store ties a record to it: its birth
/// time where the filesystem gives one, else its ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Born {
    /// `statx`'s `stx_btime`: fixed for the inode's life.
    Btime { sec: i64, nsec: u32 },
    /// `stx_ctime`, where there is no birth time: it changes with the
    /// inode (a chmod, a rename, a directory's new child), and the record
    /// is then no longer taken as the entry's (it errs toward none).
    Ctime { sec: i64, nsec: u32 },
}

/// The inode and birth of the entry open (`O_PATH`) as `fd`: `statx` of
/// the descriptor itself (the entry was reached without crossing a mount).
pub(crate) fn identity(fd: BorrowedFd<'_>) -> std::result::Result<(u64, Born), Errno> {
    let st = rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::INO | StatxFlags::BTIME | StatxFlags::CTIME,
    )?;
    let born = match StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME)
        && st.stx_btime.tv_sec != 0
    {
        true => Born::Btime {
            sec: st.stx_btime.tv_sec,
            nsec: st.stx_btime.tv_nsec,
        },
        false => Born::Ctime {
            sec: st.stx_ctime.tv_sec,
            nsec: st.stx_ctime.tv_nsec,
        },
    };
    Ok((st.stx_ino, born))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    ino: u64,
    /// The entry's name, hex (names are bytes).
    name: String,
    born: Born,
    origin: Origin,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    v: u32,
    /// The root, for people reading the file; not trusted.
    root: String,
    records: Vec<Stored>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The records of one root, as read: (inode, name) → (birth, origin).
#[derive(Debug, Default)]
pub(crate) struct Records(HashMap<(u64, Vec<u8>), (Born, Origin)>);

impl Records {
    /// The origin of the entry `name`, open as `fd`, if its record is for
    /// this very entry (inode, name and birth).
    pub(crate) fn get(&self, name: &OsStr, fd: BorrowedFd<'_>) -> Option<Origin> {
        let (ino, born) = identity(fd).ok()?;
        let (b, o) = self.0.get(&(ino, name.as_bytes().to_vec()))?;
        (*b == born && o.ino == ino).then(|| o.clone())
    }
}

/// Applies the bounds to `file` (the newest first; past [`MAX_STORED`]
/// records or [`MAX_STORE_FILE`] bytes the oldest go) and gives its text.
fn bounded(file: &mut StoreFile) -> Vec<u8> {
    file.records
        .sort_by_key(|r| std::cmp::Reverse(r.origin.recorded_ms));
    file.records.truncate(MAX_STORED);
    let mut text = serde_json::to_vec(&*file).unwrap_or_default();
    while text.len() > MAX_STORE_FILE && !file.records.is_empty() {
        let drop = (file.records.len() / 10).max(1);
        file.records.truncate(file.records.len() - drop);
        text = serde_json::to_vec(&*file).unwrap_or_default();
    }
    text
}

/// The store directory, open.
#[derive(Debug)]
pub struct Store {
    dir: OwnedFd,
    path: PathBuf,
}

/// Whether `st` may stand on the way to the store: root's, and not
/// writable by group or others unless sticky (where others cannot rename
/// what is root's).
fn safe_ancestor(st: &rustix::fs::Stat) -> bool {
    let mode = st.st_mode;
    st.st_uid == 0 && (mode & 0o022 == 0 || mode & 0o1000 != 0)
}

fn unsafe_store(path: &Path, why: &str) -> Error {
    Error::new(
        ErrorKind::UnsafeRoot,
        format!("refusing the origin store: {why}"),
    )
    .at(path)
    .with_hint(
        "the origin store must be a directory of root's, mode 0700, reached without symlinks through directories only root can change; remove it (it is made again) or name another with origin_store",
    )
}

impl Store {
    /// Opens the store directory `path` (absolute), making it (`0700`,
    /// root's; missing parents `0755`) when it does not exist.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnsafeRoot`] when it, or a directory on the way, is a
    /// symlink, is not root's, or is open to others (the store itself:
    /// any group or other bit; a parent: writable by others without being
    /// sticky); [`ErrorKind::InvalidInput`] for a relative path; an I/O
    /// error (not root, a read-only filesystem), each naming the path.
    pub fn open(path: &Path) -> Result<Store> {
        Store::open_with(path, true)?
            .ok_or_else(|| Error::new(ErrorKind::Io, "the origin store is missing").at(path))
    }

    /// Opens the store directory `path` if it exists (readers: nothing is
    /// made); `None` when it does not.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_existing(path: &Path) -> Result<Option<Store>> {
        Store::open_with(path, false)
    }

    fn open_with(path: &Path, create: bool) -> Result<Option<Store>> {
        if !path.is_absolute() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "the origin store must be an absolute path",
            )
            .at(path));
        }
        let parts: Vec<&OsStr> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        if parts.is_empty()
            || path
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "the origin store must be a directory below /, without . or ..",
            )
            .at(path));
        }
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = rustix::fs::open("/", dir_flags, Mode::empty())
            .with_path("cannot open", || PathBuf::from("/"))?;
        let mut here = PathBuf::from("/");
        for (n, part) in parts.iter().enumerate() {
            let last = n + 1 == parts.len();
            here.push(part);
            let next = match rustix::fs::openat(&dir, *part, dir_flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    let mode = if last { 0o700 } else { 0o755 };
                    match rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(mode)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => {
                            return Err(
                                Error::io("cannot make the origin store", e.into()).at(&here)
                            )
                        }
                    }
                    let fd =
                        rustix::fs::openat(&dir, *part, dir_flags, Mode::empty()).map_err(|e| {
                            match e {
                                Errno::LOOP | Errno::NOTDIR => {
                                    unsafe_store(&here, "a symlink or not a directory")
                                }
                                e => Error::io("cannot open the origin store", e.into()).at(&here),
                            }
                        })?;
                    if last {
                        // Made by us just now (checked below): exactly 0700
                        // whatever the umask.
                        let st = rustix::fs::fstat(&fd)
                            .with_path("cannot stat the origin store", || here.clone())?;
                        if st.st_uid == rustix::process::geteuid().as_raw() {
                            let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700));
                        }
                    }
                    fd
                }
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(unsafe_store(&here, "a symlink or not a directory"))
                }
                Err(e) => return Err(Error::io("cannot open the origin store", e.into()).at(&here)),
            };
            let st = rustix::fs::fstat(&next)
                .with_path("cannot stat the origin store", || here.clone())?;
            if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                return Err(unsafe_store(&here, "not a directory"));
            }
            if last {
                if st.st_uid != 0 {
                    return Err(unsafe_store(&here, "not owned by root"));
                }
                if st.st_mode & 0o077 != 0 {
                    return Err(unsafe_store(&here, "open to group or others (not 0700)"));
                }
            } else if !safe_ancestor(&st) {
                return Err(unsafe_store(
                    &here,
                    "a directory on the way is not root's or others may rename in it",
                ));
            }
            dir = next;
        }
        Ok(Some(Store {
            dir,
            path: path.to_owned(),
        }))
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its descriptor.
    pub(crate) fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The file of the root open as `root`: by its device and inode.
    fn file_of(root: BorrowedFd<'_>) -> std::result::Result<String, Errno> {
        let st = rustix::fs::fstat(root)?;
        Ok(format!("root-{:x}-{:x}.json", st.st_dev, st.st_ino))
    }

    /// The records of the root open as `root` (none when it has no file,
    /// or the file is not one of ours: too big, not JSON).
    pub(crate) fn load(&self, root: BorrowedFd<'_>) -> Records {
        let Ok(name) = Store::file_of(root) else {
            return Records::default();
        };
        let mut map = HashMap::new();
        for r in self.read_file(&name).records {
            if let Some(n) = unhex(&r.name) {
                map.insert((r.ino, n), (r.born, r.origin));
            }
        }
        Records(map)
    }

    fn read_file(&self, name: &str) -> StoreFile {
        let Ok(fd) = rustix::fs::openat(
            &self.dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        ) else {
            return StoreFile::default();
        };
        let regular = rustix::fs::fstat(&fd)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile);
        if !regular {
            return StoreFile::default();
        }
        let mut text = Vec::new();
        let file = std::fs::File::from(fd);
        if file
            .take(MAX_STORE_FILE as u64 + 1)
            .read_to_end(&mut text)
            .is_err()
            || text.len() > MAX_STORE_FILE
        {
            return StoreFile::default();
        }
        match serde_json::from_slice::<StoreFile>(&text) {
            Ok(mut f) if f.v == 1 => {
                // Bounded again: only root writes here, but the bounds are
                // the reader's too.
                f.records.truncate(MAX_STORED);
                f.records
                    .retain_mut(|r| match Origin::decode(&r.origin.encode()) {
                        Some(o) => {
                            r.origin = o;
                            true
                        }
                        None => false,
                    });
                f
            }
            _ => StoreFile::default(),
        }
    }

    /// Changes the file of `root` under its lock: `change` edits the
    /// records; then the bounds are applied (oldest dropped) and the file
    /// is written anew and renamed into place.
    fn update<T>(
        &self,
        root: BorrowedFd<'_>,
        change: impl FnOnce(&mut Vec<Stored>) -> T,
    ) -> Result<T> {
        let root_path = rustix::fs::readlink(super::fd_path(root), Vec::new())
            .map(|p| PathBuf::from(OsStr::from_bytes(p.as_bytes())))
            .unwrap_or_default();
        let root_path = root_path.as_path();
        let name = Store::file_of(root).with_path("cannot stat the root", || root_path)?;
        let at = || self.path.join(&name);
        let lock = rustix::fs::openat(
            &self.dir,
            format!("{name}.lock"),
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .with_path("cannot open the lock of the origin store file", at)?;
        rustix::fs::flock(&lock, FlockOperation::LockExclusive)
            .with_path("cannot lock the origin store file", at)?;
        let mut file = self.read_file(&name);
        let out = change(&mut file.records);
        file.v = 1;
        file.root = root_path.to_string_lossy().into_owned();
        let text = bounded(&mut file);
        self.replace(&name, &text)
            .with_path("cannot write the origin store file", at)?;
        Ok(out)
    }

    /// Writes `text` to a new file (`O_EXCL`, `0600`) and renames it over
    /// `name`.
    fn replace(&self, name: &str, text: &[u8]) -> std::io::Result<()> {
        let tmp = format!(
            ".{name}.{}.{:016x}.tmp",
            std::process::id(),
            fastrand::u64(..)
        );
        let fd = rustix::fs::openat(
            &self.dir,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut f = std::fs::File::from(fd);
        let written = f.write_all(text).and_then(|()| f.sync_data());
        let renamed = written.and_then(|()| {
            rustix::fs::renameat(&self.dir, &tmp, &self.dir, name).map_err(Into::into)
        });
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
        }
        renamed
    }

    /// Records `origins` — (name, the entry's birth as [`identity`] gave
    /// it, its origin, which holds the inode) — in the file of `root`, each unless its entry has a record already
    /// (the same inode, name and birth): what `XATTR_CREATE` does for the
    /// attribute. A record of the same name and inode but another birth
    /// (another entry) is replaced.
    ///
    /// # Errors
    ///
    /// When the file cannot be locked or written (naming it).
    pub(crate) fn put(
        &self,
        root: BorrowedFd<'_>,
        origins: Vec<(Vec<u8>, Born, Origin)>,
    ) -> Result<Vec<Written>> {
        self.update(root, |records| {
            origins
                .into_iter()
                .map(|(name, born, origin)| {
                    let hexname = hex(&name);
                    match records
                        .iter_mut()
                        .find(|r| r.ino == origin.ino && r.name == hexname)
                    {
                        Some(r) if r.born == born => Written::AlreadyRecorded,
                        Some(r) => {
                            *r = Stored {
                                ino: origin.ino,
                                name: hexname,
                                born,
                                origin,
                            };
                            Written::Recorded
                        }
                        None => {
                            records.push(Stored {
                                ino: origin.ino,
                                name: hexname,
                                born,
                                origin,
                            });
                            Written::Recorded
                        }
                    }
                })
                .collect()
        })
    }

    /// Drops the records of `root` whose entry is gone or is another one
    /// now (another inode or birth under the name); returns how many.
    /// `watch` does this on each pass over a tracked root.
    ///
    /// # Errors
    ///
    /// When the file cannot be locked or written (naming it). A root with
    /// no file has nothing to drop (`Ok(0)`, nothing written).
    pub fn prune(&self, root: BorrowedFd<'_>) -> Result<usize> {
        let name = Store::file_of(root).with_path("cannot stat the root", || self.path.clone())?;
        if rustix::fs::statat(&self.dir, &name, AtFlags::SYMLINK_NOFOLLOW).is_err() {
            return Ok(0);
        }
        self.update(root, |records| {
            let before = records.len();
            records.retain(|r| {
                let Some(n) = unhex(&r.name) else {
                    return false;
                };
                let Ok((fd, ino)) = entry(root, OsStr::from_bytes(&n)) else {
                    return false;
                };
                ino == r.ino && identity(fd.as_fd()).is_ok_and(|(_, b)| b == r.born)
            });
            before - records.len()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_as_hex() {
        for name in [&b"app-1"[..], b"\xff\x00x", b""] {
            assert_eq!(unhex(&hex(name)).as_deref(), Some(name));
        }
        for bad in ["a", "zz", "0g"] {
            assert_eq!(unhex(bad), None, "{bad}");
        }
    }

    fn stored(n: usize, argv: usize) -> Stored {
        Stored {
            ino: n as u64,
            name: hex(format!("e-{n}").as_bytes()),
            born: Born::Btime { sec: 1, nsec: 0 },
            origin: Origin {
                v: 1,
                ino: n as u64,
                recorded_ms: n as i64,
                by: super::super::Recorder::Watch,
                creator: super::super::Creator::Process(super::super::Process {
                    pid: 1,
                    argv: vec!["x".repeat(argv)],
                    ..Default::default()
                }),
            },
        }
    }

    /// Past either bound the oldest records go, and what stays fits.
    #[test]
    fn the_bounds_drop_the_oldest() {
        let cases: &[(&str, usize, usize, usize)] = &[
            // (case, records, argv bytes, records kept at most)
            ("few", 10, 10, 10),
            ("too many", MAX_STORED + 50, 10, MAX_STORED),
            ("too big", 30_000 / 10, 2_000, MAX_STORE_FILE / 2_000),
        ];
        for (name, n, argv, most) in cases {
            let mut file = StoreFile {
                v: 1,
                root: "/r".into(),
                records: (0..*n).map(|i| stored(i, *argv)).collect(),
            };
            let text = bounded(&mut file);
            assert!(text.len() <= MAX_STORE_FILE, "{name}");
            assert!(
                file.records.len() <= *most,
                "{name}: {}",
                file.records.len()
            );
            let oldest_kept = file.records.iter().map(|r| r.origin.recorded_ms).min();
            let dropped = n - file.records.len();
            assert_eq!(oldest_kept, Some(dropped as i64), "{name}: the oldest went");
        }
    }

    #[test]
    fn relative_and_dotted_paths_are_refused() {
        for p in ["relative/store", "/", "/var/../tmp/x"] {
            let err = Store::open_existing(Path::new(p)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{p}");
        }
    }
}
