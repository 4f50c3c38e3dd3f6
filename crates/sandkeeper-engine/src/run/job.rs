//! Job control: a run in a terminal behaves as one job of the shell that
//! started it.
//!
//! The command runs in a process group of its own, which holds the
//! terminal while it runs in the foreground, so Ctrl-Z stops the
//! *command's* group, not the caller's, and the caller's shell cannot see
//! it. So the caller does what a shell does for its own jobs (`bash`'s
//! and `zsh`'s `jobs.c`): it waits for stops too (`WSTOPPED`), and when
//! the command stops it takes the terminal back and stops its own process
//! group with the same signal, so the shell above sees its job stopped
//! and prints its prompt. When continued (`fg`, `bg`, any SIGCONT), it
//! gives the terminal to the command again if the caller's group is the
//! foreground one now (`fg`), and continues the command's group.
//!
//! `fg` of a job that runs in the background sends it no signal (neither
//! bash nor zsh does), so nothing tells the caller; the command learns it
//! when it next reads the terminal: it stops with SIGTTIN, and the caller,
//! in the foreground now, hands it the terminal instead of stopping.

use std::io::IsTerminal;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use crate::error::{Error, Result};

/// A run's command as a job of the terminal on standard input.
#[derive(Debug)]
pub(crate) struct Job {
    /// The caller's process group: the shell's job.
    ours: Pid,
    /// The command's process group (its pid).
    theirs: Pid,
    /// Whether the command's group is the terminal's foreground group,
    /// given it by us; then the terminal is taken back when it stops or
    /// ends. Not after `bg`: the terminal is the shell's then.
    holds: bool,
}

impl Job {
    /// When standard input is a terminal whose foreground process group is
    /// the caller's, makes `theirs` the foreground group, continues it (it
    /// may have tried the terminal before and been stopped for it), and
    /// returns the job; `None` when there is no such terminal (a pipe, a
    /// file, or a caller in the background): the run is then no job and
    /// its command's stops are not watched.
    pub(crate) fn hand(theirs: Pid) -> Option<Job> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let ours = rustix::process::getpgrp();
        if rustix::termios::tcgetpgrp(&stdin).ok()? != ours {
            return None;
        }
        rustix::termios::tcsetpgrp(&stdin, theirs).ok()?;
        // No SIGCONT here: it would also cancel a Ctrl-Z typed the moment
        // the terminal was theirs (SIGCONT discards a stop not yet waited
        // for), and the job would never stop. A stop from before the
        // hand-over (the command touched the terminal while it was still
        // the background) is a SIGTTIN or SIGTTOU seen while the command
        // holds the terminal: `stopped` continues it.
        Some(Job {
            ours,
            theirs,
            holds: true,
        })
    }

    /// Waits until the command has exited, without reaping it (its
    /// process group id stays ours), acting on each stop meanwhile.
    ///
    /// # Errors
    ///
    /// When `waitid` fails for another reason than an interruption.
    pub(crate) fn wait_exited(&mut self) -> Result<()> {
        let pid = self.theirs;
        loop {
            match rustix::process::waitid(
                WaitId::Pid(pid),
                WaitIdOptions::EXITED | WaitIdOptions::STOPPED | WaitIdOptions::NOWAIT,
            ) {
                Ok(Some(status)) if status.stopped() => {
                    // Consume the stop report (only that: no EXITED), or
                    // the next wait would see it again.
                    let _ = rustix::process::waitid(
                        WaitId::Pid(pid),
                        WaitIdOptions::STOPPED | WaitIdOptions::NOHANG,
                    );
                    let signal = status
                        .stopping_signal()
                        .and_then(Signal::from_named_raw)
                        .unwrap_or(Signal::STOP);
                    self.stopped(signal);
                }
                Ok(Some(_)) => return Ok(()),
                Ok(None) | Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("cannot wait for the command", e.into())),
            }
        }
    }

    /// The command's group stopped with `signal`.
    fn stopped(&mut self, signal: Signal) {
        let stdin = std::io::stdin();
        let foreground = rustix::termios::tcgetpgrp(&stdin).ok() == Some(self.ours);
        if matches!(signal, Signal::TTIN | Signal::TTOU) && (self.holds || foreground) {
            // It wants the terminal, and may have it: it holds it by our
            // hand (the stop came before the hand-over: a foreground group
            // is never stopped for the terminal), or we were brought to the
            // foreground (`fg`) while it ran in the background. It goes on,
            // as a shell's foreground job would.
            self.resume();
            return;
        }
        self.take_back();
        // Stop as the command did, so the shell above sees its job stopped
        // (and says why: "Stopped", "Stopped (tty input)"). The whole group:
        // a pipeline (`sandkeeper run -- vim | tee log`) is one job, and a
        // shell counts a job as stopped only when none of it runs. In an
        // orphaned process group the kernel discards SIGTSTP, SIGTTIN and
        // SIGTTOU (nobody could continue it): then the command is
        // continued at once, as if it had not stopped.
        let _ = rustix::process::kill_current_process_group(signal);
        // Make sure the stop took this thread before going on, even if
        // another thread of the process took the signal.
        crate::sys::sigmask::settle();
        // Continued: `fg` (the terminal is ours again) or `bg`.
        self.resume();
    }

    /// Gives the terminal to the command if the caller's group is the
    /// foreground one (`fg`), and continues the command's group.
    fn resume(&mut self) {
        let stdin = std::io::stdin();
        if rustix::termios::tcgetpgrp(&stdin).ok() == Some(self.ours) {
            self.holds = rustix::termios::tcsetpgrp(&stdin, self.theirs).is_ok();
        }
        // Unreaped: its process group id cannot have been reused.
        let _ = rustix::process::kill_process_group(self.theirs, Signal::CONT);
    }

    /// Makes the caller's group the terminal's foreground group again,
    /// when the command's group holds it by our hand (not after `bg`: the
    /// terminal is the shell's then, and a background process could take
    /// it, with SIGTTOU ignored).
    pub(crate) fn take_back(&mut self) {
        if !self.holds {
            return;
        }
        self.holds = false;
        let stdin = std::io::stdin();
        let ours = self.ours;
        crate::sys::with_sigttou_ignored(|| {
            let _ = rustix::termios::tcsetpgrp(&stdin, ours);
        });
    }
}
