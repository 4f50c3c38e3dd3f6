//! The Python package, end to end: builds the wheel with maturin into a
//! fresh venv (maturin and pytest from PyPI, by pip), installs it, and runs
//! the pytest suite in `tests/python/` there — as PID 1 of a private PID
//! namespace when root, where every process can be inspected (the in-use
//! checks need it). Then the wheel alone in a clean venv: `import
//! sandkeeper` and `sandkeeper --version`.
//!
//! Skips, saying why, only where `python3` or its `venv` module is absent.
//! The cargo build behind maturin shares the workspace's target directory
//! (the outer `cargo test` holds no build lock while tests run): only pyo3
//! and this crate are built again (with `pyo3/extension-module`), and the
//! result is cached there between runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sandkeeper_testkit::namespace::UNSHARE_PID_NAMESPACE;
use sandkeeper_testkit::privilege::is_root;
use sandkeeper_testkit::process::wait_with_deadline;

/// Generous: pip downloads, a cold cargo build of the extension.
const STEP_DEADLINE: Duration = Duration::from_secs(1500);

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's target directory (`CARGO_TARGET_TMPDIR` is `<target>/tmp`).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR has a parent")
        .to_owned()
}

/// Runs `cmd` to the end (output captured) and fails the test, showing
/// the output, if it does not succeed.
fn run(what: &str, cmd: &mut Command) -> String {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    let out = wait_with_deadline(&mut child, STEP_DEADLINE);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout
}

/// Why the suite cannot run here, if it cannot: no python3, or no venv.
fn python_missing() -> Option<String> {
    match Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Err(e) => Some(format!("python3 cannot be run ({e})")),
        Ok(s) if !s.success() => Some(
            "python3 has no venv/ensurepip module (Debian: apt-get install python3-venv)".into(),
        ),
        Ok(_) => None,
    }
}

#[test]
fn python_package_builds_installs_and_passes_its_tests() {
    if let Some(why) = python_missing() {
        println!("skipped python_package_builds_installs_and_passes_its_tests: {why}");
        return;
    }
    let scratch = sandkeeper_engine::Sandbox::builder()
        .tag("sandkeeper-py")
        .root(env!("CARGO_TARGET_TMPDIR"))
        .create()
        .expect("scratch sandbox");
    let dir = scratch.path();
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let venv = dir.join("venv");
    let bin = venv.join("bin");
    let dist = dir.join("dist");

    run(
        "python3 -m venv",
        Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .env("TMPDIR", &tmp),
    );
    run(
        "pip install maturin pytest pytest-xdist",
        Command::new(bin.join("pip"))
            // (pytest-xdist: the plugin's report and basetemp under `-n`.)
            .args([
                "install",
                "--quiet",
                "maturin>=1.5,<2",
                "pytest",
                "pytest-xdist",
            ])
            .env("TMPDIR", &tmp),
    );
    run(
        "maturin build",
        Command::new(bin.join("maturin"))
            .arg("build")
            .arg("--locked")
            .arg("--quiet")
            .arg("--interpreter")
            .arg(bin.join("python"))
            .arg("--out")
            .arg(&dist)
            .arg("--target-dir")
            .arg(target_dir())
            .current_dir(crate_dir())
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .env("TMPDIR", &tmp),
    );
    let wheel = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("maturin wrote a wheel");
    run(
        "pip install the wheel",
        Command::new(bin.join("pip"))
            .args(["install", "--quiet"])
            .arg(&wheel)
            .env("TMPDIR", &tmp),
    );

    // The suite, as PID 1 of its own PID namespace when root.
    let namespace = is_root();
    let mut pytest = if namespace {
        let mut c = Command::new(UNSHARE_PID_NAMESPACE[0]);
        c.args(&UNSHARE_PID_NAMESPACE[1..]).arg(bin.join("python"));
        c.env("SK_PY_NAMESPACE", "1")
            .env("SANDKEEPER_TRUST_PID_NAMESPACE", "1");
        c
    } else {
        println!("not root: the in-use tests of the Python suite are skipped");
        Command::new(bin.join("python"))
    };
    pytest
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
        .current_dir(crate_dir().join("tests/python"))
        .env("TMPDIR", &tmp)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT");
    let rust_cli = target_dir().join("debug/sandkeeper");
    if rust_cli.exists() {
        pytest.env("SANDKEEPER_RUST_CLI", &rust_cli);
    }
    let out = run("pytest", &mut pytest);
    print!("{out}");
    assert!(out.contains(" passed"), "pytest ran no test:\n{out}");

    // The wheel alone, in a clean venv.
    let clean = dir.join("clean");
    run(
        "python3 -m venv (clean)",
        Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&clean)
            .env("TMPDIR", &tmp),
    );
    run(
        "pip install the wheel (clean)",
        Command::new(clean.join("bin/pip"))
            .args(["install", "--quiet", "--no-index"])
            .arg(&wheel)
            .env("TMPDIR", &tmp),
    );
    let version = run(
        "sandkeeper --version (clean venv)",
        Command::new(clean.join("bin/sandkeeper")).arg("--version"),
    );
    assert_eq!(
        version.trim(),
        format!("sandkeeper {}", env!("CARGO_PKG_VERSION"))
    );
    run(
        "import sandkeeper (clean venv)",
        Command::new(clean.join("bin/python"))
            .args([
                "-c",
                "import sandkeeper, sys; sys.exit(sandkeeper.__version__ != sys.argv[1])",
            ])
            .arg(env!("CARGO_PKG_VERSION"))
            .env("TMPDIR", &tmp),
    );
    scratch.close().expect("the scratch directory is removed");
}
