//! Support for the kernel-user attacks (`sockets`, `mounts`, `loops`):
//! scan or reap one root the way `reap --match '*' --older-than 0s
//! --grace 0s` does, and say what became of one entry.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sandkeeper_engine::reap::{KeepReason, Policy, Reaper};
use sandkeeper_engine::scan::{EntryState, Scanner};
use sandkeeper_testkit::process::test_command;

/// The state of `root/name` in a fresh scan, with the report's blind
/// spots and the entry's kernel users and holders (for messages).
pub fn state_of(root: &Path, name: &str) -> (EntryState, String) {
    let report = Scanner::new().scan(&[root]).expect("scan the root");
    let entry = report.roots[0]
        .entries
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} not in the scan of {}", root.display()));
    let why = format!(
        "state {:?} ({:?}); kernel {:?}; holders {:?}; sockets {:?}; blind spots {:?}; uninspectable {:?}",
        entry.state,
        entry.reason,
        entry.kernel.iter().map(ToString::to_string).collect::<Vec<_>>(),
        entry.holders.iter().map(ToString::to_string).collect::<Vec<_>>(),
        entry.sockets,
        report
            .blind_spots
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        report
            .uninspectable
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
    );
    (entry.state, why)
}

/// Asserts that `root/name` is `in_use`, and that a reap of everything
/// (`--match '*' --older-than 0s --grace 0s`) keeps it, as in use.
pub fn assert_in_use_and_kept(root: &Path, name: &str) {
    let (state, why) = state_of(root, name);
    assert_eq!(state, EntryState::InUse, "{name}: {why}");
    let reason = reap_all(root, name);
    assert_eq!(
        reason,
        Some(KeepReason::InUse),
        "{name} kept as in use: {why}"
    );
    assert!(root.join(name).exists(), "{name} still there");
}

/// Reaps everything in `root` and returns why `name` was kept (`None` if
/// it was removed).
pub fn reap_all(root: &Path, name: &str) -> Option<KeepReason> {
    let policy = Policy::builder()
        .matching("*")
        .older_than(Duration::ZERO)
        .grace(Duration::ZERO)
        .build()
        .expect("policy");
    let report = Reaper::new(policy).reap(&[root]).expect("reap the root");
    let root_report = &report.roots[0];
    if root_report
        .removed
        .iter()
        .any(|r| r.path.file_name() == Some(name.as_ref()))
    {
        return None;
    }
    let skipped = root_report
        .skipped
        .iter()
        .find(|s| s.path.file_name() == Some(name.as_ref()))
        .unwrap_or_else(|| panic!("{name} neither removed nor skipped: {report:#?}"));
    Some(skipped.reason.clone())
}

/// Runs a shell script as root (`sh -c script sh args…`) and returns its
/// stdout, failing the test with its stderr if it fails.
pub fn sh(script: &str, args: &[&Path]) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "sh -c {script:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Scans `root` in a child process run through `wrapper` (such as
/// `setpriv --bounding-set=-sys_admin`), and returns the state of `name`
/// and the report's blind spots there, as `STATE <state>` and
/// `BLIND <text>` lines.
pub fn scan_via(wrapper: &[&str], root: &Path, name: &str) -> String {
    assert!(!wrapper.is_empty(), "a wrapper");
    let out = test_command(wrapper, "kernel_support::print_state")
        .env("SK_SCAN_ROOT", root)
        .env("SK_SCAN_NAME", name)
        .output()
        .expect("run the scanning child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "scanning child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
#[ignore = "the scanning child of scan_via"]
fn print_state() {
    let (Some(root), Some(name)) = (
        std::env::var_os("SK_SCAN_ROOT"),
        std::env::var_os("SK_SCAN_NAME"),
    ) else {
        return;
    };
    let report = Scanner::new().scan(&[Path::new(&root)]).expect("scan");
    for entry in &report.roots[0].entries {
        if entry.name == name {
            println!("\nSTATE {}", entry.state.as_str());
        }
    }
    for spot in &report.blind_spots {
        println!("BLIND {spot}");
    }
}
