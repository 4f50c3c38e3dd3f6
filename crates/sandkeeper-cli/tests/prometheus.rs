//! Issue 30, "Where CI runs": the fleet's alerting rules
//! (`contrib/prometheus/alerts.yml`), their unit tests
//! (`contrib/prometheus/alerts.test.yml`) and the Grafana dashboard
//! (`contrib/grafana/sandkeeper.json`) over the metrics `sandkeeper watch
//! --metrics-file` writes (`docs/metrics.md`).
//!
//! - promtool accepts the rules, and their unit tests pass: each alert
//!   fires when it should and stays quiet when it should not (the test
//!   file has both for every alert, checked here);
//! - every metric name in the rules, the test file's series and the
//!   dashboard's queries is one a real `watch --once --metrics-file`
//!   writes (or one of node_exporter's, by name in [`NODE_EXPORTER`]), and
//!   documented in `docs/metrics.md`; a label matcher on a sandkeeper
//!   series names a label that series has (or a target label), and a value
//!   such as `state="orphaned"` is one it takes;
//! - the dashboard is Grafana JSON over a data source variable, its panels
//!   do not overlap, cover what the issue asks for, and each query parses
//!   (promtool, as recording rules).
//!
//! Without promtool (Debian package `prometheus`) the promtool parts say
//! so and pass, unless `CI` is set: `.ci/run` installs it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// The node_exporter series the rules and the dashboard use, and only
/// those (each must be used): the filesystem collector's inode counts
/// (sandkeeper writes none) and the textfile collector's own series.
const NODE_EXPORTER: &[(&str, &[&str])] = &[
    ("node_filesystem_files", &["device", "fstype", "mountpoint"]),
    (
        "node_filesystem_files_free",
        &["device", "fstype", "mountpoint"],
    ),
    ("node_textfile_scrape_error", &[]),
    ("node_textfile_mtime_seconds", &["file"]),
];

/// Labels a scrape adds to every series of a target.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// Labels whose values are names anyone chooses (paths, globs, hosts): a
/// matcher may use any value.
const FREE_VALUED: &[&str] = &["root", "family", "rule", "creator", "instance", "job"];

const RULES: &str = "contrib/prometheus/alerts.yml";
const RULE_TESTS: &str = "contrib/prometheus/alerts.test.yml";
const DASHBOARD: &str = "contrib/grafana/sandkeeper.json";

fn top() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .expect("the workspace")
}

