//! What [`watch`](crate::watch) counts: the model of its metrics. Gauges
//! hold the last scan of each root (entries and disk usage by family and
//! state, the filesystem, the watermarks), counters what was reaped, by
//! root and why. [`Metrics::families`] gives them as named, typed,
//! labelled samples; a front end renders them (the `sandkeeper` command
//! writes the Prometheus text format for node_exporter's textfile
//! collector). The names and labels are documented in `docs/metrics.md`.
//!
//! Memory stays bounded over any number of cycles: gauges hold the last
//! scan of each root (at most [`MAX_FAMILIES`] families each), counters
//! one number per root and rule.
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use sandkeeper_engine::metrics::{MetricValue, Metrics};
//!
//! let mut m = Metrics::new();
//! m.finish_cycle(Duration::from_millis(1500), UNIX_EPOCH + Duration::from_secs(10));
//! let cycles = m.families().into_iter().find(|f| f.name == "sandkeeper_cycles_total").unwrap();
//! assert_eq!(cycles.samples[0].value, MetricValue::Count(1));
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::Watermarks;
use crate::reap::RootReap;
use crate::scan::{CreatorKey, EntryState, RootReport};

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

/// Creators per root with their own series (`sandkeeper_creator_*`), the
/// biggest by disk usage; the rest are summed into [`OTHER_CREATOR`].
pub const MAX_CREATORS: usize = 20;

/// The creator label of the creators beyond [`MAX_CREATORS`] (and of
/// those the scan's bounded tally counted under no creator).
pub const OTHER_CREATOR: &str = "(other)";

/// The longest creator label, in characters (longer ones are cut and end
/// in `…`; labels that become equal are summed into one series).
pub const CREATOR_LABEL_CHARS: usize = 160;

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
    /// (creator label, entries, disk bytes), at most [`MAX_CREATORS`] + 1.
    creators: Vec<(String, u64, u64)>,
    /// Seen in the current cycle (stale roots are dropped at its end).
    fresh: bool,
}

#[derive(Debug)]
struct Family {
    pattern: String,
    /// Per state, in [`EntryState::ALL`] order: (entries, disk bytes).
    states: [(u64, u64); 5],
}

