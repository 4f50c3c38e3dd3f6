//! The `sandkeeper` command; everything is in the library ([`sandkeeper_cli::main_from`]).

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(sandkeeper_cli::main_from(std::env::args_os()))
}
