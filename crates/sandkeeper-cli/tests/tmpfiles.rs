//! systemd-tmpfiles and sandkeeper side by side on one root, as
//! docs/integrations.md sets them up: tmpfiles keeps its age
//! rule for what it owns, with contrib/tmpfiles/sandkeeper.conf; sandkeeper
//! takes the leased and the process-aware part.
//!
//! `crates/sandkeeper-engine/tests/lease.rs` already proves the lock alone
//! against tmpfiles (a live sandbox survives an age of 0). This test is the
//! combined flow on a root laid out like a shared /tmp (mode 1777): live
//! leased sandboxes (directly in the root and keyed ones in the per-user
//! directory), orphans, unleased junk, an entry in use; a `sandkeeper scan`
//! (what `watch` does each cycle), then `systemd-tmpfiles --clean`, then
//! `sandkeeper reap --config`. It runs as root inside a private PID
//! namespace (the in-use check must see every process; on some hosts even
//! root cannot inspect the host's PID 1).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::NOBODY;
use sandkeeper_testkit::process::Spawned;
use sandkeeper_testkit::tree::{age_tree, chmod, orphan, write};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// Whether systemd-tmpfiles is there; without it the test skips, saying
/// why, unless `CI` is set (`.ci/run` installs systemd), where it fails.
fn have_tmpfiles(test: &str) -> bool {
    sandkeeper_testkit::skips::tool(test, "systemd-tmpfiles", "systemd")
}

/// contrib/tmpfiles/sandkeeper.conf, as shipped.
fn contrib_conf() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/tmpfiles/sandkeeper.conf");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The shipped file only excludes (`x` lines): installing it can never
/// clean, create or change anything by itself. It names the per-user
/// directories of /tmp and /var/tmp by a glob that leaves other
/// `sandkeeper-*` names (`sandkeeper-ci.XXXXXX`) to the age rule.
#[test]
fn the_shipped_tmpfiles_conf_only_excludes() {
    let conf = contrib_conf();
    let lines: Vec<&str> = conf
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        lines,
        ["x /tmp/sandkeeper-[0-9]*", "x /var/tmp/sandkeeper-[0-9]*"]
    );
}

/// A leased sandbox, owner alive, old by every timestamp it can be given;
/// a keyed one in the per-user directory; orphans young and old (in the
/// root and in the per-user directory); unleased junk; an entry in use
/// and an idle one a rule matches; another uid's empty per-user directory.
/// After `scan`, `systemd-tmpfiles --clean` and `reap`: the live ones and
/// what is in use survive both; the old junk goes by tmpfiles; the orphans
/// tmpfiles does not own go by sandkeeper; nothing in the per-user
/// directories is tmpfiles'.
#[test]
fn tmpfiles_and_sandkeeper_share_a_root() {
    if !have_tmpfiles("tmpfiles_and_sandkeeper_share_a_root") {
        return;
    }
    run_in_pid_namespace(
        "tmpfiles_and_sandkeeper_share_a_root",
        "inner_tmpfiles_and_sandkeeper_share_a_root",
    );
}

/// Sets the atime and mtime of `path` (a file or a directory) to `age` ago.
fn age_one(path: &Path, age: Duration) {
    let when = SystemTime::now() - age;
    let times = fs::FileTimes::new().set_modified(when).set_accessed(when);
    let file = if path.is_dir() {
        fs::File::open(path)
    } else {
        fs::File::options().write(true).open(path)
    };
    file.and_then(|f| f.set_times(times))
        .unwrap_or_else(|e| panic!("age {}: {e}", path.display()));
}

/// The access time of `path`, in nanoseconds (`stat` does not change it).
fn atime(path: &Path) -> i128 {
    let meta = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    i128::from(meta.atime()) * 1_000_000_000 + i128::from(meta.atime_nsec())
}

