//! Prometheus metrics of `watch`, in the text exposition format (0.0.4)
//! that node_exporter's textfile collector reads, written atomically
//! (temp file + rename) so a scrape never sees half a file. The names
//! and labels are documented in `docs/metrics.md`.
//!
//! Memory stays bounded over any number of cycles: gauges hold the last
//! scan of each root (at most [`MAX_FAMILIES`] families each), counters
//! one number per root and rule.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandkeeper::reap::{ReapReason, RootReap};
use sandkeeper::scan::{EntryState, RootReport};

use sandkeeper::config::Watermarks;

/// Families per root with their own series; the smaller rest are summed
/// into the family `(other)`, so a root of many unrelated names cannot
/// blow up the number of series.
pub const MAX_FAMILIES: usize = 100;

/// The family label of the families beyond [`MAX_FAMILIES`].
pub const OTHER_FAMILY: &str = "(other)";

/// The only family label of a per-user root (`sandkeeper-<uid>`) whose
/// families are not asked for: its totals by state. Its owner made it
/// 0700 so that nobody else can list it, and the metrics are
/// world-readable (and served over the network by node_exporter).
pub const ALL_FAMILY: &str = "(all)";

/// Whether a root's families get their own series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyLabels {
    /// Each family by its pattern (at most [`MAX_FAMILIES`], then
    /// [`OTHER_FAMILY`]): a shared root, whose names every user can list,
    /// or a per-user root with `user_dir_families = true`.
    Named,
    /// One family [`ALL_FAMILY`]: a per-user root, by default.
    TotalsOnly,
}

/// The label of a family's pattern: the pattern itself, except that one
/// starting with `(` gets a leading `\` (the same glob: `\` escapes the
/// next character) so that no entry name, which anyone may choose, can
/// produce the tool's own [`OTHER_FAMILY`] or [`ALL_FAMILY`] and so a
/// duplicate series (node_exporter drops a file that has one).
fn family_label(pattern: &str) -> String {
    match pattern.starts_with('(') {
        true => format!("\\{pattern}"),
        false => pattern.to_owned(),
    }
}

