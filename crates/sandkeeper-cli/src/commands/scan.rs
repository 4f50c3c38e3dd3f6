//! `sandkeeper scan`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandkeeper_engine::scan::Scanner;

use super::{open_roots, Purpose};
use crate::cli::ScanArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render;

pub fn run(args: &ScanArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let roots = open_roots(&args.roots, true, Purpose::Read)?;
    let mut scanner = Scanner::new();
    scanner.threads(args.threads);
    // Without `--entries` the table's report keeps only totals and
    // families: memory flat in the number of entries (JSON streams).
    scanner.keep_entries(args.entries);
    // Each family's members by creator (as root; nothing otherwise),
    // tallied as the entries stream.
    scanner.origins(true);
    args.inuse.apply(&mut scanner)?;
    // A document streamed to a terminal would be drawn through by the bar.
    let streamed_here = args.json && printer.data_on_terminal();
    let bar = (printer.progress_allowed() && !streamed_here).then(progress_bar);
    if let Some(bar) = &bar {
        let bar = bar.clone();
        let start = Instant::now();
        scanner.progress(Arc::new(move |done, total| {
            // Only a scan that takes a moment deserves a bar.
            if start.elapsed() > Duration::from_millis(300) {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            }
        }));
    }
    if args.json {
        // Written as the scan goes: memory flat in the number of entries.
        let written = printer.data_with(|out| {
            sandkeeper_engine::json::write_scan(&scanner, &roots, args.entries, out)
        });
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        let Ok(report) = written else {
            return Ok(exit_codes::SUCCESS); // stdout closed early
        };
        // A root that failed after some of the document was written left
        // it unfinished: the error's status says it is no result.
        let report = report?;
        for warning in render::scan::warnings(&report) {
            printer.warning(&warning);
        }
        return Ok(exit_codes::SUCCESS);
    }
    let report = scanner.scan_roots(&roots);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report?;
    let text = render::scan::table(&report, args.entries, printer.verbose());
    // Why entries are `unknown` first: that is where the reader looks.
    for warning in render::scan::warnings(&report) {
        printer.warning(&warning);
    }
    if printer.data(&text).is_err() {
        return Ok(exit_codes::SUCCESS);
    }
    Ok(exit_codes::SUCCESS)
}

fn progress_bar() -> indicatif::ProgressBar {
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("scanning {pos}/{len} entries {wide_bar}")
    {
        bar.set_style(style);
    }
    bar
}
