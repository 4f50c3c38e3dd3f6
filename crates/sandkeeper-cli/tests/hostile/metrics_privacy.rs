//! Issue 11, item 7: the metrics file (mode 0644, and served over the
//! network by node_exporter) labelled every family of every per-user root
//! `sandkeeper-<uid>`: nobody cannot list another user's 0700 directory,
//! but read its family names from the metrics. Per-user roots now appear
//! only as totals (`family="(all)"`) unless the root's config sets
//! `user_dir_families = true`.
//!
//! And the labels are attacker-chosen text: a family must never collide
//! with the tool's own `(other)`/`(all)` (a duplicate series makes
//! node_exporter drop the whole file), and quotes and backslashes are
//! escaped (promtool checks the file).

use std::collections::BTreeSet;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use sandkeeper::Sandbox;
use sandkeeper_testkit::privilege::{nobody_sh, require_root};
use sandkeeper_testkit::scratch::reachable_by_others;

use crate::bin;

const SECRET: &str = "secret-project-alpha";

/// A shared sticky root (1777) where nobody keeps a 0700 `sandkeeper-65534`
/// with two private sandboxes-to-be, and a private directory for the
/// metrics.
struct Fixture {
    root: Sandbox,
    out: Sandbox,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let root = Sandbox::builder()
            .root(reachable_by_others())
            .tag(tag)
            .create()
            .unwrap();
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        nobody_sh(
            "cd \"$R\"; mkdir -m 0700 sandkeeper-65534; \
             mkdir sandkeeper-65534/${S}-1234 sandkeeper-65534/${S}-5678; \
             echo x > sandkeeper-65534/${S}-1234/f; mkdir 'shared \"quoted\" \\ dir'",
            &[("R", root.path().as_os_str()), ("S", SECRET.as_ref())],
        );
        let out = Sandbox::builder().tag(tag).create().unwrap();
        Fixture { root, out }
    }

    /// `watch --once` as root with `extra` in the root's config; the
    /// metrics text.
    fn metrics(&self, extra: &str) -> String {
        let config = self.out.path().join("watch.toml");
        fs::write(
            &config,
            format!(
                "[[root]]\npath = \"{}\"\ngrace = \"1h\"\n{extra}",
                self.root.path().display()
            ),
        )
        .unwrap();
        let metrics = self.out.path().join("sandkeeper.prom");
        let out = bin()
            .args(["watch", "--once", "--config"])
            .arg(&config)
            .arg("--metrics-file")
            .arg(&metrics)
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{log}");
        fs::read_to_string(&metrics).unwrap()
    }
}

/// `(labels, value)` of each sample of `name`.
fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, &'a str)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|l| l.rsplit_once("} "))
        .collect()
}

/// Every series of the file is there once (node_exporter drops a file with
/// a duplicate), and promtool, when installed, accepts the file.
fn check_exposition(text: &str) {
    let mut seen = BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        assert!(seen.insert(series), "duplicate series {series}:\n{text}");
    }
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(std::env::var_os("CI").is_none(), "promtool is missing");
            eprintln!("skipping promtool check metrics: promtool is not installed");
            return;
        }
        Err(e) => panic!("run promtool: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool: {said}\n{text}");
    assert!(said.trim().is_empty(), "promtool lint:\n{said}");
}

fn user_root_label(fx: &Fixture) -> String {
    let canonical = fs::canonicalize(fx.root.path()).unwrap();
    canonical.join("sandkeeper-65534").display().to_string()
}

/// A per-user root shows totals only: no name from inside it.
#[test]
fn per_user_roots_show_totals_not_names() {
    if !require_root("per_user_roots_show_totals_not_names") {
        return;
    }
    let fx = Fixture::new("hostile-metrics-private");
    let text = fx.metrics("");
    check_exposition(&text);
    assert!(!text.contains(SECRET), "a private name leaked:\n{text}");
    let user_root = format!("root=\"{}\"", user_root_label(&fx));
    let mine: Vec<_> = samples(&text, "sandkeeper_entries")
        .into_iter()
        .filter(|(labels, _)| labels.contains(&user_root))
        .collect();
    assert_eq!(mine.len(), 5, "one series per state:\n{text}");
    let total: u64 = mine.iter().map(|(_, v)| v.parse::<u64>().unwrap()).sum();
    assert_eq!(total, 2, "{text}");
    assert!(
        mine.iter().all(|(l, _)| l.contains("family=\"(all)\"")),
        "{text}"
    );
    // The shared root's own families are public, and escaped: the
    // pattern doubles the name's `\`, the label format both of those.
    assert!(
        text.contains(r#"family="shared \"quoted\" \\\\ dir""#),
        "{text}"
    );
}

/// `user_dir_families = true` asks for the names, and gets them.
#[test]
fn user_dir_families_is_an_explicit_choice() {
    if !require_root("user_dir_families_is_an_explicit_choice") {
        return;
    }
    let fx = Fixture::new("hostile-metrics-optin");
    let text = fx.metrics("user_dir_families = true\n");
    check_exposition(&text);
    assert!(
        text.contains(&format!(
            "root=\"{}\",family=\"{SECRET}-*\"",
            user_root_label(&fx)
        )),
        "{text}"
    );
}

/// A family named `(other)` (or `(all)`) in a shared root, with more than
/// 100 families: the tool's own bucket and the attacker's family must stay
/// two series.
#[test]
fn a_family_cannot_collide_with_the_tools_own_labels() {
    if !require_root("a_family_cannot_collide_with_the_tools_own_labels") {
        return;
    }
    let fx = Fixture::new("hostile-metrics-collide");
    nobody_sh(
        "cd \"$R\"; for a in a b c d e f g h i j k; do for b in a b c d e f g h i j k; do \
         mkdir q$a$b; done; done; mkdir '(other)' '(all)'; \
         head -c 65536 /dev/zero > '(other)/big'; head -c 65536 /dev/zero > '(all)/big'",
        &[("R", fx.root.path().as_os_str())],
    );
    let text = fx.metrics("");
    check_exposition(&text);
    assert!(text.contains("family=\"(other)\""), "{text}");
    assert!(text.contains(r#"family="\\(other)""#), "{text}");
    assert!(text.contains(r#"family="\\(all)""#), "{text}");
}
