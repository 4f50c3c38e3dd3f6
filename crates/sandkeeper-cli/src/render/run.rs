//! What `run` reports: what the command left in its TMPDIR.

use std::ffi::{OsStr, OsString};
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use sandkeeper::supervise::{Exit, Stopped};
use sandkeeper::walk::{self, WalkState};
use serde_json::{json, Map, Value};

use super::path_field;
use crate::humanize::{sanitize, size};

/// What was left in the run's directory, by family.
#[derive(Debug, Default)]
pub struct Leftovers {
    pub entries: u64,
    pub disk_bytes: u64,
    /// `(pattern, count, disk bytes)`, biggest first.
    pub families: Vec<(String, u64, u64)>,
}

/// Measures what is in `dir` (but the lease record), through the
/// descriptor only: listed and walked relative to it, never following a
/// symlink, so whatever the command put at the directory's name is never
/// looked at.
pub fn leftovers(dir: BorrowedFd<'_>) -> Leftovers {
    let Ok(list) = rustix::fs::Dir::read_from(dir) else {
        // A directory deleted meanwhile cannot be opened again: empty.
        return Leftovers::default();
    };
    let names: Vec<OsString> = list
        .filter_map(|e| {
            let name = OsStr::from_bytes(e.ok()?.file_name().to_bytes()).to_owned();
            (name != "." && name != ".." && name != OsStr::new(sandkeeper::lease::LEASE_FILE))
                .then_some(name)
        })
        .collect();
    let usages = walk::usage_many(dir, &names, 0, &|_, _| WalkState::Continue);
    let sizes: Vec<u64> = usages
        .iter()
        .map(|u| u.as_ref().map_or(0, |u| u.disk_bytes))
        .collect();
    let mut families: Vec<(String, u64, u64)> = sandkeeper::pattern::group(&names)
        .into_iter()
        .map(|f| {
            let bytes = f.members.iter().map(|&i| sizes[i]).sum();
            (f.pattern, f.members.len() as u64, bytes)
        })
        .collect();
    families.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    Leftovers {
        entries: names.len() as u64,
        disk_bytes: sizes.iter().sum(),
        families,
    }
}

/// What became of the run's directory under its name, as far as the
/// command could change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The name still holds the directory `run` made.
    InPlace,
    /// The command removed it (the name is gone, the directory deleted).
    Removed,
    /// The name is gone but the directory lives on elsewhere (moved).
    MovedAway,
    /// Something else now has the name (a symlink, another directory …);
    /// `alive` says whether the directory `run` made still exists elsewhere.
    Replaced { by: &'static str, alive: bool },
}

impl Fate {
    /// Looks at the name without following it and compares it with the
    /// directory that was created (`identity`, and `dir` for its link count).
    pub fn of(path: &Path, identity: (u64, u64), dir: BorrowedFd<'_>) -> Fate {
        let alive = rustix::fs::fstat(dir).is_ok_and(|st| st.st_nlink > 0);
        match rustix::fs::lstat(path) {
            Ok(st) if (st.st_dev, st.st_ino) == identity => Fate::InPlace,
            Ok(st) => Fate::Replaced {
                by: match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                    rustix::fs::FileType::Symlink => "symlink",
                    rustix::fs::FileType::Directory => "directory",
                    rustix::fs::FileType::RegularFile => "file",
                    _ => "special file",
                },
                alive,
            },
            Err(_) if alive => Fate::MovedAway,
            Err(_) => Fate::Removed,
        }
    }

    /// The note `run` prints when the directory is not where it was made;
    /// `None` when it is, or the command just removed it.
    pub fn note(&self, dir: &Path) -> Option<String> {
        let dir = sanitize(dir.as_os_str().as_bytes());
        let elsewhere = "the directory sandkeeper made was moved elsewhere and is not removed";
        match *self {
            Fate::InPlace | Fate::Removed => None,
            Fate::MovedAway => Some(format!("TMPDIR {dir} was moved away; {elsewhere}")),
            Fate::Replaced { by, alive } => Some(format!(
                "TMPDIR {dir} was replaced by a {by}; left it alone{}",
                if alive {
                    format!(" ({elsewhere})")
                } else {
                    String::new()
                }
            )),
        }
    }

    /// The `replaced` field of the report: what took the name, if anything.
    fn replaced_by(&self) -> Option<&'static str> {
        match *self {
            Fate::Replaced { by, .. } => Some(by),
            _ => None,
        }
    }
}

/// How the end of the run went for the directory: the report's `cleanup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// Removed completely, kept as asked, or (when the command removed,
    /// moved or replaced it) left to what the command did.
    Done,
    /// Part of it could not be removed, or it could not be marked kept:
    /// why, from the library (`left mnt: mount point (not descended)`),
    /// and what the user can do.
    Failed {
        reason: String,
        hint: Option<String>,
    },
}

