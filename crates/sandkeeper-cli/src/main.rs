//! The `sandkeeper` command: parse, call the library, render.

mod cli;
mod exit_codes;
mod printer;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let printer = printer::Printer::new(cli.global.quiet, cli.global.verbose);
    match cli.command {
        None => {
            printer.help(&cli::help_text());
            exit_codes::SUCCESS.into()
        }
    }
}
