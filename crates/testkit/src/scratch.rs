//! Where a test's files go: the [`Scratch`] sandbox, and a directory that
//! other users can reach.

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
/// can work inside it as `nobody`. Declare mount and flag guards *after*
/// it, so they are undone first.
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

    /// A scratch directory another user can reach (see
    /// [`reachable_by_others`]).
    pub fn reachable_by_others(tag: &str) -> Scratch {
        Scratch::new(&reachable_by_others(), tag)
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

/// A directory that another user (`nobody`) can reach, for tests that act
/// as one: the temp directory if every component of its path is searchable
/// by others, else `/tmp`. (A checkout, and so `target/tmp`, may sit under a
/// private directory; CI makes its watched `TMPDIR` searchable.)
///
/// # Panics
///
/// When neither is reachable by others: the test cannot run as written.
pub fn reachable_by_others() -> PathBuf {
    let candidates = [std::env::temp_dir(), PathBuf::from("/tmp")];
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
