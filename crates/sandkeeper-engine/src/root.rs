//! Roots: the directories whose entries are scanned and reaped, opened
//! once and used only through that descriptor.
//!
//! sandkeeper runs as root over directories any user can write. A root
//! given by path is therefore resolved exactly once, one component at a
//! time, the way systemd's `chase()` does with `CHASE_SAFE`:
//!
//! - every component is opened relative to the directory before it with
//!   `O_PATH|O_NOFOLLOW` and inspected with `fstat` on that descriptor, so
//!   what is checked is what is used;
//! - a step from a directory or symlink owned by one non-root user to
//!   something owned by another user (root included) is refused: that user
//!   could have swapped it for anything ([`ErrorKind::UnsafeRoot`]);
//! - symlinks are followed (at most 40) only under that rule; where the
//!   root itself is a symlink, [`Root::open_exact`] (used by reaping)
//!   refuses it, naming its target, and [`Root::open`] (used by the audit)
//!   follows it and says so ([`Root::followed`]);
//! - everything afterwards — listing, walking, probing, removing — is
//!   relative to the one descriptor: no path is resolved twice.
//!
//! The per-user roots `sandkeeper-<uid>` inside a root, where keyed
//! sandboxes live, are found and opened relative to it
//! ([`Root::user_dirs`]), and trusted only when they are what the library
//! makes: a real directory owned by that uid and closed to others (mode
//! 0700). Anything else of that name is an ordinary entry.
//!
//! ```
//! use sandkeeper_engine::root::Root;
//! # let dir = sandkeeper_engine::Sandbox::new()?;
//! let root = Root::open(dir.path())?;
//! assert!(root.followed().is_empty());
//! println!("scanning {}", root.path().display());
//! # Ok::<(), sandkeeper_engine::Error>(())
//! ```

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Result};
use sandkeeper::__engine::Escaped;

/// The most symlinks one resolution follows (as the kernel's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

/// The name prefix of per-user roots: `sandkeeper-<uid>`.
pub(crate) const USER_ROOT_PREFIX: &str = "sandkeeper-";

/// A directory opened once, safely, to scan or reap its entries.
///
/// Cloning is cheap and shares the descriptor.
#[derive(Clone)]
pub struct Root {
    path: PathBuf,
    fd: Arc<OwnedFd>,
    dev: u64,
    ino: u64,
    uid: u32,
    followed: Vec<(PathBuf, PathBuf)>,
    user_uid: Option<u32>,
}

impl fmt::Debug for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Root")
            .field("path", &self.path)
            .field("dev", &self.dev)
            .field("ino", &self.ino)
            .field("uid", &self.uid)
            .field("followed", &self.followed)
            .field("user_uid", &self.user_uid)
            .finish_non_exhaustive()
    }
}

/// Whether the last component may be a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Last {
    Follow,
    Refuse,
}

/// Which per-user roots [`Root::user_dirs`] opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserDirs {
    /// Every user's (what root reaps).
    All,
    /// Only this uid's.
    Only(u32),
}

/// Where a path stands relative to a set of roots ([`Root::place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// It is the root at this index.
    Root(usize),
    /// It is, or is inside, a top-level entry of the root at `root`.
    Entry {
        /// The index of the root.
        root: usize,
        /// The entry's path (`root/<first component below it>`).
        path: PathBuf,
    },
    /// It is inside none of them.
    Outside,
}

/// Where an `explain` path is explained: the root it is placed in (one of
/// [`roots`](Self::roots), or its own parent) and the top-level entry.
#[derive(Debug)]
pub struct Placed {
    /// The roots opened to place it (`--root`'s, or the defaults).
    pub roots: Vec<Root>,
    /// Its parent directory, opened as a root (used when no root holds it).
    pub parent: Root,
    /// Which root: an index into `roots`, or `None` for `parent`.
    pub root: Option<usize>,
    /// The top-level entry of that root that is, or holds, the path.
    pub entry: PathBuf,
}

impl Placed {
    /// The root the entry is in.
    pub fn root(&self) -> &Root {
        self.root.map_or(&self.parent, |i| &self.roots[i])
    }
}

