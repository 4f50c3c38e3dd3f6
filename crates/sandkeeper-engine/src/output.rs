//! Output files (metrics, reports) written safely in directories other
//! users may own or share.
//!
//! A tool that runs as root and writes a file into a directory another
//! user controls (node_exporter's textfile directory belongs to its own
//! user; `/tmp` is everyone's) must not let that user redirect the write:
//! a symlink planted at the target or at a predictable temp name, a
//! directory swapped for a link between two lookups, a FIFO where a file
//! was expected. [`write_atomic`] and [`OutputFile`] never write, truncate
//! or chmod a file they did not create:
//!
//! - **The directory is resolved once**, component by component from `/`
//!   (or from the working directory for a relative path), each component
//!   opened with `O_PATH|O_NOFOLLOW` and checked with `fstat` on the opened
//!   descriptor. Everything afterwards is relative to the directory's
//!   descriptor; no path is looked up twice.
//! - **Symlinks in the directory part** are followed only the way
//!   systemd's `chase()` with `CHASE_SAFE` does (and as
//!   [`Root`](crate::root::Root) opens roots): a step from a directory or
//!   link owned by a user who is neither root nor the caller to anything
//!   owned by someone else is refused, so a link or directory another user
//!   planted cannot lead into root's files. The last component (the file
//!   itself) is never followed.
//! - **No directory on the way may be writable by group or others**
//!   unless it is sticky and owned by root or the caller (like `/tmp`):
//!   in such a directory anyone could rename the components after it.
//!   A directory *owned* by another user is allowed (it is theirs to
//!   write); the mechanism below keeps them from redirecting the write.
//! - **The target**, if it exists, must be a regular file; a symlink,
//!   directory, FIFO, socket or device there is refused and never opened.
//! - **The content** goes into a new file under a random name, created
//!   with `O_CREAT|O_EXCL|O_NOFOLLOW` (mode 0600), written, `fchmod`ed to
//!   the wanted mode and `fsync`ed through its own descriptor, then
//!   `renameat` over the target in the same directory. A failure unlinks
//!   the temp name again (by the directory's descriptor). A reader never
//!   sees half a file.
//!
//! ```
//! use sandkeeper_engine::output;
//! # let scratch = sandkeeper_engine::Sandbox::new()?;
//! let path = scratch.path().join("report.json");
//! output::write_atomic(&path, b"{}\n", 0o644)?;
//! assert_eq!(std::fs::read(&path)?, b"{}\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Limits
//!
//! The owner of the output directory can still rename the temp file away
//! (or put something else under its name) between its creation and the
//! final rename, and so decide what the target name ends up holding: that
//! only changes names in their own directory, never a file elsewhere, and
//! the next write refuses a target that is no longer a regular file. ACLs
//! are not looked at: only the mode bits decide who else may write.
//!
//! # Platform behavior
//!
//! Needs `O_PATH` and `readlinkat` on an empty path (Linux 2.6.39+).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, IoResultExt, Result};
use crate::root::{chase, Chase, Last};

/// Random temp names tried before giving up (each one `O_EXCL`).
const TEMP_ATTEMPTS: usize = 8;

/// Writes `bytes` to `path` atomically and without following any link
/// someone else planted; the file ends up with permission bits `mode`
/// (e.g. `0o644`).
///
/// The same as [`OutputFile::open`] followed by [`OutputFile::write`]
/// (see the [module docs](self) for every check).
///
/// # Errors
///
/// As [`OutputFile::open`] and [`OutputFile::write`].
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    OutputFile::open(path)?.write(bytes, mode)
}

/// An output file whose directory was resolved and vetted once: every
/// [`write`](Self::write) goes through the directory's descriptor.
///
/// Opening it checks the directory chain and the target without creating
/// anything, so a caller can refuse bad output paths before it starts its
/// work (as `sandkeeper run --report-json` does).
///
/// ```
/// use sandkeeper_engine::output::OutputFile;
/// # let scratch = sandkeeper_engine::Sandbox::new()?;
/// let out = OutputFile::open(&scratch.path().join("metrics.prom"))?;
/// out.write(b"a 1\n", 0o644)?;
/// out.write(b"a 2\n", 0o644)?;
/// assert_eq!(std::fs::read(out.path())?, b"a 2\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct OutputFile {
    dir: OwnedFd,
    name: OsString,
    path: PathBuf,
}

