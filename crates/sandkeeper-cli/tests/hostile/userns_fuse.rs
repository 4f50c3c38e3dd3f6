//! Issue 25, item 5: an ordinary FUSE mount blinded root.
//!
//! Any user who can mount FUSE in a user namespace of their own (most
//! distributions ship `/dev/fuse` 0666) and keeps a descriptor or working
//! directory on it made root's `statx` of `/proc/PID/fd/N` and
//! `/proc/PID/cwd` fail with `EACCES`: FUSE refuses every caller outside
//! the namespace that mounted it. That process became uninspectable,
//! every entry of every root `unknown`, and the warning blamed "a sandbox
//! or security module". The inode is now read without asking the
//! filesystem (the link opened `O_PATH`, its device from an empty `statx`
//! and its inode number from our own `fdinfo`), so entries are classified
//! as usual and a real holder elsewhere is still found.
//!
//! The attacker is uid 65534 in a user and mount namespace of its own,
//! serving `hang_fuse.py` (told to stop answering, so that a request to it
//! would hang the run and fail the test). Where this machine's
//! `/dev/fuse` is 0600, the test's private mount namespace gets a node of
//! the same device, mode 0666, on a tmpfs of its own, bound over
//! `/dev/fuse`, as most distributions ship it.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::{nobody_living_in, setpriv_nobody, NOBODY};
use sandkeeper_testkit::process::Spawned;
use sandkeeper_testkit::scratch::Scratch;

/// The attacker: mounts `hang_fuse.py` at `argv[2]` in its own user and
/// mount namespace, stops it answering, then works in the mount and holds
/// a directory of it open, and says `ready`.
const ATTACKER: &str = r#"
import os, subprocess, sys, time
server = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
line = server.stdout.readline()
if not line.startswith("ready"):
    sys.exit(f"hang_fuse.py: {line!r}")
os.chdir(sys.argv[2])
fd = os.open("sub", os.O_RDONLY | os.O_DIRECTORY)
server.stdin.write("hang\n")
server.stdin.flush()
assert server.stdout.readline().strip() == "hung"
print("ready", flush=True)
time.sleep(600)
"#;

/// `/dev/fuse` usable by every user in this (private) mount namespace:
/// as it is, when it is 0666; else a node of the same device on a tmpfs,
/// bound over it. The guards undo it.
fn world_usable_fuse(at: &Path) -> Vec<Mount> {
    let mode = fs::metadata("/dev/fuse")
        .expect("/dev/fuse")
        .permissions()
        .mode();
    if mode & 0o666 == 0o666 {
        return Vec::new();
    }
    let tmpfs = Mount::tmpfs(at, "1m");
    let node = at.join("fuse");
    let status = Command::new("mknod")
        .args(["-m", "0666"])
        .arg(&node)
        .args(["c", "10", "229"])
        .status()
        .expect("run mknod");
    assert!(status.success(), "mknod {}", node.display());
    let bound = Mount::bind(&node, Path::new("/dev/fuse"));
    vec![bound, tmpfs]
}

/// Starts the attacker with its FUSE mount at `at`; it is killed (and its
/// namespace, with the mount, goes) when dropped.
fn attacker_on_fuse(at: &Path) -> Spawned {
    fs::create_dir(at).unwrap();
    chown(at, Some(NOBODY), Some(NOBODY)).unwrap();
    // A copy beside the mount point: the checkout may be where uid 65534
    // cannot read (a clone in a 0700 directory).
    let server = at.with_file_name("hang_fuse.py");
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/hang_fuse.py"),
        &server,
    )
    .unwrap();
    fs::set_permissions(&server, fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = Spawned(
        setpriv_nobody()
            .args(["unshare", "--user", "--map-root-user", "--mount"])
            .args(["python3", "-c", ATTACKER])
            .arg(&server)
            .arg(at)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the attacker"),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the attacker could not mount FUSE");
    child
}

fn run(args: &[&str]) -> serde_json::Value {
    let out = Command::new("timeout")
        .args(["-s", "KILL", "60", env!("CARGO_BIN_EXE_sandkeeper")])
        .args(args)
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .stdin(Stdio::null())
        .output()
        .expect("run timeout(1)");
    assert!(
        out.status.success(),
        "sandkeeper {args:?}: {out:?}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    })
}

fn states(doc: &serde_json::Value) -> Vec<(String, String)> {
    let mut states: Vec<(String, String)> = doc["roots"][0]["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries in {doc}"))
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or("?").to_owned(),
                e["state"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    states.sort();
    states
}

#[test]
fn a_fuse_mount_in_a_user_namespace_does_not_blind_root() {
    run_in_pid_namespace(
        "a_fuse_mount_in_a_user_namespace_does_not_blind_root",
        "userns_fuse::inner_fuse_in_a_user_namespace",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_fuse_in_a_user_namespace() {
    if !in_namespace() {
        return;
    }
    let base = Scratch::reachable_by_others("userns-fuse");
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let _fuse_node = world_usable_fuse(&base.path().join("dev"));
    let root = base.path().join("root");
    fs::create_dir(&root).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir(root.join("app-free")).unwrap();
    fs::create_dir(root.join("app-held")).unwrap();
    fs::set_permissions(root.join("app-held"), fs::Permissions::from_mode(0o755)).unwrap();
    let _holder = nobody_living_in(&root.join("app-held"));
    let _attacker = attacker_on_fuse(&base.path().join("fuse"));

    let root = root.to_str().unwrap();
    let scan = run(&["scan", root, "--json", "--entries"]);
    assert_eq!(
        scan["uninspectable"].as_array().map(Vec::len),
        Some(0),
        "nobody's FUSE made a process uninspectable: {scan}"
    );
    assert_eq!(
        states(&scan),
        [
            ("app-free".to_owned(), "idle".to_owned()),
            ("app-held".to_owned(), "in_use".to_owned())
        ],
        "{scan}"
    );
    run(&[
        "reap",
        root,
        "--match",
        "*",
        "--older-than",
        "0s",
        "--grace",
        "0s",
        "--json",
    ]);
    assert!(!Path::new(root).join("app-free").exists(), "not reclaimed");
    assert!(
        Path::new(root).join("app-held").exists(),
        "a held entry went"
    );
}
