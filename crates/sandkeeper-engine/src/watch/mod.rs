//! The host backstop's engine: the loop that `sandkeeper watch` runs, as a
//! value a daemon, a CI agent or a test can drive.
//!
//! Every `interval` a full cycle reaps each configured root by its rules
//! ([`reap_root`]); in between, every `poll`, an `fstatvfs` per root with
//! watermarks starts a reap under pressure at once when the root is above
//! its high watermark: oldest first, age limits relaxed, down to the low
//! watermark. A reap under pressure that cannot get under the high mark
//! backs off (doubling, from `poll` up to `interval`), unless much more is
//! used by the next poll. A reload takes a new config between two steps
//! (a bad one keeps the old); after a stop no new removal starts (the ones
//! under way finish), and a scan ends.
//!
//! The [`Watcher`] does no I/O of its own besides the reaps: time,
//! waiting and signals come from the caller's [`Driver`], and everything
//! it does goes to the driver as a [`WatchEvent`] when it happens (each
//! removal as it is made). The metrics ([`crate::metrics`]) are kept up to
//! date and handed over to be written.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use sandkeeper_engine::config::Config;
//! use sandkeeper_engine::watch::{Driver, Wake, WatchEvent, WatchOptions, Watcher};
//!
//! /// A driver whose clock moves only when the loop waits.
//! struct Fake { now: Instant, waits: usize, cycles: usize }
//!
//! impl Driver for Fake {
//!     fn now(&mut self) -> Instant { self.now }
//!     fn wait(&mut self, until: Instant) -> Wake {
//!         self.now = until;
//!         self.waits += 1;
//!         if self.waits > 3 { Wake::Stop } else { Wake::Timeout }
//!     }
//!     fn event(&mut self, event: WatchEvent<'_>) {
//!         if let WatchEvent::CycleFinished { .. } = event { self.cycles += 1 }
//!     }
//! }
//!
//! let dir = sandkeeper_engine::Sandbox::new()?;
//! let mut config = Config::defaults();
//! config.roots[0].path = dir.path().to_owned();
//! config.interval = Duration::from_secs(60);
//! let mut fake = Fake { now: Instant::now(), waits: 0, cycles: 0 };
//! Watcher::new(config, WatchOptions::new()).run(&mut fake);
//! assert!(fake.cycles >= 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cycle;
mod level;
#[cfg(unix)]
mod signals;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

pub use cycle::{policy, reap_root, Mode, Outcome, ReapOptions};
pub use level::{measure, Level, Pressure};
#[cfg(unix)]
pub use signals::{Signals, STOP_LIMIT};

use crate::config::{self, Config, ConfigError, RootConfig};
use crate::error::Error;
use crate::metrics::{FamilyLabels, Metrics};
use crate::reap::ReapEvent;
use crate::root::Root;
use crate::scan::Scanner;

/// Why [`Driver::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The deadline came.
    Timeout,
    /// Load the config again (`SIGHUP`).
    Reload,
    /// Stop (`SIGTERM`, `SIGINT`).
    Stop,
}

