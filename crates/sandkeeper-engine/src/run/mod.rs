//! Running a command with a scratch directory of its own as `TMPDIR`, gone
//! afterwards whatever the command did: the engine of `sandkeeper run`.
//!
//! A [`Run`] makes a managed [`Sandbox`] (optionally with a private tmpfs
//! mounted on it, [`Run::isolate`]), starts the command
//! [supervised](crate::supervise) with `TMPDIR`, `TMP`, `TEMP` and
//! `TEMPDIR` pointing there, waits for it, stops every descendant it left
//! (SIGTERM, [`Run::kill_grace`], SIGKILL), measures what it left through a
//! descriptor opened before it ran, and then removes or keeps the
//! directory ([`Run::keep`]). The [`RunOutcome`] says how each step went.
//!
//! ```
//! use sandkeeper_engine::run::{Fate, Run};
//! use sandkeeper_engine::supervise::Exit;
//!
//! # let root = sandkeeper_engine::Sandbox::new()?;
//! let outcome = Run::new("sh")
//!     .args(["-c", r#"echo leak > "$TMPDIR/app-1"; exit 3"#])
//!     .root(root.path())
//!     .execute()?;
//! assert_eq!(outcome.exit, Exit::Code(3));
//! assert_eq!(outcome.leftovers.entries, 1);
//! assert_eq!(outcome.fate, Fate::InPlace);
//! assert!(!outcome.kept && !outcome.dir.exists());
//! # Ok::<(), sandkeeper_engine::Error>(())
//! ```
//!
//! Signals are the caller's: the library installs no handler. A front end
//! that forwards them (as `sandkeeper run` does with SIGINT, SIGTERM,
//! SIGHUP and SIGQUIT) starts the command in two steps, [`Run::prepare`]
//! and [`Prepared::spawn`], and hands what it receives to the
//! [`Signaller`] of the [`Running`] command until [`Running::wait`]
//! returns; [`Signaller::forward`] turns a second SIGINT into SIGKILL.
//!
//! In a terminal, a run is a shell's job ([`Run::hand_terminal`]): the
//! command's group holds the terminal while it runs; when it stops
//! (Ctrl-Z), [`Running::wait`] takes the terminal back and stops the
//! caller's process group, and when the caller is continued (`fg`, `bg`)
//! it continues the command, in the foreground again if the caller is.
//!
//! # Safety & security
//!
//! - The command may do anything to its directory. What it left is listed
//!   and measured through the descriptor taken before it started (with
//!   [`Run::isolate`]: of the tmpfs), never through the name; a command
//!   that replaces its `TMPDIR` by a symlink gets [`Fate::Replaced`], and
//!   the link and its target are neither walked nor removed.
//! - The command inherits the sandbox's locked lease descriptor: the
//!   directory stays `live` for reapers as long as any process of the run
//!   holds it, even if the caller is SIGKILLed.
//!
//! # Platform behavior
//!
//! Linux only (see [`supervise`]). The calling process
//! becomes a child subreaper, and stopping the descendants stops and reaps
//! *every* child of the calling process: run one command at a time, in a
//! process that starts no other children meanwhile.

mod fate;
mod job;
mod leftovers;

use std::ffi::{OsStr, OsString};
use std::marker::PhantomData;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rustix::process::{Pid, Signal};

pub use fate::{Cleanup, Fate, Replacement};
pub use leftovers::{LeftoverFamily, Leftovers};

use crate::error::{Error, ErrorKind, Result};
use crate::supervise::{self, Exit, Signaller, Stopped, Supervised};
use crate::{KeepPolicy, Sandbox};
use job::Job;

/// The variables set to the run's directory: the temp-directory lookups of
/// every common language read one of them.
pub const TMP_VARS: [&str; 4] = ["TMPDIR", "TMP", "TEMP", "TEMPDIR"];

