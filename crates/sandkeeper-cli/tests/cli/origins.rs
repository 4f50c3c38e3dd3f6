//! `scan`, `explain` and `ls` show recorded origins (issue 17), escaped,
//! grouped by creator per family, and in `--json`.

use std::ffi::OsStr;
use std::fs;

use sandkeeper_engine::origin::{self, Creator, Process, Recorder};
use sandkeeper_engine::root::Root;
use sandkeeper_engine::sandbox;
use sandkeeper_testkit::privilege::require_root;
use serde_json::Value;

use crate::{sandkeeper, stdout};

fn made_by(argv: &[&str], cgroup: &str) -> Creator {
    Creator::Process(Process {
        pid: 4242,
        comm: argv.first().map(|a| (*a).to_owned()),
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        cwd: Some("/home/ci/aura".into()),
        uid: Some(1000),
        cgroup: Some(cgroup.into()),
        ..Process::default()
    })
}

/// Two families; one family made by two creators (one with a terminal
/// escape in its argv), one entry whose creator exited, one unrecorded.
#[test]
fn scan_groups_families_by_creator_and_escapes() {
    if !require_root("scan_groups_families_by_creator_and_escapes") {
        return;
    }
    let base = sandbox!().unwrap();
    for name in ["aura-235-1", "aura-235-2", "aura-235-3", "vm-1", "vm-2"] {
        fs::create_dir(base.path().join(name)).unwrap();
    }
    let root = Root::open_exact(base.path()).unwrap();
    let cargo = made_by(&["cargo", "test"], "/system.slice/gitea-runner.service");
    let evil = made_by(
        &["evil\x1b[2J", "x"],
        "/user.slice/user-1000.slice/session-1.scope",
    );
    let write = |name: &str, c: Creator| {
        origin::write(root.fd(), OsStr::new(name), Recorder::Watch, c).unwrap();
    };
    write("aura-235-1", cargo.clone());
    write("aura-235-2", cargo);
    write("aura-235-3", evil);
    write("vm-1", Creator::Exited { pid: Some(77) });
    let path = base.path().to_str().unwrap();
    // The plain table (no entries kept: tallied as the scan streams) and
    // the one with `--entries` group the families alike.
    for args in [&["scan", path][..], &["scan", "--entries", path][..]] {
        let out = sandkeeper(args);
        let text = stdout(&out);
        assert!(text.contains("aura-235-*"), "{args:?}: {text}");
        let family: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("aura-235-*"))
            .take(3)
            .collect();
        assert!(
            family[1].starts_with(
                "  made by `cargo test` (unit gitea-runner.service, cwd /home/ci/aura): 2 entries"
            ),
            "{args:?}: {text}"
        );
        assert!(
            family[2].contains("unit session-1.scope, cwd /home/ci/aura): 1 entry,"),
            "{args:?}: {text}"
        );
        assert!(!text.contains('\x1b'), "escaped: {text}");
        assert!(
            text.contains("made by a process that exited before it could be read: 1 entry,"),
            "{args:?}: {text}"
        );
    }
    let out = sandkeeper(&["scan", "--entries", path]);
    let text = stdout(&out);
    assert!(
        text.contains(
            "made by a process (pid 77) that exited before it could be read, recorded by watch"
        ),
        "{text}"
    );

    // The families' creators in JSON, with or without the entries.
    let out = sandkeeper(&["scan", "--json", path]);
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let groups = doc["roots"][0]["groups"].as_array().unwrap();
    let group = |p: &str| groups.iter().find(|g| g["pattern"] == p).unwrap().clone();
    let aura = group("aura-235-*");
    let top = &aura["creators"][0];
    assert_eq!(top["kind"], "process", "{aura}");
    assert_eq!(
        top["command"],
        serde_json::json!(["cargo", "test"]),
        "{aura}"
    );
    assert_eq!(top["unit"], "gitea-runner.service", "{aura}");
    assert_eq!(top["cwd"], "/home/ci/aura", "{aura}");
    assert_eq!(top["count"], 2, "{aura}");
    assert_eq!(
        aura["creators"][1]["command"][0], "evil\x1b[2J",
        "exact, as JSON escapes it"
    );
    let vm = group("vm-*");
    assert_eq!(
        vm["creators"],
        serde_json::json!([{"kind": "exited", "count": 1, "disk_bytes": vm["creators"][0]["disk_bytes"]}]),
        "{vm}"
    );

    let out = sandkeeper(&["scan", "--json", "--entries", path]);
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let entries = doc["roots"][0]["entries"].as_array().unwrap();
    let by_name = |n: &str| entries.iter().find(|e| e["name"] == n).unwrap().clone();
    let aura = by_name("aura-235-1");
    assert_eq!(aura["origin"]["creator"]["kind"], "process");
    assert_eq!(aura["origin"]["creator"]["argv"][1], "test");
    assert_eq!(
        aura["origin"]["creator"]["cgroup"],
        "/system.slice/gitea-runner.service"
    );
    assert_eq!(by_name("vm-1")["origin"]["creator"]["kind"], "exited");
    assert!(
        by_name("vm-2").get("origin").is_none(),
        "no origin: no field"
    );

    let out = sandkeeper(&[
        "explain",
        "--root",
        path,
        base.path().join("aura-235-3").to_str().unwrap(),
    ]);
    let text = stdout(&out);
    assert!(text.contains("origin (recorded by watch"), "{text}");
    assert!(
        text.contains("cgroup: /user.slice/user-1000.slice/session-1.scope"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "escaped: {text}");
}

