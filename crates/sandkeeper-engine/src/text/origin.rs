//! Origin lines (issue 17): who made an entry, as `watch` or `run`
//! recorded it. Every field is text a user's process chose: escaped and
//! bounded here; origins are shown, never used to decide.

use crate::origin::{self, Creator, Origin};
use crate::scan::{CreatorKey, Creators};

use crate::escape::Untrusted;

/// The most argv elements shown in a summary.
const ARGS: usize = 4;
/// The most characters of one field shown.
const FIELD: usize = 60;
/// The most creators named per family; the rest are counted.
const PER_FAMILY: usize = 3;

fn text(s: &str) -> String {
    Untrusted::text(s).max_chars(FIELD).to_string()
}

fn argv(args: &[String]) -> String {
    let mut shown: Vec<String> = args.iter().take(ARGS).map(|a| text(a)).collect();
    if args.len() > ARGS {
        shown.push("…".into());
    }
    shown.join(" ")
}

/// What groups entries under one creator (as the scan tallies them), or
/// why it could not be read.
fn key(o: &Origin) -> String {
    match &o.creator {
        Creator::Unknown { reason } => format!("unknown ({})", text(reason)),
        _ => creator(&CreatorKey::of(o)),
    }
}

/// What a process is called in a line: its command when the record has
/// one (`sandkeeper run`'s), else its name.
fn called(p: &origin::Process) -> String {
    match (p.argv.is_empty(), p.name()) {
        (false, _) => argv(&p.argv),
        (true, Some(name)) => text(name),
        (true, None) => "?".into(),
    }
}

/// One line for `explain` and `ls` (run as root: nobody else can read a
/// record): "`cargo` (pid 42, uid 1000, cgroup /ci.service, cwd /src;
/// parent `bash`), recorded by watch".
pub fn line(o: &Origin) -> String {
    let by = match o.by {
        origin::Recorder::Run => "sandkeeper run",
        _ => "watch",
    };
    match &o.creator {
        Creator::Process(p) => {
            let mut facts = vec![format!("pid {}", p.pid)];
            if let Some(uid) = p.uid {
                facts.push(format!("uid {uid}"));
            }
            if let Some(cg) = &p.cgroup {
                facts.push(format!("cgroup {}", text(cg)));
            }
            if let Some(cwd) = &p.cwd {
                facts.push(format!("cwd {}", text(cwd)));
            }
            if let Some(exe) = &p.exe {
                facts.push(format!("exe {}", text(exe)));
            }
            let parent = match (&p.parent_comm, p.parent_argv.is_empty()) {
                (Some(name), _) => format!("; parent `{}`", text(name)),
                (None, false) => format!("; parent `{}`", argv(&p.parent_argv)),
                (None, true) => String::new(),
            };
            format!(
                "`{}` ({}{parent}), recorded by {by}",
                called(p),
                facts.join(", ")
            )
        }
        Creator::Exited { pid } => format!(
            "a process{} that exited before it could be read, recorded by {by}",
            pid.map_or(String::new(), |p| format!(" (pid {p})"))
        ),
        _ => format!("{}, recorded by {by}", key(o)),
    }
}

/// A tallied creator, escaped: "`cargo` (unit ci.service, cwd /src)"; a
/// `sandkeeper run`'s by its command, "`cargo test` (…)" (root's output:
/// nobody else can read a record).
pub fn creator(k: &CreatorKey) -> String {
    match k {
        CreatorKey::Process {
            name,
            command,
            more_args,
            unit,
            cgroup,
            cwd,
        } => {
            let mut shown: Vec<String> = command.iter().map(|a| text(a)).collect();
            if *more_args {
                shown.push("…".into());
            }
            if shown.is_empty() {
                shown.push(match name.is_empty() {
                    true => "?".into(),
                    false => text(name),
                });
            }
            let mut s = format!("`{}`", shown.join(" "));
            let mut paren = Vec::new();
            if let Some(unit) = unit {
                paren.push(format!("unit {}", text(unit)));
            } else if let Some(cg) = cgroup {
                paren.push(format!("cgroup {}", text(cg)));
            }
            if let Some(cwd) = cwd {
                paren.push(format!("cwd {}", text(cwd)));
            }
            if !paren.is_empty() {
                s += &format!(" ({})", paren.join(", "));
            }
            s
        }
        CreatorKey::Exited => "a process that exited before it could be read".into(),
        _ => "a creator that could not be read".into(),
    }
}

/// A family's members grouped by creator (the scan's tally), biggest
/// first: "made by `cargo test` (unit ci.service, cwd /src): 159 entries,
/// 9.9 GiB", at most `PER_FAMILY` (3) lines, then one "made by (other
/// creators)" line for the rest. No lines for a family without origins.
pub fn family_lines(creators: Option<&Creators>) -> Vec<String> {
    let Some(c) = creators else {
        return Vec::new();
    };
    let count = |n: u64, bytes: u64| {
        let noun = if n == 1 { "entry" } else { "entries" };
        format!("{n} {noun}, {}", crate::human::size(bytes))
    };
    let mut lines: Vec<String> = c
        .top
        .iter()
        .take(PER_FAMILY)
        .map(|t| {
            format!(
                "made by {}: {}",
                creator(&t.creator),
                count(t.count.entries, t.count.disk_bytes)
            )
        })
        .collect();
    let (mut n, mut bytes) = (c.other.entries, c.other.disk_bytes);
    for t in c.top.iter().skip(PER_FAMILY) {
        n += t.count.entries;
        bytes += t.count.disk_bytes;
    }
    if n > 0 {
        lines.push(format!("made by (other creators): {}", count(n, bytes)));
    }
    lines
}

/// `explain`'s origin section: every field, escaped (argv in full up to
/// the record's bounds).
pub fn detail(out: &mut String, o: &Origin) {
    use std::fmt::Write as _;
    let by = match o.by {
        origin::Recorder::Run => "sandkeeper run, for its command",
        _ => "watch, when it appeared",
    };
    let _ = writeln!(
        out,
        "  origin (recorded by {by}; what the creator's process showed):"
    );
    let full = |args: &[String]| {
        args.iter()
            .map(|a| Untrusted::text(a).to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    match &o.creator {
        Creator::Process(p) => {
            let field = |v: &Option<String>| {
                v.as_deref()
                    .map_or("-".into(), |s| Untrusted::text(s).to_string())
            };
            let _ = writeln!(out, "    pid: {}", p.pid);
            let _ = writeln!(out, "    name: {}", field(&p.comm));
            if !p.argv.is_empty() {
                let _ = writeln!(
                    out,
                    "    command: {}{}",
                    full(&p.argv),
                    if p.argv_truncated { " …" } else { "" }
                );
            }
            let _ = writeln!(out, "    executable: {}", field(&p.exe));
            let _ = writeln!(out, "    cwd: {}", field(&p.cwd));
            let _ = writeln!(
                out,
                "    uid: {}",
                p.uid.map_or("-".into(), |u| u.to_string())
            );
            let _ = writeln!(out, "    cgroup: {}", field(&p.cgroup));
            let parent = match &p.parent_comm {
                Some(name) => Untrusted::text(name).to_string(),
                None => full(&p.parent_argv),
            };
            let _ = writeln!(
                out,
                "    parent: {} {parent}",
                p.ppid.map_or("-".into(), |u| format!("pid {u}")),
            );
        }
        _ => {
            let _ = writeln!(out, "    {}", line(o));
        }
    }
}