impl OutputFile {
    /// Resolves and vets `path`'s directory and checks the target, creating
    /// nothing.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`]: `path` names no file (it is `/`, ends
    ///   in `..`, or is empty), or the target exists and is not a regular
    ///   file (a symlink, a directory, a FIFO, …): it is never opened.
    /// - [`ErrorKind::UnusableRoot`]: the directory does not exist, is not
    ///   a directory, or has too many links on the way (the `io` kind says
    ///   which).
    /// - [`ErrorKind::UnsafeRoot`]: a directory on the way is writable by
    ///   group or others and not sticky-and-owned-by-root-or-you, or a
    ///   symlink or directory owned by one user leads into something owned
    ///   by another (see the [module docs](self)).
    /// - [`ErrorKind::Io`]: any other failure, with the path.
    pub fn open(path: &Path) -> Result<OutputFile> {
        let name = match path.file_name() {
            Some(name) => name.to_owned(),
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    "the output path names no file (it is `/`, ends in `..`, or is empty)",
                )
                .at(path))
            }
        };
        let dir_path = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = open_dir_safely(dir_path)?;
        let out = OutputFile {
            dir,
            name,
            path: path.to_owned(),
        };
        out.check_target()?;
        Ok(out)
    }

    /// The path as given to [`open`](Self::open) (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's content with `bytes` (permission bits `mode`)
    /// atomically: a new file under a random temp name in the same
    /// directory (`O_CREAT|O_EXCL|O_NOFOLLOW`), written, `fchmod`ed and
    /// `fsync`ed, then renamed over the target. On failure the temp name
    /// is removed again and the target is left as it was.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when the target is (now) something
    /// other than a regular file; [`ErrorKind::Io`] with the path when the
    /// temp file cannot be created, written or renamed (a full disk, a
    /// directory that was removed, …).
    pub fn write(&self, bytes: &[u8], mode: u32) -> Result<()> {
        self.check_target()?;
        let (tmp, fd) = self.create_temp()?;
        let result = self.fill_and_rename(&tmp, fd, bytes, mode);
        if result.is_err() {
            // Ours: made with O_EXCL, in a directory only its owner (or
            // nobody else, if sticky) may rename things in.
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_os_str(), AtFlags::empty());
        } else {
            // Make the rename durable; the content already is.
            let _ = rustix::fs::fsync(&self.dir);
        }
        result
    }

    /// The target, if it exists, must be a regular file (looked at without
    /// following or opening it).
    fn check_target(&self) -> Result<()> {
        match rustix::fs::statat(&self.dir, self.name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => Ok(()),
                other => Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "refusing to replace an output file that is a {}, not a regular file",
                        kind_name(other)
                    ),
                )
                .at(&self.path)
                .with_hint("remove it or give another path")),
            },
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e).with_path("cannot inspect the output file", || self.path.clone()),
        }
    }

    fn create_temp(&self) -> Result<(OsString, OwnedFd)> {
        // Keep the temp name within NAME_MAX however long the target is.
        let stem = &self.name.as_bytes()[..self.name.len().min(200)];
        let mut last = Errno::EXIST;
        for _ in 0..TEMP_ATTEMPTS {
            let mut tmp = b".".to_vec();
            tmp.extend_from_slice(stem);
            tmp.push(b'.');
            tmp.extend_from_slice(crate::names::random_suffix(12).as_bytes());
            tmp.extend_from_slice(b".tmp");
            let tmp = OsString::from_vec(tmp);
            match rustix::fs::openat(
                &self.dir,
                tmp.as_os_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => return Ok((tmp, fd)),
                // Someone holds that name (planted or by chance): another.
                Err(Errno::EXIST) => last = Errno::EXIST,
                Err(e) => {
                    last = e;
                    break;
                }
            }
        }
        Err(last).with_path("cannot create a temp file beside the output file", || {
            self.path.clone()
        })
    }

    fn fill_and_rename(&self, tmp: &OsStr, fd: OwnedFd, bytes: &[u8], mode: u32) -> Result<()> {
        let shown = || self.path.with_file_name(tmp);
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o7777))
            .with_path("cannot set the mode of the temp file", shown)?;
        let mut file = File::from(fd);
        file.write_all(bytes)
            .with_path("cannot write the temp file", shown)?;
        file.sync_all()
            .with_path("cannot flush the temp file to disk", shown)?;
        drop(file);
        // The target may have changed since it was checked (only the
        // directory's owner can do that); rename replaces a name, never
        // writes through it.
        rustix::fs::renameat(&self.dir, tmp, &self.dir, self.name.as_os_str())
            .with_path("cannot rename the temp file over the output file", || {
                self.path.clone()
            })
    }
}

