//! Running a command so that nothing it starts outlives it: the process
//! side of `sandkeeper run`.
//!
//! The calling process becomes a *child subreaper*
//! (`prctl(PR_SET_CHILD_SUBREAPER)`) and starts the command in its own
//! process group. Descendants that daemonize (double fork, `setsid`) are
//! reparented to the caller instead of init, so when the command is done,
//! [`Supervised::stop_descendants`] can find every one of them: SIGTERM,
//! a grace period, SIGKILL, and each is reaped. Only then should the
//! scratch directory go (children before their directory).
//!
//! ```
//! use std::process::Command;
//! use std::time::Duration;
//! use sandkeeper_engine::supervise::{self, Exit};
//!
//! let mut cmd = Command::new("sh");
//! cmd.args(["-c", "sleep 600 & exit 3"]); // leaves a grandchild behind
//! let mut run = supervise::spawn(&mut cmd)?;
//! assert_eq!(run.wait()?, Exit::Code(3));
//! let stopped = run.stop_descendants(Duration::from_secs(5));
//! assert_eq!(stopped.signalled, 1); // the stray `sleep`
//! # Ok::<(), sandkeeper_engine::Error>(())
//! ```
//!
//! # Platform behavior
//!
//! Linux only (subreapers and `/proc`). The caller's other children are
//! reaped too: use it in a process that supervises one command.

use std::collections::HashSet;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, WaitOptions, WaitStatus};

use crate::error::{Error, ErrorKind, Result};

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
}

impl Exit {
    /// The status a shell would report: the code, or 128 + the signal.
    pub fn shell_status(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

/// What [`Supervised::stop_descendants`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stopped {
    /// Descendants that were still running and were signalled.
    pub signalled: usize,
    /// How many of them needed SIGKILL after the grace period.
    pub killed: usize,
    /// Descendants that could not be reaped even after SIGKILL (stuck in
    /// the kernel); they are left, and the directory with them.
    pub survivors: usize,
}

/// A command started by [`spawn`].
#[derive(Debug)]
pub struct Supervised {
    pid: Pid,
    exit: Option<Exit>,
    reaped: Arc<Mutex<bool>>,
    interrupted: Arc<AtomicBool>,
}

/// Sends signals to a supervised command from another thread (a signal
/// forwarder). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Signaller {
    pid: Pid,
    reaped: Arc<Mutex<bool>>,
    /// Whether a SIGINT was forwarded already (shared by the clones).
    interrupted: Arc<AtomicBool>,
}

impl Signaller {
    /// Sends `signal` to the command's process group, as long as the
    /// command has not been reaped (after that its process group id may be
    /// reused by unrelated processes).
    pub fn signal(&self, signal: Signal) {
        let reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*reaped {
            let _ = rustix::process::kill_process_group(self.pid, signal);
            let _ = rustix::process::kill_process(self.pid, signal);
        }
    }

    /// Forwards a signal the caller received, as `sandkeeper run` does
    /// with SIGINT, SIGTERM, SIGHUP and SIGQUIT: [`signal`](Self::signal)s
    /// it on, except that a second SIGINT (counted across the clones of
    /// this signaller) is sent as SIGKILL, so a command that ignores
    /// Ctrl-C still ends on the second one.
    ///
    /// ```
    /// use std::process::Command;
    /// use rustix::process::Signal;
    /// use sandkeeper_engine::supervise::{self, Exit};
    ///
    /// # let dir = sandkeeper_engine::Sandbox::new()?;
    /// # let ready = dir.path().join("ready");
    /// let mut cmd = Command::new("sh");
    /// cmd.args(["-c", r#"trap '' INT; touch "$0"; exec sleep 600"#]);
    /// # cmd.arg(&ready);
    /// let mut run = supervise::spawn(&mut cmd)?;
    /// # while !ready.exists() { std::thread::sleep(std::time::Duration::from_millis(10)); }
    /// let signaller = run.signaller();
    /// signaller.forward(Signal::INT); // ignored by the command
    /// signaller.forward(Signal::INT); // sent as SIGKILL
    /// assert_eq!(run.wait()?, Exit::Signal(9));
    /// # Ok::<(), sandkeeper_engine::Error>(())
    /// ```
    pub fn forward(&self, signal: Signal) {
        let again = signal == Signal::INT && self.interrupted.swap(true, Ordering::Relaxed);
        self.signal(if again { Signal::KILL } else { signal });
    }
}

