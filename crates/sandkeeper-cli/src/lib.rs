//! The `sandkeeper` command as a library: parse, call the library, render.
//!
//! The binary (`main.rs`) and the Python wheel's console script
//! (`crates/sandkeeper-py`) both call [`main_from`], so there is one CLI.
#![warn(clippy::print_stdout, clippy::print_stderr)]

mod cli;
mod commands;
mod config;
mod error;
mod exit_codes;
mod humanize;
mod printer;
mod render;

use std::ffi::OsString;

use cli::Command;
use exit_codes::ExitStatus;

/// Runs the `sandkeeper` command on `args` (the first one is the program
/// name, as in [`std::env::args_os`]) and returns its exit status (the table
/// in `sandkeeper --help`: 0 success, 1 partial, 2 bad usage or input, …).
///
/// A usage error, `--help` and `--version` are printed and return their
/// status instead of exiting the process, so an embedding (the Python
/// console script) unwinds normally.
pub fn main_from<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match cli::parse(&args) {
        Ok(cli) => cli,
        Err(err) if err.use_stderr() => {
            // `run --nextest … -- CMD` with a bad option: the test runs all
            // the same, the error is one warning (commands/nextest.rs).
            if let Some(command) = commands::nextest::command_after_usage_error(&args) {
                let printer = printer::Printer::new(false, false);
                let text = err.to_string();
                let first = text.lines().next().unwrap_or_default();
                printer.warning(&format!(
                    "sandkeeper run --nextest: the test runs without sandkeeper (no TMPDIR of its own, no leak record): {}",
                    first.strip_prefix("error: ").unwrap_or(first)
                ));
                return commands::nextest::exec_plainly(command, &printer).0;
            }
            let _ = err.print();
            return u8::try_from(err.exit_code()).unwrap_or(exit_codes::USAGE.0);
        }
        Err(err) => {
            // clap's own rendering (and its exit status: 2 usage, 0 for
            // --help/--version); a closed output is not an error here.
            let _ = err.print();
            return u8::try_from(err.exit_code()).unwrap_or(exit_codes::USAGE.0);
        }
    };
    let printer = printer::Printer::new(cli.global.quiet, cli.global.verbose);
    let result = match cli.command {
        None => {
            printer.help(&cli::help_text());
            Ok(exit_codes::SUCCESS)
        }
        Some(Command::Scan(args)) => commands::scan::run(&args, &printer),
        Some(Command::Reap(args)) => commands::reap::run(&args, &printer),
        Some(Command::Ls(args)) => commands::ls::run(&args, &printer),
        Some(Command::Explain(args)) => commands::explain::run(&args, &printer),
        Some(Command::Run(args)) => commands::run::run(&args, &printer),
        Some(Command::Report(args)) => commands::report::run(&args, &printer),
        Some(Command::Watch(args)) => commands::watch::run(&args, &printer),
        Some(Command::Completions(args)) => commands::completions::completions(&args),
        Some(Command::Man(args)) => commands::completions::man(&args, &printer),
    };
    let status: ExitStatus = result.unwrap_or_else(|err| {
        printer.error(&err);
        err.status
    });
    status.0
}
