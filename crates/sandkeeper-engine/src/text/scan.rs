//! `scan` output: the human table and the warnings (the
//! `sandkeeper.scan/v1` JSON is the library's, [`crate::json::scan`]).

use std::fmt::Write as _;

use crate::scan::warnings::Face;
use crate::scan::{Report, RootReport};

use super::claims;
use crate::escape::{self, Untrusted};
use crate::human::{age, plural, size};

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
            "{:<width$} {:>6} {:>10} {:>6} {:>6} {:>5} {:>6} {:>8} {:>5} {:>6} {:>7} {:>11}",
            "FAMILY",
            "COUNT",
            "SIZE",
            "OLDEST",
            "NEWEST",
            "LIVE",
            "IN USE",
            "ORPHANED",
            "KEPT",
            "IDLE",
            "UNKNOWN",
            "RECLAIMABLE"
        );
        for (g, pattern) in root.groups.iter().zip(&patterns) {
            let s = &g.states;
            let _ = writeln!(
                out,
                "{:<width$} {:>6} {:>10} {:>6} {:>6} {:>5} {:>6} {:>8} {:>5} {:>6} {:>7} {:>11}",
                truncate(pattern, width),
                g.totals.entries,
                size(g.totals.disk_bytes),
                g.oldest_ms
                    .map_or("-".into(), |m| age(now.saturating_sub(m))),
                g.newest_ms
                    .map_or("-".into(), |m| age(now.saturating_sub(m))),
                s.live,
                s.in_use,
                s.orphaned.saturating_sub(g.kept),
                g.kept,
                s.idle,
                s.unknown,
                size(g.reclaimable_bytes),
            );
            for line in super::origin::family_lines(g.creators.as_deref()) {
                let _ = writeln!(out, "  {line}");
            }
        }
        let t = &root.totals;
        let reclaimable: u64 = root.groups.iter().map(|g| g.reclaimable_bytes).sum();
        let kept: u64 = root.groups.iter().map(|g| g.kept).sum();
        let _ = write!(
            out,
            "{} in {}: {} ({} apparent) in {} and {}; {} reclaimable",
            plural(t.entries, "entry", "entries"),
            plural(root.groups.len() as u64, "family", "families"),
            size(t.disk_bytes),
            size(t.apparent_bytes),
            plural(t.files, "file", "files"),
            plural(t.dirs, "dir", "dirs"),
            size(reclaimable)
        );
        if kept > 0 {
            let _ = write!(
                out,
                " ({} kept on purpose, not counted)",
                plural(kept, "sandbox", "sandboxes")
            );
        }
        out.push('\n');
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
            e.state_word(now),
            size(e.disk_bytes),
            e.newest_mtime_ms
                .map_or("-".into(), |m| age(now.saturating_sub(m))),
            Untrusted::os(&e.name)
        );
        let mut notes: Vec<String> = Vec::new();
        notes.extend(
            e.kept_by_default(now)
                .map(|until| super::kept_until(until, now)),
        );
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
        if let Some(o) = &e.origin {
            notes.push(format!("made by {}", super::origin::line(o)));
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

/// Warnings for stderr: the engine's, in the command's words
/// ([`Report::warnings`]). Commands print them *before* the table: the
/// reason every entry is `unknown` is what the reader needs first.
pub fn warnings(report: &Report) -> Vec<String> {
    report.warnings(Face::Command)
}

/// The line that names the switch that assumes every uninspectable process
/// holds nothing (`explain`'s).
pub fn assumed_unseen(count: usize) -> String {
    crate::scan::warnings::assumed_unseen(count, Face::Command)
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
