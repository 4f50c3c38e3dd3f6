//! Termination signals that tear down: SIGTERM (how a CI runner cancels a
//! job), SIGINT and SIGHUP kill a process without running a destructor,
//! so a launcher's VM would run on and its run directory stay. After
//! [`teardown_on_signals`] they finish the open sandboxes first.
//!
//! A signal handler may do almost nothing (no lock, no allocation), so the
//! handler only writes the signal's number into a pipe; a thread waiting
//! on the pipe does the teardown, then ends the process by the same
//! signal with its default action restored.

use crate::error::Result;

/// Makes SIGTERM, SIGINT and SIGHUP tear the open sandboxes down, then end
/// the process with the conventional status.
///
/// Without it, these signals kill a Rust program at once: no destructor
/// runs, a [`Sandbox::spawn`](crate::Sandbox::spawn)ed VM is killed by the
/// kernel only because its launcher died, and the run directory waits for
/// the next reap. After this call, such a signal makes a thread of this
/// crate finish every sandbox of the process, the newest first, each as a
/// drop would (its teardown stack last registered first: the VM stopped,
/// then unmounted, then the directory removed; `SANDKEEPER_KEEP=always`
/// keeps it); it waits up to 30 s for finishes other threads had begun,
/// then ends the process by the same signal, its default action restored,
/// so the parent sees what it sent (a shell's `$?` is 128 + the signal:
/// 143 for SIGTERM).
///
/// It composes with the program's own handlers: one installed before is
/// called first, as before (and if it ends the process, that is what
/// happens); one registered later through `signal-hook-registry` (tokio's
/// are) runs too, while one installed later by a plain `sigaction` (the
/// `ctrlc` crate's) replaces this one. A signal the program
/// ignores (`SIG_IGN`, such as SIGHUP under `nohup`) stays ignored. It is
/// safe with threads: the handler only writes to a pipe, and the teardown
/// runs in its own thread, taking the same locks a drop takes; the other
/// threads run on meanwhile, so one still writing into a sandbox can make
/// its removal leave something, which stays a managed orphan for the next
/// reap. Signals that arrive during the teardown do not interrupt it
/// (SIGKILL does). Calling it again does nothing more.
///
/// ```no_run
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     sandkeeper::teardown_on_signals()?; // first, before any sandbox
///     let run = sandkeeper::Sandbox::builder().tag("vm").create()?;
///     run.spawn(std::process::Command::new("sleep").arg("600"))?;
///     // SIGTERM now: `sleep` stopped, the directory removed, exit 143.
///     std::thread::sleep(std::time::Duration::from_secs(600));
///     Ok(())
/// }
/// ```
///
/// # Errors
///
/// When the pipe or the thread cannot be made, or a handler cannot be
/// installed ([`ErrorKind::Io`](crate::ErrorKind::Io)); on Windows, which
/// has none of these signals, [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
pub fn teardown_on_signals() -> Result<()> {
    imp::install()
}

#[cfg(unix)]
mod imp {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use rustix::fd::OwnedFd;
    use rustix::io::Errno;

    use crate::error::{Error, Result};
    use crate::sys;

    /// How long the teardown waits for finishes that other threads began.
    const PATIENCE: Duration = Duration::from_secs(30);

    static INSTALLED: Mutex<bool> = Mutex::new(false);

    pub(super) fn install() -> Result<()> {
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if *installed {
            return Ok(());
        }
        let (reader, writer) =
            sys::cloexec_pipe().map_err(|e| Error::io("cannot make the signal pipe", e))?;
        std::thread::Builder::new()
            .name("sandkeeper-signals".into())
            .spawn(move || tear_down_on_signal(reader))
            .map_err(|e| Error::io("cannot start the signal thread", e))?;
        let writer = Arc::new(writer);
        let installer = rustix::process::getpid();
        for signal in sys::TEARDOWN_SIGNALS {
            if sys::signal_is_ignored(signal) {
                continue;
            }
            let writer = Arc::clone(&writer);
            // In the signal handler: a getpid and a write, both system
            // calls, nothing allocated or locked. (A child between fork
            // and exec still has this handler: it must not write into
            // its parent's pipe.)
            sys::on_signal(signal, move || {
                if rustix::process::getpid() == installer {
                    let _ = rustix::io::write(&*writer, &[signal as u8]);
                }
            })
            .map_err(|e| Error::io(format!("cannot handle signal {signal}"), e))?;
        }
        *installed = true;
        Ok(())
    }

    /// The signal thread: waits for the first signal, finishes every
    /// sandbox, and ends the process by that signal.
    fn tear_down_on_signal(reader: OwnedFd) {
        let mut byte = [0u8];
        loop {
            match rustix::io::read(&reader, &mut byte) {
                Ok(1) => break,
                Err(Errno::INTR) => continue,
                // (The write end lives as long as the process.)
                _ => return,
            }
        }
        super::super::open::finish_all_newest_first(PATIENCE);
        sys::die_by_signal(i32::from(byte[0]));
    }
}

#[cfg(windows)]
mod imp {
    use crate::error::{Error, ErrorKind, Result};

    pub(super) fn install() -> Result<()> {
        Err(Error::new(
            ErrorKind::Unsupported,
            "Windows has no SIGTERM, SIGINT or SIGHUP to tear down on; a launcher there \
             finishes its sandboxes itself (drop or close) when it is asked to stop",
        ))
    }
}
