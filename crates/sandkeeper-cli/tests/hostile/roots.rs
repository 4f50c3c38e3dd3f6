//! Findings 1, 2, 3 and 8: roots are opened once, never through a link
//! another user controls; the tool's own directories are never entries;
//! names that merely look like the tool's own are ordinary entries.
//!
//! The shared root is a sticky, world-writable directory owned by root
//! (like `/tmp`) inside a sandbox that uid 65534 can reach; the victim is a
//! root-owned directory beside it whose contents must survive.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::{bin, text};
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::{nobody_sh, require_root, setpriv_nobody};
use sandkeeper_testkit::process::spawn_ready;
use sandkeeper_testkit::scratch::Scratch;

use sandkeeper_engine::Sandbox;

const NOBODY: &str = "65534";

/// A sandbox reachable by uid 65534 holding `shared` (mode 1777, like
/// `/tmp`) and `victim` (root's, with files that must survive).
struct Scene {
    base: Scratch,
}

impl Scene {
    fn new() -> Scene {
        let base = Scratch::reachable_by_others("hostile-roots");
        let scene = Scene { base };
        fs::create_dir(scene.shared()).unwrap();
        fs::set_permissions(scene.shared(), fs::Permissions::from_mode(0o1777)).unwrap();
        for name in ["build-1", "build-2"] {
            fs::create_dir_all(scene.victim().join(name)).unwrap();
            fs::write(scene.victim().join(name).join("output"), "precious").unwrap();
        }
        scene
    }

    fn shared(&self) -> PathBuf {
        self.base.path().join("shared")
    }

    fn victim(&self) -> PathBuf {
        self.base.path().join("victim")
    }

    fn assert_victim_intact(&self) {
        for name in ["build-1", "build-2"] {
            let file = self.victim().join(name).join("output");
            assert_eq!(
                fs::read_to_string(&file).ok().as_deref(),
                Some("precious"),
                "{} was touched",
                file.display()
            );
        }
    }
}