fn read(rel: &str) -> String {
    fs::read_to_string(top().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `promtool args…` in the workspace, its temporary files in `tmp`.
fn promtool(test: &str, args: &[&str], tmp: &Path) -> Option<String> {
    sandkeeper_testkit::prometheus::promtool(test, args, &top(), tmp, "")
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let scratch = sandkeeper_testkit::scratch!("promtool");
    let test = "promtool_checks_the_rules_and_their_unit_tests_pass";
    let Some(said) = promtool(test, &["check", "rules", RULES], scratch.path()) else {
        return;
    };
    assert!(said.contains("SUCCESS"), "{said}");
    let said = promtool(test, &["test", "rules", RULE_TESTS], scratch.path()).unwrap();
    assert!(said.contains("SUCCESS"), "{said}");
    let left: Vec<_> = scratch
        .names()
        .into_iter()
        .filter(|n| n != sandkeeper_engine::lease::LEASE_FILE)
        .collect();
    assert!(left.is_empty(), "promtool left {left:?}");
}

/// What a real `watch` writes: each metric's label names and, per label,
/// the values seen.
type Written = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Runs `sandkeeper watch --once --metrics-file` over a scratch root with
/// an orphaned sandbox and an unmanaged directory (with watermarks and a
/// rule, so that every series not about origins is there), and parses
/// the file it wrote.
fn written_by_watch() -> Written {
    let scratch = sandkeeper_testkit::scratch!("prometheus-names");
    let root = scratch.join("root");
    fs::create_dir(&root).unwrap();
    let orphan = sandkeeper_testkit::tree::orphan(&root, "build-orphan-1");
    fs::write(orphan.join("data"), vec![1u8; 8192]).unwrap();
    fs::create_dir(root.join("app-235-1")).unwrap();
    fs::write(root.join("app-235-1/data"), vec![2u8; 4096]).unwrap();
    let r = root.to_str().unwrap();
    assert!(!r.contains(['"', '\\']), "{r}: not a plain TOML string");
    let config = scratch.join("watch.toml");
    fs::write(
        &config,
        format!(
            "[[root]]\npath = \"{r}\"\nhigh_watermark = \"1KiB free\"\nlow_watermark = \"2KiB free\"\n\n[[root.rule]]\nmatch = \"app-*\"\nolder_than = \"1d\"\n"
        ),
    )
    .unwrap();
    let metrics = scratch.join("sandkeeper.prom");
    let out = Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(["watch", "--once", "--config"])
        .arg(&config)
        .arg("--metrics-file")
        .arg(&metrics)
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .output()
        .expect("run sandkeeper watch");
    assert_eq!(
        out.status.code(),
        Some(0),
        "watch --once: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = fs::read_to_string(&metrics).unwrap();
    let mut written = Written::new();
    for (name, labels, _) in sandkeeper_testkit::prometheus::parse_exposition(&text) {
        let slot = written.entry(name).or_default();
        for (k, v) in labels {
            slot.entry(k).or_default().insert(v);
        }
    }
    // The two entries are there (the gauges are the scan's).
    assert!(written["sandkeeper_entries"]["family"].len() >= 2, "{text}");
    written
}

/// What a PromQL expression uses: metric names, label matchers
/// `(metric or "", label, operator, value)`, and the labels of its
/// `by`/`without`/`on`/`ignoring`/`group_*` lists.
#[derive(Debug, Default)]
struct Uses {
    metrics: BTreeSet<String>,
    matchers: Vec<(String, String, String, String)>,
    grouping: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Op(String),
    Other(char),
}

/// PromQL's tokens, enough to tell metric names from functions, keywords,
/// labels, strings, numbers and durations (which are dropped), and
/// Grafana's `$variables` (dropped).
fn tokens(expr: &str) -> Vec<Token> {
    let c: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '#' {
            // A comment, to the end of the line.
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if matches!(ch, '"' | '\'' | '`') {
            let mut s = String::new();
            i += 1;
            while i < c.len() && c[i] != ch {
                if c[i] == '\\' && ch != '`' {
                    i += 1;
                }
                s.push(c[i]);
                i += 1;
            }
            assert!(i < c.len(), "unterminated string in {expr}");
            i += 1;
            out.push(Token::Str(s));
        } else if ch == '$' {
            // $var, ${var}, $__interval: Grafana's.
            i += 1;
            if c.get(i) == Some(&'{') {
                while i < c.len() && c[i] != '}' {
                    i += 1;
                }
                i += 1;
            } else {
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit()
            || (ch == '.' && c.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration (1h, 4e9, 0x10).
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '.' || c[i] == '_') {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' || ch == ':' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == ':') {
                i += 1;
            }
            out.push(Token::Ident(c[start..i].iter().collect()));
        } else if matches!(ch, '=' | '!') {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            let op = match two.as_str() {
                "=~" | "!~" | "!=" | "==" => two,
                _ => ch.to_string(),
            };
            i += op.chars().count();
            out.push(Token::Op(op));
        } else {
            out.push(Token::Other(ch));
            i += 1;
        }
    }
    out
}

const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
];

fn uses(expr: &str) -> Uses {
    let t = tokens(expr);
    let mut u = Uses::default();
    let mut i = 0;
    while i < t.len() {
        match &t[i] {
            Token::Ident(id) => {
                let next = t.get(i + 1);
                let lower = id.to_ascii_lowercase();
                if matches!(
                    lower.as_str(),
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                ) && next == Some(&Token::Other('('))
                {
                    i += 2;
                    while i < t.len() && t[i] != Token::Other(')') {
                        if let Token::Ident(label) = &t[i] {
                            u.grouping.insert(label.clone());
                        }
                        i += 1;
                    }
                } else if KEYWORDS.contains(&lower.as_str())
                    || next == Some(&Token::Other('('))
                    || matches!(next, Some(Token::Ident(k)) if k == "by" || k == "without")
                {
                    // A keyword, a function, or an aggregation.
                } else {
                    u.metrics.insert(id.clone());
                    if next == Some(&Token::Other('{')) {
                        i = matchers(&t, i + 1, id, &mut u, expr);
                    }
                }
                i += 1;
            }
            Token::Other('{') => {
                i = matchers(&t, i, "", &mut u, expr) + 1;
            }
            Token::Other('[') => {
                while i < t.len() && t[i] != Token::Other(']') {
                    i += 1;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    u
}

/// The matchers of the `{…}` at `t[open]`; the index of its `}`.
fn matchers(t: &[Token], open: usize, metric: &str, u: &mut Uses, expr: &str) -> usize {
    let mut i = open + 1;
    while i < t.len() && t[i] != Token::Other('}') {
        match (&t[i], t.get(i + 1), t.get(i + 2)) {
            (Token::Ident(label), Some(Token::Op(op)), Some(Token::Str(value))) => {
                if label == "__name__" {
                    assert_eq!(op, "=", "a __name__ that is not one name: {expr}");
                    u.metrics.insert(value.clone());
                }
                u.matchers
                    .push((metric.into(), label.clone(), op.clone(), value.clone()));
                i += 3;
            }
            (Token::Other(','), ..) => i += 1,
            _ => panic!("cannot read the matchers of {expr} at {:?}", &t[i..]),
        }
    }
    i
}

/// The `expr:` values of a rules or rule-test file: plain scalars and
/// `|`/`>` block scalars, as these files write them.
fn yaml_exprs(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest.starts_with('|') || rest.starts_with('>') {
            let indent = line.len() - trimmed.len();
            let body: Vec<&str> = lines[n + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
                .copied()
                .collect();
            out.push(body.join("\n"));
        } else {
            out.push(unquote(rest));
        }
    }
    out
}

/// The values of `key:` lines (single-line scalars).
fn yaml_values(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().trim_start_matches("- ").strip_prefix(key))
        .filter_map(|rest| rest.strip_prefix(':'))
        .map(|rest| unquote(rest.trim()))
        .collect()
}

fn unquote(s: &str) -> String {
    if let Some(inner) = s.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
        inner.replace("''", "'")
    } else if let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        inner.replace("\\\"", "\"").replace("\\\\", "\\")
    } else {
        s.to_owned()
    }
}

/// The dashboard's queries: `(where, PromQL)` for every panel target
/// (rows' collapsed panels too) and every query variable
/// (`label_values(EXPR, label)` gives EXPR).
fn dashboard_exprs(dash: &Value) -> Vec<(String, String)> {
    fn panels<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            panels(&p["panels"], out);
        }
    }
    let mut all = Vec::new();
    panels(&dash["panels"], &mut all);
    let mut out = Vec::new();
    for p in all {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {:?}: a target without expr: {t}", p["title"]));
            out.push((format!("panel {:?}", p["title"]), expr.to_owned()));
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if v["type"] != "query" {
            continue;
        }
        let q = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .unwrap_or_else(|| panic!("variable {:?}: no query", v["name"]));
        let expr = match q.strip_prefix("label_values(") {
            Some(args) => {
                let args = args.strip_suffix(')').expect("label_values(…)");
                match args.rsplit_once(',') {
                    Some((expr, _label)) => expr.trim().to_owned(),
                    None => continue,
                }
            }
            None => q.to_owned(),
        };
        out.push((format!("variable {:?}", v["name"]), expr));
    }
    out
}

/// Issue 30: nothing refers to a series sandkeeper does not write: each
/// name in the rules, the rule tests and the dashboard is in a file a real
/// `watch` wrote (and in docs/metrics.md), or is node_exporter's.
#[test]
fn every_metric_name_is_one_watch_writes_or_node_exporters() {
    let written = written_by_watch();
    let docs = read("docs/metrics.md");
    let dash: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");

    let mut exprs: Vec<(String, String)> = Vec::new();
    let rules = read(RULES);
    let rule_exprs = yaml_exprs(&rules);
    assert_eq!(
        rule_exprs.len(),
        rules.matches("- alert:").count(),
        "one expr per alert in {RULES}"
    );
    exprs.extend(rule_exprs.into_iter().map(|e| (RULES.to_owned(), e)));
    let tests = read(RULE_TESTS);
    let series = yaml_values(&tests, "series");
    assert!(series.len() > 10, "{RULE_TESTS}: {series:?}");
    exprs.extend(
        series
            .into_iter()
            .map(|s| (format!("{RULE_TESTS} series"), s)),
    );
    exprs.extend(
        yaml_exprs(&tests)
            .into_iter()
            .map(|e| (RULE_TESTS.to_owned(), e)),
    );
    exprs.extend(dashboard_exprs(&dash));

    let node: BTreeMap<&str, &[&str]> = NODE_EXPORTER.iter().copied().collect();
    let mut known_labels: BTreeSet<String> = TARGET_LABELS.iter().map(|&s| s.to_owned()).collect();
    known_labels.extend(written.values().flat_map(|l| l.keys().cloned()));
    known_labels.extend(
        NODE_EXPORTER
            .iter()
            .flat_map(|(_, l)| l.iter().map(|&s| s.to_owned())),
    );
    let mut used_node = BTreeSet::new();
    let mut used = BTreeSet::new();
    for (place, expr) in &exprs {
        let u = uses(expr);
        assert!(!u.metrics.is_empty(), "{place}: no metric in {expr}");
        for name in &u.metrics {
            if node.contains_key(name.as_str()) {
                used_node.insert(name.clone());
            } else {
                assert!(
                    written.contains_key(name),
                    "{place}: {name} is neither written by `watch` (it wrote {:?}) nor node_exporter's ({NODE_EXPORTER:?}):\n{expr}",
                    written.keys().collect::<Vec<_>>()
                );
                assert!(
                    docs.contains(&format!("`{name}`")),
                    "{place}: {name} is not in docs/metrics.md"
                );
                used.insert(name.clone());
            }
        }
        for (metric, label, op, value) in &u.matchers {
            let labels: BTreeSet<String> = match (written.get(metric), node.get(metric.as_str())) {
                (Some(l), _) => l.keys().cloned().collect(),
                (None, Some(l)) => l.iter().map(|&s| s.to_owned()).collect(),
                (None, None) => known_labels.clone(),
            };
            assert!(
                labels.contains(label) || TARGET_LABELS.contains(&label.as_str()),
                "{place}: {metric} has no label {label} (it has {labels:?}):\n{expr}"
            );
            let Some(values) = written.get(metric).and_then(|l| l.get(label)) else {
                continue;
            };
            if op == "=" && !FREE_VALUED.contains(&label.as_str()) && !value.contains('$') {
                assert!(
                    values.contains(value),
                    "{place}: {metric}{{{label}=\"{value}\"}} matches nothing `watch` writes ({values:?}):\n{expr}"
                );
            }
        }
        for label in &u.grouping {
            assert!(
                known_labels.contains(label),
                "{place}: no series has a label {label}:\n{expr}"
            );
        }
    }
    let listed: BTreeSet<String> = node.keys().map(|&s| s.to_owned()).collect();
    assert_eq!(
        used_node, listed,
        "NODE_EXPORTER lists exactly the node_exporter series used"
    );
    // The dashboard and the rules between them use the series the issue
    // names (the creator series need recorded origins, and root).
    for name in [
        "sandkeeper_entries",
        "sandkeeper_disk_usage_bytes",
        "sandkeeper_filesystem_free_bytes",
        "sandkeeper_removal_errors_total",
        "sandkeeper_reaped_entries_total",
        "sandkeeper_last_cycle_timestamp_seconds",
        "sandkeeper_uninspectable_processes",
    ] {
        assert!(used.contains(name), "{name} is used nowhere");
    }
}

/// Every alert has a severity, a summary and a description that names a
/// `sandkeeper` command to run, and the unit tests have a case where it
/// fires and one where it stays quiet.
#[test]
fn every_alert_is_labelled_explained_and_tested_both_ways() {
    let rules = read(RULES);
    let mut alerts = BTreeSet::new();
    for block in rules.split("- alert:").skip(1) {
        let name = block.split_whitespace().next().unwrap().to_owned();
        let severity = yaml_values(block, "severity");
        assert!(
            matches!(severity.as_slice(), [s] if ["critical", "warning", "info"].contains(&s.as_str())),
            "{name}: severity {severity:?}"
        );
        let summary = yaml_values(block, "summary");
        assert_eq!(summary.len(), 1, "{name}: one summary");
        let (_, description) = block
            .split_once("description:")
            .unwrap_or_else(|| panic!("{name}: no description"));
        // Up to the blank line before the next alert's comment.
        let description = description.split("\n\n").next().unwrap();
        assert!(
            description.contains("`sandkeeper "),
            "{name}: the description names no `sandkeeper …` command to run"
        );
        let absent = block.contains("expr: absent(");
        assert!(
            absent || summary[0].contains("{{ $labels."),
            "{name}: the summary says no $labels"
        );
        assert!(alerts.insert(name.clone()), "{name} twice");
    }
    assert!(alerts.len() >= 8, "{alerts:?}");

    let tests = read(RULE_TESTS);
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for case in tests.split("- eval_time:").skip(1) {
        let case = case.split("input_series:").next().unwrap();
        let name = yaml_values(case, "alertname")
            .into_iter()
            .next()
            .expect("an alertname");
        assert!(
            alerts.contains(&name),
            "{RULE_TESTS} tests {name}, no such alert"
        );
        if case.contains("exp_alerts: []") {
            quiet.insert(name);
        } else {
            assert!(case.contains("exp_labels:"), "{name}: {case}");
            fires.insert(name);
        }
    }
    assert_eq!(fires, alerts, "alerts with a case where they fire");
    assert_eq!(quiet, alerts, "alerts with a case where they stay quiet");
}

/// The dashboard is Grafana JSON whose queries go to a data source
/// variable, with the panels the issue asks for, none overlapping, and
/// each query valid PromQL.
#[test]
fn the_dashboard_is_grafana_json_over_a_data_source_variable() {
    let dash: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    for key in ["title", "uid"] {
        assert!(dash[key].as_str().is_some_and(|s| !s.is_empty()), "{key}");
    }
    assert!(dash["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let vars = dash["templating"]["list"]
        .as_array()
        .expect("templating.list");
    assert!(
        vars.iter().any(|v| v["type"] == "datasource"
            && v["name"] == "DS_PROMETHEUS"
            && v["query"] == "prometheus"),
        "a data source variable DS_PROMETHEUS of type prometheus"
    );
    // Every data source reference anywhere is the variable.
    fn sources<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        match v {
            Value::Object(m) => {
                if let Some(ds) = m.get("datasource") {
                    out.push(ds);
                }
                m.values().for_each(|v| sources(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| sources(v, out)),
            _ => {}
        }
    }
    let mut refs = Vec::new();
    sources(&dash["panels"], &mut refs);
    sources(&dash["templating"], &mut refs);
    assert!(refs.len() > 10);
    for ds in refs {
        assert_eq!(
            ds["uid"], "${DS_PROMETHEUS}",
            "a data source that is not the variable: {ds}"
        );
    }

    let panels = dash["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut boxes: Vec<(String, [u64; 4])> = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("a title");
        assert!(!title.is_empty());
        assert!(
            ids.insert(p["id"].as_u64().expect("an id")),
            "{title}: id twice"
        );
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().expect("gridPos"));
        assert!(x + w <= 24 && w > 0 && h > 0, "{title}: {g}");
        for (other, [ox, oy, ow, oh]) in &boxes {
            let apart = x + w <= *ox || ox + ow <= x || y + h <= *oy || oy + oh <= y;
            assert!(apart, "{title} overlaps {other}");
        }
        boxes.push((title.to_owned(), [x, y, w, h]));
        let kind = p["type"].as_str().expect("a type");
        if kind == "row" {
            continue;
        }
        assert!(
            ["timeseries", "stat", "table", "bargauge", "gauge"].contains(&kind),
            "{title}: {kind}"
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        let refs: BTreeSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(refs.len(), targets.len(), "{title}: refIds");
    }

    // What the issue asks for, each in some panel.
    let exprs = dashboard_exprs(&dash);
    let panel_with = |needles: &[&str]| {
        exprs
            .iter()
            .any(|(w, e)| w.starts_with("panel") && needles.iter().all(|n| e.contains(n)))
    };
    for needles in [
        &["sandkeeper_disk_usage_bytes", "by (instance, root, state)"][..],
        &["sandkeeper_disk_usage_bytes", "state=\"orphaned\""],
        &["sandkeeper_entries", "by (instance, root, state)"],
        &["sandkeeper_entries", "state=\"unknown\""],
        &["sandkeeper_reaped_entries_total"],
        &["sandkeeper_reaped_bytes_total"],
        &["sandkeeper_removal_errors_total"],
        &["time() - sandkeeper_last_cycle_timestamp_seconds"],
        &["topk(", "family"],
    ] {
        assert!(panel_with(needles), "no panel queries {needles:?}");
    }

    // Each query is PromQL: promtool checks them as recording rules.
    let scratch = sandkeeper_testkit::scratch!("dashboard");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (n, (place, expr)) in exprs.iter().enumerate() {
        let expr = expr.replace("$instance", ".*").replace("$root", ".*");
        assert!(
            !expr.contains('$'),
            "{place}: an unknown variable in {expr}"
        );
        rules += &format!(
            "      - record: dashboard:query_{n}\n        expr: '{}'\n",
            expr.replace('\'', "''").replace('\n', " ")
        );
    }
    let file = scratch.join("dashboard-rules.yml");
    fs::write(&file, rules).unwrap();
    let test = "the_dashboard_is_grafana_json_over_a_data_source_variable";
    if let Some(said) = promtool(
        test,
        &["check", "rules", file.to_str().unwrap()],
        scratch.path(),
    ) {
        assert!(
            said.contains(&format!("SUCCESS: {} rules found", exprs.len())),
            "{said}"
        );
    }
}

/// The PromQL reader above, on the forms the files use.
#[test]
fn the_promql_reader_tells_metrics_from_the_rest() {
    let u = uses(
        r#"sum without (family, state) (sandkeeper_entries{state="unknown", root!~".+/x-[0-9]+"}) > 0
           and on (instance, job, mountpoint) label_replace(x_total offset 1h, "a", "$1", "b", "(.*)")
           or predict_linear(free_bytes[6h], 4 * 3600) < 0 unless absent(y) or count by (k) (z)
           or time() - w{instance=~"$instance"} > 3e2"#,
    );
    let names: Vec<&str> = u.metrics.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        ["free_bytes", "sandkeeper_entries", "w", "x_total", "y", "z"]
    );
    let grouping: Vec<&str> = u.grouping.iter().map(String::as_str).collect();
    assert_eq!(
        grouping,
        ["family", "instance", "job", "k", "mountpoint", "state"]
    );
    assert_eq!(u.matchers.len(), 3);
    assert_eq!(
        u.matchers[0],
        (
            "sandkeeper_entries".into(),
            "state".into(),
            "=".into(),
            "unknown".into()
        )
    );
    assert_eq!(uses("{__name__=\"a\"}").metrics.len(), 1);
    let samples =
        sandkeeper_testkit::prometheus::parse_exposition("m{a=\"x\\\"y\",b=\"p\\\\q\"} 1\n");
    let (name, labels, value) = &samples[0];
    assert_eq!((name.as_str(), *value), ("m", 1.0));
    assert_eq!(
        labels.clone().into_iter().collect::<Vec<_>>(),
        [("a".into(), "x\"y".into()), ("b".into(), "p\\q".into())]
    );
}
