//! `sandkeeper report DIR`: which tests leaked, from the records that
//! `sandkeeper run --report-dir DIR` wrote (docs/nextest.md).

use sandkeeper_engine::leaks::{self, Summary};

use crate::cli::ReportArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render;

/// 0 when nothing leaked, 1 when a test leaked or a record could not be
/// read (unusable, or past a limit), 2 when DIR cannot be used (missing,
/// a symlink, another user's, or others may write it).
pub fn run(args: &ReportArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let read = leaks::read_dir(&args.dir)?;
    let summary = Summary::of(&read.records);
    for warning in render::report::warnings(&args.dir, &read) {
        printer.warning(&warning);
    }
    let text = if args.json {
        sandkeeper_engine::json::report(&args.dir, &read, &summary)
    } else {
        render::report::text(&summary)
    };
    let _ = printer.data(&text);
    Ok(
        if summary.leaking.is_empty() && read.problem_count == 0 && !read.truncated {
            exit_codes::SUCCESS
        } else {
            exit_codes::PARTIAL
        },
    )
}
