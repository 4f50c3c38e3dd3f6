//! Issue 25, item 8: what a scan and a reaper hold grows with the length of
//! the names once (the names' own bytes), not twice. An unprivileged user
//! chooses the names of /tmp: 255 bytes each, a million of them, are 255 MB;
//! listed, filtered and sorted by copying, they were 510 MB at the peak, and
//! `watch --once` was killed by the unit's 512 MiB limit.
//!
//! Each operation runs in a child process (this test binary, one ignored
//! test) over the same number of entries with short and with long names;
//! the child reports its peak resident set (`VmHWM`). The difference must
//! stay within 1.5 times the difference of the names' bytes (a copy of
//! every name makes it 2 and more). A memory measure, not a timed one.

use std::fs;
use std::path::Path;

use sandkeeper_engine::reap::{Policy, Reaper};
use sandkeeper_engine::sandbox;
use sandkeeper_engine::scan::Scanner;
use sandkeeper_testkit::process::test_command;

/// Entries per root: enough that the names' bytes stand out of what a
/// process holds anyway (12 MB at 250 bytes a name).
const ENTRIES: usize = 50_000;

/// The names' lengths compared.
const SHORT: usize = 16;
const LONG: usize = 250;

#[test]
#[ignore = "child process, run by the tests below"]
fn child_measure() {
    let (Some(root), Some(what)) = (
        std::env::var_os("SANDKEEPER_MEMORY_ROOT"),
        std::env::var_os("SANDKEEPER_MEMORY_OP"),
    ) else {
        return;
    };
    let root = Path::new(&root);
    match what.to_str() {
        Some("scan") => {
            let mut scanner = Scanner::new();
            scanner.keep_entries(false);
            let report = scanner.scan(&[root]).unwrap();
            assert_eq!(report.roots[0].totals.entries, ENTRIES as u64);
        }
        Some("reap") => {
            let policy = Policy::builder()
                .matching("*")
                .dry_run(true)
                .records(false)
                .build()
                .unwrap();
            let report = Reaper::new(policy).reap(&[root]).unwrap();
            let counts = &report.roots[0].counts;
            assert_eq!(counts.removed + counts.skipped, ENTRIES as u64);
        }
        other => panic!("SANDKEEPER_MEMORY_OP={other:?}: give scan or reap"),
    }
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    // On a line of its own: the harness's "test child_measure ... " has
    // no newline yet.
    println!("\npeak-kib {}", hwm.trim().trim_end_matches("kB").trim());
}

/// A sandbox whose directory `root` holds [`ENTRIES`] empty files whose
/// names are `len` bytes long (`app-235-<i>-` and letters: one family).
fn root_of(len: usize) -> sandkeeper_engine::Sandbox {
    let sandbox = sandbox!(format!("memory-{len}")).unwrap();
    let root = sandbox.path().join("root");
    fs::create_dir(&root).unwrap();
    for i in 0..ENTRIES {
        let mut name = format!("app-235-{i}-");
        let tail = len - name.len();
        name.extend((0..tail).map(|k| char::from(b'a' + ((i + k) % 26) as u8)));
        fs::File::create(root.join(name)).unwrap();
    }
    sandbox
}

/// The child's peak resident set, KiB, for `op` over `root`.
fn peak_kib(root: &Path, op: &str, name_memory: Option<&str>) -> u64 {
    let mut child = test_command(&[], "child_measure");
    match name_memory {
        Some(bytes) => child.env(sandkeeper_engine::scan::NAME_MEMORY_ENV, bytes),
        None => child.env_remove(sandkeeper_engine::scan::NAME_MEMORY_ENV),
    };
    let out = child
        .env("SANDKEEPER_MEMORY_ROOT", root)
        .env("SANDKEEPER_MEMORY_OP", op)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{op} of {}: {}\n{stdout}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("peak-kib "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak in the child's output: {stdout}"))
}

fn grows_with_the_names_once(op: &str) {
    let short = root_of(SHORT);
    let long = root_of(LONG);
    let (a, b) = (
        peak_kib(&short.path().join("root"), op, None),
        peak_kib(&long.path().join("root"), op, None),
    );
    let names_kib = (ENTRIES * (LONG - SHORT) / 1024) as u64;
    let grew = b.saturating_sub(a);
    eprintln!("{op}: peak {a} KiB with names of {SHORT} bytes, {b} KiB with {LONG}: +{grew} KiB; the names +{names_kib} KiB");
    assert!(
        grew * 2 <= names_kib * 3,
        "{op}: longer names made the peak grow by {grew} KiB, more than 1.5 times their own {names_kib} KiB: names are held more than once"
    );
}

#[test]
fn a_scan_holds_the_names_once() {
    grows_with_the_names_once("scan");
}

#[test]
fn a_reap_holds_the_names_once() {
    grows_with_the_names_once("reap");
}

/// Past the budget of names (`SANDKEEPER_NAME_MEMORY`, here 1 MiB against
/// the long names' 12 MB) a scan and a reap hold fingerprints and a
/// window, not the names: longer names make the peak grow by at most a
/// quarter of their bytes (held once, it grew by all of them).
fn grows_by_the_budget_not_the_names(op: &str) {
    let short = root_of(SHORT);
    let long = root_of(LONG);
    let (a, b) = (
        peak_kib(&short.path().join("root"), op, Some("1M")),
        peak_kib(&long.path().join("root"), op, Some("1M")),
    );
    let names_kib = (ENTRIES * (LONG - SHORT) / 1024) as u64;
    let grew = b.saturating_sub(a);
    eprintln!("{op} with a budget of 1 MiB: peak {a} KiB with names of {SHORT} bytes, {b} KiB with {LONG}: +{grew} KiB; the names +{names_kib} KiB");
    assert!(
        grew * 4 <= names_kib,
        "{op}: past the budget, longer names made the peak grow by {grew} KiB, more than a quarter of their own {names_kib} KiB: the names are held"
    );
}

#[test]
fn past_the_budget_a_scan_holds_no_names() {
    grows_by_the_budget_not_the_names("scan");
}

#[test]
fn past_the_budget_a_reap_holds_no_names() {
    grows_by_the_budget_not_the_names("reap");
}