/// A command to run with its own scratch directory: the options of a run.
///
/// Setters return `&mut Run` and can be chained on [`Run::new`]; nothing
/// happens until [`execute`](Run::execute) or [`prepare`](Run::prepare).
/// A `Run` can be executed any number of times, each time in a new
/// directory.
#[derive(Debug, Clone)]
pub struct Run {
    program: OsString,
    args: Vec<OsString>,
    opts: Options,
}

#[derive(Debug, Clone)]
struct Options {
    /// Environment changes, in the order made: a value, or `None` to
    /// remove the variable.
    env: Vec<(OsString, Option<OsString>)>,
    current_dir: Option<PathBuf>,
    root: Option<PathBuf>,
    tag: Option<String>,
    kill_grace: Duration,
    isolate: Option<String>,
    keep: KeepPolicy,
    keep_for: Duration,
    hand_terminal: bool,
}

impl Run {
    /// A run of `program` (looked up in `PATH` as by
    /// [`Command::new`]), with no arguments and the defaults below.
    pub fn new(program: impl AsRef<OsStr>) -> Run {
        Run {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            opts: Options {
                env: Vec::new(),
                current_dir: None,
                root: None,
                tag: None,
                kill_grace: Duration::from_secs(5),
                isolate: None,
                keep: KeepPolicy::Never,
                keep_for: Duration::from_secs(24 * 3600),
                hand_terminal: true,
            },
        }
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Run {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable for the command, over what it
    /// inherits from the caller. [`TMP_VARS`] are always the run's
    /// directory: setting one here changes nothing.
    ///
    /// ```
    /// # let root = sandkeeper_engine::Sandbox::new()?;
    /// let outcome = sandkeeper_engine::run::Run::new("sh")
    ///     .args(["-c", r#"test "$GREETING" = hello"#])
    ///     .env("GREETING", "hello")
    ///     .root(root.path())
    ///     .execute()?;
    /// assert!(outcome.exit.success());
    /// # Ok::<(), sandkeeper_engine::Error>(())
    /// ```
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Run {
        let value = Some(value.as_ref().to_owned());
        self.opts.env.push((key.as_ref().to_owned(), value));
        self
    }

    /// Removes an environment variable the command would inherit (or one
    /// set by [`env`](Run::env) before). [`TMP_VARS`] cannot be removed.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Run {
        self.opts.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// The command's working directory (a relative path is taken from the
    /// caller's). Default: the caller's. One that cannot be entered makes
    /// [`Prepared::spawn`] fail, and the run's directory goes.
    pub fn current_dir(&mut self, dir: impl Into<PathBuf>) -> &mut Run {
        self.opts.current_dir = Some(dir.into());
        self
    }

    /// Where to make the run's directory. Default: the system temp
    /// directory ([`std::env::temp_dir`], so `TMPDIR`; `SANDKEEPER_ROOT`
    /// is not consulted).
    pub fn root(&mut self, root: impl Into<PathBuf>) -> &mut Run {
        self.opts.root = Some(root.into());
        self
    }

    /// The directory's tag (its name is `<tag>-<random>`). Default:
    /// `run-` and the [program's name](Run::program_name), with characters
    /// other than ASCII letters, digits, `-`, `_` and `.` replaced by `_`.
    /// A tag that is not a valid sandbox tag (one with a `/`) makes
    /// [`prepare`](Run::prepare) fail.
    pub fn tag(&mut self, tag: impl Into<String>) -> &mut Run {
        self.opts.tag = Some(tag.into());
        self
    }

    /// How long descendants left running when the command exits get
    /// between SIGTERM and SIGKILL. Default: 5 s.
    pub fn kill_grace(&mut self, grace: Duration) -> &mut Run {
        self.opts.kill_grace = grace;
        self
    }

    /// Gives the command a private tmpfs of at most `size` (`10M`, `2G`,
    /// `50%` of RAM) as its directory, in a mount namespace of its own:
    /// the kernel frees it when the run's last process exits, even after
    /// SIGKILL, and it cannot fill the root's filesystem. Default: off.
    ///
    /// [`prepare`](Run::prepare) then moves the *calling thread* into a new
    /// mount namespace (threads it starts afterwards follow it, threads
    /// that exist do not), so the command is started and waited for from
    /// that thread ([`Prepared`] and [`Running`] are not `Send`). As root
    /// that is all; otherwise it also needs a user namespace, which the
    /// kernel gives only to a process with a single thread: prepare before
    /// starting any thread. The tmpfs is gone after the run, so it cannot
    /// be combined with a [`keep`](Run::keep) policy other than `Never`.
    pub fn isolate(&mut self, size: impl Into<String>) -> &mut Run {
        self.opts.isolate = Some(size.into());
        self
    }

    /// When the directory is kept instead of removed: `Never` (the
    /// default), `OnFailure` (the command did not exit with 0), `Always`.
    /// A kept directory stays managed, protected from reapers for
    /// [`keep_for`](Run::keep_for). It is kept, whatever the policy, when
    /// a descendant could not be stopped (it may still use it).
    pub fn keep(&mut self, when: KeepPolicy) -> &mut Run {
        self.opts.keep = when;
        self
    }

    /// How long a kept directory is protected from reapers. Default: 24 h.
    pub fn keep_for(&mut self, duration: Duration) -> &mut Run {
        self.opts.keep_for = duration;
        self
    }

    /// Whether the command gets the terminal and the run behaves as a
    /// shell's job: when standard input is a terminal whose foreground
    /// process group is the caller's, the command's group becomes the
    /// foreground one while it runs (so it can read the terminal, and
    /// Ctrl-C reaches it directly). Default: true.
    ///
    /// Job control comes with it, as a shell does it for its own jobs:
    /// when the command's group stops (Ctrl-Z: SIGTSTP; SIGTTIN, SIGTTOU,
    /// SIGSTOP), [`Running::wait`] takes the terminal back and stops the
    /// *caller's* process group with the same signal, so the shell that
    /// started the caller sees its job stopped and prints its prompt.
    /// When the caller is continued (`fg`, `bg`), it gives the terminal to
    /// the command again if its own group is the foreground one (`fg`),
    /// and continues the command's group. A command in the background
    /// that then reads the terminal stops the caller too ("Stopped (tty
    /// input)"), unless the caller was brought to the foreground
    /// meanwhile: then the command gets the terminal. Without such a
    /// terminal (a pipe, a file, a caller in the background) or with
    /// `false`, the command's stops are not watched: a stopped command is
    /// waited for until something continues it.
    ///
    /// Stopping the caller stops its whole process, every thread, and the
    /// other processes of its group (a pipeline is one job), as Ctrl-Z
    /// stops a shell's job. Whichever thread waits, the wait goes on only
    /// once the process was continued. A caller whose group is orphaned
    /// (its shell is gone) cannot be stopped by SIGTSTP, SIGTTIN or
    /// SIGTTOU: its command is then continued at once.
    pub fn hand_terminal(&mut self, yes: bool) -> &mut Run {
        self.opts.hand_terminal = yes;
        self
    }

    /// The program's file name (`cargo` for `/usr/bin/cargo`), or
    /// `command` when it has none.
    ///
    /// ```
    /// assert_eq!(sandkeeper_engine::run::Run::new("/usr/bin/cargo").program_name(), "cargo");
    /// ```
    pub fn program_name(&self) -> String {
        Path::new(&self.program)
            .file_name()
            .map_or_else(|| "command".into(), |n| n.to_string_lossy().into_owned())
    }

    /// What a run's sandbox records as where it was made: the command, as
    /// the record's `cmd` has it already (`sandkeeper run` and its
    /// arguments), cut to 200 bytes; not this file's line.
    fn site(&self) -> String {
        let mut site = String::from("sandkeeper run -- ");
        site.push_str(&self.program.to_string_lossy());
        for arg in &self.args {
            site.push(' ');
            site.push_str(&arg.to_string_lossy());
        }
        if site.len() > 200 {
            let mut end = 197;
            while !site.is_char_boundary(end) {
                end -= 1;
            }
            site.truncate(end);
            site.push_str("...");
        }
        site
    }

    /// Starts the command, waits for it, stops its descendants and ends
    /// its directory: [`prepare`](Run::prepare), [`Prepared::spawn`] and
    /// [`Running::wait`] in one, with no signal forwarding.
    ///
    /// ```
    /// # let root = sandkeeper_engine::Sandbox::new()?;
    /// let outcome = sandkeeper_engine::run::Run::new("true").root(root.path()).execute()?;
    /// assert!(outcome.exit.success() && outcome.leftovers.entries == 0);
    /// # Ok::<(), sandkeeper_engine::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As the three steps.
    pub fn execute(&self) -> Result<RunOutcome> {
        self.prepare()?.spawn()?.wait()
    }

    /// Makes the run's directory (and with [`isolate`](Run::isolate) its
    /// tmpfs), and opens the descriptor its leftovers are measured
    /// through; the command does not run yet. The directory's lease is
    /// made inheritable by the command.
    ///
    /// ```
    /// # let root = sandkeeper_engine::Sandbox::new()?;
    /// let prepared = sandkeeper_engine::run::Run::new("true").root(root.path()).prepare()?;
    /// assert!(prepared.path().is_dir());
    /// let path = prepared.path().to_owned();
    /// drop(prepared); // never started: the directory goes
    /// assert!(!path.exists());
    /// # Ok::<(), sandkeeper_engine::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The errors of [`Builder::create`](crate::Builder::create) (an
    /// unusable root, a bad tag); [`ErrorKind::InvalidInput`] for
    /// [`isolate`](Run::isolate) with a keep policy; with `isolate`,
    /// [`ErrorKind::Unsupported`] when the kernel refuses the namespace or
    /// the mount (isolation is never skipped silently), or an
    /// [`ErrorKind::Io`] error when the tmpfs cannot be opened. Nothing is
    /// left behind.
    pub fn prepare(&self) -> Result<Prepared> {
        let opts = &self.opts;
        if opts.isolate.is_some() && opts.keep != KeepPolicy::Never {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "an isolated run cannot keep its directory: its tmpfs is freed when the run ends",
            ));
        }
        let root = opts.root.clone().unwrap_or_else(std::env::temp_dir);
        let tag = opts
            .tag
            .clone()
            .unwrap_or_else(|| format!("run-{}", tag_safe(&self.program_name())));
        let sandbox = Sandbox::builder()
            .root(&root)
            .tag(tag)
            .site(self.site())
            .keep_env(false)
            .kill_grace(opts.kill_grace)
            .create()?;
        // Its command is the directory's creator (`crate::origin`; best
        // effort: only root can write the record).
        #[cfg(target_os = "linux")]
        if let Ok(dir) = sandbox.try_clone_dir() {
            let command: Vec<&OsStr> = std::iter::once(self.program.as_os_str())
                .chain(self.args.iter().map(OsString::as_os_str))
                .collect();
            crate::origin::record_run(std::os::fd::AsFd::as_fd(&dir), sandbox.path(), &command);
        }
        if let Some(size) = &opts.isolate {
            // The namespace is the calling thread's (see `isolate`).
            isolate_tmpfs(sandbox.path(), size)?;
        }
        // The leftovers are measured through a descriptor taken now, so
        // nothing the command puts at the name is ever followed.
        let summary = match open_summary_dir(&sandbox, opts.isolate.is_some()) {
            Ok(fd) => fd,
            Err(e) => {
                release(&sandbox, opts.isolate.is_some());
                return Err(e);
            }
        };
        // From here on, dropping `prepared` releases the tmpfs.
        let prepared = Prepared {
            staged: Some(Staged { sandbox, summary }),
            run: self.clone(),
            _thread: PhantomData,
        };
        prepared.sandbox().share_lease_with_children()?;
        Ok(prepared)
    }
}

