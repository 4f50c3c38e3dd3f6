//! `sandkeeper run -- CMD`: a private TMPDIR that is gone afterwards.

use std::os::fd::{AsFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};
use rustix::process::Signal;
use sandkeeper::output::OutputFile;
use sandkeeper::supervise::{self, Exit, Signaller};
use sandkeeper::Sandbox;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::cli::{KeepWhen, RunArgs};
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render::run::{leftovers, Cleanup, Fate, RunReport};

/// The variables temp-directory lookups read, in every common language.
const TMP_VARS: [&str; 4] = ["TMPDIR", "TMP", "TEMP", "TEMPDIR"];

pub fn run(args: &RunArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let program = &args.command[0];
    let name = std::path::Path::new(program)
        .file_name()
        .map_or_else(|| "command".into(), |n| n.to_string_lossy().into_owned());
    // The report's directory is resolved and vetted once, before anything
    // runs: an unsafe or impossible path is bad input (exit 2).
    let report_file = args
        .report_json
        .as_deref()
        .map(OutputFile::open)
        .transpose()?;
    let root = args.root.clone().unwrap_or_else(std::env::temp_dir);
    let sandbox = Sandbox::builder()
        .root(&root)
        .tag(format!("run-{}", tag_safe(&name)))
        .keep_env(false)
        .kill_grace(args.kill_grace)
        .create()?;
    if args.isolate {
        // Before any thread exists: the namespace is per thread.
        if let Err(e) = supervise::isolate_tmpfs(sandbox.path(), &args.size) {
            drop(sandbox);
            return Err(e.into());
        }
    }
    // The leftover summary goes through a descriptor of the directory made
    // (with --isolate: of the tmpfs on it), taken before the command runs,
    // so nothing it puts at the name is ever followed.
    let summary_dir = match open_summary_dir(args, &sandbox) {
        Ok(fd) => fd,
        Err(e) => {
            release(args, &sandbox);
            drop(sandbox);
            return Err(e);
        }
    };
    sandbox.share_lease_with_children()?;

    let mut command = Command::new(program);
    command.args(&args.command[1..]);
    for var in TMP_VARS {
        command.env(var, sandbox.path());
    }
    // Forward signals from before the command starts, so none is lost.
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])
        .map_err(|e| CliError::io("cannot handle signals", &e))?;
    let handle = signals.handle();
    let mut child = match supervise::spawn(&mut command) {
        Ok(child) => child,
        Err(e) => {
            handle.close();
            let status = match e.io_error().map(std::io::Error::kind) {
                Some(std::io::ErrorKind::NotFound) => 127,
                Some(std::io::ErrorKind::PermissionDenied) => 126,
                _ => 2,
            };
            release(args, &sandbox);
            drop(sandbox);
            let mut err = CliError::from(e);
            if status == 127 {
                err.message = format!("command not found: {}", name);
            }
            err.status = ExitStatus(status);
            return Err(err);
        }
    };
    let terminal = child.hand_terminal();
    let interrupted = Arc::new(AtomicBool::new(false));
    let forwarder = {
        let signaller = child.signaller();
        let interrupted = Arc::clone(&interrupted);
        std::thread::spawn(move || forward(&mut signals, &signaller, &interrupted))
    };
    let exit = child.wait();
    if let Some(terminal) = terminal {
        terminal.restore();
    }
    let stopped = child.stop_descendants(args.kill_grace);
    handle.close();
    let _ = forwarder.join();
    let exit = exit?;

    // Children are gone; now the directory.
    let left = leftovers(summary_dir.as_fd());
    drop(summary_dir);
    let keep = stopped.survivors > 0
        || match args.keep {
            KeepWhen::Never => false,
            KeepWhen::OnFailure => !exit.success(),
            KeepWhen::Always => true,
        };
    let dir = sandbox.path().to_owned();
    release(args, &sandbox);
    let fate = match sandbox.try_clone_dir() {
        Ok(fd) => Fate::of(&dir, sandbox.identity(), fd.as_fd()),
        Err(_) => Fate::InPlace,
    };
    // Whatever becomes of the directory, the command's status, the
    // leftover line and the report stand: a cleanup failure is said with
    // its reason, never in their place.
    let (kept, cleanup) = if fate != Fate::InPlace {
        // The name no longer holds the directory made: the removal (which
        // checks the inode) leaves whatever is there now alone, and the
        // note below says so. Not an error of ours: the command did it.
        let _ = sandbox.close();
        (false, Cleanup::Done)
    } else if keep {
        match sandbox.persist_for(args.keep_for) {
            Ok(_) => (true, Cleanup::Done),
            Err(e) => (true, Cleanup::failed(&e)),
        }
    } else {
        match sandbox.close() {
            Ok(()) => (false, Cleanup::Done),
            Err(e) => (false, Cleanup::failed(&e)),
        }
    };
    let report = RunReport {
        command: &args.command,
        dir: &dir,
        exit,
        left: &left,
        fate,
        kept,
        keep_for: args.keep_for,
        stopped,
        cleanup: &cleanup,
    };
    if let Some(line) = report.line(&name) {
        printer.note(&line);
    }
    if let Some(note) = fate.note(&dir) {
        printer.note(&note);
    }
    if let Some(warning) = cleanup.warning(&dir, kept) {
        printer.warning(&warning);
    }
    if let Some(file) = &report_file {
        // Through the directory's descriptor; never through a link.
        if let Err(e) = file.write(report.json().as_bytes(), 0o644) {
            let mut err = CliError::from(e);
            err.message = format!("cannot write the report: {}", err.message);
            err.status = exit_codes::PARTIAL;
            return Err(err);
        }
    }
    if stopped.survivors > 0 {
        printer.warning(&format!(
            "{} descendant(s) could not be stopped even with SIGKILL; the directory is kept",
            stopped.survivors
        ));
    }
    Ok(ExitStatus(exit_status(exit)))
}

