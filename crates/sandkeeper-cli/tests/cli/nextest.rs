//! `sandkeeper run` as cargo-nextest's wrapper script, and `sandkeeper
//! report` over what it wrote (issue 17, part 1; issue 28): the set-up
//! docs/nextest.md gives, read from it as it stands, run on small projects
//! with a leaking test, a test that leaves a daemon and clean tests: a
//! single crate, a workspace of two packages, a `CARGO_TARGET_DIR` outside
//! the project; the report names exactly the leaking tests, the daemons are
//! dead. A wrapper problem (a record directory that cannot be used,
//! sandkeeper missing) is never a failed test.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use sandkeeper_engine::{sandbox, Sandbox};
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
        let pids = std::path::Path::new(&std::env::var_os("FIXTURE_PID_DIR").unwrap())
            .join(concat!(env!("CARGO_PKG_NAME"), ".pid"));
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

    #[test]
    fn fails_when_asked() {
        assert!(std::env::var_os("FIXTURE_FAIL").is_none(), "failing on purpose");
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

/// The `.config/nextest.toml` docs/nextest.md gives under "Set up", as
/// written there.
fn documented_config() -> String {
    let doc = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/nextest.md"
    ))
    .unwrap();
    let setup = &doc[doc.find("\n## Set up").expect("docs/nextest.md: ## Set up")..];
    let start = setup.find("```toml\n").expect("a toml block under Set up") + "```toml\n".len();
    let len = setup[start..].find("```").unwrap();
    let toml = setup[start..start + len].to_owned();
    assert!(toml.contains("sandkeeper run --nextest --"), "{toml}");
    toml
}

/// A package `name` with the fixture's tests, in `dir`; `standalone` makes
/// it a workspace of its own.
fn write_package(dir: &Path, name: &str, standalone: bool) {
    fs::create_dir_all(dir.join("src")).unwrap();
    let workspace = if standalone { "\n[workspace]\n" } else { "" };
    fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\n{workspace}"
        ),
    )
    .unwrap();
    fs::write(dir.join("src/lib.rs"), FIXTURE_LIB).unwrap();
}

/// A `.config/nextest.toml` wrapping every test in `command` (TOML).
fn wrapper_config(command: &str) -> String {
    format!(
        "experimental = [\"wrapper-scripts\"]\n\n\
         [scripts.wrapper.sandkeeper]\ncommand = {command}\n\n\
         [[profile.default.scripts]]\nfilter = \"all()\"\nrun-wrapper = \"sandkeeper\"\n"
    )
}

fn write_config(ws: &Path, toml: &str) {
    fs::create_dir_all(ws.join(".config")).unwrap();
    fs::write(ws.join(".config/nextest.toml"), toml).unwrap();
}

/// A scratch directory for one nextest run: the project (`ws`), the
/// `TMPDIR` cargo and nextest get, and where the daemon tests write their
/// pids. All of it goes with the sandbox.
struct Scratch {
    sandbox: Sandbox,
    ws: PathBuf,
    cargo_tmp: PathBuf,
    pids: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let sandbox = sandbox!().unwrap();
        let ws = sandbox.path().join("ws");
        let cargo_tmp = sandbox.path().join("cargo-tmp");
        let pids = sandbox.path().join("pids");
        for dir in [&ws, &cargo_tmp, &pids] {
            fs::create_dir(dir).unwrap();
        }
        Scratch {
            sandbox,
            ws,
            cargo_tmp,
            pids,
        }
    }

    fn path(&self) -> &Path {
        self.sandbox.path()
    }

    /// `program args` in the project as a user runs it: the fixture's
    /// variables, `TMPDIR` the scratch one, no target directory of the
    /// suite's own, none of nextest's variables (when this suite runs
    /// under nextest), `PATH` as given.
    fn command(&self, program: &OsStr, args: &[&str], path: &OsStr) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&self.ws)
            .env("PATH", path)
            // No dependencies, no debug info: a build of seconds.
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .env("TMPDIR", &self.cargo_tmp)
            .env("FIXTURE_PID_DIR", &self.pids)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, _) in std::env::vars_os() {
            let key_text = key.to_string_lossy();
            if key_text.starts_with("NEXTEST")
                || key_text.starts_with("SANDKEEPER")
                || key_text.starts_with("FIXTURE")
                || [
                    "CARGO_TARGET_DIR",
                    "CARGO_BUILD_TARGET_DIR",
                    "CARGO_BUILD_BUILD_DIR",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_MANIFEST_DIR",
                ]
                .contains(&&*key_text)
            {
                cmd.env_remove(key);
            }
        }
        cmd
    }

    /// `cargo nextest run --no-fail-fast args`, with this suite's
    /// `sandkeeper` first on `PATH`.
    fn nextest_run(&self, args: &[&str], env: &[(&str, &OsStr)]) -> Output {
        let mut all = vec![
            "nextest",
            "run",
            "--offline",
            "--no-fail-fast",
            "--color",
            "never",
        ];
        all.extend_from_slice(args);
        let mut cmd = self.command(OsStr::new("cargo"), &all, &path_with_sandkeeper());
        for (key, value) in env {
            cmd.env(key, value);
        }
        wait_with_deadline(&mut cmd.spawn().unwrap(), Duration::from_secs(600))
    }

    /// Every daemon the fixture's packages started is dead.
    fn assert_daemons_dead(&self, packages: &[&str]) {
        for package in packages {
            let pid: u32 = fs::read_to_string(self.pids.join(format!("{package}.pid")))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(!pid_exists(pid), "{package}'s daemon {pid} was killed");
        }
    }
}

