//! `sandkeeper run --report-dir` as cargo-nextest's wrapper script, and
//! `sandkeeper report` over what it wrote (issue 17, part 1): a small
//! workspace with a leaking test, a test that leaves a daemon, and clean
//! tests; the report names exactly the leaking two, the daemon is dead.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sandkeeper_engine::sandbox;
use sandkeeper_testkit::process::{pid_exists, wait_with_deadline};
use sandkeeper_testkit::tree::names;
use serde_json::Value;

const FIXTURE_LIB: &str = r#"
#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    fn tmp() -> PathBuf {
        std::env::temp_dir()
    }

    #[test]
    fn leaks_a_dir() {
        let dir = tmp().join(format!("fixture-cache-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("blob"), vec![7u8; 64 * 1024]).unwrap();
    }

    #[test]
    fn leaves_a_daemon() {
        let child = std::process::Command::new("sleep")
            .arg("600")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pids = std::env::var("FIXTURE_PID_FILE").unwrap();
        std::fs::write(pids, child.id().to_string()).unwrap();
        std::mem::forget(child);
    }

    #[test]
    fn cleans_up() {
        let dir = tmp().join(format!("fixture-clean-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn touches_nothing() {
        assert_eq!(1 + 1, 2);
    }
}
"#;

/// Whether `cargo nextest` runs here; without it the test is skipped
/// (printing why) unless `CI` is set, where `.ci/run` installs it.
fn nextest_available() -> bool {
    let ok = Command::new("cargo")
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "cargo-nextest is missing in CI: .ci/run installs it"
        );
        eprintln!("skipped: cargo-nextest is not installed (cargo install cargo-nextest --locked)");
    }
    ok
}

fn write_fixture(ws: &Path, wrapper: &[String]) {
    fs::create_dir_all(ws.join("src")).unwrap();
    fs::create_dir_all(ws.join(".config")).unwrap();
    fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"fixture\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    fs::write(ws.join("src/lib.rs"), FIXTURE_LIB).unwrap();
    // The configuration docs/nextest.md documents, with absolute paths.
    let command: Vec<String> = wrapper.iter().map(|a| format!("{a:?}")).collect();
    fs::write(
        ws.join(".config/nextest.toml"),
        format!(
            "experimental = [\"wrapper-scripts\"]\n\n\
             [scripts.wrapper.sandkeeper]\ncommand = [{}]\n\n\
             [[profile.default.scripts]]\nfilter = \"all()\"\nrun-wrapper = \"sandkeeper\"\n",
            command.join(", ")
        ),
    )
    .unwrap();
}

#[test]
fn nextest_wrapper_reports_exactly_the_leaking_tests() {
    if !nextest_available() {
        return;
    }
    let scratch = sandbox!().unwrap();
    let ws = scratch.path().join("ws");
    let runs = scratch.path().join("runs");
    let cargo_tmp = scratch.path().join("cargo-tmp");
    let leaks = scratch.path().join("leaks");
    let pid_file = scratch.path().join("daemon.pid");
    fs::create_dir(&runs).unwrap();
    fs::create_dir(&cargo_tmp).unwrap();
    let bin = env!("CARGO_BIN_EXE_sandkeeper");
    let wrapper: Vec<String> = [
        bin,
        "run",
        "--kill-grace",
        "2s",
        "--root",
        runs.to_str().unwrap(),
        "--report-dir",
        leaks.to_str().unwrap(),
        "--",
    ]
    .map(String::from)
    .to_vec();
    write_fixture(&ws, &wrapper);

    let mut cargo = Command::new("cargo");
    cargo
        .args([
            "nextest",
            "run",
            "--offline",
            "--no-fail-fast",
            "--color",
            "never",
        ])
        .current_dir(&ws)
        // No dependencies, no debug info: a build of seconds.
        .env("CARGO_TARGET_DIR", scratch.path().join("target"))
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("TMPDIR", &cargo_tmp)
        .env("FIXTURE_PID_FILE", &pid_file)
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("CARGO_TARGET_TMPDIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // When this suite itself runs under nextest, its variables are not the
    // fixture's.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("NEXTEST") {
            cargo.env_remove(key);
        }
    }
    let out = wait_with_deadline(&mut cargo.spawn().unwrap(), Duration::from_secs(600));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo nextest run: {err}");
    assert!(err.contains("4 passed"), "{err}");
    assert!(
        !err.contains("left 1 entr"),
        "--report-dir keeps the test output clean: {err}"
    );

    // The daemon was stopped when its test ended.
    let pid: u32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_exists(pid), "the daemon {pid} was killed");
    // Every test's TMPDIR is gone.
    assert_eq!(names(&runs), Vec::<std::ffi::OsString>::new());

    let report = Command::new(bin)
        .args(["report", "--json"])
        .arg(&leaks)
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(1), "leaks found: exit 1");
    let doc: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(doc["schema"], "sandkeeper.report/v1");
    assert_eq!(doc["runs"], 4);
    assert_eq!(doc["tests"], 4);
    let leaked: Vec<(&str, &str)> = doc["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["binary_id"].as_str().unwrap(),
                t["test_name"].as_str().unwrap(),
            )
        })
        .collect();
    // Worst first: the one with bytes, then the daemon.
    assert_eq!(
        leaked,
        [
            ("fixture", "tests::leaks_a_dir"),
            ("fixture", "tests::leaves_a_daemon")
        ]
    );
    let dir_leak = &doc["leaks"][0];
    assert_eq!(dir_leak["entries"], 1);
    assert!(dir_leak["disk_bytes"].as_u64().unwrap() >= 64 * 1024);
    assert_eq!(dir_leak["families"][0]["pattern"], "fixture-cache-*");
    assert_eq!(doc["leaks"][1]["daemons"], 1);
    assert_eq!(doc["leaks"][1]["entries"], 0);

    let text = Command::new(bin)
        .arg("report")
        .arg(&leaks)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with("fixture tests::leaks_a_dir: 1 entry"),
        "{text}"
    );
    assert!(
        text.contains("fixture tests::leaves_a_daemon: 1 daemon killed"),
        "{text}"
    );
    assert!(text.contains("2 of 4 tests leaked"), "{text}");
}