/// A `sandkeeper run` directory names its command as its creator.
#[test]
fn run_records_its_command() {
    if !require_root("run_records_its_command") {
        return;
    }
    let base = sandbox!().unwrap();
    let path = base.path().to_str().unwrap();
    let script = format!("{} ls --json {path}", env!("CARGO_BIN_EXE_sandkeeper"));
    let out = sandkeeper(&["run", "--root", path, "--", "sh", "-c", &script]);
    let text = stdout(&out);
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let origin = &doc["sandboxes"][0]["origin"];
    assert_eq!(origin["by"], "run", "{text}");
    assert_eq!(origin["creator"]["argv"][0], "sh", "{text}");
    assert_eq!(origin["creator"]["argv"][2], script, "{text}");
}

/// A family made by more creators than the table names: the three
/// biggest by disk usage, then one "(other creators)" line with the rest;
/// the JSON lists them all (at most `sandkeeper_engine::scan::SLOTS`).
#[test]
fn scan_names_three_creators_per_family_and_sums_up_the_rest() {
    if !require_root("scan_names_three_creators_per_family_and_sums_up_the_rest") {
        return;
    }
    let base = sandbox!().unwrap();
    let root = Root::open_exact(base.path()).unwrap();
    for i in 0..5 {
        let name = format!("job-{i}");
        fs::create_dir(base.path().join(&name)).unwrap();
        // job-0 is the biggest: its creator comes first.
        fs::write(
            base.path().join(&name).join("data"),
            vec![1u8; (5 - i) * 64 * 1024],
        )
        .unwrap();
        let argv = format!("make-{i}");
        origin::write(
            root.fd(),
            OsStr::new(&name),
            Recorder::Watch,
            made_by(&[argv.as_str()], "/system.slice/ci.service"),
        )
        .unwrap();
    }
    let path = base.path().to_str().unwrap();
    let text = stdout(&sandkeeper(&["scan", path]));
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("  made by"))
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].starts_with("  made by `make-0` (unit ci.service"),
        "{text}"
    );
    assert!(lines[2].starts_with("  made by `make-2` "), "{text}");
    assert!(
        lines[3].starts_with("  made by (other creators): 2 entries, "),
        "{text}"
    );
    let doc: Value = serde_json::from_str(&stdout(&sandkeeper(&["scan", "--json", path]))).unwrap();
    let creators = doc["roots"][0]["groups"][0]["creators"].as_array().unwrap();
    assert_eq!(creators.len(), 5, "{creators:?}");
    let sum: u64 = creators.iter().map(|c| c["count"].as_u64().unwrap()).sum();
    assert_eq!(sum, 5);
}

