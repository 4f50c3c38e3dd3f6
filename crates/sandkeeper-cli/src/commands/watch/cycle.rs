//! One reap of one configured root, as `watch` and `reap --config` do it:
//! measure the filesystem; above the high watermark (of bytes or of
//! inodes), reap under pressure down to the low one; else reap by the
//! rules.
//!
//! A root's rules become one library [`Policy`]: orphaned sandboxes are
//! judged by the root's `grace` and `orphan_age`, and each rule's glob by
//! that rule's own `older_than`, `keep_last` and `owner`
//! ([`PolicyBuilder::rule`](sandkeeper::reap::PolicyBuilder::rule)). So
//! one scan decides for every rule, and under pressure the whole root is
//! taken oldest first, whatever rule admitted an entry.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use sandkeeper::reap::{Filters, FreeInodes, FreeTarget, Policy, ReapReport, Reaper};
use sandkeeper::root::{Root, UserDirs};

use sandkeeper::config::RootConfig;
use crate::error::CliError;

/// How roots are reaped.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Decide and report; remove nothing.
    pub dry_run: bool,
    /// Processes vouched for (`--ignore-pid`).
    pub ignore_pids: Vec<u32>,
    /// The pid namespace is trusted (`--trust-pid-namespace`, the
    /// environment or the config).
    pub trust_pid_namespace: bool,
    /// Raised to stop before the next removal.
    pub stop: Option<Arc<AtomicBool>>,
}

/// When a reap runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A full cycle: by the rules, under pressure if above the high
    /// watermark.
    Cycle,
    /// Only if above the high watermark (a poll found it so); otherwise
    /// nothing.
    PressureOnly,
}

/// A filesystem's size and free bytes (`statvfs`; free as `df`'s Avail),
/// and its inodes and free inodes (as `df -i`; 0 and 0 on filesystems
/// without a fixed number of inodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Level {
    pub total: u64,
    pub free: u64,
    pub total_inodes: u64,
    pub free_inodes: u64,
}

impl Level {
    /// Used space in percent, reserved blocks counted as used (as `df`).
    pub fn used_percent(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        100.0 * self.total.saturating_sub(self.free) as f64 / self.total as f64
    }

    /// Used inodes in percent (0 when the filesystem reports none).
    pub fn used_inodes_percent(&self) -> f64 {
        if self.total_inodes == 0 {
            return 0.0;
        }
        100.0 * self.total_inodes.saturating_sub(self.free_inodes) as f64 / self.total_inodes as f64
    }

    fn of(st: &rustix::fs::StatVfs) -> Level {
        Level {
            total: st.f_blocks.saturating_mul(st.f_frsize),
            free: st.f_bavail.saturating_mul(st.f_frsize),
            total_inodes: st.f_files,
            free_inodes: st.f_favail,
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
            parts.push(format!("{} free", crate::humanize::size(b)));
        }
        if let Some(n) = self.inodes {
            parts.push(format!("{n} inodes free"));
        }
        parts.join(" and ")
    }
}

/// Whether `root` is above a high watermark (of bytes or inodes) at `level`.
pub fn above_high(root: &RootConfig, level: &Level) -> bool {
    Pressure::of(root, level).is_some()
}

/// `statvfs(path)`: the cheap poll.
///
/// # Errors
///
/// When the path cannot be measured (it does not exist, …).
pub fn measure(path: &Path) -> io::Result<Level> {
    let st = rustix::fs::statvfs(path)?;
    Ok(Level::of(&st))
}

/// What one reap of a configured root did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The filesystem before the reap.
    pub before: Option<Level>,
    /// What the reap aimed for, when it ran under pressure.
    pub pressure: Option<Pressure>,
    /// The root's reap, then one per per-user sandbox directory.
    pub reports: Vec<ReapReport>,
    /// The opened root of each report, in the same order: what the metrics'
    /// rescan uses, so no path is resolved again.
    pub roots: Vec<Root>,
    /// (Sub)roots that could not be reaped at all.
    pub failures: Vec<(PathBuf, CliError)>,
}

impl Outcome {
    /// Entries removed over all reports.
    pub fn removed(&self) -> usize {
        self.reports
            .iter()
            .flat_map(|r| &r.roots)
            .map(|r| r.removed.len())
            .sum()
    }

