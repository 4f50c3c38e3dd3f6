//! `ls` output: the managed sandboxes as a table (`--json` is the
//! library's [`crate::json::ls`]).

use std::fmt::Write as _;
use std::path::Path;

use crate::scan::{Entry, Held, HolderName, Report};

use super::claims;
use crate::escape::Untrusted;
use crate::human::{age, size};

fn managed(report: &Report) -> impl Iterator<Item = (&Path, &Entry)> {
    report
        .roots
        .iter()
        .flat_map(|r| r.entries.iter().map(move |e| (r.path.as_path(), e)))
        .filter(|(_, e)| e.is_managed())
}

/// The fewest characters COMMAND is cut to, however narrow the terminal.
const COMMAND_MIN: usize = 20;
/// How many characters COMMAND shows without a terminal width (a pipe, a
/// file): enough for a test binary's name and its arguments, few enough
/// that a line stays bounded whatever a record claims.
const COMMAND_UNBOUNDED: usize = 120;
/// The widest SITE column (a claim: `file:line`).
const SITE_MAX: usize = 40;

/// One row, before it is laid out.
struct Row {
    held: Held,
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

/// What PID and COMMAND show of who holds the sandbox
/// ([`Entry::held`]): the holder's pid (`+` when others hold the lock
/// too) and name; where nobody holds the lock, the record's command line
/// marked `record:` (a claim).
fn command(held: &Held, limit: usize) -> (String, String) {
    let shown = |text: &str| Untrusted::text(text).bare().max_chars(limit).to_string();
    match held {
        Held::Lock { pid, others, name } => {
            let more = if *others { "+" } else { "" };
            let name = match name {
                HolderName::Program(p) => shown(p),
                HolderName::Comm(c) => shown(c),
                _ => "?".to_owned(),
            };
            (format!("{pid}{more}"), name)
        }
        Held::Claimed { running, command } => {
            let label = "record: ";
            // The label does not count against the narrowest cut.
            let width = limit
                .min(claims::TABLE_FIELD)
                .saturating_sub(label.len())
                .max(COMMAND_MIN);
            let claimed = Untrusted::text(command).max_chars(width);
            let pid = running.map_or("-".to_owned(), |p| p.to_string());
            (pid, format!("{label}{claimed}"))
        }
        _ => ("-".into(), "(invalid lease)".into()),
    }
}

/// One line per managed sandbox, or `no sandboxes under ROOT, …` when
/// there is none.
///
/// Facts and claims are kept apart: OWNER is the directory's real owner;
/// PID and COMMAND are who holds it ([`Entry::held`]: the lease lock's
/// holder as `/proc` shows it, or the record's claim); SITE is the record's `file:line` (a claim). STATE is
/// `kept` for an orphaned sandbox kept on purpose, with until when in a
/// note; a record whose uid is not the owner's gets a note saying so. AGE
/// is the time since the newest change inside. COMMAND comes last and is
/// cut to what is left of `width` (the terminal's), never below
/// 20 characters; without a width, at 120.
pub fn table(report: &Report, width: Option<usize>) -> String {
    let now = report.started_ms;
    let mut rows = Vec::new();
    for (root, e) in managed(report) {
        let mut notes = Vec::new();
        if let Some(until) = e.kept_by_default(now) {
            notes.push(super::kept_until(until, now));
        }
        if let Some(note) = e.lease.as_ref().and_then(|l| claims::uid_mismatch(e, l)) {
            notes.push(note);
        }
        if let Some(o) = &e.origin {
            notes.push(format!("made by {}", super::origin::line(o)));
        }
        let held = e.held();
        let (pid, command) = command(&held, COMMAND_UNBOUNDED);
        rows.push(Row {
            held,
            state: e.state_word(now),
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
    // A column as wide as its widest cell, and at least its heading (4).
    let widest = |cell: fn(&Row) -> &str| rows.iter().map(|r| chars(cell(r))).fold(4, usize::max);
    let path_w = widest(|r| &r.path);
    let site_w = widest(|r| &r.site);
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
                line.push_str(&command(&row.held, left).1);
            }
            None => line.push_str(&row.command),
        }
        line.push_str(&notes);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