/// Opens `path` as a directory the safe way (see the module docs) and
/// returns an `O_RDONLY|O_DIRECTORY` descriptor of it: resolved as roots
/// are ([`crate::root`]), and every directory on the way vetted by
/// [`check_dir`].
pub(crate) fn open_dir_safely(path: &Path) -> Result<OwnedFd> {
    let me = rustix::process::geteuid().as_raw();
    let vet = |st: &Stat, at: &Path| check_dir(st, me, at);
    let how = Chase {
        what: "output directory",
        last: Last::Follow,
        vet: &vet,
        missing_hint: Some("create the directory first, or give another path"),
    };
    Ok(chase(path, &how)?.fd)
}

/// A directory on the way must not be writable by group or others, unless
/// it is sticky and owned by root or the caller.
fn check_dir(st: &Stat, me: u32, shown: &Path) -> Result<()> {
    let mode = st.st_mode & 0o7777;
    let shared = mode & 0o022 != 0;
    let sticky_and_trusted = mode & 0o1000 != 0 && (st.st_uid == 0 || st.st_uid == me);
    if !shared || sticky_and_trusted {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::UnsafeRoot,
        format!(
            "refusing to write an output file under a directory other users may write (mode {mode:04o}, owner uid {}{})",
            st.st_uid,
            if mode & 0o1000 != 0 { ", sticky but owned by someone else" } else { ", not sticky" }
        ),
    )
    .at(shown)
    .with_hint("make it writable by its owner only (chmod go-w), or sticky and owned by root, or give another path"))
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != crate::lease::LEASE_FILE)
            .collect();
        names.sort();
        names
    }

    #[test]
    fn output_file_is_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<OutputFile>();
    }

    #[test]
    fn writes_replace_set_the_mode_and_leave_no_temp_file() {
        let dir = crate::Sandbox::new().unwrap();
        let path = dir.path().join("out.prom");
        write_atomic(&path, b"a 1\n", 0o644).unwrap();
        write_atomic(&path, b"a 2\n", 0o640).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"a 2\n");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(names(dir.path()), ["out.prom"]);
    }

    #[test]
    fn failure_paths() {
        let dir = crate::Sandbox::new().unwrap();
        let p = dir.path();
        fs::create_dir(p.join("subdir")).unwrap();
        fs::write(p.join("file"), b"").unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p.join("fifo").as_path(),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        symlink(p.join("file"), p.join("link")).unwrap();
        let before = names(p);
        // (row, path, kind, io kind where it matters, text in the message)
        let cases: [(&str, PathBuf, ErrorKind, Option<std::io::ErrorKind>, &str); 6] = [
            (
                "missing dir",
                p.join("missing/x.prom"),
                ErrorKind::UnusableRoot,
                Some(std::io::ErrorKind::NotFound),
                "missing",
            ),
            (
                "dir is a file",
                p.join("file/x.prom"),
                ErrorKind::UnusableRoot,
                None,
                "not a directory",
            ),
            (
                "target is a directory",
                p.join("subdir"),
                ErrorKind::InvalidInput,
                None,
                "is a directory",
            ),
            (
                // Opening it for writing would block without a reader: the
                // test returning at all shows it was never opened.
                "target is a FIFO",
                p.join("fifo"),
                ErrorKind::InvalidInput,
                None,
                "is a FIFO",
            ),
            (
                "target is a symlink",
                p.join("link"),
                ErrorKind::InvalidInput,
                None,
                "is a symlink",
            ),
            (
                "no file name",
                p.join(".."),
                ErrorKind::InvalidInput,
                None,
                "names no file",
            ),
        ];
        for (row, path, kind, io_kind, text) in cases {
            let err = write_atomic(&path, b"x", 0o644).unwrap_err();
            assert_eq!(err.kind(), kind, "{row}: {err}");
            if let Some(want) = io_kind {
                assert_eq!(std::io::Error::from(err).kind(), want, "{row}");
                continue;
            }
            let msg = err.to_string();
            assert!(msg.contains(text), "{row}: {msg}");
            assert!(
                err.path().is_some_and(|e| e.starts_with(p)),
                "{row}: names the path: {msg}"
            );
        }
        assert_eq!(names(p), before, "nothing was created or removed");
        assert_eq!(
            fs::read(p.join("file")).unwrap(),
            b"",
            "the link's target untouched"
        );
    }

    #[test]
    fn directories_others_may_write() {
        let dir = crate::Sandbox::new().unwrap();
        let p = dir.path();
        // (row, mode of the directory, accepted)
        let cases = [
            ("owner only", 0o755, true),
            ("world-writable", 0o777, false),
            ("group-writable", 0o775, false),
            ("sticky, owned by us", 0o1777, true),
        ];
        for (row, mode, ok) in cases {
            let sub = p.join(format!("d{mode:o}"));
            fs::create_dir(&sub).unwrap();
            fs::set_permissions(&sub, fs::Permissions::from_mode(mode)).unwrap();
            let result = write_atomic(&sub.join("out"), b"x", 0o644);
            assert_eq!(result.is_ok(), ok, "{row}: {result:?}");
            if let Err(err) = result {
                assert_eq!(err.kind(), ErrorKind::UnsafeRoot, "{row}");
                assert_eq!(err.path(), Some(sub.as_path()), "{row}: names it");
                assert!(err.hint().is_some(), "{row}: says what to do");
            }
            // A refused parent refuses what is below it too.
            if !ok {
                fs::create_dir(sub.join("deeper")).unwrap();
                let err = write_atomic(&sub.join("deeper/out"), b"x", 0o644).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::UnsafeRoot, "{row}: below");
            }
        }
    }

    #[test]
    fn safe_symlinks_in_the_directory_part_are_followed() {
        let dir = crate::Sandbox::new().unwrap();
        let p = dir.path();
        fs::create_dir(p.join("real")).unwrap();
        symlink("real", p.join("rel")).unwrap();
        symlink(p.join("real"), p.join("abs")).unwrap();
        write_atomic(&p.join("rel/a"), b"1", 0o644).unwrap();
        write_atomic(&p.join("abs/b"), b"2", 0o644).unwrap();
        write_atomic(&p.join("real/../real/c"), b"3", 0o644).unwrap();
        assert_eq!(names(&p.join("real")), ["a", "b", "c"]);
        symlink("loop", p.join("loop")).unwrap();
        let err = write_atomic(&p.join("loop/x"), b"", 0o644).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnusableRoot, "{err}");
    }

    #[test]
    fn transitions() {
        let st = |uid: u32| {
            let mut st: Stat = rustix::fs::stat(".").unwrap();
            st.st_uid = uid;
            st
        };
        // (from uid, to uid, allowed), as uid 500
        let cases = [
            (0, 0, true),
            (0, 1000, true),
            (1000, 1000, true),
            (1000, 0, false),
            (1000, 65534, false),
            (500, 0, true),
            (500, 1000, true),
        ];
        for (from, to, ok) in cases {
            let r = crate::root::check_transition(
                &st(from),
                &st(to),
                500,
                || "/x".into(),
                Path::new("/x"),
            );
            assert_eq!(r.is_ok(), ok, "{from} -> {to}");
        }
    }
}
