//! Origin lines (issue 17): who made an entry, as `watch` or `run`
//! recorded it. Every field is text a user's process chose: escaped and
//! bounded here; origins are shown, never used to decide.

use std::collections::HashMap;
use std::ffi::OsStr;

use sandkeeper::origin::{self, Creator, Origin};
use sandkeeper::root::Root;
use sandkeeper::scan::RootReport;

use super::escape::Untrusted;

/// The most argv elements shown in a summary.
const ARGS: usize = 4;
/// The most characters of one field shown.
const FIELD: usize = 60;
/// The most creators named per family; the rest are counted.
const PER_FAMILY: usize = 3;

/// The root of `report`, opened again to read origins (`None`: it cannot
/// be, or the caller is not root and could not read `trusted.*` anyway).
pub fn open(report: &RootReport) -> Option<Root> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    Root::open_exact(&report.path).ok()
}

/// The origin of the entry `name` of `root`.
pub fn of(root: Option<&Root>, name: &OsStr) -> Option<Origin> {
    origin::read(root?.fd(), name)
}

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

/// What groups entries under one creator: its command, unit and cwd (not
/// the pid: every run of a suite has its own).
fn key(o: &Origin) -> String {
    match &o.creator {
        Creator::Process(p) => {
            let mut s = format!("`{}`", argv(&p.argv));
            let mut paren = Vec::new();
            if let Some(unit) = p.unit() {
                paren.push(format!("unit {}", text(unit)));
            } else if let Some(cg) = &p.cgroup {
                paren.push(format!("cgroup {}", text(cg)));
            }
            if let Some(cwd) = &p.cwd {
                paren.push(format!("cwd {}", text(cwd)));
            }
            if !paren.is_empty() {
                s += &format!(" ({})", paren.join(", "));
            }
            s
        }
        Creator::Exited { .. } => "a process that exited before it could be read".into(),
        Creator::Unknown { reason } => format!("unknown ({})", text(reason)),
        _ => "unknown".into(),
    }
}

/// One line for `explain` and `ls`: "`cargo test` (pid 42, uid 1000,
/// unit ci.service, cwd /src; parent `bash ci.sh`), recorded by watch".
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
            let parent = match p.parent_argv.is_empty() {
                true => String::new(),
                false => format!("; parent `{}`", argv(&p.parent_argv)),
            };
            format!(
                "`{}` ({}{parent}), recorded by {by}",
                argv(&p.argv),
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

/// Per family of `report` (by pattern), its entries grouped by creator,
/// biggest first: "made by `cargo test` (unit ci.service, cwd /src): 159
/// entries, 9.9 GiB". Families with no recorded origin have no lines.
pub fn by_family(report: &RootReport, root: Option<&Root>) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    let Some(root) = root else {
        return out;
    };
    // family -> creator -> (entries, bytes)
    let mut tally: HashMap<&str, HashMap<String, (u64, u64)>> = HashMap::new();
    for e in &report.entries {
        let Some(o) = origin::read(root.fd(), &e.name) else {
            continue;
        };
        let slot = tally
            .entry(&*e.pattern)
            .or_default()
            .entry(key(&o))
            .or_default();
        slot.0 += 1;
        slot.1 += e.disk_bytes;
    }
    for (family, creators) in tally {
        let mut creators: Vec<(String, (u64, u64))> = creators.into_iter().collect();
        creators.sort_by(|a, b| {
            b.1 .1
                .cmp(&a.1 .1)
                .then(b.1 .0.cmp(&a.1 .0))
                .then(a.0.cmp(&b.0))
        });
        let mut lines: Vec<String> = creators
            .iter()
            .take(PER_FAMILY)
            .map(|(who, (n, bytes))| {
                let noun = if *n == 1 { "entry" } else { "entries" };
                format!(
                    "made by {who}: {n} {noun}, {}",
                    crate::humanize::size(*bytes)
                )
            })
            .collect();
        if creators.len() > PER_FAMILY {
            lines.push(format!(
                "and {} other creators",
                creators.len() - PER_FAMILY
            ));
        }
        out.insert(family.to_owned(), lines);
    }
    out
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
            let _ = writeln!(out, "    pid: {}", p.pid);
            let _ = writeln!(
                out,
                "    command: {}{}",
                full(&p.argv),
                if p.argv_truncated { " …" } else { "" }
            );
            let field = |v: &Option<String>| {
                v.as_deref()
                    .map_or("-".into(), |s| Untrusted::text(s).to_string())
            };
            let _ = writeln!(out, "    executable: {}", field(&p.exe));
            let _ = writeln!(out, "    cwd: {}", field(&p.cwd));
            let _ = writeln!(
                out,
                "    uid: {}",
                p.uid.map_or("-".into(), |u| u.to_string())
            );
            let _ = writeln!(out, "    cgroup: {}", field(&p.cgroup));
            let _ = writeln!(
                out,
                "    parent: {} {}",
                p.ppid.map_or("-".into(), |u| format!("pid {u}")),
                full(&p.parent_argv)
            );
        }
        _ => {
            let _ = writeln!(out, "    {}", line(o));
        }
    }
}
