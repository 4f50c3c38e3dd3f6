//! `sandkeeper scan`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

use sandkeeper_engine::sandbox;
use serde_json::Value;

use crate::{sandkeeper, stderr, stdout};

#[test]
fn bad_roots_exit_2_with_one_line() {
    let base = sandbox!().unwrap();
    fs::write(base.path().join("file"), b"x").unwrap();
    let cases = [
        (
            "missing",
            "error: root does not exist: [DIR]/missing: No such file or directory (os error 2)",
        ),
        (
            "file",
            "error: root is not a directory: [DIR]/file: Not a directory (os error 20)",
        ),
    ];
    for (name, want) in cases {
        let path = base.path().join(name);
        let out = sandkeeper(&["scan", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert_eq!(stderr(&out, base.path()).trim_end(), want, "{name}");
        assert!(out.stdout.is_empty(), "{name}: nothing on stdout");
    }
}

/// `du -xB1 --max-depth=1 ROOT`, keyed by entry name.
fn du(root: &std::path::Path, apparent: bool) -> BTreeMap<String, u64> {
    let mut cmd = Command::new("du");
    cmd.arg("-axB1").arg("--max-depth=1");
    if apparent {
        cmd.arg("--apparent-size");
    }
    let out = cmd.arg(root).output().expect("du");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let (size, path) = line.split_once('\t')?;
            let name = std::path::Path::new(path)
                .strip_prefix(root)
                .ok()?
                .to_str()?
                .to_owned();
            (!name.is_empty()).then(|| (name, size.parse().unwrap()))
        })
        .collect()
}

