//! `sandkeeper.report/v1`: which tests leaked, from a directory of run
//! records (docs/report-json.md).

use std::path::Path;

use serde_json::{json, Map, Value};

use super::{path_field, pretty};
use crate::leaks::{ReadRecords, Summary};
use crate::run::LeftoverFamily;

fn family_value(f: &LeftoverFamily) -> Value {
    json!({"pattern": f.pattern, "count": f.count, "disk_bytes": f.disk_bytes})
}

/// The `sandkeeper.report/v1` document (`sandkeeper report --json`;
/// docs/report-json.md): the per-test summary of the run records in `dir`.
pub fn report(dir: &Path, read: &ReadRecords, summary: &Summary) -> String {
    let mut m = Map::new();
    m.insert("schema".into(), "sandkeeper.report/v1".into());
    path_field(&mut m, "dir", dir.as_os_str());
    m.insert("runs".into(), summary.runs.into());
    m.insert("tests".into(), summary.tests.into());
    m.insert(
        "leaking_tests".into(),
        (summary.leaking.len() as u64).into(),
    );
    m.insert("entries".into(), summary.entries.into());
    m.insert("disk_bytes".into(), summary.disk_bytes.into());
    m.insert("daemons".into(), summary.daemons.into());
    m.insert(
        "leaks".into(),
        summary
            .leaking
            .iter()
            .map(|t| {
                json!({
                    "binary_id": t.test.binary_id,
                    "test_name": t.test.test_name,
                    "command": t.command,
                    "runs": t.runs,
                    "failed_runs": t.failed_runs,
                    "entries": t.entries,
                    "disk_bytes": t.disk_bytes,
                    "families": t.families.iter().map(family_value).collect::<Vec<_>>(),
                    "families_omitted": t.families_omitted,
                    "daemons": t.daemons,
                    "daemons_killed": t.daemons_killed,
                })
            })
            .collect::<Vec<_>>()
            .into(),
    );
    m.insert(
        "unreadable".into(),
        read.problems
            .iter()
            .map(|p| json!({"name": p.name.to_string_lossy(), "reason": p.reason}))
            .collect::<Vec<_>>()
            .into(),
    );
    m.insert("unreadable_count".into(), read.problem_count.into());
    m.insert("truncated".into(), read.truncated.into());
    m.insert(
        "limit".into(),
        read.limit.map_or(Value::Null, |l| l.as_str().into()),
    );
    m.insert("not_read".into(), read.not_read.into());
    m.insert("hard_links_skipped".into(), read.hard_links_skipped.into());
    m.insert("bytes_read".into(), read.bytes_read.into());
    let mut text = pretty(&Value::Object(m));
    text.push('\n');
    text
}