/// Starts `command` in its own process group, with the calling process as
/// its subreaper.
///
/// # Errors
///
/// When the command cannot be started: the error's io kind is `NotFound`
/// when the program does not exist, `PermissionDenied` when it cannot be
/// executed; or when `prctl` fails.
pub fn spawn(command: &mut Command) -> Result<Supervised> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| Error::io("cannot become a child subreaper", e.into()))?;
    let child = command.process_group(0).spawn().map_err(|e| {
        Error::io(
            format!("cannot run {}", command.get_program().to_string_lossy()),
            e,
        )
    })?;
    let pid = Pid::from_child(&child);
    // The child is waited for with waitpid below, not through `child`.
    drop(child);
    Ok(Supervised {
        pid,
        exit: None,
        reaped: Arc::new(Mutex::new(false)),
        interrupted: Arc::new(AtomicBool::new(false)),
    })
}

impl Supervised {
    /// The command's pid (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid.as_raw_nonzero().get() as u32
    }

    /// A handle to signal the command from another thread.
    pub fn signaller(&self) -> Signaller {
        Signaller {
            pid: self.pid,
            reaped: Arc::clone(&self.reaped),
            interrupted: Arc::clone(&self.interrupted),
        }
    }

    /// Waits for the command to exit, then reaps it.
    ///
    /// # Errors
    ///
    /// When `waitid` fails for another reason than an interruption.
    pub fn wait(&mut self) -> Result<Exit> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        // Wait without reaping, so the process group id stays ours while
        // the signaller may still use it; then mark it reaped and reap.
        loop {
            match rustix::process::waitid(
                WaitId::Pid(self.pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
            ) {
                Ok(Some(_)) => break,
                Ok(None) | Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("cannot wait for the command", e.into())),
            }
        }
        let mut reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        let status = loop {
            match rustix::process::waitpid(Some(self.pid), WaitOptions::empty()) {
                Ok(Some((_, status))) => break status,
                Ok(None) | Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("cannot reap the command", e.into())),
            }
        };
        *reaped = true;
        let exit = exit_of(status).unwrap_or(Exit::Code(0));
        self.exit = Some(exit);
        Ok(exit)
    }

    /// Stops every descendant still running: SIGTERM to the process group
    /// and to every child of this process, up to `grace` for them to exit,
    /// then SIGKILL; each is reaped. Descendants reparented to this process
    /// while their parents die are found and stopped too.
    pub fn stop_descendants(&self, grace: Duration) -> Stopped {
        let (mut termed, mut killed) = (HashSet::new(), HashSet::new());
        let deadline = Instant::now() + grace;
        // SIGKILL cannot be ignored; only a process stuck in the kernel
        // outlives this.
        let kill_deadline = deadline + Duration::from_secs(10);
        let mut survivors = 0;
        loop {
            reap_exited();
            let children = children_of_self();
            if children.is_empty() {
                break;
            }
            let now = Instant::now();
            let running: Vec<Pid> = children.into_iter().filter(|p| !is_zombie(*p)).collect();
            if now >= kill_deadline {
                survivors = running.len();
                break;
            }
            for pid in running {
                // Our unreaped child: its pid cannot have been reused.
                if now < deadline {
                    if termed.insert(pid) {
                        let _ = rustix::process::kill_process(pid, Signal::TERM);
                    }
                } else if killed.insert(pid) {
                    let _ = rustix::process::kill_process(pid, Signal::KILL);
                }
            }
            sleep(Duration::from_millis(10));
        }
        Stopped {
            signalled: termed.union(&killed).count(),
            killed: killed.len(),
            survivors,
        }
    }
}

/// The terminal handed to a supervised command (see
/// [`Supervised::hand_terminal`]); [`restore`](Terminal::restore) takes it
/// back.
#[derive(Debug)]
pub struct Terminal {
    ours: Pid,
}

impl Supervised {
    /// When standard input is a terminal whose foreground process group is
    /// ours, makes the command's group the foreground one, so it can read
    /// the terminal and gets Ctrl-C directly (a command in a background
    /// group that reads the terminal would be stopped). Returns `None` when
    /// there is no such terminal.
    pub fn hand_terminal(&self) -> Option<Terminal> {
        let stdin = std::io::stdin();
        if !std::io::IsTerminal::is_terminal(&stdin) {
            return None;
        }
        let ours = rustix::process::getpgrp();
        if rustix::termios::tcgetpgrp(&stdin).ok()? != ours {
            return None;
        }
        rustix::termios::tcsetpgrp(&stdin, self.pid).ok()?;
        // It may have tried the terminal before it was its own, and been
        // stopped for it.
        let _ = rustix::process::kill_process_group(self.pid, Signal::CONT);
        Some(Terminal { ours })
    }
}

impl Terminal {
    /// Makes this process's group the terminal's foreground group again.
    pub fn restore(self) {
        let stdin = std::io::stdin();
        crate::sys::with_sigttou_ignored(|| {
            let _ = rustix::termios::tcsetpgrp(&stdin, self.ours);
        });
    }
}

