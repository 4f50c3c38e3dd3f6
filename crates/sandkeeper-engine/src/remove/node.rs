//! A directory that is being emptied by several workers at once.

use std::ffi::{CStr, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use crate::fs_at::Meta;

/// An open directory shared by the tasks that empty its subdirectories.
///
/// The last task to finish removes the directory from its parent (see
/// `engine`); the root node (the entry being removed) has no parent and is
/// removed by the caller.
pub(crate) struct Node {
    pub(crate) fd: OwnedFd,
    pub(crate) st: Meta,
    /// Name in the parent; for the root, the path reports start with
    /// (which may have several components).
    pub(crate) name: Box<CStr>,
    pub(crate) parent: Option<Arc<Node>>,
    /// Directories between the root and this one, the root being 0.
    pub(crate) depth: u32,
    /// Subdirectory tasks still running.
    pub(crate) outstanding: AtomicUsize,
    /// Something inside was left, so this directory stays too.
    pub(crate) left_inside: AtomicBool,
    /// `fchmod` was tried on it already.
    pub(crate) fixed: AtomicBool,
}

impl Node {
    /// The root of a removal: `fd` is the entry, `display` what report paths
    /// start with.
    pub(crate) fn root(fd: OwnedFd, st: Meta, display: Box<CStr>) -> Self {
        Node::new(fd, st, display, None, 0)
    }

    pub(crate) fn new(
        fd: OwnedFd,
        st: Meta,
        name: Box<CStr>,
        parent: Option<Arc<Node>>,
        depth: u32,
    ) -> Self {
        Node {
            fd,
            st,
            name,
            parent,
            depth,
            outstanding: AtomicUsize::new(0),
            left_inside: AtomicBool::new(false),
            fixed: AtomicBool::new(false),
        }
    }

    /// The report path of this directory (built on demand: only what is
    /// left needs one).
    pub(crate) fn path(&self) -> PathBuf {
        let mut names: Vec<&CStr> = Vec::with_capacity(self.depth as usize + 1);
        let mut node = Some(self);
        while let Some(n) = node {
            names.push(&n.name);
            node = n.parent.as_deref();
        }
        let mut path = PathBuf::new();
        for name in names.iter().rev() {
            path.push(OsStr::from_bytes(name.to_bytes()));
        }
        path
    }
}
