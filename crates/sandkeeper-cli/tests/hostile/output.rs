//! Issue 10, finding 4: output files (`watch --metrics-file`, `run
//! --report-json`) must never write, truncate or chmod a file root did not
//! create, whatever the owner of the output directory plants or swaps.
//!
//! The fixture: a root-owned directory (0755) holding a root-owned 0600
//! canary and an output directory owned by uid 65534, who attacks.

use std::fs;
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandkeeper_testkit::privilege::{require_root, setpriv_nobody, NOBODY, SETPRIV_NOBODY};
use sandkeeper_testkit::process::{test_command, Spawned};
use sandkeeper_testkit::scratch::Scratch;

const SECRET: &[u8] = b"root's secret\n";

use crate::bin;

/// Runs `args` as nobody; it must succeed.
fn nobody(args: &[&str]) {
    let out = setpriv_nobody()
        .args(args)
        .output()
        .expect("setpriv (util-linux)");
    assert!(
        out.status.success(),
        "as nobody: {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Fixture {
    base: Scratch,
    canary: PathBuf,
    out: PathBuf,
    config: PathBuf,
}

impl Fixture {
    /// The base (root, 0755) with the canary (root, 0600), the output
    /// directory (nobody, 0755, or root with `out_mode`), an empty root to
    /// scan and a config for `watch`.
    fn new(tag: &str, out_mode: Option<u32>) -> Fixture {
        let base = Scratch::reachable_by_others(tag);
        fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let canary = base.path().join("canary");
        fs::write(&canary, SECRET).unwrap();
        fs::set_permissions(&canary, fs::Permissions::from_mode(0o600)).unwrap();
        let out = base.path().join("out");
        fs::create_dir(&out).unwrap();
        match out_mode {
            Some(mode) => fs::set_permissions(&out, fs::Permissions::from_mode(mode)).unwrap(),
            None => std::os::unix::fs::chown(&out, Some(NOBODY), Some(NOBODY)).unwrap(),
        }
        let scan_root = base.path().join("scanned");
        fs::create_dir(&scan_root).unwrap();
        let config = base.path().join("watch.toml");
        fs::write(
            &config,
            format!(
                "[[root]]\npath = \"{}\"\nuser_dirs = false\n",
                scan_root.display()
            ),
        )
        .unwrap();
        Fixture {
            base,
            canary,
            out,
            config,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.out.join(name)
    }

    /// The canary has its content, mode and owner still.
    fn assert_canary_intact(&self, what: &str) {
        let meta = fs::symlink_metadata(&self.canary).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&fs::read(&self.canary).unwrap()),
            String::from_utf8_lossy(SECRET),
            "{what}: the canary was written"
        );
        assert_eq!(
            meta.mode() & 0o7777,
            0o600,
            "{what}: the canary was chmodded"
        );
        assert_eq!((meta.uid(), meta.nlink()), (0, 1), "{what}: the canary");
    }

    fn watch(&self, metrics: &Path) -> Command {
        let mut cmd = bin();
        cmd.args(["watch", "--once", "--config"])
            .arg(&self.config)
            .arg("--metrics-file")
            .arg(metrics);
        cmd
    }
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn is_symlink(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// The old writer used `.NAME.PID.tmp` with create+truncate: a link planted
/// there for root's pid (known ahead: `exec` keeps it) made root write and
/// chmod the canary. Now the temp name is random and made with `O_EXCL`.
#[test]
fn metrics_write_ignores_links_at_predictable_temp_names() {
    if !require_root("metrics_write_ignores_links_at_predictable_temp_names") {
        return;
    }
    let fx = Fixture::new("hostile-output-tmpname", None);
    let metrics = fx.path("sandkeeper.prom");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "read go; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(fx.watch(&metrics).get_args())
        .env_remove("SANDKEEPER_KEEP")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    // Every name the old writer could pick for that pid, and a few more.
    for p in [pid, pid + 1, pid + 2] {
        let planted = fx.path(&format!(".sandkeeper.prom.{p}.tmp"));
        nobody(&[
            "ln",
            "-s",
            fx.canary.to_str().unwrap(),
            planted.to_str().unwrap(),
        ]);
    }
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    fx.assert_canary_intact("watch --metrics-file");
    let meta = fs::symlink_metadata(&metrics).unwrap();
    assert!(
        meta.is_file(),
        "the metrics file is root's own: {}",
        text(&out)
    );
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o644));
    assert!(fs::read_to_string(&metrics)
        .unwrap()
        .contains("sandkeeper_cycles_total 1"));
    assert!(
        is_symlink(&fx.path(&format!(".sandkeeper.prom.{pid}.tmp"))),
        "nobody's link is left as it was"
    );
}

