//! The signals of a `watch` daemon, for a front end's [`Driver`](super::Driver): SIGTERM and SIGINT raise the stop flag (the
//! reaper checks it before each removal, so the removal under way
//! finishes); SIGHUP asks for a reload. A second SIGTERM or SIGINT ends
//! the process at once. Every signal also wakes the main loop, which
//! sleeps on a socket the handlers write to (a self-pipe).
//!
//! A stop is bounded even when a system call does not return (a dead FUSE
//! or NFS server: a handled signal does not interrupt such a wait, and a
//! thread stuck in one never runs the handler). The signals are blocked
//! in the main thread and every thread it starts, and taken only by a
//! watchdog thread that does nothing else ([`crate::signals`]); the
//! first SIGTERM or SIGINT wakes it through a socket of its own, and it
//! ends the process [`STOP_LIMIT`] later if it is still running, with
//! status 143 (130 for SIGINT). Ending the process kills
//! every thread, the stuck one included, wherever the kernel lets a fatal
//! signal through (a FUSE request not yet read by its server, an NFS
//! mount with the default `hard` option since Linux 2.6.25).

use std::io::{self, Read as _};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::process::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::{flag, low_level};

/// How long after the first SIGTERM or SIGINT the process ends, whatever
/// it is doing: the bound the README gives for stopping `watch`.
pub const STOP_LIMIT: Duration = Duration::from_secs(5);

/// The installed handlers' flags and the loop's wake-up socket.
///
/// ```no_run
/// use std::time::Duration;
/// use sandkeeper_engine::watch::Signals;
///
/// let signals = Signals::install(|why| eprintln!("{why}"))?;
/// while !signals.stopping() {
///     if signals.take_hangup() {
///         // reload the config
///     }
///     signals.wait(Duration::from_secs(5));
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Signals {
    stop: Arc<AtomicBool>,
    interrupted: Arc<AtomicBool>,
    hangup: Arc<AtomicBool>,
    wake: UnixStream,
}

impl Signals {
    /// Installs the handlers (for the rest of the process), and the
    /// watchdog that ends the process [`STOP_LIMIT`] after the first
    /// SIGTERM or SIGINT, telling `stuck` why first (one line, for the log).
    ///
    /// # Errors
    ///
    /// When a handler cannot be installed, the socket pairs not made or
    /// the watchdog not started.
    pub fn install(stuck: impl FnOnce(&str) + Send + 'static) -> io::Result<Signals> {
        let stop = Arc::new(AtomicBool::new(false));
        let interrupted = Arc::new(AtomicBool::new(false));
        let hangup = Arc::new(AtomicBool::new(false));
        let (wake, waker) = UnixStream::pair()?;
        for (signal, status) in [(SIGTERM, 128 + SIGTERM), (SIGINT, 128 + SIGINT)] {
            // Registered first, so it sees the flag as the previous
            // signal left it: the second signal ends the process.
            flag::register_conditional_shutdown(signal, status, Arc::clone(&stop))?;
            flag::register(signal, Arc::clone(&stop))?;
        }
        flag::register(SIGINT, Arc::clone(&interrupted))?;
        flag::register(SIGHUP, Arc::clone(&hangup))?;
        for signal in [SIGTERM, SIGINT, SIGHUP] {
            low_level::pipe::register(signal, waker.try_clone()?)?;
        }
        let (watchdog, watchdog_waker) = UnixStream::pair()?;
        for signal in [SIGTERM, SIGINT] {
            low_level::pipe::register(signal, watchdog_waker.try_clone()?)?;
        }
        let sigint = Arc::clone(&interrupted);
        // Started before the mask below, so it takes the signals.
        std::thread::Builder::new()
            .name("sandkeeper-stop".into())
            .spawn(move || watchdog_thread(&watchdog, &sigint, stuck))?;
        crate::signals::block_in_this_thread(&[Signal::TERM, Signal::INT, Signal::HUP])?;
        Ok(Signals {
            stop,
            interrupted,
            hangup,
            wake,
        })
    }

    /// The flag the reaper watches.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Whether SIGTERM or SIGINT arrived.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether the stop came from SIGINT.
    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Relaxed)
    }

    /// Whether SIGHUP arrived since the last call.
    pub fn take_hangup(&self) -> bool {
        self.hangup.swap(false, Ordering::Relaxed)
    }

    /// Sleeps until a signal arrives or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        let timeout = timeout.max(Duration::from_millis(1));
        if self.wake.set_read_timeout(Some(timeout)).is_err() {
            std::thread::sleep(timeout);
            return;
        }
        let mut buf = [0u8; 64];
        let _ = (&self.wake).read(&mut buf);
    }
}

/// Waits for the first SIGTERM or SIGINT, then gives the main thread
/// [`STOP_LIMIT`] to finish; ends the process if it has not.
fn watchdog_thread(wake: &UnixStream, interrupted: &AtomicBool, stuck: impl FnOnce(&str)) {
    let mut buf = [0u8; 64];
    loop {
        match (&*wake).read(&mut buf) {
            Ok(n) if n > 0 => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // The handlers' end is never closed while they are installed.
            _ => return,
        }
    }
    std::thread::sleep(STOP_LIMIT);
    let (signal, status) = if interrupted.load(Ordering::Relaxed) {
        ("SIGINT", 128 + SIGINT)
    } else {
        ("SIGTERM", 128 + SIGTERM)
    };
    stuck(&format!(
        "still not stopped {} s after {signal}: a system call does not return \
         (a filesystem that does not answer?); exiting without finishing",
        STOP_LIMIT.as_secs()
    ));
    std::process::exit(status);
}
