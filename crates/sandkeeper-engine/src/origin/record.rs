//! The origin record: what it holds, its bounds, its encoding.

use serde::{Deserialize, Serialize};

/// The longest encoded record read or written, in bytes. A longer value
/// is not an origin.
pub const MAX_RECORD: usize = 8192;
/// The most argv elements kept (the rest are dropped, and
/// [`Process::argv_truncated`] says so).
pub const MAX_ARGS: usize = 32;
/// The longest text field kept (an argv element, a path, a cgroup), in
/// bytes; longer ones are cut at a character boundary and end in `…`.
pub const MAX_FIELD: usize = 256;

/// Where a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Recorder {
    /// `watch` saw the entry appear (fanotify).
    Watch,
    /// `sandkeeper run` made it for its command.
    Run,
}

/// Who made a top-level entry of a root, as recorded when it appeared.
///
/// Every field but `ino` and `recorded_ms` comes from the creator's
/// `/proc` entry: text a user process chose. Render it escaped; never
/// decide anything by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The record's version: 1.
    pub v: u32,
    /// The entry's inode number when recorded: a record found on another
    /// inode (copied by a privileged tool) is not this entry's origin.
    pub ino: u64,
    /// When it was recorded (ms since the epoch).
    pub recorded_ms: i64,
    /// Who recorded it.
    pub by: Recorder,
    /// The creator.
    pub creator: Creator,
}

/// The creator, as far as it could be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Creator {
    /// Read while it was still running (checked against a pidfd after
    /// reading, so a recycled pid is never reported).
    Process(Process),
    /// The creator exited before it could be read.
    Exited {
        /// Its pid (as the watcher saw it), when known.
        pid: Option<u32>,
    },
    /// The creator could not be read, for another reason (a PID namespace
    /// the watcher cannot see into, `/proc` refused).
    Unknown {
        /// Why, in a few words.
        reason: String,
    },
}

/// A creator read from `/proc`.
///
/// Never its arguments, environment or memory: `watch` reads only what
/// `/proc` gives without touching the creator's memory (see
/// `docs/origins.md`); `argv` is the command `sandkeeper run` was given
/// (empty in `watch`'s records; records made before issue 25 may hold one).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Process {
    /// Its pid, in the watcher's PID namespace.
    pub pid: u32,
    /// Its name: `/proc/PID/comm` (at most 15 bytes, what `ps -o comm`
    /// shows: the executable's or script's file name unless the process
    /// renamed itself); for `sandkeeper run`, its command's program name.
    /// `None` in records made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// `/proc/PID/exe`.
    pub exe: Option<String>,
    /// The command `sandkeeper run` ran, at most [`MAX_ARGS`] elements;
    /// empty in `watch`'s records (it never reads another process's
    /// arguments).
    pub argv: Vec<String>,
    /// Whether argv had more elements than were kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_truncated: bool,
    /// `/proc/PID/cwd`.
    pub cwd: Option<String>,
    /// Its real uid.
    pub uid: Option<u32>,
    /// Its cgroup v2 path (`/system.slice/gitea-runner.service`).
    pub cgroup: Option<String>,
    /// Its parent's pid.
    pub ppid: Option<u32>,
    /// Its parent's name (`/proc/PPID/comm`), when the parent could be
    /// read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_comm: Option<String>,
    /// Its parent's argv: only in records made before issue 25 (none is
    /// read any more).
    #[serde(default)]
    pub parent_argv: Vec<String>,
}

impl Process {
    /// The name to show for it where others may read it (the metrics): its
    /// [`comm`](Self::comm), else the file name of its executable; never
    /// an argument.
    pub fn name(&self) -> Option<&str> {
        self.comm
            .as_deref()
            .filter(|c| !c.is_empty())
            .or_else(|| self.exe.as_deref()?.rsplit('/').next())
            .filter(|n| !n.is_empty())
    }

    /// The systemd unit or scope its cgroup names, if any: the last
    /// component ending in `.service` or `.scope`.
    pub fn unit(&self) -> Option<&str> {
        self.cgroup
            .as_deref()?
            .rsplit('/')
            .find(|c| c.ends_with(".service") || c.ends_with(".scope") || c.ends_with(".slice"))
    }
}