/// A link at the output name itself: `run` wrote through it with a plain
/// `std::fs::write`. Both commands now refuse it before doing anything
/// (exit 2, naming it), and the command is not run.
#[test]
fn a_planted_link_at_the_output_name_is_refused() {
    if !require_root("a_planted_link_at_the_output_name_is_refused") {
        return;
    }
    let fx = Fixture::new("hostile-output-target", None);
    let canary = fx.canary.to_str().unwrap();
    let report = fx.path("report.json");
    let metrics = fx.path("sandkeeper.prom");
    for link in [&report, &metrics] {
        nobody(&["ln", "-s", canary, link.to_str().unwrap()]);
    }
    let marker = fx.base.path().join("ran");
    let out = bin()
        .args(["run", "--report-json"])
        .arg(&report)
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    fx.assert_canary_intact("run --report-json");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(report.to_str().unwrap()) && text(&out).contains("symlink"),
        "names it: {}",
        text(&out)
    );
    assert!(!marker.exists(), "refused before the command ran");

    let out = fx.watch(&metrics).output().unwrap();
    fx.assert_canary_intact("watch --metrics-file");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(metrics.to_str().unwrap()),
        "{}",
        text(&out)
    );
    assert!(is_symlink(&report) && is_symlink(&metrics), "left alone");
}

/// The link appears while the command runs (the command itself, as nobody,
/// plants it): the final write looks again, through the directory's
/// descriptor, and refuses; `run` says so and fails.
#[test]
fn a_link_planted_during_the_run_is_refused() {
    if !require_root("a_link_planted_during_the_run_is_refused") {
        return;
    }
    let fx = Fixture::new("hostile-output-during", None);
    let report = fx.path("report.json");
    let out = bin()
        .args(["run", "--report-json"])
        .arg(&report)
        .args([
            "--",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "ln",
            "-s",
        ])
        .arg(&fx.canary)
        .arg(&report)
        .output()
        .unwrap();
    fx.assert_canary_intact("run --report-json");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(report.to_str().unwrap()),
        "names it: {}",
        text(&out)
    );
    assert!(is_symlink(&report));
}

/// Nobody watches the output directory (inotify, `IN_CREATE`) and swaps
/// root's temp file for a link to the canary the moment it appears
/// (`RENAME_EXCHANGE`). Root writes, chmods and renames through
/// descriptors only, so whichever way the race goes, the canary is
/// untouched and everything root wrote stays in the output directory.
#[test]
fn racing_the_temp_name_with_inotify() {
    if !require_root("racing_the_temp_name_with_inotify") {
        return;
    }
    for what in ["metrics", "report"] {
        let fx = Fixture::new("hostile-output-race", None);
        let target = fx.path(if what == "metrics" {
            "m.prom"
        } else {
            "r.json"
        });
        let attacker = Attacker::start(&fx.out, &fx.canary);
        let out = if what == "metrics" {
            fx.watch(&target).output().unwrap()
        } else {
            bin()
                .args(["run", "--report-json"])
                .arg(&target)
                .args(["--", "true"])
                .output()
                .unwrap()
        };
        let said = attacker.finish();
        // Which way the race went (either is fine), for --nocapture.
        eprintln!(
            "{what}: {}",
            said.lines()
                .filter(|l| l.contains("saw "))
                .collect::<String>()
        );
        fx.assert_canary_intact(what);
        assert!(
            said.contains("saw "),
            "{what}: the attacker saw root's temp file: {said}\n{}",
            text(&out)
        );
        for entry in fs::read_dir(&fx.out).unwrap() {
            let entry = entry.unwrap();
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            assert!(
                meta.file_type().is_symlink() || meta.uid() == 0,
                "{what}: {:?} is nobody's link or root's file",
                entry.file_name()
            );
        }
    }
}

