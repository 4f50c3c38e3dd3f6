//! `sandkeeper watch`: the host backstop.
//!
//! Every `interval` a full cycle scans and reaps each configured root by
//! its rules; in between, every `poll`, a `statvfs` per root with
//! watermarks starts a reap under pressure at once when the root is above
//! its high watermark: oldest first, age limits relaxed, down to the low
//! watermark (see [`cycle`]). One log line per action goes to stderr
//! ([`log`]); SIGHUP reloads the config, SIGTERM stops after the current
//! removal ([`signals`]); `--metrics-file` gets the Prometheus text after
//! each cycle ([`crate::metrics`]).
//!
//! `reap --config` (and `reap` when a default config file exists) runs
//! one cycle's reap through [`reap_configured`].

pub mod cycle;
pub mod log;
pub mod signals;

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use sandkeeper::reap::{KeepReason, ReapReport};
use sandkeeper::root::Root;
use sandkeeper::scan::Scanner;

use crate::cli::{ReapArgs, WatchArgs};
use sandkeeper::config::{Config, RootConfig};
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::humanize::{sanitize, size};
use crate::render::metrics;
use sandkeeper::metrics::{FamilyLabels, Metrics};
use crate::printer::Printer;
use crate::render;
use cycle::{Level, Mode, Options, Outcome, Pressure};
use log::Log;
use signals::Signals;

pub fn run(args: &WatchArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let config = load(args.config.as_deref())?;
    if args.check {
        let text = describe(&config).join("\n") + "\n";
        let _ = printer.data(&text);
        return Ok(exit_codes::SUCCESS);
    }
    if let Some(path) = &args.metrics_file {
        // An unsafe metrics path is refused before the first cycle (exit
        // 2); every write checks again through the directory. A directory
        // that does not exist (yet: node_exporter not installed) is not
        // fatal: each cycle logs it, as the shipped unit expects.
        match sandkeeper::output::OutputFile::open(path) {
            Err(e) if e.kind() != sandkeeper::ErrorKind::UnusableRoot => return Err(e.into()),
            _ => {}
        }
    }
    let signals = Signals::install(Log::new(printer))
        .map_err(|e| CliError::io("cannot install signal handlers", &e))?;
    let trust_cli = super::trust_pid_namespace(args.trust_pid_namespace, false)?;
    let mut watcher = Watcher {
        opts: Options {
            dry_run: args.dry_run,
            ignore_pids: args.ignore_pids.clone(),
            trust_pid_namespace: trust_cli || config.trust_pid_namespace,
            stop: Some(signals.stop_flag()),
        },
        trust_cli,
        explicit: args.config.clone(),
        metrics_file: args.metrics_file.clone(),
        log: Log::new(printer),
        metrics: Metrics::new(),
        roots: HashMap::new(),
        config,
        signals,
    };
    for line in describe(&watcher.config) {
        watcher.log.notice(&line);
    }
    if watcher.config.source.is_some() {
        watcher.metrics.set_config_ok(true);
    }
    if args.once {
        let errors = watcher.cycle();
        return Ok(watcher.exit_status(errors));
    }
    Ok(watcher.run_loop())
}

/// The config to use: `--config FILE`, else the default file if one
/// exists, else the built-in defaults.
///
/// # Errors
///
/// A bad or unreadable file: exit status 2, with the file and line.
pub fn load(explicit: Option<&Path>) -> Result<Config, CliError> {
    match sandkeeper::config::locate(explicit) {
        Some(path) => sandkeeper::config::load(&path).map_err(config_error),
        None => Ok(Config::defaults()),
    }
}

fn config_error(err: sandkeeper::config::ConfigError) -> CliError {
    // The file's name is shown escaped; the message is the library's own.
    let file = sanitize(err.file.as_os_str().as_bytes());
    let mut e = CliError::usage(match err.line {
        Some(line) => format!("{file}:{line}: {}", err.message),
        None => format!("{file}: {}", err.message),
    });
    e.hint = Some("fix the file; docs/config.md lists every key. Nothing was changed.".into());
    e
}

