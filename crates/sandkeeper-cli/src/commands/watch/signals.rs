//! Signals for `watch`: SIGTERM and SIGINT raise the stop flag (the
//! reaper checks it before each removal, so the removal under way
//! finishes); SIGHUP asks for a reload. A second SIGTERM or SIGINT ends
//! the process at once. Every signal also wakes the main loop, which
//! sleeps on a socket the handlers write to (a self-pipe).

use std::io::{self, Read as _};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::{flag, low_level};

/// The installed handlers' flags and the loop's wake-up socket.
#[derive(Debug)]
pub struct Signals {
    stop: Arc<AtomicBool>,
    interrupted: Arc<AtomicBool>,
    hangup: Arc<AtomicBool>,
    wake: UnixStream,
}

impl Signals {
    /// Installs the handlers (for the rest of the process).
    ///
    /// # Errors
    ///
    /// When a handler cannot be installed or the socket pair not made.
    pub fn install() -> io::Result<Signals> {
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