/// The attacker of [`racing_the_temp_name_with_inotify`]: this test binary
/// re-run as nobody ([`attack_exchange_on_create`]).
struct Attacker {
    child: Spawned,
    said: Vec<String>,
}

impl Attacker {
    fn start(dir: &Path, canary: &Path) -> Attacker {
        let exe = std::env::current_exe().unwrap();
        let mut child = Spawned(
            test_command(&SETPRIV_NOBODY, "output::attack_exchange_on_create")
                .env("SK_ATTACK_DIR", dir)
                .env("SK_ATTACK_CANARY", canary)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .expect("setpriv (util-linux)"),
        );
        let mut said = Vec::new();
        let mut lines = BufReader::new(child.0.stdout.as_mut().unwrap()).lines();
        loop {
            let line = lines
                .next()
                .unwrap_or_else(|| {
                    panic!(
                        "the attacker ended before it was ready: {said:?} (can nobody run {}?)",
                        exe.display()
                    )
                })
                .unwrap();
            let ready = line.contains("attacker ready");
            said.push(line);
            if ready {
                break;
            }
        }
        Attacker { child, said }
    }

    /// Waits (bounded) for the attacker to act, then returns what it said.
    fn finish(mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.0.kill();
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(self.child.0.stdout.as_mut().unwrap(), &mut rest);
        self.said.push(rest);
        self.said.join("\n")
    }
}

/// Run as nobody by [`Attacker`]: plants a link to the canary, waits for
/// the first file someone else creates in the directory, and exchanges it
/// with the link.
#[test]
#[ignore = "the attacker half of racing_the_temp_name_with_inotify"]
fn attack_exchange_on_create() {
    use rustix::fs::inotify;
    let dir = PathBuf::from(std::env::var_os("SK_ATTACK_DIR").expect("SK_ATTACK_DIR"));
    let canary = PathBuf::from(std::env::var_os("SK_ATTACK_CANARY").expect("SK_ATTACK_CANARY"));
    let bait = "bait";
    std::os::unix::fs::symlink(&canary, dir.join(bait)).unwrap();
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(&fd, &dir, inotify::WatchFlags::CREATE).unwrap();
    let dirfd = fs::File::open(&dir).unwrap();
    println!("attacker ready");
    std::io::stdout().flush().unwrap();
    let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
    let mut events = inotify::Reader::new(&fd, &mut buf);
    loop {
        let event = events.next().unwrap();
        let Some(name) = event.file_name() else {
            continue;
        };
        let name = name.to_str().unwrap().to_owned();
        if name == bait {
            continue;
        }
        let result = rustix::fs::renameat_with(
            &dirfd,
            bait,
            &dirfd,
            name.as_str(),
            rustix::fs::RenameFlags::EXCHANGE,
        );
        println!("saw {name}: exchange {result:?}");
        return;
    }
}

