//! `sandkeeper watch`: the host backstop, run by the library's engine
//! ([`sandkeeper_engine::watch::Watcher`]). This face gives it the real clock and
//! the signals (SIGHUP reloads the config, SIGTERM stops after the current
//! removal: [`Signals`]), logs every event as one line on stderr when it
//! happens ([`log`]), and writes `--metrics-file` whenever the metrics
//! change.

pub mod log;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sandkeeper_engine::reap::{KeepReason, ReapEvent, ReapReason};
use sandkeeper_engine::watch::{
    Driver, Mode, PressureEnd, Signals, Wake, WatchEvent, WatchOptions, Watcher,
};

use super::load_config;
use crate::cli::WatchArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::humanize::{sanitize, size};
use crate::printer::Printer;
use crate::render::{self, watch::MAX_ERROR_LINES};
use log::Log;

pub fn run(args: &WatchArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let config = load_config(args.config.as_deref())?;
    if args.check {
        let text = render::watch::describe(&config).join("\n") + "\n";
        let _ = printer.data(&text);
        return Ok(exit_codes::SUCCESS);
    }
    if let Some(path) = &args.metrics_file {
        // An unsafe metrics path is refused before the first cycle (exit
        // 2); every write checks again through the directory. A directory
        // that does not exist (yet: node_exporter not installed) is not
        // fatal: each cycle logs it, as the shipped unit expects.
        match sandkeeper_engine::output::OutputFile::open(path) {
            Err(e) if e.kind() != sandkeeper_engine::ErrorKind::UnusableRoot => {
                return Err(e.into())
            }
            _ => {}
        }
    }
    let stuck_log = Log::new(printer);
    let signals = Signals::install(move |why| stuck_log.error(why))
        .map_err(|e| CliError::io("cannot install signal handlers", &e))?;
    let mut opts = WatchOptions::new();
    opts.reap = args.inuse.options(None)?;
    opts.reap.dry_run = args.dry_run;
    opts.reap.stop = Some(signals.stop_flag());
    // Counted and logged as the reap goes: no record per entry, whose
    // number is whatever the root holds.
    opts.reap.records = false;
    opts.config_path = args.config.clone();
    opts.metrics = args.metrics_file.is_some();
    let mut driver = LogDriver {
        log: Log::new(printer),
        signals,
        metrics_file: args.metrics_file.clone(),
        dry_run: args.dry_run,
        warnings: HashMap::new(),
        errors_this_reap: 0,
        pressure: None,
    };
    for line in render::watch::describe(&config) {
        driver.log.notice(&line);
    }
    let mut watcher = Watcher::new(config, opts);
    if args.once {
        let errors = watcher.cycle(&mut driver);
        return Ok(driver.exit_status(errors));
    }
    watcher.run(&mut driver);
    let signal = if driver.signals.interrupted() {
        "SIGINT"
    } else {
        "SIGTERM"
    };
    driver.log.notice(&format!("stopped ({signal})"));
    Ok(driver.exit_status(0))
}

/// The engine's world: the real clock, the signals, and the log.
struct LogDriver {
    log: Log,
    signals: Signals,
    metrics_file: Option<PathBuf>,
    dry_run: bool,
    /// Per configured root, a digest of the scan warnings last logged, to
    /// log changes only.
    warnings: HashMap<PathBuf, u64>,
    /// Removal failures logged in the current reap (bounded).
    errors_this_reap: usize,
    /// How full the root was when the current reap under pressure started
    /// (`render::watch::used`), for the line of a kept sandbox it takes.
    pressure: Option<String>,
}

impl LogDriver {
    fn exit_status(&self, errors: usize) -> ExitStatus {
        if self.signals.interrupted() {
            exit_codes::INTERRUPTED
        } else if errors > 0 {
            exit_codes::PARTIAL
        } else {
            exit_codes::SUCCESS
        }
    }

