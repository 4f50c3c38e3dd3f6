//! The words of `watch` (and of `reap --config`): what a config will do,
//! how full a root is, what kept a reap under pressure from freeing more.
//! Every name from outside is escaped.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use sandkeeper_engine::config::{self, Config};
use sandkeeper_engine::watch::{Level, Outcome, Pressure};

use crate::humanize::{sanitize, size};

/// What `watch` will do, one line per item, for the start of the log and
/// `--check`.
pub fn describe(config: &Config) -> Vec<String> {
    let mut lines = Vec::new();
    match &config.source {
        Some(path) => lines.push(format!("config {}", sanitize(path.as_os_str().as_bytes()))),
        None => {
            let looked: Vec<String> = config::default_candidates()
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            lines.push(format!(
                "no config file ({}); using the defaults: orphaned sandboxes in the temp directory, no watermarks",
                looked.join(", ")
            ));
        }
    }
    lines.push(format!(
        "full cycle every {}, watermark poll every {}",
        crate::humanize::duration(config.interval),
        crate::humanize::duration(config.poll)
    ));
    if config.trust_pid_namespace {
        lines.push(
            "trust_pid_namespace: every process that can reach the roots is assumed to be in this pid namespace".into(),
        );
    }
    if !config.ignore_pids.is_empty() {
        let pids: Vec<String> = config.ignore_pids.iter().map(u32::to_string).collect();
        lines.push(format!(
            "ignore_pids: {} (vouched for: assumed to use nothing under the roots)",
            pids.join(", ")
        ));
    }
    for root in &config.roots {
        let mut parts = vec![format!("grace {}", crate::humanize::duration(root.grace))];
        if let Some(age) = root.orphan_age {
            parts.push(format!(
                "orphans older than {}",
                crate::humanize::duration(age)
            ));
        }
        if root.max_keep != sandkeeper_engine::reap::DEFAULT_MAX_KEEP {
            parts.push(format!(
                "kept sandboxes for at most {}",
                crate::humanize::duration(root.max_keep)
            ));
        }
        if let Some(w) = &root.watermarks {
            parts.push(format!("high watermark {}, low {}", w.high, w.low));
        }
        if let Some(w) = &root.inode_watermarks {
            parts.push(format!("high inode watermark {}, low {}", w.high, w.low));
        }
        for rule in &root.rules {
            let mut r = format!("rule {:?}", rule.glob);
            if let Some(age) = rule.older_than {
                r += &format!(" older than {}", crate::humanize::duration(age));
            }
            if let Some(n) = rule.keep_last {
                r += &format!(" keeping the last {n}");
            }
            if let Some(uid) = rule.owner {
                r += &format!(" of {}", crate::config::user_name(uid));
            }
            parts.push(r);
        }
        if root.user_dirs && root.user_dir_families {
            parts.push(
                "and its sandkeeper-<uid> directories (their families named in the metrics)".into(),
            );
        } else if root.user_dirs {
            parts.push("and its sandkeeper-<uid> directories".into());
        }
        if root.track_origins {
            parts.push("recording the creator of each new entry".into());
        }
        lines.push(format!(
            "root {}: {}",
            sanitize(root.path.as_os_str().as_bytes()),
            parts.join("; ")
        ));
    }
    lines
}

/// The log line of an origin tracker's change, and whether it is an
/// error: "origins: tracking ROOT", "origins: cannot track ROOT: …".
pub fn origins(change: &sandkeeper_engine::origin::TrackerChange) -> (bool, String) {
    use sandkeeper_engine::origin::TrackerChange;
    let path = |p: &Path| sanitize(p.as_os_str().as_bytes()).into_owned();
    match change {
        TrackerChange::Started(p) => (
            false,
            format!(
                "origins: recording the creators of new entries of {}",
                path(p)
            ),
        ),
        TrackerChange::Stopped(p) => (
            false,
            format!("origins: no longer recording creators in {}", path(p)),
        ),
        TrackerChange::Failed(p, e) => (
            true,
            format!(
                "origins: cannot record creators in {}: {} (needs root and fanotify)",
                path(p),
                sanitize(e.to_string().as_bytes())
            ),
        ),
        _ => (false, String::new()),
    }
}

/// "ROOT: above the high watermark (95.0% used, 1 GiB free); removing
/// oldest first until 2 GiB free".
pub fn pressure_started(root: &Path, level: &Level, pressure: &Pressure) -> String {
    format!(
        "{}: above the high watermark ({}); removing oldest first until {}",
        sanitize(root.as_os_str().as_bytes()),
        used(level, pressure),
        pressure.describe()
    )
}

/// What kept a reap under pressure from freeing more: the entries that
/// could not be removed (with the first error), then the keep reasons by
/// the disk usage they hold, the top [`TOP_BLOCKERS`] named. Sanitized.
/// From the reaps' sums ([`RootReap::counts`](sandkeeper_engine::reap::RootReap::counts)):
/// `watch` keeps no record per entry.
pub fn blockers(outcome: &Outcome) -> String {
    let roots = outcome.reports.iter().flat_map(|r| &r.roots);
    let kept = roots.clone().flat_map(|r| {
        r.counts
            .skipped_by_reason
            .iter()
            .map(|(reason, t)| (*reason, t.entries, t.disk_bytes))
    });
    let messages: Vec<String> = outcome
        .failures
        .iter()
        .map(|(_, e)| e.to_string())
        .collect();
    let errors: Vec<(&Path, &str)> = roots
        .flat_map(|r| &r.errors)
        .map(|e| (e.path.as_path(), e.error.as_str()))
        .chain(
            outcome
                .failures
                .iter()
                .zip(&messages)
                .map(|((path, _), m)| (path.as_path(), m.as_str())),
        )
        .collect();
    blocker_counts(kept, &errors)
}

