//! `sandkeeper.scan/v1`: what a scan found, per root, family and entry.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Map, Value};

use super::{bytes_field, holder_value, kernel_value, lease_value, path_field};
use crate::inuse::{BlindSpot, Uninspectable};
use crate::scan::{
    CreatorKey, Creators, Entry, EntryCount, EntryState, Group, Report, RootReport, StateCounts,
    Totals,
};

/// The JSON schema name; bump on incompatible changes only.
pub const SCAN_SCHEMA: &str = "sandkeeper.scan/v1";

/// The document of `report`, pretty and safe to print ([`super::pretty`]);
/// `entries` adds every entry of every root. Entries are serialized as
/// they are written, not gathered into a JSON tree first: memory stays at
/// the size of the text. To write the document as the scan goes, in
/// memory flat in the number of entries, see [`write_scan`](super::write_scan).
///
/// ```
/// let dir = sandkeeper_engine::Sandbox::new()?;
/// let report = sandkeeper_engine::scan::Scanner::new().scan(&[dir.path()])?;
/// let doc: serde_json::Value = serde_json::from_str(&sandkeeper_engine::json::scan(&report, true))?;
/// assert_eq!(doc["schema"], sandkeeper_engine::json::SCAN_SCHEMA);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn scan(report: &Report, entries: bool) -> String {
    let doc = Document {
        started_ms: report.started_ms,
        roots: report
            .roots
            .iter()
            .map(|root| RootJson {
                root,
                entries,
                now_ms: report.started_ms,
            })
            .collect::<Vec<_>>(),
        wide: Wide {
            uninspectable: &report.uninspectable,
            assumed: &report.assumed,
            blind_spots: &report.blind_spots,
            assumed_blind_spots: &report.assumed_blind_spots,
            assumes_unseen_free: report.assumes_unseen_free,
        },
    };
    let mut text = super::pretty(&doc);
    text.push('\n');
    text
}

/// The document: its schema and time, `roots` (whatever serializes them:
/// a collected report's, or a scan under way), and what is report-wide.
pub(super) struct Document<'a, R> {
    pub(super) started_ms: i64,
    pub(super) roots: R,
    pub(super) wide: Wide<'a>,
}

/// What the in-use pass could not see or was told to assume: the
/// report-wide fields.
pub(super) struct Wide<'a> {
    pub(super) uninspectable: &'a [Uninspectable],
    pub(super) assumed: &'a [Uninspectable],
    pub(super) blind_spots: &'a [BlindSpot],
    pub(super) assumed_blind_spots: &'a [BlindSpot],
    pub(super) assumes_unseen_free: bool,
}

impl<R: Serialize> Serialize for Document<'_, R> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let process =
            |u: &Uninspectable| json!({"pid": u.pid, "comm": u.comm, "reason": u.to_string()});
        let wide = &self.wide;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("schema", SCAN_SCHEMA)?;
        m.serialize_entry("started_ms", &self.started_ms)?;
        m.serialize_entry("roots", &self.roots)?;
        let uninspectable: Vec<Value> = wide.uninspectable.iter().map(process).collect();
        m.serialize_entry("uninspectable", &uninspectable)?;
        let assumed: Vec<Value> = wide.assumed.iter().map(process).collect();
        m.serialize_entry("assumed", &assumed)?;
        let blind: Vec<String> = wide.blind_spots.iter().map(ToString::to_string).collect();
        m.serialize_entry("blind_spots", &blind)?;
        let assumed_blind: Vec<String> = wide
            .assumed_blind_spots
            .iter()
            .map(|b| format!("{b:#}"))
            .collect();
        m.serialize_entry("assumed_blind_spots", &assumed_blind)?;
        m.serialize_entry("assumes_unseen_free", &wide.assumes_unseen_free)?;
        m.end()
    }
}

/// A collected root: `path`, the summary ([`summary`]), `entries` when
/// asked for, `warnings`.
pub(super) struct RootJson<'a> {
    pub(super) root: &'a RootReport,
    pub(super) entries: bool,
    /// When the scan started: what "kept" is judged at.
    pub(super) now_ms: i64,
}

impl Serialize for RootJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let root = self.root;
        let mut m = s.serialize_map(None)?;
        path(&mut m, &root.path)?;
        summary(&mut m, root)?;
        if self.entries {
            let opened = reopened(root);
            let fd = opened.as_ref().map(crate::root::Root::fd);
            let entries: Vec<EntryJson<'_>> = root
                .entries
                .iter()
                .map(|e| EntryJson(e, self.now_ms, fd))
                .collect();
            m.serialize_entry("entries", &entries)?;
        }
        m.serialize_entry("warnings", &root.warnings)?;
        m.end()
    }
}

/// Origins (optional, `docs/origins.md`) are given as the scan read them;
/// for a scan that did not, they are read per entry through the root
/// opened again (this), never by a path below it. `None` where the scan
/// read them, or they cannot be read here.
pub(super) fn reopened(root: &RootReport) -> Option<crate::root::Root> {
    match cfg!(target_os = "linux") && !root.origins_read {
        true => crate::root::Root::open_exact(&root.path).ok(),
        false => None,
    }
}