/// The creator label of `key`: its executable's name (`comm`, else the
/// file name of its executable), then its unit or cgroup — `cargo (unit
/// ci.service)`. Never its arguments, cwd or environment: the file is
/// world-readable and served over the network, and a command line may
/// carry a secret that `/proc` (with `hidepid`) would show nobody else,
/// and that would stay after the process exits (issue 25). A record's
/// command (`sandkeeper run`'s, or one recorded before) is not used.
/// Text the creator chose: control, bidi and format characters are written
/// `\u{…}`, a label that would start with `(` or `\` gets a leading `\`
/// (no process can name itself like the tool's own `(other)`), and it is
/// cut at [`CREATOR_LABEL_CHARS`].
fn creator_label(key: &CreatorKey) -> String {
    let text = match key {
        CreatorKey::Process {
            name, unit, cgroup, ..
        } => {
            if name.is_empty() {
                return "(no name)".into();
            }
            let mut s = name.clone();
            match (unit, cgroup) {
                (Some(u), _) => s += &format!(" (unit {u})"),
                (None, Some(c)) => s += &format!(" (cgroup {c})"),
                (None, None) => {}
            }
            s
        }
        CreatorKey::Exited => return "(exited before it could be read)".into(),
        _ => return "(unknown)".into(),
    };
    let mut out = String::new();
    if text.starts_with('(') || text.starts_with('\\') {
        out.push('\\');
    }
    for (n, c) in text.chars().enumerate() {
        if n == CREATOR_LABEL_CHARS {
            out.push('…');
            break;
        }
        let hidden = c.is_control()
            || matches!(c, '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
        match hidden {
            true => out += &format!("\\u{{{:x}}}", c as u32),
            false => out.push(c),
        }
    }
    out
}

/// A root's creators for the metrics: the families' tallies summed per
/// creator label (name and unit), the biggest [`MAX_CREATORS`] by disk usage
/// on their own, the rest as [`OTHER_CREATOR`]; with
/// [`FamilyLabels::TotalsOnly`] only [`ALL_FAMILY`]. Empty when no entry
/// has a recorded origin.
fn creators_of(scan: &RootReport, labels: FamilyLabels) -> Vec<(String, u64, u64)> {
    let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut other = (0u64, 0u64);
    let mut any = false;
    for c in scan.groups.iter().filter_map(|g| g.creators.as_deref()) {
        any = true;
        other.0 += c.other.entries;
        other.1 += c.other.disk_bytes;
        for t in &c.top {
            let label = match labels {
                FamilyLabels::Named => creator_label(&t.creator),
                FamilyLabels::TotalsOnly => ALL_FAMILY.to_owned(),
            };
            let slot = by.entry(label).or_default();
            slot.0 += t.count.entries;
            slot.1 += t.count.disk_bytes;
        }
    }
    if !any {
        return Vec::new();
    }
    if labels == FamilyLabels::TotalsOnly {
        let (n, b) = by.into_values().fold(other, |a, v| (a.0 + v.0, a.1 + v.1));
        return vec![(ALL_FAMILY.to_owned(), n, b)];
    }
    let mut all: Vec<(String, u64, u64)> = by.into_iter().map(|(k, (n, b))| (k, n, b)).collect();
    all.sort_by(|a, b| {
        b.2.cmp(&a.2)
            .then(b.1.cmp(&a.1))
            .then_with(|| a.0.cmp(&b.0))
    });
    for (_, n, b) in all.drain(MAX_CREATORS.min(all.len())..) {
        other.0 += n;
        other.1 += b;
    }
    if other.0 > 0 {
        all.push((OTHER_CREATOR.to_owned(), other.0, other.1));
    }
    all
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

/// Whether a metric goes up and down or only up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A level: the last scan's.
    Gauge,
    /// A running total since the start.
    Counter,
}

impl MetricKind {
    /// `gauge` or `counter`, as the Prometheus format names them.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
        }
    }
}

/// The value of one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetricValue {
    /// A count (entries, bytes, reaps, a 0/1 flag).
    Count(u64),
    /// A duration or a time, in seconds.
    Seconds(f64),
}

/// One sample: its labels (name, value; values are entry patterns and
/// root paths, so anyone may have chosen them: escape them when
/// rendering) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// `(label, value)` pairs, in a fixed order.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: MetricValue,
}

/// A metric: its name, kind, help text and samples (never empty: a
/// metric without samples is left out of [`Metrics::families`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFamily {
    /// `sandkeeper_…`.
    pub name: &'static str,
    /// Gauge or counter.
    pub kind: MetricKind,
    /// One line on what it measures.
    pub help: &'static str,
    /// The samples.
    pub samples: Vec<Sample>,
}

