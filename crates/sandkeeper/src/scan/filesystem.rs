//! The filesystem a root lives on: type, size, free space and free inodes.

use std::os::fd::BorrowedFd;

use crate::error::Result;

/// Size and type of the filesystem holding a root.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Filesystem {
    /// Its type (`tmpfs`, `ext4`, …; `0x…` for types this crate does not
    /// name).
    pub fstype: String,
    /// Total size in bytes.
    pub total_bytes: u64,
    /// Bytes free for unprivileged users (`f_bavail`, what `df` shows as
    /// available).
    pub free_bytes: u64,
    /// Total inodes (`f_files`); 0 on filesystems without a fixed number
    /// (btrfs, a tmpfs mounted with `nr_inodes=0`), which never run out.
    pub total_inodes: u64,
    /// Inodes free for unprivileged users (`f_favail`, what `df -i` shows
    /// as free).
    pub free_inodes: u64,
}

impl Filesystem {
    /// `fstatvfs` and `fstatfs` on an open directory.
    ///
    /// # Errors
    ///
    /// When either call fails.
    pub fn of(dir: BorrowedFd<'_>) -> std::io::Result<Filesystem> {
        let vfs = rustix::fs::fstatvfs(dir)?;
        let fstype = fstype_of(dir);
        Ok(Filesystem {
            fstype,
            total_bytes: vfs.f_blocks.saturating_mul(vfs.f_frsize),
            free_bytes: vfs.f_bavail.saturating_mul(vfs.f_frsize),
            total_inodes: vfs.f_files,
            free_inodes: vfs.f_favail,
        })
    }

    /// Used space as a percentage of the total, counting space reserved
    /// for root as used (as `df` does).
    pub fn used_percent(&self) -> f64 {
        if self.total_bytes == 0 {
            return 0.0;
        }
        100.0 * (self.total_bytes.saturating_sub(self.free_bytes)) as f64 / self.total_bytes as f64
    }
}

/// Free bytes and free inodes, measured once (`fstatvfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Free {
    pub(crate) bytes: u64,
    pub(crate) inodes: u64,
}

/// Re-measures free bytes and inodes (after each removal).
pub(crate) fn free(dir: BorrowedFd<'_>) -> Result<Free> {
    let vfs = rustix::fs::fstatvfs(dir)
        .map_err(|e| crate::Error::io("cannot measure free space", e.into()))?;
    Ok(Free {
        bytes: vfs.f_bavail.saturating_mul(vfs.f_frsize),
        inodes: vfs.f_favail,
    })
}

/// Re-measures free space (for watermarks, after each removal).
///
/// # Errors
///
/// When `fstatvfs` fails.
pub fn free_bytes(dir: BorrowedFd<'_>) -> Result<u64> {
    let vfs = rustix::fs::fstatvfs(dir)
        .map_err(|e| crate::Error::io("cannot measure free space", e.into()))?;
    Ok(vfs.f_bavail.saturating_mul(vfs.f_frsize))
}

#[cfg(target_os = "linux")]
fn fstype_of(dir: BorrowedFd<'_>) -> String {
    match rustix::fs::fstatfs(dir) {
        #[allow(clippy::unnecessary_cast)] // f_type's width differs between platforms
        Ok(st) => fstype_name(st.f_type as i64),
        Err(_) => "unknown".to_owned(),
    }
}

#[cfg(not(target_os = "linux"))]
fn fstype_of(_dir: BorrowedFd<'_>) -> String {
    "unknown".to_owned()
}

/// Names the common `statfs.f_type` magic numbers (linux/magic.h).
fn fstype_name(magic: i64) -> String {
    let name = match magic as u32 {
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x794c_7630 => "overlay",
        0x6969 => "nfs",
        0x2fc1_2fc1 => "zfs",
        0xf2f5_2010 => "f2fs",
        0x6573_5546 => "fuse",
        0x0187 => "autofs",
        0x5346_544e => "ntfs",
        0x4d44 => "vfat",
        0x0100_2173 => "9p",
        0x6165_676c => "pstore",
        _ => return format!("{:#x}", magic as u32),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_names() {
        let cases = [
            (0x0102_1994, "tmpfs"),
            (0xef53, "ext4"),
            (0x9123_683e_u32 as i64, "btrfs"),
            (0x1234, "0x1234"),
        ];
        for (magic, want) in cases {
            assert_eq!(fstype_name(magic), want);
        }
    }

    #[test]
    fn used_percent() {
        let fs = |total, free| Filesystem {
            fstype: "tmpfs".into(),
            total_bytes: total,
            free_bytes: free,
            total_inodes: 0,
            free_inodes: 0,
        };
        assert_eq!(fs(0, 0).used_percent(), 0.0);
        assert_eq!(fs(100, 25).used_percent(), 75.0);
        assert_eq!(fs(100, 0).used_percent(), 100.0);
    }
}