/// `PATH` with the directory of this suite's `sandkeeper` first.
fn path_with_sandkeeper() -> OsString {
    let bin = Path::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .parent()
        .unwrap();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin.to_owned()).chain(std::env::split_paths(&rest)))
        .unwrap()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `sandkeeper report --json DIR`: its exit status and document.
fn report(dir: &Path) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(["report", "--json"])
        .arg(dir)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), doc)
}

/// The tests a report says leaked, as (binary id, test name), sorted.
fn leaked(doc: &Value) -> Vec<(String, String)> {
    let mut tests: Vec<(String, String)> = doc["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["binary_id"].as_str().unwrap().to_owned(),
                t["test_name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    tests.sort();
    tests
}

/// The report of a passing run of the fixture's `packages` under the
/// documented set-up, read from `records`: exactly the leaking tests of
/// each package, with what they left.
fn assert_reported(records: &Path, packages: &[&str]) {
    let (status, doc) = report(records);
    assert_eq!(status, Some(1), "leaks found: exit 1; {doc}");
    assert_eq!(doc["schema"], "sandkeeper.report/v1");
    assert_eq!(doc["runs"], 5 * packages.len());
    assert_eq!(doc["tests"], 5 * packages.len());
    let mut expected = Vec::new();
    for package in packages {
        expected.push((package.to_string(), "tests::leaks_a_dir".to_owned()));
        expected.push((package.to_string(), "tests::leaves_a_daemon".to_owned()));
    }
    expected.sort();
    assert_eq!(leaked(&doc), expected);
    for t in doc["leaks"].as_array().unwrap() {
        if t["test_name"] == "tests::leaks_a_dir" {
            assert_eq!(t["entries"], 1);
            assert!(t["disk_bytes"].as_u64().unwrap() >= 64 * 1024);
            assert_eq!(t["families"][0]["pattern"], "fixture-cache-*");
        } else {
            assert_eq!(t["daemons"], 1);
            assert_eq!(t["entries"], 0);
        }
    }
}

/// No test's `TMPDIR` is left in the `TMPDIR` nextest ran with.
fn assert_no_run_dirs(cargo_tmp: &Path) {
    let left: Vec<OsString> = names(cargo_tmp)
        .into_iter()
        .filter(|n| n.to_string_lossy().starts_with("run-"))
        .collect();
    assert_eq!(left, Vec::<OsString>::new(), "every test's TMPDIR is gone");
}

/// Issue 28 (a): a single crate, its target directory in place.
#[test]
fn documented_setup_single_crate() {
    if !nextest_available() {
        return;
    }
    let scratch = Scratch::new();
    write_package(&scratch.ws, "fixture", true);
    write_config(&scratch.ws, &documented_config());

    let out = scratch.nextest_run(&[], &[]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "cargo nextest run: {err}");
    assert!(err.contains("5 passed"), "{err}");
    assert!(!err.contains("warning:"), "no wrapper problem: {err}");
    scratch.assert_daemons_dead(&["fixture"]);
    assert_no_run_dirs(&scratch.cargo_tmp);
    assert_reported(&scratch.ws.join("target/sandkeeper-leaks"), &["fixture"]);
}

/// Issue 28 (b): a workspace of two packages; nextest starts each test in
/// its package's directory, the records all land in the workspace's
/// `target/`.
#[test]
fn documented_setup_workspace() {
    if !nextest_available() {
        return;
    }
    let scratch = Scratch::new();
    fs::write(
        scratch.ws.join("Cargo.toml"),
        "[workspace]\nmembers = [\"alpha\", \"beta\"]\nresolver = \"2\"\n",
    )
    .unwrap();
    write_package(&scratch.ws.join("alpha"), "alpha", false);
    write_package(&scratch.ws.join("beta"), "beta", false);
    write_config(&scratch.ws, &documented_config());

    let out = scratch.nextest_run(&[], &[]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "cargo nextest run: {err}");
    assert!(err.contains("10 passed"), "{err}");
    assert!(!err.contains("warning:"), "no wrapper problem: {err}");
    scratch.assert_daemons_dead(&["alpha", "beta"]);
    assert_no_run_dirs(&scratch.cargo_tmp);
    for package in ["alpha", "beta"] {
        assert!(!scratch.ws.join(package).join("target").exists());
    }
    assert_reported(
        &scratch.ws.join("target/sandkeeper-leaks"),
        &["alpha", "beta"],
    );
}

/// Issue 28 (c): `CARGO_TARGET_DIR` outside the project (where the old
/// set-up failed every test with "output directory does not exist:
/// target"); the records go there and nothing is made in the project.
#[test]
fn documented_setup_custom_target_dir() {
    if !nextest_available() {
        return;
    }
    let scratch = Scratch::new();
    write_package(&scratch.ws, "fixture", true);
    write_config(&scratch.ws, &documented_config());
    let target = scratch.path().join("elsewhere/target");

    let out = scratch.nextest_run(&[], &[("CARGO_TARGET_DIR", target.as_os_str())]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "cargo nextest run: {err}");
    assert!(err.contains("5 passed"), "{err}");
    assert!(!err.contains("warning:"), "no wrapper problem: {err}");
    assert!(
        !scratch.ws.join("target").exists(),
        "nothing made in the project"
    );
    scratch.assert_daemons_dead(&["fixture"]);
    assert_no_run_dirs(&scratch.cargo_tmp);
    assert_reported(&target.join("sandkeeper-leaks"), &["fixture"]);

    // The set-up this page gave before: every test failed, for the
    // wrapper's sake. Refused now still (it asked for a directory that is
    // not there), but the hint says what to use.
    write_config(
        &scratch.ws,
        &wrapper_config("\"sandkeeper run --report-dir target/sandkeeper-leaks --\""),
    );
    let out = scratch.nextest_run(
        &["-E", "test(=tests::touches_nothing)"],
        &[("CARGO_TARGET_DIR", target.as_os_str())],
    );
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("output directory does not exist: target"),
        "{err}"
    );
    assert!(
        err.contains("sandkeeper run --nextest --"),
        "the hint: {err}"
    );
}

/// Issue 28 (d): a record directory that cannot be used (a file where it
/// should be) is one warning per test; every test runs and keeps its own
/// status (the one that fails on purpose still fails, with its own
/// message), the daemons are still stopped; the report refuses the path.
#[test]
fn wrapper_problem_is_not_a_test_failure() {
    if !nextest_available() {
        return;
    }
    let scratch = Scratch::new();
    write_package(&scratch.ws, "fixture", true);
    write_config(&scratch.ws, &documented_config());
    let target = scratch.path().join("target");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("sandkeeper-leaks"), b"not a directory").unwrap();

    let out = scratch.nextest_run(
        &[
            "--success-output",
            "immediate",
            "--failure-output",
            "immediate",
        ],
        &[
            ("CARGO_TARGET_DIR", target.as_os_str()),
            ("FIXTURE_FAIL", OsStr::new("1")),
        ],
    );
    let err = stderr_of(&out);
    assert!(!out.status.success(), "one test fails on purpose: {err}");
    assert!(err.contains("4 passed, 1 failed"), "{err}");
    assert!(
        err.contains("FAIL") && err.contains("tests::fails_when_asked"),
        "{err}"
    );
    assert!(
        err.contains("failing on purpose"),
        "the test's own failure: {err}"
    );
    let warning = "warning: sandkeeper run --nextest: no leak record for this test: refusing a report directory that is a symlink or not a directory";
    assert_eq!(
        err.matches(warning).count(),
        5,
        "one warning per test: {err}"
    );
    scratch.assert_daemons_dead(&["fixture"]);
    assert_no_run_dirs(&scratch.cargo_tmp);
    assert_eq!(
        fs::read(target.join("sandkeeper-leaks")).unwrap(),
        b"not a directory"
    );
    let (status, _) = report(&target.join("sandkeeper-leaks"));
    assert_eq!(status, Some(2), "the report says the run's problem");
}