#[test]
fn json_sizes_equal_du_and_names_are_lossless() {
    let root = sandbox!().unwrap();
    let p = |rel: &str| root.path().join(rel);
    for dir in ["app-235-100", "app-235-101", "app-235-102", "vm-1", "links"] {
        fs::create_dir(p(dir)).unwrap();
    }
    fs::create_dir_all(p("app-235-100/target/debug/deps")).unwrap();
    for i in 0..50 {
        fs::write(
            p(&format!("app-235-100/target/debug/deps/lib{i}.rlib")),
            vec![i as u8; 3000 + i * 100],
        )
        .unwrap();
    }
    fs::write(p("app-235-101/small"), b"x").unwrap();
    // Hard links: within one entry, and across two (du counts it once, first seen).
    fs::write(p("links/big"), vec![1u8; 200_000]).unwrap();
    fs::hard_link(p("links/big"), p("links/again")).unwrap();
    fs::hard_link(p("links/big"), p("app-235-102/shared")).unwrap();
    // A sparse 1 GB disk image with a little data.
    let image = fs::File::create(p("vm-1/rootfs.ext4")).unwrap();
    image.set_len(1 << 30).unwrap();
    std::os::unix::fs::FileExt::write_at(&image, &[9u8; 65536], 1 << 20).unwrap();
    // A symlink to outside the tree: counted as a link, not followed.
    std::os::unix::fs::symlink("/usr", p("app-235-101/usr-link")).unwrap();
    // A name that is not UTF-8.
    let odd = OsStr::from_bytes(b"odd-\xff\xfe");
    fs::create_dir(root.path().join(odd)).unwrap();

    let out = sandkeeper(&["scan", "--json", "--entries", root.path().to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["schema"], "sandkeeper.scan/v1");
    let r = &doc["roots"][0];
    assert_eq!(r["path"], root.path().to_str().unwrap());
    for key in ["type", "total_bytes", "free_bytes"] {
        assert!(!r["filesystem"][key].is_null(), "filesystem.{key}");
    }
    let entries = r["entries"].as_array().unwrap();
    let ours: BTreeMap<String, (u64, u64)> = entries
        .iter()
        .filter(|e| e.get("name_base64").is_none())
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            (
                name,
                (
                    e["disk_bytes"].as_u64().unwrap(),
                    e["apparent_bytes"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let du_disk = du(root.path(), false);
    let du_apparent = du(root.path(), true);
    for (name, (disk, apparent)) in &ours {
        assert_eq!(Some(disk), du_disk.get(name), "disk usage of {name} vs du");
        if name != "links" && name != "app-235-102" {
            // du --apparent-size counts hard links once too; same rule.
            assert_eq!(
                Some(apparent),
                du_apparent.get(name),
                "apparent size of {name} vs du"
            );
        }
    }
    let totals = &r["totals"];
    assert_eq!(totals["entries"].as_u64().unwrap() as usize, entries.len());
    let odd_entry = entries
        .iter()
        .find(|e| e.get("name_base64").is_some())
        .expect("the odd name");
    assert_eq!(odd_entry["name_base64"], "b2RkLf/+");
    let groups = r["groups"].as_array().unwrap();
    let app = groups
        .iter()
        .find(|g| g["pattern"] == "app-235-*")
        .expect("app-235-* family");
    assert_eq!(app["count"], 3);
    for key in [
        "disk_bytes",
        "apparent_bytes",
        "files",
        "oldest_ms",
        "newest_ms",
        "reclaimable_bytes",
    ] {
        assert!(!app[key].is_null(), "group.{key}");
    }
    for key in ["live", "in_use", "orphaned", "idle", "unknown"] {
        assert!(app["states"][key].is_u64(), "group.states.{key}");
    }
}

/// Issue 14: `scan --json --entries` writes the document as the scan goes,
/// one root after another (each root's entries, then its sums); stdout
/// closed early (`| head`) ends it quietly, status 0.
#[test]
fn json_entries_stream_and_a_closed_pipe_ends_quietly() {
    use std::io::Read;
    use std::process::Stdio;

    let base = sandbox!().unwrap();
    let (one, two) = (base.path().join("one"), base.path().join("two"));
    fs::create_dir(&one).unwrap();
    fs::create_dir(&two).unwrap();
    // About 1 MB of JSON: more than a pipe holds.
    for i in 0..3000 {
        fs::write(one.join(format!("app-235-{i}")), b"").unwrap();
    }
    fs::create_dir(two.join("vm-1")).unwrap();
    let (one, two) = (one.to_str().unwrap(), two.to_str().unwrap());

    let out = sandkeeper(&["scan", "--json", "--entries", one, two]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out, base.path()));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let roots = doc["roots"].as_array().unwrap();
    assert_eq!(roots.len(), 2);
    assert_eq!(roots[0]["entries"].as_array().unwrap().len(), 3000);
    assert_eq!(roots[0]["totals"]["entries"], 3000);
    assert_eq!(roots[0]["groups"][0]["pattern"], "app-235-*");
    assert_eq!(roots[1]["entries"][0]["name"], "vm-1");

    let mut child = Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(["scan", "--json", "--entries", one, two])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sandkeeper");
    let mut first = [0u8; 1];
    let mut pipe = child.stdout.take().unwrap();
    pipe.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"{");
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out, base.path());
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("error"), "{err}");
}

#[test]
fn the_table_shows_families_biggest_first() {
    let root = sandbox!().unwrap();
    for i in 0..4 {
        let dir = root.path().join(format!("app-nodes-list-{}", 1000 + i));
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("data"), vec![0u8; 100_000]).unwrap();
    }
    fs::create_dir(root.path().join("pytest-of-root")).unwrap();
    let out = sandkeeper(&["scan", root.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!("{}: ", root.path().display())),
        "{text}"
    );
    assert!(lines[1].starts_with("FAMILY"), "{text}");
    assert!(
        lines[2].starts_with("app-nodes-list-*"),
        "biggest first: {text}"
    );
    assert!(text.contains("pytest-of-root"), "{text}");
    assert!(
        lines.last().unwrap().contains("entries in"),
        "footer: {text}"
    );
}
