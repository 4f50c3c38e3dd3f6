//! Issue 25, item 9: `sandkeeper report DIR` trusted what it read.
//!
//! (a) One 50 KiB record hard-linked 20,000 times (50 KiB of disk) was
//! parsed and kept 20,000 times (a gigabyte); now each inode is read once
//! and the links are counted, and the bytes read from one directory are
//! bounded, the rest counted as not read (exit 1: the report is partial).
//!
//! (b) `report DIR` on a directory of another user, or one others may
//! write, summarized whatever was in it ("no test leaked", exit 0) where
//! `run --report-dir` refused the same directory. Now reading applies the
//! writing rule: owned by the caller, writable by nobody else, else exit 2
//! naming the directory, its owner and mode; and a record owned by another
//! user than the directory's owner is skipped with a warning.
//!
//! The attacker is uid 65534 (a test running as the CI's user can write
//! the report directory its wrapper writes; or a user who pre-created it);
//! the victim reads as root.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};

use sandkeeper_testkit::privilege::{as_nobody, require_root, setpriv_nobody, NOBODY};
use sandkeeper_testkit::scratch::Scratch;

use crate::bin;

/// A valid record of about 50 KiB (every name near its 1024-byte limit):
/// `name` leaked `entries` entries.
fn big_record(name: &str, entries: u64) -> String {
    let long = |c: &str| c.repeat(1000);
    let families: Vec<Value> = (0..32)
        .map(|i| json!({"pattern": format!("{i}-{}", long("p")), "count": 1, "disk_bytes": 4096}))
        .collect();
    let mut text = json!({
        "schema": "sandkeeper.test-leak/v1",
        "binary_id": "forged",
        "test_name": name,
        "command": vec![long("c"); 16],
        "exit_code": 0,
        "signal": null,
        "entries": entries,
        "disk_bytes": entries * 4096,
        "families": families,
        "families_omitted": 0,
        "daemons_stopped": 0,
        "daemons_killed": 0,
    })
    .to_string();
    text.push('\n');
    text
}

/// A directory `name` in `base`, owned by `uid`, with `mode`.
fn dir_of(base: &Path, name: &str, uid: u32, mode: u32) -> std::path::PathBuf {
    let dir = base.join(name);
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
    dir
}