/// What the metrics file says, kept between cycles.
#[derive(Debug, Default)]
pub struct Metrics {
    roots: BTreeMap<String, RootGauges>,
    reaped: BTreeMap<(String, &'static str, String), Reaped>,
    removal_errors: BTreeMap<String, u64>,
    pressure_reaps: BTreeMap<String, u64>,
    cycles: u64,
    last_cycle: Option<(Duration, SystemTime)>,
    uninspectable: u64,
    config_ok: Option<bool>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Reaped {
    entries: u64,
    bytes: u64,
}

/// The last scan of one root.
#[derive(Debug)]
struct RootGauges {
    total_bytes: u64,
    free_bytes: u64,
    /// (high, low) in free bytes, for roots with watermarks.
    watermarks: Option<(u64, u64)>,
    families: Vec<Family>,
    /// Seen in the current cycle (stale roots are dropped at its end).
    fresh: bool,
}

#[derive(Debug)]
struct Family {
    pattern: String,
    /// Per state, in [`EntryState::ALL`] order: (entries, disk bytes).
    states: [(u64, u64); 5],
}

fn state_index(state: EntryState) -> usize {
    EntryState::ALL
        .iter()
        .position(|&s| s == state)
        .unwrap_or(0)
}

fn label(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Marks every root's gauges stale; a root not observed again before
    /// [`finish_cycle`](Self::finish_cycle) loses them (gone from the
    /// config, or it could not be scanned).
    pub fn begin_cycle(&mut self) {
        for root in self.roots.values_mut() {
            root.fresh = false;
        }
    }

    /// Replaces a root's gauges with what `scan` found, each family on its
    /// own or only the totals (`labels`).
    pub fn observe_scan(
        &mut self,
        scan: &RootReport,
        watermarks: Option<&Watermarks>,
        labels: FamilyLabels,
    ) {
        let total = scan.filesystem.total_bytes;
        let mut families: Vec<Family> = Vec::with_capacity(scan.groups.len().min(MAX_FAMILIES));
        let mut other: Option<Family> = None;
        let bucket = |name: &str| Family {
            pattern: name.to_owned(),
            states: [(0, 0); 5],
        };
        if labels == FamilyLabels::TotalsOnly {
            // Present even when empty, as every family's states are.
            families.push(bucket(ALL_FAMILY));
        }
        for (n, group) in scan.groups.iter().enumerate() {
            let slot = if labels == FamilyLabels::TotalsOnly {
                families.first_mut()
            } else if n < MAX_FAMILIES {
                families.push(Family {
                    pattern: family_label(&group.pattern),
                    states: [(0, 0); 5],
                });
                families.last_mut()
            } else {
                Some(other.get_or_insert_with(|| bucket(OTHER_FAMILY)))
            };
            let Some(family) = slot else { continue };
            for &i in &group.members {
                let entry = &scan.entries[i];
                let s = &mut family.states[state_index(entry.state)];
                s.0 += 1;
                s.1 += entry.disk_bytes;
            }
        }
        families.extend(other);
        let key = label(&scan.path);
        self.removal_errors.entry(key.clone()).or_insert(0);
        self.pressure_reaps.entry(key.clone()).or_insert(0);
        // The orphan series exists from the start, so rate() sees its 0.
        self.reaped
            .entry((key.clone(), "orphaned", String::new()))
            .or_default();
        self.roots.insert(
            key,
            RootGauges {
                total_bytes: total,
                free_bytes: scan.filesystem.free_bytes,
                watermarks: watermarks.map(|w| (w.high.free_bytes(total), w.low.free_bytes(total))),
                families,
                fresh: true,
            },
        );
    }

    /// Counts what a (real) reap of one root removed and failed to remove.
    pub fn count_reap(&mut self, reap: &RootReap) {
        let key = label(&reap.path);
        for removed in &reap.removed {
            let (reason, rule) = match &removed.reason {
                ReapReason::Orphaned => ("orphaned", String::new()),
                ReapReason::Matched(glob) => ("matched", glob.clone()),
                ReapReason::KeptUnderPressure(_) => ("kept_under_pressure", String::new()),
                _ => ("other", String::new()),
            };
            let slot = self.reaped.entry((key.clone(), reason, rule)).or_default();
            slot.entries += 1;
            slot.bytes += removed.disk_bytes;
        }
        *self.removal_errors.entry(key).or_insert(0) += reap.errors.len() as u64;
    }

    /// Counts a reap started because a root was above its high watermark.
    pub fn count_pressure_reap(&mut self, root: &Path) {
        *self.pressure_reaps.entry(label(root)).or_insert(0) += 1;
    }

    /// Processes that could not be inspected in the last scan (their
    /// possible entries are `unknown`, never reaped).
    pub fn set_uninspectable(&mut self, n: usize) {
        self.uninspectable = n as u64;
    }

    /// Whether the last (re)load of the config file worked.
    pub fn set_config_ok(&mut self, ok: bool) {
        self.config_ok = Some(ok);
    }

    /// Ends a full cycle that took `took` and ended at `at`; drops the
    /// gauges of roots not seen in it.
    pub fn finish_cycle(&mut self, took: Duration, at: SystemTime) {
        self.roots.retain(|_, r| r.fresh);
        self.cycles += 1;
        self.last_cycle = Some((took, at));
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
            if samples.is_empty() {
                return;
            }
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, value) in samples {
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {value}");
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {value}");
                }
            }
        };
        let mut entries = Vec::new();
        let mut bytes = Vec::new();
        for (root, r) in &self.roots {
            for f in &r.families {
                for (i, state) in EntryState::ALL.iter().enumerate() {
                    let labels = labels(&[
                        ("root", root),
                        ("family", &f.pattern),
                        ("state", state.as_str()),
                    ]);
                    entries.push((labels.clone(), f.states[i].0.to_string()));
                    bytes.push((labels, f.states[i].1.to_string()));
                }
            }
        }
        family(
            "sandkeeper_entries",
            "gauge",
            "Top-level entries of a root, by name family and state, at the last scan; a per-user root sandkeeper-<uid> has only family=\"(all)\" unless its config sets user_dir_families.",
            entries,
        );
        family(
            "sandkeeper_disk_usage_bytes",
            "gauge",
            "Disk usage of a root's top-level entries (st_blocks, hard links once, like du -x), by name family and state, at the last scan.",
            bytes,
        );
        let per_root = |f: &dyn Fn(&RootGauges) -> Option<u64>| -> Vec<(String, String)> {
            self.roots
                .iter()
                .filter_map(|(root, r)| f(r).map(|v| (labels(&[("root", root)]), v.to_string())))
                .collect()
        };
        family(
            "sandkeeper_filesystem_size_bytes",
            "gauge",
            "Size of the filesystem a root is on.",
            per_root(&|r| Some(r.total_bytes)),
        );
        family(
            "sandkeeper_filesystem_free_bytes",
            "gauge",
            "Bytes free for unprivileged users (df's Avail) on the filesystem a root is on, at the last scan.",
            per_root(&|r| Some(r.free_bytes)),
        );
        let mut marks = Vec::new();
        for (root, r) in &self.roots {
            if let Some((high, low)) = r.watermarks {
                marks.push((
                    labels(&[("root", root), ("mark", "high")]),
                    high.to_string(),
                ));
                marks.push((labels(&[("root", root), ("mark", "low")]), low.to_string()));
            }
        }
        family(
            "sandkeeper_watermark_free_bytes",
            "gauge",
            "A root's watermarks as free bytes: below mark=high a reap under pressure starts, and goes on until mark=low is reached.",
            marks,
        );
        family(
            "sandkeeper_above_high_watermark",
            "gauge",
            "1 if a root had less free space than its high watermark at the last scan.",
            per_root(&|r| r.watermarks.map(|(high, _)| u64::from(r.free_bytes < high))),
        );
        let mut reaped_entries = Vec::new();
        let mut reaped_bytes = Vec::new();
        for ((root, reason, rule), n) in &self.reaped {
            let labels = labels(&[("root", root), ("reason", reason), ("rule", rule)]);
            reaped_entries.push((labels.clone(), n.entries.to_string()));
            reaped_bytes.push((labels, n.bytes.to_string()));
        }
        family(
            "sandkeeper_reaped_entries_total",
            "counter",
            "Entries removed, by root and why: reason=orphaned (a sandbox whose owner is gone) or reason=matched with the rule's glob.",
            reaped_entries,
        );
        family(
            "sandkeeper_reaped_bytes_total",
            "counter",
            "Disk bytes freed by removals, by root and why (as sandkeeper_reaped_entries_total).",
            reaped_bytes,
        );
        let counter = |map: &BTreeMap<String, u64>| -> Vec<(String, String)> {
            map.iter()
                .map(|(root, n)| (labels(&[("root", root)]), n.to_string()))
                .collect()
        };
        family(
            "sandkeeper_removal_errors_total",
            "counter",
            "Entries that should have been removed but could not be (fully).",
            counter(&self.removal_errors),
        );
        family(
            "sandkeeper_pressure_reaps_total",
            "counter",
            "Reaps started because a root was above its high watermark.",
            counter(&self.pressure_reaps),
        );
        family(
            "sandkeeper_cycles_total",
            "counter",
            "Full scan-and-reap cycles done.",
            vec![(String::new(), self.cycles.to_string())],
        );
        if let Some((took, at)) = self.last_cycle {
            family(
                "sandkeeper_last_cycle_duration_seconds",
                "gauge",
                "How long the last full cycle took.",
                vec![(String::new(), seconds(took))],
            );
            family(
                "sandkeeper_last_cycle_timestamp_seconds",
                "gauge",
                "When the last full cycle ended, in seconds since the Unix epoch.",
                vec![(
                    String::new(),
                    seconds(at.duration_since(UNIX_EPOCH).unwrap_or_default()),
                )],
            );
        }
        family(
            "sandkeeper_uninspectable_processes",
            "gauge",
            "Processes the last scan could not inspect: entries they might use are unknown and never reaped.",
            vec![(String::new(), self.uninspectable.to_string())],
        );
        if let Some(ok) = self.config_ok {
            family(
                "sandkeeper_config_last_reload_successful",
                "gauge",
                "1 if the last load of the config file worked; 0 if it was bad and the previous config is still in force.",
                vec![(String::new(), u64::from(ok).to_string())],
            );
        }
        out
    }
}