/// A run whose directory is made, its command not started yet
/// ([`Run::prepare`]). Dropped, it removes the directory.
///
/// It is not `Send`: with [`Run::isolate`], only the thread that prepared
/// the run sees its tmpfs, so the command must be started from that
/// thread.
#[derive(Debug)]
pub struct Prepared {
    staged: Option<Staged>,
    run: Run,
    _thread: PhantomData<*const ()>,
}

/// The run's directory and the descriptor its leftovers are measured
/// through.
#[derive(Debug)]
struct Staged {
    sandbox: Sandbox,
    summary: OwnedFd,
}

impl Prepared {
    /// The run's directory: the command's `TMPDIR`.
    pub fn path(&self) -> &Path {
        self.sandbox().path()
    }

    fn sandbox(&self) -> &Sandbox {
        &self.staged.as_ref().expect("staged until spawned").sandbox
    }

    /// Starts the command, supervised ([`supervise::spawn`]: its own
    /// process group, the caller its subreaper), with the caller's
    /// standard streams, the environment changes of [`Run::env`] and
    /// [`TMP_VARS`] set to the directory, in [`Run::current_dir`], and
    /// hands it the terminal (see [`Run::hand_terminal`]).
    ///
    /// # Errors
    ///
    /// When the command cannot be started: the error's
    /// [`io_error`](Error::io_error) has the kind `NotFound` when the
    /// program (or the working directory) does not exist,
    /// `PermissionDenied` when it cannot be executed (or entered). The
    /// directory is removed then.
    pub fn spawn(mut self) -> Result<Running> {
        let mut command = Command::new(&self.run.program);
        command.args(&self.run.args);
        for (key, value) in &self.run.opts.env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        if let Some(dir) = &self.run.opts.current_dir {
            // Asked first, to be said as what it is: the child's failed
            // chdir would read as "cannot run PROGRAM".
            enterable(dir).map_err(|e| {
                let shown = crate::escape::Untrusted::path(dir);
                Error::io(format!("cannot enter the working directory {shown}"), e)
            })?;
            command.current_dir(dir);
        }
        // Last: whatever was asked above, these are the run's.
        for var in TMP_VARS {
            command.env(var, self.path());
        }
        // On failure, dropping `self` ends the directory.
        let child = supervise::spawn(&mut command)?;
        let job = if self.run.opts.hand_terminal {
            Pid::from_raw(child.pid() as i32).and_then(Job::hand)
        } else {
            None
        };
        let staged = self.staged.take().expect("staged until spawned");
        Ok(Running {
            live: Some(Live { child, job, staged }),
            run: self.run.clone(),
            _thread: PhantomData,
        })
    }
}

