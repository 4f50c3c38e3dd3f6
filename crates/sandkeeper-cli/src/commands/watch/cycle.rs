//! One reap of one configured root, as `watch` and `reap --config` do it:
//! measure the filesystem; above the high watermark, reap under pressure
//! down to the low one; else reap by the rules.
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

use sandkeeper::reap::{Filters, FreeTarget, Policy, ReapReport, Reaper};
use sandkeeper::root::{Root, UserDirs};

use crate::config_file::RootConfig;
use crate::error::CliError;

/// How roots are reaped.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Decide and report; remove nothing.
    pub dry_run: bool,
    /// Processes vouched for (`--ignore-pid`).
    pub ignore_pids: Vec<u32>,
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

/// A filesystem's size and free bytes (`statvfs`; free as `df`'s Avail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    pub total: u64,
    pub free: u64,
}

impl Level {
    /// Used space in percent, reserved blocks counted as used (as `df`).
    pub fn used_percent(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        100.0 * self.total.saturating_sub(self.free) as f64 / self.total as f64
    }
}

/// `statvfs(path)`: the cheap poll.
///
/// # Errors
///
/// When the path cannot be measured (it does not exist, …).
pub fn measure(path: &Path) -> io::Result<Level> {
    let st = rustix::fs::statvfs(path)?;
    Ok(Level {
        total: st.f_blocks.saturating_mul(st.f_frsize),
        free: st.f_bavail.saturating_mul(st.f_frsize),
    })
}

/// What one reap of a configured root did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The filesystem before the reap.
    pub before: Option<Level>,
    /// The free bytes aimed for, when the reap ran under pressure.
    pub pressure_target: Option<u64>,
    /// The root's reap, then one per per-user sandbox directory.
    pub reports: Vec<ReapReport>,
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

/// The policy of `root`, under pressure when `target_free` is given.
///
/// # Errors
///
/// When the library rejects a rule (the config checks globs first, so
/// only in theory).
pub fn policy(
    root: &RootConfig,
    target_free: Option<u64>,
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
    if let Some(bytes) = target_free {
        b.under_pressure(true).target_free(FreeTarget::Bytes(bytes));
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
    let pressure = root
        .watermarks
        .filter(|w| w.above_high(before.total, before.free))
        .map(|w| w.target_free_bytes(before.total));
    if mode == Mode::PressureOnly && pressure.is_none() {
        return out;
    }
    out.pressure_target = pressure;
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
            Ok(report) => out.reports.push(report),
            Err(e) => out.failures.push((r.path().to_owned(), e.into())),
        }
    }
    out
}

/// `fstatvfs` on an open root.
fn measure_root(root: &Root) -> io::Result<Level> {
    let st = rustix::fs::fstatvfs(root.fd())?;
    Ok(Level {
        total: st.f_blocks.saturating_mul(st.f_frsize),
        free: st.f_bavail.saturating_mul(st.f_frsize),
    })
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
            assert_eq!(Level { total, free }.used_percent(), want);
        }
    }
}