    /// Bytes freed over all reports.
    pub fn freed_bytes(&self) -> u64 {
        self.reports.iter().map(ReapReport::freed_bytes).sum()
    }

    /// Entries that could not be removed, and roots that could not be
    /// reaped.
    pub fn error_count(&self) -> usize {
        self.failures.len()
            + self
                .reports
                .iter()
                .flat_map(|r| &r.roots)
                .map(|r| r.errors.len())
                .sum::<usize>()
    }
}

/// The policy of `root`, under pressure when `pressure` is given.
///
/// # Errors
///
/// When the library rejects a rule (the config checks globs first, so
/// only in theory).
pub fn policy(
    root: &RootConfig,
    pressure: Option<Pressure>,
    opts: &Options,
) -> Result<Policy, sandkeeper::Error> {
    let mut b = Policy::builder();
    b.grace(root.grace)
        .max_keep(root.max_keep)
        .dry_run(opts.dry_run);
    if let Some(age) = root.orphan_age {
        b.older_than(age);
    }
    for rule in &root.rules {
        let mut filters = Filters::new();
        if let Some(age) = rule.older_than {
            filters.older_than(age);
        }
        if let Some(n) = rule.keep_last {
            filters.keep_last(n);
        }
        if let Some(uid) = rule.owner {
            filters.owner(uid);
        }
        b.rule(rule.glob.clone(), &filters);
    }
    if let Some(p) = pressure {
        b.under_pressure(true);
        if let Some(bytes) = p.bytes {
            b.target_free(FreeTarget::Bytes(bytes));
        }
        if let Some(inodes) = p.inodes {
            b.target_free_inodes(FreeInodes::Count(inodes));
        }
    }
    if let Some(stop) = &opts.stop {
        b.stop_flag(Arc::clone(stop));
    }
    b.build()
}

/// Reaps `root` (and, with `user_dirs`, its `sandkeeper-<uid>`
/// directories, after it).
pub fn reap(root: &RootConfig, opts: &Options, mode: Mode) -> Outcome {
    match Root::open_exact(&root.path) {
        Ok(opened) => reap_opened(root, opened, opts, mode),
        Err(e) => {
            let mut out = Outcome::default();
            out.failures.push((root.path.clone(), e.into()));
            out
        }
    }
}

/// As [`reap`], with the root already opened: the measurement, the
/// per-user roots, the scan and every removal go through its descriptor.
pub fn reap_opened(root: &RootConfig, opened: Root, opts: &Options, mode: Mode) -> Outcome {
    let mut out = Outcome::default();
    let before = match measure_root(&opened) {
        Ok(level) => level,
        Err(e) => {
            let err = CliError::io(
                &format!("cannot measure the root {}", root.path.display()),
                &e,
            );
            out.failures.push((root.path.clone(), err));
            return out;
        }
    };
    out.before = Some(before);
    let pressure = Pressure::of(root, &before);
    if mode == Mode::PressureOnly && pressure.is_none() {
        return out;
    }
    out.pressure = pressure;
    let policy = match policy(root, pressure, opts) {
        Ok(p) => p,
        Err(e) => {
            out.failures.push((root.path.clone(), e.into()));
            return out;
        }
    };
    let mut reaper = Reaper::new(policy);
    for &pid in &opts.ignore_pids {
        reaper.scanner().ignore_pid(pid);
    }
    reaper
        .scanner()
        .trust_pid_namespace(opts.trust_pid_namespace);
    let mut roots = Vec::new();
    if root.user_dirs {
        roots = opened.user_dirs(UserDirs::All);
    }
    roots.insert(0, opened);
    for r in &roots {
        if reaper.policy().stop_requested() {
            break;
        }
        match reaper.reap_roots(std::slice::from_ref(r)) {
            Ok(report) => {
                out.roots.push(r.clone());
                out.reports.push(report);
            }
            Err(e) => out.failures.push((r.path().to_owned(), e.into())),
        }
    }
    out
}

/// `fstatvfs` on an open root.
fn measure_root(root: &Root) -> io::Result<Level> {
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
        use sandkeeper::config::{InodeMark, InodeWatermarks, Watermark, Watermarks};
        let mut root = sandkeeper::config::Config::defaults().roots.remove(0);
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
