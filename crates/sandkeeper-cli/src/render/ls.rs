//! `ls` output: the managed sandboxes (schema `sandkeeper.ls/v1` for
//! `--json`, see docs/ls-json.md).

use std::fmt::Write as _;
use std::path::Path;

use sandkeeper_engine::lease::LeaseRecord;
use sandkeeper_engine::scan::{Entry, PidCheck, Report};
use serde_json::{json, Map, Value};

use super::escape::{self, Untrusted};
use super::{claims, kept_until, lease_json, path_field, state_word};
use crate::humanize::{age, size};

fn managed(report: &Report) -> impl Iterator<Item = (&Path, &Entry)> {
    report
        .roots
        .iter()
        .flat_map(|r| r.entries.iter().map(move |e| (r.path.as_path(), e)))
        .filter(|(_, e)| e.is_managed())
}

/// Each root of `report`, opened again to read origins.
fn opened(
    report: &Report,
) -> std::collections::HashMap<&std::path::Path, Option<sandkeeper_engine::root::Root>> {
    report
        .roots
        .iter()
        .map(|r| (r.path.as_path(), super::origin::open(r)))
        .collect()
}

/// The fewest characters COMMAND is cut to, however narrow the terminal.
const COMMAND_MIN: usize = 20;
/// How many characters COMMAND shows without a terminal width (a pipe, a
/// file): enough for a test binary's name and its arguments, few enough
/// that a line stays bounded whatever a record claims.
const COMMAND_UNBOUNDED: usize = 120;
/// The widest SITE column (a claim: `file:line`).
const SITE_MAX: usize = 40;

/// The program of a command line as a person names it: the file name of
/// `argv[0]` without the hash cargo appends to test binaries
/// (`deps/cli-0123456789abcdef` → `cli`), then the arguments.
pub fn program(cmd: &[String]) -> String {
    let Some(first) = cmd.first() else {
        return String::new();
    };
    let name = first.rsplit('/').next().unwrap_or(first);
    let name = strip_cargo_hash(name);
    let mut out = name.to_owned();
    for arg in &cmd[1..] {
        out.push(' ');
        out.push_str(arg);
    }
    out
}

/// `NAME-<16 hex digits>` → `NAME` (how cargo names test and bench
/// binaries); anything else unchanged.
fn strip_cargo_hash(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((stem, hash))
            if !stem.is_empty()
                && hash.len() == 16
                && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            stem
        }
        _ => name,
    }
}

/// One row, before it is laid out.
struct Row<'a> {
    entry: &'a Entry,
    state: &'static str,
    pid: String,
    owner: String,
    age: String,
    size: String,
    site: String,
    path: String,
    command: String,
    notes: Vec<String>,
}

/// What COMMAND shows: the lease lock's holder as `/proc` names it
/// (`comm`); when that holder is the process the record names and its
/// `comm` is the start of the record's program, the record's command line
/// (shortened by [`program`]), which says more than 15 characters of
/// `comm`; where nobody holds the lock, the record's command line marked
/// `record:` (a claim).
fn command(e: &Entry, limit: usize) -> (String, String) {
    let holders = e.lock_holders();
    match (holders.first(), &e.lease) {
        (Some(&pid), lease) => {
            let more = if holders.len() > 1 { "+" } else { "" };
            let comm = e.holder_comm(pid);
            let shown = match (comm, lease) {
                (Some(c), Some(l)) if corroborated(e, l, c) => Untrusted::text(&program(&l.cmd))
                    .bare()
                    .max_chars(limit)
                    .to_string(),
                (Some(c), _) => Untrusted::text(c).bare().max_chars(limit).to_string(),
                (None, _) => "?".to_owned(),
            };
            (format!("{pid}{more}"), shown)
        }
        (None, Some(l)) => {
            let pid = if e.check_record_pid(l) == PidCheck::RunningSameStart {
                l.pid.to_string()
            } else {
                "-".to_owned()
            };
            let label = "record: ";
            // The label does not count against the narrowest cut.
            let width = limit
                .min(claims::TABLE_FIELD)
                .saturating_sub(label.len())
                .max(COMMAND_MIN);
            let program = program(&l.cmd);
            let claimed = Untrusted::text(&program).max_chars(width);
            (pid, format!("{label}{claimed}"))
        }
        (None, None) => ("-".into(), "(invalid lease)".into()),
    }
}

/// Whether the record's command line may stand for the lock holder: the
/// record names the holder's pid, and the holder's `comm` (the kernel's
/// first 15 bytes of its program's name) is the start of the record's
/// program name.
fn corroborated(e: &Entry, l: &LeaseRecord, comm: &str) -> bool {
    let Some(first) = l.cmd.first() else {
        return false;
    };
    let name = first.rsplit('/').next().unwrap_or(first);
    e.check_record_pid(l) == PidCheck::HoldsLock && !comm.is_empty() && name.starts_with(comm)
}

