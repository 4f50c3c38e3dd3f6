//! `sandkeeper explain PATH`.

use std::path::Path;

use sandkeeper_engine::reap::Reaper;
use sandkeeper_engine::root::{Place, Root};

use super::{open_roots, policy, Purpose};
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
    let cannot = |why: String| {
        let mut err = CliError::usage(format!(
            "cannot explain {}: {why}",
            Untrusted::path(&args.path)
        ));
        err.hint = Some("give the path of an existing entry".into());
        err
    };
    let (parent, name) = match (args.path.parent(), args.path.file_name()) {
        (Some(parent), Some(name)) => (parent, name),
        _ => {
            return Err(cannot(
                "it names no entry (it is `/`, or ends in `..`)".into(),
            ))
        }
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let parent = Root::open(parent).map_err(|e| cannot(e.to_string()))?;
    rustix::fs::statat(parent.fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| cannot(std::io::Error::from(e).to_string()))?;
    let target = parent.path().join(name);
    let mut roots = Vec::new();
    // Without --root, a path inside a default root (the temp directory, the
    // caller's user dirs) is explained as scan and reap see it: as part of
    // that root's top-level entry. Anywhere else its parent is its root.
    let defaults = if args.roots.is_empty() {
        open_roots(&[], true, Purpose::Read)?
    } else {
        Vec::new()
    };
    let in_default = match Root::place(&defaults, &target) {
        Place::Entry { root, path } => Some((root, path)),
        _ => None,
    };
    let (root, entry) = if let Some((index, path)) = in_default {
        (&defaults[index], path)
    } else if args.roots.is_empty() {
        if parent.is_filesystem_root() {
            // `/` is never a root; say what to do instead.
            let shown = Untrusted::path(&target);
            let mut err = CliError::usage(format!(
                "cannot explain {shown}: its parent directory is the filesystem root `/`, which is never a root"
            ));
            err.hint = Some(format!(
                "explain an entry inside it, such as {shown}/NAME, or name a root with --root DIR"
            ));
            return Err(err);
        }
        (&parent, target)
    } else {
        roots = open_roots(&args.roots, false, Purpose::Read)?;
        match Root::place(&roots, &target) {
            Place::Entry { root, path } => (&roots[root], path),
            Place::Root(_) => {
                let shown = Untrusted::path(&target);
                let mut err = CliError::usage(format!("{shown} is a root, not an entry"));
                err.hint = Some(format!(
                    "explain an entry inside it, such as {shown}/NAME (`sandkeeper scan --entries {shown}` lists them)"
                ));
                return Err(err);
            }
            Place::Outside => {
                let listed: Vec<String> = roots
                    .iter()
                    .map(|r| Untrusted::path(r.path()).to_string())
                    .collect();
                let mut err = CliError::usage(format!(
                    "{} is not inside any root (roots: {})",
                    Untrusted::path(&args.path),
                    listed.join(", ")
                ));
                err.hint = Some(
                    "name its root with --root DIR, or drop --root to take its parent directory as its root"
                        .into(),
                );
                return Err(err);
            }
        }
    };
    let mut reaper = Reaper::new(policy(&args.rules, true, true)?);
    args.rules.inuse.apply(reaper.scanner())?;
    let inuse = reaper.scanner().in_use()?;
    let report = reaper.scanner().scan_root(root, &inuse)?;
    let Some(index) = report
        .entries
        .iter()
        .position(|e| root.path().join(&e.name) == entry)
    else {
        if roots.iter().any(|r| r.path() == entry) {
            return Err(CliError::usage(format!(
                "{} is a root of its own (a per-user sandbox directory), not an entry; explain an entry inside it",
                Untrusted::path(&entry)
            )));
        }
        return Err(CliError::usage(format!(
            "{} is not an entry of {} (it vanished, or it is one of sandkeeper's own directories)",
            Untrusted::path(&entry),
            Untrusted::path(root.path())
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
