//! `sandkeeper.reap/v1`: what a reap removed, kept and could not remove.

use serde_json::{json, Map, Value};

use super::path_field;
use crate::reap::ReapReport;

/// The JSON schema name.
pub const REAP_SCHEMA: &str = "sandkeeper.reap/v1";

/// The document of `report`, pretty and safe to print ([`super::pretty`]).
///
/// ```
/// let dir = sandkeeper_engine::Sandbox::new()?;
/// let policy = sandkeeper_engine::reap::Policy::builder().dry_run(true).build()?;
/// let report = sandkeeper_engine::reap::Reaper::new(policy).reap(&[dir.path()])?;
/// let doc: serde_json::Value = serde_json::from_str(&sandkeeper_engine::json::reap(&report))?;
/// assert_eq!(doc["schema"], sandkeeper_engine::json::REAP_SCHEMA);
/// assert_eq!(doc["dry_run"], true);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn reap(report: &ReapReport) -> String {
    let mut removed = Vec::new();
    let mut skipped = Vec::new();
    let mut errors = Vec::new();
    let mut roots = Vec::new();
    for root in &report.roots {
        for r in &root.removed {
            let mut o = Map::new();
            path_field(&mut o, "path", r.path.as_os_str());
            o.insert("pattern".into(), (*r.pattern).into());
            o.insert("state".into(), r.state.as_str().into());
            o.insert("reason".into(), r.reason.to_string().into());
            o.insert("disk_bytes".into(), r.disk_bytes.into());
            removed.push(Value::Object(o));
        }
        for s in &root.skipped {
            let mut o = Map::new();
            path_field(&mut o, "path", s.path.as_os_str());
            o.insert("state".into(), s.state.as_str().into());
            o.insert("reason".into(), s.reason.to_string().into());
            o.insert("reason_code".into(), s.reason.as_str().into());
            if let crate::reap::KeepReason::KeptUntil(ms) = s.reason {
                o.insert("kept_until_ms".into(), ms.into());
            }
            o.insert("disk_bytes".into(), s.disk_bytes.into());
            skipped.push(Value::Object(o));
        }
        for e in &root.errors {
            let mut o = Map::new();
            path_field(&mut o, "path", e.path.as_os_str());
            o.insert("error".into(), e.error.clone().into());
            errors.push(Value::Object(o));
        }
        let mut o = Map::new();
        path_field(&mut o, "path", root.path.as_os_str());
        o.insert("freed_bytes".into(), root.freed_bytes.into());
        o.insert(
            "quarantine_finished".into(),
            root.quarantine_finished.into(),
        );
        o.insert(
            "quarantine_rechecked".into(),
            root.quarantine_rechecked.into(),
        );
        o.insert(
            "target".into(),
            root.target.map_or(Value::Null, |t| {
                json!({
                    "want_free_bytes": t.want_free_bytes,
                    "want_free_inodes": t.want_free_inodes,
                    "free_bytes": t.free_bytes,
                    "free_inodes": t.free_inodes,
                    "met": t.met,
                })
            }),
        );
        roots.push(Value::Object(o));
    }
    let doc = json!({
        "schema": REAP_SCHEMA,
        "dry_run": report.dry_run,
        "removed": removed,
        "skipped": skipped,
        "errors": errors,
        "freed_bytes": report.freed_bytes(),
        "roots": roots,
        "assumed_blind_spots": super::scan::assumed_blind_spots(&report.scan),
        "assumes_unseen_free": report.scan.assumes_unseen_free,
    });
    let mut text = super::pretty(&doc);
    text.push('\n');
    text
}