/// One line per managed sandbox, or `no sandboxes under ROOT, …` when
/// there is none.
///
/// Facts and claims are kept apart: OWNER is the directory's real owner;
/// PID is the lease lock's holder as `/proc` shows it, and COMMAND what
/// [`command`] says; SITE is the record's `file:line` (a claim). STATE is
/// `kept` for an orphaned sandbox kept on purpose, with until when in a
/// note; a record whose uid is not the owner's gets a note saying so. AGE
/// is the time since the newest change inside. COMMAND comes last and is
/// cut to what is left of `width` (the terminal's), never below
/// [`COMMAND_MIN`] characters; without a width, at [`COMMAND_UNBOUNDED`].
pub fn table(report: &Report, width: Option<usize>) -> String {
    let now = report.started_ms;
    let roots = opened(report);
    let mut rows = Vec::new();
    for (root, e) in managed(report) {
        let mut notes = Vec::new();
        if let Some(until) = kept_until(e, now) {
            notes.push(crate::humanize::kept_until(until, now));
        }
        if let Some(note) = e.lease.as_ref().and_then(|l| claims::uid_mismatch(e, l)) {
            notes.push(note);
        }
        if let Some(o) = roots
            .get(root)
            .and_then(|r| super::origin::of(r.as_ref(), e))
        {
            notes.push(format!("made by {}", super::origin::line(&o)));
        }
        let (pid, command) = command(e, COMMAND_UNBOUNDED);
        rows.push(Row {
            entry: e,
            state: state_word(e, now),
            pid,
            owner: Untrusted::text(&claims::user_short(e.uid))
                .bare()
                .max_chars(10)
                .to_string(),
            age: e
                .newest_mtime_ms
                .map_or("-".into(), |m| age(now.saturating_sub(m))),
            size: size(e.disk_bytes),
            site: e
                .lease
                .as_ref()
                .and_then(|l| l.site.as_deref())
                .map_or("-".into(), |s| {
                    Untrusted::text(s).bare().max_chars(SITE_MAX).to_string()
                }),
            path: Untrusted::path(&root.join(&e.name)).to_string(),
            command,
            notes,
        });
    }
    if rows.is_empty() {
        let roots: Vec<String> = report
            .roots
            .iter()
            .map(|r| Untrusted::path(&r.path).to_string())
            .collect();
        return format!("no sandboxes under {}\n", roots.join(", "));
    }
    let chars = |s: &str| s.chars().count();
    let path_w = rows
        .iter()
        .map(|r| chars(&r.path))
        .max()
        .unwrap_or(4)
        .max(4);
    let site_w = rows
        .iter()
        .map(|r| chars(&r.site))
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>7} {:<10} {:>6} {:>10}  {:<path_w$}  {:<site_w$}  COMMAND",
        "STATE", "PID", "OWNER", "AGE", "SIZE", "PATH", "SITE"
    );
    for row in &rows {
        let mut line = format!(
            "{:<8} {:>7} {:<10} {:>6} {:>10}  {:<path_w$}  {:<site_w$}  ",
            row.state, row.pid, row.owner, row.age, row.size, row.path, row.site
        );
        let notes = if row.notes.is_empty() {
            String::new()
        } else {
            format!("  [{}]", row.notes.join("; "))
        };
        match width {
            // Cut for the terminal, now that the columns' widths are known.
            Some(w) => {
                let left = w
                    .saturating_sub(chars(&line) + chars(&notes))
                    .max(COMMAND_MIN);
                line.push_str(&command(row.entry, left).1);
            }
            None => line.push_str(&row.command),
        }
        line.push_str(&notes);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The `sandkeeper.ls/v1` document: `{"schema", "roots", "sandboxes"}`
/// (docs/ls-json.md).
pub fn json(report: &Report) -> String {
    let now = report.started_ms;
    let roots_opened = opened(report);
    let items: Vec<Value> = managed(report)
        .map(|(root, e)| {
            let mut o = Map::new();
            path_field(&mut o, "path", root.join(&e.name).as_os_str());
            o.insert("state".into(), e.state.as_str().into());
            o.insert("kept_until_ms".into(), json!(kept_until(e, now)));
            o.insert("uid".into(), e.uid.into());
            o.insert("disk_bytes".into(), e.disk_bytes.into());
            o.insert("newest_mtime_ms".into(), json!(e.newest_mtime_ms));
            let holders: Vec<Value> = e
                .lock_holders()
                .iter()
                .map(|&pid| json!({"pid": pid, "comm": e.holder_comm(pid)}))
                .collect();
            o.insert("lock_holders".into(), holders.into());
            o.insert(
                "lease".into(),
                e.lease
                    .as_deref()
                    .map_or(json!({"invalid": true}), lease_json),
            );
            if let Some(origin) = roots_opened
                .get(root)
                .and_then(|r| super::origin::of(r.as_ref(), e))
            {
                o.insert("origin".into(), json!(origin));
            }
            Value::Object(o)
        })
        .collect();
    let roots: Vec<Value> = report
        .roots
        .iter()
        .map(|r| {
            let mut o = Map::new();
            path_field(&mut o, "path", r.path.as_os_str());
            Value::Object(o)
        })
        .collect();
    let mut text = escape::json_pretty(&json!({
        "schema": "sandkeeper.ls/v1",
        "started_ms": now,
        "roots": roots,
        "sandboxes": items,
    }));
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs() {
        let s = |v: &[&str]| v.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        let cases: [(&[&str], &str); 6] = [
            (
                &[
                    "/w/target/debug/deps/cli-0123456789abcdef",
                    "--exact",
                    "scan::x",
                ],
                "cli --exact scan::x",
            ),
            (&["/usr/sbin/sshd", "-D"], "sshd -D"),
            (&["cargo"], "cargo"),
            (&["app-0123456789abcdeg"], "app-0123456789abcdeg"),
            (&["-0123456789abcdef"], "-0123456789abcdef"),
            (&[], ""),
        ];
        for (cmd, want) in cases {
            assert_eq!(program(&s(cmd)), want, "{cmd:?}");
        }
    }
}
