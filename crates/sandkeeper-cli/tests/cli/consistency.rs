//! Issue 15, "CLI": one rule per kind of input, one vocabulary for kept
//! sandboxes, output that says what happened, and JSON documents whose
//! documented fields are the ones emitted.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use sandkeeper_engine::sandbox;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use serde_json::Value;

use crate::{sandkeeper, sandkeeper_env, stderr, stdout};

fn top() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Issue 15: a bare `sandkeeper` is a usage error: help on stderr, exit 2,
/// nothing on stdout.
#[test]
fn bare_sandkeeper_prints_help_on_stderr_and_exits_2() {
    for args in [&[][..], &["--quiet"][..]] {
        let out = sandkeeper(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
        assert!(err.contains("Usage: sandkeeper"), "{args:?}: {err}");
    }
}

/// Issue 15: one rule for durations, on the command line and in the config
/// file: `0` needs no unit, any other bare number is refused with the hint.
#[test]
fn a_duration_needs_a_unit_except_zero() {
    let root = sandbox!().unwrap();
    let r = root.path().to_str().unwrap();
    for args in [
        &["reap", "--dry-run", "--older-than", "0", r][..],
        &["reap", "--dry-run", "--grace", "0", r][..],
        &["run", "--kill-grace", "0", "--", "true"][..],
    ] {
        let out = sandkeeper(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&out, root.path())
        );
    }
    for (args, bare) in [
        (&["run", "--kill-grace", "5", "--", "true"][..], "5"),
        (&["reap", "--dry-run", "--older-than", "90", r][..], "90"),
        (&["reap", "--dry-run", "--grace", "1.5", r][..], "1.5"),
    ] {
        let out = sandkeeper(args);
        let err = stderr(&out, root.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "duration \"{bare}\" has no unit; write {bare}s for seconds"
            )),
            "{args:?}: {err}"
        );
    }
    // The config file: the same rule, the same words.
    let conf = root.path().join("c.toml");
    fs::write(&conf, format!("[[root]]\npath = \"{r}\"\ngrace = \"5\"\n")).unwrap();
    let out = sandkeeper(&["watch", "--check", "--config", conf.to_str().unwrap()]);
    let err = stderr(&out, root.path());
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("write 5s for seconds"), "{err}");
}

