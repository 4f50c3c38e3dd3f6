//! `sandkeeper explain PATH`.

use sandkeeper_engine::reap::Reaper;
use sandkeeper_engine::root::place_for_explain;

use super::policy;
use crate::cli::ExplainArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render;
use crate::render::escape::Untrusted;

/// Explains one entry.
///
/// Without `--root`, a PATH inside a default root (the temp directory, the
/// caller's user dirs) is placed in the deepest one, as `scan` and `reap`
/// see it. Anywhere else PATH's parent directory is its root and PATH
/// itself is explained: the parent is opened once, as a root is (symlinks in it
/// resolved once, each step checked), and everything after is relative to
/// that descriptor; the last name is looked up without following it, so
/// `explain LINK` explains the link itself. With `--root`, PATH is placed
/// in the deepest given root that holds it (a path deeper inside explains
/// the root's top-level entry that holds it).
pub fn run(args: &ExplainArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let placed = place_for_explain(&args.path, &args.roots)?;
    let (root, entry, roots) = (placed.root(), &placed.entry, &placed.roots);
    let mut reaper = Reaper::new(policy(&args.rules, true, true)?);
    args.rules.inuse.apply(reaper.scanner())?;
    reaper.scanner().origins(true);
    let inuse = reaper.scanner().in_use()?;
    let report = reaper.scanner().scan_root(root, &inuse)?;
    let Some(index) = report
        .entries
        .iter()
        .position(|e| root.path().join(&e.name) == *entry)
    else {
        if roots.iter().any(|r| r.path() == entry.as_path()) {
            return Err(CliError::usage(format!(
                "{} is a root of its own (a per-user sandbox directory), not an entry; explain an entry inside it",
                Untrusted::path(entry)
            )));
        }
        return Err(CliError::usage(format!(
            "{} is not an entry of {} (it vanished, or it is one of sandkeeper's own directories)",
            Untrusted::path(entry),
            Untrusted::path(root.path())
        )));
    };
    let now = sandkeeper_engine::clock::now_ms() as i64;
    let verdicts = reaper.decide(&report, now);
    let text = render::explain::text(&report, index, &verdicts[index], &inuse, now);
    if printer.data(&text).is_err() {
        return Ok(exit_codes::SUCCESS);
    }
    Ok(exit_codes::SUCCESS)
}