/// Places `path` for `explain`, the one rule of every face: without
/// `given` roots, a path inside a default root (the temp directory, the
/// caller's per-user directories) is placed there, as scan and reap see
/// it; anywhere else its parent directory is its root (opened once, as a
/// root is) and the path itself is the entry, looked up without following
/// its last name (`explain LINK` explains the link). With `given` roots,
/// the deepest that holds it.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] when the path names no entry (`/`, a path
/// ending in `..`), does not exist, has `/` for its parent, is a root
/// itself, or is inside none of the `given` roots (each saying what to do);
/// what [`open_roots`] says of the roots.
pub fn place_for_explain(path: &Path, given: &[PathBuf]) -> Result<Placed> {
    let shown = |p: &Path| Escaped(p.as_os_str().as_bytes()).to_string();
    let refuse = |message: String, hint: String| {
        Error::new(ErrorKind::InvalidInput, message).with_hint(hint)
    };
    let cannot = |why: String| {
        refuse(
            format!("cannot explain {}: {why}", shown(path)),
            "give the path of an existing entry".into(),
        )
    };
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(cannot(
            "it names no entry (it is `/`, or ends in `..`)".into(),
        ));
    };
    let parent = match parent.as_os_str().is_empty() {
        true => Path::new("."),
        false => parent,
    };
    let parent = Root::open(parent).map_err(|e| cannot(e.to_string()))?;
    rustix::fs::statat(parent.fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| cannot(std::io::Error::from(e).to_string()))?;
    let target = parent.path().join(name);
    if given.is_empty() {
        let roots = open_roots(&[], true, Purpose::Read)?;
        if let Place::Entry { root, path } = Root::place(&roots, &target) {
            return Ok(Placed {
                roots,
                parent,
                root: Some(root),
                entry: path,
            });
        }
        if parent.is_filesystem_root() {
            return Err(refuse(
                format!(
                    "cannot explain {}: its parent directory is the filesystem root `/`, which is never a root",
                    shown(&target)
                ),
                format!(
                    "explain an entry inside it, such as {}/NAME, or name a root with --root DIR",
                    shown(&target)
                ),
            ));
        }
        return Ok(Placed {
            roots,
            parent,
            root: None,
            entry: target,
        });
    }
    let roots = open_roots(given, false, Purpose::Read)?;
    match Root::place(&roots, &target) {
        Place::Entry { root, path } => Ok(Placed { roots, parent, root: Some(root), entry: path }),
        Place::Root(_) => Err(refuse(
            format!("{} is a root, not an entry", shown(&target)),
            format!(
                "explain an entry inside it, such as {0}/NAME (`sandkeeper scan --entries {0}` lists them)",
                shown(&target)
            ),
        )),
        Place::Outside => {
            let listed: Vec<String> = roots.iter().map(|r| shown(r.path())).collect();
            Err(refuse(
                format!("{} is not inside any root (roots: {})", shown(path), listed.join(", ")),
                "name its root with --root DIR, or drop --root to take its parent directory as its root".into(),
            ))
        }
    }
}

/// `root/<first component of target below root>`, if target is below root.
fn top_level_entry(root: &Path, target: &Path) -> Option<PathBuf> {
    let rest = target.strip_prefix(root).ok()?;
    match rest.components().next()? {
        Component::Normal(name) => Some(root.join(name)),
        _ => None,
    }
}

impl UserDirs {
    /// [`All`](Self::All) for root, else only the caller's own: the others
    /// are closed to a normal user anyway.
    pub fn for_caller() -> UserDirs {
        let me = rustix::process::geteuid().as_raw();
        if me == 0 {
            UserDirs::All
        } else {
            UserDirs::Only(me)
        }
    }
}

/// What roots are opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Looking only: a root that is a symlink is followed (and the report
    /// says so: [`Root::followed`]).
    Read,
    /// Removing: a root that is a symlink is refused ([`Root::open_exact`]).
    Remove,
}