/// A directory others may write (not sticky) is refused up front, exit 2,
/// naming it; a sticky root-owned one (like `/tmp`) is accepted.
#[test]
fn directories_others_may_write() {
    if !require_root("directories_others_may_write") {
        return;
    }
    for (mode, ok) in [(0o777, false), (0o1777, true)] {
        let fx = Fixture::new("hostile-output-mode", Some(mode));
        let report = fx.path("report.json");
        let marker = fx.base.path().join("ran");
        let out = bin()
            .args(["run", "--report-json"])
            .arg(&report)
            .args(["--", "touch"])
            .arg(&marker)
            .output()
            .unwrap();
        let metrics = fx.path("sandkeeper.prom");
        let watched = fx.watch(&metrics).output().unwrap();
        if ok {
            assert_eq!(out.status.code(), Some(0), "{mode:o}: {}", text(&out));
            assert!(fs::read_to_string(&report)
                .unwrap()
                .contains("sandkeeper.run/v1"));
            assert!(
                fs::read_to_string(&metrics)
                    .unwrap()
                    .contains("sandkeeper_cycles_total 1"),
                "{}",
                text(&watched)
            );
            continue;
        }
        for (what, out) in [("run", &out), ("watch", &watched)] {
            assert_eq!(out.status.code(), Some(2), "{what} {mode:o}: {}", text(out));
            let said = text(out);
            assert!(
                said.contains(fx.out.to_str().unwrap()) && said.contains("other users may write"),
                "{what}: names it: {said}"
            );
            assert!(said.contains("hint:"), "{what}: says what to do: {said}");
        }
        assert!(!marker.exists(), "refused before the command ran");
        assert_eq!(fs::read_dir(&fx.out).unwrap().count(), 0, "nothing written");
    }
}

/// A link in the *directory* part of the path: nobody's symlink in a sticky
/// root-owned directory (like `/tmp/x -> /etc`) pointing at the canary's
/// directory. Root must not follow it into its own files (systemd's
/// `CHASE_SAFE` rule: nothing owned by one user may lead into something
/// owned by another); the old writers renamed over, or wrote through, the
/// canary.
#[test]
fn a_link_in_the_directory_part_does_not_lead_into_roots_files() {
    if !require_root("a_link_in_the_directory_part_does_not_lead_into_roots_files") {
        return;
    }
    let fx = Fixture::new("hostile-output-chase", None);
    let sticky = fx.base.path().join("sticky");
    fs::create_dir(&sticky).unwrap();
    fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
    let evil = sticky.join("evil");
    nobody(&[
        "ln",
        "-s",
        fx.base.path().to_str().unwrap(),
        evil.to_str().unwrap(),
    ]);
    let through = evil.join("canary");
    let out = bin()
        .args(["run", "--report-json"])
        .arg(&through)
        .args(["--", "true"])
        .output()
        .unwrap();
    fx.assert_canary_intact("run --report-json");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("uid 65534"), "{}", text(&out));
    let out = fx.watch(&through).output().unwrap();
    fx.assert_canary_intact("watch --metrics-file");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(evil.to_str().unwrap()),
        "{}",
        text(&out)
    );
}

/// What stays as it was: a metrics directory that does not exist (yet) is
/// not fatal for `watch` (the shipped unit names node_exporter's directory,
/// which may be missing); each cycle logs it. `run` refuses a report in a
/// missing directory before the command runs.
#[test]
fn a_missing_output_directory() {
    let base = sandkeeper_engine::sandbox!().unwrap();
    let config = base.path().join("watch.toml");
    let scanned = base.path().join("scanned");
    fs::create_dir(&scanned).unwrap();
    fs::write(
        &config,
        format!(
            "[[root]]\npath = \"{}\"\nuser_dirs = false\n",
            scanned.display()
        ),
    )
    .unwrap();
    let metrics = base.path().join("missing/sandkeeper.prom");
    let out = bin()
        .args(["watch", "--once", "--config"])
        .arg(&config)
        .arg("--metrics-file")
        .arg(&metrics)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("cannot write the metrics file"),
        "{}",
        text(&out)
    );
    let marker = base.path().join("ran");
    let out = bin()
        .args(["run", "--report-json"])
        .arg(base.path().join("missing/report.json"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("hint: create the directory"),
        "{}",
        text(&out)
    );
    assert!(!marker.exists());
}