/// `watch --once --metrics-file` with `root` as the only root; the text.
fn metrics_of(root: &std::path::Path, out: &std::path::Path, extra: &str) -> String {
    let config = out.join("watch.toml");
    fs::write(
        &config,
        format!(
            "[[root]]\npath = \"{}\"\ngrace = \"1h\"\n{extra}",
            root.display()
        ),
    )
    .unwrap();
    let metrics = out.join("sandkeeper.prom");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(["watch", "--once", "--config"])
        .arg(&config)
        .arg("--metrics-file")
        .arg(&metrics)
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = fs::read_to_string(&metrics).unwrap();
    // Every series once: node_exporter drops a file with a duplicate.
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        assert!(
            seen.insert(series.to_owned()),
            "duplicate {series}:\n{text}"
        );
    }
    text
}

/// `(creator label, value)` of the samples of `name` for `root`.
fn creators<'a>(text: &'a str, name: &str, root: &str) -> Vec<(&'a str, u64)> {
    let prefix = format!("{name}{{root=\"{root}\",creator=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|l| l.rsplit_once("\"} "))
        .map(|(c, v)| (c, v.parse().unwrap()))
        .collect()
}

/// Issue 17: `watch`'s metrics carry a creator label: each creator's
/// entries and bytes (its name and unit, never its arguments or cwd), at most 20 per
/// root and the rest `(other)`; a creator's text is escaped and cannot
/// take the tool's own `(other)`. A per-user root (0700) shows only
/// `creator="(all)"`, as its families, unless `user_dir_families = true`.
#[test]
fn watch_metrics_label_creators_with_bounded_cardinality() {
    use sandkeeper_testkit::privilege::nobody_sh;
    use std::os::unix::fs::PermissionsExt;
    if !require_root("watch_metrics_label_creators_with_bounded_cardinality") {
        return;
    }
    let base = sandkeeper_testkit::scratch::Scratch::reachable_by_others("origins-metrics");
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    let out = sandbox!().unwrap();
    let root = Root::open_exact(base.path()).unwrap();
    // 25 creators of one entry each, growing in size; one named like the
    // tool's bucket, one with a terminal escape.
    for i in 0..25usize {
        let name = format!("job-{i:02}");
        fs::create_dir(base.path().join(&name)).unwrap();
        fs::write(base.path().join(&name).join("f"), vec![1u8; (i + 1) * 8192]).unwrap();
        let argv = match i {
            24 => "(other)".to_owned(),
            23 => "evil\x1b[2J".to_owned(),
            _ => format!("make-{i:02}"),
        };
        origin::write(
            root.fd(),
            OsStr::new(&name),
            Recorder::Watch,
            made_by(&[argv.as_str(), "all"], "/system.slice/ci.service"),
        )
        .unwrap();
    }
    // nobody's private directory, with an entry whose creator is secret.
    nobody_sh(
        "cd \"$R\"; mkdir -m 0700 sandkeeper-65534; mkdir sandkeeper-65534/proj-1",
        &[("R", base.path().as_os_str())],
    );
    let user = Root::open_exact(&base.path().join("sandkeeper-65534")).unwrap();
    origin::write(
        user.fd(),
        OsStr::new("proj-1"),
        Recorder::Watch,
        made_by(
            &["secret-tool", "--project", "alpha-7"],
            "/user.slice/u.slice",
        ),
    )
    .unwrap();

    let text = metrics_of(base.path(), out.path(), "");
    let canonical = fs::canonicalize(base.path()).unwrap();
    let shared = canonical.display().to_string();
    let entries = creators(&text, "sandkeeper_creator_entries", &shared);
    assert_eq!(entries.len(), 21, "20 creators and (other):\n{text}");
    assert!(entries.contains(&("(other)", 5)), "{text}");
    assert!(
        entries.contains(&(r"\\(other) (unit ci.service)", 1)),
        "a creator cannot be the tool's (other):\n{text}"
    );
    assert!(
        entries.contains(&(r"evil\\u{1b}[2J (unit ci.service)", 1)),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text}");
    assert!(!text.contains("/home/ci/aura"), "never the cwd:\n{text}");
    assert!(!text.contains("all (unit"), "never an argument:\n{text}");
    let bytes = creators(&text, "sandkeeper_creator_disk_usage_bytes", &shared);
    assert_eq!(bytes.len(), 21, "{text}");

    let private = canonical.join("sandkeeper-65534").display().to_string();
    assert_eq!(
        creators(&text, "sandkeeper_creator_entries", &private),
        [("(all)", 1)],
        "a per-user root: totals only:\n{text}"
    );
    assert!(!text.contains("secret-tool"), "{text}");
    let text = metrics_of(base.path(), out.path(), "user_dir_families = true\n");
    assert_eq!(
        creators(&text, "sandkeeper_creator_entries", &private),
        [("secret-tool (unit u.slice)", 1)],
        "asked for: {text}"
    );
}

