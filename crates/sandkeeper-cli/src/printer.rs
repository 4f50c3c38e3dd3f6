//! All output goes through here: data to stdout, messages to stderr.
//!
//! Everything written passes [`escape::block`] (data) or [`escape::line`]
//! (each message, its causes and hint): whatever a render put in, no control
//! character, bidi or other format control reaches a terminal, and a
//! message stays on its one line. Renders still escape each untrusted value
//! themselves ([`escape::Untrusted`]); this is the layer that cannot be
//! forgotten.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{self, IsTerminal, Write};

use crate::error::CliError;
use crate::render::escape;

/// Renders output, honouring `--quiet` and `--verbose`.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    quiet: bool,
    verbose: bool,
}

/// Stdout was closed early (`| head`): stop quietly, exit 0.
#[derive(Debug)]
pub struct BrokenPipe;

impl Printer {
    pub fn new(quiet: bool, verbose: bool) -> Printer {
        Printer { quiet, verbose }
    }

    pub fn verbose(&self) -> bool {
        self.verbose
    }

    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// Writes data (a table, a JSON document) to stdout.
    pub fn data(&self, text: &str) -> Result<(), BrokenPipe> {
        let mut out = io::stdout().lock();
        match out
            .write_all(escape::block(text).as_bytes())
            .and_then(|()| out.flush())
        {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(BrokenPipe),
            _ => Ok(()),
        }
    }

    /// Writes data that `write` makes a piece at a time (a long JSON
    /// document, as the scan goes) to stdout, through
    /// [`escape::BlockWriter`]: the same bytes [`data`](Self::data) would
    /// write for the whole text. Returns what `write` returns, or
    /// [`BrokenPipe`] when stdout was closed (then `write`'s own answer,
    /// which saw its writes fail, is dropped).
    pub fn data_with<T>(&self, write: impl FnOnce(&mut dyn Write) -> T) -> Result<T, BrokenPipe> {
        let mut out = escape::BlockWriter::new(io::stdout().lock());
        let value = write(&mut out);
        match out.finish() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(BrokenPipe),
            _ => Ok(value),
        }
    }

    /// Whether stdout is a terminal (data written as it comes would mix
    /// with a progress bar there).
    pub fn data_on_terminal(&self) -> bool {
        io::stdout().is_terminal()
    }

    /// Prints help text on stdout; a closed pipe is not an error.
    pub fn help(&self, text: &str) {
        let _ = writeln!(io::stdout().lock(), "{}", text.trim_end());
    }

    /// `sandkeeper: …` on stderr, unless `--quiet`: a note for the user
    /// that is not data (what `run` left behind).
    pub fn note(&self, text: &str) {
        if !self.quiet {
            let _ = writeln!(io::stderr().lock(), "sandkeeper: {}", escape::line(text));
        }
    }

    /// `warning: …` on stderr, unless `--quiet`.
    pub fn warning(&self, text: &str) {
        if !self.quiet {
            let _ = writeln!(io::stderr().lock(), "warning: {}", escape::line(text));
        }
    }

    /// `error: …`, its causes and a hint, on stderr.
    pub fn error(&self, err: &CliError) {
        let mut e = io::stderr().lock();
        let _ = writeln!(e, "error: {}", escape::line(&err.message));
        for cause in &err.causes {
            let _ = writeln!(e, "  Caused by: {}", escape::line(cause));
        }
        if let Some(hint) = &err.hint {
            let _ = writeln!(e, "hint: {}", escape::line(hint));
        }
    }

    /// Whether progress may be drawn: stderr is a terminal and not `--quiet`.
    pub fn progress_allowed(&self) -> bool {
        !self.quiet && io::stderr().is_terminal()
    }
}
