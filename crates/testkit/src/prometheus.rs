//! Prometheus in tests: `promtool`, and the text exposition format read
//! back (what `watch --metrics-file` writes).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// `promtool ARGS…` run in `dir` with its temporary files in `tmp` (its
/// unit tests make a TSDB), `input` on its standard input: what it said
/// (stdout, then stderr). Fails the test when promtool fails. `None` when
/// promtool is not installed: `test` is skipped, saying so
/// ([`crate::skips::unless_ci`]; with `CI` set it fails instead).
pub fn promtool(test: &str, args: &[&str], dir: &Path, tmp: &Path, input: &str) -> Option<String> {
    let child = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::skips::unless_ci(
                test,
                "promtool is not installed (Debian package prometheus)",
            );
            return None;
        }
        Err(e) => panic!("{test}: run promtool: {e}"),
    };
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("wait for promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {}: {}\n{said}\n{input}",
        args.join(" "),
        out.status
    );
    Some(said)
}

/// `promtool check metrics` on `text` (a Prometheus exposition): fails
/// the test when promtool rejects it or lints anything (skipped, saying
/// so, without promtool; with `CI` set that fails).
pub fn check_metrics(text: &str) {
    let here = std::env::temp_dir();
    if let Some(said) = promtool(
        "promtool check metrics",
        &["check", "metrics"],
        &here,
        &here,
        text,
    ) {
        assert!(said.trim().is_empty(), "promtool lint:\n{said}");
    }
}

/// One sample: metric name, labels, value.
pub type Sample = (String, BTreeMap<String, String>, f64);

/// Parses the text exposition format strictly enough for the test: every
/// line is a comment (`# HELP`/`# TYPE` naming a metric) or a sample
/// `name{label="value",…} value`; label values unescaped.
pub fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let kind = words.next().unwrap();
            assert!(kind == "HELP" || kind == "TYPE", "{line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("{line}"));
                (name.to_owned(), parse_labels(body, line))
            }
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        samples.push((name, labels, value));
    }
    samples
}

fn parse_labels(body: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "{line}");
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("{line}"),
                },
                Some('"') => break,
                Some(c) => value.push(c),
                None => panic!("unterminated label value: {line}"),
            }
        }
        labels.insert(name, value);
        match chars.next() {
            Some(',') | None => {}
            Some(c) => panic!("unexpected {c:?}: {line}"),
        }
    }
    labels
}
