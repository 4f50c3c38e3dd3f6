//! What `sandkeeper report` says: the tests that leaked, worst first, and
//! the `--json` document (schema `sandkeeper.report/v1`,
//! docs/report-json.md).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::leaks::{ReadLimit, ReadRecords, Summary, TestLeaks};
use crate::run::LeftoverFamily;

use crate::escape::sanitize;
use crate::escape::Untrusted;
use crate::human::size;

/// Families shown per test in the text.
const SHOWN_FAMILIES: usize = 3;

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A test's name for a terminal: every byte escaped, at most 200 characters.
fn label(t: &TestLeaks) -> String {
    Untrusted::text(&t.label())
        .bare()
        .max_chars(200)
        .to_cow()
        .into_owned()
}

fn families(fams: &[LeftoverFamily], omitted: u64) -> String {
    let mut shown: Vec<String> = fams
        .iter()
        .take(SHOWN_FAMILIES)
        .map(|f| {
            format!(
                "{} {} {}",
                Untrusted::text(&f.pattern).max_chars(80).to_cow(),
                f.count,
                size(f.disk_bytes)
            )
        })
        .collect();
    let more = (fams.len().saturating_sub(SHOWN_FAMILIES) as u64).saturating_add(omitted);
    if more > 0 {
        shown.push(format!("{} more", plural(more, "family", "families")));
    }
    shown.join(", ")
}

/// The text: one line per leaking test, worst first, then a total; or
/// one line saying nothing leaked.
pub fn text(summary: &Summary) -> String {
    let mut out = String::new();
    for t in &summary.leaking {
        let mut parts = Vec::new();
        if t.entries > 0 {
            parts.push(format!(
                "{}, {} ({})",
                plural(t.entries, "entry", "entries"),
                size(t.disk_bytes),
                families(&t.families, t.families_omitted)
            ));
        }
        if t.daemons > 0 {
            parts.push(format!("{} killed", plural(t.daemons, "daemon", "daemons")));
        }
        let runs = if t.runs > 1 {
            format!(" [{} runs]", t.runs)
        } else {
            String::new()
        };
        out.push_str(&format!("{}: {}{runs}\n", label(t), parts.join("; ")));
    }
    if summary.leaking.is_empty() {
        out.push_str(&format!(
            "no test leaked: {} in {}, nothing left in TMPDIR, no daemons\n",
            plural(summary.tests, "test", "tests"),
            plural(summary.runs, "run", "runs")
        ));
    } else {
        out.push_str(&format!(
            "{} of {} leaked: {}, {}; {} (in {})\n",
            summary.leaking.len(),
            plural(summary.tests, "test", "tests"),
            plural(summary.entries, "entry", "entries"),
            size(summary.disk_bytes),
            plural(summary.daemons, "daemon", "daemons"),
            plural(summary.runs, "run", "runs")
        ));
    }
    out
}

/// The warnings: unusable records, a truncated read, an empty directory.
pub fn warnings(dir: &Path, read: &ReadRecords) -> Vec<String> {
    let dir = sanitize(dir.as_os_str().as_bytes());
    let mut out: Vec<String> = read
        .problems
        .iter()
        .map(|p| {
            format!(
                "skipped record {}: {}",
                Untrusted::os(&p.name).max_chars(120).to_cow(),
                Untrusted::text(&p.reason).bare().max_chars(300).to_cow()
            )
        })
        .collect();
    let unlisted = read
        .problem_count
        .saturating_sub(read.problems.len() as u64);
    if unlisted > 0 {
        out.push(format!(
            "skipped {} in {dir}",
            crate::human::plural(unlisted, "more unusable record", "more unusable records")
        ));
    }
    if read.hard_links_skipped > 0 {
        out.push(format!(
            "skipped {} to records already read in {dir}: each record is counted once (`run` makes no links; whoever can write {dir} did)",
            crate::human::plural(
                read.hard_links_skipped,
                "hard link",
                "hard links"
            )
        ));
    }
    let not_read = crate::human::plural(read.not_read, "record file", "record files");
    match read.limit {
        Some(ReadLimit::Records) => out.push(format!(
            "read only the first {} records of {dir}: {not_read} not read, the summary is partial",
            crate::leaks::MAX_RECORDS
        )),
        Some(ReadLimit::Bytes) => out.push(format!(
            "stopped reading {dir} after {} of records (the limit, {}): {not_read} not read, the summary is partial",
            size(read.bytes_read),
            size(crate::leaks::MAX_TOTAL_BYTES)
        )),
        _ => {}
    }
    if read.records.is_empty() && read.problem_count == 0 {
        out.push(format!(
            "no records in {dir}: did the tests run under `sandkeeper run --nextest` (docs/nextest.md) or `--report-dir {dir}`? (under `--nextest`, a test that wrote none says why on its stderr)"
        ));
    }
    out
}