/// Removal failures logged one by one per root and reap; the rest are
/// counted in one line.
pub const MAX_ERROR_LINES: usize = 8;

/// How many keep reasons [`blockers`] names; the rest are summed.
const TOP_BLOCKERS: usize = 3;

/// See [`blockers`]: `kept` gives each keep reason's stable name
/// ([`KeepReason::as_str`](sandkeeper_engine::reap::KeepReason::as_str)), how
/// many entries it kept and their disk usage (a reason may come more than
/// once); `errors` each entry (or root) that could not be removed and why.
fn blocker_counts(
    kept: impl Iterator<Item = (&'static str, u64, u64)>,
    errors: &[(&Path, &str)],
) -> String {
    // (label, entries, bytes), by the reason's stable name.
    let mut by: Vec<(&'static str, u64, u64)> = Vec::new();
    for (reason, entries, bytes) in kept {
        let label = match reason {
            "live" => "live (lease held)",
            "in_use" => "in use",
            "unknown" => "unknown (could not be inspected)",
            "grace" => "in grace",
            "kept" => "kept on purpose",
            "not_selected" => "matched by no rule",
            "too_new" => "too new",
            "keep_last" => "among the newest kept",
            "owner" => "of another owner",
            "changed" => "changed during the reap",
            "clock_stepped" => "ages untrusted (clock stepped)",
            // Not blockers: the target was met, or a stop was asked for.
            "target_met" | "stopped" => continue,
            _ => "kept for another reason",
        };
        match by.iter_mut().find(|(l, ..)| *l == label) {
            Some(slot) => {
                slot.1 += entries;
                slot.2 = slot.2.saturating_add(bytes);
            }
            None => by.push((label, entries, bytes)),
        }
    }
    by.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(b.0)));
    let mut parts = Vec::new();
    if let Some((path, why)) = errors.first() {
        parts.push(format!(
            "{} could not be removed (first: {}: {})",
            errors.len(),
            sanitize(path.as_os_str().as_bytes()),
            sanitize(why.as_bytes())
        ));
    }
    for (label, n, bytes) in by.iter().take(TOP_BLOCKERS) {
        parts.push(format!("{n} {label} ({})", size(*bytes)));
    }
    if by.len() > TOP_BLOCKERS {
        let (n, bytes) = by[TOP_BLOCKERS..]
            .iter()
            .fold((0, 0u64), |(n, b), x| (n + x.1, b.saturating_add(x.2)));
        parts.push(format!("{n} more kept for other reasons ({})", size(bytes)));
    }
    if parts.is_empty() {
        return "no entry is left to take".to_owned();
    }
    parts.join(", ")
}

fn percent(level: &Level) -> String {
    format!("{:.1}%", level.used_percent())
}

/// How full a filesystem is, in the terms of the pressure on it: "95.0%
/// used, 1 GiB free" for bytes, "100.0% of inodes used, 0 inodes free" for
/// inodes, or both.
pub fn used(level: &Level, pressure: &Pressure) -> String {
    let bytes = format!("{} used, {} free", percent(level), size(level.free));
    let inodes = format!(
        "{:.1}% of inodes used, {} inodes free",
        level.used_inodes_percent(),
        level.free_inodes
    );
    match (pressure.bytes.is_some(), pressure.inodes.is_some()) {
        (_, false) => bytes,
        (false, true) => inodes,
        (true, true) => format!("{bytes}; {inodes}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sandkeeper_engine::reap::KeepReason;

    use super::*;

    /// Issue 11, item 9(a): a reap under pressure that cannot free more
    /// names what held it back, biggest first, errors before all.
    #[test]
    fn blockers_are_named() {
        let grace = KeepReason::InGrace {
            age: Duration::from_secs(1),
        };
        // (name, kept entries, errors, the text)
        type Case = (
            &'static str,
            Vec<(KeepReason, u64)>,
            Vec<(&'static str, &'static str)>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            ("nothing", vec![], vec![], "no entry is left to take"),
            (
                "in use beats grace by bytes",
                vec![
                    (grace.clone(), 1 << 10),
                    (grace.clone(), 1 << 10),
                    (KeepReason::InUse, 3 << 20),
                ],
                vec![],
                "1 in use (3.00 MiB), 2 in grace (2.00 KiB)",
            ),
            (
                "errors first; target met is no blocker",
                vec![(KeepReason::TargetMet, 1 << 30), (KeepReason::Unknown, 0)],
                vec![
                    ("/r/a", "no usable quarantine"),
                    ("/r/b", "no usable quarantine"),
                ],
                "2 could not be removed (first: /r/a: no usable quarantine), 1 unknown (could not be inspected) (0 B)",
            ),
            (
                "the rest summed",
                vec![
                    (KeepReason::Live, 4),
                    (KeepReason::InUse, 3),
                    (KeepReason::NotSelected, 2),
                    (KeepReason::KeptUntil(1), 1),
                    (KeepReason::ClockStepped(Duration::ZERO), 1),
                ],
                vec![],
                "1 live (lease held) (4 B), 1 in use (3 B), 1 matched by no rule (2 B), 2 more kept for other reasons (2 B)",
            ),
            (
                "hostile text is escaped",
                vec![],
                vec![("/r/\x1b[2J", "bad\nline")],
                "1 could not be removed (first: /r/\\x1b[2J: bad\\nline)",
            ),
        ];
        for (name, kept, errors, want) in cases {
            let errors: Vec<(&Path, &str)> =
                errors.iter().map(|(p, e)| (Path::new(*p), *e)).collect();
            let got = blocker_counts(kept.iter().map(|(r, b)| (r.as_str(), 1, *b)), &errors);
            assert_eq!(got, want, "{name}");
        }
    }
}