/// Issue 28 (d): sandkeeper not on `PATH`: the documented `sh` line runs
/// each test as it is, with one warning each, and they pass. (Built and
/// archived with the full `PATH`, run from the archive with a `PATH` of
/// `sh` alone, so no installed sandkeeper can be found.)
#[test]
fn sandkeeper_missing_is_not_a_test_failure() {
    if !nextest_available() {
        return;
    }
    let Some(cargo_nextest) = find_cargo_nextest() else {
        eprintln!("skipped: cargo-nextest not found on PATH or in CARGO_HOME/bin");
        return;
    };
    let scratch = Scratch::new();
    write_package(&scratch.ws, "fixture", true);
    write_config(&scratch.ws, &documented_config());
    let target = scratch.path().join("target");
    let archive = scratch.path().join("fixture.tar.zst");
    let mut cmd = scratch.command(
        OsStr::new("cargo"),
        &[
            "nextest",
            "archive",
            "--offline",
            "--archive-file",
            archive.to_str().unwrap(),
        ],
        &std::env::var_os("PATH").unwrap_or_default(),
    );
    cmd.env("CARGO_TARGET_DIR", &target);
    let out = wait_with_deadline(&mut cmd.spawn().unwrap(), Duration::from_secs(600));
    assert!(
        out.status.success(),
        "cargo nextest archive: {}",
        stderr_of(&out)
    );

    let bin = scratch.path().join("bin");
    fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(fs::canonicalize("/bin/sh").unwrap(), bin.join("sh")).unwrap();
    let extracted = scratch.path().join("extracted");
    fs::create_dir(&extracted).unwrap();
    let mut cmd = scratch.command(
        cargo_nextest.as_os_str(),
        &[
            "nextest",
            "run",
            "--archive-file",
            archive.to_str().unwrap(),
            "--extract-to",
            extracted.to_str().unwrap(),
            "--no-fail-fast",
            "--color",
            "never",
            "--success-output",
            "immediate",
            // Its daemon is `sleep`, which this PATH has not.
            "-E",
            "not test(=tests::leaves_a_daemon)",
        ],
        bin.as_os_str(),
    );
    let out = wait_with_deadline(&mut cmd.spawn().unwrap(), Duration::from_secs(600));
    let err = stderr_of(&out);
    assert!(out.status.success(), "cargo nextest run: {err}");
    assert!(err.contains("4 passed"), "{err}");
    let warning = "warning: sandkeeper run --nextest: sandkeeper is not on PATH; the test runs without it (no leak record)";
    assert_eq!(
        err.matches(warning).count(),
        4,
        "one warning per test: {err}"
    );
    assert!(!target.join("sandkeeper-leaks").exists());
}