impl Metrics {
    /// No roots observed, no cycle done.
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
            // From the family's sums: a scan need not keep its entries.
            for state in EntryState::ALL {
                let s = &mut family.states[state_index(state)];
                s.0 += group.states.get(state);
                s.1 += group.state_disk_bytes.get(state);
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
                creators: creators_of(scan, labels),
                fresh: true,
            },
        );
    }

    /// Counts what a (real) reap of one root removed and failed to remove.
    pub fn count_reap(&mut self, reap: &RootReap) {
        let key = label(&reap.path);
        // From the sums the reap kept as it went: it need keep no record
        // per entry (`PolicyBuilder::records`).
        for ((reason, rule), tally) in &reap.counts.removed_by_reason {
            let slot = self
                .reaped
                .entry((key.clone(), reason, rule.clone()))
                .or_default();
            slot.entries += tally.entries;
            slot.bytes += tally.disk_bytes;
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

    /// Every metric with its samples, in a fixed order.
    pub fn families(&self) -> Vec<MetricFamily> {
        let mut out = Vec::new();
        let mut family =
            |name: &'static str, kind: MetricKind, help: &'static str, samples: Vec<Sample>| {
                if samples.is_empty() {
                    return;
                }
                out.push(MetricFamily {
                    name,
                    kind,
                    help,
                    samples,
                });
            };
        let sample = |labels: Vec<(&'static str, String)>, value: u64| Sample {
            labels,
            value: MetricValue::Count(value),
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
                    entries.push(sample(labels.clone(), f.states[i].0));
                    bytes.push(sample(labels, f.states[i].1));
                }
            }
        }
        family(
            "sandkeeper_entries",
            MetricKind::Gauge,
            "Top-level entries of a root, by name family and state, at the last scan; a per-user root sandkeeper-<uid> has only family=\"(all)\" unless its config sets user_dir_families.",
            entries,
        );
        family(
            "sandkeeper_disk_usage_bytes",
            MetricKind::Gauge,
            "Disk usage of a root's top-level entries (st_blocks, hard links once, like du -x), by name family and state, at the last scan.",
            bytes,
        );
        let mut creator_entries = Vec::new();
        let mut creator_bytes = Vec::new();
        for (root, r) in &self.roots {
            for (creator, n, b) in &r.creators {
                let labels = labels(&[("root", root), ("creator", creator)]);
                creator_entries.push(sample(labels.clone(), *n));
                creator_bytes.push(sample(labels, *b));
            }
        }
        family(
            "sandkeeper_creator_entries",
            MetricKind::Gauge,
            "Top-level entries of a root with a recorded origin, by creator (executable name and unit; never arguments or cwd), at the last scan; at most 20 creators per root, the rest creator=\"(other)\"; a per-user root has only creator=\"(all)\" unless its config sets user_dir_families.",
            creator_entries,
        );
        family(
            "sandkeeper_creator_disk_usage_bytes",
            MetricKind::Gauge,
            "Disk usage of those entries, by creator (as sandkeeper_creator_entries).",
            creator_bytes,
        );
        let per_root = |f: &dyn Fn(&RootGauges) -> Option<u64>| -> Vec<Sample> {
            self.roots
                .iter()
                .filter_map(|(root, r)| f(r).map(|v| sample(labels(&[("root", root)]), v)))
                .collect()
        };
        family(
            "sandkeeper_filesystem_size_bytes",
            MetricKind::Gauge,
            "Size of the filesystem a root is on.",
            per_root(&|r| Some(r.total_bytes)),
        );
        family(
            "sandkeeper_filesystem_free_bytes",
            MetricKind::Gauge,
            "Bytes free for unprivileged users (df's Avail) on the filesystem a root is on, at the last scan.",
            per_root(&|r| Some(r.free_bytes)),
        );
        let mut marks = Vec::new();
        for (root, r) in &self.roots {
            if let Some((high, low)) = r.watermarks {
                marks.push(sample(labels(&[("root", root), ("mark", "high")]), high));
                marks.push(sample(labels(&[("root", root), ("mark", "low")]), low));
            }
        }
        family(
            "sandkeeper_watermark_free_bytes",
            MetricKind::Gauge,
            "A root's watermarks as free bytes: below mark=high a reap under pressure starts, and goes on until mark=low is reached.",
            marks,
        );
        family(
            "sandkeeper_above_high_watermark",
            MetricKind::Gauge,
            "1 if a root had less free space than its high watermark at the last scan.",
            per_root(&|r| r.watermarks.map(|(high, _)| u64::from(r.free_bytes < high))),
        );
        let mut reaped_entries = Vec::new();
        let mut reaped_bytes = Vec::new();
        for ((root, reason, rule), n) in &self.reaped {
            let labels = labels(&[("root", root), ("reason", reason), ("rule", rule)]);
            reaped_entries.push(sample(labels.clone(), n.entries));
            reaped_bytes.push(sample(labels, n.bytes));
        }
        family(
            "sandkeeper_reaped_entries_total",
            MetricKind::Counter,
            "Entries removed, by root and why: reason=orphaned (a sandbox whose owner is gone) or reason=matched with the rule's glob.",
            reaped_entries,
        );
        family(
            "sandkeeper_reaped_bytes_total",
            MetricKind::Counter,
            "Disk bytes freed by removals, by root and why (as sandkeeper_reaped_entries_total).",
            reaped_bytes,
        );
        let counter = |map: &BTreeMap<String, u64>| -> Vec<Sample> {
            map.iter()
                .map(|(root, n)| sample(labels(&[("root", root)]), *n))
                .collect()
        };
        family(
            "sandkeeper_removal_errors_total",
            MetricKind::Counter,
            "Entries that should have been removed but could not be (fully).",
            counter(&self.removal_errors),
        );
        family(
            "sandkeeper_pressure_reaps_total",
            MetricKind::Counter,
            "Reaps started because a root was above its high watermark.",
            counter(&self.pressure_reaps),
        );
        family(
            "sandkeeper_cycles_total",
            MetricKind::Counter,
            "Full scan-and-reap cycles done.",
            vec![sample(Vec::new(), self.cycles)],
        );
        if let Some((took, at)) = self.last_cycle {
            family(
                "sandkeeper_last_cycle_duration_seconds",
                MetricKind::Gauge,
                "How long the last full cycle took.",
                vec![Sample {
                    labels: Vec::new(),
                    value: MetricValue::Seconds(took.as_secs_f64()),
                }],
            );
            family(
                "sandkeeper_last_cycle_timestamp_seconds",
                MetricKind::Gauge,
                "When the last full cycle ended, in seconds since the Unix epoch.",
                vec![Sample {
                    labels: Vec::new(),
                    value: MetricValue::Seconds(
                        at.duration_since(UNIX_EPOCH)
                            .unwrap_or_default()
                            .as_secs_f64(),
                    ),
                }],
            );
        }
        family(
            "sandkeeper_uninspectable_processes",
            MetricKind::Gauge,
            "Processes the last scan could not inspect: entries they might use are unknown and never reaped.",
            vec![sample(Vec::new(), self.uninspectable)],
        );
        if let Some(ok) = self.config_ok {
            family(
                "sandkeeper_config_last_reload_successful",
                MetricKind::Gauge,
                "1 if the last load of the config file worked; 0 if it was bad and the previous config is still in force.",
                vec![sample(Vec::new(), u64::from(ok))],
            );
        }
        out
    }
}