/// A descriptor to list and walk what the command leaves: the sandbox's
/// own directory, or with `--isolate` the root of the tmpfs just mounted
/// on it (opened before the command exists, and checked to be a mount on
/// a different device than the directory made).
fn open_summary_dir(args: &RunArgs, sandbox: &Sandbox) -> Result<OwnedFd, CliError> {
    let own = sandbox.try_clone_dir()?;
    if !args.isolate {
        return Ok(own);
    }
    let cannot = |e: rustix::io::Errno| {
        CliError::io(
            &format!("cannot open the run's tmpfs {}", sandbox.path().display()),
            &e.into(),
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

/// Unmounts the --isolate tmpfs (after its contents were summarized).
fn release(args: &RunArgs, sandbox: &Sandbox) {
    if args.isolate {
        let _ = supervise::release_tmpfs(sandbox.path());
    }
}

/// Forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the command's process
/// group; a second SIGINT sends SIGKILL.
fn forward(signals: &mut Signals, child: &Signaller, interrupted: &AtomicBool) {
    for signal in signals.forever() {
        let to = match signal {
            SIGINT if interrupted.swap(true, Ordering::Relaxed) => Signal::KILL,
            SIGINT => Signal::INT,
            SIGTERM => Signal::TERM,
            SIGHUP => Signal::HUP,
            _ => Signal::QUIT,
        };
        child.signal(to);
    }
}

/// The command's status as ours: its code, or 128 + the signal.
fn exit_status(exit: Exit) -> u8 {
    u8::try_from(exit.shell_status()).unwrap_or(exit_codes::PARTIAL.0)
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
            ("cargo", "cargo"),
            ("my prog", "my_prog"),
            (".hidden", "cmd.hidden"),
            ("", "cmd"),
        ];
        for (name, want) in cases {
            assert_eq!(tag_safe(name), want);
        }
    }

    #[test]
    fn statuses() {
        assert_eq!(exit_status(Exit::Code(3)), 3);
        assert_eq!(exit_status(Exit::Signal(11)), 139);
    }
}