/// What `watch` will do, one line per item, for the start of the log and
/// `--check`.
fn describe(config: &Config) -> Vec<String> {
    let mut lines = Vec::new();
    match &config.source {
        Some(path) => lines.push(format!("config {}", sanitize(path.as_os_str().as_bytes()))),
        None => {
            let looked: Vec<String> = sandkeeper::config::default_candidates()
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            lines.push(format!(
                "no config file ({}); using the defaults: orphaned sandboxes in the temp directory, no watermarks",
                looked.join(", ")
            ));
        }
    }
    lines.push(format!(
        "full cycle every {}, watermark poll every {}",
        humantime::format_duration(config.interval),
        humantime::format_duration(config.poll)
    ));
    if config.trust_pid_namespace {
        lines.push(
            "trust_pid_namespace: every process that can reach the roots is assumed to be in this pid namespace".into(),
        );
    }
    for root in &config.roots {
        let mut parts = vec![format!("grace {}", humantime::format_duration(root.grace))];
        if let Some(age) = root.orphan_age {
            parts.push(format!(
                "orphans older than {}",
                humantime::format_duration(age)
            ));
        }
        if root.max_keep != sandkeeper::reap::DEFAULT_MAX_KEEP {
            parts.push(format!(
                "kept sandboxes for at most {}",
                humantime::format_duration(root.max_keep)
            ));
        }
        if let Some(w) = &root.watermarks {
            parts.push(format!("high watermark {}, low {}", w.high, w.low));
        }
        if let Some(w) = &root.inode_watermarks {
            parts.push(format!("high inode watermark {}, low {}", w.high, w.low));
        }
        for rule in &root.rules {
            let mut r = format!("rule {:?}", rule.glob);
            if let Some(age) = rule.older_than {
                r += &format!(" older than {}", humantime::format_duration(age));
            }
            if let Some(n) = rule.keep_last {
                r += &format!(" keeping the last {n}");
            }
            if let Some(uid) = rule.owner {
                r += &format!(" of {}", crate::config::user_name(uid));
            }
            parts.push(r);
        }
        if root.user_dirs && root.user_dir_families {
            parts.push(
                "and its sandkeeper-<uid> directories (their families named in the metrics)".into(),
            );
        } else if root.user_dirs {
            parts.push("and its sandkeeper-<uid> directories".into());
        }
        lines.push(format!(
            "root {}: {}",
            sanitize(root.path.as_os_str().as_bytes()),
            parts.join("; ")
        ));
    }
    lines
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
    gave_up_at_free: Option<Level>,
    /// A digest of the scan warnings last logged, to log changes only.
    warnings: u64,
}

struct Watcher {
    config: Config,
    explicit: Option<PathBuf>,
    metrics_file: Option<PathBuf>,
    opts: Options,
    /// `--trust-pid-namespace` or `SANDKEEPER_TRUST_PID_NAMESPACE=1`,
    /// whatever the config says.
    trust_cli: bool,
    log: Log,
    metrics: Metrics,
    signals: Signals,
    roots: HashMap<PathBuf, RootState>,
}

