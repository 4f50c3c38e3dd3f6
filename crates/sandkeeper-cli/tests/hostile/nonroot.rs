//! Issue 15: what `sandkeeper` says when it cannot see every process.
//!
//! - Root on a machine where a sandbox or security module hides pid 1 was
//!   told, after a table of `UNKNOWN`, to "run as root". It now says what is
//!   true, before the table, with the `--ignore-pid 1` it needs.
//! - A normal user (uid 65534) among root's processes got the first 8 of
//!   the 77 `--ignore-pid`s needed. Now every entry of theirs is kept
//!   (`unknown`: nothing held is reaped), and the output says why, before
//!   the table, with the number of processes and one switch
//!   (`SANDKEEPER_ASSUME_UNSEEN_FREE=1`), which — named in the output —
//!   lets them reap what is theirs.

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use sandkeeper_engine::Sandbox;
use sandkeeper_testkit::namespace::TRUST_PID_NAMESPACE_ENV;
use sandkeeper_testkit::privilege::{require_root, NOBODY};
use sandkeeper_testkit::scratch::Scratch;
use sandkeeper_testkit::tree::age_tree;

/// `sh -c script` with `$0` the binary, stderr into stdout (so the order in
/// which a terminal shows them can be checked), `env` set.
fn sh(script: &str, args: &[&Path], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(args)
        .env_remove(TRUST_PID_NAMESPACE_ENV)
        .env_remove("SANDKEEPER_ASSUME_UNSEEN_FREE")
        .env_remove("SANDKEEPER_KEEP")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run sh")
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where `needle` first appears in `hay`, or a panic showing both.
fn at(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in:\n{hay}"))
}

/// Root, with pid 1 hidden by whatever confines this machine: the warning
/// says so (not "run as root"), comes before the table, and names the
/// flag. Skips where root can read pid 1 (nothing is hidden there).
#[test]
fn root_is_told_what_hides_pid_1_before_the_table() {
    if !require_root("root_is_told_what_hides_pid_1_before_the_table") {
        return;
    }
    // (Listing /proc/1/fd may work where reading a link in it does not.)
    let readable = fs::read_dir("/proc/1/fd")
        .is_ok_and(|mut fds| fds.all(|fd| fd.is_ok_and(|fd| fs::read_link(fd.path()).is_ok())));
    if readable {
        eprintln!("skipping: root can inspect pid 1 here, nothing is hidden");
        return;
    }
    let sb = Sandbox::builder().tag("cli-nonroot").create().unwrap();
    fs::create_dir(sb.path().join("app-1")).unwrap();
    let out = sh(r#"exec "$0" scan "$1" 2>&1"#, &[sb.path()], &[]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let why = at(&all, "hidden even from root: a sandbox or security module");
    assert!(why < at(&all, "FAMILY"), "the reason comes first:\n{all}");
    assert!(all.contains("--ignore-pid 1"), "{all}");
    assert!(!all.contains("run as root"), "root is root already:\n{all}");
}

/// A sandbox (0755) in a root the other test users can reach.
fn searchable_sandbox() -> Scratch {
    let sb = Scratch::reachable_by_others("cli-nonroot");
    fs::set_permissions(sb.path(), fs::Permissions::from_mode(0o755)).unwrap();
    sb
}

/// A normal user in a pid namespace of its own with 12 of root's
/// processes, one of which lives in one of the user's entries: a reap
/// removes nothing and says why, before its summary, with the count and
/// one switch; with that switch, named in the output, the user's entry is
/// `idle` (reclaimable).
#[test]
fn a_normal_user_is_told_how_many_and_one_switch() {
    if !require_root("a_normal_user_is_told_how_many_and_one_switch") {
        return;
    }
    let sb = searchable_sandbox();
    let mine = sb.path().join("mine");
    for dir in [
        &mine,
        &mine.join("free-1"),
        &mine.join("held-1"),
        &mine.join("file-1"),
    ] {
        fs::create_dir(dir).unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    fs::write(mine.join("free-1/data"), b"x").unwrap();
    chown(mine.join("free-1/data"), Some(NOBODY), Some(NOBODY)).unwrap();
    fs::write(mine.join("file-1/data"), b"x").unwrap();
    chown(mine.join("file-1/data"), Some(NOBODY), Some(NOBODY)).unwrap();
    age_tree(
        &mine.join("file-1"),
        std::time::Duration::from_secs(3 * 86400),
    );
    age_tree(
        &mine.join("free-1"),
        std::time::Duration::from_secs(3 * 86400),
    );
    age_tree(
        &mine.join("held-1"),
        std::time::Duration::from_secs(3 * 86400),
    );
    // Pid 1 is this shell (root); ten root sleepers; one root process lives
    // in held-1. The reaper runs as nobody, trusting the namespace (it is
    // the test's own).
    let script = r#"
        bin=$0; root=$1
        for i in 1 2 3 4 5 6 7 8 9 10; do sleep 600 & done
        (cd "$root/held-1" && exec sleep 600) &
        (exec 3<"$root/file-1/data"; exec sleep 600) &
        nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
        nobody "$bin" reap --match '*' --older-than 1d "$root" 2>&1
        echo "EXIT $?"
        SANDKEEPER_ASSUME_UNSEEN_FREE=1 nobody "$bin" scan --entries "$root" 2>&1
        echo "EXIT $?"
        nobody "$bin" scan --assume-unseen-free --json "$root" 2>/dev/null
        echo "EXIT $?"
    "#;
    let out = sh(
        &format!(
            "exec unshare --pid --fork --mount-proc --kill-child sh -c '{}' \"$0\" \"$1\"",
            script.replace('\'', r"'\''")
        ),
        &[&mine],
        &[(TRUST_PID_NAMESPACE_ENV, "1")],
    );
    let all = text(&out);
    let (reap, rest) = all
        .split_once("EXIT 0\n")
        .unwrap_or_else(|| panic!("{all}"));
    let (scan, json) = rest
        .split_once("EXIT 0\n")
        .unwrap_or_else(|| panic!("{all}"));
    // Nothing held is reaped; nothing unprovable either.
    assert!(mine.join("free-1").exists() && mine.join("held-1").exists());
    assert!(mine.join("file-1").exists());
    let why = at(
        reap,
        "13 processes of other users (or root) cannot be inspected by uid 65534",
    );
    assert!(reap.contains("opened before a chmod"), "{reap}");
    assert!(
        reap.contains(
            "vouch for all 13 at once: run again with --assume-unseen-free \
             (or SANDKEEPER_ASSUME_UNSEEN_FREE=1 in the environment)"
        ),
        "{reap}"
    );
    assert!(why < at(reap, "removed"), "the reason comes first:\n{reap}");
    // With the switch, named in the output, the user's free entry is
    // reclaimable.
    assert!(json.ends_with("EXIT 0\n"), "{json}");
    let assumed = at(
        scan,
        "assumed to use nothing (--assume-unseen-free, SANDKEEPER_ASSUME_UNSEEN_FREE=1): \
         13 processes that could not be inspected; files you own were still asked",
    );
    assert!(assumed < at(scan, "FAMILY"), "{scan}");
    assert!(
        scan.lines()
            .any(|l| l.starts_with("idle") && l.ends_with("free-1")),
        "{scan}"
    );
    // A file of the user's that a root process holds stays in use, switch
    // or not: the kernel was asked (a write lease).
    assert!(
        scan.lines()
            .any(|l| l.starts_with("in_use") && l.ends_with("file-1")),
        "{scan}"
    );
    // The flag does what the variable does, and the JSON says so.
    assert!(json.contains("\"assumes_unseen_free\": true"), "{json}");
    assert!(json.contains("\"in_use\": 1"), "{json}");
}

/// Issue 25, item 4: the write lease a normal user's reaper asks does not
/// see a file another user opened with access mode 3 (`O_RDONLY |
/// O_WRONLY`, for ioctls): such an open counts neither as a reader nor as a
/// writer, so the lease is granted and, with `--assume-unseen-free`, the
/// entry is reaped. No check open to a normal user sees it; the warning
/// says exactly that the switch vouches for such opens.
#[test]
fn the_assume_switch_names_the_opens_the_lease_cannot_see() {
    if !require_root("the_assume_switch_names_the_opens_the_lease_cannot_see") {
        return;
    }
    let sb = searchable_sandbox();
    let mine = sb.path().join("mine");
    let held = mine.join("held-1");
    for dir in [&mine, &held] {
        fs::create_dir(dir).unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let data = held.join("data");
    fs::write(&data, b"x").unwrap();
    fs::set_permissions(&data, fs::Permissions::from_mode(0o666)).unwrap();
    chown(&data, Some(NOBODY), Some(NOBODY)).unwrap();
    age_tree(&held, std::time::Duration::from_secs(3 * 86400));
    // Uid 65533 holds the file with access mode 3; the reaper, uid 65534,
    // cannot inspect it (nor root's processes).
    let script = r#"
        bin=$0; data=$1; root=$2
        setpriv --reuid=65533 --regid=65533 --clear-groups -- env python3 -c '
import os, sys, time
fd = os.open(sys.argv[1], 3)
print("ready", flush=True)
time.sleep(600)' "$data" > "$root/../ready" &
        i=0
        while ! grep -q ready "$root/../ready" 2>/dev/null; do
            i=$((i + 1)); [ $i -lt 600 ] || { echo "the holder never got ready"; exit 1; }
            sleep 0.05
        done
        setpriv --reuid=65534 --regid=65534 --clear-groups -- \
            "$bin" scan --assume-unseen-free --entries "$root" 2>&1
        echo "EXIT $?"
    "#;
    let out = sh(
        &format!(
            "exec unshare --pid --fork --mount-proc --kill-child sh -c '{}' \"$0\" \"$1\" \"$2\"",
            script.replace('\'', r"'\''")
        ),
        &[&data, &mine],
        &[(TRUST_PID_NAMESPACE_ENV, "1")],
    );
    let all = text(&out);
    assert!(all.ends_with("EXIT 0\n"), "{all}");
    assert!(
        all.contains("not one with access mode 3 (ioctl only) nor an O_PATH descriptor"),
        "the warning does not say what the lease cannot see:\n{all}"
    );
    // The documented limit: the lease does not see it, so the entry is
    // reclaimable (fails the day a check that sees it is found).
    assert!(
        all.lines()
            .any(|l| l.starts_with("idle") && l.ends_with("held-1")),
        "{all}"
    );
    let _ = fs::remove_file(sb.path().join("ready"));
}

/// Issue 29: the config file vouches for pid 1 as `--ignore-pid 1` does:
/// `reap --config` and `watch --once` then say it was assumed, where
/// without it they say it is hidden (and how to vouch for it). Skips where
/// root can read pid 1.
#[test]
fn the_config_file_vouches_for_a_hidden_pid_1() {
    if !require_root("the_config_file_vouches_for_a_hidden_pid_1") {
        return;
    }
    let sb = Sandbox::builder().tag("cli-nonroot").create().unwrap();
    let root = sb.path().join("root");
    fs::create_dir(&root).unwrap();
    // (Listing /proc/1/fd may work where reading a link in it does not:
    // ask the tool itself.)
    let plain = sh(r#"exec "$0" scan "$1" 2>&1"#, &[&root], &[]);
    if !text(&plain).contains("hidden even from root") {
        eprintln!("skipping: root can inspect pid 1 here, nothing is hidden");
        return;
    }
    let hidden = "hidden even from root";
    let assumed = "assumed to use nothing (--ignore-pid): pid 1";
    for (vouched, says, not) in [(false, hidden, assumed), (true, assumed, hidden)] {
        let config = sb.path().join(format!("vouched-{vouched}.toml"));
        let head = if vouched { "ignore_pids = [1]\n" } else { "" };
        fs::write(
            &config,
            format!("{head}[[root]]\npath = \"{}\"\n", root.display()),
        )
        .unwrap();
        let check = sh(
            r#"exec "$0" watch --check --config "$1" 2>&1"#,
            &[&config],
            &[],
        );
        assert_eq!(
            text(&check).contains("ignore_pids: 1"),
            vouched,
            "{}",
            text(&check)
        );
        for script in [
            r#"exec "$0" reap --dry-run --config "$1" 2>&1"#,
            r#"exec "$0" watch --once --dry-run --config "$1" 2>&1"#,
        ] {
            let out = sh(script, &[&config], &[]);
            let all = text(&out);
            assert!(out.status.success(), "{script}: {all}");
            assert!(
                all.contains(says) && !all.contains(not),
                "{script}, vouched {vouched}:\n{all}"
            );
        }
    }
}
