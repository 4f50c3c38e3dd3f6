//! Forged lease records (issue "Hostile /tmp, part 2", item 4): a record
//! never changes the verdict on any entry but its writer's own; a provably
//! dead orphan goes whatever the clock says; `keep_until_ms` is honoured
//! only up to a cap, and a root under pressure takes kept entries last.
//!
//! The forged directories belong to uid 65534 (made here and handed over
//! with `chown`: the state an attacker produces, without a race to time).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use sandkeeper_engine::lease::LeaseRecord;
use sandkeeper_engine::reap::{KeepReason, Policy, PolicyBuilder, ReapReason, ReapReport, Reaper};
use sandkeeper_engine::Sandbox;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::NOBODY;
use sandkeeper_testkit::tree::age_tree;

const DAY: Duration = Duration::from_secs(86_400);

/// A directory `name` in `root` owned by nobody (mode 0700), holding a
/// file and, if given, `record` as its lease; its tree dated `age` ago.
fn forged(root: &Path, name: &str, record: Option<&LeaseRecord>, age: Duration) {
    let dir = root.join(name);
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("data"), b"x").unwrap();
    if let Some(record) = record {
        fs::write(dir.join(".sandkeeper-lease"), record.to_line()).unwrap();
    }
    age_tree(&dir, age);
    for entry in fs::read_dir(&dir).unwrap() {
        chown(entry.unwrap().path(), Some(NOBODY), Some(NOBODY)).unwrap();
    }
    chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
}

/// A record that claims the current boot and a creation time long before
/// its creator started: the clock-step guard's witness.
fn stepped_record() -> LeaseRecord {
    let mut record = LeaseRecord::for_current_process("forged");
    record.created_ms = 0;
    record.start_ticks = 1_000_000_000_000;
    record
}

fn reap(root: &Path, rules: impl FnOnce(&mut PolicyBuilder)) -> ReapReport {
    let mut b = Policy::builder();
    b.grace(Duration::ZERO);
    rules(&mut b);
    Reaper::new(b.build().unwrap()).reap(&[root]).unwrap()
}

fn removed(report: &ReapReport) -> BTreeSet<String> {
    report.roots[0]
        .removed
        .iter()
        .map(|r| r.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

fn kept_reason(report: &ReapReport, name: &str) -> KeepReason {
    report.roots[0]
        .skipped
        .iter()
        .find(|s| s.path.file_name().is_some_and(|n| n == name))
        .unwrap_or_else(|| panic!("{name} was not kept: {:?}", report.roots[0]))
        .reason
        .clone()
}

/// Nobody's forged clock witness keeps nobody's own entries, and nobody
/// else's: root's old `app-1` still goes by its age.
#[test]
fn a_forged_clock_witness_affects_only_its_writers_entries() {
    run_in_pid_namespace(
        "a_forged_clock_witness_affects_only_its_writers_entries",
        "records::inner_forged_witness",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_forged_witness() {
    if !in_namespace() {
        return;
    }
    let root = Sandbox::new().unwrap();
    let app = root.path().join("app-1");
    fs::create_dir(&app).unwrap();
    fs::write(app.join("f"), b"x").unwrap();
    age_tree(&app, DAY * 30);
    forged(root.path(), "witness", Some(&stepped_record()), DAY * 30);
    forged(root.path(), "app-2", None, DAY * 30);
    let report = reap(root.path(), |b| {
        let mut hour = sandkeeper_engine::reap::Filters::new();
        hour.older_than(Duration::from_secs(3600));
        b.rule("app-*", &hour);
    });
    let gone = removed(&report);
    assert!(
        gone.contains("app-1"),
        "root's entry was held hostage: {gone:?}"
    );
    // The forger's witness is an orphan: its lock is free, it goes.
    assert!(gone.contains("witness"), "{gone:?}");
    assert!(
        matches!(kept_reason(&report, "app-2"), KeepReason::ClockStepped(_)),
        "the forger's own entry is judged by its own witness"
    );
}

/// `keep_until_ms = u64::MAX` keeps a sandbox only for the cap after its
/// newest change; under pressure a kept sandbox is taken after every other
/// candidate.
#[test]
fn keep_until_is_capped_and_yields_to_pressure_last() {
    run_in_pid_namespace(
        "keep_until_is_capped_and_yields_to_pressure_last",
        "records::inner_keep_until",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_keep_until() {
    if !in_namespace() {
        return;
    }
    let forever = {
        let mut r = LeaseRecord::for_current_process("kept");
        r.keep_until_ms = Some(u64::MAX);
        r
    };
    let root = Sandbox::new().unwrap();
    forged(root.path(), "kept-old", Some(&forever), DAY * 8);
    forged(root.path(), "kept-new", Some(&forever), DAY);
    let report = reap(root.path(), |_| {});
    assert_eq!(removed(&report), ["kept-old".to_owned()].into());
    assert!(matches!(
        kept_reason(&report, "kept-new"),
        KeepReason::KeptUntil(_)
    ));

    // A shorter cap releases it too.
    let report = reap(root.path(), |b| {
        b.max_keep(Duration::from_secs(3600)).dry_run(true);
    });
    assert_eq!(removed(&report), ["kept-new".to_owned()].into());

    // Under pressure: taken, but after the plain orphan, whatever the ages.
    let orphan = LeaseRecord::for_current_process("orphan");
    forged(
        root.path(),
        "orphan",
        Some(&orphan),
        Duration::from_secs(60),
    );
    let report = reap(root.path(), |b| {
        b.under_pressure(true)
            .target_free(sandkeeper_engine::reap::FreeTarget::Percent(100.0))
            .dry_run(true);
    });
    let order: Vec<_> = report.roots[0]
        .removed
        .iter()
        .map(|r| (r.path.file_name().unwrap().to_owned(), r.reason.clone()))
        .collect();
    assert_eq!(order.len(), 2, "{order:?}");
    assert_eq!(order[0].0, "orphan", "{order:?}");
    assert_eq!(order[1].0, "kept-new", "{order:?}");
    assert!(matches!(order[1].1, ReapReason::KeptUnderPressure(_)));
}