impl Watcher {
    fn run_loop(&mut self) -> ExitStatus {
        let mut last_cycle: Option<Instant> = None;
        let mut next_cycle = Instant::now();
        let mut next_poll = next_cycle + self.config.poll;
        loop {
            if self.signals.stopping() {
                break;
            }
            if self.signals.take_hangup() {
                self.reload();
                // A new interval counts from the last cycle; poll at once.
                if let Some(last) = last_cycle {
                    next_cycle = last + self.config.interval;
                }
                next_poll = Instant::now();
            }
            let now = Instant::now();
            if now >= next_cycle {
                last_cycle = Some(now);
                self.cycle();
                next_cycle = now + self.config.interval;
                next_poll = Instant::now() + self.config.poll;
                continue;
            }
            if now >= next_poll {
                self.poll();
                next_poll = Instant::now() + self.config.poll;
                continue;
            }
            self.signals.wait(next_cycle.min(next_poll) - now);
        }
        let signal = if self.signals.interrupted() {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        self.log.notice(&format!("stopped ({signal})"));
        self.exit_status(0)
    }

    fn exit_status(&self, errors: usize) -> ExitStatus {
        if self.signals.interrupted() {
            exit_codes::INTERRUPTED
        } else if errors > 0 {
            exit_codes::PARTIAL
        } else {
            exit_codes::SUCCESS
        }
    }

    /// A full cycle over every root; the number of errors.
    fn cycle(&mut self) -> usize {
        let started = Instant::now();
        self.metrics.begin_cycle();
        let mut errors = 0;
        let roots = self.config.roots.clone();
        for root in &roots {
            if self.signals.stopping() {
                return errors;
            }
            errors += self.reap(root, Mode::Cycle);
        }
        if self.signals.stopping() {
            return errors;
        }
        self.metrics
            .finish_cycle(started.elapsed(), SystemTime::now());
        self.write_metrics();
        errors
    }

    /// Polls the roots with watermarks; reaps those above the high one.
    fn poll(&mut self) {
        let roots = self.config.roots.clone();
        let mut reaped = false;
        for root in roots
            .iter()
            .filter(|r| r.watermarks.is_some() || r.inode_watermarks.is_some())
        {
            if self.signals.stopping() {
                break;
            }
            let Ok(level) = cycle::measure(&root.path) else {
                continue; // the cycle reports a root it cannot measure
            };
            let above = cycle::above_high(root, &level);
            let state = self.roots.entry(root.path.clone()).or_default();
            if !above {
                *state = RootState {
                    warnings: state.warnings,
                    ..RootState::default()
                };
                continue;
            }
            // After a reap that could not get under the mark, wait (longer
            // each time), unless much more is used now than then.
            let grown = state.gave_up_at_free.is_some_and(|then| {
                then.free.saturating_sub(level.free) >= (level.total / 100).max(1 << 20)
                    || (level.total_inodes > 0
                        && then.free_inodes.saturating_sub(level.free_inodes)
                            >= (level.total_inodes / 100).max(1))
            });
            if state.retry_at.is_some_and(|t| Instant::now() < t) && !grown {
                continue;
            }
            self.reap(root, Mode::PressureOnly);
            reaped = true;
        }
        if reaped {
            self.write_metrics();
        }
    }

    /// Reaps one configured root, logs and counts; the number of errors.
    fn reap(&mut self, root: &RootConfig, mode: Mode) -> usize {
        let outcome = cycle::reap(root, &self.opts, mode);
        let name = sanitize(root.path.as_os_str().as_bytes()).into_owned();
        if let (Some(target), Some(before)) = (outcome.pressure, outcome.before) {
            self.metrics.count_pressure_reap(&root.path);
            self.log.notice(&format!(
                "{name}: above the high watermark ({}); removing oldest first until {}",
                used(&before, &target),
                target.describe()
            ));
        }
        for (path, err) in &outcome.failures {
            self.log.error(&format!(
                "{}: cannot reap: {}",
                sanitize(path.as_os_str().as_bytes()),
                err.message
            ));
        }
        let under_pressure = outcome.pressure.is_some();
        for report in &outcome.reports {
            self.log_report(report, under_pressure);
            self.log_warnings(&root.path, report);
            self.metrics
                .set_uninspectable(report.scan.uninspectable.len());
        }
        let removed = outcome.removed();
        let freed = outcome.freed_bytes();
        let errors = outcome.error_count();
        let target = outcome.pressure;
        let blocked = target.map(|_| blockers(&outcome));
        // The reports go before the metrics' rescan: one scan in memory.
        self.observe(root, outcome);
        let after = cycle::measure(&root.path).ok();
        if let (Some(target), Some(after), Some(blocked)) = (target, after, blocked) {
            self.after_pressure(root, (removed, freed), target, after, &blocked);
        } else if removed > 0 || (mode == Mode::Cycle && self.log.enabled(log::Level::Debug)) {
            let verb = if self.opts.dry_run {
                "would remove"
            } else {
                "removed"
            };
            self.log.info(&format!(
                "{name}: cycle: {verb} {removed} entr{} ({}){}",
                if removed == 1 { "y" } else { "ies" },
                size(freed),
                after.map_or(String::new(), |a| format!("; {} free", size(a.free)))
            ));
        }
        errors
    }

    /// After a reap under pressure: done, or still above (then back off).
    /// `done`: the entries removed and the bytes freed; `blocked`: what
    /// kept the rest ([`blockers`]).
    fn after_pressure(
        &mut self,
        root: &RootConfig,
        done: (usize, u64),
        target: Pressure,
        after: Level,
        blocked: &str,
    ) {
        let name = sanitize(root.path.as_os_str().as_bytes()).into_owned();
        let (removed, freed) = done;
        let summary = format!(
            "removed {removed} entr{} ({}); {}",
            if removed == 1 { "y" } else { "ies" },
            size(freed),
            used(&after, &target),
        );
        let still_above = cycle::above_high(root, &after);
        let state = self.roots.entry(root.path.clone()).or_default();
        if self.signals.stopping() {
            self.log
                .notice(&format!("{name}: stopped under pressure: {summary}"));
        } else if target.met(&after) {
            self.log
                .notice(&format!("{name}: below the low watermark: {summary}"));
            state.backoff = Duration::ZERO;
            state.retry_at = None;
            state.gave_up_at_free = None;
        } else if still_above {
            state.backoff = (state.backoff * 2)
                .max(self.config.poll)
                .min(self.config.interval);
            state.retry_at = Some(Instant::now() + state.backoff);
            state.gave_up_at_free = Some(after);
            self.log.warning(&format!(
                "{name}: still above the high watermark: {summary}; nothing else may go: {blocked}; retrying in {}",
                humantime::format_duration(state.backoff)
            ));
        } else {
            self.log.notice(&format!(
                "{name}: below the high watermark but not the low one: {summary}; nothing else may go: {blocked}"
            ));
        }
    }

    /// One line per removal and per failure.
    fn log_report(&self, report: &ReapReport, under_pressure: bool) {
        let verb = if report.dry_run {
            "would remove"
        } else {
            "removed"
        };
        for root in &report.roots {
            let name = sanitize(root.path.as_os_str().as_bytes());
            if root.quarantine_finished > 0 {
                self.log.info(&format!(
                    "{name}: finished {} item(s) a killed reaper left in quarantine",
                    root.quarantine_finished
                ));
            }
            for r in &root.removed {
                self.log.info(&format!(
                    "{name}: {verb} {} ({}, {}{})",
                    sanitize(r.path.as_os_str().as_bytes()),
                    size(r.disk_bytes),
                    r.reason,
                    if under_pressure {
                        ", under pressure"
                    } else {
                        ""
                    }
                ));
            }
            // One line per failure, up to a bound: a cause that fails every
            // removal (a filesystem gone read-only) would flood the journal
            // on every poll; the rest is one line, and the pressure summary
            // names the cause too.
            for e in root.errors.iter().take(MAX_ERROR_LINES) {
                self.log.warning(&format!(
                    "{name}: could not remove {}: {}",
                    sanitize(e.path.as_os_str().as_bytes()),
                    sanitize(e.error.as_bytes())
                ));
            }
            if root.errors.len() > MAX_ERROR_LINES {
                self.log.warning(&format!(
                    "{name}: and {} more could not be removed in this reap (not listed one by one)",
                    root.errors.len() - MAX_ERROR_LINES
                ));
            }
            for s in &root.skipped {
                if let KeepReason::Changed(_) = s.reason {
                    self.log.debug(&format!(
                        "{name}: kept {} ({})",
                        sanitize(s.path.as_os_str().as_bytes()),
                        s.reason
                    ));
                }
            }
        }
    }

    /// The scan's warnings (uninspectable processes, unreadable entries),
    /// logged when they change.
    fn log_warnings(&mut self, root: &Path, report: &ReapReport) {
        use std::hash::{Hash, Hasher};
        let warnings = render::scan::warnings(&report.scan);
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        warnings.hash(&mut hasher);
        let digest = hasher.finish();
        let state = self.roots.entry(root.to_owned()).or_default();
        if state.warnings == digest {
            return;
        }
        state.warnings = digest;
        for w in warnings {
            self.log.warning(&sanitize(w.as_bytes()));
        }
    }

    /// Updates the gauges from the reports; a (sub)root where something
    /// was removed is scanned again, so the gauges show what is there now.
    fn observe(&mut self, root: &RootConfig, outcome: Outcome) {
        if self.metrics_file.is_none() || self.signals.stopping() {
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
                if reap.removed.is_empty() || report.dry_run {
                    self.metrics
                        .observe_scan(scanned, marks(opened), labels(opened));
                } else {
                    rescan.push(opened.clone());
                }
            }
        }
        drop(outcome);
        let mut scanner = Scanner::new();
        for &pid in &self.opts.ignore_pids {
            scanner.ignore_pid(pid);
        }
        scanner.trust_pid_namespace(self.opts.trust_pid_namespace);
        for opened in rescan {
            match scanner.scan_roots(std::slice::from_ref(&opened)) {
                Ok(fresh) => {
                    for r in &fresh.roots {
                        self.metrics
                            .observe_scan(r, marks(&opened), labels(&opened));
                    }
                }
                Err(e) => self.log.error(&format!(
                    "{}: cannot scan for the metrics: {e}",
                    sanitize(opened.path().as_os_str().as_bytes())
                )),
            }
        }
    }

