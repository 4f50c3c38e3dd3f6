//! Listing a directory by its descriptor: every name but `.` and `..`,
//! from a fresh open description, held compactly ([`Names`]). The one
//! lister of the crate: the scan's budgeted listing (`scan/listing.rs`)
//! and [`root`](crate::root)'s per-user directories build on it.

mod names;

use std::ops::ControlFlow;
use std::os::fd::BorrowedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

pub(crate) use names::Names;

use crate::error::{Error, Result};

/// Calls `each` with every name in `dir` but `.` and `..`, in directory
/// order, until it breaks. One fresh open description, so that two
/// listings never share a position.
pub(crate) fn each_name(
    dir: BorrowedFd<'_>,
    path: &Path,
    mut each: impl FnMut(&[u8]) -> Result<ControlFlow<()>>,
) -> Result<()> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("cannot list root", e.into()).at(path))?;
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut iter = rustix::fs::RawDir::new(&fd, buf.spare_capacity_mut());
    while let Some(entry) = iter.next() {
        let entry = entry.map_err(|e| Error::io("cannot list root", e.into()).at(path))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if each(name)?.is_break() {
            break;
        }
    }
    Ok(())
}

/// The error of a directory whose names take more than 4 GiB (a `u32`
/// offset per name: [`Names`]).
pub(crate) fn too_many(path: &Path) -> Error {
    Error::io(
        "cannot list root: its names take more than 4 GiB",
        std::io::Error::from(std::io::ErrorKind::OutOfMemory),
    )
    .at(path)
}

/// The names in `dir` but `.` and `..` for which `keep` is true, in
/// directory order; the others are never stored.
pub(crate) fn read_names_where(
    dir: BorrowedFd<'_>,
    path: &Path,
    mut keep: impl FnMut(&[u8]) -> bool,
) -> Result<Names> {
    let mut names = Names::new();
    each_name(dir, path, |name| {
        if keep(name) && !names.push(name) {
            return Err(too_many(path));
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    Ok(names)
}
