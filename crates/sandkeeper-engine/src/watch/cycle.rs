//! One reap of one configured root, as a cycle of [`Watcher`](super::Watcher)
//! and `sandkeeper reap --config` do it: measure the filesystem; above the
//! high watermark (of bytes or of inodes), reap under pressure down to the
//! low one; else reap by the rules.
//!
//! A root's rules become one [`Policy`]: orphaned sandboxes are judged by
//! the root's `grace` and `orphan_age`, and each rule's glob by that rule's
//! own `older_than`, `keep_last` and `owner`
//! ([`PolicyBuilder::rule`](crate::reap::PolicyBuilder::rule)). So one scan
//! decides for every rule, and under pressure the whole root is taken
//! oldest first, whatever rule admitted an entry.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::level::{measure, Level, Pressure};
use super::WatchEvent;
use crate::config::{Config, RootConfig};
use crate::error::{Error, Result};
use crate::reap::{Filters, FreeInodes, FreeTarget, Policy, ReapReport, Reaper};
use crate::root::{Root, UserDirs};
use crate::scan::Scanner;

/// How roots are reaped.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReapOptions {
    /// Decide and report; remove nothing.
    pub dry_run: bool,
    /// Processes vouched for (`--ignore-pid`).
    pub ignore_pids: Vec<u32>,
    /// The pid namespace is trusted (`--trust-pid-namespace`, or the
    /// config); when `false`, `SANDKEEPER_TRUST_PID_NAMESPACE=1` still
    /// trusts it, as for any [`Scanner`](crate::scan::Scanner).
    pub trust_pid_namespace: bool,
    /// Every uninspectable process is assumed to hold nothing
    /// (`--assume-unseen-free`, or the config); when `false`,
    /// `SANDKEEPER_ASSUME_UNSEEN_FREE=1` still assumes it, as for any
    /// [`Scanner`](crate::scan::Scanner).
    pub assume_unseen_free: bool,
    /// Raised to stop before the next removal (and during a scan).
    pub stop: Option<Arc<AtomicBool>>,
    /// Read each entry's origin during the scans and tally the creators
    /// per family ([`Scanner::origins`]): what the metrics' creator label
    /// needs; [`Watcher`](super::Watcher) turns it on with its metrics.
    pub origins: bool,
    /// Whether the reports keep one record per entry (default `true`; see
    /// [`PolicyBuilder::records`](crate::reap::PolicyBuilder::records)):
    /// what a caller lists one by one. The [`Watcher`](super::Watcher)
    /// needs none (its metrics, [`Outcome::removed`] and the summaries
    /// come from [`RootReap::counts`](crate::reap::RootReap::counts), the
    /// log lines from the events as they happen), and `reap` without
    /// `--json` or `--verbose` neither: `sandkeeper watch` turns them off,
    /// since a million removals would be a million records.
    pub records: bool,
}

impl Default for ReapOptions {
    fn default() -> ReapOptions {
        ReapOptions {
            dry_run: false,
            ignore_pids: Vec::new(),
            trust_pid_namespace: false,
            assume_unseen_free: false,
            stop: None,
            origins: false,
            records: true,
        }
    }
}

impl ReapOptions {
    /// The defaults: a real reap, nobody vouched for, no trust, no stop,
    /// a record per entry.
    pub fn new() -> ReapOptions {
        ReapOptions::default()
    }

    /// A caller's in-use choices, by the rule every face shares: the pids
    /// it vouches for, and each switch on when its flag or its environment
    /// variable (`SANDKEEPER_TRUST_PID_NAMESPACE`,
    /// `SANDKEEPER_ASSUME_UNSEEN_FREE`) says so; the environment is read,
    /// and a bad value refused, whatever the flag says. The rest as
    /// [`new`](Self::new).
    ///
    /// # Errors
    ///
    /// A variable set to something other than `1`.
    pub fn for_caller(
        ignore_pids: Vec<u32>,
        trust_pid_namespace: bool,
        assume_unseen_free: bool,
    ) -> Result<ReapOptions> {
        use crate::inuse::{assume_unseen_free_switch, trust_pid_namespace_switch};
        Ok(ReapOptions {
            ignore_pids,
            trust_pid_namespace: trust_pid_namespace_switch(trust_pid_namespace, false)?,
            assume_unseen_free: assume_unseen_free_switch(assume_unseen_free, false)?,
            ..ReapOptions::new()
        })
    }

    /// These options with `config`'s in-use choices: a switch is on when
    /// either says so, and the pids vouched for are both's, each once.
    pub fn with_config(mut self, config: &Config) -> ReapOptions {
        self.trust_pid_namespace |= config.trust_pid_namespace;
        self.assume_unseen_free |= config.assume_unseen_free;
        for &pid in &config.ignore_pids {
            if !self.ignore_pids.contains(&pid) {
                self.ignore_pids.push(pid);
            }
        }
        self
    }

    /// Gives `scanner` the processes vouched for and the switches (only
    /// ever a yes: a no leaves the environment to decide, as for any
    /// scanner).
    pub fn vouch(&self, scanner: &mut Scanner) {
        for &pid in &self.ignore_pids {
            scanner.ignore_pid(pid);
        }
        if self.trust_pid_namespace {
            scanner.trust_pid_namespace(true);
        }
        if self.assume_unseen_free {
            scanner.assume_unseen_free(true);
        }
    }

