//! What `run` says at the end: its line, notes and warnings, and the
//! `--report-json` document, from the library's [`RunOutcome`].

use std::error::Error as _;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use sandkeeper_engine::run::{Cleanup, Fate, RunOutcome};
use sandkeeper_engine::supervise::Exit;
use serde_json::{json, Map, Value};

use super::path_field;
use crate::humanize::{duration, plural, sanitize, size};

/// The note `run` prints when the directory is not where it was made;
/// `None` when it is, or the command just removed it.
pub fn fate_note(fate: Fate, dir: &Path) -> Option<String> {
    let dir = sanitize(dir.as_os_str().as_bytes());
    let elsewhere = "the directory sandkeeper made was moved elsewhere and is not removed";
    match fate {
        Fate::MovedAway => Some(format!("TMPDIR {dir} was moved away; {elsewhere}")),
        Fate::Replaced { by, alive } => Some(format!(
            "TMPDIR {dir} was replaced by a {}; left it alone{}",
            by.as_str(),
            if alive {
                format!(" ({elsewhere})")
            } else {
                String::new()
            }
        )),
        _ => None,
    }
}

/// Why a cleanup failed: the library error's cause (which names what was
/// left and why), and its hint.
fn failure(cleanup: &Cleanup) -> Option<(String, Option<&str>)> {
    match cleanup {
        Cleanup::Failed(e) => Some((
            e.source()
                .map_or_else(|| e.to_string(), ToString::to_string),
            e.hint(),
        )),
        _ => None,
    }
}

/// The warning `run` prints after its leftover line, if any.
pub fn cleanup_warning(cleanup: &Cleanup, dir: &Path, kept: bool) -> Option<String> {
    let (reason, hint) = failure(cleanup)?;
    let what = if kept {
        "could not be marked kept"
    } else {
        "could not be removed completely"
    };
    Some(format!(
        "TMPDIR {} {what}: {}{}",
        sanitize(dir.as_os_str().as_bytes()),
        sanitize(reason.as_bytes()),
        hint.map(|h| format!("; {}", sanitize(h.as_bytes())))
            .unwrap_or_default()
    ))
}

/// How many families the leftover line names; the rest are summed up as
/// `and N more families (SIZE)`.
const SHOWN_FAMILIES: usize = 3;

/// Everything `run` says at the end.
pub struct RunReport<'a> {
    pub command: &'a [OsString],
    pub keep_for: Duration,
    pub outcome: &'a RunOutcome,
}

impl RunReport<'_> {
    /// The stderr line, when the command left something (or it was kept):
    /// `cargo left 3 entries (2.1 GiB: app-235-* 2.0 GiB, .tmp* 40 MiB) in TMPDIR; removed`;
    /// past three families, `…, and 5 more families (92 KiB)`.
    pub fn line(&self, name: &str) -> Option<String> {
        let o = self.outcome;
        let failed = !o.cleanup.is_done();
        if o.leftovers.entries == 0 && !o.kept && !failed {
            return None;
        }
        let fate = if failed && !o.kept {
            "not removed completely".to_owned()
        } else if o.kept {
            // The record says `now + keep_for`, written a moment ago.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let until =
                now.saturating_add(u64::try_from(self.keep_for.as_millis()).unwrap_or(u64::MAX));
            format!(
                "kept at {} until {} ({} from now)",
                sanitize(o.dir.as_os_str().as_bytes()),
                sandkeeper_engine::human::instant(until),
                duration(self.keep_for)
            )
        } else if matches!(o.fate, Fate::InPlace | Fate::Removed) {
            "removed".to_owned()
        } else {
            "not removed".to_owned()
        };
        if o.leftovers.entries == 0 {
            return Some(format!(
                "{} left nothing in TMPDIR; {fate}",
                sanitize(name.as_bytes())
            ));
        }
        let all = &o.leftovers.families;
        let mut families: Vec<String> = all
            .iter()
            .take(SHOWN_FAMILIES)
            .map(|f| format!("{} {}", sanitize(f.pattern.as_bytes()), size(f.disk_bytes)))
            .collect();
        if all.len() > SHOWN_FAMILIES {
            let rest = &all[SHOWN_FAMILIES..];
            families.push(format!(
                "and {} ({})",
                plural(rest.len() as u64, "more family", "more families"),
                size(rest.iter().map(|f| f.disk_bytes).sum())
            ));
        }
        Some(format!(
            "{} left {} ({}: {}) in TMPDIR; {fate}",
            sanitize(name.as_bytes()),
            plural(o.leftovers.entries, "entry", "entries"),
            size(o.leftovers.disk_bytes),
            families.join(", ")
        ))
    }

    /// The `--report-json` document (schema `sandkeeper.run/v1`).
    pub fn json(&self) -> String {
        let o = self.outcome;
        let mut m = Map::new();
        m.insert("schema".into(), "sandkeeper.run/v1".into());
        m.insert(
            "command".into(),
            self.command
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
        let error = failure(&o.cleanup).map(|(reason, _)| reason);
        m.insert(
            "cleanup".into(),
            json!({"complete": error.is_none(), "error": error}),
        );
        let mut text = serde_json::to_string_pretty(&Value::Object(m)).unwrap_or_default();
        text.push('\n');
        text
    }
}
