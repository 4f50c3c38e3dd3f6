//! Where a test's files go: the [`Scratch`] sandbox, the one for tests
//! that act as another user ([`Scratch::reachable_by_others`]), and a
//! shared root like `/tmp` in it ([`shared_root`]).

use std::ffi::OsString;
use std::fs::{self, File};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use crate::mounts::Mount;
use crate::privilege::is_root;

/// A fresh [`Scratch`] under the calling test crate's `CARGO_TARGET_TMPDIR`,
/// tagged `remove-<tag>`: `scratch!("basic")`.
#[macro_export]
macro_rules! scratch {
    ($tag:expr) => {
        $crate::scratch::Scratch::new(::std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), $tag)
    };
}

/// A fresh sandbox (the project's own: it carries a lease and is removed,
/// with the remover under test, when dropped), mode 0755 so that tests
/// can work inside it as `nobody` once they can reach it (a test that acts
/// as another user makes it with [`Scratch::reachable_by_others`]).
/// Declare mount and flag guards *after* it, so they are undone first.
pub struct Scratch {
    path: PathBuf,
    dir: Option<File>,
    tmpfs: Option<Mount>,
    sandbox: Option<sandkeeper_engine::Sandbox>,
}

impl Scratch {
    /// A scratch sandbox in `root`, tagged `remove-<tag>` (see
    /// [`scratch!`](crate::scratch!) for one in `CARGO_TARGET_TMPDIR`).
    pub fn new(root: &Path, tag: &str) -> Scratch {
        let sandbox = sandkeeper_engine::Sandbox::builder()
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
            tmpfs: None,
            sandbox: Some(sandbox),
        }
    }

    /// A scratch directory that another user (`nobody`, uid 65534) can
    /// reach, for every test that acts as one: each directory above it is
    /// searchable by others. It is made in the temp directory when others
    /// can reach that, else in `/tmp` (or `/var/tmp`): a private `TMPDIR`
    /// (mode 0700, as `mktemp -d` and many CI systems make it) is out of
    /// their reach, and so is `target/tmp` in a checkout under a private
    /// home ([`scratch!`](crate::scratch!)). Like every
    /// [`Scratch`] it is a fresh sandbox under a random name (never a
    /// directory that was there before), mode 0755 (chmod it for more),
    /// and removed when dropped, also when the test panics: outside
    /// `TMPDIR` no leftover check would see it.
    ///
    /// # Panics
    ///
    /// When none of those directories can be searched by other users: the
    /// test cannot run as written.
    pub fn reachable_by_others(tag: &str) -> Scratch {
        Scratch::new(&reachable_base(), tag)
    }

    /// This scratch directory made a fresh tmpfs of `size` (e.g. `"1g"`),
    /// for the tests that create hundreds of thousands of entries: on a
    /// disk filesystem they measure the disk, not the remover. Without root
    /// it stays a plain directory (the caller then uses smaller sizes).
    pub fn tmpfs(mut self, size: &str) -> Scratch {
        if !is_root() {
            return self;
        }
        self.dir = None;
        self.tmpfs = Some(Mount::tmpfs(&self.path, size));
        self.dir = Some(File::open(&self.path).unwrap());
        self
    }

    /// This scratch directory with its permission bits set to `mode`
    /// (`0o1777`: sticky and world-writable, like `/tmp`, so that another
    /// user can make entries in it beside its lease record).
    pub fn with_mode(self, mode: u32) -> Scratch {
        crate::tree::chmod(&self.path, mode);
        self
    }

    /// The scratch directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `rel` inside the scratch directory.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// The scratch directory, open, as the parent for `remove_entry`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.dir.as_ref().expect("scratch is open").as_fd()
    }

    /// Entry names in the scratch directory, sorted.
    pub fn names(&self) -> Vec<OsString> {
        crate::tree::names(&self.path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.dir = None;
        self.tmpfs = None;
        if let Some(sandbox) = self.sandbox.take() {
            if let Err(e) = sandbox.close() {
                eprintln!("scratch {} not removed: {e}", self.path.display());
            }
        }
    }
}

/// A shared root like `/tmp`: the directory `shared` (mode 1777, sticky
/// and world-writable) in a fresh [`Scratch::reachable_by_others`] tagged
/// `tag`, where another user can make entries, and which, unlike the
/// scratch directory itself, holds no lease record. The scratch (keep it
/// alive: the root goes with it) and the root's path.
pub fn shared_root(tag: &str) -> (Scratch, PathBuf) {
    let base = Scratch::reachable_by_others(tag);
    let root = base.join("shared");
    fs::create_dir(&root).unwrap_or_else(|e| panic!("mkdir {}: {e}", root.display()));
    crate::tree::chmod(&root, 0o1777);
    (base, root)
}

/// Where [`Scratch::reachable_by_others`] makes its directory: the first
/// of the temp directory, `/tmp` and `/var/tmp` that every component of
/// its path lets others search.
fn reachable_base() -> PathBuf {
    let candidates = [
        std::env::temp_dir(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
    ];
    candidates
        .iter()
        .find(|dir| searchable_by_others(dir))
        .cloned()
        .unwrap_or_else(|| panic!("none of {candidates:?} can be searched by other users"))
}

fn searchable_by_others(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.ancestors().all(|p| {
        p.as_os_str().is_empty()
            || fs::metadata(p).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0)
    })
}
