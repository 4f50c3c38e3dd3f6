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
        let amounts = Amounts::of(&rustix::fs::fstatvfs(dir)?);
        Ok(Filesystem {
            fstype: fstype_of(dir),
            total_bytes: amounts.total_bytes,
            free_bytes: amounts.free_bytes,
            total_inodes: amounts.total_inodes,
            free_inodes: amounts.free_inodes,
        })
    }

    /// Used space as a percentage of the total, counting space reserved
    /// for root as used (as `df` does).
    pub fn used_percent(&self) -> f64 {
        used_percent(self.total_bytes, self.free_bytes)
    }
}

/// The sizes and free amounts of one `fstatvfs`, as `df` and `df -i` count
/// them: every measurement of a root's filesystem reads them this way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Amounts {
    pub(crate) total_bytes: u64,
    /// `f_bavail`: free for unprivileged users.
    pub(crate) free_bytes: u64,
    pub(crate) total_inodes: u64,
    /// `f_favail`.
    pub(crate) free_inodes: u64,
}

impl Amounts {
    pub(crate) fn of(vfs: &rustix::fs::StatVfs) -> Amounts {
        Amounts {
            total_bytes: vfs.f_blocks.saturating_mul(vfs.f_frsize),
            free_bytes: vfs.f_bavail.saturating_mul(vfs.f_frsize),
            total_inodes: vfs.f_files,
            free_inodes: vfs.f_favail,
        }
    }
}

/// `total - free` as a percentage of `total` (0 when `total` is 0); what is
/// reserved for root counts as used, as `df` counts it.
pub(crate) fn used_percent(total: u64, free: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    100.0 * total.saturating_sub(free) as f64 / total as f64
}

/// Free bytes and free inodes, measured once (`fstatvfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Free {
    pub(crate) bytes: u64,
    pub(crate) inodes: u64,
}

impl Free {
    /// This much more free.
    pub(crate) fn plus(self, more: Free) -> Free {
        Free {
            bytes: self.bytes.saturating_add(more.bytes),
            inodes: self.inodes.saturating_add(more.inodes),
        }
    }
}

/// Re-measures free bytes and inodes (after each removal).
pub(crate) fn free(dir: BorrowedFd<'_>) -> Result<Free> {
    let vfs = rustix::fs::fstatvfs(dir)
        .map_err(|e| crate::Error::io("cannot measure free space", e.into()))?;
    let amounts = Amounts::of(&vfs);
    Ok(Free {
        bytes: amounts.free_bytes,
        inodes: amounts.free_inodes,
    })
}

/// Re-measures free space (for watermarks, after each removal).
///
/// # Errors
///
/// When `fstatvfs` fails.
pub fn free_bytes(dir: BorrowedFd<'_>) -> Result<u64> {
    free(dir).map(|free| free.bytes)
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
