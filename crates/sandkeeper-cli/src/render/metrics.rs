//! The metrics of `watch` ([`sandkeeper_engine::metrics`]) in the Prometheus text
//! exposition format (0.0.4) that node_exporter's textfile collector
//! reads, written atomically so a scrape never sees half a file.

use std::fmt::Write as _;
use std::path::Path;

use sandkeeper_engine::metrics::{MetricValue, Metrics};

/// The exposition text of `metrics`.
pub fn prometheus(metrics: &Metrics) -> String {
    let mut out = String::with_capacity(4096);
    for family in metrics.families() {
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
                let _ = writeln!(out, "{name}{{{}}} {value}", labels(&sample.labels));
            }
        }
    }
    out
}

/// `a="x",b="y"`, values escaped as the format wants.
fn labels(pairs: &[(&str, String)]) -> String {
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

/// Writes `text` to `path` atomically, mode 0644, through
/// [`sandkeeper_engine::output`]: a random temp name beside it (a name the textfile
/// collector ignores) made with `O_EXCL`, written, flushed and renamed over
/// the target through the directory's descriptor; a planted symlink is never
/// followed, and a target that is not a regular file is refused.
///
/// # Errors
///
/// When the directory is unsafe or missing, the target is not a regular
/// file, or the temp file cannot be written or renamed (it is removed then).
pub fn write_atomic(path: &Path, text: &str) -> sandkeeper_engine::Result<()> {
    sandkeeper_engine::output::write_atomic(path, text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

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
            assert_eq!(labels(&[("x", value.to_owned())]), want, "{value:?}");
        }
    }

    #[test]
    fn an_empty_run_still_says_something() {
        let mut m = Metrics::new();
        m.finish_cycle(
            Duration::from_millis(1500),
            UNIX_EPOCH + Duration::from_secs(10),
        );
        let text = prometheus(&m);
        assert!(
            text.contains("# TYPE sandkeeper_cycles_total counter\n"),
            "{text}"
        );
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

        let dir = sandkeeper_engine::Sandbox::new().unwrap();
        let path = dir.path().join("sandkeeper.prom");
        write_atomic(&path, "a 1\n").unwrap();
        write_atomic(&path, "a 2\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "a 2\n");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != sandkeeper_engine::lease::LEASE_FILE)
            .collect();
        assert_eq!(names, ["sandkeeper.prom"]);
        let err = write_atomic(&dir.path().join("missing/x.prom"), "").unwrap_err();
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::NotFound);
    }
}
