//! `sandkeeper reap`, `ls` and `explain`: bad input and output shapes.
//! (The reaper's behaviour beside live processes is tested in the library,
//! inside PID namespaces.)

use std::fs;

use sandkeeper_engine::sandbox;
use serde_json::Value;

use crate::{sandkeeper, stderr};

/// Bad input: exit 2, a message naming the value, nothing removed.
#[test]
fn bad_input_exits_2_and_removes_nothing() {
    let root = sandbox!().unwrap();
    let victim = root.path().join("app-1");
    fs::create_dir(&victim).unwrap();
    let r = root.path().to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "reap",
                r,
                "--match",
                "app-*",
                "--grace",
                "0s",
                "--owner",
                "no-such-user-xyz",
            ],
            "no-such-user-xyz",
        ),
        (
            vec!["reap", r, "--match", "app-*", "--older-than", "soon"],
            "\"soon\"",
        ),
        (
            vec!["reap", r, "--match", "app-*", "--target-free", "140%"],
            "140%",
        ),
        (
            vec!["reap", r, "--match", "app-*", "--target-free", "lots"],
            "\"lots\"",
        ),
        (
            vec!["reap", r, "--match", "app-[", "--grace", "0s"],
            "app-[",
        ),
        (
            vec!["reap", "/", "--dry-run"],
            "it is the filesystem root `/`",
        ),
        (
            vec!["explain", "/etc/hostname", "--root", r],
            "is not inside any root",
        ),
        (
            vec!["reap", "/nonexistent-sandkeeper-root"],
            "root does not exist",
        ),
    ];
    for (args, words) in cases {
        let out = sandkeeper(&args);
        let err = stderr(&out, root.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
        assert!(victim.exists(), "{args:?} removed nothing");
    }
}

#[test]
fn dry_run_json_has_the_schema_and_removes_nothing() {
    let root = sandbox!().unwrap();
    fs::create_dir(root.path().join("app-1")).unwrap();
    let out = sandkeeper(&[
        "reap",
        root.path().to_str().unwrap(),
        "--dry-run",
        "--json",
        "--grace",
        "0s",
        "--match",
        "app-*",
    ]);
    assert!(
        out.status.code().is_some_and(|c| c == 0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "sandkeeper.reap/v1");
    assert_eq!(doc["dry_run"], true);
    for key in ["removed", "skipped", "errors"] {
        assert!(doc[key].is_array(), "{key}");
    }
    assert!(doc["freed_bytes"].is_u64());
    assert!(root.path().join("app-1").exists());
}

#[test]
fn explain_names_the_state_and_the_verdict() {
    let root = sandbox!().unwrap();
    fs::create_dir(root.path().join("app-1")).unwrap();
    let out = sandkeeper(&[
        "explain",
        root.path().join("app-1").to_str().unwrap(),
        "--root",
        root.path().to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("app-1: "), "{text}");
    assert!(text.contains("why: "), "{text}");
    assert!(text.contains("reap with these rules: keep"), "{text}");
}
