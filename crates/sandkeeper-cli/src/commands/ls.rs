//! `sandkeeper ls`: a `ps` for sandboxes.

use sandkeeper::scan::Scanner;

use super::{open_roots, Purpose};
use crate::cli::LsArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render;

pub fn run(args: &LsArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let roots = open_roots(&args.roots, true, Purpose::Read)?;
    let mut scanner = Scanner::new();
    for &pid in &args.ignore_pids {
        scanner.ignore_pid(pid);
    }
    scanner.trust_pid_namespace(super::trust_pid_namespace(args.trust_pid_namespace, false)?);
    let report = scanner.scan_roots(&roots)?;
    let text = if args.json {
        render::ls::json(&report)
    } else {
        render::ls::table(&report)
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