    /// [`vouch`](Self::vouch), and whether the scans read origins.
    pub(crate) fn configure(&self, scanner: &mut Scanner) {
        self.vouch(scanner);
        scanner.origins(self.origins);
    }
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

/// What one reap of a configured root did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Outcome {
    /// The filesystem before the reap.
    pub before: Option<Level>,
    /// What the reap aimed for, when it ran under pressure.
    pub pressure: Option<Pressure>,
    /// The root's reap, then one per per-user sandbox directory; under
    /// pressure, maybe as many again: the second pass that took sandboxes
    /// kept on purpose (the first pass's then tell no kept entries).
    pub reports: Vec<ReapReport>,
    /// The opened root of each report, in the same order: what a rescan
    /// uses, so no path is resolved again.
    pub roots: Vec<Root>,
    /// (Sub)roots that could not be reaped at all.
    pub failures: Vec<(PathBuf, Error)>,
}

impl Outcome {
    /// Entries removed over all reports.
    pub fn removed(&self) -> usize {
        self.reports
            .iter()
            .flat_map(|r| &r.roots)
            .map(|r| r.counts.removed as usize)
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
/// When a rule is rejected (the config checks globs first, so only in
/// theory).
pub fn policy(root: &RootConfig, pressure: Option<Pressure>, opts: &ReapOptions) -> Result<Policy> {
    policy_taking_kept(root, pressure, opts, true)
}

/// [`policy`], taking sandboxes kept on purpose under pressure or not
/// ([`PolicyBuilder::take_kept`](crate::reap::PolicyBuilder::take_kept)).
fn policy_taking_kept(
    root: &RootConfig,
    pressure: Option<Pressure>,
    opts: &ReapOptions,
    take_kept: bool,
) -> Result<Policy> {
    let mut b = Policy::builder();
    b.grace(root.grace)
        .max_keep(root.max_keep)
        .dry_run(opts.dry_run)
        .records(opts.records);
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
        b.under_pressure(true).take_kept(take_kept);
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

/// Reaps the configured `root`, already opened (and, with `user_dirs`,
/// its `sandkeeper-<uid>` directories, after it): the measurement, the
/// per-user roots, the scan and every removal go through its descriptor.
/// Gives [`WatchEvent::PressureStarted`] before a reap under pressure and
/// each [`WatchEvent::Reap`] as it happens.
pub fn reap_root(
    root: &RootConfig,
    opened: Root,
    opts: &ReapOptions,
    mode: Mode,
    on_event: &mut dyn FnMut(WatchEvent<'_>),
) -> Outcome {
    let mut out = Outcome::default();
    let before = match measure(&opened) {
        Ok(level) => level,
        Err(e) => {
            let err = Error::io("cannot measure the filesystem of root", e).at(&root.path);
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
    if let Some(p) = pressure {
        on_event(WatchEvent::PressureStarted {
            root: &root.path,
            level: before,
            pressure: p,
        });
    }
    let mut roots = Vec::new();
    if root.user_dirs {
        roots = opened.user_dirs(UserDirs::All);
    }
    roots.insert(0, opened);
    // Under pressure, sandboxes kept on purpose go after every other
    // candidate: of one root, the reap's order sees to it; over a root and
    // its per-user directories (reaped one after another), a first pass
    // keeps them all, and a second takes them only when the first left the
    // target unmet and kept some.
    let two_passes = pressure.is_some() && roots.len() > 1;
    reap_each(
        root,
        &roots,
        pressure,
        opts,
        !two_passes,
        &mut out,
        on_event,
    );
    let kept_some = || {
        out.reports
            .iter()
            .flat_map(|r| &r.roots)
            .any(|r| r.counts.skipped_by_reason.contains_key("kept"))
    };
    let unmet = || pressure.is_some_and(|p| measure(&roots[0]).is_ok_and(|level| !p.met(&level)));
    let stopped = opts
        .stop
        .as_ref()
        .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed));
    if two_passes && !stopped && out.failures.is_empty() && kept_some() && unmet() {
        // What the first pass kept is decided again: its reasons are the
        // second pass's to tell (told once, not twice).
        for r in out.reports.iter_mut().flat_map(|r| &mut r.roots) {
            r.skipped.clear();
            r.counts.skipped = 0;
            r.counts.skipped_by_reason.clear();
        }
        reap_each(root, &roots, pressure, opts, true, &mut out, on_event);
    }
    out
}

/// Reaps each of `roots` (a configured root, then its per-user
/// directories) under one policy, into `out`.
fn reap_each(
    root: &RootConfig,
    roots: &[Root],
    pressure: Option<Pressure>,
    opts: &ReapOptions,
    take_kept: bool,
    out: &mut Outcome,
    on_event: &mut dyn FnMut(WatchEvent<'_>),
) {
    let policy = match policy_taking_kept(root, pressure, opts, take_kept) {
        Ok(p) => p,
        Err(e) => {
            out.failures.push((root.path.clone(), e));
            return;
        }
    };
    let mut reaper = Reaper::new(policy);
    opts.configure(reaper.scanner());
    for r in roots {
        if reaper.policy().stop_requested() {
            break;
        }
        let reaped = reaper.reap_roots_with(std::slice::from_ref(r), &mut |event| {
            on_event(WatchEvent::Reap {
                root: &root.path,
                under_pressure: pressure.is_some(),
                event,
            })
        });
        match reaped {
            Ok(report) => {
                out.roots.push(r.clone());
                out.reports.push(report);
            }
            Err(e) if e.kind() == crate::ErrorKind::Stopped => break,
            Err(e) => out.failures.push((r.path().to_owned(), e)),
        }
    }
}