    /// One line per removal and per failure, when it happens.
    fn reap_event(&mut self, root: &Path, under_pressure: bool, event: ReapEvent<'_>) {
        let name = sanitize(root.as_os_str().as_bytes()).into_owned();
        match event {
            ReapEvent::Scanned(_) => self.errors_this_reap = 0,
            ReapEvent::QuarantineFinished { root, items } => self.log.info(&format!(
                "{}: finished {} a killed reaper left in quarantine",
                sanitize(root.as_os_str().as_bytes()),
                crate::humanize::plural(items, "item", "items")
            )),
            ReapEvent::QuarantineRechecked { root, items } => self.log.info(&format!(
                "{}: removed {} an earlier reap had kept in quarantine (in use then, its name taken), now unused",
                sanitize(root.as_os_str().as_bytes()),
                crate::humanize::plural(items, "item", "items")
            )),
            ReapEvent::Removed(r) => {
                let verb = if self.dry_run {
                    "would remove"
                } else {
                    "removed"
                };
                let (path, bytes) = (sanitize(r.path.as_os_str().as_bytes()), size(r.disk_bytes));
                match r.reason {
                    // A sandbox kept on purpose goes only under pressure,
                    // after everything else: its line says so, and why (a
                    // warning: its owner asked for it to stay).
                    ReapReason::KeptUnderPressure(until) => self.log.warning(&format!(
                        "{name}: {verb} {path} ({bytes}, {}, removed under pressure: {name} above its high watermark ({} when the reap started), nothing else left to remove)",
                        sandkeeper_engine::human::kept_until(until, None),
                        self.pressure.as_deref().unwrap_or("full")
                    )),
                    _ => self.log.info(&format!(
                        "{name}: {verb} {path} ({bytes}, {}{})",
                        r.reason,
                        if under_pressure {
                            ", under pressure"
                        } else {
                            ""
                        }
                    )),
                }
            }
            // One line per failure, up to a bound: a cause that fails every
            // removal (a filesystem gone read-only) would flood the journal
            // on every poll; the rest is one line, and the pressure summary
            // names the cause too.
            ReapEvent::Failed(e) => {
                self.errors_this_reap += 1;
                if self.errors_this_reap <= MAX_ERROR_LINES {
                    self.log.warning(&format!(
                        "{name}: could not remove {}: {}",
                        sanitize(e.path.as_os_str().as_bytes()),
                        sanitize(e.error.as_bytes())
                    ));
                }
            }
            ReapEvent::Kept(s) => {
                if let KeepReason::Changed(_) = s.reason {
                    self.log.debug(&format!(
                        "{name}: kept {} ({})",
                        sanitize(s.path.as_os_str().as_bytes()),
                        s.reason
                    ));
                }
            }
            _ => {}
        }
    }

    /// The end of a configured root's reap: failures, warnings (when they
    /// changed), and the summary.
    fn reaped(
        &mut self,
        root: &sandkeeper_engine::config::RootConfig,
        mode: Mode,
        outcome: &sandkeeper_engine::watch::Outcome,
        after: Option<sandkeeper_engine::watch::Level>,
        end: Option<PressureEnd>,
    ) {
        let name = sanitize(root.path.as_os_str().as_bytes()).into_owned();
        for (path, err) in &outcome.failures {
            self.log.error(&format!(
                "{}: cannot reap: {}",
                sanitize(path.as_os_str().as_bytes()),
                sanitize(err.to_string().as_bytes())
            ));
        }
        for report in &outcome.reports {
            for r in &report.roots {
                if r.errors.len() > MAX_ERROR_LINES {
                    self.log.warning(&format!(
                        "{}: and {} more could not be removed in this reap (not listed one by one)",
                        sanitize(r.path.as_os_str().as_bytes()),
                        r.errors.len() - MAX_ERROR_LINES
                    ));
                }
            }
            let warnings = render::scan::warnings(&report.scan);
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            warnings.hash(&mut hasher);
            let digest = hasher.finish();
            if self.warnings.insert(root.path.clone(), digest) != Some(digest) {
                for w in warnings {
                    self.log.warning(&sanitize(w.as_bytes()));
                }
            }
        }
        let (removed, freed) = (outcome.removed(), outcome.freed_bytes());
        let entries = |n: usize| crate::humanize::plural(n as u64, "entry", "entries");
        if let (Some(end), Some(after), Some(target)) = (end, after, outcome.pressure) {
            let summary = format!(
                "removed {} ({}); {}",
                entries(removed),
                size(freed),
                render::watch::used(&after, &target)
            );
            let blocked = || render::watch::blockers(outcome);
            match end {
                PressureEnd::Stopped => self
                    .log
                    .notice(&format!("{name}: stopped under pressure: {summary}")),
                PressureEnd::Met => self
                    .log
                    .notice(&format!("{name}: below the low watermark: {summary}")),
                PressureEnd::StillAbove { retry_in } => self.log.warning(&format!(
                    "{name}: still above the high watermark: {summary}; nothing else may go: {}; retrying in {}",
                    blocked(),
                    crate::humanize::duration(retry_in)
                )),
                PressureEnd::BelowHigh => self.log.notice(&format!(
                    "{name}: below the high watermark but not the low one: {summary}; nothing else may go: {}",
                    blocked()
                )),
            }
        } else if removed > 0 || (mode == Mode::Cycle && self.log.enabled(log::Level::Debug)) {
            let verb = if self.dry_run {
                "would remove"
            } else {
                "removed"
            };
            self.log.info(&format!(
                "{name}: cycle: {verb} {} ({}){}",
                entries(removed),
                size(freed),
                after.map_or(String::new(), |a| format!("; {} free", size(a.free)))
            ));
        }
    }

