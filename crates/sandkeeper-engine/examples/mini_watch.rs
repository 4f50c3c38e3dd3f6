//! A second, minimal front end for sandkeeper's engine: proof that the
//! `sandkeeper` command is not needed to run it. It loads a config file,
//! runs the watch loop's cycles with the real clock (one cycle with
//! `--once`), and prints one line per event as it happens.
//!
//! ```text
//! cargo run --example mini_watch -- /etc/sandkeeper/config.toml --once
//! ```
//!
//! Exit status: 0 when done, 1 when something could not be removed, 2 for
//! a bad command line or config file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use sandkeeper_engine::reap::ReapEvent;
use sandkeeper_engine::watch::{Driver, Wake, WatchEvent, WatchOptions, Watcher};

/// The real clock; no signals (Ctrl-C kills it, which the engine survives:
/// the next run finishes what a killed reap left).
struct Print;

impl Driver for Print {
    fn now(&mut self) -> Instant {
        Instant::now()
    }

    fn wait(&mut self, until: Instant) -> Wake {
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        Wake::Timeout
    }

    fn event(&mut self, event: WatchEvent<'_>) {
        match event {
            WatchEvent::Reap {
                event: ReapEvent::Removed(r),
                ..
            } => println!("removed {} ({})", r.path.display(), r.reason),
            WatchEvent::Reap {
                event: ReapEvent::Failed(e),
                ..
            } => println!("failed {}: {}", e.path.display(), e.error),
            WatchEvent::PressureStarted { root, .. } => {
                println!("pressure {}", root.display())
            }
            WatchEvent::CycleFinished { took, errors } => {
                println!("cycle done in {took:?}, {errors} error(s)")
            }
            _ => {}
        }
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(file) = args.next().map(PathBuf::from) else {
        eprintln!("usage: mini_watch CONFIG.toml [--once]");
        return ExitCode::from(2);
    };
    let once = args.next().is_some_and(|a| a == "--once");
    let config = match sandkeeper_engine::config::load(&file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mini_watch: {e}");
            return ExitCode::from(2);
        }
    };
    let mut opts = WatchOptions::new();
    opts.config_path = Some(file);
    let mut watcher = Watcher::new(config, opts);
    if once {
        return match watcher.cycle(&mut Print) {
            0 => ExitCode::SUCCESS,
            _ => ExitCode::from(1),
        };
    }
    watcher.run(&mut Print);
    ExitCode::SUCCESS
}