/// The roots a scan or a reap works on: the one rule of every face (the
/// command, `watch`, the Python package). The given directories, each
/// opened once, for `purpose`; `/` refused (told by device and inode,
/// however it was named); no two that overlap (the same directory, or one
/// inside the other, as written, as resolved, or by identity). With none
/// given: the system temp directory (honouring `TMPDIR`) and, with
/// `user_dirs`, the caller's per-user sandbox directories in it.
///
/// ```
/// use sandkeeper_engine::root::{open_roots, Purpose};
/// # let dir = sandkeeper_engine::Sandbox::new()?;
/// # std::fs::create_dir(dir.path().join("inner"))?;
/// let err = open_roots(&["/".into()], false, Purpose::Read).unwrap_err();
/// assert!(err.to_string().contains("filesystem root"));
/// let nested = [dir.path().to_owned(), dir.path().join("inner")];
/// let err = open_roots(&nested, false, Purpose::Read).unwrap_err();
/// assert!(err.to_string().contains("is inside root"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for `/` and for overlapping roots, naming
/// them; what [`Root::open`] or [`Root::open_exact`] says of a root that
/// cannot be opened.
pub fn open_roots(given: &[PathBuf], user_dirs: bool, purpose: Purpose) -> Result<Vec<Root>> {
    let open = |path: &Path| match purpose {
        Purpose::Read => Root::open(path),
        Purpose::Remove => Root::open_exact(path),
    };
    if given.is_empty() {
        let tmp = open(&std::env::temp_dir())?;
        let mut roots = match user_dirs {
            true => tmp.user_dirs(UserDirs::for_caller()),
            false => Vec::new(),
        };
        roots.insert(0, tmp);
        return Ok(roots);
    }
    let roots = given
        .iter()
        .map(|p| open(p))
        .collect::<Result<Vec<Root>>>()?;
    if let Some(root) = roots.iter().find(|r| r.is_filesystem_root()) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "refusing the root {}: it is the filesystem root `/`",
                Escaped(root.path().as_os_str().as_bytes())
            ),
        )
        .with_hint("give the directory that holds the leftovers, such as /tmp"));
    }
    let resolved: Vec<PathBuf> = roots.iter().map(|r| r.path().to_owned()).collect();
    let mut by_identity = std::collections::HashMap::new();
    let same = roots.iter().enumerate().find_map(|(later, r)| {
        by_identity
            .insert(r.identity(), later)
            .map(|earlier| (later, earlier, "is the same directory as"))
    });
    let overlap = [first_overlap(given), first_overlap(&resolved), same]
        .into_iter()
        .flatten()
        .min_by_key(|&(later, _, _)| later);
    if let Some((later, earlier, how)) = overlap {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "root {} {how} root {}: an entry may belong to one root only",
                Escaped(given[later].as_os_str().as_bytes()),
                Escaped(given[earlier].as_os_str().as_bytes()),
            ),
        )
        .with_hint("give only one of them"));
    }
    Ok(roots)
}