/// `sandkeeper report --json DIR` as nobody.
fn report_as_nobody(dir: &Path) -> (Output, Value) {
    let out = setpriv_nobody()
        .arg(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(["report", "--json"])
        .arg(dir)
        .env_remove("SANDKEEPER_KEEP")
        .output()
        .expect("setpriv (util-linux)");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "report --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, doc)
}

/// `doc` without its `leaks` (huge here), for messages.
fn brief(doc: &Value) -> String {
    let mut doc = doc.clone();
    if let Some(m) = doc.as_object_mut() {
        m.remove("leaks");
    }
    doc.to_string()
}

/// (a) Hard links are read once; the bytes read are bounded.
#[test]
fn report_reads_each_record_once_and_a_bounded_amount() {
    if !require_root("report_reads_each_record_once_and_a_bounded_amount") {
        return;
    }
    let scratch = Scratch::reachable_by_others("report-links").tmpfs("160m");
    let links = dir_of(scratch.path(), "links", NOBODY, 0o700);
    let bulk = dir_of(scratch.path(), "bulk", NOBODY, 0o700);
    let record = big_record("tests::leaks", 1);
    assert!(record.len() > 48 * 1024 && record.len() < 64 * 1024);
    const LINKS: usize = 20_000;
    const DISTINCT: usize = 1_400;
    as_nobody(|| {
        fs::write(links.join("0-record.json"), &record).unwrap();
        for i in 1..LINKS {
            fs::hard_link(links.join("0-record.json"), links.join(format!("{i}.json"))).unwrap();
        }
        for i in 0..DISTINCT {
            // Names of one length: every record has the same size.
            let name = format!("tests::t{i:04}");
            fs::write(bulk.join(format!("{i}.json")), big_record(&name, 0)).unwrap();
        }
    });
    assert_eq!(
        fs::metadata(links.join("0-record.json")).unwrap().nlink(),
        LINKS as u64
    );

    // 20,000 names, one record: read once, the links counted.
    let (out, doc) = report_as_nobody(&links);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the record leaked: {err}");
    assert_eq!(doc["runs"], 1, "{}", brief(&doc));
    assert_eq!(
        doc["hard_links_skipped"],
        (LINKS - 1) as u64,
        "{}",
        brief(&doc)
    );
    assert_eq!(doc["bytes_read"], record.len() as u64, "{}", brief(&doc));
    assert_eq!(doc["truncated"], false, "{}", brief(&doc));
    assert!(
        err.contains(&format!("{} hard links to records already read", LINKS - 1)),
        "{err}"
    );

    // 1,400 distinct records of 50 KiB (70 MiB): reading stops at the
    // bound and says how many were not read.
    let (out, doc) = report_as_nobody(&bulk);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a partial report: {err}");
    let bound = sandkeeper_engine::leaks::MAX_TOTAL_BYTES;
    let read = doc["bytes_read"].as_u64().unwrap();
    let runs = doc["runs"].as_u64().unwrap();
    let not_read = doc["not_read"].as_u64().unwrap();
    let size = big_record("tests::t0000", 0).len() as u64;
    assert_eq!(
        (runs, read),
        (bound / size, bound / size * size),
        "{}",
        brief(&doc)
    );
    assert_eq!(runs + not_read, DISTINCT as u64, "{}", brief(&doc));
    assert!(not_read > 0 && doc["truncated"] == true, "{}", brief(&doc));
    assert!(
        err.contains(&format!("{not_read} record files not read")) && err.contains("64.0 MiB"),
        "{err}"
    );
}

/// (b) A directory of another user, or one others may write, is refused
/// (exit 2) by `report` as by `run --report-dir`, naming it, its owner and
/// its mode; a record of another user in one's own directory is skipped.
#[test]
fn report_refuses_a_directory_it_would_not_write() {
    if !require_root("report_refuses_a_directory_it_would_not_write") {
        return;
    }
    let base = Scratch::reachable_by_others("hostile-report-dir");
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // Pre-created by the attacker where a CI writes its records, and
    // filled with records saying nothing leaked.
    let shared = dir_of(base.path(), "shared", NOBODY, 0o777);
    let theirs = dir_of(base.path(), "theirs", NOBODY, 0o700);
    let open = dir_of(base.path(), "open", 0, 0o777);
    let group = dir_of(base.path(), "group", 0, 0o770);
    as_nobody(|| {
        for dir in [&shared, &theirs] {
            fs::write(dir.join("forged.json"), big_record("tests::fine", 0)).unwrap();
        }
    });
    fs::write(open.join("r.json"), big_record("tests::fine", 0)).unwrap();
    fs::write(group.join("r.json"), big_record("tests::fine", 0)).unwrap();
    for (dir, owner, mode, why) in [
        (&shared, NOBODY, "0777", "owned by uid 65534"),
        (&theirs, NOBODY, "0700", "owned by uid 65534"),
        (&open, 0, "0777", "others may write"),
        (&group, 0, "0770", "others may write"),
    ] {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let out = bin().arg("report").arg(dir).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: refused: {err}");
        assert!(out.stdout.is_empty(), "{name}: no summary");
        assert!(
            err.contains(dir.to_str().unwrap())
                && err.contains(why)
                && err.contains(&format!("uid {owner}"))
                && err.contains(&format!("mode {mode}")),
            "{name}: names the directory, its owner and mode: {err}"
        );
        assert!(err.contains("hint:"), "{name}: says what to do: {err}");
        // The same rule as writing.
        let out = bin()
            .arg("run")
            .arg("--report-dir")
            .arg(dir)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: run refuses it too");
    }

    // The owner reads their own directory.
    let (out, doc) = report_as_nobody(&theirs);
    assert_eq!(out.status.code(), Some(0), "{}", brief(&doc));
    assert_eq!(doc["runs"], 1);

    // A record of another user in the caller's own directory (it was
    // writable once, or someone chowned it): skipped, with a warning.
    let own = dir_of(base.path(), "own", 0, 0o700);
    fs::write(own.join("good.json"), big_record("tests::leaks", 2)).unwrap();
    fs::write(own.join("planted.json"), big_record("tests::fine", 0)).unwrap();
    std::os::unix::fs::chown(own.join("planted.json"), Some(65533), Some(65533)).unwrap();
    let out = bin().args(["report", "--json"]).arg(&own).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["runs"], 1, "{}", brief(&doc));
    assert_eq!(doc["unreadable_count"], 1, "{}", brief(&doc));
    assert!(
        err.contains("skipped record planted.json: owned by uid 65533"),
        "{err}"
    );
}
