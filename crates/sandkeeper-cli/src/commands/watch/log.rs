//! The log of `watch`: one plain line per action on stderr, each starting
//! with `sandkeeper: `. Under systemd, when stderr is the journal
//! (`$JOURNAL_STREAM` names it), each line also carries a syslog priority
//! prefix (`<4>`) that journald turns into the entry's priority, so
//! `journalctl -p warning` shows what could not be removed.
//!
//! Every line passes [`escape::line`]: whatever a caller put in, no control
//! character (a newline neither: one action, one line) nor bidi or format
//! control reaches the terminal or the journal.

use std::io::{self, Write as _};
use std::os::unix::fs::MetadataExt;

use crate::printer::Printer;
use crate::render::escape;

/// How important a line is (syslog priorities).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something could not be done.
    Error = 3,
    /// Something went wrong but work goes on.
    Warning = 4,
    /// A change of state: pressure, reload, start, stop.
    Notice = 5,
    /// An action: a removal.
    Info = 6,
    /// Only with `--verbose`.
    Debug = 7,
}

/// Writes log lines.
#[derive(Debug, Clone, Copy)]
pub struct Log {
    quiet: bool,
    verbose: bool,
    journal: bool,
}

impl Log {
    /// Honours `--quiet` (only warnings and errors) and `--verbose`.
    pub fn new(printer: &Printer) -> Log {
        Log {
            quiet: printer.quiet(),
            verbose: printer.verbose(),
            journal: stderr_is_journal(),
        }
    }

    pub fn error(&self, text: &str) {
        self.line(Level::Error, text);
    }

    pub fn warning(&self, text: &str) {
        self.line(Level::Warning, text);
    }

    pub fn notice(&self, text: &str) {
        self.line(Level::Notice, text);
    }

    pub fn info(&self, text: &str) {
        self.line(Level::Info, text);
    }

    pub fn debug(&self, text: &str) {
        self.line(Level::Debug, text);
    }

    /// Whether lines of `level` are written.
    pub fn enabled(&self, level: Level) -> bool {
        match level {
            Level::Error | Level::Warning => true,
            Level::Notice | Level::Info => !self.quiet,
            Level::Debug => self.verbose && !self.quiet,
        }
    }

    /// One line. Untrusted values in `text` should already be escaped
    /// ([`escape::Untrusted`]); anything left is escaped here, newlines
    /// included.
    pub fn line(&self, level: Level, text: &str) {
        if !self.enabled(level) {
            return;
        }
        let prefix = if self.journal {
            format!("<{}>", level as u8)
        } else {
            String::new()
        };
        let _ = writeln!(
            io::stderr().lock(),
            "{prefix}sandkeeper: {}",
            escape::line(text)
        );
    }
}

/// Whether stderr is the stream systemd connected to the journal:
/// `$JOURNAL_STREAM` is `DEVICE:INODE` of it (systemd.exec(5)).
fn stderr_is_journal() -> bool {
    let Some(want) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    want.to_string_lossy() == format!("{}:{}", meta.dev(), meta.ino())
}
