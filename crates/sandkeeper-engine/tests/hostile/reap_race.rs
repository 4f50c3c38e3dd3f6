//! Finding 6: the re-check before removal must be per entry. The reaper
//! used to lock a batch of 64 entries, take one `/proc` pass, then remove
//! them one after another: a process that started using entry N while
//! entries before it were being removed lost its files. Now each entry is
//! moved into the quarantine first (no new path lookup reaches it), then
//! checked against a pass taken after that move, and put back if held.
//!
//! And what a killed reaper left *pending* in the quarantine (moved in,
//! never checked) is checked again before anything deletes it.
//!
//! Both run as root in a private PID namespace, where every process can be
//! inspected; the attacker is uid 65534, timed by inotify.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::mem::MaybeUninit;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rustix::fs::inotify;
use sandkeeper_engine::reap::{KeepReason, Policy, ReapReport, Reaper};
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::SETPRIV_NOBODY;
use sandkeeper_testkit::process::{spawn_ready, test_command, Helper};
use sandkeeper_testkit::scratch::Scratch;
use sandkeeper_testkit::tree::{age_tree, name_set};

/// Entries in the race: more than one batch (64) of the reaper.
const ENTRIES: usize = 100;
/// Small files per entry besides `file`, so that removing one takes a while.
const FILES: usize = 20;
/// Entries that are plain files, not directories (a file can be held open
/// too): one in each batch.
const FILE_ENTRIES: [usize; 2] = [2, 65];

fn name(i: usize) -> String {
    format!("app-{i:03}")
}

fn reap(root: &Path, glob: &str) -> ReapReport {
    let policy = Policy::builder()
        .matching(glob)
        .grace(Duration::ZERO)
        .build()
        .unwrap();
    Reaper::new(policy).reap(&[root]).unwrap()
}

