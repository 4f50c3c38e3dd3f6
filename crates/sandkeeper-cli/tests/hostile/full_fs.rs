//! Issue 11, item 3 (the targets): `--target-free` and the watermarks
//! counted bytes only, so a tmpfs out of inodes but with bytes free was
//! "target met" and never reaped under pressure. Now inodes count too:
//! `reap --target-free-inodes` and `high_watermark_inodes` /
//! `low_watermark_inodes` in the config.
//!
//! The filler is uid 65534 in a sticky, world-writable tmpfs with few
//! inodes; root's `sandkeeper` runs in a private PID namespace.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::{sandkeeper, text};
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::nobody_sh;
use sandkeeper_testkit::scratch::Scratch;
use sandkeeper_testkit::tree::age_tree;

/// Files in each entry besides the directory itself: each entry holds 10
/// inodes.
const FILES: usize = 9;

fn entries(root: &Path) -> BTreeSet<String> {
    fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("app-"))
        .collect()
}

fn free_inodes(root: &Path) -> u64 {
    rustix::fs::statvfs(root).unwrap().f_favail
}

/// A tmpfs with 128 inodes (sticky, world-writable) in a sandbox, holding
/// `app-0` (the oldest) to `app-5`, 10 inodes each, then filled by uid
/// 65534 until no inode is left.
fn full_of_inodes(tag: &str) -> (Scratch, Mount) {
    let base = Scratch::reachable_by_others(tag);
    let mnt = Mount::tmpfs_with(&base.path().join("mnt"), "size=16m,nr_inodes=128");
    let root = mnt.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o1777)).unwrap();
    for i in 0..6 {
        let entry = root.join(format!("app-{i}"));
        fs::create_dir(&entry).unwrap();
        for f in 0..FILES {
            fs::write(entry.join(format!("f{f}")), "x").unwrap();
        }
        age_tree(&entry, Duration::from_secs(3600 * (100 - i)));
    }
    nobody_sh(
        "cd \"$ROOT\" && mkdir fill && i=0 && \
         while [ $i -lt 1000 ] && touch fill/f$i 2>/dev/null; do i=$((i+1)); done",
        &[("ROOT", root.as_os_str())],
    );
    assert_eq!(free_inodes(root), 0, "the tmpfs is not out of inodes");
    (base, mnt)
}

/// The config of a root whose only rule is `app-*` older than 1000 days
/// (so only a reap under pressure takes anything), with inode watermarks.
fn inode_config(base: &Scratch, root: &str, high: &str, low: &str) -> String {
    let config = base.path().join("config.toml");
    fs::write(
        &config,
        format!(
            "[[root]]\npath = \"{root}\"\ngrace = \"0s\"\nuser_dirs = false\n\
             high_watermark_inodes = \"{high}\"\nlow_watermark_inodes = \"{low}\"\n\
             [[root.rule]]\nmatch = \"app-*\"\nolder_than = \"1000d\"\n"
        ),
    )
    .unwrap();
    config.to_str().unwrap().to_owned()
}

#[test]
fn watch_reaps_a_root_above_its_inode_watermark() {
    run_in_pid_namespace(
        "watch_reaps_a_root_above_its_inode_watermark",
        "full_fs::inner_watch_by_inodes",
    );
}

/// A tmpfs out of inodes with bytes to spare: `watch` used to find it
/// below its (byte) watermarks. With inode watermarks, one cycle reaps it
/// under pressure, oldest first, down to the low one, and says why.
#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_watch_by_inodes() {
    if !in_namespace() {
        return;
    }
    let (base, mnt) = full_of_inodes("hostile-watch-inodes");
    let root = mnt.path();
    let config = inode_config(&base, root.to_str().unwrap(), "95%", "25 free");
    let out = sandkeeper(&["watch", "--once", "--config", &config]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        log.contains(
            "above the high watermark (100.0% of inodes used, 0 inodes free); \
             removing oldest first until 25 inodes free"
        ),
        "{log}"
    );
    assert!(log.contains("below the low watermark"), "{log}");
    assert!(free_inodes(root) >= 25, "{log}");
    let left = entries(root);
    assert!(
        !left.contains("app-0") && left.contains("app-5"),
        "{left:?} {log}"
    );
}

#[test]
fn inodes_count_for_targets_and_watermarks() {
    run_in_pid_namespace(
        "inodes_count_for_targets_and_watermarks",
        "full_fs::inner_inode_targets",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_inode_targets() {
    if !in_namespace() {
        return;
    }
    let (base, mnt) = full_of_inodes("hostile-inodes");
    let root = mnt.path();
    let r = root.to_str().unwrap();
    let all: BTreeSet<String> = (0..6).map(|i| format!("app-{i}")).collect();

    // Bytes alone: plenty free, so the target is met and nothing goes.
    let out = sandkeeper(&[
        "reap",
        "--match",
        "app-*",
        "--grace",
        "0s",
        "--target-free",
        "10%",
        r,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(entries(root), all, "{}", text(&out));

    // Above the high inode watermark: a reap under pressure (the rule's
    // age limit relaxes) down to the low one, oldest first.
    let config = inode_config(&base, r, "95%", "15 free");
    let out = sandkeeper(&["reap", "--config", &config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let left = entries(root);
    assert!(
        !left.contains("app-0") && left.contains("app-5"),
        "{left:?}\n{}",
        text(&out)
    );
    assert!(free_inodes(root) >= 15, "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("inodes free"),
        "says the pressure is by inodes: {}",
        text(&out)
    );
    let after_config = left.len();

    // On the command line: oldest first until 10 more inodes are free.
    let want = (free_inodes(root) + 10).to_string();
    let out = sandkeeper(&[
        "reap",
        "--match",
        "app-*",
        "--grace",
        "0s",
        "--target-free-inodes",
        &want,
        r,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let left = entries(root);
    assert_eq!(left.len(), after_config - 1, "{left:?}\n{}", text(&out));
    assert!(left.contains("app-5"), "{left:?}");

    // A bad value says what is wrong with it.
    let out = sandkeeper(&["reap", "--target-free-inodes", "lots", r]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid free-inode target"),
        "{}",
        text(&out)
    );
}
