//! Issue 10, finding 11: the command `run` starts may replace its TMPDIR
//! (`rm -rf $TMPDIR; ln -s /usr $TMPDIR`). The leftover summary walked the
//! link's target, and `run` exited 1 instead of the command's status. Now
//! the summary lists and walks the directory `run` made through its own
//! descriptor, the replacement is reported plainly and left alone, and the
//! status is the command's.

use std::fs;
use std::path::Path;
use std::process::Output;

use sandkeeper_engine::sandbox;
use sandkeeper_testkit::tree::name_strings;

use crate::bin;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `/usr`-like tree the replaced TMPDIR points to; it must survive.
fn usr_like(dir: &Path) {
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::create_dir_all(dir.join("lib/deep")).unwrap();
    fs::write(dir.join("bin/tool"), b"#!/bin/sh\n").unwrap();
    fs::write(dir.join("lib/deep/libx.so"), vec![7u8; 20_000]).unwrap();
}

fn assert_usr_like_intact(dir: &Path, what: &str) {
    assert_eq!(name_strings(dir), ["bin", "lib"], "{what}");
    assert_eq!(
        fs::read(dir.join("bin/tool")).unwrap(),
        b"#!/bin/sh\n",
        "{what}"
    );
    assert_eq!(
        fs::read(dir.join("lib/deep/libx.so")).unwrap().len(),
        20_000,
        "{what}"
    );
}

/// As root (in sessions and CI; the attack needs no privilege): the command
/// replaces TMPDIR by a symlink to a `/usr`-like tree, by another directory,
/// or moves it away first.
#[test]
fn a_replaced_tmpdir_is_reported_and_left_alone() {
    // (row, script after `set -e`, what stderr says, entries summarized)
    let cases = [
        (
            "deleted, then a symlink",
            r#"rm -rf "$TMPDIR"; ln -s "$1" "$TMPDIR""#,
            "was replaced by a symlink",
            0,
        ),
        (
            "moved away, then a symlink",
            r#"echo x > "$TMPDIR/mine"; mv "$TMPDIR" "$TMPDIR.away"; ln -s "$1" "$TMPDIR""#,
            "was replaced by a symlink",
            1,
        ),
        (
            "deleted, then another directory",
            r#"rm -rf "$TMPDIR"; mkdir "$TMPDIR"; touch "$TMPDIR/other""#,
            "was replaced by a directory",
            0,
        ),
    ];
    for (row, script, said, entries) in cases {
        let root = sandbox!().unwrap();
        let outside = sandbox!().unwrap();
        let usr = outside.path().join("usr");
        usr_like(&usr);
        let report = outside.path().join("report.json");
        let out = bin()
            .args(["run", "--root"])
            .arg(root.path())
            .arg("--report-json")
            .arg(&report)
            .args(["--", "sh", "-c"])
            .arg(format!("set -e; {script}; exit 3"))
            .arg("sh")
            .arg(&usr)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{row}: the command's status: {err}"
        );
        assert!(
            err.contains(said) && err.contains("left it alone"),
            "{row}: {err}"
        );
        assert!(!err.contains("error:"), "{row}: {err}");
        assert_usr_like_intact(&usr, row);
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(
            json["left"]["entries"], entries,
            "{row}: only its own dir: {json}"
        );
        assert!(json["replaced"].is_string(), "{row}: {json}");
        // The replacement is still there, as the command left it.
        let left = name_strings(root.path());
        assert!(
            left.iter().any(|n| n.starts_with("run-sh-")),
            "{row}: {left:?}"
        );
    }
}

/// A command that deletes its own TMPDIR is not an error either.
#[test]
fn a_deleted_tmpdir_is_not_an_error() {
    let root = sandbox!().unwrap();
    let out = bin()
        .args(["run", "--root"])
        .arg(root.path())
        .args(["--", "sh", "-c", r#"rm -rf "$TMPDIR"; exit 4"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(!stderr(&out).contains("error:"), "{}", stderr(&out));
    assert_eq!(name_strings(root.path()), Vec::<String>::new());
}
