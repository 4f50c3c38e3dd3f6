//! How full a root's filesystem is ([`Level`]) and what a reap under
//! pressure aims for there ([`Pressure`]).

use std::io;

use crate::config::RootConfig;
use crate::root::Root;
use crate::scan::filesystem::{used_percent, Amounts};

/// A filesystem's size and free bytes (`statvfs`; free as `df`'s Avail),
/// and its inodes and free inodes (as `df -i`; 0 and 0 on filesystems
/// without a fixed number of inodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Level {
    /// The filesystem's size in bytes.
    pub total: u64,
    /// Bytes free for unprivileged users.
    pub free: u64,
    /// Its inodes (0 when it has no fixed number).
    pub total_inodes: u64,
    /// Inodes free for unprivileged users.
    pub free_inodes: u64,
}

impl Level {
    /// Used space in percent, reserved blocks counted as used (as `df`).
    pub fn used_percent(&self) -> f64 {
        used_percent(self.total, self.free)
    }

    /// Used inodes in percent (0 when the filesystem reports none).
    pub fn used_inodes_percent(&self) -> f64 {
        used_percent(self.total_inodes, self.free_inodes)
    }

    fn of(st: &rustix::fs::StatVfs) -> Level {
        let amounts = Amounts::of(st);
        Level {
            total: amounts.total_bytes,
            free: amounts.free_bytes,
            total_inodes: amounts.total_inodes,
            free_inodes: amounts.free_inodes,
        }
    }
}

/// What a reap under pressure aims for: the low watermark of each kind
/// (bytes, inodes) whose high watermark the root is above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pressure {
    /// Free bytes aimed for, when above the high watermark of bytes.
    pub bytes: Option<u64>,
    /// Free inodes aimed for, when above the high watermark of inodes.
    pub inodes: Option<u64>,
}

impl Pressure {
    /// The pressure `root` is under at `level`; `None` when it is above
    /// neither high watermark.
    pub fn of(root: &RootConfig, level: &Level) -> Option<Pressure> {
        let bytes = root
            .watermarks
            .filter(|w| w.above_high(level.total, level.free))
            .map(|w| w.target_free_bytes(level.total));
        let inodes = root
            .inode_watermarks
            .filter(|w| w.above_high(level.total_inodes, level.free_inodes))
            .map(|w| w.target_free_inodes(level.total_inodes));
        (bytes.is_some() || inodes.is_some()).then_some(Pressure { bytes, inodes })
    }

    /// Whether `level` meets every target.
    pub fn met(&self, level: &Level) -> bool {
        self.bytes.is_none_or(|b| level.free >= b)
            && self.inodes.is_none_or(|n| level.free_inodes >= n)
    }

    /// The targets in words: "2 GiB free", "500 inodes free", or both.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(b) = self.bytes {
            parts.push(format!("{} free", crate::config::value::human_size(b)));
        }
        if let Some(n) = self.inodes {
            parts.push(format!("{n} inodes free"));
        }
        parts.join(" and ")
    }
}

/// `fstatvfs` on an open root: the cheap poll.
///
/// # Errors
///
/// When the filesystem cannot be measured.
pub fn measure(root: &Root) -> io::Result<Level> {
    let st = rustix::fs::fstatvfs(root.fd())?;
    Ok(Level::of(&st))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        let cases = [
            (0, 0, 0.0),
            (100, 25, 75.0),
            (100, 0, 100.0),
            (100, 100, 0.0),
        ];
        for (total, free, want) in cases {
            let level = Level {
                total,
                free,
                ..Level::default()
            };
            assert_eq!(level.used_percent(), want);
            let inodes = Level {
                total_inodes: total,
                free_inodes: free,
                ..Level::default()
            };
            assert_eq!(inodes.used_inodes_percent(), want);
        }
    }

    #[test]
    fn pressure_by_bytes_or_inodes() {
        use crate::config::{InodeMark, InodeWatermarks, Watermark, Watermarks};
        let mut root = crate::config::Config::defaults().roots.remove(0);
        root.watermarks = Some(Watermarks {
            high: Watermark::UsedPercent(90.0),
            low: Watermark::UsedPercent(75.0),
        });
        root.inode_watermarks = Some(InodeWatermarks {
            high: InodeMark::UsedPercent(90.0),
            low: InodeMark::UsedPercent(75.0),
        });
        let level = |free, free_inodes| Level {
            total: 1000,
            free,
            total_inodes: 100,
            free_inodes,
        };
        // Bytes fine, inodes all used: a pressure reap by inodes only.
        let p = Pressure::of(&root, &level(900, 0)).unwrap();
        assert_eq!(
            p,
            Pressure {
                bytes: None,
                inodes: Some(25)
            }
        );
        assert!(!p.met(&level(900, 24)));
        assert!(p.met(&level(900, 25)));
        assert_eq!(p.describe(), "25 inodes free");
        // Both above.
        let p = Pressure::of(&root, &level(50, 5)).unwrap();
        assert_eq!(
            p,
            Pressure {
                bytes: Some(250),
                inodes: Some(25)
            }
        );
        assert!(!p.met(&level(300, 10)), "both must be met");
        // Neither; and no inodes reported at all.
        assert_eq!(Pressure::of(&root, &level(500, 50)), None);
        assert_eq!(
            Pressure::of(
                &root,
                &Level {
                    total: 1000,
                    free: 500,
                    ..Level::default()
                }
            ),
            None
        );
    }
}
