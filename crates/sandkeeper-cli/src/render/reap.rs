//! `reap` output: a human summary (the `sandkeeper.reap/v1` JSON is the
//! library's, [`sandkeeper::json::reap`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sandkeeper::reap::ReapReport;

use super::escape::{self, Untrusted};
use crate::humanize::size;

/// The human summary: per root, what went per family, what stayed and why
/// (in counts), what failed. `--verbose` lists every entry.
pub fn summary(report: &ReapReport, verbose: bool) -> String {
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut out = String::new();
    for root in &report.roots {
        let mut families: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for r in &root.removed {
            let f = families.entry(&r.pattern).or_default();
            f.0 += 1;
            f.1 += r.disk_bytes;
        }
        let _ = write!(
            out,
            "{}: {verb} {} entr{} ({})",
            Untrusted::path(&root.path),
            root.removed.len(),
            if root.removed.len() == 1 { "y" } else { "ies" },
            size(root.freed_bytes)
        );
        let mut biggest: Vec<(&str, (u64, u64))> = families.into_iter().collect();
        biggest.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
        let shown: Vec<String> = biggest
            .iter()
            .take(5)
            .map(|(p, (n, bytes))| format!("{} {n} ({})", escape::line(p), size(*bytes)))
            .collect();
        if !shown.is_empty() {
            let _ = write!(out, ": {}", shown.join(", "));
            if biggest.len() > 5 {
                let _ = write!(out, ", {} more families", biggest.len() - 5);
            }
        }
        out.push('\n');
        let mut reasons: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &root.skipped {
            *reasons.entry(s.reason.as_str()).or_default() += 1;
        }
        if !reasons.is_empty() {
            let parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
            let _ = writeln!(out, "  kept {}: {}", root.skipped.len(), parts.join(", "));
        }
        if root.quarantine_finished > 0 {
            let _ = writeln!(
                out,
                "  finished {} item(s) a killed reaper left in quarantine",
                root.quarantine_finished
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
                    "  kept {} ({})",
                    Untrusted::path(&s.path),
                    escape::line(&s.reason.to_string())
                );
            }
        }
    }
    out
}