/// A root's `path` (and `path_base64`).
pub(super) fn path<M: SerializeMap>(m: &mut M, path: &Path) -> Result<(), M::Error> {
    let mut obj = Map::new();
    path_field(&mut obj, "path", path.as_os_str());
    for (k, v) in &obj {
        m.serialize_entry(k, v)?;
    }
    Ok(())
}

/// What a root's walk sums up: `filesystem`, `totals`, `groups`.
pub(super) fn summary<M: SerializeMap>(m: &mut M, root: &RootReport) -> Result<(), M::Error> {
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
    m.serialize_entry("groups", &groups)
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
    let mut v = json!({
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
        "kept": g.kept,
    });
    if let (Some(c), Value::Object(m)) = (&g.creators, &mut v) {
        m.insert("creators".into(), creators_json(c));
    }
    v
}

/// A family's members by creator (`docs/scan-json.md`): the tallied
/// creators, biggest first, then `other` for the rest.
fn creators_json(c: &Creators) -> Value {
    let count = |n: &EntryCount, m: &mut Map<String, Value>| {
        m.insert("count".into(), n.entries.into());
        m.insert("disk_bytes".into(), n.disk_bytes.into());
    };
    let mut out: Vec<Value> = Vec::with_capacity(c.top.len() + 1);
    for t in &c.top {
        let mut m = Map::new();
        match &*t.creator {
            CreatorKey::Process {
                name,
                command,
                more_args,
                unit,
                cgroup,
                cwd,
            } => {
                m.insert("kind".into(), "process".into());
                m.insert("name".into(), json!(name));
                m.insert("command".into(), json!(command));
                m.insert("more_args".into(), (*more_args).into());
                m.insert("unit".into(), json!(unit));
                m.insert("cgroup".into(), json!(cgroup));
                m.insert("cwd".into(), json!(cwd));
            }
            CreatorKey::Exited => {
                m.insert("kind".into(), "exited".into());
            }
            _ => {
                m.insert("kind".into(), "unknown".into());
            }
        }
        count(&t.count, &mut m);
        out.push(Value::Object(m));
    }
    if c.other.entries > 0 {
        let mut m = Map::new();
        m.insert("kind".into(), "other".into());
        count(&c.other, &mut m);
        out.push(Value::Object(m));
    }
    Value::Array(out)
}

/// An entry; the scan's start (what "kept" is judged at); the root's
/// descriptor when the entry's origin is to be read here (the scan did not).
pub(super) struct EntryJson<'a>(
    pub(super) &'a Entry,
    pub(super) i64,
    pub(super) Option<std::os::fd::BorrowedFd<'a>>,
);

impl Serialize for EntryJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut m = s.serialize_map(None)?;
        let mut name = Map::new();
        bytes_field(&mut name, "name", e.name.as_bytes());
        for (k, v) in &name {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry("pattern", &*e.pattern)?;
        m.serialize_entry("state", e.state.as_str())?;
        m.serialize_entry("reason", &e.reason.to_string())?;
        m.serialize_entry("disk_bytes", &e.disk_bytes)?;
        m.serialize_entry("apparent_bytes", &e.apparent_bytes)?;
        m.serialize_entry("files", &e.files)?;
        m.serialize_entry("dirs", &e.dirs)?;
        m.serialize_entry("newest_mtime_ms", &e.newest_mtime_ms)?;
        m.serialize_entry("uid", &e.uid)?;
        let mut holders: Vec<Value> = e.holders.iter().map(holder_value).collect();
        holders.extend(e.kernel.iter().map(kernel_value));
        holders.extend(e.sockets.iter().map(|sock| {
            let mut o = Map::new();
            o.insert("kernel".into(), "unix socket".into());
            path_field(&mut o, "path", sock.as_os_str());
            Value::Object(o)
        }));
        m.serialize_entry("holders", &holders)?;
        let lease = match (&e.lease, e.lease_invalid) {
            (Some(record), _) => lease_value(record),
            (None, true) => json!({"invalid": true}),
            (None, false) => Value::Null,
        };
        m.serialize_entry("lease", &lease)?;
        m.serialize_entry("kept_until_ms", &e.kept_by_default(self.1))?;
        if let Some(origin) = origin_of(e, self.2) {
            m.serialize_entry("origin", &origin)?;
        }
        m.end()
    }
}

/// The origin of `e`: as the scan read it, else read through `fd`, its
/// root opened again ([`reopened`]).
#[cfg(target_os = "linux")]
pub(super) fn origin_of(e: &Entry, fd: Option<std::os::fd::BorrowedFd<'_>>) -> Option<Value> {
    match e.origin.as_deref() {
        Some(origin) => serde_json::to_value(origin).ok(),
        None => serde_json::to_value(crate::origin::read(fd?, &e.name)?).ok(),
    }
}

/// No origins off Linux.
#[cfg(not(target_os = "linux"))]
pub(super) fn origin_of(_: &Entry, _: Option<std::os::fd::BorrowedFd<'_>>) -> Option<Value> {
    None
}

/// The blind spots assumed away by trusting the pid namespace, as the JSON
/// documents give them (`assumed_blind_spots`).
pub(crate) fn assumed_blind_spots(report: &Report) -> Vec<String> {
    report
        .assumed_blind_spots
        .iter()
        .map(|b| format!("{b:#}"))
        .collect()
}