    fn write_metrics(&self) {
        let Some(path) = &self.metrics_file else {
            return;
        };
        if let Err(e) = metrics::write_atomic(path, &metrics::prometheus(&self.metrics)) {
            self.log.error(&format!(
                "cannot write the metrics file {}: {e}",
                sanitize(path.as_os_str().as_bytes())
            ));
        }
    }

    /// SIGHUP: load the config again; a bad one keeps the old.
    fn reload(&mut self) {
        let Some(path) = sandkeeper::config::locate(self.explicit.as_deref()) else {
            self.log
                .notice("SIGHUP: no config file found; keeping the built-in defaults");
            return;
        };
        match sandkeeper::config::load(&path) {
            Ok(config) => {
                self.roots
                    .retain(|p, _| config.roots.iter().any(|r| &r.path == p));
                self.config = config;
                self.opts.trust_pid_namespace = self.trust_cli || self.config.trust_pid_namespace;
                self.metrics.set_config_ok(true);
                self.log.notice(&format!(
                    "SIGHUP: reloaded {}",
                    sanitize(path.as_os_str().as_bytes())
                ));
                for line in describe(&self.config) {
                    self.log.notice(&line);
                }
            }
            Err(e) => {
                self.metrics.set_config_ok(false);
                self.log.error(&format!(
                    "SIGHUP: bad config, keeping the previous one: {}",
                    sanitize(e.to_string().as_bytes())
                ));
            }
        }
        self.write_metrics();
    }
}

