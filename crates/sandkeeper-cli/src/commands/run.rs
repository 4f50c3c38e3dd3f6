//! `sandkeeper run -- CMD`: a private TMPDIR that is gone afterwards.

use rustix::process::Signal;
use sandkeeper_engine::leaks::{Record, RecordDir, TestId};
use sandkeeper_engine::output::OutputFile;
use sandkeeper_engine::run::Run;
use sandkeeper_engine::supervise::{Exit, Signaller};
use sandkeeper_engine::KeepPolicy;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

use super::nextest;
use crate::cli::{KeepWhen, RunArgs};
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render::run::{cleanup_warning, fate_note, RunReport};

pub fn run(args: &RunArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let mut run = Run::new(&args.command[0]);
    run.args(&args.command[1..])
        .kill_grace(args.kill_grace)
        .keep(match args.keep {
            KeepWhen::Never => KeepPolicy::Never,
            KeepWhen::OnFailure => KeepPolicy::OnFailure,
            KeepWhen::Always => KeepPolicy::Always,
        })
        .keep_for(args.keep_for)
        .root(args.root.clone().unwrap_or_else(std::env::temp_dir));
    if args.isolate {
        run.isolate(&args.size);
    }
    let name = run.program_name();
    // Under --nextest a problem of sandkeeper's own is a warning, and the
    // test runs all the same (commands/nextest.rs).
    let lenient = args.nextest;
    // The report's directory is resolved and vetted once, before anything
    // runs: an unsafe or impossible path is bad input (exit 2).
    let report_file = match args
        .report_json
        .as_deref()
        .map(OutputFile::open)
        .transpose()
    {
        Ok(file) => file,
        Err(e) if lenient => {
            nextest::warn(printer, "no --report-json for this test", &e.into());
            None
        }
        Err(e) => return Err(e.into()),
    };
    // The same for the record directory (made if missing).
    let record_dir = open_record_dir(args, printer)?;
    // Before any thread exists: an --isolate namespace is per thread.
    let prepared = match run.prepare() {
        Ok(prepared) => prepared,
        Err(e) if lenient => {
            let missed = "the test runs without sandkeeper (no TMPDIR of its own, no leak record)";
            nextest::warn(printer, missed, &e.into());
            return Ok(nextest::exec_plainly(&args.command, printer));
        }
        Err(e) => {
            // Whatever the cause: the command did not run (RUN_HELP).
            let mut err = CliError::from(e);
            err.status = exit_codes::USAGE;
            return Err(err);
        }
    };
    // Forward signals from before the command starts, so none is lost.
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT]) {
        Ok(signals) => signals,
        Err(e) => {
            let err = CliError::io("cannot handle signals", &e);
            if !lenient {
                return Err(err);
            }
            // exec does not run destructors: the directory goes first.
            drop(prepared);
            let missed = "the test runs without sandkeeper (no TMPDIR of its own, no leak record)";
            nextest::warn(printer, missed, &err);
            return Ok(nextest::exec_plainly(&args.command, printer));
        }
    };
    let handle = signals.handle();
    let running = prepared.spawn().map_err(|e| {
        handle.close();
        spawn_error(e, &name)
    })?;
    let forwarder = {
        let signaller = running.signaller();
        std::thread::spawn(move || forward(&mut signals, &signaller))
    };
    let outcome = running.wait();
    handle.close();
    let _ = forwarder.join();
    let outcome = outcome?;

    let report = RunReport {
        keep_for: args.keep_for,
        outcome: &outcome,
    };
    // With --report-dir the record says it: the test's output stays clean.
    if record_dir.is_none() {
        if let Some(line) = report.line(&name) {
            printer.note(&line);
        }
    }
    if let Some(note) = fate_note(outcome.fate, &outcome.dir) {
        printer.note(&note);
    }
    if let Some(warning) = cleanup_warning(&outcome.cleanup, &outcome.dir, outcome.kept) {
        printer.warning(&warning);
    }
    if let Some(file) = &report_file {
        // Through the directory's descriptor; never through a link.
        // 0600: it names the command and its arguments, which under `hidepid`
        // no other user may read in `/proc` (docs/security.md).
        if let Err(e) = file.write(
            sandkeeper_engine::json::run(&args.command, &outcome).as_bytes(),
            0o600,
        ) {
            let mut err = CliError::from(e);
            err.message = format!("cannot write the report: {}", err.message);
            err.status = exit_codes::PARTIAL;
            if !lenient {
                return Err(err);
            }
            nextest::warn(printer, "no --report-json for this test", &err);
        }
    }
    if let Some(dir) = &record_dir {
        let record = Record::of(&outcome, TestId::from_env(), &args.command);
        if let Err(e) = dir.write(&record) {
            let mut err = CliError::from(e);
            err.message = format!("cannot write the run's record: {}", err.message);
            err.status = exit_codes::PARTIAL;
            if !lenient {
                return Err(err);
            }
            nextest::warn(printer, "no leak record for this test", &err);
            // What the record would have said, then.
            if let Some(line) = report.line(&name) {
                printer.note(&line);
            }
        }
    }
    if outcome.stopped.survivors > 0 {
        printer.warning(&format!(
            "{} could not be stopped even with SIGKILL; the directory is kept",
            crate::humanize::plural(
                outcome.stopped.survivors as u64,
                "descendant",
                "descendants"
            )
        ));
    }
    Ok(ExitStatus(exit_status(outcome.exit)))
}

