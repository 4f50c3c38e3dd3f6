//! `ls` output: the managed sandboxes.

use std::fmt::Write as _;

use sandkeeper::scan::{Entry, Report};
use serde_json::{json, Map, Value};

use super::escape::{self, Untrusted};
use super::{claims, lease_json, path_field};
use crate::humanize::{age, size};

fn managed(report: &Report) -> impl Iterator<Item = (&std::path::Path, &Entry)> {
    report
        .roots
        .iter()
        .flat_map(|r| r.entries.iter().map(move |e| (r.path.as_path(), e)))
        .filter(|(_, e)| e.is_managed())
}

/// Each root of `report`, opened again to read origins.
fn opened(
    report: &Report,
) -> std::collections::HashMap<&std::path::Path, Option<sandkeeper::root::Root>> {
    report
        .roots
        .iter()
        .map(|r| (r.path.as_path(), super::origin::open(r)))
        .collect()
}

/// How wide the COMMAND column is.
const COMMAND_WIDTH: usize = 32;

/// One line per managed sandbox.
///
/// Facts and claims are kept apart: OWNER is the directory's real owner;
/// PID and COMMAND are the lease lock's holder as `/proc` shows it; where
/// nobody holds the lock, COMMAND is what the record claims, marked
/// `record:`; a record whose uid is not the owner's gets a note saying so.
/// AGE is the time since the newest change inside (the record's creation
/// time is a claim too).
pub fn table(report: &Report) -> String {
    let now = report.started_ms;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:>7} {:<10} {:>6} {:>10}  {:<COMMAND_WIDTH$} PATH",
        "STATE", "PID", "OWNER", "AGE", "SIZE", "COMMAND"
    );
    let roots = opened(report);
    for (root, e) in managed(report) {
        let holders = e.lock_holders();
        let (pid, cmd) = match (holders.first(), &e.lease) {
            (Some(&pid), _) => {
                let comm = e.holder_comm(pid).map_or_else(
                    || "?".to_owned(),
                    |c| Untrusted::text(c).max_chars(COMMAND_WIDTH).to_string(),
                );
                let more = if holders.len() > 1 { "+" } else { "" };
                (format!("{pid}{more}"), comm)
            }
            (None, Some(l)) => {
                let pid = if e.check_record_pid(l) == sandkeeper::scan::PidCheck::RunningSameStart {
                    l.pid.to_string()
                } else {
                    "-".to_owned()
                };
                let width = COMMAND_WIDTH.min(claims::TABLE_FIELD) - "record: ".len();
                (pid, format!("record: {}", claims::command(l, Some(width))))
            }
            (None, None) => ("-".into(), "(invalid lease)".into()),
        };
        let path = root.join(&e.name);
        let _ = write!(
            out,
            "{:<9} {:>7} {:<10} {:>6} {:>10}  {:<COMMAND_WIDTH$} {}",
            e.state.as_str(),
            pid,
            Untrusted::text(&claims::user_short(e.uid))
                .bare()
                .max_chars(10),
            e.newest_mtime_ms
                .map_or("-".into(), |m| age(now.saturating_sub(m))),
            size(e.disk_bytes),
            cmd,
            Untrusted::path(&path)
        );
        if let Some(note) = e.lease.as_ref().and_then(|l| claims::uid_mismatch(e, l)) {
            let _ = write!(out, "  [{note}]");
        }
        let origin = roots
            .get(root)
            .and_then(|r| super::origin::of(r.as_ref(), &e.name));
        if let Some(o) = origin {
            let _ = write!(out, "  [made by {}]", super::origin::line(&o));
        }
        out.push('\n');
    }
    out
}

/// A JSON array of sandboxes.
pub fn json(report: &Report) -> String {
    let roots = opened(report);
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
            if let Some(origin) = roots
                .get(root)
                .and_then(|r| super::origin::of(r.as_ref(), &e.name))
            {
                o.insert("origin".into(), json!(origin));
            }
            Value::Object(o)
        })
        .collect();
    let mut text = escape::json_pretty(&json!({"schema": "sandkeeper.ls/v1", "sandboxes": items}));
    text.push('\n');
    text
}
