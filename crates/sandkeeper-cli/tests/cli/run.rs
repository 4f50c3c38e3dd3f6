//! `sandkeeper run`: the directory is gone afterwards whatever the command
//! did, statuses pass through, descendants die first.

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandkeeper_engine::lease::{self, Probe};
use sandkeeper_engine::sandbox;

use crate::sandkeeper;
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::{require_root, setpriv_nobody};
use sandkeeper_testkit::tree::names;

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandkeeper"));
    cmd.env_remove("SANDKEEPER_KEEP");
    cmd
}

fn pid_alive(pid: u32) -> bool {
    // A zombie has no files open and no cwd: it counts as dead here.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn the_directory_goes_and_the_status_passes_through() {
    let root = sandbox!().unwrap();
    let cases = [
        ("exit 0", Some(0)),
        ("exit 1", Some(1)),
        ("kill -SEGV $$", Some(139)),
    ];
    for (script, want) in cases {
        let out = bin()
            .args(["run", "--root", root.path().to_str().unwrap(), "--", "sh", "-c"])
            .arg(format!("echo data > \"$TMPDIR/file\"; mkdir \"$TMP/app-1\"; test \"$TEMP\" = \"$TEMPDIR\" || exit 99; {script}"))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            want,
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            names(root.path()),
            Vec::<OsString>::new(),
            "{script}: nothing left"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("sandkeeper: sh left 2 entries"),
            "{script}: {err}"
        );
    }
}

#[test]
fn a_daemonized_grandchild_is_dead_before_the_directory_goes() {
    let root = sandbox!().unwrap();
    let outside = sandbox!().unwrap();
    let pidfile = outside.path().join("daemon.pid");
    let out = bin()
        .args([
            "run",
            "--kill-grace",
            "2s",
            "--root",
            root.path().to_str().unwrap(),
            "--",
            "sh",
            "-c",
        ])
        .arg(
            "setsid sh -c 'exec 3>\"$TMPDIR/held\"; echo $$ > \"$1\"; exec sleep 600' sh \"$1\" & \
              while [ ! -s \"$1\" ]; do sleep 0.01; done; exit 0",
        )
        .arg("sh")
        .arg(&pidfile)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid: u32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_alive(pid), "the daemon {pid} was stopped");
    assert_eq!(names(root.path()), Vec::<OsString>::new());
}