/// Cuts `s` to at most [`MAX_FIELD`] bytes at a character boundary.
pub(crate) fn bound(mut s: String) -> String {
    if s.len() > MAX_FIELD {
        let mut end = MAX_FIELD - '…'.len_utf8();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// Bounds an argv: at most [`MAX_ARGS`] elements of [`MAX_FIELD`] bytes.
pub(crate) fn bound_argv(argv: Vec<String>) -> (Vec<String>, bool) {
    let truncated = argv.len() > MAX_ARGS;
    (
        argv.into_iter().take(MAX_ARGS).map(bound).collect(),
        truncated,
    )
}

impl Origin {
    /// A version-1 record of `creator` for the inode `ino`, made now by `by`.
    pub(super) fn now(ino: u64, by: Recorder, creator: Creator) -> Origin {
        Origin {
            v: 1,
            ino,
            recorded_ms: super::now_ms(),
            by,
            creator,
        }
    }

    /// Re-applies the bounds to every field (a decoded record is hostile
    /// too: only root can write it, but a tool may have copied it).
    fn bounded(mut self) -> Origin {
        match &mut self.creator {
            Creator::Process(p) => {
                let (argv, cut) = bound_argv(std::mem::take(&mut p.argv));
                p.argv = argv;
                p.argv_truncated |= cut;
                p.parent_argv = bound_argv(std::mem::take(&mut p.parent_argv)).0;
                for f in [
                    &mut p.comm,
                    &mut p.exe,
                    &mut p.cwd,
                    &mut p.cgroup,
                    &mut p.parent_comm,
                ] {
                    *f = f.take().map(bound);
                }
            }
            Creator::Unknown { reason } => *reason = bound(std::mem::take(reason)),
            Creator::Exited { .. } => {}
        }
        self
    }

    /// The record as stored: one JSON object, at most [`MAX_RECORD`]
    /// bytes (argv elements are dropped from the end until it fits).
    pub fn encode(&self) -> Vec<u8> {
        let mut o = self.clone().bounded();
        loop {
            let bytes = serde_json::to_vec(&o).unwrap_or_default();
            if bytes.len() <= MAX_RECORD {
                return bytes;
            }
            match &mut o.creator {
                Creator::Process(p) if !p.parent_argv.is_empty() => {
                    p.parent_argv.pop();
                }
                Creator::Process(p) if !p.argv.is_empty() => {
                    p.argv.pop();
                    p.argv_truncated = true;
                }
                _ => return bytes,
            }
        }
    }

    /// A stored record, if it is one: valid JSON of version 1, at most
    /// [`MAX_RECORD`] bytes; bounded again.
    pub fn decode(bytes: &[u8]) -> Option<Origin> {
        if bytes.len() > MAX_RECORD {
            return None;
        }
        let o: Origin = serde_json::from_slice(bytes).ok()?;
        (o.v == 1).then(|| o.bounded())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(argv: Vec<String>) -> Origin {
        Origin {
            v: 1,
            ino: 7,
            recorded_ms: 1,
            by: Recorder::Watch,
            creator: Creator::Process(Process {
                pid: 42,
                argv,
                cgroup: Some("/system.slice/gitea-runner.service".into()),
                ..Process::default()
            }),
        }
    }

    #[test]
    fn round_trip_and_bounds() {
        let cases: &[(&str, Vec<String>, usize, bool)] = &[
            ("plain", vec!["cargo".into(), "test".into()], 2, false),
            (
                "many args",
                (0..100).map(|i| i.to_string()).collect(),
                MAX_ARGS,
                true,
            ),
            ("huge arg", vec!["x".repeat(10_000)], 1, false),
        ];
        for (name, argv, len, cut) in cases {
            let bytes = process(argv.clone()).encode();
            assert!(bytes.len() <= MAX_RECORD, "{name}");
            let Some(Origin {
                creator: Creator::Process(p),
                ..
            }) = Origin::decode(&bytes)
            else {
                panic!("{name}: no record");
            };
            assert_eq!(p.argv.len(), *len, "{name}");
            assert_eq!(p.argv_truncated, *cut, "{name}");
            assert!(p.argv.iter().all(|a| a.len() <= MAX_FIELD), "{name}");
            assert_eq!(p.unit(), Some("gitea-runner.service"), "{name}");
        }
    }

    #[test]
    fn not_records() {
        let cases: &[(&str, &[u8])] = &[
            ("empty", b""),
            ("garbage", b"\xff\xfe"),
            ("other version", br#"{"v":2,"ino":1,"recorded_ms":0,"by":"watch","creator":{"kind":"exited","pid":null}}"#),
            ("too long", &[b' '; MAX_RECORD + 1]),
        ];
        for (name, bytes) in cases {
            assert_eq!(Origin::decode(bytes), None, "{name}");
        }
    }
}
