//! All output goes through here: data to stdout, messages to stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;

/// Renders output, honouring `--quiet` and `--verbose`.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    #[allow(dead_code)] // read by the subcommands as they land
    quiet: bool,
    #[allow(dead_code)]
    verbose: bool,
}

impl Printer {
    pub fn new(quiet: bool, verbose: bool) -> Printer {
        Printer { quiet, verbose }
    }

    /// Prints help text on stdout; a closed pipe is not an error.
    pub fn help(&self, text: &str) {
        let _ = writeln!(std::io::stdout().lock(), "{}", text.trim_end());
    }
}
