//! The watch engine driven by a fake clock: cycles and polls come when
//! the clock says, reaps under pressure back off, a reload takes a new
//! config (a bad one keeps the old), and a stop takes effect between two
//! removals. Nothing here sleeps: the clock moves only when the loop
//! waits. Tests that remove run in a private PID namespace, where every
//! process can be inspected (here even root cannot inspect the host's
//! PID 1, which makes every entry `unknown`).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandkeeper_engine::config::{self, Config};
use sandkeeper_engine::reap::{KeepReason, ReapEvent};
use sandkeeper_engine::watch::{
    Driver, Mode, PressureEnd, Wake, WatchEvent, WatchOptions, Watcher,
};
use sandkeeper_engine::{ErrorKind, Sandbox};
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};

/// What the fake driver saw, in order, with the fake time (seconds since
/// the start) it happened at.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Removed(u64, PathBuf),
    Stopped(PathBuf),
    Pressure(u64),
    PressureEnd(u64, PressureEnd),
    Cycle(u64),
    Reaped(u64, Mode),
    Reloaded(u64),
    ReloadFailed(u64),
}

/// A clock that jumps to each deadline; wakes scheduled at fake times.
struct Fake {
    start: Instant,
    now: Instant,
    /// (at seconds, wake), in order; a `Stop` ends the run.
    script: Vec<(u64, Wake)>,
    /// Run before a scripted wake is returned (to write a config file).
    before_wake: Box<dyn FnMut(u64, Wake)>,
    seen: Vec<Seen>,
    /// Raised at the first removal, when set.
    stop_at_first_removal: Option<Arc<AtomicBool>>,
    waits: usize,
}

impl Fake {
    fn new(script: Vec<(u64, Wake)>) -> Fake {
        let start = Instant::now();
        Fake {
            start,
            now: start,
            script,
            before_wake: Box::new(|_, _| {}),
            seen: Vec::new(),
            stop_at_first_removal: None,
            waits: 0,
        }
    }

    fn secs(&self) -> u64 {
        self.now.duration_since(self.start).as_secs()
    }

    fn cycles(&self) -> Vec<u64> {
        self.seen
            .iter()
            .filter_map(|s| match s {
                Seen::Cycle(t) => Some(*t),
                _ => None,
            })
            .collect()
    }
}

impl Driver for Fake {
    fn now(&mut self) -> Instant {
        self.now
    }

    fn wait(&mut self, until: Instant) -> Wake {
        self.waits += 1;
        assert!(self.waits < 10_000, "the loop does not end");
        assert!(until >= self.now, "a deadline in the past is waited for");
        if let Some(&(at, wake)) = self.script.first() {
            let at_time = self.start + Duration::from_secs(at);
            if at_time <= until {
                self.script.remove(0);
                self.now = self.now.max(at_time);
                (self.before_wake)(at, wake);
                return wake;
            }
        }
        self.now = until;
        Wake::Timeout
    }

