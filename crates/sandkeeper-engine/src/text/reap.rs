//! `reap` output: a human summary (the `sandkeeper.reap/v1` JSON is the
//! library's, [`crate::json::reap`]).

use std::fmt::Write as _;

use crate::reap::{ReapReport, TargetOutcome};

use crate::escape::{self, Untrusted};
use crate::human::{plural, size};

/// The human summary: per root, what went per family, what stayed and why
/// (in counts), what failed. `--verbose` lists every entry (from the
/// records: a reap made for it keeps them, [`records`](crate::reap::PolicyBuilder::records)).
pub fn summary(report: &ReapReport, verbose: bool) -> String {
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut out = String::new();
    for root in &report.roots {
        // From the counts: the records are kept only for --json and
        // --verbose (a reap of a million entries keeps none).
        let counts = &root.counts;
        let _ = write!(
            out,
            "{}: {verb} {} ({})",
            Untrusted::path(&root.path),
            plural(counts.removed, "entry", "entries"),
            size(root.freed_bytes)
        );
        let mut biggest: Vec<(&str, (u64, u64))> = counts
            .removed_by_family
            .iter()
            .map(|(p, t)| (&**p, (t.entries, t.disk_bytes)))
            .collect();
        biggest.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
        let shown: Vec<String> = biggest
            .iter()
            .take(5)
            .map(|(p, (n, bytes))| format!("{} {n} ({})", escape::line(p), size(*bytes)))
            .collect();
        if !shown.is_empty() {
            let _ = write!(out, ": {}", shown.join(", "));
            if biggest.len() > 5 {
                let rest: u64 = biggest[5..].iter().map(|(_, (_, b))| b).sum();
                let _ = write!(
                    out,
                    " and {} ({})",
                    plural((biggest.len() - 5) as u64, "more family", "more families"),
                    size(rest)
                );
            }
        }
        out.push('\n');
        let reasons = &counts.skipped_by_reason;
        if !reasons.is_empty() {
            let parts: Vec<String> = reasons
                .iter()
                .map(|(r, t)| format!("{r} {}", t.entries))
                .collect();
            let _ = writeln!(
                out,
                "  left {}: {}",
                plural(counts.skipped, "entry", "entries"),
                parts.join(", ")
            );
        }
        if let Some(t) = &root.target {
            target_line(&mut out, t, report.dry_run);
        }
        if root.quarantine_finished > 0 {
            let _ = writeln!(
                out,
                "  finished {} a killed reaper left in quarantine",
                plural(root.quarantine_finished, "item", "items")
            );
        }
        if root.quarantine_rechecked > 0 {
            let _ = writeln!(
                out,
                "  removed {} an earlier reap had kept in quarantine (in use then, its name taken), now unused",
                plural(root.quarantine_rechecked, "item", "items")
            );
        }
        for e in &root.errors {
            let _ = writeln!(
                out,
                "  error: {}: {}",
                Untrusted::path(&e.path),
                escape::line(&e.error)
            );
        }
        if verbose {
            for r in &root.removed {
                let _ = writeln!(
                    out,
                    "  {verb} {} ({}; {})",
                    Untrusted::path(&r.path),
                    escape::line(&r.reason.to_string()),
                    size(r.disk_bytes)
                );
            }
            for s in &root.skipped {
                let _ = writeln!(
                    out,
                    "  left {} ({})",
                    Untrusted::path(&s.path),
                    escape::line(&s.reason.to_string())
                );
            }
        }
    }
    out
}

/// `  free-space target reached: …` or `  free-space target NOT reached: …`
/// with what was asked and what is free, and why nothing more went.
fn target_line(out: &mut String, t: &TargetOutcome, dry_run: bool) {
    let mut want = Vec::new();
    let mut have = Vec::new();
    if let Some(b) = t.want_free_bytes {
        want.push(format!("{} free", size(b)));
        have.push(format!("{} free", size(t.free_bytes)));
    }
    if let Some(n) = t.want_free_inodes {
        want.push(plural(n, "free inode", "free inodes"));
        have.push(plural(t.free_inodes, "free inode", "free inodes"));
    }
    let est = if dry_run { " (estimated)" } else { "" };
    if t.met {
        let _ = writeln!(
            out,
            "  free-space target reached: {}{est} (wanted {})",
            have.join(", "),
            want.join(", ")
        );
    } else {
        let _ = writeln!(
            out,
            "  free-space target not reached: {}{est}, wanted {}; nothing else may be removed by these rules",
            have.join(", "),
            want.join(", ")
        );
    }
}