fn exit_of(status: WaitStatus) -> Option<Exit> {
    if let Some(code) = status.exit_status() {
        Some(Exit::Code(code))
    } else {
        status.terminating_signal().map(Exit::Signal)
    }
}

/// Reaps every child that has exited, without blocking.
fn reap_exited() {
    while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
}

/// The pids whose parent is this process, from `/proc/*/stat`.
fn children_of_self() -> Vec<Pid> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
        (parent_of(&stat)? == me)
            .then(|| Pid::from_raw(pid))
            .flatten()
    })
    .collect()
}

fn is_zombie(pid: Pid) -> bool {
    std::fs::read(format!("/proc/{}/stat", pid.as_raw_nonzero()))
        .ok()
        .and_then(|s| state_of(&s))
        .is_none_or(|state| state == b'Z')
}

/// Field 4 (`ppid`) of a `/proc/PID/stat` line.
fn parent_of(stat: &[u8]) -> Option<i32> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Field 3 (`state`) of a `/proc/PID/stat` line.
fn state_of(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// The error for an unusable command, for callers that map it to the
/// shell's 126/127.
pub fn is_not_found(err: &Error) -> bool {
    err.kind() == ErrorKind::Io
        && err
            .io_error()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Gives the calling process a private mount namespace with a fresh tmpfs
/// mounted over `dir`, so the processes it then starts see an empty,
/// size-capped `dir` that the kernel frees when the last of them exits —
/// even if every one is SIGKILLed — and that can never fill the
/// filesystem `dir` lives on.
///
/// `size` is a tmpfs size (`10M`, `50%`: of RAM). As root this needs only
/// a new mount namespace; otherwise an unprivileged user namespace is
/// tried, mapping the caller's uid and gid.
///
/// Call it before starting any thread: a new namespace only applies to the
/// calling thread and what it starts.
///
/// # Errors
///
/// [`ErrorKind::Unsupported`] when the kernel refuses the namespace or the
/// mount (no privileges and unprivileged user namespaces disabled), naming
/// why; isolation is never silently skipped.
#[cfg(target_os = "linux")]
pub fn isolate_tmpfs(dir: &std::path::Path, size: &str) -> Result<()> {
    use rustix::mount::{mount, mount_change, MountFlags, MountPropagationFlags};
    let unsupported = |what: &str, e: std::io::Error| {
        Error::new(ErrorKind::Unsupported, format!("cannot isolate: {what}"))
            .at(dir)
            .with_source(e)
            .with_hint("run as root, or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)")
    };
    let root = rustix::process::geteuid().is_root();
    let (uid, gid) = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    crate::sys::unshare_mounts(!root).map_err(|e| unsupported("no new mount namespace", e))?;
    if !root {
        let maps = [
            ("/proc/self/setgroups", "deny".to_owned()),
            ("/proc/self/uid_map", format!("{uid} {uid} 1")),
            ("/proc/self/gid_map", format!("{gid} {gid} 1")),
        ];
        for (file, text) in maps {
            std::fs::write(file, text)
                .map_err(|e| unsupported("cannot map ids in the user namespace", e))?;
        }
    }
    // Nothing mounted from here on may reach the host's namespace.
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| unsupported("cannot make mounts private", e.into()))?;
    let options = std::ffi::CString::new(format!("size={size},mode=0700")).map_err(|_| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("tmpfs size {size:?} contains a NUL byte"),
        )
    })?;
    mount(
        "sandkeeper-run",
        dir,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(options.as_c_str()),
    )
    .map_err(|e| unsupported("cannot mount a tmpfs", e.into()))?;
    Ok(())
}

/// Unmounts what [`isolate_tmpfs`] mounted (lazily, should something
/// still use it).
///
/// # Errors
///
/// When `umount2` fails.
#[cfg(target_os = "linux")]
pub fn release_tmpfs(dir: &std::path::Path) -> Result<()> {
    rustix::mount::unmount(dir, rustix::mount::UnmountFlags::DETACH)
        .map_err(|e| Error::io("cannot unmount the run's tmpfs", e.into()).at(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields() {
        let cases: [(&[u8], Option<i32>, Option<u8>); 3] = [
            (b"42 (sleep) S 17 42 42 0", Some(17), Some(b'S')),
            (b"43 (a) b) Z 1 1 1", Some(1), Some(b'Z')),
            (b"garbage", None, None),
        ];
        for (line, ppid, state) in cases {
            assert_eq!(parent_of(line), ppid);
            assert_eq!(state_of(line), state);
        }
    }

    #[test]
    fn shell_statuses() {
        assert_eq!(Exit::Code(3).shell_status(), 3);
        assert_eq!(Exit::Signal(11).shell_status(), 139);
        assert!(Exit::Code(0).success() && !Exit::Signal(9).success());
    }
}
