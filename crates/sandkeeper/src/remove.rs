//! Removal of one entry of a directory (placeholder until the confined
//! remover lands: the only place that calls `std::fs::remove_dir_all`).

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::PathBuf;

use crate::error::{Error, ErrorKind, IoResultExt, Result};

/// How [`remove_entry`] behaves.
#[derive(Debug, Clone, Default)]
pub struct RemoveOptions {
    expect: Option<(u64, u64)>,
}

impl RemoveOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only remove the entry if it is this inode (device, inode).
    pub fn expect(&mut self, dev: u64, ino: u64) -> &mut Self {
        self.expect = Some((dev, ino));
        self
    }
}

/// What a removal did.
#[derive(Debug, Default)]
pub struct RemovalReport {
    complete: bool,
}

impl RemovalReport {
    /// Whether everything was removed.
    pub fn is_complete(&self) -> bool {
        self.complete
    }
}

/// Removes `name` from the open directory `parent`.
///
/// # Errors
///
/// When the entry cannot be found or removed.
pub fn remove_entry(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    options: &RemoveOptions,
) -> Result<RemovalReport> {
    let base = std::fs::read_link(format!("/proc/self/fd/{}", parent.as_fd().as_raw_fd()))
        .with_path("cannot resolve directory", || PathBuf::from("/proc/self/fd"))?;
    let path = base.join(name);
    if let Some((dev, ino)) = options.expect {
        let st = rustix::fs::statat(parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .with_path("cannot inspect", || path.clone())?;
        if st.st_dev != dev || st.st_ino != ino {
            return Err(Error::new(ErrorKind::Removal, "entry was replaced, not removing").at(path));
        }
    }
    #[allow(clippy::disallowed_methods)]
    std::fs::remove_dir_all(&path).with_path("cannot remove", || path.clone())?;
    Ok(RemovalReport { complete: true })
}
