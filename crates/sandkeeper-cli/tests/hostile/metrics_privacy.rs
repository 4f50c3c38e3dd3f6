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
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use sandkeeper_engine::Sandbox;
use sandkeeper_testkit::privilege::{nobody_sh, require_root};
use sandkeeper_testkit::prometheus::check_metrics;
use sandkeeper_testkit::scratch::Scratch;

use crate::bin;

const SECRET: &str = "secret-project-alpha";

/// A shared sticky root (1777) where nobody keeps a 0700 `sandkeeper-65534`
/// with two private sandboxes-to-be, and a private directory for the
/// metrics.
struct Fixture {
    root: Scratch,
    out: Sandbox,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let root = Scratch::reachable_by_others(tag);
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
    check_metrics(text);
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

/// The `--token=…` argument the victim's command carries.
const TOKEN: &str = "--token=s3cr3t-0f-65533";

/// Every regular file under `dir` that others may read (mode `o+r`),
/// with its text.
fn readable_by_others(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let meta = fs::symlink_metadata(e.path()).unwrap();
        if meta.is_dir() {
            out.extend(readable_by_others(&e.path()));
        } else if meta.is_file() && meta.mode() & 0o004 != 0 {
            let text = String::from_utf8_lossy(&fs::read(e.path()).unwrap()).into_owned();
            out.push((e.path(), text));
        }
    }
    out
}

/// Issue 25, item 1: with `track_origins`, the metrics file (0644, served
/// over the network) labelled each creator with its first arguments: a
/// victim (uid 65533) whose command carries `--token=SECRET` and who makes
/// an entry in a tracked root had the secret published, still there after
/// it exited, `hidepid` or not. Now a creator is its executable name and
/// unit only, and the tracker keeps no arguments at all: the token is in no
/// file others can read, in no output another user gets, in no log line,
/// and not even in the root-only record.
#[test]
fn a_creators_arguments_reach_nothing_others_can_read() {
    use sandkeeper_testkit::process::Spawned;
    use std::io::BufRead as _;
    use std::os::unix::fs::MetadataExt;
    if !require_root("a_creators_arguments_reach_nothing_others_can_read") {
        return;
    }
    let fx = Fixture::new("hostile-metrics-argv");
    let config = fx.out.path().join("track.toml");
    fs::write(
        &config,
        format!(
            "[[root]]\npath = \"{}\"\ngrace = \"1h\"\ntrack_origins = true\n",
            fx.root.path().display()
        ),
    )
    .unwrap();
    let log = fx.out.path().join("watch.log");
    let mut watch = Spawned(
        bin()
            .args(["watch", "--config"])
            .arg(&config)
            .arg("--metrics-file")
            .arg(fx.out.path().join("tracking.prom"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = std::io::BufReader::new(watch.0.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("origins: recording the creators") {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "watch: {said}");
        said += &line;
    }
    // The victim's own shell makes the entry (a redirection) and lives on.
    let mut victim = Spawned(
        Command::new("setpriv")
            .args(["--reuid=65533", "--regid=65533", "--clear-groups", "--"])
            .args(["sh", "-c", ": > \"$1/app-victim\"; read x", TOKEN])
            .arg(fx.root.path())
            .stdin(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let root = sandkeeper_engine::root::Root::open_exact(fx.root.path()).unwrap();
    sandkeeper_testkit::process::wait_until("the victim's origin", || {
        sandkeeper_engine::origin::read(root.fd(), "app-victim".as_ref()).is_some()
    });
    let record = sandkeeper_engine::origin::read(root.fd(), "app-victim".as_ref()).unwrap();
    let record = serde_json::to_string(&record).unwrap();
    assert!(
        !record.contains(TOKEN),
        "the record keeps no argument: {record}"
    );
    assert!(record.contains("\"uid\":65533"), "{record}");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&watch.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
    said += &rest;
    let _ = watch.0.wait();
    fs::write(&log, &said).unwrap();

    // The metrics (the victim's process still running, then gone).
    let text = fx.metrics("");
    assert!(
        text.contains("creator=\"sh"),
        "the executable's name:\n{text}"
    );
    drop(victim.0.stdin.take());
    let _ = victim.0.wait();
    let gone = fx.metrics("");
    for (path, text) in readable_by_others(fx.out.path())
        .into_iter()
        .chain(readable_by_others(fx.root.path()))
    {
        assert!(!text.contains(TOKEN), "{}:\n{text}", path.display());
    }
    assert!(!gone.contains(TOKEN), "{gone}");
    assert!(!said.contains(TOKEN), "watch's log:\n{said}");
    let meta = fs::metadata(fx.out.path().join("sandkeeper.prom")).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o644, "the metrics are world-readable");

    // Another user asking: no origin at all (no `trusted.*` for them).
    let entry = fx.root.path().join("app-victim");
    for args in [
        vec!["ls", fx.root.path().to_str().unwrap()],
        vec!["explain", entry.to_str().unwrap()],
        vec![
            "scan",
            "--json",
            "--entries",
            fx.root.path().to_str().unwrap(),
        ],
    ] {
        let out = Command::new("setpriv")
            .args(sandkeeper_testkit::privilege::SETPRIV_NOBODY[1..].iter())
            .arg(env!("CARGO_BIN_EXE_sandkeeper"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains(TOKEN), "{args:?}: {text}");
    }
}
