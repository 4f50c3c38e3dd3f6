//! `scan` output: the human table and the warnings (the
//! `sandkeeper.scan/v1` JSON is the library's, [`sandkeeper::json::scan`]).

use std::fmt::Write as _;

use sandkeeper::scan::{Report, RootReport};

use super::claims;
use super::escape::{self, Untrusted};
use crate::humanize::{age, size};

/// The human report: per root a header, the families (biggest first), and a
/// footer with totals; `--entries` adds one line per entry.
pub fn table(report: &Report, entries: bool, verbose: bool) -> String {
    let now = report.started_ms;
    let mut out = String::new();
    for (n, root) in report.roots.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let fs = &root.filesystem;
        let _ = writeln!(
            out,
            "{}: {}, {} total, {:.0}% used, {} free",
            Untrusted::path(&root.path),
            fs.fstype,
            size(fs.total_bytes),
            fs.used_percent(),
            size(fs.free_bytes)
        );
        if root.totals.entries == 0 {
            let _ = writeln!(out, "  (empty)");
            continue;
        }
        let patterns: Vec<String> = root
            .groups
            .iter()
            .map(|g| escape::line(&g.pattern).into_owned())
            .collect();
        let width = patterns
            .iter()
            .map(|p| p.chars().count())
            .max()
            .unwrap_or(6)
            .clamp(6, 48);
        let _ = writeln!(
            out,
            "{:<width$} {:>6} {:>10} {:>6} {:>6} {:>5} {:>6} {:>8} {:>6} {:>7} {:>11}",
            "FAMILY",
            "COUNT",
            "SIZE",
            "OLDEST",
            "NEWEST",
            "LIVE",
            "IN USE",
            "ORPHANED",
            "IDLE",
            "UNKNOWN",
            "RECLAIMABLE"
        );
        for (g, pattern) in root.groups.iter().zip(&patterns) {
            let s = &g.states;
            let _ = writeln!(
                out,
                "{:<width$} {:>6} {:>10} {:>6} {:>6} {:>5} {:>6} {:>8} {:>6} {:>7} {:>11}",
                truncate(pattern, width),
                g.totals.entries,
                size(g.totals.disk_bytes),
                g.oldest_ms
                    .map_or("-".into(), |m| age(now.saturating_sub(m))),
                g.newest_ms
                    .map_or("-".into(), |m| age(now.saturating_sub(m))),
                s.live,
                s.in_use,
                s.orphaned,
                s.idle,
                s.unknown,
                size(g.reclaimable_bytes),
            );
        }
        let t = &root.totals;
        let reclaimable: u64 = root.groups.iter().map(|g| g.reclaimable_bytes).sum();
        let _ = writeln!(
            out,
            "{} entries in {} families: {} ({} apparent) in {} files and {} dirs; {} reclaimable",
            t.entries,
            root.groups.len(),
            size(t.disk_bytes),
            size(t.apparent_bytes),
            t.files,
            t.dirs,
            size(reclaimable)
        );
        if entries {
            out.push('\n');
            entry_lines(&mut out, root, now, verbose);
        }
    }
    out
}

fn entry_lines(out: &mut String, root: &RootReport, now: i64, verbose: bool) {
    let _ = writeln!(out, "{:<9} {:>10} {:>6}  NAME", "STATE", "SIZE", "AGE");
    for e in &root.entries {
        let _ = write!(
            out,
            "{:<9} {:>10} {:>6}  {}",
            e.state.as_str(),
            size(e.disk_bytes),
            e.newest_mtime_ms
                .map_or("-".into(), |m| age(now.saturating_sub(m))),
            Untrusted::os(&e.name)
        );
        let mut notes: Vec<String> = Vec::new();
        notes.extend(
            e.holders
                .iter()
                .map(|h| escape::line(&h.to_string()).into_owned()),
        );
        notes.extend(
            e.kernel
                .iter()
                .map(|k| escape::line(&k.to_string()).into_owned()),
        );
        notes.extend(
            e.sockets
                .iter()
                .map(|s| format!("unix socket {}", Untrusted::path(s))),
        );
        if let Some(lease) = &e.lease {
            // What the record says is a claim; its command is bounded here
            // (`explain` shows it in full).
            notes.push(format!(
                "record claims pid {} ({})",
                lease.pid,
                Untrusted::text(lease.cmd.first().map_or("?", String::as_str))
                    .max_chars(claims::TABLE_FIELD)
            ));
            notes.extend(claims::uid_mismatch(e, lease));
        }
        if verbose {
            notes.push(escape::line(&e.reason.to_string()).into_owned());
        }
        if !notes.is_empty() {
            let _ = write!(out, "  [{}]", notes.join("; "));
        }
        out.push('\n');
    }
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Warnings for stderr: uninspectable processes, blind spots, assumptions,
/// entries that could not be read.
pub fn warnings(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    if !report.uninspectable.is_empty() {
        // Name a few; a normal user cannot inspect anyone else's processes,
        // and a list of hundreds helps nobody.
        const SHOWN: usize = 8;
        let n = report.uninspectable.len();
        let pids: Vec<String> = report
            .uninspectable
            .iter()
            .take(SHOWN)
            .map(|u| u.pid.to_string())
            .collect();
        out.push(format!(
            "{n} process(es) could not be inspected, so entries they might use are `unknown`; run as root, or vouch for those you know use nothing with --ignore-pid (e.g. --ignore-pid {}):",
            pids.join(" --ignore-pid ")
        ));
        out.extend(
            report
                .uninspectable
                .iter()
                .take(SHOWN)
                .map(|u| format!("  {u}")),
        );
        if n > SHOWN {
            out.push(format!("  … and {} more", n - SHOWN));
        }
    }
    for a in &report.assumed {
        out.push(format!("assumed to use nothing (--ignore-pid): {a}"));
    }
    for b in &report.assumed_blind_spots {
        out.push(format!(
            "assumed to use nothing (--trust-pid-namespace): {b:#}"
        ));
    }
    out.extend(
        report
            .blind_spots
            .iter()
            .map(|b| format!("{b}: entries are `unknown`")),
    );
    for root in &report.roots {
        out.extend(root.warnings.iter().cloned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation() {
        let cases = [
            ("short", 10, "short"),
            ("exactly-10", 10, "exactly-10"),
            ("much-longer-name", 8, "much-lo…"),
        ];
        for (text, width, want) in cases {
            assert_eq!(truncate(text, width), want);
        }
    }
}