/// The world as the loop sees it: the clock, waiting (and being woken),
/// and where its events go.
pub trait Driver {
    /// The time now (a fake clock in tests).
    fn now(&mut self) -> Instant;
    /// Waits until `until`, or less when woken to reload or stop.
    fn wait(&mut self, until: Instant) -> Wake;
    /// Takes an event, when it happens.
    fn event(&mut self, event: WatchEvent<'_>);
}

/// Something the loop did, in the order it happened.
#[derive(Debug)]
#[non_exhaustive]
pub enum WatchEvent<'a> {
    /// A reap of a configured root (or of one of its per-user directories)
    /// decided or did something: each removal, as it is made.
    Reap {
        /// The configured root.
        root: &'a Path,
        /// Whether the reap runs under pressure.
        under_pressure: bool,
        /// What happened.
        event: ReapEvent<'a>,
    },
    /// A root is above its high watermark: a reap under pressure starts.
    PressureStarted {
        /// The configured root.
        root: &'a Path,
        /// Its filesystem now.
        level: Level,
        /// What the reap aims for.
        pressure: Pressure,
    },
    /// A configured root's reap is done.
    Reaped {
        /// The root.
        root: &'a RootConfig,
        /// A cycle's reap, or one a poll started.
        mode: Mode,
        /// Everything it did.
        outcome: &'a Outcome,
        /// Its filesystem after, when it could be measured.
        after: Option<Level>,
        /// How a reap under pressure ended (`None`: not under pressure).
        pressure_end: Option<PressureEnd>,
    },
    /// A root reaped could not be scanned again for the metrics.
    RescanFailed {
        /// The (per-user) root.
        root: &'a Path,
        /// Why.
        error: &'a Error,
    },
    /// A full cycle over every root is done.
    CycleFinished {
        /// How long it took.
        took: Duration,
        /// Entries that could not be removed, and roots that could not be
        /// reaped.
        errors: usize,
    },
    /// The metrics changed: a front end writes them now.
    MetricsUpdated(&'a Metrics),
    /// A new config is in force.
    Reloaded {
        /// The file.
        path: &'a Path,
        /// The config.
        config: &'a Config,
    },
    /// A reload found a bad file: the previous config stays in force.
    ReloadFailed(&'a ConfigError),
    /// A reload found no config file: the built-in defaults stay.
    NoConfigFile,
    /// Origin tracking (`track_origins = true`) started, stopped or could
    /// not start for a root.
    #[cfg(target_os = "linux")]
    Origins(&'a crate::origin::TrackerChange),
    /// The origin store's records of a tracked root could not be pruned
    /// (`crate::origin::Store::prune`).
    OriginStoreFailed {
        /// The root.
        root: &'a Path,
        /// Why.
        error: &'a Error,
    },
}

/// How a reap under pressure ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressureEnd {
    /// Below the low watermark: done.
    Met,
    /// Below the high watermark, not the low one: nothing else may go.
    BelowHigh,
    /// Still above the high watermark: nothing else may go; no reap under
    /// pressure is started again for this long (unless much more is used).
    StillAbove {
        /// The back-off.
        retry_in: Duration,
    },
    /// A stop was asked for.
    Stopped,
}

/// How the loop runs, besides the config.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WatchOptions {
    /// How each root is reaped. Its `trust_pid_namespace` and
    /// `assume_unseen_free` are or-ed with the config's; its `stop` flag stops the loop too.
    pub reap: ReapOptions,
    /// The config file given explicitly, for reloads (`None`: the default
    /// places, [`config::locate`]).
    pub config_path: Option<PathBuf>,
    /// Keep the metrics (each reaped root is scanned again afterwards, so
    /// the gauges show what is there now).
    pub metrics: bool,
}

impl WatchOptions {
    /// The defaults: real reaps, the default config places, no metrics.
    pub fn new() -> WatchOptions {
        WatchOptions::default()
    }
}

/// Per configured root, between cycles.
#[derive(Debug, Default)]
struct RootState {
    /// No poll-started pressure reap before this (after one that could
    /// not get under the high watermark).
    retry_at: Option<Instant>,
    backoff: Duration,
    /// Free bytes and inodes when the last pressure reap gave up: a poll
    /// that finds much less of either (new leftovers) retries at once.
    gave_up_at: Option<Level>,
}

/// The watch loop: a config, per-root state, the metrics.
#[derive(Debug)]
pub struct Watcher {
    config: Config,
    opts: WatchOptions,
    /// The caller's reap options (its switches and pids), whatever the
    /// config says.
    caller: ReapOptions,
    metrics: Metrics,
    roots: HashMap<PathBuf, RootState>,
    /// The fanotify trackers of the roots with `track_origins`.
    #[cfg(target_os = "linux")]
    origins: crate::origin::Trackers,
}

impl Watcher {
    /// A loop over `config`.
    pub fn new(config: Config, mut opts: WatchOptions) -> Watcher {
        // The metrics' creator label (`sandkeeper_creator_*`) is the scans'
        // tally of origins.
        opts.reap.origins |= opts.metrics;
        let caller = opts.reap.clone();
        let mut watcher = Watcher {
            config,
            opts,
            caller,
            metrics: Metrics::new(),
            roots: HashMap::new(),
            #[cfg(target_os = "linux")]
            origins: crate::origin::Trackers::new(),
        };
        watcher.take_config_switches();
        if watcher.config.source.is_some() {
            watcher.metrics.set_config_ok(true);
        }
        watcher
    }

    /// The reap options in force: the caller's, with the config's in-use
    /// choices ([`ReapOptions::with_config`]).
    fn take_config_switches(&mut self) {
        self.opts.reap = self.caller.clone().with_config(&self.config);
    }

