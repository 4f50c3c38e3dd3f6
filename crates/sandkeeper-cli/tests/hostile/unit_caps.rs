//! The shipped units run sandkeeper as root with a cut-down capability
//! set (`CapabilityBoundingSet=` in `contrib/systemd`). That set must be
//! enough for the hardest reap: on a filesystem with no inode left, an
//! entry of another user's becomes its own quarantine, made the remover's
//! with `fchown` (docs/remove.md), which needs `CAP_CHOWN`. The units
//! once lacked it, and as shipped could not reap a full filesystem.
//!
//! The reap runs as the units run it: root, its bounding set the units'
//! (`setpriv`), in a private PID namespace (the machine hides PID 1).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::{bin, text};
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::nobody_sh;
use sandkeeper_testkit::scratch::Scratch;
use sandkeeper_testkit::tree::age_tree;

/// The workspace's `contrib/systemd`.
fn units() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd")
}

/// The capabilities of a unit's `CapabilityBoundingSet=`, in `setpriv`'s
/// spelling (`chown`, `dac_override`, …).
fn bounding_set(unit: &str) -> Vec<String> {
    let text = fs::read_to_string(units().join(unit)).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap_or_else(|| panic!("{unit} has no CapabilityBoundingSet="));
    line.split_whitespace()
        .map(|c| {
            c.strip_prefix("CAP_")
                .unwrap_or_else(|| panic!("{unit}: {c} is not CAP_…"))
                .to_ascii_lowercase()
        })
        .collect()
}

/// `sandkeeper reap --match 'job-*' --grace 0s ROOT` as root with only
/// `caps` in its bounding set (and nothing inheritable), as systemd
/// starts the unit.
fn reap_with(caps: &[String], root: &Path) -> Output {
    let bounding = format!(
        "-all{}",
        caps.iter().map(|c| format!(",+{c}")).collect::<String>()
    );
    let sandkeeper = bin();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.arg(format!("--bounding-set={bounding}"))
        .arg("--inh-caps=-all")
        .arg(sandkeeper.get_program())
        .args(["reap", "--match", "job-*", "--grace", "0s"])
        .arg(root)
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .stdin(std::process::Stdio::null());
    cmd.output().expect("run setpriv")
}

#[test]
fn both_units_give_the_same_capabilities() {
    assert_eq!(
        bounding_set("sandkeeper.service"),
        bounding_set("sandkeeper-reap.service")
    );
}

#[test]
fn the_units_capabilities_reap_a_full_filesystem() {
    run_in_pid_namespace(
        "the_units_capabilities_reap_a_full_filesystem",
        "unit_caps::inner_full_filesystem",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_full_filesystem() {
    if !in_namespace() {
        return;
    }
    let base = Scratch::reachable_by_others("unit-caps");
    let mnt = Mount::tmpfs_with(&base.path().join("mnt"), "size=16m,nr_inodes=64");
    let root = mnt.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o1777)).unwrap();
    // A job of nobody's left `job-1`, then filled every inode.
    nobody_sh(
        "cd \"$ROOT\" && mkdir job-1 && echo x > job-1/out && mkdir fill && i=0 && \
         while [ $i -lt 1000 ] && touch fill/f$i 2>/dev/null; do i=$((i+1)); done",
        &[("ROOT", root.as_os_str())],
    );
    assert_eq!(
        rustix::fs::statvfs(root).unwrap().f_favail,
        0,
        "no inode left"
    );
    age_tree(&root.join("job-1"), Duration::from_secs(3600));
    let caps = bounding_set("sandkeeper.service");

    // Without CAP_CHOWN the entry cannot be made its own quarantine: kept,
    // with an error (what the units did before).
    let without: Vec<String> = caps.iter().filter(|c| *c != "chown").cloned().collect();
    assert_ne!(without, caps, "the units give CAP_CHOWN");
    let out = reap_with(&without, root);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(root.join("job-1").exists(), "{}", text(&out));

    // With the units' set, it goes.
    let out = reap_with(&caps, root);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!root.join("job-1").exists(), "{}", text(&out));
}
