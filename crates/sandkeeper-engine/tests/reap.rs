//! The reaper beside live work: chaos with real processes, free-space
//! targets, held directories, a full filesystem, dry runs. Every test runs
//! inside a private PID namespace, where every process can be inspected.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sandkeeper_engine::lease::{Lease, LeaseRecord};
use sandkeeper_engine::reap::{FreeTarget, KeepReason, Policy, ReapReport, Reaper};
use sandkeeper_engine::sandbox;
use sandkeeper_engine::scan::{EntryState, Scanner};
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::process::{spawn_ready, Helper, Spawned};
use sandkeeper_testkit::tree::{age_tree, name_set, orphan, Orphan};

#[test]
#[ignore = "helper process entry point, run by other tests"]
fn child_main() {
    sandkeeper_testkit::child::main()
}

fn reap(
    root: &Path,
    build: impl FnOnce(&mut sandkeeper_engine::reap::PolicyBuilder),
) -> ReapReport {
    let mut b = Policy::builder();
    b.grace(Duration::ZERO);
    build(&mut b);
    Reaper::new(b.build().unwrap()).reap(&[root]).unwrap()
}

fn removed_names(report: &ReapReport) -> BTreeSet<String> {
    report.roots[0]
        .removed
        .iter()
        .map(|r| r.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// A digest of every file under `dir`: name → contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), fs::read(e.path()).unwrap_or_default());
            }
        }
    }
    out
}

#[test]
fn chaos_creators_killers_and_two_reapers() {
    run_in_pid_namespace("chaos_creators_killers_and_two_reapers", "inner_chaos");
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_chaos() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let outside = sandbox!().unwrap();
    for i in 0..20 {
        fs::write(
            outside.path().join(format!("keep-{i}")),
            format!("outside {i}"),
        )
        .unwrap();
    }
    let before = snapshot(outside.path());
    let mut rng = fastrand::Rng::with_seed(0x5eed_cafe);
    let deadline = Instant::now() + Duration::from_secs(8);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Two reapers loop over the root at the same time.
    let reapers: Vec<_> = (0..2)
        .map(|_| {
            let (root, stop) = (root.path().to_owned(), stop.clone());
            std::thread::spawn(move || {
                let policy = Policy::builder()
                    .matching("app-*")
                    .grace(Duration::from_secs(2))
                    .build()
                    .unwrap();
                let reaper = Reaper::new(policy);
                let mut errors = Vec::new();
                let mut removed = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let report = reaper.reap(&[&root]).unwrap();
                    removed += report.roots[0].removed.len();
                    errors.extend(
                        report.roots[0]
                            .errors
                            .iter()
                            .map(|e| format!("{}: {}", e.path.display(), e.error)),
                    );
                }
                (removed, errors)
            })
        })
        .collect();
    // Creators, some killed at random points of their work.
    let mut finished = 0;
    let mut killed = 0;
    let mut generation = 0u64;
    while Instant::now() < deadline {
        let creators: Vec<Helper> = (0..4)
            .map(|_| {
                generation += 1;
                Helper::start(
                    "chaos",
                    &[
                        ("SK_ROOT", root.path().to_str().unwrap()),
                        ("SK_SEED", &generation.to_string()),
                        ("SK_ROUNDS", "12"),
                    ],
                )
            })
            .collect();
        for c in &creators {
            c.ready_path();
        }
        std::thread::sleep(Duration::from_millis(rng.u64(50..400)));
        for mut c in creators {
            if rng.bool() {
                c.kill();
                killed += 1;
            } else {
                let exit = c.wait();
                let (ok, stderr) = (exit.success, exit.stderr);
                assert!(
                    ok,
                    "a creator found its live directory damaged or failed:\n{stderr}"
                );
                finished += 1;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut removed_by_loops = 0;
    for r in reapers {
        let (removed, errors) = r.join().unwrap();
        assert!(errors.is_empty(), "no errors for races: {errors:?}");
        removed_by_loops += removed;
    }
    // A final reap, once the grace period has passed, takes every orphan.
    std::thread::sleep(Duration::from_millis(2100));
    let last = Reaper::new(
        Policy::builder()
            .matching("app-*")
            .grace(Duration::from_secs(2))
            .build()
            .unwrap(),
    )
    .reap(&[root.path()])
    .unwrap();
    assert!(
        last.roots[0].errors.is_empty(),
        "{:?}",
        last.roots[0].errors
    );
    let after = Scanner::new().scan(&[root.path()]).unwrap();
    let leftovers: Vec<String> = after.roots[0]
        .entries
        .iter()
        .filter(|e| e.name != sandkeeper_engine::lease::LEASE_FILE)
        .map(|e| format!("{} {}", e.name.to_string_lossy(), e.state))
        .collect();
    assert!(leftovers.is_empty(), "every orphan is gone: {leftovers:?}");
    assert_eq!(
        snapshot(outside.path()),
        before,
        "nothing outside the root changed"
    );
    assert!(
        killed > 0 && finished > 0,
        "killed {killed}, finished {finished}"
    );
    assert!(
        removed_by_loops + last.roots[0].removed.len() > 0,
        "the reapers had work"
    );
    println!(
        "chaos: {finished} finished, {killed} killed, {removed_by_loops} removed while racing"
    );
}

#[test]
fn target_free_stops_as_soon_as_met() {
    run_in_pid_namespace("target_free_stops_as_soon_as_met", "inner_target_free");
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_target_free() {
    if !in_namespace() {
        return;
    }
    let base = sandbox!().unwrap();
    let mount = base.path().join("tmpfs");
    let _tmpfs = Mount::tmpfs(&mount, "8m");
    for i in 0..6 {
        // orphan-0 is the oldest.
        Orphan::new(&mount, &format!("orphan-{i}"))
            .files(1, 1 << 20)
            .age(Duration::from_secs(3600 * (10 - i)))
            .make();
    }
    // 6 MiB of 8 used: about 2 MiB free. 45% (3.6 MiB) needs exactly two
    // removals; the third would be one too many.
    let report = reap(&mount, |b| {
        b.target_free(FreeTarget::Percent(45.0));
    });
    let root = &report.roots[0];
    assert_eq!(
        removed_names(&report),
        ["orphan-0", "orphan-1"].map(String::from).into(),
        "oldest first, only as many as needed"
    );
    assert!(
        root.skipped
            .iter()
            .filter(|s| s.reason == KeepReason::TargetMet)
            .count()
            >= 4
    );
    let free = rustix::fs::statvfs(&mount).unwrap();
    assert!(
        free.f_bavail * free.f_frsize >= (8 << 20) * 45 / 100,
        "the target is met"
    );
}

#[test]
fn held_directories_are_never_removed() {
    run_in_pid_namespace("held_directories_are_never_removed", "inner_held");
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_held() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let p = |n: &str| root.path().join(n);
    for name in ["app-fd", "app-cwd", "app-mmap", "app-free"] {
        fs::create_dir(p(name)).unwrap();
        fs::write(p(name).join("file"), vec![3u8; 4096]).unwrap();
    }
    let _fd = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$1/file\"; echo ready; exec sleep 600")
            .arg("sh")
            .arg(p("app-fd")),
    );
    let _cwd = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("echo ready; exec sleep 600")
            .current_dir(p("app-cwd")),
    );
    let _mmap = spawn_ready(Command::new("python3").arg("-c").arg(
        "import mmap,sys,time\nf=open(sys.argv[1],'rb')\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nf.close()\nprint('ready',flush=True)\ntime.sleep(600)",
    ).arg(p("app-mmap").join("file")));
    for name in ["app-fd", "app-cwd", "app-mmap", "app-free"] {
        age_tree(&p(name), Duration::from_secs(30 * 86_400));
    }
    let report = reap(root.path(), |b| {
        b.matching("app-*").older_than(Duration::from_secs(3600));
    });
    assert_eq!(
        removed_names(&report),
        ["app-free".to_owned()].into(),
        "only the free one goes"
    );
    for name in ["app-fd", "app-cwd", "app-mmap"] {
        assert!(p(name).join("file").exists(), "{name} survived");
        let skip = report.roots[0]
            .skipped
            .iter()
            .find(|s| s.path == p(name))
            .unwrap();
        assert_eq!(skip.reason, KeepReason::InUse, "{name}");
    }
}