/// What kept a reap under pressure from freeing more: the entries that
/// could not be removed (with the first error), then the keep reasons by
/// the disk usage they hold, the top [`TOP_BLOCKERS`] named. Sanitized.
fn blockers(outcome: &Outcome) -> String {
    let roots = outcome.reports.iter().flat_map(|r| &r.roots);
    let skipped = roots.clone().flat_map(|r| &r.skipped);
    let errors: Vec<(&Path, &str)> = roots
        .flat_map(|r| &r.errors)
        .map(|e| (e.path.as_path(), e.error.as_str()))
        .chain(
            outcome
                .failures
                .iter()
                .map(|(path, e)| (path.as_path(), e.message.as_str())),
        )
        .collect();
    blocker_text(skipped.map(|s| (&s.reason, s.disk_bytes)), &errors)
}

/// Removal failures logged one by one per root and reap; the rest are
/// counted in one line.
const MAX_ERROR_LINES: usize = 8;

/// How many keep reasons [`blockers`] names; the rest are summed.
const TOP_BLOCKERS: usize = 3;

/// See [`blockers`]: `kept` is each kept entry's reason and disk usage,
/// `errors` each entry (or root) that could not be removed and why.
fn blocker_text<'a>(
    kept: impl Iterator<Item = (&'a KeepReason, u64)>,
    errors: &[(&Path, &str)],
) -> String {
    // (label, entries, bytes), by the reason's stable name.
    let mut by: Vec<(&'static str, usize, u64)> = Vec::new();
    for (reason, bytes) in kept {
        let label = match reason {
            KeepReason::Live => "live (lease held)",
            KeepReason::InUse => "in use",
            KeepReason::Unknown => "unknown (could not be inspected)",
            KeepReason::InGrace { .. } => "in grace",
            KeepReason::KeptUntil(_) => "kept on purpose",
            KeepReason::NotSelected => "matched by no rule",
            KeepReason::TooNew { .. } => "too new",
            KeepReason::AmongNewest => "among the newest kept",
            KeepReason::OtherOwner(_) => "of another owner",
            KeepReason::Changed(_) => "changed during the reap",
            KeepReason::ClockStepped(_) => "ages untrusted (clock stepped)",
            // Not blockers: the target was met, or a stop was asked for.
            KeepReason::TargetMet | KeepReason::Stopped => continue,
            _ => "kept for another reason",
        };
        match by.iter_mut().find(|(l, ..)| *l == label) {
            Some(slot) => {
                slot.1 += 1;
                slot.2 = slot.2.saturating_add(bytes);
            }
            None => by.push((label, 1, bytes)),
        }
    }
    by.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(b.0)));
    let mut parts = Vec::new();
    if let Some((path, why)) = errors.first() {
        parts.push(format!(
            "{} could not be removed (first: {}: {})",
            errors.len(),
            sanitize(path.as_os_str().as_bytes()),
            sanitize(why.as_bytes())
        ));
    }
    for (label, n, bytes) in by.iter().take(TOP_BLOCKERS) {
        parts.push(format!("{n} {label} ({})", size(*bytes)));
    }
    if by.len() > TOP_BLOCKERS {
        let (n, bytes) = by[TOP_BLOCKERS..]
            .iter()
            .fold((0, 0u64), |(n, b), x| (n + x.1, b.saturating_add(x.2)));
        parts.push(format!("{n} more kept for other reasons ({})", size(bytes)));
    }
    if parts.is_empty() {
        return "no entry is left to take".to_owned();
    }
    parts.join(", ")
}

