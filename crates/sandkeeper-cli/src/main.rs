//! The `sandkeeper` command: parse, call the library, render.
#![warn(clippy::print_stdout, clippy::print_stderr)]

mod cli;
mod commands;
mod config;
mod error;
mod exit_codes;
mod humanize;
mod printer;
mod render;

use std::process::ExitCode;

use clap::Parser;

use cli::Command;
use exit_codes::ExitStatus;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
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
    status.into()
}