/// The first pair of `paths` that overlap (the same directory, or one
/// inside the other, compared by components): `(later, earlier, how the
/// later relates to the earlier)`, the one whose later path comes first.
/// Sorting makes it `n log n`: in component order everything inside a
/// directory comes right after it, so an overlap always shows up between
/// neighbours. The config file's check and [`open_roots`] both use it.
pub(crate) fn first_overlap(paths: &[PathBuf]) -> Option<(usize, usize, &'static str)> {
    let mut order: Vec<usize> = (0..paths.len()).collect();
    order.sort_by(|&a, &b| paths[a].cmp(&paths[b]).then(a.cmp(&b)));
    let mut found: Option<(usize, usize, &'static str)> = None;
    for pair in order.windows(2) {
        let (outer, inner) = (pair[0], pair[1]);
        if !paths[inner].starts_with(&paths[outer]) {
            continue;
        }
        let (later, earlier) = (outer.max(inner), outer.min(inner));
        let how = if paths[inner] == paths[outer] {
            "is the same directory as"
        } else if later == inner {
            "is inside"
        } else {
            "contains"
        };
        if found.is_none_or(|(l, _, _)| later < l) {
            found = Some((later, earlier, how));
        }
    }
    found
}

impl Root {
    /// Opens `path` as a root for reading: symlinks on the way (the root
    /// itself included) are followed where that is safe, and listed in
    /// [`followed`](Self::followed) so the caller can say so.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::UnusableRoot`]: a component does not exist, is not a
    ///   directory, or cannot be opened; the root cannot be read.
    /// - [`ErrorKind::UnsafeRoot`]: the path passes from something owned by
    ///   one non-root user to something owned by another, so that user
    ///   could redirect it; or it loops through symlinks.
    pub fn open(path: &Path) -> Result<Root> {
        chase_root(path, Last::Follow)
    }

    /// Opens `path` as a root to remove things from: as [`open`](Self::open),
    /// but a root that is itself a symlink is refused (a reaper is given
    /// the directory itself, never a name someone else may re-point).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open); and [`ErrorKind::UnsafeRoot`] when the
    /// root is a symlink, naming what it points to.
    ///
    /// ```
    /// use sandkeeper_engine::root::Root;
    /// # let dir = sandkeeper_engine::Sandbox::new()?;
    /// # std::fs::create_dir(dir.path().join("real"))?;
    /// std::os::unix::fs::symlink("real", dir.path().join("link"))?;
    /// let err = Root::open_exact(&dir.path().join("link")).unwrap_err();
    /// assert_eq!(err.kind(), sandkeeper_engine::ErrorKind::UnsafeRoot);
    /// assert!(Root::open(&dir.path().join("link")).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_exact(path: &Path) -> Result<Root> {
        chase_root(path, Last::Refuse)
    }

    /// The root's path as resolved (symlinks replaced by their targets).
    /// For display and for matching what the kernel reports by path; never
    /// opened again.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open directory (`O_RDONLY|O_DIRECTORY`).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Device and inode of the root directory.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// The owner of the root directory.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The symlinks followed to reach the root: `(link, what it says)`.
    pub fn followed(&self) -> &[(PathBuf, PathBuf)] {
        &self.followed
    }

    /// `Some(uid)` when this is the per-user root `sandkeeper-<uid>` found
    /// by [`user_dirs`](Self::user_dirs).
    pub fn user_uid(&self) -> Option<u32> {
        self.user_uid
    }

    /// Whether this root is the filesystem root `/` (which no reap takes).
    pub fn is_filesystem_root(&self) -> bool {
        rustix::fs::stat("/").is_ok_and(|st| (st.st_dev, st.st_ino) == (self.dev, self.ino))
    }

    /// Where `target` stands relative to `roots`: one of them, a top-level
    /// entry of one (the deepest root that holds it wins: a per-user root
    /// inside `/tmp` over `/tmp`), or outside them all. Compared by path:
    /// give a `target` resolved like a root ([`Root::resolve_entry_path`]).
    ///
    /// ```
    /// use sandkeeper_engine::root::{Place, Root};
    ///
    /// let dir = sandkeeper_engine::Sandbox::new()?;
    /// let roots = [Root::open(dir.path())?];
    /// let inside = roots[0].path().join("app-1").join("deep");
    /// assert_eq!(Root::place(&roots, &inside), Place::Entry { root: 0, path: roots[0].path().join("app-1") });
    /// assert_eq!(Root::place(&roots, roots[0].path()), Place::Root(0));
    /// assert_eq!(Root::place(&roots, "/nowhere/x".as_ref()), Place::Outside);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn place(roots: &[Root], target: &Path) -> Place {
        if let Some(i) = roots.iter().position(|r| r.path() == target) {
            return Place::Root(i);
        }
        let mut best: Option<(usize, PathBuf)> = None;
        for (i, root) in roots.iter().enumerate() {
            let Some(entry) = top_level_entry(root.path(), target) else {
                continue;
            };
            let depth = |r: &Root| r.path().components().count();
            if best
                .as_ref()
                .is_none_or(|(b, _)| depth(root) > depth(&roots[*b]))
            {
                best = Some((i, entry));
            }
        }
        match best {
            Some((root, path)) => Place::Entry { root, path },
            None => Place::Outside,
        }
    }

    /// The path of an entry as a root would name it: its directory resolved
    /// the way [`Root::open`] resolves a root, its last name kept as it is
    /// and checked to exist without following it (the entry itself is never
    /// followed).
    ///
    /// # Errors
    ///
    /// When the directory cannot be opened as a root, or the name does not
    /// exist in it.
    pub fn resolve_entry_path(path: &Path) -> Result<PathBuf> {
        match crate::names::split_parent(path) {
            Ok((parent, name)) => {
                let dir = Root::open(parent)?;
                rustix::fs::statat(dir.fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| Error::io("cannot find", e.into()).at(path))?;
                Ok(dir.path().join(name))
            }
            // `/`, a path ending in `..`: no last name to keep.
            Err(_) => Ok(Root::open(path)?.path().to_owned()),
        }
    }

    /// The per-user roots `sandkeeper-<uid>` directly inside this root
    /// (`which` of them), opened relative to it without following
    /// symlinks, and kept only when owned by that uid with mode 0700 (what
    /// the library makes); sorted by name. Names that do not qualify are
    /// ordinary entries of this root.
    pub fn user_dirs(&self, which: UserDirs) -> Vec<Root> {
        // Only the names of per-user roots are kept: a root of a million
        // long names is not held twice.
        let Ok(names) = crate::dirlist::read_names_where(self.fd(), &self.path, |name| {
            user_root_uid(name).is_some()
        }) else {
            return Vec::new();
        };
        let mut found: Vec<Root> = names
            .iter()
            .filter_map(|name| {
                let uid = user_root_uid(name.as_bytes())?;
                if let UserDirs::Only(me) = which {
                    if uid != me {
                        return None;
                    }
                }
                self.open_user_dir(name, uid)
            })
            .collect();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found
    }

    fn open_user_dir(&self, name: &OsStr, uid: u32) -> Option<Root> {
        let fd = rustix::fs::openat(
            self.fd(),
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if !is_user_root_stat(&st, uid) {
            return None;
        }
        Some(Root {
            path: self.path.join(name),
            fd: Arc::new(fd),
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            followed: Vec::new(),
            user_uid: Some(uid),
        })
    }
}