/// `a="x",b="y"`, values escaped as the format wants.
fn labels(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

fn seconds(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

/// Writes `text` to `path` atomically, mode 0644, through
/// [`sandkeeper::output`]: a random temp name beside it (a name the textfile
/// collector ignores) made with `O_EXCL`, written, flushed and renamed over
/// the target through the directory's descriptor; a planted symlink is never
/// followed, and a target that is not a regular file is refused.
///
/// # Errors
///
/// When the directory is unsafe or missing, the target is not a regular
/// file, or the temp file cannot be written or renamed (it is removed then).
pub fn write_atomic(path: &Path, text: &str) -> sandkeeper::Result<()> {
    sandkeeper::output::write_atomic(path, text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let cases = [
            ("app-*", r#"x="app-*""#),
            ("a\"b", r#"x="a\"b""#),
            ("a\\b", r#"x="a\\b""#),
            ("two\nlines", r#"x="two\nlines""#),
            ("both\\\"\n", r#"x="both\\\"\n""#),
        ];
        for (value, want) in cases {
            assert_eq!(labels(&[("x", value)]), want, "{value:?}");
        }
    }

    #[test]
    fn entry_names_cannot_take_the_tools_family_labels() {
        let cases = [
            ("app-*", "app-*"),
            ("(other)", r"\(other)"),
            ("(all)", r"\(all)"),
            ("(x", r"\(x"),
            ("x(other)", "x(other)"),
        ];
        for (pattern, want) in cases {
            let label = family_label(pattern);
            assert_eq!(label, want, "{pattern:?}");
            let name = pattern.trim_end_matches('*');
            assert!(
                sandkeeper::pattern::matches(&label, name.as_ref()),
                "{label} is the same glob as {pattern}"
            );
        }
    }

    #[test]
    fn an_empty_run_still_says_something() {
        let mut m = Metrics::new();
        m.finish_cycle(
            Duration::from_millis(1500),
            UNIX_EPOCH + Duration::from_secs(10),
        );
        let text = m.render();
        assert!(text.contains("sandkeeper_cycles_total 1\n"), "{text}");
        assert!(
            text.contains("sandkeeper_last_cycle_duration_seconds 1.500\n"),
            "{text}"
        );
        assert!(
            text.contains("sandkeeper_last_cycle_timestamp_seconds 10.000\n"),
            "{text}"
        );
        assert!(
            !text.contains("sandkeeper_entries"),
            "no roots, no series: {text}"
        );
    }

    #[test]
    fn atomic_writes_replace_and_leave_no_temp_file() {
        use std::fs;
        use std::io;
        use std::os::unix::fs::PermissionsExt;

        let dir = sandkeeper::Sandbox::new().unwrap();
        let path = dir.path().join("sandkeeper.prom");
        write_atomic(&path, "a 1\n").unwrap();
        write_atomic(&path, "a 2\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "a 2\n");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != sandkeeper::lease::LEASE_FILE)
            .collect();
        assert_eq!(names, ["sandkeeper.prom"]);
        let err = write_atomic(&dir.path().join("missing/x.prom"), "").unwrap_err();
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::NotFound);
    }
}