/// Whether the caller could make `dir` its working directory (a
/// directory it may search).
fn enterable(dir: &Path) -> std::io::Result<()> {
    if !std::fs::metadata(dir)?.is_dir() {
        return Err(std::io::Error::from(std::io::ErrorKind::NotADirectory));
    }
    rustix::fs::access(dir, rustix::fs::Access::EXEC_OK).map_err(Into::into)
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(staged) = self.staged.take() {
            release(&staged.sandbox, self.run.opts.isolate.is_some());
        }
    }
}

/// A run whose command is running ([`Prepared::spawn`]).
///
/// Dropped without [`wait`](Running::wait), it kills the command's process
/// group (SIGKILL), stops its descendants and removes the directory. It is
/// not `Send`, as [`Prepared`].
#[derive(Debug)]
pub struct Running {
    live: Option<Live>,
    run: Run,
    _thread: PhantomData<*const ()>,
}

#[derive(Debug)]
struct Live {
    child: Supervised,
    job: Option<Job>,
    staged: Staged,
}

impl Running {
    fn live(&self) -> &Live {
        self.live.as_ref().expect("live until waited for")
    }

    /// The command's pid (also its process group id).
    pub fn pid(&self) -> u32 {
        self.live().child.pid()
    }

    /// The run's directory: the command's `TMPDIR`.
    pub fn path(&self) -> &Path {
        self.live().staged.sandbox.path()
    }