fn percent(level: &Level) -> String {
    format!("{:.1}%", level.used_percent())
}

/// How full a filesystem is, in the terms of the pressure on it: "95.0%
/// used, 1 GiB free" for bytes, "100.0% of inodes used, 0 inodes free" for
/// inodes, or both.
fn used(level: &Level, pressure: &Pressure) -> String {
    let bytes = format!("{} used, {} free", percent(level), size(level.free));
    let inodes = format!(
        "{:.1}% of inodes used, {} inodes free",
        level.used_inodes_percent(),
        level.free_inodes
    );
    match (pressure.bytes.is_some(), pressure.inodes.is_some()) {
        (_, false) => bytes,
        (false, true) => inodes,
        (true, true) => format!("{bytes}; {inodes}"),
    }
}

/// `reap` with a config file: each root as one cycle of `watch` would
/// reap it (under pressure when above its high watermark), merged into
/// one report.
///
/// # Errors
///
/// A configured root that does not exist (checked before anything is
/// removed): exit status 2.
pub fn reap_configured(
    config: &Config,
    args: &ReapArgs,
    printer: &Printer,
) -> Result<ReapReport, CliError> {
    let source = config
        .source
        .as_ref()
        .map_or_else(|| "the defaults".to_owned(), |p| p.display().to_string());
    // Every configured root is opened before anything is removed; the
    // reaps then use these descriptors, never the paths again.
    let mut opened = Vec::with_capacity(config.roots.len());
    for root in &config.roots {
        match Root::open_exact(&root.path) {
            Ok(r) => opened.push(r),
            Err(e) => {
                let mut err = CliError::usage(format!(
                    "root {} (from {source}) cannot be used: {e}",
                    sanitize(root.path.as_os_str().as_bytes())
                ));
                err.hint = Some(
                    e.hint()
                        .unwrap_or("create it, or remove it from the config file")
                        .to_owned(),
                );
                return Err(err);
            }
        }
    }
    let opts = Options {
        dry_run: args.dry_run,
        ignore_pids: args.rules.ignore_pids.clone(),
        trust_pid_namespace: super::trust_pid_namespace(
            args.rules.trust_pid_namespace,
            config.trust_pid_namespace,
        )?,
        stop: None,
    };
    let mut merged: Option<ReapReport> = None;
    for (root, open) in config.roots.iter().zip(opened) {
        let outcome = cycle::reap_opened(root, open, &opts, Mode::Cycle);
        if let (Some(target), Some(before)) = (outcome.pressure, outcome.before) {
            printer.note(&format!(
                "{}: above the high watermark ({}); removing oldest first until {}",
                sanitize(root.path.as_os_str().as_bytes()),
                used(&before, &target),
                target.describe()
            ));
        }
        if let Some((_, mut err)) = outcome.failures.into_iter().next() {
            let removed_any = merged
                .iter()
                .chain(&outcome.reports)
                .any(|r| r.roots.iter().any(|root| !root.removed.is_empty()));
            if removed_any && !args.dry_run {
                // Something was changed: never claim otherwise.
                err.status = crate::exit_codes::PARTIAL;
            }
            return Err(err);
        }
        for report in outcome.reports {
            match &mut merged {
                None => merged = Some(report),
                Some(m) => {
                    m.roots.extend(report.roots);
                    m.scan.roots.extend(report.scan.roots);
                    for u in report.scan.uninspectable {
                        if !m.scan.uninspectable.iter().any(|x| x.pid == u.pid) {
                            m.scan.uninspectable.push(u);
                        }
                    }
                    for b in report.scan.blind_spots {
                        if !m.scan.blind_spots.contains(&b) {
                            m.scan.blind_spots.push(b);
                        }
                    }
                    for b in report.scan.assumed_blind_spots {
                        if !m.scan.assumed_blind_spots.contains(&b) {
                            m.scan.assumed_blind_spots.push(b);
                        }
                    }
                }
            }
        }
    }
    merged.ok_or_else(|| CliError::usage("the config names no root"))
}