/// The attacker, run as uid 65534: watches the root for the moment the
/// entry `SK_RACE_WATCH` leaves its name (the reaper moving it into the
/// quarantine, or, in the old code, removing it), then opens each entry of `SK_RACE_TARGETS`
/// (`:`-separated; `file` inside a directory) and holds what it could
/// open. With `SK_RACE_SQUAT=NAME` it then takes the name `NAME` in the
/// root (the parent of `SK_RACE_WATCH`) the moment it is free: it retries
/// `mkdir` (failing with `EEXIST` while the entry still has the name), for
/// 20 s at most, so the name is taken within microseconds of the move.
#[test]
#[ignore = "attacker process entry point, run by the race test"]
fn attacker_main() {
    let Some(watch) = std::env::var_os("SK_RACE_WATCH") else {
        return;
    };
    let watch = PathBuf::from(watch);
    let targets = std::env::var("SK_RACE_TARGETS").unwrap();
    let squat = std::env::var_os("SK_RACE_SQUAT");
    // The watch is on the root, not on the entry: a watch inside an entry
    // is a use of it (the entry would be kept for the watch alone).
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(
        &fd,
        watch.parent().unwrap(),
        inotify::WatchFlags::MOVED_FROM,
    )
    .unwrap();
    let mut out = std::io::stdout();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let mut events = inotify::Reader::new(&fd, &mut buf);
    // Blocks until the watched entry leaves its name: the reaper is at it.
    while let Ok(event) = events.next() {
        if event
            .file_name()
            .is_some_and(|n| n.to_bytes() == watch.file_name().unwrap().as_encoded_bytes())
        {
            break;
        }
    }
    // A working directory: a chdir opens nothing (no fanotify event),
    // only a re-read of the working directories after the moves sees it.
    if let Some(dir) = std::env::var_os("SK_RACE_CHDIR") {
        match std::env::set_current_dir(&dir) {
            Ok(()) => writeln!(out, "HELD {}", Path::new(&dir).display()).unwrap(),
            Err(e) => writeln!(out, "MISSED {} {e}", Path::new(&dir).display()).unwrap(),
        }
    }
    let mut held = Vec::new();
    for target in targets.split(':').filter(|t| !t.is_empty()) {
        let target = Path::new(target);
        let file = match target.is_dir() {
            true => target.join("file"),
            false => target.to_owned(),
        };
        match fs::File::open(file) {
            Ok(f) => {
                held.push(f);
                writeln!(out, "HELD {}", target.display()).unwrap();
            }
            Err(e) => writeln!(out, "MISSED {} {e}", target.display()).unwrap(),
        }
    }
    out.flush().unwrap();
    if let Some(squat) = squat {
        let name = watch.parent().unwrap().join(&squat);
        // The entry is away from its name for a few milliseconds only:
        // wait for it to leave, then take the name at once.
        while let Ok(event) = events.next() {
            if event
                .file_name()
                .is_some_and(|n| n.to_bytes() == squat.as_encoded_bytes())
            {
                break;
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            match fs::create_dir(&name) {
                Ok(()) => break writeln!(out, "SQUAT-OK").unwrap(),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => break writeln!(out, "SQUAT-FAILED {e}").unwrap(),
            }
            if std::time::Instant::now() > deadline {
                break writeln!(out, "SQUAT-FAILED timed out").unwrap();
            }
        }
    }
    writeln!(out, "DONE").unwrap();
    out.flush().unwrap();
    // Hold until killed (the test kills it; bounded all the same).
    std::thread::sleep(Duration::from_secs(120));
    drop(held);
}

/// Fills `root` with [`ENTRIES`] entries, `app-000` the oldest: directories
/// holding `file` (`entry <i>`) and [`FILES`] more, or, for
/// [`FILE_ENTRIES`], a plain file `entry <i>`.
fn populate(root: &Path) {
    let p = |i: usize| root.join(name(i));
    for i in 0..ENTRIES {
        let age = Duration::from_secs(3600 * (1000 - i as u64));
        if FILE_ENTRIES.contains(&i) {
            fs::write(p(i), format!("entry {i}")).unwrap();
            fs::set_permissions(p(i), fs::Permissions::from_mode(0o644)).unwrap();
            let when = std::time::SystemTime::now() - age;
            fs::File::options()
                .write(true)
                .open(p(i))
                .unwrap()
                .set_times(fs::FileTimes::new().set_modified(when).set_accessed(when))
                .unwrap();
            continue;
        }
        fs::create_dir(p(i)).unwrap();
        fs::set_permissions(p(i), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(p(i).join("file"), format!("entry {i}")).unwrap();
        for f in 0..FILES {
            fs::write(p(i).join(format!("f{f}")), b"x").unwrap();
        }
        age_tree(&p(i), age);
    }
}

/// Whether `dir` (an entry made by [`populate`], wherever it is now) still
/// has everything entry `i` had.
fn intact(dir: &Path, i: usize) -> bool {
    let file = match FILE_ENTRIES.contains(&i) {
        true => dir.to_owned(),
        false => dir.join("file"),
    };
    fs::read_to_string(file).ok() == Some(format!("entry {i}"))
        && (FILE_ENTRIES.contains(&i) || fs::read_dir(dir).unwrap().count() == FILES + 1)
}

/// The attacker process (uid 65534), killed on drop.
struct Attacker {
    helper: Helper,
}

impl Attacker {
    /// Starts [`attacker_main`] as uid 65534 with `env`, and waits until it
    /// watches.
    fn start(env: &[(&str, &OsStr)]) -> Attacker {
        let mut cmd = test_command(&SETPRIV_NOBODY, "reap_race::attacker_main");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let attacker = Attacker {
            helper: Helper::spawn(cmd),
        };
        attacker.helper.lines_until("READY");
        attacker
    }

    /// What it reported holding, until it is done.
    fn held(&self) -> (BTreeSet<PathBuf>, Vec<String>) {
        let lines = self.helper.lines_until("DONE");
        let held = lines
            .iter()
            .filter_map(|l| Some(PathBuf::from(&l[l.find("HELD ")? + 5..])))
            .collect();
        (held, lines)
    }
}

#[test]
fn an_entry_used_during_the_reap_is_kept() {
    run_in_pid_namespace(
        "an_entry_used_during_the_reap_is_kept",
        "reap_race::inner_used_during_the_reap",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_used_during_the_reap() {
    if !in_namespace() {
        return;
    }
    let root = Scratch::reachable_by_others("reap-race").with_mode(0o755);
    let p = |i: usize| root.path().join(name(i));
    populate(root.path());
    // The attacker starts using entries of the same batch of 64 as app-000
    // (app-001, the file app-002, app-030, app-063) and of the next batch
    // (app-064, the file app-065) as soon as app-000 is being emptied. A
    // per-batch check (the old code) had already passed them all, and
    // removed those of its batch while held; now those are already in the
    // quarantine (the attacker cannot reach them), the others are checked
    // after their own move and kept.
    let targets: Vec<String> = [1usize, 2, 30, 63, 64, 65]
        .iter()
        .map(|&i| p(i).to_str().unwrap().to_owned())
        .collect();
    let attacker = Attacker::start(&[
        ("SK_RACE_WATCH", p(0).as_os_str()),
        ("SK_RACE_TARGETS", OsStr::new(&targets.join(":"))),
    ]);

    let report = reap(root.path(), "app-*");

    let (held, lines) = attacker.held();
    assert!(
        held.contains(&p(64)) && held.contains(&p(65)),
        "the attack did not land: app-064 or app-065 was already gone ({lines:?})"
    );
    for path in &held {
        let i: usize = path.to_str().unwrap()[path.to_str().unwrap().len() - 3..]
            .parse()
            .unwrap();
        assert!(
            intact(path, i),
            "{} was in use by the attacker and lost its files",
            path.display()
        );
        let skipped = report.roots[0]
            .skipped
            .iter()
            .find(|s| &s.path == path)
            .unwrap_or_else(|| panic!("{} is not reported as kept", path.display()));
        let pid = attacker.helper.pid().to_string();
        assert!(
            matches!(&skipped.reason, KeepReason::Changed(why) if why.contains(&pid)),
            "{:?}",
            skipped.reason
        );
    }
    only_held_left_until_let_go(&root, &held, attacker, &report);
}

/// Everything but what the attacker `held` went; once the attacker is
/// gone, the next reap takes the rest.
fn only_held_left_until_let_go(
    root: &Scratch,
    held: &BTreeSet<PathBuf>,
    attacker: Attacker,
    report: &ReapReport,
) {
    let left: BTreeSet<PathBuf> = name_set(root.path())
        .into_iter()
        .map(|n| root.path().join(n))
        .collect();
    assert_eq!(&left, held, "{:?}", report.roots[0].errors);
    drop(attacker);
    let again = reap(root.path(), "app-*");
    assert!(name_set(root.path()).is_empty(), "{:?}", again.roots[0]);
}

#[test]
fn an_entry_entered_during_the_reap_is_kept() {
    run_in_pid_namespace(
        "an_entry_entered_during_the_reap_is_kept",
        "reap_race::inner_entered_during_the_reap",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_entered_during_the_reap() {
    if !in_namespace() {
        return;
    }
    let root = Scratch::reachable_by_others("reap-cwd").with_mode(0o755);
    let p = |i: usize| root.path().join(name(i));
    populate(root.path());
    // As soon as app-000 leaves its name (the reap's pass is taken, its
    // first group moved), the attacker makes app-080 its working directory
    // and opens nothing: as root the reaper checks later groups against
    // that earlier pass, fanotify (which a chdir does not wake) and the
    // working directories read again after each group's moves.
    let attacker = Attacker::start(&[
        ("SK_RACE_WATCH", p(0).as_os_str()),
        ("SK_RACE_TARGETS", OsStr::new("")),
        ("SK_RACE_CHDIR", p(80).as_os_str()),
    ]);
    let report = reap(root.path(), "app-*");
    let (held, lines) = attacker.held();
    assert!(held.contains(&p(80)), "the attack did not land: {lines:?}");
    assert!(
        intact(&p(80), 80),
        "app-080 lost its files: {:?}",
        report.roots[0]
    );
    assert!(
        report.roots[0].skipped.iter().any(|s| s.path == p(80)),
        "app-080 is not reported as kept: {:?}",
        report.roots[0]
    );
    only_held_left_until_let_go(&root, &held, attacker, &report);
}

#[test]
fn a_held_entry_whose_name_was_taken_gets_it_back() {
    run_in_pid_namespace(
        "a_held_entry_whose_name_was_taken_gets_it_back",
        "reap_race::inner_name_taken",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_name_taken() {
    if !in_namespace() {
        return;
    }
    // The name is free for a few milliseconds only: the attacker may lose
    // the race to the put-back (then nothing is to be seen); rounds until
    // it wins.
    for round in 1..=ROUNDS {
        // A sticky world-writable root, like /tmp: the attacker can make
        // names.
        let root = Scratch::reachable_by_others("reap-squat").with_mode(0o1777);
        let p = |i: usize| root.path().join(name(i));
        populate(root.path());
        // It holds app-099 after the reap has begun, and takes its name as
        // soon as it leaves it.
        let attacker = Attacker::start(&[
            ("SK_RACE_WATCH", p(0).as_os_str()),
            ("SK_RACE_TARGETS", p(99).as_os_str()),
            ("SK_RACE_SQUAT", OsStr::new(&name(99))),
        ]);

        let report = reap(root.path(), "app-*");

        let (held, lines) = attacker.held();
        assert!(held.contains(&p(99)), "the attack did not land: {lines:?}");
        if !lines.iter().any(|l| l.contains("SQUAT-OK")) {
            eprintln!("round {round}: the put-back won the race ({lines:?})");
            drop(attacker);
            reap(root.path(), "app-*");
            continue;
        }
        return name_taken_checks(&root, attacker, &report);
    }
    panic!("the attacker never took the name in {ROUNDS} rounds");
}

/// Rounds a race test may take to be hit.
const ROUNDS: usize = 20;

/// The checks of [`inner_name_taken`] once the attacker took the name.
fn name_taken_checks(root: &Scratch, attacker: Attacker, report: &ReapReport) {
    let p = |i: usize| root.path().join(name(i));
    // The held entry got its name back (an exchange with the squatter's
    // directory), intact; the squatter's directory is beside it, as it
    // was; nothing waits in the quarantine, and the report says so.
    assert!(intact(&p(99), 99), "{:?}", report.roots[0]);
    let taken: Vec<String> = name_set(root.path())
        .into_iter()
        .filter(|n| n.starts_with("app-099.taken-during-reap-"))
        .collect();
    assert_eq!(taken.len(), 1, "{:?}", name_set(root.path()));
    let beside = root.path().join(&taken[0]);
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&fs::symlink_metadata(&beside).unwrap()),
        65534
    );
    let skipped = report.roots[0]
        .skipped
        .iter()
        .find(|s| s.path == p(99))
        .expect("app-099 is reported");
    assert!(
        matches!(&skipped.reason, KeepReason::Changed(why)
            if why.contains("name was taken") && why.contains("uid 65534")
                && why.contains(beside.to_str().unwrap())),
        "{:?}",
        skipped.reason
    );
    assert_eq!(name_set(root.path()), [name(99), taken[0].clone()].into());

    // Its holder gone, the next reap removes it (and the squatter's
    // directory, which the rule matches).
    drop(attacker);
    let again = reap(root.path(), "app-*");
    assert!(name_set(root.path()).is_empty(), "{:?}", again.roots[0]);
}

/// A pending name for `original` as the remover writes it (see the
/// quarantine's module docs): `pending-<unique>.<hex of the name>`.
fn pending(unique: &str, original: Option<&str>) -> String {
    match original {
        Some(name) => {
            let hex: String = name.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
            format!("pending-{unique}.{hex}")
        }
        None => format!("pending-{unique}"),
    }
}

#[test]
fn a_killed_reapers_pending_entry_in_use_is_not_deleted() {
    run_in_pid_namespace(
        "a_killed_reapers_pending_entry_in_use_is_not_deleted",
        "reap_race::inner_pending_leftover_in_use",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_pending_leftover_in_use() {
    if !in_namespace() {
        return;
    }
    let root = Scratch::reachable_by_others("reap-pending").with_mode(0o755);
    // What a reaper killed between its moves and its checks leaves.
    let trash = root.path().join(".sandkeeper-trash");
    fs::create_dir(&trash).unwrap();
    fs::set_permissions(&trash, fs::Permissions::from_mode(0o700)).unwrap();
    let make = |name: &str, content: &str| {
        let dir = trash.join(name);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("file"), content).unwrap();
        dir
    };
    let held = make(&pending("1-0-0-00000000000000a1", Some("app-held")), "held");
    let taken = make(
        &pending("1-0-0-00000000000000a2", Some("app-taken")),
        "taken",
    );
    make(&pending("1-0-0-00000000000000a3", Some("app-free")), "free");
    make(&pending("1-0-0-00000000000000a4", None), "nameless");
    make("condemned-1-0-0-00000000000000a5", "condemned");
    // One an earlier reap kept on purpose (in use then, its name could
    // not be given back): no reaper was killed for it.
    make("pending-kept-1-0-0-00000000000000a6", "kept");
    // And what a reaper killed between its exchange and its move-out
    // leaves: the newcomer that had taken `app-back`'s name, under a
    // returning name; `app-back` is home already.
    let hex: String = "app-back".bytes().map(|b| format!("{b:02x}")).collect();
    make(&format!("returning-00000000000000a7.{hex}"), "newcomer");
    fs::create_dir(root.path().join("app-back")).unwrap();
    fs::create_dir(root.path().join("app-taken")).unwrap();
    let hold = |dir: &Path| {
        spawn_ready(
            Command::new("sh")
                .arg("-c")
                .arg("exec 3<\"$1/file\"; echo ready; exec sleep 120")
                .arg("sh")
                .arg(dir),
        )
    };
    let holder_held = hold(&held);
    let holder_taken = hold(&taken);

    // Nothing matches: only the quarantine's leftovers are dealt with.
    let report = reap(root.path(), "nomatch-*");

    assert_eq!(
        fs::read_to_string(root.path().join("app-held/file"))
            .ok()
            .as_deref(),
        Some("held"),
        "a held pending entry whose name is free is put back intact: {:?}",
        report.roots[0]
    );
    assert_eq!(
        fs::read_to_string(root.path().join("app-taken/file"))
            .ok()
            .as_deref(),
        Some("taken"),
        "a held pending entry whose name is taken gets it back, intact"
    );
    let beside = |name: &str| {
        let found: Vec<String> = name_set(root.path())
            .into_iter()
            .filter(|n| n.starts_with(&format!("{name}.taken-during-reap-")))
            .collect();
        assert_eq!(found.len(), 1, "{:?}", name_set(root.path()));
        found[0].clone()
    };
    let (taken_by, back_by) = (beside("app-taken"), beside("app-back"));
    assert!(root.path().join(&taken_by).is_dir(), "the newcomer is kept");
    assert_eq!(
        fs::read_to_string(root.path().join(&back_by).join("file")).unwrap(),
        "newcomer",
        "a returning leftover is moved out, never deleted"
    );
    assert!(
        !trash.exists(),
        "the free, nameless, kept and condemned leftovers are gone: {:?}",
        name_set(&trash)
    );
    let mut want: BTreeSet<String> = ["app-back", "app-held", "app-taken"]
        .map(String::from)
        .into();
    want.extend([taken_by.clone(), back_by.clone()]);
    assert_eq!(name_set(root.path()), want);
    let kept: BTreeSet<_> = report.roots[0]
        .skipped
        .iter()
        .filter(
            |s| matches!(&s.reason, KeepReason::Changed(why) if why.contains("interrupted reap")),
        )
        .map(|s| s.path.clone())
        .collect();
    assert_eq!(
        kept,
        [root.path().join("app-held"), root.path().join("app-taken")].into(),
        "{:?}",
        report.roots[0].skipped
    );
    assert!(
        report.roots[0]
            .skipped
            .iter()
            .any(|s| s.path == root.path().join(&back_by)
                && matches!(&s.reason, KeepReason::Changed(why) if why.contains("moved back out"))),
        "{:?}",
        report.roots[0].skipped
    );
    // What is told as a killed reaper's (a directory and its file each):
    // the free, nameless and condemned ones; the one kept on purpose is
    // told apart.
    assert_eq!(
        (
            report.roots[0].quarantine_finished,
            report.roots[0].quarantine_rechecked
        ),
        (6, 2)
    );
    drop((holder_held, holder_taken));
}

/// The remover's half of the above, without a race: an entry restored
/// while its name is taken gets it back (an exchange), the newcomer is
/// kept beside it, and nothing stays pending for a later reap to delete
/// (see `hostile/restore.rs` for the attacker's kinds of newcomer).
#[test]
fn restoring_onto_a_taken_name_gives_the_entry_its_name_back() {
    use sandkeeper_engine::remove::{pending_leftovers, quarantine_entry, RemoveOptions, Restore};

    let root = sandkeeper_engine::sandbox!().unwrap();
    let entry = root.path().join("app-1");
    fs::create_dir(&entry).unwrap();
    fs::write(entry.join("file"), "mine").unwrap();
    let dir = fs::File::open(root.path()).unwrap();
    let fd = std::os::fd::AsFd::as_fd(&dir);
    let opts = RemoveOptions::new();

    let held = quarantine_entry(fd, OsStr::new("app-1"), &opts).unwrap();
    let in_quarantine = root.path().join(held.path_in_parent());
    assert!(!entry.exists() && in_quarantine.join("file").exists());
    fs::create_dir(&entry).unwrap(); // someone takes the name meanwhile
    fs::write(entry.join("file"), "theirs").unwrap();
    let Restore::Exchanged { newcomer, .. } = held.restore() else {
        panic!("not exchanged");
    };
    assert_eq!(fs::read_to_string(entry.join("file")).unwrap(), "mine");
    assert_eq!(
        fs::read_to_string(root.path().join(&newcomer).join("file")).unwrap(),
        "theirs"
    );
    assert!(pending_leftovers(fd, &opts).unwrap().is_empty());
    assert_eq!(
        name_set(root.path()),
        ["app-1".to_owned(), newcomer.to_string_lossy().into_owned()].into()
    );
}
