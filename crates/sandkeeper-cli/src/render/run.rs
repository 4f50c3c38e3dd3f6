//! What `run` says at the end: its line, notes and warnings, and the
//! `--report-json` document, from the library's [`RunOutcome`].

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use sandkeeper_engine::run::{Cleanup, Fate, RunOutcome};

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

/// The warning `run` prints after its leftover line, if any.
pub fn cleanup_warning(cleanup: &Cleanup, dir: &Path, kept: bool) -> Option<String> {
    let (reason, hint) = cleanup.failure()?;
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
}