/// Whether `path` exists (by `lstat`, which changes no timestamp).
fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every entry `scan --json --entries` saw, by path, with its state.
fn states(scan: &Value) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    for root in scan["roots"].as_array().expect("roots") {
        let dir = Path::new(root["path"].as_str().unwrap());
        for entry in root["entries"].as_array().expect("entries") {
            out.insert(
                dir.join(entry["name"].as_str().unwrap()),
                entry["state"].as_str().unwrap().to_owned(),
            );
        }
    }
    out
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_tmpfiles_and_sandkeeper_share_a_root() {
    if !in_namespace() {
        return;
    }
    let base = sandkeeper_testkit::scratch!("tmpfiles");
    // The root: a plain directory inside the scratch sandbox (whose own
    // lock would make tmpfiles skip everything), shared like /tmp, so
    // keyed sandboxes go to the per-user directory sandkeeper-0.
    let root = base.join("root");
    fs::create_dir(&root).unwrap();
    chmod(&root, 0o1777);
    let month = 30 * DAY;

    // Live: leased, owners alive (this process), old by atime and mtime.
    let live = sandkeeper::Sandbox::builder()
        .root(&root)
        .tag("live")
        .create()
        .unwrap();
    write(&live.path().join("data"), "precious");
    age_tree(live.path(), month);
    let keyed = sandkeeper::Sandbox::builder()
        .root(&root)
        .tag("keyed")
        .keyed(true)
        .create()
        .unwrap();
    write(&keyed.path().join("data"), "precious too");
    age_tree(keyed.path(), month);
    let user_dir = root.join("sandkeeper-0");
    assert_eq!(keyed.path().parent(), Some(user_dir.as_path()));

    // Orphans (lease record, lock free): one younger than tmpfiles' age,
    // one older, and an old one in the per-user directory.
    let orphan_young = orphan(&root, "orphan-young");
    write(&orphan_young.join("out.log"), "left by a killed run");
    age_tree(&orphan_young, 2 * DAY);
    let orphan_old = orphan(&root, "orphan-old");
    write(&orphan_old.join("out.log"), "left long ago");
    age_tree(&orphan_old, month);
    let orphan_keyed = orphan(&user_dir, "keyed-orphan");
    write(&orphan_keyed.join("out.log"), "a keyed run, killed");
    age_tree(&orphan_keyed, month);
    age_one(&user_dir, month);

    // Another uid's per-user directory, empty and old: the tool's own,
    // which sandkeeper never removes, nor (with the shipped file) tmpfiles.
    let nobody_dir = root.join(format!("sandkeeper-{NOBODY}"));
    fs::create_dir(&nobody_dir).unwrap();
    std::os::unix::fs::chown(&nobody_dir, Some(NOBODY), Some(NOBODY)).unwrap();
    chmod(&nobody_dir, 0o700);
    age_one(&nobody_dir, month);

    // Unleased junk, old: tmpfiles' part (no sandkeeper rule selects it),
    // including a name the per-user glob must not catch.
    let junk = root.join("build-cache-1");
    write(&junk.join("deep/blob"), vec![1u8; 4096]);
    write(&junk.join("index"), "stale");
    age_tree(&junk.join("deep"), month);
    age_tree(&junk, month);
    let core = root.join("core.4242");
    write(&core, "a core dump");
    age_one(&core, month);
    let ci_dir = root.join("sandkeeper-ci.Xy12ab");
    write(&ci_dir.join("log"), "not a per-user directory");
    age_tree(&ci_dir, month);
    // Unleased and young: nobody's to remove yet.
    let fresh = root.join("fresh-1");
    write(&fresh.join("data"), "new");

    // Unmanaged entries a sandkeeper rule selects, younger than tmpfiles'
    // age: one in use by a process (its working directory), one idle.
    let app_busy = root.join("app-1-busy");
    write(&app_busy.join("data"), "in use");
    age_tree(&app_busy, 3 * HOUR);
    let app_idle = root.join("app-2-idle");
    write(&app_idle.join("data"), "idle");
    age_tree(&app_idle, 3 * HOUR);
    let _user = Spawned(
        Command::new("sleep")
            .arg("600")
            .current_dir(&app_busy)
            .spawn()
            .expect("spawn sleep"),
    );

    // A control: on this filesystem, would an ordinary listing of an aged
    // directory refresh its atime (relatime: atime not newer than mtime)?
    // If not (noatime), the atime check below proves nothing, and says so.
    let control = base.join("atime-control");
    fs::create_dir(&control).unwrap();
    age_one(&control, month);
    let before = atime(&control);
    let _ = fs::read_dir(&control).unwrap().count();
    let listing_updates_atime = atime(&control) != before;

    // 1. What `watch` does every cycle: a scan (here with its verdicts) of
    // the root and its per-user directories (the temp directory's, as
    // for /tmp: an explicit root would leave those out).
    let junk_atimes = [atime(&junk), atime(&junk.join("deep"))];
    let sk = env!("CARGO_BIN_EXE_sandkeeper");
    let r = root.to_str().unwrap();
    let scan: Value = serde_json::from_slice(
        &run(Command::new(sk)
            .args(["scan", "--json", "--entries"])
            .env("TMPDIR", &root))
        .stdout,
    )
    .unwrap();
    let seen = states(&scan);
    for (path, want) in [
        (live.path(), "live"),
        (keyed.path(), "live"),
        (orphan_young.as_path(), "orphaned"),
        (orphan_keyed.as_path(), "orphaned"),
        (junk.as_path(), "idle"),
        (app_busy.as_path(), "in_use"),
        (app_idle.as_path(), "idle"),
    ] {
        assert_eq!(
            seen.get(path).map(String::as_str),
            Some(want),
            "{}: {seen:?}",
            path.display()
        );
    }
    // The scan opens directories with O_NOATIME: it does not make junk
    // look recently used to tmpfiles, which ages directories by atime too.
    assert_eq!(
        [atime(&junk), atime(&junk.join("deep"))],
        junk_atimes,
        "sandkeeper scan refreshed the atimes of the junk it only looked at"
    );
    if !listing_updates_atime {
        eprintln!("note: listing does not update atimes on this filesystem (noatime?): the O_NOATIME check above proves nothing here");
    }
    // It does read each lease record: on a relatime mount that refreshes
    // the record's atime (at most daily once past its mtime), so tmpfiles,
    // which ages files by atime, never takes the record of a sandbox that
    // sandkeeper watches. Measured, not assumed (noatime mounts differ).
    let old_record = orphan_old.join(sandkeeper::lease::LEASE_FILE);
    let record_refreshed = atime(&old_record) > atime(&junk);

    // 2. systemd-tmpfiles --clean, with the distribution's /tmp rule
    // (`q /tmp 1777 root root 10d`) for this root, and the shipped file
    // with /tmp read as this root. The rule ages by atime and mtime only
    // (`amAM:`): the default also counts each file's ctime and birth time,
    // which no test can set into the past; for entries that really are 30
    // days old the two rules agree. `--prefix` keeps tmpfiles inside the
    // root whatever the files say.
    let age_rule = base.join("tmp.conf");
    fs::write(&age_rule, format!("q {r} 1777 root root amAM:10d\n")).unwrap();
    let ours = base.join("sandkeeper.conf");
    let conf: String = contrib_conf()
        .lines()
        .filter(|l| !l.contains("/var/tmp/"))
        .map(|l| l.replace(" /tmp/", &format!(" {r}/")) + "\n")
        .collect();
    assert!(conf.contains(&format!("x {r}/sandkeeper-[0-9]*")), "{conf}");
    fs::write(&ours, conf).unwrap();
    run(Command::new("systemd-tmpfiles")
        .arg("--clean")
        .arg(format!("--prefix={r}"))
        .arg(&age_rule)
        .arg(&ours));

    // Old junk went, whole.
    for gone in [&junk, &core, &ci_dir] {
        assert!(!exists(gone), "tmpfiles left {}", gone.display());
    }
    // The old orphan's lock is free, so tmpfiles took what was old in it;
    // its record, read by the scan, was not old: it stays, and with it the
    // directory, still a proven orphan for sandkeeper. (Where the scan
    // could not refresh the record's atime, tmpfiles takes it whole.)
    assert!(
        !exists(&orphan_old.join("out.log")),
        "tmpfiles left the old orphan's content"
    );
    assert_eq!(exists(&old_record), record_refreshed);
    assert_eq!(exists(&orphan_old), record_refreshed);
    // The lock kept the live sandbox whole, though older than the rule.
    assert_eq!(
        fs::read_to_string(live.path().join("data")).unwrap(),
        "precious"
    );
    assert!(exists(&live.path().join(sandkeeper::lease::LEASE_FILE)));
    // The per-user directories are sandkeeper's: tmpfiles entered neither
    // (without the `x` line, the old orphan in sandkeeper-0 and the empty,
    // old sandkeeper-65534 would be gone by now).
    assert_eq!(
        fs::read_to_string(keyed.path().join("data")).unwrap(),
        "precious too"
    );
    assert!(
        exists(&orphan_keyed.join("out.log")),
        "tmpfiles entered sandkeeper-0"
    );
    assert!(
        exists(&nobody_dir),
        "tmpfiles removed another uid's per-user directory"
    );
    // Younger than its age: the rest is not tmpfiles' (yet).
    for kept in [&orphan_young, &app_busy, &app_idle, &fresh] {
        assert!(
            exists(&kept.join("data")) || exists(&kept.join("out.log")),
            "{}",
            kept.display()
        );
    }

    // 3. sandkeeper reap by a config like contrib/systemd/config.toml's.
    let config = base.join("sandkeeper.toml");
    fs::write(
        &config,
        format!(
            "[[root]]\npath = \"{r}\"\ngrace = \"60s\"\norphan_age = \"1h\"\nuser_dirs = true\n\n\
             [[root.rule]]\nmatch = \"app-*\"\nolder_than = \"2h\"\n"
        ),
    )
    .unwrap();
    let reap: Value = serde_json::from_slice(
        &run(Command::new(sk).args(["reap", "--json", "--config", config.to_str().unwrap()]))
            .stdout,
    )
    .unwrap();
    let mut removed: Vec<PathBuf> = reap["removed"]
        .as_array()
        .expect("removed")
        .iter()
        .map(|r| PathBuf::from(r["path"].as_str().unwrap()))
        .collect();
    removed.sort();
    let mut want = vec![orphan_young.clone(), orphan_keyed.clone(), app_idle.clone()];
    if record_refreshed {
        // What tmpfiles left of the old orphan: still proven dead by its
        // record and free lock, so sandkeeper takes it in the same reap.
        want.push(orphan_old.clone());
    }
    want.sort();
    assert_eq!(
        removed, want,
        "sandkeeper took the orphans and the idle app-*"
    );
    for gone in &want {
        assert!(!exists(gone), "{} is still there", gone.display());
    }
    // Live, in use, young, and the tool's own directories: all still there.
    assert_eq!(
        fs::read_to_string(live.path().join("data")).unwrap(),
        "precious"
    );
    assert_eq!(
        fs::read_to_string(keyed.path().join("data")).unwrap(),
        "precious too"
    );
    for kept in [&app_busy, &fresh] {
        assert!(exists(&kept.join("data")), "{}", kept.display());
    }
    assert!(exists(&user_dir) && exists(&nobody_dir));

    // The live sandboxes end as their owner ends them.
    live.close().unwrap();
    keyed.close().unwrap();
}