    fn write_metrics(&self, metrics: &sandkeeper_engine::metrics::Metrics) {
        let Some(path) = &self.metrics_file else {
            return;
        };
        let text = metrics.to_prometheus();
        let mode = sandkeeper_engine::metrics::FILE_MODE;
        if let Err(e) = sandkeeper_engine::output::write_atomic(path, text.as_bytes(), mode) {
            self.log.error(&format!(
                "cannot write the metrics file {}: {e}",
                sanitize(path.as_os_str().as_bytes())
            ));
        }
    }
}

impl Driver for LogDriver {
    fn now(&mut self) -> Instant {
        Instant::now()
    }

    fn wait(&mut self, until: Instant) -> Wake {
        let woken = |s: &Signals| {
            if s.stopping() {
                Some(Wake::Stop)
            } else if s.take_hangup() {
                Some(Wake::Reload)
            } else {
                None
            }
        };
        if let Some(wake) = woken(&self.signals) {
            return wake;
        }
        let now = Instant::now();
        if until > now {
            self.signals.wait(until - now);
        }
        woken(&self.signals).unwrap_or(Wake::Timeout)
    }

    fn event(&mut self, event: WatchEvent<'_>) {
        match event {
            WatchEvent::Reap {
                root,
                under_pressure,
                event,
            } => self.reap_event(root, under_pressure, event),
            WatchEvent::PressureStarted {
                root,
                level,
                pressure,
            } => {
                self.pressure = Some(render::watch::used(&level, &pressure));
                self.log
                    .notice(&render::watch::pressure_started(root, &level, &pressure));
            }
            WatchEvent::Reaped {
                root,
                mode,
                outcome,
                after,
                pressure_end,
            } => {
                self.reaped(root, mode, outcome, after, pressure_end);
                self.pressure = None;
            }
            WatchEvent::RescanFailed { root, error } => self.log.error(&format!(
                "{}: cannot scan for the metrics: {}",
                sanitize(root.as_os_str().as_bytes()),
                sanitize(error.to_string().as_bytes())
            )),
            WatchEvent::MetricsUpdated(metrics) => self.write_metrics(metrics),
            WatchEvent::Reloaded { path, config } => {
                self.log.notice(&format!(
                    "SIGHUP: reloaded {}",
                    sanitize(path.as_os_str().as_bytes())
                ));
                self.warnings
                    .retain(|p, _| config.roots.iter().any(|r| &r.path == p));
                for line in render::watch::describe(config) {
                    self.log.notice(&line);
                }
            }
            WatchEvent::ReloadFailed(e) => self.log.error(&format!(
                "SIGHUP: bad config, keeping the previous one: {}",
                sanitize(e.to_string().as_bytes())
            )),
            WatchEvent::NoConfigFile => self
                .log
                .notice("SIGHUP: no config file found; keeping the built-in defaults"),
            WatchEvent::Origins(change) => match render::watch::origins(change) {
                (true, line) => self.log.error(&line),
                (false, line) => self.log.notice(&line),
            },
            WatchEvent::OriginStoreFailed { root, error } => self.log.error(&format!(
                "origins: cannot drop the stored records of entries gone from {}: {}",
                sanitize(root.as_os_str().as_bytes()),
                sanitize(error.to_string().as_bytes())
            )),
            _ => {}
        }
    }
}