/// The config `reap` uses: `--config FILE`; or, when no root or rule is
/// given on the command line, a default config file if one exists.
///
/// # Errors
///
/// `--config` together with roots or rules; a bad config file.
pub fn config_for_reap(args: &ReapArgs) -> Result<Option<Config>, CliError> {
    let r = &args.rules;
    let mut given = Vec::new();
    if !args.roots.is_empty() {
        given.push("ROOT");
    }
    for (yes, flag) in [
        (!r.globs.is_empty(), "--match"),
        (r.older_than.is_some(), "--older-than"),
        (r.keep_last.is_some(), "--keep-last"),
        (r.target_free.is_some(), "--target-free"),
        (r.target_free_inodes.is_some(), "--target-free-inodes"),
        (r.owner.is_some(), "--owner"),
        (r.grace != sandkeeper::config::DEFAULT_GRACE, "--grace"),
        (
            r.max_keep != sandkeeper::reap::DEFAULT_MAX_KEEP,
            "--max-keep",
        ),
    ] {
        if yes {
            given.push(flag);
        }
    }
    match (&args.config, given.is_empty()) {
        (Some(_), false) => {
            let mut err = CliError::usage(format!(
                "--config cannot be combined with {}: the config file gives the roots and rules",
                given.join(", ")
            ));
            err.hint = Some("drop --config to reap by the command line's rules".into());
            Err(err)
        }
        (Some(path), true) => load(Some(path)).map(Some),
        (None, false) => Ok(None),
        (None, true) => match sandkeeper::config::locate(None) {
            Some(path) => sandkeeper::config::load(&path).map(Some).map_err(config_error),
            None => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 11, item 9(a): a reap under pressure that cannot free more
    /// names what held it back, biggest first, errors before all.
    #[test]
    fn blockers_are_named() {
        let grace = KeepReason::InGrace {
            age: Duration::from_secs(1),
        };
        // (name, kept entries, errors, the text)
        type Case = (
            &'static str,
            Vec<(KeepReason, u64)>,
            Vec<(&'static str, &'static str)>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            ("nothing", vec![], vec![], "no entry is left to take"),
            (
                "in use beats grace by bytes",
                vec![
                    (grace.clone(), 1 << 10),
                    (grace.clone(), 1 << 10),
                    (KeepReason::InUse, 3 << 20),
                ],
                vec![],
                "1 in use (3.00 MiB), 2 in grace (2.00 KiB)",
            ),
            (
                "errors first; target met is no blocker",
                vec![(KeepReason::TargetMet, 1 << 30), (KeepReason::Unknown, 0)],
                vec![
                    ("/r/a", "no usable quarantine"),
                    ("/r/b", "no usable quarantine"),
                ],
                "2 could not be removed (first: /r/a: no usable quarantine), 1 unknown (could not be inspected) (0 B)",
            ),
            (
                "the rest summed",
                vec![
                    (KeepReason::Live, 4),
                    (KeepReason::InUse, 3),
                    (KeepReason::NotSelected, 2),
                    (KeepReason::KeptUntil(1), 1),
                    (KeepReason::ClockStepped(Duration::ZERO), 1),
                ],
                vec![],
                "1 live (lease held) (4 B), 1 in use (3 B), 1 matched by no rule (2 B), 2 more kept for other reasons (2 B)",
            ),
            (
                "hostile text is escaped",
                vec![],
                vec![("/r/\x1b[2J", "bad\nline")],
                "1 could not be removed (first: /r/\\x1b[2J: bad\\nline)",
            ),
        ];
        for (name, kept, errors, want) in cases {
            let errors: Vec<(&Path, &str)> =
                errors.iter().map(|(p, e)| (Path::new(*p), *e)).collect();
            let got = blocker_text(kept.iter().map(|(r, b)| (r, *b)), &errors);
            assert_eq!(got, want, "{name}");
        }
    }
}