    fn event(&mut self, event: WatchEvent<'_>) {
        let t = self.secs();
        match event {
            WatchEvent::Reap {
                event: ReapEvent::Removed(r),
                ..
            } => {
                self.seen.push(Seen::Removed(t, r.path.clone()));
                if let Some(stop) = self.stop_at_first_removal.take() {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            WatchEvent::Reap {
                event: ReapEvent::Kept(k),
                ..
            } if k.reason == KeepReason::Stopped => self.seen.push(Seen::Stopped(k.path.clone())),
            WatchEvent::PressureStarted { .. } => self.seen.push(Seen::Pressure(t)),
            WatchEvent::Reaped {
                mode, pressure_end, ..
            } => {
                self.seen.push(Seen::Reaped(t, mode));
                if let Some(end) = pressure_end {
                    self.seen.push(Seen::PressureEnd(t, end));
                }
            }
            WatchEvent::CycleFinished { .. } => self.seen.push(Seen::Cycle(t)),
            WatchEvent::Reloaded { .. } => self.seen.push(Seen::Reloaded(t)),
            WatchEvent::ReloadFailed(_) => self.seen.push(Seen::ReloadFailed(t)),
            _ => {}
        }
    }
}

/// A config over `root` from TOML text (the root's path is filled in).
fn config(root: &Path, rest: &str) -> Config {
    let text = format!(
        "interval = \"60s\"\npoll = \"5s\"\n\n[[root]]\npath = \"{}\"\ngrace = \"0s\"\n{rest}",
        root.display()
    );
    config::parse(&text, Path::new("test.toml")).expect("a good config")
}

fn make(root: &Path, names: &[&str]) {
    for n in names {
        fs::create_dir(root.join(n)).unwrap();
        fs::write(root.join(n).join("data"), b"x").unwrap();
    }
}

fn exists(root: &Path, name: &str) -> bool {
    root.join(name).symlink_metadata().is_ok()
}

#[test]
fn cycles_come_every_interval_by_the_drivers_clock() {
    let dir = Sandbox::new().unwrap();
    let cfg = config(dir.path(), "");
    let mut fake = Fake::new(vec![(185, Wake::Stop)]);
    Watcher::new(cfg, WatchOptions::new()).run(&mut fake);
    assert_eq!(fake.cycles(), [0, 60, 120, 180]);
    assert_eq!(fake.secs(), 185, "stopped when the driver said so");
}

#[test]
fn removals_are_told_as_they_happen_and_after_a_stop_none_starts() {
    run_in_pid_namespace(
        "removals_are_told_as_they_happen_and_after_a_stop_none_starts",
        "inner_removals_are_told_as_they_happen_and_after_a_stop_none_starts",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_removals_are_told_as_they_happen_and_after_a_stop_none_starts() {
    if !in_namespace() {
        return;
    }
    let dir = Sandbox::new().unwrap();
    let names = ["app-1", "app-2", "app-3", "app-4", "app-5"];
    make(dir.path(), &names);
    let cfg = config(dir.path(), "[[root.rule]]\nmatch = \"app-*\"\n");
    let stop = Arc::new(AtomicBool::new(false));
    let mut opts = WatchOptions::new();
    opts.reap.stop = Some(Arc::clone(&stop));
    let mut fake = Fake::new(vec![]);
    fake.stop_at_first_removal = Some(Arc::clone(&stop));
    let mut watcher = Watcher::new(cfg, opts);
    watcher.cycle(&mut fake);
    let removed: Vec<&PathBuf> = fake
        .seen
        .iter()
        .filter_map(|s| match s {
            Seen::Removed(_, p) => Some(p),
            _ => None,
        })
        .collect();
    // After a stop no new removal starts; the ones under way on the
    // reap's other workers (at most one each) finish. So at least the one
    // that raised the stop was removed, each one told removed is gone,
    // each other one is told as stopped and stays under its name.
    assert!(!removed.is_empty(), "{:?}", fake.seen);
    for p in &removed {
        assert!(!p.exists(), "told after it was removed: {}", p.display());
    }
    let left: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| exists(dir.path(), n))
        .collect();
    assert_eq!(
        left.len() + removed.len(),
        names.len(),
        "the others stay, under their names"
    );
    let stopped: Vec<&PathBuf> = fake
        .seen
        .iter()
        .filter_map(|s| match s {
            Seen::Stopped(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(
        stopped.len(),
        left.len(),
        "each one not removed is told as stopped"
    );
    for p in &stopped {
        assert!(p.exists(), "a stopped one stays: {}", p.display());
    }
    assert!(
        fake.cycles().is_empty(),
        "a stopped cycle does not count as done"
    );
    // And the loop itself ends at once.
    watcher.run(&mut fake);
    assert_eq!(fake.waits, 0);
}

#[test]
fn a_stop_during_the_scan_ends_it_before_any_removal() {
    let dir = Sandbox::new().unwrap();
    make(dir.path(), &["app-1"]);
    let stop = Arc::new(AtomicBool::new(true));
    let mut scanner = sandkeeper_engine::scan::Scanner::new();
    scanner.stop_flag(Arc::clone(&stop));
    let err = scanner.scan(&[dir.path()]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stopped, "{err}");

    let mut b = sandkeeper_engine::reap::Policy::builder();
    b.matching("app-*").grace(Duration::ZERO).stop_flag(stop);
    let reaper = sandkeeper_engine::reap::Reaper::new(b.build().unwrap());
    let err = reaper.reap(&[dir.path()]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stopped, "{err}");
    assert!(exists(dir.path(), "app-1"));
}

#[test]
fn pressure_reaps_start_at_a_poll_and_back_off_while_nothing_helps() {
    run_in_pid_namespace(
        "pressure_reaps_start_at_a_poll_and_back_off_while_nothing_helps",
        "inner_pressure_reaps_start_at_a_poll_and_back_off_while_nothing_helps",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_pressure_reaps_start_at_a_poll_and_back_off_while_nothing_helps() {
    if !in_namespace() {
        return;
    }
    let dir = Sandbox::new().unwrap();
    make(dir.path(), &["old-1", "old-2"]);
    // Always above the high watermark: no filesystem has this much free.
    let cfg = config(
        dir.path(),
        "high_watermark = \"4000PiB free\"\nlow_watermark = \"8000PiB free\"\n\
         [[root.rule]]\nmatch = \"old-*\"\nolder_than = \"1h\"\n",
    );
    let mut fake = Fake::new(vec![(70, Wake::Stop)]);
    Watcher::new(cfg, WatchOptions::new()).run(&mut fake);
    let pressure: Vec<u64> = fake
        .seen
        .iter()
        .filter_map(|s| match s {
            Seen::Pressure(t) => Some(*t),
            _ => None,
        })
        .collect();
    // The cycle at 0 reaps under pressure (older_than relaxed: both go),
    // backs off 5s; polls at 5 (backoff over) and 10 reap again... each
    // time twice as long: retries at 5, 15, 35; the cycle at 60 reaps anyway.
    assert_eq!(pressure, [0, 5, 15, 35, 60], "{:?}", fake.seen);
    let retries: Vec<Duration> = fake
        .seen
        .iter()
        .filter_map(|s| match s {
            Seen::PressureEnd(_, PressureEnd::StillAbove { retry_in }) => Some(*retry_in),
            _ => None,
        })
        .collect();
    assert_eq!(
        retries,
        [5, 10, 20, 40, 60].map(Duration::from_secs),
        "doubling from the poll, capped at the interval"
    );
    assert!(!exists(dir.path(), "old-1") && !exists(dir.path(), "old-2"));
    assert!(fake.seen.contains(&Seen::Reaped(5, Mode::PressureOnly)));
}

#[test]
fn a_reload_takes_a_new_config_and_a_bad_one_keeps_the_old() {
    run_in_pid_namespace(
        "a_reload_takes_a_new_config_and_a_bad_one_keeps_the_old",
        "inner_a_reload_takes_a_new_config_and_a_bad_one_keeps_the_old",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_a_reload_takes_a_new_config_and_a_bad_one_keeps_the_old() {
    if !in_namespace() {
        return;
    }
    let dir = Sandbox::new().unwrap();
    let etc = Sandbox::new().unwrap();
    let file = etc.path().join("config.toml");
    let text = |rule: &str| {
        format!(
            "interval = \"60s\"\n[[root]]\npath = \"{}\"\ngrace = \"0s\"\n{rule}",
            dir.path().display()
        )
    };
    fs::write(&file, text("")).unwrap();
    make(dir.path(), &["app-1", "tmp-1"]);
    let cfg = config::load(&file).unwrap();
    let mut opts = WatchOptions::new();
    opts.config_path = Some(file.clone());
    opts.metrics = true;
    let mut fake = Fake::new(vec![
        (10, Wake::Reload),
        (20, Wake::Reload),
        (70, Wake::Stop),
    ]);
    let writer = file.clone();
    let good = text("[[root.rule]]\nmatch = \"app-*\"\n");
    fake.before_wake = Box::new(move |at, _| match at {
        10 => fs::write(&writer, &good).unwrap(),
        20 => fs::write(&writer, "interval = \"never\"\n").unwrap(),
        _ => {}
    });
    let mut watcher = Watcher::new(cfg, opts);
    watcher.run(&mut fake);
    assert!(fake.seen.contains(&Seen::Reloaded(10)), "{:?}", fake.seen);
    assert!(
        fake.seen.contains(&Seen::ReloadFailed(20)),
        "{:?}",
        fake.seen
    );
    // The interval counts from the last cycle: the next one at 60, under
    // the reloaded rule (the bad file did not replace it).
    assert_eq!(fake.cycles(), [0, 60]);
    assert!(!exists(dir.path(), "app-1"), "the new rule took it");
    assert!(exists(dir.path(), "tmp-1"), "no rule selects it");
    assert_eq!(watcher.config().roots[0].rules[0].glob, "app-*");
    let ok = watcher
        .metrics()
        .families()
        .into_iter()
        .find(|f| f.name == "sandkeeper_config_last_reload_successful")
        .unwrap();
    assert_eq!(
        ok.samples[0].value,
        sandkeeper_engine::metrics::MetricValue::Count(0),
        "the last reload failed"
    );
}

#[test]
fn metrics_count_removals_without_a_record_per_entry() {
    run_in_pid_namespace(
        "metrics_count_removals_without_a_record_per_entry",
        "inner_metrics_count_removals_without_a_record_per_entry",
    );
}

/// Issue 25, item 8: `watch` keeps no record per removal (a million
/// removals were a million records, and `watch --once` of a million
/// entries held 283 MiB); its metrics and summaries count from the reaps'
/// sums.
#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_metrics_count_removals_without_a_record_per_entry() {
    if !in_namespace() {
        return;
    }
    let dir = Sandbox::new().unwrap();
    make(dir.path(), &["app-1", "app-2", "app-3", "tmp-1"]);
    let cfg = config(dir.path(), "[[root.rule]]\nmatch = \"app-*\"\n");
    let mut opts = WatchOptions::new();
    opts.metrics = true;
    opts.reap.records = false;
    let mut fake = Fake::new(vec![]);
    let mut watcher = Watcher::new(cfg, opts);
    watcher.cycle(&mut fake);
    assert!(!exists(dir.path(), "app-1") && exists(dir.path(), "tmp-1"));
    let removed = fake
        .seen
        .iter()
        .filter(|s| matches!(s, Seen::Removed(..)))
        .count();
    assert_eq!(removed, 3, "each removal is still told: {:?}", fake.seen);
    let families = watcher.metrics().families();
    let reaped = families
        .iter()
        .find(|f| f.name == "sandkeeper_reaped_entries_total")
        .unwrap();
    let matched: Vec<_> = reaped
        .samples
        .iter()
        .filter(|s| s.labels.iter().any(|(k, v)| *k == "rule" && v == "app-*"))
        .collect();
    assert_eq!(matched.len(), 1, "{reaped:?}");
    assert_eq!(
        matched[0].value,
        sandkeeper_engine::metrics::MetricValue::Count(3),
        "{reaped:?}"
    );
    assert!(
        matched[0]
            .labels
            .iter()
            .any(|(k, v)| *k == "reason" && v == "matched"),
        "{reaped:?}"
    );
}

/// The example `mini_watch`, built by `cargo test` beside this binary.
fn mini_watch() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("examples").join("mini_watch")
}

#[test]
fn a_second_front_end_drives_the_engine_without_the_cli() {
    run_in_pid_namespace(
        "a_second_front_end_drives_the_engine_without_the_cli",
        "inner_a_second_front_end_drives_the_engine_without_the_cli",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_a_second_front_end_drives_the_engine_without_the_cli() {
    if !in_namespace() {
        return;
    }
    let dir = Sandbox::new().unwrap();
    let etc = Sandbox::new().unwrap();
    make(dir.path(), &["app-1", "app-2", "keep-1"]);
    let file = etc.path().join("config.toml");
    fs::write(
        &file,
        format!(
            "[[root]]\npath = \"{}\"\ngrace = \"0s\"\n[[root.rule]]\nmatch = \"app-*\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(mini_watch())
        .arg(&file)
        .arg("--once")
        .output()
        .expect("run the example mini_watch: `cargo test` builds it, `cargo test --test watch` alone does not (run `cargo build --example mini_watch` first)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut removed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("removed "))
        .collect();
    removed.sort();
    let want = |n: &str| format!("{} (matches \"app-*\")", dir.path().join(n).display());
    assert_eq!(removed, [want("app-1"), want("app-2")], "{stdout}");
    assert!(stdout.contains("cycle done"), "{stdout}");
    assert!(exists(dir.path(), "keep-1"));

    // A bad file: exit 2, with the file and line.
    fs::write(&file, "[[root]]\npath = \"relative\"\n").unwrap();
    let out = std::process::Command::new(mini_watch())
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("config.toml:2:"), "{stderr}");
}