    /// A handle to signal the command's process group from another thread
    /// (a signal forwarder) while [`wait`](Running::wait) runs; it does
    /// nothing once the command is reaped.
    pub fn signaller(&self) -> Signaller {
        self.live().child.signaller()
    }

    /// Waits for the command (acting on its stops as a shell's job when it
    /// has the terminal, see [`Run::hand_terminal`]), takes the terminal
    /// back, stops every descendant still running (SIGTERM, [`Run::kill_grace`], SIGKILL;
    /// each reaped), measures what is left in the directory, and removes
    /// or keeps it.
    ///
    /// A failure to remove or keep the directory is not an error: it is
    /// the outcome's [`cleanup`](RunOutcome::cleanup), next to the
    /// command's exit and what it left.
    ///
    /// ```
    /// use sandkeeper_engine::run::Run;
    /// use sandkeeper_engine::supervise::Exit;
    ///
    /// # let root = sandkeeper_engine::Sandbox::new()?;
    /// let running = Run::new("sleep").arg("600").root(root.path()).prepare()?.spawn()?;
    /// running.signaller().forward(rustix::process::Signal::TERM);
    /// assert_eq!(running.wait()?.exit, Exit::Signal(15));
    /// # Ok::<(), sandkeeper_engine::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When waiting for the command fails (`waitid`, not for an
    /// interruption); its descendants are stopped and the directory
    /// removed then.
    pub fn wait(mut self) -> Result<RunOutcome> {
        let Live {
            mut child,
            job,
            staged,
        } = self.live.take().expect("live until waited for");
        let opts = &self.run.opts;
        let exit = match job {
            Some(mut job) => {
                // Stops are acted on until it exits; then it is reaped.
                let exit = job.wait_exited().and_then(|()| child.wait());
                job.take_back();
                exit
            }
            None => child.wait(),
        };
        let stopped = child.stop_descendants(opts.kill_grace);
        let exit = exit?;

        // Children are gone; now the directory.
        let Staged { sandbox, summary } = staged;
        let leftovers = Leftovers::of(&summary);
        drop(summary);
        let keep = stopped.survivors > 0
            || match opts.keep {
                KeepPolicy::Never => false,
                KeepPolicy::OnFailure => !exit.success(),
                KeepPolicy::Always => true,
            };
        let dir = sandbox.path().to_owned();
        release(&sandbox, opts.isolate.is_some());
        let fate = match sandbox.try_clone_dir() {
            Ok(fd) => Fate::of(&dir, sandbox.identity(), fd.as_fd()),
            Err(_) => Fate::InPlace,
        };
        // Whatever becomes of the directory, the command's exit and its
        // leftovers stand: a cleanup failure is said next to them.
        let (kept, cleanup) = if fate != Fate::InPlace {
            // The name no longer holds the directory made: the removal
            // (which checks the inode) leaves whatever is there now alone.
            // Not a failure of the run: the command did it.
            let _ = sandbox.close();
            (false, Cleanup::Done)
        } else if keep {
            match sandbox.persist_for(opts.keep_for) {
                Ok(_) => (true, Cleanup::Done),
                Err(e) => (true, Cleanup::Failed(e)),
            }
        } else {
            match sandbox.close() {
                Ok(()) => (false, Cleanup::Done),
                Err(e) => (false, Cleanup::Failed(e)),
            }
        };
        Ok(RunOutcome {
            exit,
            dir,
            leftovers,
            fate,
            kept,
            stopped,
            cleanup,
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(Live {
            mut child,
            job,
            staged,
        }) = self.live.take()
        {
            child.signaller().signal(Signal::KILL);
            let _ = child.wait();
            if let Some(mut job) = job {
                job.take_back();
            }
            let _ = child.stop_descendants(self.run.opts.kill_grace);
            release(&staged.sandbox, self.run.opts.isolate.is_some());
        }
    }
}

/// How a run went ([`Running::wait`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct RunOutcome {
    /// How the command ended.
    pub exit: Exit,
    /// The run's directory (its `TMPDIR`), as made; whether anything is
    /// still there is [`fate`](RunOutcome::fate) and
    /// [`kept`](RunOutcome::kept).
    pub dir: PathBuf,
    /// What the command left in it, measured before it was removed.
    pub leftovers: Leftovers,
    /// What the command did to it.
    pub fate: Fate,
    /// Whether it was kept ([`Run::keep`], or a descendant that could not
    /// be stopped); when [`cleanup`](RunOutcome::cleanup) is done, it is
    /// protected from reapers for [`Run::keep_for`].
    pub kept: bool,
    /// The descendants stopped after the command exited.
    pub stopped: Stopped,
    /// Whether removing (or keeping) it worked.
    pub cleanup: Cleanup,
}

/// A descriptor to list and walk what the command leaves: the sandbox's
/// own directory, or when `isolated` the root of the tmpfs just mounted on
/// it (opened before the command exists, and checked to be a mount on a
/// different device than the directory made).
fn open_summary_dir(sandbox: &Sandbox, isolated: bool) -> Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let own = sandbox.try_clone_dir()?;
    if !isolated {
        return Ok(own);
    }
    let cannot = |e: rustix::io::Errno| {
        Error::io(
            format!("cannot open the run's tmpfs {}", sandbox.path().display()),
            e.into(),
        )
    };
    let fd = rustix::fs::open(
        sandbox.path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(cannot)?;
    let (mounted, under) = (
        rustix::fs::fstat(&fd).map_err(cannot)?,
        rustix::fs::fstat(&own).map_err(cannot)?,
    );
    if mounted.st_dev == under.st_dev {
        return Err(cannot(rustix::io::Errno::XDEV));
    }
    Ok(fd)
}

#[cfg(target_os = "linux")]
fn isolate_tmpfs(dir: &Path, size: &str) -> Result<()> {
    supervise::isolate_tmpfs(dir, size)
}

#[cfg(not(target_os = "linux"))]
fn isolate_tmpfs(dir: &Path, _: &str) -> Result<()> {
    Err(Error::new(ErrorKind::Unsupported, "cannot isolate: not on Linux").at(dir))
}

/// Unmounts the tmpfs of an isolated run (after its contents were
/// summarized).
fn release(sandbox: &Sandbox, isolated: bool) {
    #[cfg(target_os = "linux")]
    if isolated {
        let _ = supervise::release_tmpfs(sandbox.path());
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (sandbox, isolated);
}

/// A command name as part of a sandbox tag.
fn tag_safe(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if clean.is_empty() || clean.starts_with('.') {
        format!("cmd{clean}")
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_from_command_names() {
        let cases = [
            ("plain", "cargo", "cargo"),
            ("space", "my prog", "my_prog"),
            ("hidden", ".hidden", "cmd.hidden"),
            ("empty", "", "cmd"),
            ("unicode", "prüf", "pr_f"),
        ];
        for (row, name, want) in cases {
            assert_eq!(tag_safe(name), want, "{row}");
        }
    }

    #[test]
    fn a_runs_site_is_its_command() {
        let mut run = Run::new("cargo");
        run.arg("test").arg("--workspace");
        assert_eq!(run.site(), "sandkeeper run -- cargo test --workspace");
        let mut long = Run::new("x");
        for _ in 0..300 {
            long.arg("é");
        }
        assert!(long.site().len() <= 200 && long.site().ends_with("..."));
    }

    #[test]
    fn program_names() {
        let cases = [
            ("bare", "cargo", "cargo"),
            ("path", "/usr/bin/cargo", "cargo"),
            ("root", "/", "command"),
        ];
        for (row, program, want) in cases {
            assert_eq!(Run::new(program).program_name(), want, "{row}");
        }
    }

    #[test]
    fn send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Run>();
        check::<RunOutcome>();
        check::<Leftovers>();
        check::<Fate>();
        check::<Cleanup>();
    }
}