/// Issue 15: `/` is refused as a root by every subcommand, as the
/// README's table of exit statuses says, however it is named.
#[test]
fn the_filesystem_root_is_refused_everywhere() {
    let dir = sandbox!().unwrap();
    let up = "/../";
    for args in [
        &["scan", "/"][..],
        &["scan", up][..],
        &["ls", "/"][..],
        &["reap", "--dry-run", "/"][..],
        &["explain", "/etc", "--root", "/"][..],
    ] {
        let out = sandkeeper(args);
        let err = stderr(&out, dir.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("it is the filesystem root `/`"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// Issue 15: `explain` without `--root` of a directory in `/` says that
/// `/` is never a root, and what to explain instead.
#[test]
fn explaining_a_top_level_directory_says_what_to_do() {
    let dir = sandbox!().unwrap();
    let out = sandkeeper(&["explain", "/etc"]);
    let err = stderr(&out, dir.path());
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot explain /etc: its parent directory is the filesystem root `/`, which is never a root"),
        "{err}"
    );
    assert!(
        err.contains("hint: explain an entry inside it, such as /etc/NAME"),
        "{err}"
    );
}

/// Issue 15: overlapping roots are refused on the command line, as in the
/// config file, naming both; compared as written and as resolved.
#[test]
fn overlapping_roots_are_refused_naming_both() {
    let base = sandbox!().unwrap();
    let b = base.path();
    fs::create_dir(b.join("ci")).unwrap();
    fs::create_dir(b.join("other")).unwrap();
    symlink(b.join("ci"), b.join("link")).unwrap();
    let p = |name: &str| b.join(name).to_str().unwrap().to_owned();
    let cases = [
        (vec![p(""), p("ci")], "root [DIR]/ci is inside root [DIR]/"),
        (vec![p("ci"), p("")], "root [DIR]/ contains root [DIR]/ci"),
        (
            vec![p("ci"), p("ci")],
            "root [DIR]/ci is the same directory as root [DIR]/ci",
        ),
        (
            vec![p("ci"), p("link")],
            "root [DIR]/link is the same directory as root [DIR]/ci",
        ),
    ];
    for cmd in ["scan", "ls"] {
        for (roots, want) in &cases {
            let mut args = vec![cmd];
            args.extend(roots.iter().map(String::as_str));
            let out = sandkeeper(&args);
            let err = stderr(&out, b);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(want) && err.contains("an entry may belong to one root only"),
                "{args:?}: {err}"
            );
        }
    }
    let out = sandkeeper(&["scan", &p("ci"), &p("other")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out, b));
}

/// Issue 15: `--config` naming a file that does not exist says so, and how
/// to make one; not "fix the file".
#[test]
fn a_missing_config_file_says_how_to_create_it() {
    let dir = sandbox!().unwrap();
    let missing = dir.path().join("etc/sandkeeper/config.toml");
    for cmd in [&["reap", "--dry-run"][..], &["watch", "--check"][..]] {
        let mut args = cmd.to_vec();
        args.extend(["--config", missing.to_str().unwrap()]);
        let out = sandkeeper(&args);
        let err = stderr(&out, dir.path());
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("error: the config file [DIR]/etc/sandkeeper/config.toml does not exist"),
            "{err}"
        );
        assert!(
            err.contains(
                "install -D -m 0644 contrib/systemd/config.toml [DIR]/etc/sandkeeper/config.toml"
            ),
            "{err}"
        );
        assert!(!err.contains("fix the file"), "{err}");
    }
}

/// Issue 15: docs/config.md's example is contrib/systemd/config.toml,
/// byte for byte (it is checked to parse in `config::the_documented_examples_parse`).
#[test]
fn the_documented_config_is_the_shipped_one() {
    let doc = fs::read_to_string(top().join("docs/config.md")).unwrap();
    let example = doc
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```toml block in docs/config.md");
    let shipped = fs::read_to_string(top().join("contrib/systemd/config.toml")).unwrap();
    assert_eq!(
        example, shipped,
        "docs/config.md and contrib/systemd/config.toml differ"
    );
}

/// Issue 15: `ls` with nothing to list says so, naming the roots; `--help`
/// says `--json` is an object.
#[test]
fn ls_says_when_there_is_nothing() {
    let root = sandbox!().unwrap();
    let out = sandkeeper(&["ls", root.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out).replace(root.path().to_str().unwrap(), "[DIR]"),
        "no sandboxes under [DIR]\n"
    );
    let out = sandkeeper(&["ls", "--json", root.path().to_str().unwrap()]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "sandkeeper.ls/v1");
    assert_eq!(doc["sandboxes"], Value::Array(Vec::new()));
    let help = stdout(&sandkeeper(&["ls", "--help"]));
    assert!(
        help.contains("docs/ls-json.md") && help.contains("object"),
        "{help}"
    );
    assert!(!help.contains("an array of sandboxes"), "{help}");
}

/// Issue 15: `run`'s leftover line names three families and sums up the
/// rest; counts agree with their nouns.
#[test]
fn run_names_three_families_and_sums_up_the_rest() {
    let root = sandbox!().unwrap();
    let out = sandkeeper(&[
        "run",
        "--root",
        root.path().to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "for n in a b c d e; do mkdir \"$TMPDIR/$n\"; done",
    ]);
    let err = stderr(&out, root.path());
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("sh left 5 entries (20.0 KiB: a 4.00 KiB, b 4.00 KiB, c 4.00 KiB, and 2 more families (8.00 KiB)) in TMPDIR; removed"),
        "{err}"
    );
    let out = sandkeeper(&[
        "run",
        "--root",
        root.path().to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "for n in a b c d; do mkdir \"$TMPDIR/$n\"; done",
    ]);
    let err = stderr(&out, root.path());
    assert!(err.contains("and 1 more family (4.00 KiB))"), "{err}");
    let out = sandkeeper(&[
        "run",
        "--root",
        root.path().to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "mkdir \"$TMPDIR/a\"",
    ]);
    let err = stderr(&out, root.path());
    assert!(
        err.contains("sh left 1 entry (4.00 KiB: a 4.00 KiB) in TMPDIR"),
        "{err}"
    );
}

/// The fields a `docs/*-json.md` documents: every backquoted name in the
/// first cell of its tables' rows, those that look like JSON paths.
fn documented(doc: &str) -> BTreeSet<String> {
    let text = fs::read_to_string(top().join("docs").join(doc)).unwrap();
    let mut out = BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cell = line.split('|').nth(1).unwrap_or_default();
        for name in cell.split('`').skip(1).step_by(2) {
            out.insert(name.to_owned());
        }
    }
    out
}

/// Every field of `value`, as dotted paths (`left.families[].pattern`),
/// not descending below the paths in `opaque`.
fn emitted(value: &Value, prefix: &str, opaque: &[&str], out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(path.clone());
                if !opaque.contains(&path.as_str()) {
                    emitted(v, &path, opaque, out);
                }
            }
        }
        Value::Array(items) => {
            let path = format!("{prefix}[]");
            for item in items {
                emitted(item, &path, opaque, out);
            }
        }
        _ => {}
    }
}

/// Fields whose parts are documented one by one: the parent need not be
/// a row of its own (`a[]` and `a` are one field).
fn with_parents(fields: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for f in fields {
        out.insert(f.trim_end_matches("[]").to_owned());
        let mut path = f.as_str();
        while let Some(i) = path.rfind('.') {
            path = &path[..i];
            out.insert(path.trim_end_matches("[]").to_owned());
        }
    }
    out
}

/// Issue 15: docs/run-json.md documents exactly the fields `run
/// --report-json` writes.
#[test]
fn run_json_is_as_documented() {
    let root = sandbox!().unwrap();
    let report = root.path().join("report.json");
    let out = sandkeeper(&[
        "run",
        "--root",
        root.path().to_str().unwrap(),
        "--report-json",
        report.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "mkdir \"$TMPDIR/a-1\"",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out, root.path()));
    let doc: Value = serde_json::from_str(&fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(doc["schema"], "sandkeeper.run/v1");
    let mut got = BTreeSet::new();
    emitted(&doc, "", &[], &mut got);
    assert_eq!(
        with_parents(&documented("run-json.md")),
        with_parents(&got),
        "docs/run-json.md vs emitted"
    );
}

/// Issue 15, in a PID namespace (every process can be inspected): a kept
/// sandbox is `kept` everywhere — scan's KEPT column, never reclaimable,
/// in its JSON too; `ls`'s STATE with until when; `reap`'s reason;
/// `explain`'s first line — with the time in one form; `ls` shows SITE, the
/// program without cargo's hash, cuts COMMAND to the terminal; `explain`
/// without `--root` takes the parent; `--target-free 99%` says it was not
/// reached; docs/ls-json.md documents exactly what `ls --json` prints.
#[test]
fn kept_sandboxes_are_kept_everywhere() {
    run_in_pid_namespace(
        "kept_sandboxes_are_kept_everywhere",
        "consistency::inner_kept",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_kept() {
    if !in_namespace() {
        return;
    }
    let base = sandbox!().unwrap();
    let root = base.path().join("root");
    fs::create_dir(&root).unwrap();
    let r = root.to_str().unwrap();
    // A kept run directory (its owner gone), and a live sandbox this test
    // holds, made with a site.
    let out = sandkeeper(&[
        "run",
        "--root",
        r,
        "--keep",
        "always",
        "--keep-for",
        "2d",
        "--",
        "true",
    ]);
    let err = stderr(&out, &root);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("kept at [DIR]/run-true-") && err.contains("UTC (2d from now)"),
        "{err}"
    );
    let live = sandkeeper_engine::Sandbox::builder()
        .root(&root)
        .tag("live")
        .site("tests/cli/consistency.rs:7")
        .create()
        .unwrap();
    let kept_name = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.starts_with("run-true-"))
        .unwrap();
    let kept = root.join(&kept_name);

    // scan: KEPT 1, nothing reclaimable; the JSON agrees.
    let out = sandkeeper(&["scan", "--entries", r]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let family = text
        .lines()
        .find(|l| l.starts_with("run-true-*"))
        .unwrap_or_else(|| panic!("no run-true-* family: {text}"));
    let cols: Vec<&str> = family.split_whitespace().collect();
    // FAMILY COUNT SIZE(2) OLDEST NEWEST LIVE IN-USE ORPHANED KEPT IDLE UNKNOWN RECLAIMABLE(2)
    assert_eq!(&cols[6..11], ["0", "0", "0", "1", "0"], "{text}");
    assert!(family.ends_with("0 B"), "{text}");
    assert!(text.contains("2 entries in 2 families:"), "{text}");
    assert!(
        text.contains("(1 sandbox kept on purpose, not counted)"),
        "{text}"
    );
    let entry = text.lines().find(|l| l.contains(&kept_name)).unwrap();
    assert!(entry.starts_with("kept "), "{entry}");
    assert!(
        entry.contains("[kept until ") && entry.contains(" UTC (1d 23h"),
        "{entry}"
    );
    let out = sandkeeper(&["scan", "--json", "--entries", r]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let group = doc["roots"][0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["pattern"] == "run-true-*")
        .unwrap();
    assert_eq!(group["kept"], 1);
    assert_eq!(group["reclaimable_bytes"], 0);
    assert_eq!(group["states"]["orphaned"], 1);
    let e = doc["roots"][0]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == kept_name.as_str())
        .unwrap();
    assert!(e["kept_until_ms"].is_u64(), "{e}");

    // reap keeps it, saying so in the same words.
    let out = sandkeeper(&["reap", "--dry-run", "--verbose", "--grace", "0s", r]);
    let text = stdout(&out);
    assert!(text.contains("would remove 0 entries (0 B)"), "{text}");
    assert!(text.contains("left 2 entries: kept 1, live 1"), "{text}");
    assert!(
        text.lines().any(|l| l.contains(&kept_name)
            && l.contains("(kept until ")
            && l.ends_with(" UTC on purpose)")),
        "{text}"
    );
    // A free-space target nothing can reach says so.
    let out = sandkeeper(&[
        "reap",
        "--dry-run",
        "--grace",
        "0s",
        "--target-free",
        "99%",
        r,
    ]);
    let text = stdout(&out);
    assert!(text.contains("free-space target not reached: "), "{text}");
    assert!(
        text.contains("nothing else may be removed by these rules"),
        "{text}"
    );
    let out = sandkeeper(&[
        "reap",
        "--dry-run",
        "--json",
        "--grace",
        "0s",
        "--target-free",
        "99%",
        r,
    ]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let target = &doc["roots"][0]["target"];
    assert_eq!(target["met"], false, "{doc}");
    assert!(
        target["want_free_bytes"].as_u64() > target["free_bytes"].as_u64(),
        "{doc}"
    );
    let kept_skip = doc["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["reason_code"] == "kept")
        .unwrap();
    assert!(kept_skip["kept_until_ms"].is_u64(), "{kept_skip}");
    let out = sandkeeper(&["reap", "--dry-run", "--json", r]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["roots"][0]["target"], Value::Null);

    // ls: STATE kept with until when; SITE; the live one's command is the
    // test binary's name without its hash, then its arguments.
    let out = sandkeeper(&["ls", r]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let header = text.lines().next().unwrap();
    for col in [
        "STATE", "PID", "OWNER", "AGE", "SIZE", "PATH", "SITE", "COMMAND",
    ] {
        assert!(header.contains(col), "{header}");
    }
    assert!(
        text.contains("  tests/cli/consistency.rs:7  "),
        "SITE: {text}"
    );
    let kept_line = text.lines().find(|l| l.contains(&kept_name)).unwrap();
    assert!(kept_line.starts_with("kept "), "{kept_line}");
    assert!(
        kept_line.contains("[kept until ") && kept_line.contains(" UTC (1d 23h"),
        "{kept_line}"
    );
    let live_line = text
        .lines()
        .find(|l| l.contains(live.path().file_name().unwrap().to_str().unwrap()))
        .unwrap();
    assert!(live_line.starts_with("live "), "{live_line}");
    assert!(
        live_line.contains(&std::process::id().to_string()),
        "{live_line}"
    );
    let exe = std::env::current_exe().unwrap();
    let stem = exe.file_name().unwrap().to_str().unwrap();
    let program = stem.rsplit_once('-').unwrap().0;
    assert!(
        live_line.contains(&format!("  {program} ")),
        "program without the hash: {live_line}"
    );
    assert!(!live_line.contains(stem), "{live_line}");
    // COLUMNS cuts COMMAND (never below 20 characters), a pipe does not.
    let out = sandkeeper_env(&["ls", r], &[("COLUMNS", "60")]);
    for line in stdout(&out).lines().skip(1) {
        if line.contains(live.path().file_name().unwrap().to_str().unwrap()) {
            assert!(line.contains('…'), "cut: {line}");
        }
    }

    // ls --json: the documented fields, no more, no fewer.
    let out = sandkeeper(&["ls", "--json", r]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = doc["sandboxes"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{doc}");
    let kept_json = items
        .iter()
        .find(|s| s["path"].as_str().unwrap().ends_with(&kept_name))
        .unwrap();
    assert_eq!(kept_json["state"], "orphaned");
    assert!(kept_json["kept_until_ms"].is_u64());
    let mut got = BTreeSet::new();
    emitted(
        &doc,
        "",
        &["sandboxes[].lease", "sandboxes[].origin"],
        &mut got,
    );
    assert_eq!(
        with_parents(&documented("ls-json.md")),
        with_parents(&got),
        "docs/ls-json.md vs emitted"
    );

    // explain, without --root: the parent is the root; the kept line first.
    let out = sandkeeper(&["explain", kept.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out, &root));
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "{}: kept (an orphaned sandbox kept on purpose)",
            kept.display()
        )
    );
    let second = lines.next().unwrap();
    assert!(
        second.starts_with("  kept until ") && second.contains(" UTC (1d 23h"),
        "{text}"
    );
    assert!(text.contains("asks to be kept until "), "{text}");
    // A symlink as the last component is the entry itself, never followed.
    symlink(&kept, root.join("link")).unwrap();
    let out = sandkeeper(&["explain", root.join("link").to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out, &root));
    assert!(
        text.starts_with(&format!("{}: idle", root.join("link").display())),
        "{text}"
    );
    // A symlink on the way is resolved once: the path shown is the real one.
    symlink(&root, base.path().join("via")).unwrap();
    let out = sandkeeper(&[
        "explain",
        base.path().join("via").join(&kept_name).to_str().unwrap(),
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out, &root));
    assert!(
        text.starts_with(&format!("{}: kept", kept.display())),
        "{text}"
    );
    drop(live);
}

/// The fields a section of a `docs/*-json.md` documents (from its heading
/// to the next heading of the same level), as [`documented`] reads them.
fn documented_section(doc: &str, heading: &str) -> BTreeSet<String> {
    let text = fs::read_to_string(top().join("docs").join(doc)).unwrap();
    let mut out = BTreeSet::new();
    let section = text
        .lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| !l.starts_with("## "));
    for line in section.filter(|l| l.starts_with("| `")) {
        let cell = line.split('|').nth(1).unwrap_or_default();
        for name in cell.split('`').skip(1).step_by(2) {
            out.insert(name.to_owned());
        }
    }
    out
}

/// Issue 17: `scan --json`'s families carry their creators (without
/// `--entries`), and docs/scan-json.md's "Creators" table documents
/// exactly the fields a creator has, of every kind.
#[test]
fn scan_json_creators_are_as_documented() {
    use sandkeeper_engine::origin::{self, Creator, Process, Recorder};
    if !sandkeeper_testkit::privilege::require_root("scan_json_creators_are_as_documented") {
        return;
    }
    let base = sandbox!().unwrap();
    let root = sandkeeper_engine::root::Root::open_exact(base.path()).unwrap();
    let made = |name: &str, creator: Creator| {
        fs::create_dir(base.path().join(name)).unwrap();
        origin::write(root.fd(), name.as_ref(), Recorder::Watch, creator).unwrap();
    };
    made(
        "job-1",
        Creator::Process(Process {
            pid: 1,
            argv: vec!["make".into()],
            cgroup: Some("/system.slice/ci.service".into()),
            ..Process::default()
        }),
    );
    made("job-2", Creator::Exited { pid: None });
    made(
        "job-3",
        Creator::Unknown {
            reason: "hidden".into(),
        },
    );
    let out = sandkeeper(&["scan", "--json", base.path().to_str().unwrap()]);
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let creators = &doc["roots"][0]["groups"][0]["creators"];
    let kinds: BTreeSet<&str> = creators
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["exited", "process", "unknown"].into(), "{creators}");
    let mut got = BTreeSet::new();
    emitted(creators, "", &[], &mut got);
    let got: BTreeSet<String> = got
        .into_iter()
        .map(|f| f.trim_start_matches("[].").to_owned())
        .collect();
    let mut documented = documented_section("scan-json.md", "## Creators");
    // `other` carries only kind, count and disk_bytes, all documented.
    documented.retain(|f| !f.is_empty());
    assert_eq!(documented, got, "docs/scan-json.md \"Creators\" vs emitted");
}

/// Issue 29: "reclaimable" is what a reap with the same (default) rules
/// removes. `scan` once counted every `idle` entry too (13.1 MiB
/// reclaimable where `reap --dry-run` would remove nothing).
#[test]
fn reclaimable_is_what_a_default_reap_removes() {
    run_in_pid_namespace(
        "reclaimable_is_what_a_default_reap_removes",
        "consistency::inner_reclaimable",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_reclaimable() {
    if !in_namespace() {
        return;
    }
    use sandkeeper_testkit::tree::{age_tree, orphan};
    use std::time::Duration;
    let base = sandbox!().unwrap();
    let root = base.path().join("root");
    fs::create_dir(&root).unwrap();
    // An orphaned sandbox (goes), an old unmanaged directory (needs a
    // rule), a live sandbox (never).
    let dead = orphan(&root, "app-dead");
    fs::write(dead.join("data"), vec![1u8; 64 << 10]).unwrap();
    let old = root.join("app-old");
    fs::create_dir(&old).unwrap();
    fs::write(old.join("data"), vec![2u8; 256 << 10]).unwrap();
    age_tree(&old, Duration::from_secs(30 * 86_400));
    let _live = sandkeeper_engine::Sandbox::builder()
        .root(&root)
        .tag("app")
        .create()
        .unwrap();
    fs::write(_live.join("data"), vec![3u8; 128 << 10]).unwrap();
    let r = root.to_str().unwrap();

    let out = sandkeeper(&["scan", "--json", r]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reclaimable: u64 = doc["roots"][0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["reclaimable_bytes"].as_u64().unwrap())
        .sum();
    let out = sandkeeper(&["reap", "--dry-run", "--json", r]);
    let reap: Value = serde_json::from_slice(&out.stdout).unwrap();
    let removed: Vec<&Value> = reap["removed"].as_array().unwrap().iter().collect();
    let would_free: u64 = removed
        .iter()
        .map(|e| e["disk_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(removed.len(), 1, "only the orphan goes: {reap}");
    assert!(would_free >= 64 << 10, "{reap}");
    assert_eq!(reclaimable, would_free, "scan: {doc}\nreap: {reap}");
}
