//! Finding 5(b) through the binary: holders that only the kernel knows
//! (a socket bound by a relative path, a relative overlay layer) keep
//! their entries from `reap --match '*' --older-than 0s --grace 0s`, and
//! what cannot be seen is said.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::sandkeeper;
use sandkeeper_engine::sandbox;
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::setpriv_nobody;
use sandkeeper_testkit::process::spawn_ready;
use sandkeeper_testkit::scratch::Scratch;

/// `reap ROOT --match '*' --older-than 0s --grace 0s`, then the state of
/// `name` in `scan ROOT --json`; with reap's stderr.
fn reap_everything_then_state(root: &Path, name: &str) -> (String, String) {
    let root = root.to_str().unwrap();
    let reap = sandkeeper(&[
        "reap",
        root,
        "--match",
        "*",
        "--older-than",
        "0s",
        "--grace",
        "0s",
    ]);
    let stderr = String::from_utf8_lossy(&reap.stderr).into_owned();
    assert_eq!(reap.status.code(), Some(0), "reap: {stderr}");
    let scan = sandkeeper(&["scan", root, "--json", "--entries"]);
    let doc: serde_json::Value = serde_json::from_slice(&scan.stdout).expect("scan --json");
    let state = doc["roots"][0]["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["state"].as_str().unwrap_or("?").to_owned())
        .unwrap_or_else(|| "gone".to_owned());
    (state, stderr)
}

#[test]
fn reap_keeps_an_entry_held_by_a_relatively_bound_socket() {
    run_in_pid_namespace(
        "reap_keeps_an_entry_held_by_a_relatively_bound_socket",
        "kernelusers::inner_relatively_bound_socket",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_relatively_bound_socket() {
    if !in_namespace() {
        return;
    }
    let root = Scratch::reachable_by_others("hostile-cli-socket");
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let entry = root.path().join("app-sock");
    fs::create_dir(&entry).unwrap();
    fs::set_permissions(&entry, fs::Permissions::from_mode(0o777)).unwrap();
    // nobody binds `s` relative to the entry, then leaves it.
    let _binder = spawn_ready(
        setpriv_nobody()
            .arg("/usr/bin/python3")
            .arg("-c")
            .arg(
                "import os, socket, sys, time\nos.chdir(sys.argv[1])\n\
                 s = socket.socket(socket.AF_UNIX)\ns.bind('s')\ns.listen(1)\n\
                 os.chdir('/')\nprint('ready', flush=True)\ntime.sleep(600)\n",
            )
            .arg(&entry),
    );
    let (state, stderr) = reap_everything_then_state(root.path(), "app-sock");
    assert_eq!(state, "in_use", "{stderr}");
    assert!(entry.join("s").exists());
}

#[test]
fn reap_says_why_a_relative_overlay_layer_keeps_everything() {
    run_in_pid_namespace(
        "reap_says_why_a_relative_overlay_layer_keeps_everything",
        "kernelusers::inner_relative_overlay_layer",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_relative_overlay_layer() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let elsewhere = sandbox!().unwrap();
    let entry = root.path().join("app-overlay");
    for dir in ["lower", "upper", "work"] {
        fs::create_dir_all(entry.join(dir)).unwrap();
    }
    let merged = elsewhere.path().join("merged");
    fs::create_dir(&merged).unwrap();
    let mounted = Command::new("sh")
        .arg("-c")
        .arg(r#"cd "$1" && mount -t overlay sk-rel -o lowerdir=lower,upperdir=upper,workdir=work "$2""#)
        .arg("sh")
        .arg(&entry)
        .arg(&merged)
        .status()
        .unwrap();
    assert!(mounted.success());
    let overlay = Mount::adopt(&merged);
    let (state, stderr) = reap_everything_then_state(root.path(), "app-overlay");
    drop(overlay);
    assert_eq!(state, "unknown", "{stderr}");
    assert!(
        stderr.contains("an overlay names a layer by a relative path (lowerdir=lower of "),
        "{stderr}"
    );
    assert!(entry.join("lower").exists());
}
