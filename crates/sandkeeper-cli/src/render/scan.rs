//! `scan` output: the human table and the `sandkeeper.scan/v1` JSON.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

use sandkeeper::scan::{Entry, EntryState, Group, Report, RootReport, StateCounts, Totals};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Map, Value};

use super::escape::{self, Untrusted};
use super::{bytes_field, claims, holder_json, kernel_json, lease_json, path_field};
use crate::humanize::{age, size};

/// The JSON schema name; bump on incompatible changes only.
pub const SCHEMA: &str = "sandkeeper.scan/v1";

/// The `--json` document. Entries are serialized as they are written, not
/// gathered into a JSON tree first: memory stays at the size of the text.
pub fn json(report: &Report, entries: bool) -> String {
    let process = |u: &sandkeeper::inuse::Uninspectable| json!({"pid": u.pid, "comm": u.comm, "reason": u.to_string()});
    let doc = Document {
        report,
        entries,
        uninspectable: report.uninspectable.iter().map(process).collect(),
        assumed: report.assumed.iter().map(process).collect(),
    };
    let mut text = escape::json_pretty(&doc);
    text.push('\n');
    text
}

struct Document<'a> {
    report: &'a Report,
    entries: bool,
    uninspectable: Vec<Value>,
    assumed: Vec<Value>,
}

impl Serialize for Document<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("schema", SCHEMA)?;
        m.serialize_entry("started_ms", &self.report.started_ms)?;
        let roots: Vec<RootJson<'_>> = self
            .report
            .roots
            .iter()
            .map(|root| RootJson {
                root,
                entries: self.entries,
            })
            .collect();
        m.serialize_entry("roots", &roots)?;
        m.serialize_entry("uninspectable", &self.uninspectable)?;
        m.serialize_entry("assumed", &self.assumed)?;
        let blind: Vec<String> = self
            .report
            .blind_spots
            .iter()
            .map(ToString::to_string)
            .collect();
        m.serialize_entry("blind_spots", &blind)?;
        m.end()
    }
}

struct RootJson<'a> {
    root: &'a RootReport,
    entries: bool,
}

impl Serialize for RootJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let root = self.root;
        let mut m = s.serialize_map(None)?;
        let mut path = Map::new();
        path_field(&mut path, "path", root.path.as_os_str());
        for (k, v) in &path {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry(
            "filesystem",
            &json!({
                "type": root.filesystem.fstype,
                "total_bytes": root.filesystem.total_bytes,
                "free_bytes": root.filesystem.free_bytes,
            }),
        )?;
        m.serialize_entry("totals", &totals_json(&root.totals))?;
        let groups: Vec<Value> = root.groups.iter().map(group_json).collect();
        m.serialize_entry("groups", &groups)?;
        if self.entries {
            let entries: Vec<EntryJson<'_>> = root.entries.iter().map(EntryJson).collect();
            m.serialize_entry("entries", &entries)?;
        }
        m.serialize_entry("warnings", &root.warnings)?;
        m.end()
    }
}

fn totals_json(t: &Totals) -> Value {
    json!({
        "entries": t.entries,
        "disk_bytes": t.disk_bytes,
        "apparent_bytes": t.apparent_bytes,
        "files": t.files,
        "dirs": t.dirs,
    })
}

fn states_json(s: &StateCounts) -> Value {
    let mut obj = Map::new();
    for state in EntryState::ALL {
        obj.insert(state.as_str().into(), s.get(state).into());
    }
    Value::Object(obj)
}

fn group_json(g: &Group) -> Value {
    json!({
        "pattern": g.pattern,
        "count": g.totals.entries,
        "disk_bytes": g.totals.disk_bytes,
        "apparent_bytes": g.totals.apparent_bytes,
        "files": g.totals.files,
        "dirs": g.totals.dirs,
        "oldest_ms": g.oldest_ms,
        "newest_ms": g.newest_ms,
        "states": states_json(&g.states),
        "reclaimable_bytes": g.reclaimable_bytes,
    })
}

struct EntryJson<'a>(&'a Entry);

impl Serialize for EntryJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut m = s.serialize_map(None)?;
        let mut name = Map::new();
        bytes_field(&mut name, "name", e.name.as_bytes());
        for (k, v) in &name {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry("pattern", &e.pattern)?;
        m.serialize_entry("state", e.state.as_str())?;
        m.serialize_entry("reason", &e.reason.to_string())?;
        m.serialize_entry("disk_bytes", &e.disk_bytes)?;
        m.serialize_entry("apparent_bytes", &e.apparent_bytes)?;
        m.serialize_entry("files", &e.files)?;
        m.serialize_entry("dirs", &e.dirs)?;
        m.serialize_entry("newest_mtime_ms", &e.newest_mtime_ms)?;
        m.serialize_entry("uid", &e.uid)?;
        let mut holders: Vec<Value> = e.holders.iter().map(holder_json).collect();
        holders.extend(e.kernel.iter().map(kernel_json));
        holders.extend(e.sockets.iter().map(|sock| {
            let mut o = Map::new();
            o.insert("kernel".into(), "unix socket".into());
            path_field(&mut o, "path", sock.as_os_str());
            Value::Object(o)
        }));
        m.serialize_entry("holders", &holders)?;
        let lease = match (&e.lease, e.lease_invalid) {
            (Some(record), _) => lease_json(record),
            (None, true) => json!({"invalid": true}),
            (None, false) => Value::Null,
        };
        m.serialize_entry("lease", &lease)?;
        m.end()
    }
}

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
        if root.entries.is_empty() {
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
                g.oldest_ms.map_or("-".into(), |m| age(now - m)),
                g.newest_ms.map_or("-".into(), |m| age(now - m)),
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
            e.newest_mtime_ms.map_or("-".into(), |m| age(now - m)),
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