impl Cleanup {
    /// The failure `e` of `close` or `persist_for`: the library's
    /// reason (its cause, which names what was left and why), and its hint.
    pub fn failed(e: &sandkeeper::Error) -> Cleanup {
        use std::error::Error as _;
        Cleanup::Failed {
            reason: e
                .source()
                .map_or_else(|| e.to_string(), ToString::to_string),
            hint: e.hint().map(str::to_owned),
        }
    }

    /// The warning `run` prints after its leftover line, if any.
    pub fn warning(&self, dir: &Path, kept: bool) -> Option<String> {
        let Cleanup::Failed { reason, hint } = self else {
            return None;
        };
        let what = if kept {
            "could not be marked kept"
        } else {
            "could not be removed completely"
        };
        Some(format!(
            "TMPDIR {} {what}: {}{}",
            sanitize(dir.as_os_str().as_bytes()),
            sanitize(reason.as_bytes()),
            hint.as_deref()
                .map(|h| format!("; {}", sanitize(h.as_bytes())))
                .unwrap_or_default()
        ))
    }
}

/// Everything `run` says at the end.
pub struct RunReport<'a> {
    pub command: &'a [OsString],
    pub dir: &'a Path,
    pub exit: Exit,
    pub left: &'a Leftovers,
    pub fate: Fate,
    pub kept: bool,
    pub keep_for: Duration,
    pub stopped: Stopped,
    pub cleanup: &'a Cleanup,
}

impl RunReport<'_> {
    /// The stderr line, when the command left something (or it was kept):
    /// `cargo left 3 entries (2.1 GiB: app-235-* 2.0 GiB, .tmp* 40 MiB) in TMPDIR; removed`.
    pub fn line(&self, name: &str) -> Option<String> {
        let failed = matches!(self.cleanup, Cleanup::Failed { .. });
        if self.left.entries == 0 && !self.kept && !failed {
            return None;
        }
        let fate = if failed && !self.kept {
            "not removed completely".to_owned()
        } else if self.kept {
            format!(
                "kept at {} for {}",
                sanitize(self.dir.as_os_str().as_bytes()),
                humantime::format_duration(self.keep_for)
            )
        } else if matches!(self.fate, Fate::InPlace | Fate::Removed) {
            "removed".to_owned()
        } else {
            "not removed".to_owned()
        };
        if self.left.entries == 0 {
            return Some(format!(
                "{} left nothing in TMPDIR; {fate}",
                sanitize(name.as_bytes())
            ));
        }
        let families: Vec<String> = self
            .left
            .families
            .iter()
            .take(3)
            .map(|(p, _, b)| format!("{} {}", sanitize(p.as_bytes()), size(*b)))
            .collect();
        Some(format!(
            "{} left {} entr{} ({}: {}) in TMPDIR; {fate}",
            sanitize(name.as_bytes()),
            self.left.entries,
            if self.left.entries == 1 { "y" } else { "ies" },
            size(self.left.disk_bytes),
            families.join(", ")
        ))
    }

    /// The `--report-json` document (schema `sandkeeper.run/v1`).
    pub fn json(&self) -> String {
        let mut o = Map::new();
        o.insert("schema".into(), "sandkeeper.run/v1".into());
        o.insert(
            "command".into(),
            self.command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .into(),
        );
        path_field(&mut o, "dir", self.dir.as_os_str());
        let (code, signal) = match self.exit {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
        };
        o.insert("exit_code".into(), json!(code));
        o.insert("signal".into(), json!(signal));
        o.insert(
            "left".into(),
            json!({
                "entries": self.left.entries,
                "disk_bytes": self.left.disk_bytes,
                "families": self.left.families.iter().map(|(p, n, b)| json!({"pattern": p, "count": n, "disk_bytes": b})).collect::<Vec<_>>(),
            }),
        );
        o.insert("kept".into(), self.kept.into());
        o.insert("replaced".into(), json!(self.fate.replaced_by()));
        o.insert(
            "moved_away".into(),
            matches!(
                self.fate,
                Fate::MovedAway | Fate::Replaced { alive: true, .. }
            )
            .into(),
        );
        o.insert("descendants_stopped".into(), self.stopped.signalled.into());
        o.insert("descendants_killed".into(), self.stopped.killed.into());
        let error = match self.cleanup {
            Cleanup::Done => None,
            Cleanup::Failed { reason, .. } => Some(reason.as_str()),
        };
        o.insert(
            "cleanup".into(),
            json!({"complete": error.is_none(), "error": error}),
        );
        let mut text = serde_json::to_string_pretty(&Value::Object(o)).unwrap_or_default();
        text.push('\n');
        text
    }
}
