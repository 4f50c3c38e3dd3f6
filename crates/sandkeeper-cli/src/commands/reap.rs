//! `sandkeeper reap`.

use sandkeeper::reap::Reaper;

use super::{open_roots, policy, Purpose};
use crate::cli::ReapArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render;

pub fn run(args: &ReapArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let report = match super::watch::config_for_reap(args)? {
        Some(config) => super::watch::reap_configured(&config, args, printer)?,
        None => {
            let roots = open_roots(&args.roots, true, Purpose::Remove)?;
            let mut reaper = Reaper::new(policy(&args.rules, args.dry_run)?);
            for &pid in &args.rules.ignore_pids {
                reaper.scanner().ignore_pid(pid);
            }
            reaper.reap_roots(&roots)?
        }
    };
    let text = if args.json {
        render::reap::json(&report)
    } else {
        render::reap::summary(&report, printer.verbose())
    };
    if printer.data(&text).is_err() {
        return Ok(exit_codes::SUCCESS);
    }
    for warning in render::scan::warnings(&report.scan) {
        printer.warning(&warning);
    }
    Ok(if report.has_errors() {
        exit_codes::PARTIAL
    } else {
        exit_codes::SUCCESS
    })
}
