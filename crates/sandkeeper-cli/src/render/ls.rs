//! `ls` output: the managed sandboxes.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

use sandkeeper::scan::{Entry, Report};
use serde_json::{json, Map, Value};

use super::{lease_json, path_field};
use crate::config::user_name;
use crate::humanize::{age, sanitize, size};

fn managed(report: &Report) -> impl Iterator<Item = (&std::path::Path, &Entry)> {
    report
        .roots
        .iter()
        .flat_map(|r| r.entries.iter().map(move |e| (r.path.as_path(), e)))
        .filter(|(_, e)| e.is_managed())
}

/// One line per managed sandbox.
pub fn table(report: &Report) -> String {
    let now = report.started_ms;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:>7} {:<10} {:>6} {:>10}  {:<20} PATH",
        "STATE", "PID", "USER", "AGE", "SIZE", "COMMAND"
    );
    for (root, e) in managed(report) {
        let (pid, cmd, uid) = match &e.lease {
            Some(l) => (l.pid.to_string(), l.cmd.join(" "), l.uid),
            None => ("-".into(), "(invalid lease)".into(), e.uid),
        };
        let created = e.lease.as_ref().map(|l| l.created_ms as i64);
        let _ = writeln!(
            out,
            "{:<9} {:>7} {:<10} {:>6} {:>10}  {:<20} {}",
            e.state.as_str(),
            pid,
            user_name(uid),
            created.map_or("-".into(), |c| age(now - c)),
            size(e.disk_bytes),
            sanitize(truncated(&cmd, 20).as_bytes()),
            sanitize(root.join(&e.name).as_os_str().as_bytes())
        );
    }
    out
}

fn truncated(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut t: String = text.chars().take(width - 1).collect();
        t.push('…');
        t
    }
}

/// A JSON array of sandboxes.
pub fn json(report: &Report) -> String {
    let items: Vec<Value> = managed(report)
        .map(|(root, e)| {
            let mut o = Map::new();
            path_field(&mut o, "path", root.join(&e.name).as_os_str());
            o.insert("state".into(), e.state.as_str().into());
            o.insert("disk_bytes".into(), e.disk_bytes.into());
            o.insert("newest_mtime_ms".into(), json!(e.newest_mtime_ms));
            o.insert(
                "lease".into(),
                e.lease
                    .as_ref()
                    .map_or(json!({"invalid": true}), lease_json),
            );
            Value::Object(o)
        })
        .collect();
    let mut text =
        serde_json::to_string_pretty(&json!({"schema": "sandkeeper.ls/v1", "sandboxes": items}))
            .unwrap_or_default();
    text.push('\n');
    text
}
