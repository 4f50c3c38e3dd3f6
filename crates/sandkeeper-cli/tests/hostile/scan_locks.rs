//! Finding 10: a read-only look takes no lock. `scan` and `reap --dry-run`
//! used to probe every directory with `flock(LOCK_EX|LOCK_NB)`, so a
//! program's own non-blocking `flock` on its directory failed while they
//! ran. They now tell live from free by `/proc/locks`; only a real reap
//! claims (locks) an entry, and only one it is about to remove.
//!
//! Deterministic: every `flock` the binary makes is traced (`strace -f -y`
//! names the file each descriptor refers to), not sampled.

use std::fs;
use std::path::Path;
use std::process::Command;

use sandkeeper_engine::lease::{Lease, LeaseRecord};
use sandkeeper_engine::sandbox;

/// Whether `strace` can be used. Without it the test skips, printing why,
/// unless `CI` is set (`.ci/run` installs it): there it fails instead.
fn have_strace(test: &str) -> bool {
    let ok = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=flock", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test} needs strace, and CI is set: install strace (.ci/run does)"
        );
        eprintln!("skipping {test}: needs a working strace");
    }
    ok
}

/// Runs `sandkeeper args…` under `strace -f -y -e trace=flock` and returns
/// the traced `flock` calls that name a file under `root`.
fn flocks_under(root: &Path, trace_dir: &Path, args: &[&str]) -> Vec<String> {
    let trace = trace_dir.join(format!("trace-{}", args[0]));
    let out = Command::new("strace")
        .args(["-f", "-qq", "-y", "-e", "trace=flock", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(args)
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .output()
        .expect("run sandkeeper under strace");
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "sandkeeper {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = fs::read_to_string(&trace).expect("read the strace output");
    let root = root.to_string_lossy().into_owned();
    text.lines()
        .filter(|l| l.contains("flock(") && l.contains(&root))
        .map(str::to_owned)
        .collect()
}

#[test]
fn scan_and_dry_run_take_no_exclusive_lock_on_entries() {
    if !have_strace("scan_and_dry_run_take_no_exclusive_lock_on_entries") {
        return;
    }
    let root = sandbox!().unwrap();
    let traces = sandbox!().unwrap();
    // A live sandbox (this test holds its lease), an orphan, an unmanaged
    // directory: the old probe locked each of them.
    let live = Lease::create(
        root.path(),
        "app-live".as_ref(),
        &LeaseRecord::for_current_process("app"),
        0o700,
    )
    .unwrap();
    drop(
        Lease::create(
            root.path(),
            "app-orphan".as_ref(),
            &LeaseRecord::for_current_process("app"),
            0o700,
        )
        .unwrap(),
    );
    fs::create_dir(root.path().join("app-plain")).unwrap();
    let r = root.path().to_str().unwrap();
    for args in [
        vec!["scan", "--entries", r],
        vec!["reap", r, "--dry-run", "--grace", "0s", "--match", "app-*"],
    ] {
        let locks = flocks_under(root.path(), traces.path(), &args);
        let exclusive: Vec<&String> = locks.iter().filter(|l| l.contains("LOCK_EX")).collect();
        assert!(
            exclusive.is_empty(),
            "`sandkeeper {}` took exclusive locks on entries:\n{}",
            args.join(" "),
            exclusive
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Nothing was removed, and the live lease is still ours.
    for name in ["app-live", "app-orphan", "app-plain"] {
        assert!(root.path().join(name).exists(), "{name}");
    }
    drop(live);
}