#[test]
fn leaky_python_and_rust_programs_leave_nothing() {
    let root = sandbox!().unwrap();
    let python = "import tempfile, os\nd = tempfile.mkdtemp()\nopen(os.path.join(d, 'x'), 'w').write('leak')\nf = tempfile.NamedTemporaryFile(delete=False)\nf.write(b'leak')";
    let out = bin()
        .args([
            "run",
            "--root",
            root.path().to_str().unwrap(),
            "--",
            "python3",
            "-c",
            python,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("python3 left 2 entries"));
    // A Rust test binary (this one) that writes into std::env::temp_dir().
    let out = bin()
        .args(["run", "--root", root.path().to_str().unwrap(), "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "run::leak_into_temp_dir",
            "--nocapture",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("left 1 entry"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(names(root.path()), Vec::<OsString>::new());
}

/// A test that leaks, as many do: run by the test above under `run`.
#[test]
#[ignore = "run by leaky_python_and_rust_programs_leave_nothing under sandkeeper run"]
fn leak_into_temp_dir() {
    let dir = std::env::temp_dir().join(format!("app-235-{}", std::process::id()));
    fs::create_dir_all(dir.join("target")).unwrap();
    fs::write(dir.join("target/lib.rlib"), vec![0u8; 100_000]).unwrap();
}

#[test]
fn sigint_reaches_the_command_and_run_still_cleans_up() {
    let root = sandbox!().unwrap();
    let outside = sandbox!().unwrap();
    let marker = outside.path().join("got-int");
    let mut run = bin()
        .args(["run", "--root", root.path().to_str().unwrap(), "--", "sh", "-c"])
        .arg("trap 'echo int > \"$1\"; exit 130' INT; touch \"$TMPDIR/x\"; echo ready; while :; do sleep 0.05; done")
        .arg("sh")
        .arg(&marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(run.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(
        fs::read_to_string(&marker).unwrap().trim(),
        "int",
        "the command got SIGINT"
    );
    assert_eq!(names(root.path()), Vec::<OsString>::new());
}

#[test]
fn isolate_caps_the_size_and_leaves_no_mount() {
    if !require_root("isolate_caps_the_size_and_leaves_no_mount") {
        return;
    }
    let root = sandbox!().unwrap();
    let out = bin()
        .args(["run", "--isolate", "--size", "10M", "--root", root.path().to_str().unwrap(), "--", "sh", "-c"])
        .arg("echo fs=$(stat -f -c %T \"$TMPDIR\"); head -c 20000000 /dev/zero > \"$TMPDIR/big\"; echo status=$?")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("status=1"), "the write failed: {stdout}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    // The write hit the 10 MB cap of a private tmpfs, not the host's disk.
    assert!(stdout.contains("fs=tmpfs"), "{stdout}");
    assert_eq!(names(root.path()), Vec::<OsString>::new());
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(root.path().to_str().unwrap()),
        "nothing mounted under the root"
    );
}

#[test]
fn bad_input() {
    let root = sandbox!().unwrap();
    let out = sandkeeper(&["run"]);
    assert_eq!(out.status.code(), Some(2));
    let out = sandkeeper(&[
        "run",
        "--root",
        root.path().to_str().unwrap(),
        "--",
        "no-such-command-xyz",
    ]);
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("command not found: no-such-command-xyz"));
    assert_eq!(
        names(root.path()),
        Vec::<OsString>::new(),
        "the directory was removed"
    );
    let out = sandkeeper(&[
        "run",
        "--root",
        root.path().join("missing").to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

#[test]
fn a_killed_run_leaves_its_sandbox_live_while_the_command_runs() {
    run_in_pid_namespace(
        "a_killed_run_leaves_its_sandbox_live_while_the_command_runs",
        "run::inner_killed_run",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_killed_run() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let outside = sandbox!().unwrap();
    let pidfile = outside.path().join("cmd.pid");
    let mut run = bin()
        .args([
            "run",
            "--root",
            root.path().to_str().unwrap(),
            "--",
            "sh",
            "-c",
        ])
        .arg("echo $$ > \"$1\"; echo data > \"$TMPDIR/disk.img\"; exec sleep 600")
        .arg("sh")
        .arg(&pidfile)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs::read_to_string(&pidfile).map_or(true, |s| s.trim().is_empty()) {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let cmd_pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    run.kill().unwrap();
    run.wait().unwrap();
    let names = names(root.path());
    assert_eq!(names.len(), 1, "{names:?}");
    let dir: PathBuf = root.path().join(&names[0]);
    assert!(
        matches!(lease::probe(&dir).unwrap(), Probe::Live { .. }),
        "live while its command runs"
    );
    assert!(dir.join("disk.img").exists());
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(cmd_pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    while pid_alive(cmd_pid as u32) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        matches!(lease::probe(&dir).unwrap(), Probe::Free(_)),
        "orphaned once every holder is gone"
    );
    let out = sandkeeper(&["reap", root.path().to_str().unwrap(), "--grace", "0s"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dir.exists(),
        "reap removed the orphan: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `--isolate` as a normal user: through an unprivileged user namespace
/// where the kernel allows one; a clear error where it does not.
#[test]
fn isolate_as_a_normal_user() {
    if !require_root("isolate_as_a_normal_user (switches to nobody)") {
        return;
    }
    // `nobody` makes its run directory there: not under a private checkout
    // or TMPDIR.
    let root = sandkeeper_testkit::scratch::Scratch::reachable_by_others("run-as-nobody");
    fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = setpriv_nobody()
        .arg(env!("CARGO_BIN_EXE_sandkeeper"))
        .args([
            "run",
            "--isolate",
            "--size",
            "5M",
            "--root",
            root.path().to_str().unwrap(),
            "--",
            "sh",
            "-c",
        ])
        .arg("echo fs=$(stat -f -c %T \"$TMPDIR\") uid=$(id -u)")
        .output()
        .expect("setpriv (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let userns = fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .is_ok_and(|n| n.trim() != "0")
        && fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone")
            .map_or(true, |n| n.trim() != "0");
    if userns {
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stdout.contains("fs=tmpfs uid=65534"), "{stdout}");
    } else {
        assert_eq!(
            out.status.code(),
            Some(2),
            "refused, not run without isolation: {stderr}"
        );
        assert!(stderr.contains("cannot isolate"), "{stderr}");
    }
    assert_eq!(names(root.path()), Vec::<OsString>::new());
}

/// Issue 11, item 11: when the directory cannot be removed completely (the
/// command left a tmpfs mounted inside), `run` still exits with the
/// command's status, prints the leftover line and says why, and writes
/// `--report-json` with the cleanup's outcome. What is left keeps its
/// lease record: once unmounted, a reap takes it as orphaned.
#[test]
fn a_cleanup_failure_keeps_the_status_and_the_report() {
    if !require_root("a_cleanup_failure_keeps_the_status_and_the_report") {
        return;
    }
    let root = sandbox!().unwrap();
    let out_dir = sandbox!().unwrap();
    let json = out_dir.path().join("run.json");
    let out = bin()
        .args(["run", "--root", root.path().to_str().unwrap()])
        .args(["--report-json", json.to_str().unwrap()])
        .args(["--", "sh", "-c"])
        .arg(r#"mkdir "$TMPDIR/mnt" && mount -t tmpfs sk-run "$TMPDIR/mnt" && echo data > "$TMPDIR/file"; exit 3"#)
        .output()
        .unwrap();
    // Lazily unmounts what the command mounted, even when the test fails.
    let mounted: Vec<Mount> = names(root.path())
        .iter()
        .map(|n| Mount::adopt(root.path().join(n).join("mnt")))
        .collect();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "the command's status: {err}");
    assert!(
        err.contains("sandkeeper: sh left 2 entries") && err.contains("not removed completely"),
        "the leftover line: {err}"
    );
    assert!(err.contains("mnt: mount point"), "the reason: {err}");
    let report: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&json).expect("the report is written")).unwrap();
    assert_eq!(report["exit_code"], 3, "{report:#}");
    assert_eq!(report["cleanup"]["complete"], false, "{report:#}");
    assert!(
        report["cleanup"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("mnt: mount point")),
        "{report:#}"
    );
    // What is left is still a managed sandbox.
    let left = names(root.path());
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(root.path().join(&left[0]).join(lease::LEASE_FILE).is_file());
    drop(mounted);

    // A run whose cleanup succeeds says so in its report too.
    let out = bin()
        .args(["run", "--root", root.path().to_str().unwrap()])
        .args(["--report-json", json.to_str().unwrap()])
        .args(["--", "sh", "-c", "exit 0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["cleanup"]["complete"], true, "{report:#}");
    assert_eq!(
        report["cleanup"]["error"],
        serde_json::Value::Null,
        "{report:#}"
    );
}

/// A root whose filesystem has inodes left but no blocks: the directory
/// is made, its lease record cannot be written. Said as a full root (exit
/// status 2, the command not run), and nothing is left in it.
#[test]
fn a_root_on_a_full_filesystem_says_so_and_leaves_nothing() {
    if !require_root("a_root_on_a_full_filesystem_says_so_and_leaves_nothing (mounts a tmpfs)") {
        return;
    }
    let scratch = sandbox!().unwrap();
    let mount = Mount::tmpfs(&scratch.path().join("fs"), "64k");
    let root = mount.path();
    // Fill its blocks; inodes stay.
    let mut fill = fs::File::create(root.join("fill")).unwrap();
    let chunk = vec![1u8; 4096];
    while std::io::Write::write_all(&mut fill, &chunk).is_ok() {}
    drop(fill);
    let out = bin()
        .args([
            "run",
            "--root",
            root.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo ran",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    assert!(
        err.contains(&format!(
            "sandbox root's filesystem is full: {}",
            root.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("hint: pass a writable directory as the root"),
        "{err}"
    );
    assert_eq!(names(root), [OsString::from("fill")]);
}

/// Issue 11, item 12: a TMPDIR on a special filesystem (`/proc`) says so,
/// not that it "does not exist".
#[test]
fn a_root_on_a_special_filesystem_says_so() {
    let out = bin()
        .args(["run", "--", "true"])
        .env("TMPDIR", "/proc")
        .env_remove("SANDKEEPER_ROOT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "sandbox root is on a special filesystem (proc) where no directory can be made: /proc"
        ) && !err.contains("does not exist"),
        "{err}"
    );
}