#[test]
fn reap_works_on_a_full_filesystem() {
    run_in_pid_namespace("reap_works_on_a_full_filesystem", "inner_full");
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_full() {
    if !in_namespace() {
        return;
    }
    let base = sandbox!().unwrap();
    let mount = base.path().join("full");
    let _tmpfs = Mount::tmpfs(&mount, "4m");
    let a = orphan(&mount, "orphan-a");
    let b = orphan(&mount, "orphan-b");
    // Fill every block, then every inode.
    for dir in [&a, &b] {
        let mut i = 0;
        while fs::write(dir.join(format!("fill-{i}")), vec![0u8; 256 * 1024]).is_ok() {
            i += 1;
        }
    }
    let mut small = 0;
    while fs::write(a.join(format!("tiny-{small}")), b"x").is_ok() && small < 100_000 {
        small += 1;
    }
    let st = rustix::fs::statvfs(&mount).unwrap();
    assert_eq!(st.f_bavail, 0, "the filesystem is full");
    let report = reap(&mount, |_| {});
    assert!(
        report.roots[0].errors.is_empty(),
        "{:?}",
        report.roots[0].errors
    );
    assert_eq!(
        removed_names(&report),
        ["orphan-a", "orphan-b"].map(String::from).into()
    );
    assert!(!a.exists() && !b.exists());
}

#[test]
fn dry_run_lists_exactly_what_a_real_run_removes() {
    run_in_pid_namespace(
        "dry_run_lists_exactly_what_a_real_run_removes",
        "inner_dry_run",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_dry_run() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let day = Duration::from_secs(86_400);
    for i in 0..4 {
        Orphan::new(root.path(), &format!("orphan-{i}"))
            .files(1, 1000)
            .age(day * i)
            .make();
    }
    for i in 0..6 {
        let dir = root.path().join(format!("app-235-{}", 100 + i));
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("f"), b"x").unwrap();
        age_tree(&dir, day * (i + 1));
    }
    fs::create_dir(root.path().join("unmatched")).unwrap();
    let live = sandkeeper_engine::Sandbox::builder()
        .root(root.path())
        .tag("live")
        .create()
        .unwrap();
    let rules = |b: &mut sandkeeper_engine::reap::PolicyBuilder| {
        b.matching("app-*")
            .keep_last(2)
            .older_than(Duration::from_secs(3600));
    };
    let dry = reap(root.path(), |b| {
        rules(b);
        b.dry_run(true);
    });
    assert!(dry.dry_run);
    let would = removed_names(&dry);
    assert!(
        root.path().join("orphan-3").exists(),
        "a dry run removes nothing"
    );
    let real = reap(root.path(), rules);
    assert_eq!(removed_names(&real), would);
    // --keep-last applies to every family: the two newest orphans and the
    // two newest app-235-* stay (orphan-0 is also too new for --older-than).
    let want: BTreeSet<String> = [
        "orphan-2",
        "orphan-3",
        "app-235-102",
        "app-235-103",
        "app-235-104",
        "app-235-105",
    ]
    .map(String::from)
    .into();
    assert_eq!(would, want);
    assert!(live.path().exists());
    let after = Scanner::new().scan(&[root.path()]).unwrap();
    let states: BTreeMap<String, EntryState> = after.roots[0]
        .entries
        .iter()
        .map(|e| (e.name.to_string_lossy().into_owned(), e.state))
        .collect();
    assert_eq!(states["unmatched"], EntryState::Idle);
    assert_eq!(
        states[&live
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()],
        EntryState::Live
    );
}

/// Issue 5: a wall clock stepped forward since boot must not make
/// everything look old. A lease record whose creation predates its
/// creator's start (by the current clock) betrays the step.
#[test]
fn a_clock_stepped_forward_removes_nothing_by_age() {
    run_in_pid_namespace(
        "a_clock_stepped_forward_removes_nothing_by_age",
        "inner_clock_step",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_clock_step() {
    if !in_namespace() {
        return;
    }
    // Orphans go whatever their age; `app-*` only when older than an hour.
    let rules = |b: &mut sandkeeper_engine::reap::PolicyBuilder| {
        let mut hour = sandkeeper_engine::reap::Filters::new();
        hour.older_than(Duration::from_secs(3600));
        b.rule("app-*", &hour);
    };
    for stepped in [false, true] {
        let root = sandbox!().unwrap();
        let old = root.path().join("app-1");
        fs::create_dir(&old).unwrap();
        fs::write(old.join("f"), b"x").unwrap();
        age_tree(&old, Duration::from_secs(30 * 86_400));
        let mut record = LeaseRecord::for_current_process("witness");
        if stepped {
            // Written "a day before this process started": the clock has
            // since moved a day forward.
            record.created_ms -= 86_400_000 + 600_000;
        }
        let lease = Lease::create(root.path(), "witness".as_ref(), &record, 0o700).unwrap();
        drop(lease); // an orphan: its lease proves it dead, whatever the clock
        let report = reap(root.path(), rules);
        let removed = removed_names(&report);
        if stepped {
            assert_eq!(
                removed,
                ["witness".to_owned()].into(),
                "only the proven orphan"
            );
            let kept = report.roots[0]
                .skipped
                .iter()
                .find(|s| s.path == old)
                .unwrap();
            assert!(
                matches!(kept.reason, KeepReason::ClockStepped(d) if d >= Duration::from_secs(86_400)),
                "{:?}",
                kept.reason
            );
            assert!(old.exists());
        } else {
            assert_eq!(
                removed,
                ["app-1", "witness"].map(String::from).into(),
                "control: both go"
            );
        }
    }
}

/// The batch's pool (`reap/execute.rs`): the entries of one batch are
/// checked and removed in parallel, after one `/proc` pass taken once the
/// whole batch is in the quarantine. Two entries start being used after
/// the scan found them free (a working directory, an open file deep
/// inside) but before the reaper moves them: each one's check after the
/// move finds its holder, and it is put back, intact and under its name,
/// while the rest of the same batch goes (large entries, which may use the
/// remover's own threads, among them). What happened is recorded in the
/// batch's order, oldest first, however the workers finished.
#[test]
fn a_batch_puts_back_what_became_held_and_removes_the_rest_in_parallel() {
    run_in_pid_namespace(
        "a_batch_puts_back_what_became_held_and_removes_the_rest_in_parallel",
        "inner_batch_pool",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_batch_pool() {
    use sandkeeper_engine::reap::ReapEvent;
    use sandkeeper_engine::root::Root;

    if !in_namespace() {
        return;
    }
    const ENTRIES: usize = 40;
    const LARGE: [usize; 3] = [3, 20, 37];
    const HELD_CWD: usize = 11;
    const HELD_FD: usize = 29;
    let root = sandbox!().unwrap();
    let p = |i: usize| root.path().join(format!("app-{i:02}"));
    for i in 0..ENTRIES {
        let deep = p(i).join("sub/deep");
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("file"), format!("entry {i}")).unwrap();
        let files = if LARGE.contains(&i) { 700 } else { 5 };
        for f in 0..files {
            let dir = p(i).join(format!("d{}", f % 7));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(format!("f{f}")), [i as u8; 64]).unwrap();
        }
        // app-00 the oldest; every directory, deepest first.
        let age = Duration::from_secs((100 - i as u64) * 86_400);
        age_tree(&deep, age);
        age_tree(&p(i).join("sub"), age);
        for d in 0..files.min(7) {
            age_tree(&p(i).join(format!("d{d}")), age);
        }
        age_tree(&p(i), age);
    }
    let policy = Policy::builder()
        .matching("app-*")
        .older_than(Duration::from_secs(3600))
        .grace(Duration::ZERO)
        .build()
        .unwrap();
    let opened = Root::open_exact(root.path()).unwrap();
    let mut holders = Vec::new();
    let mut events = Vec::new();
    let report = Reaper::new(policy)
        .reap_roots_with(&[opened], &mut |event| match event {
            ReapEvent::Scanned(scanned) => {
                assert!(scanned.entries.iter().all(|e| e.state == EntryState::Idle));
                // After the scan, before the claims and moves.
                holders.push(spawn_ready(
                    Command::new("sh")
                        .arg("-c")
                        .arg("echo ready; exec sleep 600")
                        .current_dir(p(HELD_CWD).join("sub")),
                ));
                holders.push(hold_open(&p(HELD_FD).join("sub/deep/file")));
            }
            ReapEvent::Removed(r) => events.push(r.path.clone()),
            _ => {}
        })
        .unwrap();
    let reap = &report.roots[0];
    assert!(reap.errors.is_empty(), "{:?}", reap.errors);
    let want: Vec<PathBuf> = (0..ENTRIES)
        .filter(|i| ![HELD_CWD, HELD_FD].contains(i))
        .map(p)
        .collect();
    let got: Vec<PathBuf> = reap.removed.iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        got,
        want,
        "the rest removed, recorded oldest first; kept: {:?}",
        reap.skipped
            .iter()
            .map(|k| (&k.path, k.reason.to_string()))
            .collect::<Vec<_>>()
    );
    assert_eq!(events, want, "and told in that order");
    for i in [HELD_CWD, HELD_FD] {
        let skip = reap.skipped.iter().find(|s| s.path == p(i)).unwrap();
        assert!(
            matches!(&skip.reason, KeepReason::Changed(what) if !what.is_empty()),
            "app-{i:02}: {:?}",
            skip.reason
        );
        assert_eq!(
            fs::read_to_string(p(i).join("sub/deep/file")).unwrap(),
            format!("entry {i}"),
            "app-{i:02} put back intact"
        );
        assert_eq!(snapshot(&p(i)).len(), 6, "app-{i:02}: every file");
    }
    for i in 0..ENTRIES {
        assert_eq!(
            p(i).exists(),
            [HELD_CWD, HELD_FD].contains(&i),
            "app-{i:02}"
        );
    }
    let left = name_set(root.path());
    assert_eq!(
        left,
        [format!("app-{HELD_CWD:02}"), format!("app-{HELD_FD:02}")].into(),
        "nothing else left, no quarantine"
    );
    drop(holders);
}

/// A small entry is checked and deleted in one walk (listed, every inode
/// checked, then deleted from the listing): a file held deep inside, or a
/// working directory deep inside, keeps every file of the entry, not only
/// the held one; the free twin goes whole.
#[test]
fn a_held_inode_deep_in_a_small_entry_keeps_all_of_it() {
    run_in_pid_namespace(
        "a_held_inode_deep_in_a_small_entry_keeps_all_of_it",
        "inner_small_held",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_small_held() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let p = |n: &str| root.path().join(n);
    for name in ["app-fd", "app-cwd", "app-free"] {
        for d in ["a/b/c/d", "a/x", "e"] {
            fs::create_dir_all(p(name).join(d)).unwrap();
            for f in 0..5 {
                fs::write(p(name).join(d).join(format!("f{f}")), name).unwrap();
            }
        }
    }
    for name in ["app-fd", "app-cwd", "app-free"] {
        for d in ["a/b/c/d", "a/b/c", "a/b", "a/x", "a", "e", ""] {
            age_tree(&p(name).join(d), Duration::from_secs(30 * 86_400));
        }
    }
    let before: BTreeMap<_, _> = ["app-fd", "app-cwd"]
        .iter()
        .map(|n| (*n, snapshot(&p(n))))
        .collect();
    let policy = Policy::builder()
        .matching("app-*")
        .older_than(Duration::from_secs(3600))
        .grace(Duration::ZERO)
        .build()
        .unwrap();
    let opened = sandkeeper_engine::root::Root::open_exact(root.path()).unwrap();
    let mut holders = Vec::new();
    let report = Reaper::new(policy)
        .reap_roots_with(&[opened], &mut |event| {
            // After the scan (all idle), before the claims and moves: only
            // the check in the quarantine can find them.
            if let sandkeeper_engine::reap::ReapEvent::Scanned(_) = event {
                holders.push(spawn_ready(
                    Command::new("sh")
                        .arg("-c")
                        .arg("exec 3<\"$1/a/b/c/d/f4\"; echo ready; exec sleep 600")
                        .arg("sh")
                        .arg(p("app-fd")),
                ));
                holders.push(spawn_ready(
                    Command::new("sh")
                        .arg("-c")
                        .arg("echo ready; exec sleep 600")
                        .current_dir(p("app-cwd").join("a/b/c")),
                ));
            }
        })
        .unwrap();
    assert_eq!(removed_names(&report), ["app-free".to_owned()].into());
    assert!(
        report.roots[0].errors.is_empty(),
        "{:?}",
        report.roots[0].errors
    );
    assert!(!p("app-free").exists());
    for name in ["app-fd", "app-cwd"] {
        assert_eq!(snapshot(&p(name)), before[name], "{name}: every file kept");
        assert_eq!(before[name].len(), 15, "{name}");
    }
    drop(holders);
}

/// Issue 14: a reap that keeps no record per entry (`records(false)`, what
/// `reap` without `--json` or `--verbose` asks for) decides, removes and
/// tells the same, and its counts are the records' sums.
#[test]
fn a_reap_without_records_counts_what_the_records_list() {
    run_in_pid_namespace(
        "a_reap_without_records_counts_what_the_records_list",
        "inner_without_records",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_without_records() {
    if !in_namespace() {
        return;
    }
    let day = Duration::from_secs(86_400);
    let make = |root: &Path| {
        for i in 0..3 {
            Orphan::new(root, &format!("orphan-{i}"))
                .files(1, 1000)
                .age(day * (i + 1))
                .make();
        }
        for i in 0..5 {
            let dir = root.join(format!("app-235-{}", 100 + i));
            fs::create_dir(&dir).unwrap();
            fs::write(dir.join("f"), vec![1u8; 5000]).unwrap();
            age_tree(&dir, day * i);
        }
        fs::create_dir(root.join("unmatched")).unwrap();
    };
    let rules = |b: &mut sandkeeper_engine::reap::PolicyBuilder| {
        b.matching("app-*")
            .keep_last(1)
            .older_than(Duration::from_secs(3600));
    };
    let with = sandbox!().unwrap();
    let without = sandbox!().unwrap();
    make(with.path());
    make(without.path());
    let mut told = Vec::new();
    let mut b = Policy::builder();
    b.grace(Duration::ZERO).records(false);
    rules(&mut b);
    let counted = Reaper::new(b.build().unwrap())
        .reap_roots_with(
            &[sandkeeper_engine::root::Root::open_exact(without.path()).unwrap()],
            &mut |event| match event {
                sandkeeper_engine::reap::ReapEvent::Removed(r) => told.push(r.path.clone()),
                sandkeeper_engine::reap::ReapEvent::Kept(k) => told.push(k.path.clone()),
                _ => {}
            },
        )
        .unwrap();
    let listed = reap(with.path(), rules);
    let (c, l) = (&counted.roots[0], &listed.roots[0]);
    assert!(c.removed.is_empty() && c.skipped.is_empty(), "no records");
    assert_eq!(
        told.len(),
        l.removed.len() + l.skipped.len(),
        "every event still told"
    );
    assert_eq!(c.counts, l.counts);
    assert_eq!(c.freed_bytes, l.freed_bytes);
    assert_eq!(l.counts.removed, l.removed.len() as u64);
    assert_eq!(l.counts.skipped, l.skipped.len() as u64);
    let by_family: u64 = l.counts.removed_by_family.values().map(|t| t.entries).sum();
    assert_eq!(by_family, l.counts.removed);
    let bytes: u64 = l
        .counts
        .removed_by_family
        .values()
        .map(|t| t.disk_bytes)
        .sum();
    assert_eq!(bytes, l.freed_bytes);
    for s in &l.skipped {
        assert!(l.counts.skipped_by_reason[s.reason.as_str()].entries > 0);
    }
    assert_eq!(l.counts.removed, 6, "{:?}", l.counts);
    // The same entries went from both roots.
    let left = |root: &Path| -> BTreeSet<String> {
        fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with(".sandkeeper"))
            .collect()
    };
    assert_eq!(left(with.path()), left(without.path()));
}

/// `app-NNN` under `root`: a directory with a file two levels down whose
/// contents name it; `app-000` the oldest.
fn small_entries(root: &Path, count: usize) -> impl Fn(usize) -> PathBuf + '_ {
    let p = move |i: usize| root.join(format!("app-{i:03}"));
    for i in 0..count {
        let deep = p(i).join("sub");
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("file"), format!("entry {i}")).unwrap();
        let age = Duration::from_secs((1000 - i as u64) * 86_400);
        age_tree(&deep, age);
        age_tree(&p(i), age);
    }
    p
}

/// A process that holds `file` open, once it is ready.
fn hold_open(file: &Path) -> Spawned {
    spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$1\"; echo ready; exec sleep 600")
            .arg("sh")
            .arg(file),
    )
}