/// The uid in a per-user root's name `sandkeeper-<uid>`.
pub(crate) fn user_root_uid(name: &[u8]) -> Option<u32> {
    let digits = name.strip_prefix(USER_ROOT_PREFIX.as_bytes())?;
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // No leading zeros: `sandkeeper-0001` is not what the library makes.
    if digits.len() > 1 && digits[0] == b'0' {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Whether `st` is what the library makes as the per-user root of `uid`:
/// a directory owned by `uid`, closed to group and others.
pub(crate) fn is_user_root_stat(st: &Stat, uid: u32) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
        && st.st_uid == uid
        && st.st_mode & 0o077 == 0
}

/// Whether the entry `name` of `dir` is one of the tool's own directories —
/// a per-user root or a quarantine the caller's removals use — and so not
/// an entry of `dir`. Decided from `lstat` relative to `dir`: names alone
/// are trusted for nothing.
pub(crate) fn is_own_dir(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    match user_root_uid(name.as_bytes()) {
        Some(uid) => rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| is_user_root_stat(&st, uid)),
        // A quarantine is ours only if our removals made it (what
        // `remove` trusts too); another user's look-alike is an ordinary
        // entry, visible and sized.
        None => crate::remove::is_own_quarantine_at(dir, name),
    }
}

/// How [`chase`] resolves a path, for roots and for output directories.
pub(crate) struct Chase<'a> {
    /// What the path is, in messages: "root", "output directory".
    pub(crate) what: &'static str,
    /// Whether the last component may be a symlink.
    pub(crate) last: Last,
    /// Called for every directory on the way (`/` and the last included),
    /// with the path it was reached by: refuses what the caller cannot
    /// accept (the output writer refuses directories others may write).
    pub(crate) vet: &'a dyn Fn(&Stat, &Path) -> Result<()>,
    /// Said when a component does not exist.
    pub(crate) missing_hint: Option<&'static str>,
}

impl Chase<'_> {
    fn for_root(last: Last) -> Chase<'static> {
        Chase {
            what: "root",
            last,
            vet: &|_, _| Ok(()),
            missing_hint: None,
        }
    }
}

/// A directory [`chase`] resolved: its path (symlinks replaced), an
/// `O_RDONLY|O_DIRECTORY` descriptor, its `fstat`, and the links followed.
pub(crate) struct Resolved {
    pub(crate) path: PathBuf,
    pub(crate) fd: OwnedFd,
    pub(crate) st: Stat,
    pub(crate) followed: Vec<(PathBuf, PathBuf)>,
}

/// One step of a resolution: the directories entered so far.
struct Step {
    fd: OwnedFd,
    st: Stat,
    name: OsString,
}

fn chase_root(given: &Path, last: Last) -> Result<Root> {
    let r = chase(given, &Chase::for_root(last))?;
    Ok(Root {
        path: r.path,
        fd: Arc::new(r.fd),
        dev: r.st.st_dev,
        ino: r.st.st_ino,
        uid: r.st.st_uid,
        followed: r.followed,
        user_uid: None,
    })
}

