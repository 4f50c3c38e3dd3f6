//! `sandkeeper.run/v1`: what one `sandkeeper run` left
//! (docs/run-json.md).

use std::ffi::OsString;

use serde_json::{json, Map, Value};

use super::{path_field, pretty};
use crate::run::{Fate, RunOutcome};
use crate::supervise::Exit;

/// The `sandkeeper.run/v1` document (`sandkeeper run --report-json`;
/// docs/run-json.md): what `command` left, and what became of its
/// directory.
pub fn run(command: &[OsString], outcome: &RunOutcome) -> String {
    let o = outcome;
    let mut m = Map::new();
    m.insert("schema".into(), "sandkeeper.run/v1".into());
    m.insert(
        "command".into(),
        command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .into(),
    );
    path_field(&mut m, "dir", o.dir.as_os_str());
    let (code, signal) = match o.exit {
        Exit::Code(c) => (Some(c), None),
        Exit::Signal(s) => (None, Some(s)),
    };
    m.insert("exit_code".into(), json!(code));
    m.insert("signal".into(), json!(signal));
    m.insert(
        "left".into(),
        json!({
            "entries": o.leftovers.entries,
            "disk_bytes": o.leftovers.disk_bytes,
            "families": o.leftovers.families.iter().map(|f| json!({"pattern": f.pattern, "count": f.count, "disk_bytes": f.disk_bytes})).collect::<Vec<_>>(),
        }),
    );
    m.insert("kept".into(), o.kept.into());
    let replaced = match o.fate {
        Fate::Replaced { by, .. } => Some(by.as_str()),
        _ => None,
    };
    m.insert("replaced".into(), json!(replaced));
    m.insert("moved_away".into(), o.fate.moved_away().into());
    m.insert("descendants_stopped".into(), o.stopped.signalled.into());
    m.insert("descendants_killed".into(), o.stopped.killed.into());
    let error = o.cleanup.failure().map(|(reason, _)| reason);
    m.insert(
        "cleanup".into(),
        json!({"complete": error.is_none(), "error": error}),
    );
    let mut text = pretty(&Value::Object(m));
    text.push('\n');
    text
}