/// After a reap of [`small_entries`] `0..entries` of `root` (`p` names
/// them) in which `held` were taken after the scan: every other one was
/// removed, told oldest first (`removed`), and each held one kept as
/// changed, under its name, intact; nothing else, no quarantine, is left.
fn assert_only_held_kept(
    report: &ReapReport,
    removed: &[PathBuf],
    root: &Path,
    p: &dyn Fn(usize) -> PathBuf,
    entries: usize,
    held: &[usize],
) {
    let reap = &report.roots[0];
    assert!(reap.errors.is_empty(), "{:?}", reap.errors);
    let want: Vec<PathBuf> = (0..entries).filter(|i| !held.contains(i)).map(p).collect();
    assert_eq!(removed, want, "the rest removed, told oldest first");
    for &i in held {
        let skip = reap.skipped.iter().find(|s| s.path == p(i)).unwrap();
        assert!(
            matches!(&skip.reason, KeepReason::Changed(what) if !what.is_empty()),
            "app-{i:03}: {:?}",
            skip.reason
        );
        assert_eq!(
            fs::read_to_string(p(i).join("sub/file")).unwrap(),
            format!("entry {i}"),
            "app-{i:03} put back intact"
        );
    }
    let left = name_set(root);
    let want: BTreeSet<String> = held.iter().map(|i| format!("app-{i:03}")).collect();
    assert_eq!(left, want, "nothing else left, no quarantine");
}

