//! `sandkeeper.ls/v1`: the managed sandboxes of a scan (docs/ls-json.md).

use serde_json::{json, Map, Value};

use super::scan::{origin_of, reopened};
use super::{lease_value, path_field, pretty};
use crate::scan::Report;

/// The `sandkeeper.ls/v1` document (`sandkeeper ls --json`;
/// docs/ls-json.md): `{"schema", "started_ms", "roots", "sandboxes"}`,
/// one object per managed entry (one with a lease record, valid or not),
/// with the lease lock's holders as `/proc` names them (facts) beside the
/// record (claims).
///
/// ```
/// # let dir = sandkeeper_engine::Sandbox::new()?;
/// # let roots = [sandkeeper_engine::root::Root::open(dir.path())?];
/// let report = sandkeeper_engine::scan::Scanner::new().scan_roots(&roots)?;
/// let doc: serde_json::Value = serde_json::from_str(&sandkeeper_engine::json::ls(&report))?;
/// assert_eq!(doc["schema"], "sandkeeper.ls/v1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn ls(report: &Report) -> String {
    let now = report.started_ms;
    let mut items = Vec::new();
    let mut roots = Vec::new();
    for root in &report.roots {
        let mut o = Map::new();
        path_field(&mut o, "path", root.path.as_os_str());
        roots.push(Value::Object(o));
        let opened = reopened(root);
        let fd = opened.as_ref().map(crate::root::Root::fd);
        for e in root.entries.iter().filter(|e| e.is_managed()) {
            let mut o = Map::new();
            path_field(&mut o, "path", root.path.join(&e.name).as_os_str());
            o.insert("state".into(), e.state.as_str().into());
            o.insert("kept_until_ms".into(), json!(e.kept_by_default(now)));
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
                    .map_or(json!({"invalid": true}), lease_value),
            );
            if let Some(origin) = origin_of(e, fd) {
                o.insert("origin".into(), origin);
            }
            items.push(Value::Object(o));
        }
    }
    let mut text = pretty(&json!({
        "schema": "sandkeeper.ls/v1",
        "started_ms": now,
        "roots": roots,
        "sandboxes": items,
    }));
    text.push('\n');
    text
}