/// Resolves `given` to a directory once, component by component from `/`,
/// each opened `O_PATH|O_NOFOLLOW` relative to the one before and judged by
/// `fstat` on its descriptor (see the [module docs](self)).
pub(crate) fn chase(given: &Path, how: &Chase<'_>) -> Result<Resolved> {
    let absolute = if given.is_absolute() {
        given.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("cannot resolve a relative path", e).at(given))?
            .join(given)
    };
    let me = rustix::process::geteuid().as_raw();
    let slash = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("cannot open /", e.into()).at(given))?;
    let slash_st = rustix::fs::fstat(&slash).map_err(|e| Error::io("cannot stat /", e.into()))?;
    (how.vet)(&slash_st, Path::new("/"))?;
    let mut stack = vec![Step {
        fd: slash,
        st: slash_st,
        name: OsString::new(),
    }];
    let mut todo: VecDeque<OsString> = components(&absolute);
    // The last object passed through (a directory or a symlink): each step
    // is judged as a transition from it.
    let mut previous = slash_st;
    let mut followed: Vec<(PathBuf, PathBuf)> = Vec::new();
    let unusable = |at: &Path, errno: Errno, last: bool| unusable(how, given, at, errno, last);
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            let parent = &stack[stack.len() - 1].st;
            check_transition(&previous, parent, me, || current_path(&stack), given)?;
            previous = *parent;
            continue;
        }
        let here = current_path(&stack).join(&name);
        let parent = &stack[stack.len() - 1];
        let fd = rustix::fs::openat(
            &parent.fd,
            &name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unusable(&here, e, todo.is_empty()))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| unusable(&here, e, todo.is_empty()))?;
        check_transition(&previous, &st, me, || here.clone(), given)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(&fd, "", Vec::new())
                    .map_err(|e| unusable(&here, e, todo.is_empty()))?;
                let target = PathBuf::from(OsStr::from_bytes(target.to_bytes()));
                if todo.is_empty() && how.last == Last::Refuse {
                    let resolved = chase(&here, &Chase::for_root(Last::Follow))
                        .map(|r| r.path)
                        .unwrap_or_else(|_| target.clone());
                    return Err(Error::new(
                        ErrorKind::UnsafeRoot,
                        format!(
                            "{} is a symlink (to {}); refusing to follow it when removing",
                            how.what,
                            resolved.display()
                        ),
                    )
                    .at(given)
                    .with_hint("give the directory itself, not a link to it"));
                }
                followed.push((here.clone(), target.clone()));
                if followed.len() > MAX_SYMLINKS {
                    return Err(Error::new(
                        ErrorKind::UnusableRoot,
                        "too many levels of symbolic links",
                    )
                    .at(given)
                    .with_source(Errno::LOOP.into()));
                }
                if target.is_absolute() {
                    stack.truncate(1);
                    let slash = stack[0].st;
                    check_transition(&st, &slash, me, || PathBuf::from("/"), given)?;
                    previous = slash;
                } else {
                    previous = st;
                }
                for (i, part) in components(&target).into_iter().enumerate() {
                    todo.insert(i, part);
                }
            }
            FileType::Directory => {
                (how.vet)(&st, &here)?;
                stack.push(Step { fd, st, name });
                previous = st;
            }
            _ => {
                return Err(unusable(&here, Errno::NOTDIR, todo.is_empty()));
            }
        }
    }
    let top = &stack[stack.len() - 1];
    let path = current_path(&stack);
    let fd = rustix::fs::openat(
        &top.fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| unusable(&path, e, true))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| unusable(&path, e, true))?;
    if (st.st_dev, st.st_ino) != (top.st.st_dev, top.st.st_ino) {
        // "." of a directory we hold is that directory; anything else is a
        // kernel surprise, and surprises are refused.
        return Err(Error::new(
            ErrorKind::UnsafeRoot,
            format!("{} changed while it was opened", how.what),
        )
        .at(given));
    }
    Ok(Resolved {
        path,
        fd,
        st,
        followed,
    })
}

/// The names of a path's components (`/` and `.` dropped, `..` kept).
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

fn current_path(stack: &[Step]) -> PathBuf {
    let mut path = PathBuf::from("/");
    for step in &stack[1..] {
        path.push(&step.name);
    }
    path
}