/// The mode of a written metrics file: node_exporter, under its own user,
/// must read it (docs/metrics.md).
pub const FILE_MODE: u32 = 0o644;

impl Metrics {
    /// The metrics in Prometheus's text exposition format (0.0.4), for
    /// node_exporter's textfile collector: `# HELP` and `# TYPE` then the
    /// samples of each family, label values escaped as the format says.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use sandkeeper_engine::metrics::Metrics;
    ///
    /// let mut m = Metrics::new();
    /// m.finish_cycle(Duration::from_millis(1500), UNIX_EPOCH + Duration::from_secs(10));
    /// let text = m.to_prometheus();
    /// assert!(text.contains("# TYPE sandkeeper_cycles_total counter\nsandkeeper_cycles_total 1\n"));
    /// assert!(text.contains("sandkeeper_last_cycle_duration_seconds 1.500\n"));
    /// ```
    pub fn to_prometheus(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::with_capacity(4096);
        for family in self.families() {
            let name = family.name;
            let _ = writeln!(out, "# HELP {name} {}", family.help);
            let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
            for sample in &family.samples {
                let value = match sample.value {
                    MetricValue::Count(n) => n.to_string(),
                    MetricValue::Seconds(s) => format!("{s:.3}"),
                };
                if sample.labels.is_empty() {
                    let _ = writeln!(out, "{name} {value}");
                } else {
                    let _ = writeln!(
                        out,
                        "{name}{{{}}} {value}",
                        exposition_labels(&sample.labels)
                    );
                }
            }
        }
        out
    }
}