/// Issue 14: a stop raised in the middle of a reap of many batches (from
/// `on_event`, once 70 removals were told: the workers are deleting one
/// batch while the next is already moved into the quarantine and checked)
/// loses nothing between the batches. Every entry is either removed and
/// told removed, or under its own name, intact, and told stopped; nothing
/// stays in the quarantine; the removals are told oldest first.
#[test]
fn a_stop_in_the_middle_of_a_reap_of_many_batches_loses_no_entry() {
    run_in_pid_namespace(
        "a_stop_in_the_middle_of_a_reap_of_many_batches_loses_no_entry",
        "inner_stop_mid_reap",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_stop_mid_reap() {
    use sandkeeper_engine::reap::ReapEvent;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    if !in_namespace() {
        return;
    }
    const ENTRIES: usize = 300;
    const STOP_AFTER: usize = 70;
    let root = sandbox!().unwrap();
    let p = small_entries(root.path(), ENTRIES);
    let stop = Arc::new(AtomicBool::new(false));
    let policy = Policy::builder()
        .matching("app-*")
        .older_than(Duration::from_secs(3600))
        .grace(Duration::ZERO)
        .stop_flag(Arc::clone(&stop))
        .build()
        .unwrap();
    let opened = sandkeeper_engine::root::Root::open_exact(root.path()).unwrap();
    let mut removed: Vec<PathBuf> = Vec::new();
    let mut kept: Vec<(PathBuf, KeepReason)> = Vec::new();
    let report = Reaper::new(policy)
        .reap_roots_with(&[opened], &mut |event| match event {
            ReapEvent::Removed(r) => {
                removed.push(r.path.clone());
                if removed.len() == STOP_AFTER {
                    stop.store(true, Ordering::Release);
                }
            }
            ReapEvent::Kept(k) => kept.push((k.path.clone(), k.reason.clone())),
            _ => {}
        })
        .unwrap();
    let reap = &report.roots[0];
    assert!(reap.errors.is_empty(), "{:?}", reap.errors);
    assert!(removed.len() >= STOP_AFTER, "{}", removed.len());
    assert!(!kept.is_empty(), "the stop kept some");
    let mut sorted = removed.clone();
    sorted.sort();
    assert_eq!(removed, sorted, "told oldest first");
    let recorded: Vec<PathBuf> = reap.removed.iter().map(|r| r.path.clone()).collect();
    assert_eq!(recorded, removed, "the report lists what was told");
    for i in 0..ENTRIES {
        let told_removed = removed.contains(&p(i));
        let told_kept: Vec<&KeepReason> = kept
            .iter()
            .filter(|(path, _)| *path == p(i))
            .map(|(_, why)| why)
            .collect();
        match (told_removed, told_kept.as_slice()) {
            (true, []) => assert!(!p(i).exists(), "app-{i:03} told removed, still there"),
            (false, [why]) => {
                assert_eq!(**why, KeepReason::Stopped, "app-{i:03}");
                assert_eq!(
                    fs::read_to_string(p(i).join("sub/file")).unwrap(),
                    format!("entry {i}"),
                    "app-{i:03} told stopped: under its name, intact"
                );
            }
            other => panic!("app-{i:03}: told {other:?}"),
        }
    }
    let left = name_set(root.path());
    let want: BTreeSet<String> = (0..ENTRIES)
        .filter(|&i| !removed.contains(&p(i)))
        .map(|i| format!("app-{i:03}"))
        .collect();
    assert_eq!(left, want, "nothing else left, no quarantine");
}

/// On a host of many processes a batch holds more entries (four per
/// process the last pass read): entries taken after the scan, in the first
/// batch and in the larger ones after it, are each checked after their own
/// move and kept; the rest go, told oldest first.
#[test]
fn a_reap_beside_many_processes_keeps_what_is_held_in_larger_batches() {
    run_in_pid_namespace(
        "a_reap_beside_many_processes_keeps_what_is_held_in_larger_batches",
        "inner_many_processes",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_many_processes() {
    use sandkeeper_engine::reap::ReapEvent;

    if !in_namespace() {
        return;
    }
    const ENTRIES: usize = 700;
    // 64 first, then (about 155 processes) up to 512 a batch: 64-575,
    // 576-699 (fewer with a low descriptor limit).
    const HELD: [usize; 4] = [10, 300, 575, 650];
    let sleepers: Vec<_> = (0..150)
        .map(|_| {
            spawn_ready(
                Command::new("sh")
                    .arg("-c")
                    .arg("echo ready; exec sleep 600"),
            )
        })
        .collect();
    let root = sandbox!().unwrap();
    let p = small_entries(root.path(), ENTRIES);
    let policy = Policy::builder()
        .matching("app-*")
        .older_than(Duration::from_secs(3600))
        .grace(Duration::ZERO)
        .build()
        .unwrap();
    let opened = sandkeeper_engine::root::Root::open_exact(root.path()).unwrap();
    let mut holders = Vec::new();
    let mut removed: Vec<PathBuf> = Vec::new();
    let report = Reaper::new(policy)
        .reap_roots_with(&[opened], &mut |event| match event {
            // After the scan found them idle, before the first claim.
            ReapEvent::Scanned(_) => {
                holders.extend(HELD.iter().map(|&i| hold_open(&p(i).join("sub/file"))));
            }
            ReapEvent::Removed(r) => removed.push(r.path.clone()),
            _ => {}
        })
        .unwrap();
    assert_only_held_kept(&report, &removed, root.path(), &p, ENTRIES, &HELD);
    drop(holders);
    drop(sleepers);
}

/// Issue 14: an entry that becomes held after the scan, while earlier
/// batches are being removed (a process opens a file deep inside one of a
/// later batch, and another makes its working directory inside one of the
/// last batch, when the first removal is told), is kept, intact, under its
/// name: its batch is claimed and moved only after, and checked against a
/// `/proc` pass taken after its own move. One held from before the claims
/// (second batch) is kept too; the rest go, told oldest first.
#[test]
fn an_entry_held_between_batches_is_kept() {
    run_in_pid_namespace(
        "an_entry_held_between_batches_is_kept",
        "inner_held_between_batches",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_held_between_batches() {
    use sandkeeper_engine::reap::ReapEvent;

    if !in_namespace() {
        return;
    }
    const ENTRIES: usize = 200;
    // Batches of 64: 0-63, 64-127, 128-191, 192-199.
    const HELD_EARLY: usize = 100;
    const HELD_FD: usize = 150;
    const HELD_CWD: usize = 195;
    let root = sandbox!().unwrap();
    let p = small_entries(root.path(), ENTRIES);
    let policy = Policy::builder()
        .matching("app-*")
        .older_than(Duration::from_secs(3600))
        .grace(Duration::ZERO)
        .build()
        .unwrap();
    let opened = sandkeeper_engine::root::Root::open_exact(root.path()).unwrap();
    let mut holders = Vec::new();
    let mut removed: Vec<PathBuf> = Vec::new();
    let report = Reaper::new(policy)
        .reap_roots_with(&[opened], &mut |event| match event {
            ReapEvent::Scanned(_) => holders.push(hold_open(&p(HELD_EARLY).join("sub/file"))),
            ReapEvent::Removed(r) => {
                removed.push(r.path.clone());
                if removed.len() == 1 {
                    // The first batch is being removed; the last two are
                    // still under their names.
                    holders.push(hold_open(&p(HELD_FD).join("sub/file")));
                    holders.push(spawn_ready(
                        Command::new("sh")
                            .arg("-c")
                            .arg("echo ready; exec sleep 600")
                            .current_dir(p(HELD_CWD).join("sub")),
                    ));
                }
            }
            _ => {}
        })
        .unwrap();
    let held = [HELD_EARLY, HELD_FD, HELD_CWD];
    assert_only_held_kept(&report, &removed, root.path(), &p, ENTRIES, &held);
    drop(holders);
}

#[test]
fn past_the_name_budget_a_reap_decides_and_removes_as_with_names_held() {
    run_in_pid_namespace(
        "past_the_name_budget_a_reap_decides_and_removes_as_with_names_held",
        "inner_name_budget",
    );
}

/// Issue 25, item 8: past [`Scanner::name_memory`] a scan keeps no names
/// (it lists the root again, window by window, and the reaper loads the
/// names it needs back batch by batch). What it decides and removes must
/// be what it does with every name held: the same families, the same
/// verdicts, the held entry kept, an entry renamed since the scan left
/// alone, the rest gone.
#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_name_budget() {
    if !in_namespace() {
        return;
    }
    let base = sandbox!().unwrap();
    let root = base.path().join("root");
    fs::create_dir(&root).unwrap();
    let p = |n: &str| root.join(n);
    // Random-looking hex (xorshift), as generators make.
    let tail = |i: usize, len: usize| -> String {
        let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b"0123456789abcdef"[(x % 16) as usize])
            })
            .collect()
    };
    let mut names = Vec::new();
    for i in 0..300 {
        names.push(format!("app-235-{}-{}", 10_000 + i * 37, tail(i, 180)));
    }
    for i in 0..120 {
        names.push(format!(
            "build-{:016x}",
            (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ));
    }
    for i in 0..80 {
        names.push(format!("keepme-{}", tail(i + 1000, 200)));
    }
    for n in &names {
        fs::create_dir(p(n)).unwrap();
        fs::write(p(n).join("f"), vec![1u8; 100]).unwrap();
        age_tree(&p(n), Duration::from_secs(10 * 86_400));
    }
    let held = names[17].clone();
    let _cwd = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("echo ready; exec sleep 600")
            .current_dir(p(&held)),
    );
    let policy = |dry_run: bool| {
        let mut b = Policy::builder();
        b.grace(Duration::ZERO)
            .matching("app-*")
            .matching("build-*")
            .older_than(Duration::from_secs(3600))
            .dry_run(dry_run);
        b.build().unwrap()
    };
    let budget = sandkeeper_engine::scan::NAME_MEMORY_MIN;
    let told = |report: &ReapReport| {
        let r = &report.roots[0];
        let removed: BTreeSet<String> = removed_names(report);
        let kept: BTreeSet<(String, String)> = r
            .skipped
            .iter()
            .map(|s| {
                (
                    s.path.file_name().unwrap().to_string_lossy().into_owned(),
                    s.reason.as_str().to_owned(),
                )
            })
            .collect();
        let families: BTreeSet<(String, u64)> = report.scan.roots[0]
            .groups
            .iter()
            .map(|g| (g.pattern.clone(), g.totals.entries))
            .collect();
        (removed, kept, families)
    };
    let held_names = Reaper::new(policy(true)).reap(&[&root]).unwrap();
    let mut lean = Reaper::new(policy(true));
    lean.scanner().name_memory(budget);
    let lean_dry = lean.reap(&[&root]).unwrap();
    let (removed, kept, families) = told(&held_names);
    assert_eq!(
        removed.len(),
        419,
        "all app-* but the held one, all build-*"
    );
    assert!(
        kept.contains(&(held.clone(), "in_use".to_owned())),
        "{kept:?}"
    );
    assert!(families.len() <= 4, "{families:?}");
    assert_eq!(told(&lean_dry), (removed.clone(), kept.clone(), families));

    // A real reap past the budget. One candidate is renamed once the scan
    // is over: its name is never found again, so it is left alone under
    // its new name (with every name held, its claim finds it gone).
    let mut lean = Reaper::new(policy(false));
    lean.scanner().name_memory(budget);
    let renamed = names[200].clone();
    let report = lean
        .reap_roots_with(
            &[sandkeeper_engine::root::Root::open(&root).unwrap()],
            &mut |event| {
                if let sandkeeper_engine::reap::ReapEvent::Scanned(_) = event {
                    fs::rename(p(&renamed), p("renamed-after-the-scan")).unwrap();
                }
            },
        )
        .unwrap();
    assert!(
        report.roots[0].errors.is_empty(),
        "{:?}",
        report.roots[0].errors
    );
    let mut removed = removed;
    removed.remove(&renamed);
    assert_eq!(removed_names(&report), removed);
    let left: BTreeSet<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut want: BTreeSet<String> = names
        .iter()
        .filter(|n| !removed.contains(*n) && **n != renamed)
        .cloned()
        .collect();
    want.insert("renamed-after-the-scan".to_owned());
    assert_eq!(left, want);
    assert!(left.contains(&held));
}

#[test]
fn a_proven_orphan_goes_without_the_grace() {
    run_in_pid_namespace(
        "a_proven_orphan_goes_without_the_grace",
        "inner_proven_orphan",
    );
}

/// Issue 27: a sandbox whose record is there and whose lock is free is
/// dead with certainty (the protocol publishes a directory only once it
/// is locked), so a reap with the default grace takes it at once. The
/// grace still protects a young unmanaged directory, and a record that
/// another user wrote into a directory they could write proves nothing.
#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_proven_orphan() {
    use std::os::unix::fs::PermissionsExt;
    if !in_namespace() {
        return;
    }
    let base = sandbox!().unwrap();
    let root = base.path().join("root");
    fs::create_dir(&root).unwrap();
    let dead = Orphan::new(&root, "vm-run-dead").files(1, 1 << 20).make();
    fs::create_dir(root.join("young-unmanaged")).unwrap();
    // A 0777 directory of ours with a record owned by someone else.
    let planted = root.join("planted");
    fs::create_dir(&planted).unwrap();
    fs::set_permissions(&planted, fs::Permissions::from_mode(0o777)).unwrap();
    let record = LeaseRecord::for_current_process("planted");
    fs::write(
        planted.join(sandkeeper_engine::lease::LEASE_FILE),
        record.to_line(),
    )
    .unwrap();
    rustix::fs::chown(
        planted.join(sandkeeper_engine::lease::LEASE_FILE),
        Some(rustix::process::Uid::from_raw(65534)),
        None,
    )
    .unwrap();
    let live = Lease::create(
        &root,
        "vm-run-live".as_ref(),
        &LeaseRecord::for_current_process("live"),
        0o700,
    )
    .unwrap();

    // The default policy: a grace of 60 s, orphans only.
    let report = Reaper::new(Policy::builder().build().unwrap())
        .reap(&[&root])
        .unwrap();
    assert_eq!(
        removed_names(&report),
        ["vm-run-dead".to_owned()].into(),
        "{:?}",
        report.roots[0].skipped
    );
    assert!(!dead.exists());
    let reason = |name: &str| {
        report.roots[0]
            .skipped
            .iter()
            .find(|s| s.path == root.join(name))
            .map(|s| s.reason.as_str())
    };
    assert_eq!(reason("young-unmanaged"), Some("not_selected"));
    assert_eq!(
        reason("planted"),
        Some("grace"),
        "a planted record proves nothing"
    );
    assert_eq!(reason("vm-run-live"), Some("live"));
    assert!(live.path().is_dir());
}

#[test]
fn creation_raced_by_reaps_loses_no_sandbox() {
    run_in_pid_namespace(
        "creation_raced_by_reaps_loses_no_sandbox",
        "inner_creation_race",
    );
}

/// Issue 27: with proven orphans reaped at once, a sandbox being made must
/// never be taken: creators make, fill, check and drop sandboxes in a loop
/// while reapers with the default grace run beside them.
#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_creation_race() {
    use std::sync::atomic::{AtomicBool, Ordering};
    if !in_namespace() {
        return;
    }
    let base = sandbox!().unwrap();
    let root = base.path().join("root");
    fs::create_dir(&root).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reapers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut reaps = 0;
                    while !done.load(Ordering::Relaxed) {
                        Reaper::new(Policy::builder().build().unwrap())
                            .reap(&[&root])
                            .unwrap();
                        reaps += 1;
                    }
                    reaps
                })
            })
            .collect();
        for i in 0..2000 {
            let sandbox = sandkeeper_engine::Sandbox::builder()
                .root(&root)
                .tag("race")
                .create()
                .unwrap();
            fs::write(sandbox.join("data"), i.to_string()).unwrap();
            assert_eq!(
                fs::read_to_string(sandbox.join("data")).unwrap(),
                i.to_string(),
                "sandbox {i} was taken while held"
            );
            sandbox.close().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        let reaps: usize = reapers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(reaps > 10, "the reapers ran ({reaps} reaps)");
    });
}