/// Refuses a step from `from` to `to` that another user could have staged:
/// from something owned by a user who is neither root nor us, to something
/// owned by someone else (systemd's `unsafe_transition`).
pub(crate) fn check_transition(
    from: &Stat,
    to: &Stat,
    me: u32,
    where_: impl FnOnce() -> PathBuf,
    given: &Path,
) -> Result<()> {
    if from.st_uid == 0 || from.st_uid == me || from.st_uid == to.st_uid {
        return Ok(());
    }
    let at = where_();
    Err(Error::new(
        ErrorKind::UnsafeRoot,
        format!(
            "the path passes from something owned by uid {} to {} owned by uid {}: that user could redirect it",
            from.st_uid,
            at.display(),
            to.st_uid
        ),
    )
    .at(given)
    .with_hint(
        "give a path whose directories and symlinks belong to root or to you, or one owner throughout",
    ))
}

fn unusable(how: &Chase<'_>, given: &Path, at: &Path, errno: Errno, last: bool) -> Error {
    let what = how.what;
    let message = match (errno, last) {
        (Errno::NOENT, true) => format!("{what} does not exist"),
        (Errno::NOTDIR, true) => format!("{what} is not a directory"),
        (Errno::ACCESS | Errno::PERM, true) => format!("{what} cannot be read"),
        (Errno::NOENT, false) => format!("{} does not exist", at.display()),
        (Errno::NOTDIR, false) => format!("{} is not a directory", at.display()),
        (Errno::ACCESS | Errno::PERM, false) => format!("{} cannot be searched", at.display()),
        (_, true) => format!("cannot open {what}"),
        (_, false) => format!("cannot open {}", at.display()),
    };
    let err = Error::new(ErrorKind::UnusableRoot, message)
        .at(given)
        .with_source(errno.into());
    match (errno, how.missing_hint) {
        (Errno::NOENT, Some(hint)) => err.with_hint(hint),
        _ => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_root_names() {
        let cases: [(&[u8], Option<u32>); 8] = [
            (b"sandkeeper-0", Some(0)),
            (b"sandkeeper-1000", Some(1000)),
            (b"sandkeeper-", None),
            (b"sandkeeper-x1", None),
            (b"sandkeeper-01", None),
            (b"sandkeeper-99999999999", None),
            (b"sandkeeper-1000-2", None),
            (b"app-1", None),
        ];
        for (name, want) in cases {
            assert_eq!(
                user_root_uid(name),
                want,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn opens_plain_and_relative_and_dotdot() {
        let sandbox = crate::Sandbox::new().unwrap();
        std::fs::create_dir_all(sandbox.path().join("a/b")).unwrap();
        let root = Root::open(&sandbox.path().join("a/b/..")).unwrap();
        assert_eq!(root.path(), sandbox.path().join("a"));
        assert!(root.followed().is_empty());
        let err = Root::open(&sandbox.path().join("missing")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnusableRoot);
        assert!(err.to_string().contains("does not exist"), "{err}");
        std::fs::write(sandbox.path().join("file"), "").unwrap();
        let err = Root::open(&sandbox.path().join("file")).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn symlinks_are_followed_for_reading_and_refused_for_removal() {
        let sandbox = crate::Sandbox::new().unwrap();
        std::fs::create_dir_all(sandbox.path().join("real/inner")).unwrap();
        std::os::unix::fs::symlink("real", sandbox.path().join("link")).unwrap();
        let via = Root::open(&sandbox.path().join("link")).unwrap();
        assert_eq!(via.path(), sandbox.path().join("real"));
        assert_eq!(via.followed().len(), 1);
        let err = Root::open_exact(&sandbox.path().join("link")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeRoot);
        assert!(
            err.to_string()
                .contains(&*sandbox.path().join("real").to_string_lossy()),
            "{err}"
        );
        // A symlink before the last component is followed by both.
        let inner = Root::open_exact(&sandbox.path().join("link/inner")).unwrap();
        assert_eq!(inner.path(), sandbox.path().join("real/inner"));
        std::os::unix::fs::symlink("loop", sandbox.path().join("loop")).unwrap();
        let err = Root::open(&sandbox.path().join("loop")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnusableRoot);
    }
}