/// Records are hostile input: escapes in names are shown escaped, files
/// that are not records are skipped with a warning (exit 1), a directory
/// that cannot be trusted is refused (exit 2).
#[test]
fn report_treats_records_as_hostile() {
    use std::os::unix::fs::PermissionsExt;

    let scratch = sandbox!().unwrap();
    let bin = env!("CARGO_BIN_EXE_sandkeeper");
    let leaks = scratch.path().join("leaks");

    // Nothing recorded yet: the directory is made, nothing leaked.
    let out = Command::new(bin)
        .args(["run", "--root"])
        .arg(scratch.path())
        .arg("--report-dir")
        .arg(&leaks)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        fs::metadata(&leaks).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let out = Command::new(bin)
        .arg("report")
        .arg(&leaks)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("no test leaked: 1 test in 1 run"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A leaking run named by a hostile test name.
    let out = Command::new(bin)
        .args(["run", "--root"])
        .arg(scratch.path())
        .arg("--report-dir")
        .arg(&leaks)
        .env("NEXTEST_BINARY_ID", "evil")
        .env("NEXTEST_TEST_NAME", "t\x1b]0;owned\x07")
        .args(["--", "sh", "-c", "mkdir \"$TMPDIR/x\""])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "quiet: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(leaks.join("garbage.json"), b"\x1b[2J{not json").unwrap();
    fs::write(leaks.join("big.json"), vec![b' '; 70 * 1024]).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", leaks.join("link.json")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        leaks.join("fifo.json"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    fs::write(leaks.join(".half.tmp"), b"ignored").unwrap();
    let out = Command::new(bin)
        .arg("report")
        .arg(&leaks)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        !text.contains('\x1b') && !err.contains('\x1b'),
        "{text}{err}"
    );
    assert!(text.contains("evil t\\x1b]0;owned\\x07: 1 entry"), "{text}");
    assert_eq!(err.matches("skipped record").count(), 4, "{err}");

    // Directories that cannot be trusted.
    let missing = Command::new(bin)
        .arg("report")
        .arg(scratch.path().join("none"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    let link = scratch.path().join("link");
    std::os::unix::fs::symlink(&leaks, &link).unwrap();
    for args in [vec!["report"], vec!["run", "--report-dir"]] {
        let mut cmd = Command::new(bin);
        cmd.args(&args).arg(&link);
        if args[0] == "run" {
            cmd.args(["--", "true"]);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} on a symlink");
    }
    let shared = scratch.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
    let out = Command::new(bin)
        .arg("run")
        .arg("--report-dir")
        .arg(&shared)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a directory others may write");
    assert!(String::from_utf8_lossy(&out.stderr).contains("others may write"));
}