/// A ramfs (no `trusted.*` attributes) mounted on a fresh directory,
/// emptied and unmounted when dropped.
struct Ramfs(sandkeeper_engine::Sandbox);

impl Ramfs {
    fn new() -> Ramfs {
        let dir = sandbox!().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "ramfs", "-o", "mode=0755", "sandkeeper-test"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount ramfs at {}", dir.path().display());
        Ramfs(dir)
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        // What is in it goes with it; the directory is removed after.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

/// Issue 17: on a filesystem without `trusted.*` attributes, origins go to
/// the fallback store (`SANDKEEPER_ORIGIN_STORE` here): `scan` groups by
/// them, `--json --entries` carries them, and `sandkeeper run` records its
/// own directory there.
#[test]
fn origins_of_a_root_without_trusted_attributes_come_from_the_store() {
    if !require_root("origins_of_a_root_without_trusted_attributes_come_from_the_store") {
        return;
    }
    let ramfs = Ramfs::new();
    let base = ramfs.0.path();
    let keep = sandbox!().unwrap();
    let store = keep.path().join("store");
    for name in ["aura-235-1", "aura-235-2"] {
        fs::create_dir(base.join(name)).unwrap();
    }
    let root = Root::open_exact(base).unwrap();
    origin::write_with_store(
        root.fd(),
        OsStr::new("aura-235-1"),
        Recorder::Watch,
        made_by(&["cargo", "test"], "/system.slice/gitea-runner.service"),
        &store,
    )
    .unwrap();
    let with_store = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
            .args(args)
            .env("SANDKEEPER_ORIGIN_STORE", &store)
            .env_remove("SANDKEEPER_KEEP")
            .output()
            .unwrap()
    };
    let path = base.to_str().unwrap();
    let text = stdout(&with_store(&["scan", path]));
    assert!(
        text.contains(
            "  made by `cargo test` (unit gitea-runner.service, cwd /home/ci/aura): 1 entry,"
        ),
        "{text}"
    );
    let doc: Value =
        serde_json::from_str(&stdout(&with_store(&["scan", "--json", "--entries", path]))).unwrap();
    let entries = doc["roots"][0]["entries"].as_array().unwrap();
    assert_eq!(entries[0]["origin"]["creator"]["argv"][0], "cargo");
    assert!(entries[1].get("origin").is_none(), "{entries:?}");
    // Without the store: nothing.
    let text = stdout(&sandkeeper(&["scan", path]));
    assert!(!text.contains("made by"), "{text}");

    let script = format!("{} ls --json {path}", env!("CARGO_BIN_EXE_sandkeeper"));
    let out = with_store(&["run", "--root", path, "--", "sh", "-c", &script]);
    let text = stdout(&out);
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let origin = &doc["sandboxes"][0]["origin"];
    assert_eq!(origin["by"], "run", "{text}");
    assert_eq!(origin["creator"]["argv"][0], "sh", "{text}");
}