/// The `cargo-nextest` binary `cargo nextest` runs: on `PATH`, or in
/// `$CARGO_HOME/bin` (where cargo also looks).
fn find_cargo_nextest() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    std::env::split_paths(&path)
        .chain(cargo_home.map(|h| h.join("bin")))
        .map(|dir| dir.join("cargo-nextest"))
        .find(|p| p.is_file())
}

/// `run --report-dir DIR --root R --kill-grace G` given explicitly (not the
/// documented set-up): the records go to `DIR`, each test's `TMPDIR` into
/// `R`, gone afterwards.
#[test]
fn nextest_wrapper_with_explicit_options() {
    if !nextest_available() {
        return;
    }
    let scratch = Scratch::new();
    let runs = scratch.path().join("runs");
    let leaks = scratch.path().join("leaks");
    fs::create_dir(&runs).unwrap();
    write_package(&scratch.ws, "fixture", true);
    let wrapper = [
        env!("CARGO_BIN_EXE_sandkeeper"),
        "run",
        "--nextest",
        "--kill-grace",
        "2s",
        "--root",
        runs.to_str().unwrap(),
        "--report-dir",
        leaks.to_str().unwrap(),
        "--",
    ];
    let command: Vec<String> = wrapper.iter().map(|a| format!("{a:?}")).collect();
    write_config(
        &scratch.ws,
        &wrapper_config(&format!("[{}]", command.join(", "))),
    );
    let target = scratch.path().join("target");
    let out = scratch.nextest_run(&[], &[("CARGO_TARGET_DIR", target.as_os_str())]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "cargo nextest run: {err}");
    assert!(err.contains("5 passed"), "{err}");
    assert!(
        !err.contains("left 1 entr"),
        "--report-dir keeps the test output clean: {err}"
    );
    scratch.assert_daemons_dead(&["fixture"]);
    // Every test's TMPDIR is gone.
    assert_eq!(names(&runs), Vec::<OsString>::new());
    assert!(
        !target.join("sandkeeper-leaks").exists(),
        "--report-dir wins"
    );
    assert_reported(&leaks, &["fixture"]);

    let text = Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
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
    assert!(text.contains("2 of 5 tests leaked"), "{text}");
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