    /// The config in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The metrics so far.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether the stop flag is raised.
    pub fn stopping(&self) -> bool {
        self.opts
            .reap
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// Runs cycles and polls until a stop: the first cycle at once.
    pub fn run(&mut self, driver: &mut dyn Driver) {
        let mut last_cycle: Option<Instant> = None;
        let mut next_cycle = driver.now();
        let mut next_poll = next_cycle + self.config.poll;
        self.track_origins(driver);
        loop {
            if self.stopping() {
                return;
            }
            let now = driver.now();
            if now >= next_cycle {
                last_cycle = Some(now);
                self.cycle(driver);
                next_cycle = now + self.config.interval;
                next_poll = driver.now() + self.config.poll;
                continue;
            }
            if now >= next_poll {
                self.poll(driver);
                next_poll = driver.now() + self.config.poll;
                continue;
            }
            match driver.wait(next_cycle.min(next_poll)) {
                Wake::Timeout => {}
                Wake::Stop => return,
                Wake::Reload => {
                    self.reload(driver);
                    self.track_origins(driver);
                    // A new interval counts from the last cycle; poll at once.
                    if let Some(last) = last_cycle {
                        next_cycle = last + self.config.interval;
                    }
                    next_poll = driver.now();
                }
            }
        }
    }

    /// A full cycle over every root; the number of errors.
    pub fn cycle(&mut self, driver: &mut dyn Driver) -> usize {
        let started = driver.now();
        self.metrics.begin_cycle();
        let mut errors = 0;
        let roots = self.config.roots.clone();
        for root in &roots {
            if self.stopping() {
                return errors;
            }
            errors += self.reap(root, Mode::Cycle, driver);
        }
        if self.stopping() {
            return errors;
        }
        // The origin store's records of entries gone meanwhile.
        #[cfg(target_os = "linux")]
        for (root, result) in self.origins.prune() {
            if let Err(error) = result {
                driver.event(WatchEvent::OriginStoreFailed {
                    root,
                    error: &error,
                });
                errors += 1;
            }
        }
        let took = driver.now().saturating_duration_since(started);
        self.metrics.finish_cycle(took, SystemTime::now());
        driver.event(WatchEvent::CycleFinished { took, errors });
        self.publish(driver);
        errors
    }

    /// Polls the roots with watermarks; reaps those above the high one.
    pub fn poll(&mut self, driver: &mut dyn Driver) {
        let roots = self.config.roots.clone();
        let mut reaped = false;
        for root in roots
            .iter()
            .filter(|r| r.watermarks.is_some() || r.inode_watermarks.is_some())
        {
            if self.stopping() {
                break;
            }
            // Opened afresh (a handful of `openat`s), so a root replaced
            // since the cycle is measured as it is now, never by a path
            // resolved through links.
            let Ok(level) = Root::open_exact(&root.path)
                .and_then(|r| measure(&r).map_err(|e| Error::io("cannot measure", e)))
            else {
                continue; // the cycle reports a root it cannot measure
            };
            let state = self.roots.entry(root.path.clone()).or_default();
            if Pressure::of(root, &level).is_none() {
                *state = RootState::default();
                continue;
            }
            // After a reap that could not get under the mark, wait (longer
            // each time), unless much more is used now than then.
            let grown = state.gave_up_at.is_some_and(|then| {
                then.free.saturating_sub(level.free) >= (level.total / 100).max(1 << 20)
                    || (level.total_inodes > 0
                        && then.free_inodes.saturating_sub(level.free_inodes)
                            >= (level.total_inodes / 100).max(1))
            });
            if state.retry_at.is_some_and(|t| driver.now() < t) && !grown {
                continue;
            }
            self.reap(root, Mode::PressureOnly, driver);
            reaped = true;
        }
        if reaped {
            self.publish(driver);
        }
    }

    /// Loads the config again (from the file given, or the default
    /// places); a bad file keeps the old config.
    pub fn reload(&mut self, driver: &mut dyn Driver) {
        let Some(path) = config::locate(self.opts.config_path.as_deref()) else {
            driver.event(WatchEvent::NoConfigFile);
            return;
        };
        match config::load(&path) {
            Ok(config) => {
                self.roots
                    .retain(|p, _| config.roots.iter().any(|r| &r.path == p));
                self.config = config;
                self.take_config_switches();
                self.metrics.set_config_ok(true);
                driver.event(WatchEvent::Reloaded {
                    path: &path,
                    config: &self.config,
                });
            }
            Err(e) => {
                self.metrics.set_config_ok(false);
                driver.event(WatchEvent::ReloadFailed(&e));
            }
        }
        self.publish(driver);
    }

    /// Starts or stops the origin trackers so that exactly the roots with
    /// `track_origins = true` are tracked (`crate::origin`).
    fn track_origins(&mut self, driver: &mut dyn Driver) {
        #[cfg(target_os = "linux")]
        self.origins.set_store(self.config.origin_store.as_deref());
        #[cfg(target_os = "linux")]
        for change in self.origins.sync(
            self.config
                .roots
                .iter()
                .filter(|r| r.track_origins)
                .map(|r| r.path.as_path()),
        ) {
            driver.event(WatchEvent::Origins(&change));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = driver;
    }

    /// Hands the metrics over to be written, when they are kept.
    fn publish(&self, driver: &mut dyn Driver) {
        if self.opts.metrics {
            driver.event(WatchEvent::MetricsUpdated(&self.metrics));
        }
    }

    /// Reaps one configured root, counts, and tells; the number of errors.
    fn reap(&mut self, root: &RootConfig, mode: Mode, driver: &mut dyn Driver) -> usize {
        let outcome = match Root::open_exact(&root.path) {
            Ok(opened) => reap_root(root, opened, &self.opts.reap, mode, &mut |e| {
                driver.event(e)
            }),
            Err(e) => {
                let mut out = Outcome::default();
                out.failures.push((root.path.clone(), e));
                out
            }
        };
        if outcome.pressure.is_some() && outcome.before.is_some() {
            self.metrics.count_pressure_reap(&root.path);
        }
        for report in &outcome.reports {
            self.metrics
                .set_uninspectable(report.scan.uninspectable.len());
        }
        let errors = outcome.error_count();
        let after = outcome.roots.first().and_then(|r| measure(r).ok());
        let pressure_end = match (outcome.pressure, after) {
            (Some(target), Some(after)) => Some(self.after_pressure(root, target, after, driver)),
            _ => None,
        };
        driver.event(WatchEvent::Reaped {
            root,
            mode,
            outcome: &outcome,
            after,
            pressure_end,
        });
        self.observe(root, outcome, driver);
        errors
    }

    /// After a reap under pressure: done, or still above (then back off).
    fn after_pressure(
        &mut self,
        root: &RootConfig,
        target: Pressure,
        after: Level,
        driver: &mut dyn Driver,
    ) -> PressureEnd {
        let stopping = self.stopping();
        let (poll, interval) = (self.config.poll, self.config.interval);
        let state = self.roots.entry(root.path.clone()).or_default();
        if stopping {
            PressureEnd::Stopped
        } else if target.met(&after) {
            *state = RootState::default();
            PressureEnd::Met
        } else if Pressure::of(root, &after).is_some() {
            state.backoff = (state.backoff * 2).max(poll).min(interval);
            state.retry_at = Some(driver.now() + state.backoff);
            state.gave_up_at = Some(after);
            PressureEnd::StillAbove {
                retry_in: state.backoff,
            }
        } else {
            PressureEnd::BelowHigh
        }
    }

    /// Updates the gauges from the reports; a (sub)root where something
    /// was removed is scanned again, so the gauges show what is there now.
    fn observe(&mut self, root: &RootConfig, outcome: Outcome, driver: &mut dyn Driver) {
        if !self.opts.metrics || self.stopping() {
            return;
        }
        // The configured root carries the watermarks; a per-user root inside
        // it is private (0700): its families are labelled only when the
        // config asks (`user_dir_families`).
        let marks = |opened: &Root| {
            opened
                .user_uid()
                .is_none()
                .then_some(root.watermarks.as_ref())
                .flatten()
        };
        let labels = |opened: &Root| match opened.user_uid().is_none() || root.user_dir_families {
            true => FamilyLabels::Named,
            false => FamilyLabels::TotalsOnly,
        };
        let mut rescan = Vec::new();
        for (opened, report) in outcome.roots.iter().zip(&outcome.reports) {
            for (reap, scanned) in report.roots.iter().zip(&report.scan.roots) {
                if !report.dry_run {
                    self.metrics.count_reap(reap);
                }
                if reap.counts.removed == 0 || report.dry_run {
                    self.metrics
                        .observe_scan(scanned, marks(opened), labels(opened));
                } else {
                    rescan.push(opened.clone());
                }
            }
        }
        drop(outcome);
        let mut scanner = Scanner::new();
        self.opts.reap.configure(&mut scanner);
        // The gauges need the families' sums only.
        scanner.keep_entries(false);
        for opened in rescan {
            match scanner.scan_roots(std::slice::from_ref(&opened)) {
                Ok(fresh) => {
                    for r in &fresh.roots {
                        self.metrics
                            .observe_scan(r, marks(&opened), labels(&opened));
                    }
                }
                Err(e) => driver.event(WatchEvent::RescanFailed {
                    root: opened.path(),
                    error: &e,
                }),
            }
        }
    }
}

/// Opens every root of `config` before anything is removed (so a reap of
/// them all either starts with every root or not at all); the reaps then
/// use these descriptors, never the paths again.
///
/// # Errors
///
/// The index of the first root that cannot be used, and why
/// ([`Root::open_exact`]).
pub fn open_roots(config: &Config) -> std::result::Result<Vec<Root>, (usize, Error)> {
    config
        .roots
        .iter()
        .enumerate()
        .map(|(i, r)| Root::open_exact(&r.path).map_err(|e| (i, e)))
        .collect()
}
