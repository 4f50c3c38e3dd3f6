//! `sandkeeper explain PATH`.

use std::path::{Component, Path, PathBuf};

use sandkeeper::reap::Reaper;

use super::{default_roots, policy};
use crate::cli::ExplainArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;
use crate::render;
use crate::render::escape::Untrusted;

pub fn run(args: &ExplainArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let roots = default_roots(&args.roots, true);
    let target = std::fs::canonicalize(&args.path).map_err(|e| {
        let mut err = CliError::usage(format!(
            "cannot explain {}: {e}",
            Untrusted::path(&args.path)
        ));
        err.hint = Some("give the path of an existing entry".into());
        err
    })?;
    // The deepest root that holds the target: the per-user root inside
    // /tmp wins over /tmp itself.
    let mut best: Option<(PathBuf, PathBuf)> = None;
    for root in &roots {
        let Ok(root) = std::fs::canonicalize(root) else {
            continue;
        };
        if let Some(entry) = top_level_entry(&root, &target) {
            if best
                .as_ref()
                .is_none_or(|(r, _)| root.components().count() > r.components().count())
            {
                best = Some((root, entry));
            }
        }
    }
    let Some((root, entry)) = best else {
        let listed: Vec<String> = roots
            .iter()
            .map(|r| Untrusted::path(r).to_string())
            .collect();
        let mut err = CliError::usage(format!(
            "{} is not inside any root (roots: {})",
            Untrusted::path(&args.path),
            listed.join(", ")
        ));
        err.hint = Some("name its root with --root DIR".into());
        return Err(err);
    };
    let mut reaper = Reaper::new(policy(&args.rules, true)?);
    for &pid in &args.rules.ignore_pids {
        reaper.scanner().ignore_pid(pid);
    }
    let inuse = reaper.scanner().in_use()?;
    let report = reaper.scanner().scan_root(&root, &inuse)?;
    let Some(index) = report
        .entries
        .iter()
        .position(|e| root.join(&e.name) == entry)
    else {
        return Err(CliError::usage(format!(
            "{} vanished during the scan",
            Untrusted::path(&entry)
        )));
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let verdicts = reaper.decide(&report, now);
    let text = render::explain::text(&report, index, &verdicts[index], &inuse, now);
    if printer.data(&text).is_err() {
        return Ok(exit_codes::SUCCESS);
    }
    Ok(exit_codes::SUCCESS)
}

/// `root/<first component of target below root>`, if target is below root.
fn top_level_entry(root: &Path, target: &Path) -> Option<PathBuf> {
    let rest = target.strip_prefix(root).ok()?;
    match rest.components().next()? {
        Component::Normal(name) => Some(root.join(name)),
        _ => None,
    }
}