/// The record directory: `--report-dir DIR` vetted (exit 2 when it cannot
/// be used); with `--nextest`, that or the one in the target directory,
/// and when it cannot be used a warning and no record.
fn open_record_dir(args: &RunArgs, printer: &Printer) -> Result<Option<RecordDir>, CliError> {
    const MISSED: &str = "no leak record for this test";
    if !args.nextest {
        return args
            .report_dir
            .as_deref()
            .map(|dir| RecordDir::open(dir).map_err(|e| with_nextest_hint(e.into())))
            .transpose();
    }
    let path = match &args.report_dir {
        Some(dir) => dir.clone(),
        None => match nextest::record_dir(&args.command[0]) {
            Ok(path) => path,
            Err(why) => {
                nextest::warn(printer, MISSED, &CliError::usage(why));
                return Ok(None);
            }
        },
    };
    match RecordDir::open(&path) {
        Ok(dir) => Ok(Some(dir)),
        Err(e) => {
            nextest::warn(printer, MISSED, &e.into());
            Ok(None)
        }
    }
}

/// A record directory refused while running as nextest's wrapper without
/// `--nextest` (the set-up documented before issue 28, which failed every
/// test where `target/` was elsewhere): say what to use instead.
fn with_nextest_hint(mut err: CliError) -> CliError {
    if std::env::var_os("NEXTEST_TEST_NAME").is_some() {
        err.hint = Some(
            "under cargo-nextest, wrap tests with `sandkeeper run --nextest --`: it finds the target directory itself, and a problem of its own never fails a test (docs/nextest.md)"
                .into(),
        );
    }
    err
}

/// A command that could not be started, with the shell's statuses: 127
/// not found, 126 not executable, 2 otherwise.
fn spawn_error(e: sandkeeper_engine::Error, name: &str) -> CliError {
    let status = match e.io_error().map(std::io::Error::kind) {
        Some(std::io::ErrorKind::NotFound) => 127,
        Some(std::io::ErrorKind::PermissionDenied) => 126,
        _ => 2,
    };
    let mut err = CliError::from(e);
    if status == 127 {
        err.message = format!("command not found: {name}");
    }
    err.status = ExitStatus(status);
    err
}

/// Forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the command's process
/// group; a second SIGINT sends SIGKILL.
fn forward(signals: &mut Signals, child: &Signaller) {
    for signal in signals.forever() {
        if let Some(signal) = Signal::from_named_raw(signal) {
            child.forward(signal);
        }
    }
}

/// The command's status as ours: its code, or 128 + the signal.
fn exit_status(exit: Exit) -> u8 {
    u8::try_from(exit.shell_status()).unwrap_or(exit_codes::PARTIAL.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(exit_status(Exit::Code(3)), 3);
        assert_eq!(exit_status(Exit::Signal(11)), 139);
    }
}
