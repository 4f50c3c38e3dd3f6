//! `sandkeeper ls`: a `ps` for sandboxes.

use sandkeeper_engine::scan::Scanner;

use super::{open_roots, Purpose};
use crate::cli::LsArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render;

pub fn run(args: &LsArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let roots = open_roots(&args.roots, true, Purpose::Read)?;
    let mut scanner = Scanner::new();
    args.inuse.apply(&mut scanner)?;
    // Who made each sandbox, read as the scan goes (as root).
    scanner.origins(true);
    let report = scanner.scan_roots(&roots)?;
    let text = if args.json {
        sandkeeper_engine::json::ls(&report)
    } else {
        render::ls::table(&report, terminal_width())
    };
    // Why entries are `unknown` first: that is where the reader looks.
    for warning in render::scan::warnings(&report) {
        printer.warning(&warning);
    }
    if printer.data(&text).is_err() {
        return Ok(exit_codes::SUCCESS);
    }
    Ok(exit_codes::SUCCESS)
}

/// How wide the table may be: `COLUMNS` when it is set to a number, else
/// the terminal's width when stdout is a terminal; `None` (no cut) when
/// stdout is a pipe or a file, so that `grep` sees whole commands.
fn terminal_width() -> Option<usize> {
    if let Some(cols) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return Some(cols);
    }
    let out = std::io::stdout();
    if !std::io::IsTerminal::is_terminal(&out) {
        return None;
    }
    rustix::termios::tcgetwinsize(&out)
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|&c| c > 0)
}