/// `a="x",b="y"`, each value escaped as the text format says (backslash,
/// double quote, newline).
fn exposition_labels(pairs: &[(&str, String)]) -> String {
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

/// Owned label pairs.
fn labels(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_label_values_are_escaped() {
        let cases = [
            ("app-*", r#"x="app-*""#),
            ("a\"b", r#"x="a\"b""#),
            ("a\\b", r#"x="a\\b""#),
            ("two\nlines", r#"x="two\nlines""#),
            ("both\\\"\n", r#"x="both\\\"\n""#),
        ];
        for (value, want) in cases {
            assert_eq!(
                exposition_labels(&[("x", value.to_owned())]),
                want,
                "{value:?}"
            );
        }
    }

    #[test]
    fn an_empty_exposition_still_says_something() {
        let mut m = Metrics::new();
        m.finish_cycle(
            Duration::from_millis(1500),
            SystemTime::UNIX_EPOCH + Duration::from_secs(10),
        );
        let text = m.to_prometheus();
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
                crate::pattern::matches(&label, name.as_ref()),
                "{label} is the same glob as {pattern}"
            );
        }
    }

    #[test]
    fn creator_labels_are_bounded_escaped_and_never_the_tools() {
        // A command (a `run` record's, or one recorded before issue 25)
        // is never part of the label: it may carry a secret.
        let process = |name: &str, unit: Option<&str>| CreatorKey::Process {
            name: name.to_owned(),
            command: vec![name.to_owned(), "--token=secret".into()],
            more_args: true,
            unit: unit.map(str::to_owned),
            cgroup: None,
            cwd: Some("/home/secret".into()),
        };
        let long = "x".repeat(500);
        let cases: &[(&str, CreatorKey, String)] = &[
            (
                "plain",
                process("cargo", Some("ci.service")),
                "cargo (unit ci.service)".into(),
            ),
            ("tool's own", process("(other)", None), r"\(other)".into()),
            ("backslash", process(r"\(other)", None), r"\\(other)".into()),
            (
                "controls",
                process("a\x1b[2J\u{202e}b", None),
                r"a\u{1b}[2J\u{202e}b".into(),
            ),
            ("no name", process("", None), "(no name)".into()),
            (
                "exited",
                CreatorKey::Exited,
                "(exited before it could be read)".into(),
            ),
            (
                "long",
                process(&long, None),
                format!("{}…", "x".repeat(CREATOR_LABEL_CHARS)),
            ),
        ];
        for (name, key, want) in cases {
            let got = creator_label(key);
            assert_eq!(&got, want, "{name}");
            assert!(!got.contains("secret"), "{name}: never the cwd or args");
        }
    }

    #[test]
    fn an_empty_run_still_says_something() {
        let mut m = Metrics::new();
        m.finish_cycle(
            Duration::from_millis(1500),
            UNIX_EPOCH + Duration::from_secs(10),
        );
        let families = m.families();
        let value = |name: &str| {
            families
                .iter()
                .find(|f| f.name == name)
                .map(|f| f.samples[0].value)
        };
        assert_eq!(
            value("sandkeeper_cycles_total"),
            Some(MetricValue::Count(1))
        );
        assert_eq!(
            value("sandkeeper_last_cycle_duration_seconds"),
            Some(MetricValue::Seconds(1.5))
        );
        assert_eq!(
            value("sandkeeper_last_cycle_timestamp_seconds"),
            Some(MetricValue::Seconds(10.0))
        );
        assert_eq!(value("sandkeeper_entries"), None, "no roots, no series");
    }
}