/// Runs `sandkeeper args…` with `TMPDIR` set to `tmpdir`.
fn sandkeeper(tmpdir: &Path, args: &[&str]) -> Output {
    bin()
        .args(args)
        .env("TMPDIR", tmpdir)
        .output()
        .expect("run sandkeeper")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

const REAP_ALL: [&str; 7] = [
    "reap",
    "--match",
    "*",
    "--older-than",
    "0s",
    "--grace",
    "0s",
];

/// Finding 2: `reap` refuses a root that is a symlink, naming the target;
/// `scan` follows it and says so.
#[test]
fn a_root_given_as_a_symlink_is_refused_by_reap_and_followed_by_scan() {
    if !require_root("a_root_given_as_a_symlink_is_refused_by_reap_and_followed_by_scan") {
        return;
    }
    let scene = Scene::new();
    let link = scene.base.path().join("link");
    std::os::unix::fs::symlink(scene.victim(), &link).unwrap();
    let out = sandkeeper(&scene.shared(), &[&REAP_ALL[..], &[p(&link)]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("symlink") && err.contains(p(&scene.victim())),
        "{}",
        text(&out)
    );
    assert!(err.contains("give the directory itself"), "{}", text(&out));
    scene.assert_victim_intact();

    let out = sandkeeper(&scene.shared(), &["scan", p(&link)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a symlink to"),
        "{}",
        text(&out)
    );
}

/// Finding 1, without a race: an explicit root that is, or passes through,
/// a symlink owned by another user is refused by every command.
#[test]
fn a_root_through_another_users_symlink_is_refused() {
    if !require_root("a_root_through_another_users_symlink_is_refused") {
        return;
    }
    let scene = Scene::new();
    let shared = scene.shared();
    nobody_sh(
        &format!(
            "ln -s {victim} {shared}/ci && mkdir {shared}/mine && ln -s .. {shared}/mine/up",
            victim = p(&scene.victim()),
            shared = p(&shared),
        ),
        &[],
    );
    for root in [
        shared.join("ci"),
        shared.join("ci/"),
        shared.join("ci/build-1"),
        shared.join("mine/up/../victim"),
    ] {
        for cmd in [&REAP_ALL[..], &["scan"], &["ls"]] {
            let out = sandkeeper(&shared, &[cmd, &[p(&root)]].concat());
            assert_eq!(
                out.status.code(),
                Some(2),
                "{root:?} {cmd:?}: {}",
                text(&out)
            );
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("owned by uid 65534")
                    || String::from_utf8_lossy(&out.stderr).contains("symlink"),
                "{root:?}: {}",
                text(&out)
            );
        }
    }
    scene.assert_victim_intact();
}

/// Finding 1: a per-user root `sandkeeper-<uid>` that its owner replaced
/// with a symlink is never followed; the link is an ordinary entry.
#[test]
fn a_per_user_root_replaced_by_a_symlink_is_never_followed() {
    run_in_pid_namespace(
        "a_per_user_root_replaced_by_a_symlink_is_never_followed",
        "roots::inner_user_root_symlink",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_user_root_symlink() {
    if !in_namespace() {
        return;
    }
    let scene = Scene::new();
    let shared = scene.shared();
    nobody_sh(
        &format!(
            "ln -s {victim} {shared}/sandkeeper-{NOBODY}",
            victim = p(&scene.victim()),
            shared = p(&shared),
        ),
        &[],
    );
    for cmd in [&["ls"][..], &["scan", "--entries"], &["reap", "--dry-run"]] {
        let out = sandkeeper(&shared, cmd);
        assert_eq!(out.status.code(), Some(0), "{cmd:?}: {}", text(&out));
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("build-1"),
            "{cmd:?} looked into the victim: {}",
            text(&out)
        );
    }
    let out = sandkeeper(&shared, &REAP_ALL);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    scene.assert_victim_intact();
    // The link itself was an ordinary entry, unlinked as a link.
    assert!(fs::symlink_metadata(shared.join(format!("sandkeeper-{NOBODY}"))).is_err());
}

/// Finding 1, raced: while root reaps with default roots, the owner of
/// `sandkeeper-65534` swaps it with a symlink to the victim
/// (`RENAME_EXCHANGE`) every time the shared root is opened (inotify), so
/// whichever resolution comes second sees the other one. Nothing outside
/// the shared root is ever touched.
#[test]
fn a_per_user_root_swapped_during_the_run_is_never_followed() {
    run_in_pid_namespace(
        "a_per_user_root_swapped_during_the_run_is_never_followed",
        "roots::inner_user_root_swap",
    );
}

/// The attacker: exchanges `a` and `b` in `dir` on every open of `dir`
/// itself, until killed (or after 30 s).
const SWAPPER: &str = r#"
import ctypes, os, select, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
d, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
IN_OPEN, IN_ISDIR, RENAME_EXCHANGE, AT_FDCWD = 0x20, 0x40000000, 2, -100
fd = libc.inotify_init1(0)
if fd < 0 or libc.inotify_add_watch(fd, d.encode(), IN_OPEN) < 0:
    sys.exit("inotify: " + os.strerror(ctypes.get_errno()))
pa, pb = os.path.join(d, a).encode(), os.path.join(d, b).encode()
print("ready", flush=True)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    if not select.select([fd], [], [], 1)[0]:
        continue
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        wd, mask, cookie, n = struct.unpack_from("iIII", buf, i)
        i += 16 + n
        if mask & IN_ISDIR and n == 0:
            libc.renameat2(AT_FDCWD, pa, AT_FDCWD, pb, RENAME_EXCHANGE)
"#;

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_user_root_swap() {
    if !in_namespace() {
        return;
    }
    let scene = Scene::new();
    let shared = scene.shared();
    let user_root = format!("sandkeeper-{NOBODY}");
    nobody_sh(&format!(
        "cd {shared} && mkdir -m 0700 {user_root} && mkdir {user_root}/own-1 && ln -s {victim} swap",
        victim = p(&scene.victim()),
        shared = p(&shared),
    ), &[]);
    let _swapper = spawn_ready(setpriv_nobody().args([
        "/usr/bin/python3",
        "-c",
        SWAPPER,
        p(&shared),
        &user_root,
        "swap",
    ]));
    for _ in 0..12 {
        let out = sandkeeper(
            &shared,
            &[
                "reap",
                "--match",
                "build-*",
                "--older-than",
                "0s",
                "--grace",
                "0s",
            ],
        );
        assert!(out.status.code().is_some_and(|c| c <= 1), "{}", text(&out));
        scene.assert_victim_intact();
        let out = sandkeeper(
            &shared,
            &[
                "reap",
                "--dry-run",
                "--match",
                "build-*",
                "--older-than",
                "0s",
                "--grace",
                "0s",
                "--verbose",
            ],
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains(p(&scene.victim())),
            "{}",
            text(&out)
        );
    }
    scene.assert_victim_intact();
}

/// Finding 3: `reap --match '*'` never removes a per-user root, nor what
/// is kept on purpose inside it; it is a root of its own (with default
/// roots) or skipped (with explicit ones).
#[test]
fn the_tools_own_directories_are_never_reaped_wholesale() {
    run_in_pid_namespace(
        "the_tools_own_directories_are_never_reaped_wholesale",
        "roots::inner_own_directories",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_own_directories() {
    if !in_namespace() {
        return;
    }
    let scene = Scene::new();
    let shared = scene.shared();
    // A sandbox kept on purpose in root's per-user root (made as the
    // library makes it when TMPDIR is the shared root).
    let user_root = shared.join("sandkeeper-0");
    fs::create_dir(&user_root).unwrap();
    fs::set_permissions(&user_root, fs::Permissions::from_mode(0o700)).unwrap();
    let kept = Sandbox::builder()
        .tag("kept")
        .root(&user_root)
        .keyed(true)
        .keep_policy(sandkeeper_engine::KeepPolicy::Always)
        .create()
        .unwrap();
    let kept_path = kept.path().to_owned();
    drop(kept);
    assert!(kept_path.starts_with(&user_root), "{kept_path:?}");
    fs::create_dir(shared.join("leftover")).unwrap();

    let out = sandkeeper(&shared, &REAP_ALL);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(kept_path.is_dir(), "the kept sandbox went: {}", text(&out));
    assert!(!shared.join("leftover").exists(), "{}", text(&out));

    fs::create_dir(shared.join("leftover")).unwrap();
    let out = sandkeeper(&shared, &[&REAP_ALL[..], &[p(&shared)]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(kept_path.is_dir(), "the kept sandbox went: {}", text(&out));
    assert!(!shared.join("leftover").exists(), "{}", text(&out));
    sandkeeper_engine::remove::remove_path(
        &kept_path,
        &sandkeeper_engine::remove::RemoveOptions::new(),
    )
    .unwrap();
}

/// Finding 8: names that look like the tool's own but were not made by it
/// (another owner, another mode) are ordinary entries: seen, sized and
/// selectable.
#[test]
fn look_alike_names_are_ordinary_entries() {
    if !require_root("look_alike_names_are_ordinary_entries") {
        return;
    }
    let scene = Scene::new();
    let shared = scene.shared();
    nobody_sh(&format!(
        "cd {shared} && for d in .sandkeeper-trash .sandkeeper-trash-0 sandkeeper-0 sandkeeper-1000; do \
           mkdir -m 0700 $d && head -c 65536 /dev/zero > $d/data; done && \
         mkdir -m 0755 sandkeeper-{NOBODY} && head -c 65536 /dev/zero > sandkeeper-{NOBODY}/data",
        shared = p(&shared),
    ), &[]);
    let out = sandkeeper(&shared, &["scan", "--json", "--entries", p(&shared)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = json["roots"][0]["entries"].as_array().unwrap();
    for name in [
        ".sandkeeper-trash",
        ".sandkeeper-trash-0",
        "sandkeeper-0",
        "sandkeeper-1000",
        &format!("sandkeeper-{NOBODY}"),
    ] {
        let entry = entries
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not an entry: {}", text(&out)));
        assert!(
            entry["disk_bytes"].as_u64().unwrap() >= 65536,
            "{name}: {entry}"
        );
    }
    let out = sandkeeper(
        &shared,
        &[
            &REAP_ALL[..],
            &["--dry-run", "--verbose", "--ignore-pid", "1", p(&shared)],
        ]
        .concat(),
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(".sandkeeper-trash-0"),
        "{}",
        text(&out)
    );
    let meta = fs::metadata(shared.join("sandkeeper-0")).unwrap();
    assert_eq!(meta.uid(), 65534);
}
