//! The confined remover (issue 3): adversarial tests.
//!
//! Tests that need root (mounts, other users, immutable files, device
//! nodes) run for real as root and skip with a printed reason only when not
//! root and `CI` is unset. Every scratch directory lives under
//! `CARGO_TARGET_TMPDIR` and is removed by the remover itself; mounts and
//! flags are undone by guards declared after the scratch directory.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags, RenameFlags};
use sandkeeper_engine::remove::{
    remove_entry, remove_path, Errno, LeftReason, Op, RemovalReport, RemoveOptions,
};
use sandkeeper_engine::ErrorKind;
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::privilege::{as_nobody, is_root, require_root};
use sandkeeper_testkit::process::{open_fds, test_command, within, Stop};
use sandkeeper_testkit::scratch;
use sandkeeper_testkit::scratch::Scratch;
use sandkeeper_testkit::tree::{
    chardev, chmod, crude_rm, fifo, generate, identity, mkdirs, names, open_dir, outside_fixture,
    snapshot, socket, symlink, write, Immutable,
};

fn sequential() -> RemoveOptions {
    let mut options = RemoveOptions::new();
    options.threads(1);
    options
}

fn parallel() -> RemoveOptions {
    let mut options = RemoveOptions::new();
    options.threads(2);
    options
}

fn remove(scratch: &Scratch, name: &str, options: &RemoveOptions) -> RemovalReport {
    remove_entry(scratch.fd(), OsStr::new(name), options)
        .unwrap_or_else(|e| panic!("remove {name}: {e}"))
}

fn left_of(report: &RemovalReport) -> Vec<(PathBuf, LeftReason)> {
    report
        .left()
        .iter()
        .map(|l| (l.path().to_path_buf(), l.reason()))
        .collect()
}

// ---------------------------------------------------------------- basics

#[test]
fn removes_a_tree_and_counts_what_it_removed() {
    let scratch = scratch!("basic");
    let tree = scratch.join("tree");
    write(&tree.join("f0"), vec![b'x'; 8192]);
    write(&tree.join("d1/d2/f"), "hello");
    mkdirs(&tree.join("d1/empty"));
    fs::hard_link(tree.join("f0"), tree.join("d1/hardlink")).unwrap();
    symlink("nowhere", &tree.join("d1/dangling"));
    symlink("d1", &tree.join("sl"));

    let report = remove(&scratch, "tree", sequential().count_bytes(true));

    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.removed().dirs(), 4, "tree, d1, d1/d2, d1/empty");
    assert_eq!(report.removed().files(), 5);
    assert_eq!(report.removed().entries(), 9);
    // The file with a second link is counted once, when its last link goes.
    let bytes = report.removed().bytes().unwrap();
    assert!((8192..8192 + 6 * 4096).contains(&bytes), "{report:?}");
    assert_eq!(report.remnant(), None);
    assert!(
        scratch.names().is_empty(),
        "nothing left, not even the quarantine: {:?}",
        scratch.names()
    );
}

#[test]
fn sequential_and_parallel_removals_agree() {
    let scratch = scratch!("agree");
    let a = generate(&scratch.join("a"), 7, 300, 2000, 6);
    let b = generate(&scratch.join("b"), 7, 300, 2000, 6);
    assert_eq!(a, b);

    let one = remove(&scratch, "a", sequential().count_bytes(true));
    let two = remove(&scratch, "b", parallel().count_bytes(true));

    for report in [&one, &two] {
        assert!(report.is_complete(), "{report:?}");
        assert_eq!(report.removed().dirs(), a.dirs);
        assert_eq!(report.removed().files(), a.files);
    }
    assert_eq!(one.removed(), two.removed(), "bytes too");
    assert!(one.removed().bytes().unwrap() > 0);
    assert!(scratch.names().is_empty());
}

#[test]
fn remove_path_removes_and_reports_missing_entries() {
    let scratch = scratch!("path");
    write(&scratch.join("x/y/z"), "1");
    let report = remove_path(&scratch.join("x/"), &sequential()).unwrap();
    assert!(report.is_complete());
    assert_eq!(report.removed().entries(), 3);

    let err = remove_path(&scratch.join("x"), &sequential()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert_eq!(err.io_error().unwrap().kind(), io::ErrorKind::NotFound);
    assert_eq!(io::Error::from(err).kind(), io::ErrorKind::NotFound);

    let err = remove_entry(scratch.fd(), OsStr::new("nothing"), &sequential()).unwrap_err();
    assert_eq!(err.io_error().unwrap().kind(), io::ErrorKind::NotFound);
    assert_eq!(err.path(), Some(Path::new("nothing")));
}

#[test]
fn invalid_names_are_rejected() {
    let scratch = scratch!("names-rejected");
    // The remover's own quarantines (its directories, mode 0700) are not
    // entries; a look-alike of another mode is (see below).
    for own in [".sandkeeper-trash", ".sandkeeper-trash-0-00000000000000aa"] {
        mkdirs(&scratch.join(own));
        chmod(&scratch.join(own), 0o700);
    }
    for name in [
        "",
        ".",
        "..",
        "a/b",
        ".sandkeeper-trash",
        ".sandkeeper-trash-0-00000000000000aa",
    ] {
        let err = remove_entry(scratch.fd(), OsStr::new(name), &sequential()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{name:?}: {err}");
    }
    for path in ["/", "a/.", "a/.."] {
        let err = remove_path(Path::new(path), &sequential()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{path:?}");
    }
    // A look-alike the remover did not make (mode 0755) is an entry.
    mkdirs(&scratch.join(".sandkeeper-trash-0-00000000000000bb/x"));
    let report = remove_entry(
        scratch.fd(),
        OsStr::new(".sandkeeper-trash-0-00000000000000bb"),
        &sequential(),
    )
    .unwrap();
    assert!(report.is_complete());
    assert!(!scratch
        .join(".sandkeeper-trash-0-00000000000000bb")
        .exists());
}

#[test]
fn non_directory_entries_are_unlinked_as_names() {
    let scratch = scratch!("nondir");
    let outside = scratch.join("outside");
    let before = outside_fixture(&outside);
    write(&scratch.join("file"), "data");
    symlink(&outside, &scratch.join("link-to-dir"));
    symlink(outside.join("precious.txt"), &scratch.join("link-to-file"));
    fifo(&scratch.join("fifo"));

    for (name, options) in [
        ("file", sequential()),
        ("link-to-dir", parallel()),
        ("link-to-file", sequential()),
    ] {
        let report = remove(&scratch, name, &options);
        assert!(report.is_complete());
        assert_eq!((report.removed().files(), report.removed().dirs()), (1, 0));
    }
    // With an identity check: a FIFO is checked by lstat and never opened.
    let (dev, ino) = identity(&scratch.join("fifo"));
    let report = within(Duration::from_secs(30), {
        let parent = open_dir(scratch.path());
        move || {
            remove_entry(
                parent.as_fd(),
                OsStr::new("fifo"),
                RemoveOptions::new().expect(dev, ino),
            )
        }
    })
    .unwrap();
    assert!(report.is_complete());

    assert_eq!(snapshot(&outside), before);
    assert_eq!(scratch.names(), vec![OsString::from("outside")]);
}

#[test]
fn the_expected_inode_or_nothing() {
    let scratch = scratch!("expect");
    write(&scratch.join("dir/file"), "keep me");
    write(&scratch.join("plain"), "keep me too");
    let (dev, ino) = identity(&scratch.join("dir"));
    let (pdev, pino) = identity(&scratch.join("plain"));

    for (name, wrong) in [("dir", (dev, ino + 1)), ("plain", (pdev, pino + 1))] {
        let err = remove_entry(
            scratch.fd(),
            OsStr::new(name),
            RemoveOptions::new().expect(wrong.0, wrong.1),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Removal, "{name}: {err}");
    }
    assert_eq!(
        fs::read_to_string(scratch.join("dir/file")).unwrap(),
        "keep me"
    );
    assert_eq!(
        fs::read_to_string(scratch.join("plain")).unwrap(),
        "keep me too"
    );
    assert_eq!(
        scratch.names(),
        vec![OsString::from("dir"), OsString::from("plain")]
    );

    let report = remove_entry(
        scratch.fd(),
        OsStr::new("dir"),
        RemoveOptions::new().expect(dev, ino),
    )
    .unwrap();
    assert!(report.is_complete());
    let report = remove_entry(
        scratch.fd(),
        OsStr::new("plain"),
        RemoveOptions::new().expect(pdev, pino),
    )
    .unwrap();
    assert!(report.is_complete());
    assert!(scratch.names().is_empty(), "{:?}", scratch.names());
}

// ---------------------------------------------------------- no escaping

#[test]
fn symlinks_to_the_outside_are_unlinked_not_followed() {
    let scratch = scratch!("symlinks");
    let outside = scratch.join("outside");
    let before = outside_fixture(&outside);
    let tree = scratch.join("tree");
    let build = || {
        mkdirs(&tree.join("a/b"));
        symlink(&outside, &tree.join("abs-dir"));
        symlink("../outside", &tree.join("rel-dir"));
        symlink(outside.join("precious.txt"), &tree.join("a/file-link"));
        symlink("../../../outside/sub", &tree.join("a/b/up-and-over"));
        symlink("/", &tree.join("a/b/root"));
        symlink(".", &tree.join("a/self"));
    };
    for options in [sequential(), parallel()] {
        build();
        let report = remove(&scratch, "tree", &options);
        assert!(report.is_complete(), "{report:?}");
        assert_eq!(report.removed().files(), 6);
        assert_eq!(report.removed().dirs(), 3);
        assert_eq!(snapshot(&outside), before);
    }
    assert_eq!(scratch.names(), ["outside"]);
}

#[test]
fn fifos_sockets_and_devices_are_never_opened() {
    let scratch = scratch!("special");
    let tree = scratch.join("tree");
    mkdirs(&tree.join("d"));
    fifo(&tree.join("fifo"));
    fifo(&tree.join("d/fifo2"));
    socket(&tree.join("d/sock"));
    let mut expected_files = 3;
    if is_root() {
        chardev(&tree.join("d/null"));
        expected_files += 1;
    } else {
        eprintln!("fifos_sockets_and_devices_are_never_opened: no device node (not root)");
    }
    let parent = open_dir(scratch.path());
    let report = within(Duration::from_secs(30), move || {
        remove_entry(parent.as_fd(), OsStr::new("tree"), &RemoveOptions::new()).unwrap()
    });
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.removed().files(), expected_files);
    assert!(scratch.names().is_empty());
}

#[test]
fn mounts_inside_are_neither_entered_nor_removed() {
    if !require_root("mounts_inside_are_neither_entered_nor_removed") {
        return;
    }
    let scratch = scratch!("mounts");
    let outside = scratch.join("outside");
    let before = outside_fixture(&outside);
    let tree = scratch.join("tree");
    // A bind mount of the same filesystem (same st_dev), a tmpfs, and a bind
    // mount under a name that is not UTF-8 (reported byte for byte).
    let odd: &[u8] = b"odd-\xff\xfe\nname";
    let odd_dir = tree.join("c").join(OsStr::from_bytes(odd));
    for dir in [tree.join("a/bind"), tree.join("b/tmp"), odd_dir.clone()] {
        mkdirs(&dir);
    }
    write(&tree.join("a/sibling"), "goes");
    generate(&tree.join("a/bulk"), 3, 50, 300, 4);
    generate(&tree.join("b/bulk"), 4, 50, 300, 4);
    let _bind = Mount::bind(&outside, &tree.join("a/bind"));
    let _tmpfs = Mount::tmpfs(&tree.join("b/tmp"), "8m");
    write(&tree.join("b/tmp/in-tmpfs"), "mounted content");
    let _odd = Mount::bind(&outside, &odd_dir);

    for options in [parallel(), sequential()] {
        let report = remove(&scratch, "tree", &options);
        assert!(!report.is_complete());
        let mut want = vec![
            (PathBuf::from("tree/a/bind"), LeftReason::MountPoint),
            (PathBuf::from("tree/b/tmp"), LeftReason::MountPoint),
            (
                Path::new("tree/c").join(OsStr::from_bytes(odd)),
                LeftReason::MountPoint,
            ),
        ];
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(left_of(&report), want);
        assert_eq!(report.left()[2].path().as_os_str().as_bytes(), {
            let mut p = b"tree/c/".to_vec();
            p.extend_from_slice(odd);
            p
        });
        assert_eq!(
            report.remnant(),
            Some(Path::new("tree")),
            "put back in place"
        );
        assert_eq!(snapshot(&outside), before);
        assert_eq!(
            fs::read_to_string(tree.join("b/tmp/in-tmpfs")).unwrap(),
            "mounted content"
        );
        // Only the paths down to the mounts are left.
        assert_eq!(names(&tree), ["a", "b", "c"]);
        assert_eq!(names(&tree.join("a")), ["bind"]);
        assert_eq!(names(&tree.join("b")), ["tmp"]);
        assert_eq!(
            scratch.names(),
            ["outside", "tree"],
            "the remnant is back, the quarantine gone"
        );
        generate(&tree.join("a/bulk"), 5, 20, 100, 3);
    }
    drop((_bind, _tmpfs, _odd));
    let report = remove(&scratch, "tree", &parallel());
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(snapshot(&outside), before);
}

#[test]
fn an_entry_that_is_a_mount_point_is_refused() {
    if !require_root("an_entry_that_is_a_mount_point_is_refused") {
        return;
    }
    let scratch = scratch!("mount-entry");
    mkdirs(&scratch.join("mnt"));
    let mount = Mount::tmpfs(&scratch.join("mnt"), "8m");
    write(&scratch.join("mnt/file"), "mounted");
    let err = remove_entry(scratch.fd(), OsStr::new("mnt"), &RemoveOptions::new()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Removal, "{err}");
    assert_eq!(
        fs::read_to_string(scratch.join("mnt/file")).unwrap(),
        "mounted"
    );
    drop(mount);
}

#[test]
fn busy_and_immutable_entries_are_reported_and_the_rest_removed() {
    if !require_root("busy_and_immutable_entries_are_reported_and_the_rest_removed") {
        return;
    }
    let scratch = scratch!("busy");
    let tree = scratch.join("tree");
    let shape = generate(&tree, 11, 40, 400, 3);
    write(&tree.join("one/busy"), "x");
    write(&tree.join("two/immutable"), "y");
    write(&scratch.join("source"), "bound");
    let _busy = Mount::bind(&scratch.join("source"), &tree.join("one/busy"));
    let immutable = Immutable::set(&tree.join("two/immutable"));

    let report = remove(&scratch, "tree", &parallel());

    let mut want = vec![(
        PathBuf::from("tree/one/busy"),
        LeftReason::Errno {
            op: Op::Unlink,
            errno: Errno::BUSY,
        },
    )];
    if immutable.is_some() {
        want.push((
            PathBuf::from("tree/two/immutable"),
            LeftReason::Errno {
                op: Op::Unlink,
                errno: Errno::PERM,
            },
        ));
    } else {
        eprintln!("this filesystem has no immutable flag: only the busy file is checked");
    }
    assert_eq!(left_of(&report), want);
    let left_files = want.len() as u64;
    assert_eq!(report.removed().files(), shape.files + 2 - left_files);
    assert_eq!(report.removed().dirs(), shape.dirs + 2 - 1 - left_files);
    assert_eq!(names(&tree), ["one", "two"][..want.len()]);
    let text = report.left()[0].to_string();
    assert!(
        text.contains("tree/one/busy") && text.contains("busy"),
        "{text}"
    );
}

#[test]
fn read_only_trees_are_removed_completely() {
    // As root, permissions do not stop anything; the interesting case is
    // an owner without root. Run it as root and, when root, again as an
    // unprivileged user on a tree that user owns.
    // The second half works as `nobody`: not under a private checkout or
    // TMPDIR.
    let scratch = Scratch::reachable_by_others("readonly");
    build_read_only_tree(&scratch.join("tree"));
    let report = remove(&scratch, "tree", &parallel());
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.removed().dirs(), 8);
    assert_eq!(report.removed().files(), 7);

    if !is_root() {
        eprintln!("read_only_trees_are_removed_completely: ran as the current, unprivileged user");
        return;
    }
    let home = scratch.join("home");
    mkdirs(&home);
    rustix::fs::chown(
        &home,
        Some(rustix::process::Uid::from_raw(65534)),
        Some(rustix::process::Gid::from_raw(65534)),
    )
    .unwrap();
    chmod(&home, 0o700);
    for options in [sequential(), parallel()] {
        let report = as_nobody(|| {
            build_read_only_tree(&home.join("tree"));
            let parent = open_dir(&home);
            remove_entry(parent.as_fd(), OsStr::new("tree"), &options).unwrap()
        });
        assert!(report.is_complete(), "as nobody: {report:?}");
        assert_eq!(report.removed().dirs(), 8);
        assert_eq!(report.removed().files(), 7);
        assert!(names(&home).is_empty(), "{:?}", names(&home));
    }
}

/// Go's module cache: directories 0555/0500, files 0444/0400; plus
/// directories the owner cannot even list or search.
fn build_read_only_tree(tree: &Path) {
    write(&tree.join("mod@v1.2.3/go.mod"), "module x");
    write(&tree.join("mod@v1.2.3/pkg/a.go"), "package a");
    write(&tree.join("mod@v1.2.3/pkg/internal/b.go"), "package b");
    write(&tree.join("closed/secret"), "s");
    write(&tree.join("search-only/f"), "f");
    write(&tree.join("write-only/f"), "f");
    write(&tree.join("list-only/f"), "f");
    for file in ["mod@v1.2.3/go.mod", "mod@v1.2.3/pkg/a.go"] {
        chmod(&tree.join(file), 0o444);
    }
    chmod(&tree.join("mod@v1.2.3/pkg/internal/b.go"), 0o400);
    chmod(&tree.join("mod@v1.2.3/pkg/internal"), 0o500);
    chmod(&tree.join("mod@v1.2.3/pkg"), 0o555);
    chmod(&tree.join("mod@v1.2.3"), 0o555);
    chmod(&tree.join("closed"), 0o000);
    chmod(&tree.join("search-only"), 0o100);
    chmod(&tree.join("write-only"), 0o300);
    chmod(&tree.join("list-only"), 0o400);
    chmod(tree, 0o500);
}

// ------------------------------------------------------------- the race

/// The attack: while the remover works, another thread (holding
/// descriptors inside the tree, as a process with its working directory
/// there would) keeps atomically exchanging directories of the tree with
/// symlinks to a directory outside it (`renameat2(RENAME_EXCHANGE)`), and
/// recreating them as the remover deletes them. Whatever the interleaving,
/// every file outside must survive.
#[test]
fn swapping_directories_for_symlinks_never_lets_the_remover_out() {
    const MIN_SWAPS: u64 = 20_000;
    const MIN_ROUNDS: u64 = 24;
    const MAX_ROUNDS: u64 = 400;
    const BUDGET: Duration = Duration::from_secs(25);

    let scratch = scratch!("race");
    let outside = scratch.join("outside");
    let before = outside_fixture(&outside);
    let started = Instant::now();
    let mut swaps = 0u64;
    let mut rounds = 0u64;
    let mut left_reports = 0usize;
    while rounds < MAX_ROUNDS
        && (swaps < MIN_SWAPS || rounds < MIN_ROUNDS)
        && started.elapsed() < BUDGET
    {
        let mut options = if rounds.is_multiple_of(2) {
            sequential()
        } else {
            parallel()
        };
        if rounds.is_multiple_of(3) {
            // Few descriptors: ancestors are reopened through `..` often.
            options.max_open(2);
        }
        let (round_swaps, report) = race_round(&scratch, &outside, rounds, &options);
        swaps += round_swaps;
        rounds += 1;
        assert_eq!(
            snapshot(&outside),
            before,
            "round {rounds}: outside changed"
        );
        if !report.is_complete() {
            left_reports += 1;
            // Whatever stayed (the attacker recreated it) goes now, in peace.
            let again = remove(&scratch, "tree", &parallel());
            assert!(again.is_complete(), "{again:?}");
        }
        assert_eq!(scratch.names(), ["outside"], "round {rounds}");
    }
    eprintln!(
        "race: {swaps} exchanges during {rounds} removals in {:?}; {left_reports} reported leftovers",
        started.elapsed()
    );
    assert!(
        swaps >= 1_000,
        "the attacker got too few exchanges in: {swaps}"
    );
    assert_eq!(snapshot(&outside), before);
}

fn race_round(
    scratch: &Scratch,
    outside: &Path,
    seed: u64,
    options: &RemoveOptions,
) -> (u64, RemovalReport) {
    let tree = scratch.join("tree");
    let mut rng = fastrand::Rng::with_seed(seed);
    // Arenas at several depths, each with a directory `d` (with content)
    // and symlinks `s` (to the outside directory) and `f` (to a file in it).
    let mut arenas = Vec::new();
    for i in 0..12 {
        let depth = rng.usize(0..4);
        let mut dir = tree.clone();
        for level in 0..depth {
            dir.push(format!("l{level}-{}", rng.u8(0..3)));
        }
        dir.push(format!("arena{i}"));
        fill_arena(&dir, outside);
        arenas.push(dir);
    }
    generate(&tree.join("bulk"), seed, 30, 200, 4);
    let fds: Vec<_> = arenas.iter().map(|a| open_dir(a)).collect();
    let outside_link = outside.to_path_buf();

    let stop = Stop::new();
    let swaps = Arc::new(AtomicU64::new(0));
    let attacker = std::thread::spawn({
        let stop = stop.flag();
        let swaps = Arc::clone(&swaps);
        move || {
            let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
            while !stop.load(Ordering::Relaxed) {
                let fd = &fds[rng.usize(..fds.len())];
                let other = if rng.bool() { "s" } else { "f" };
                match rustix::fs::renameat_with(fd, "d", fd, other, RenameFlags::EXCHANGE) {
                    Ok(()) => {
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        // The remover got there first: put bait back.
                        let _ = rustix::fs::mkdirat(fd, "d", Mode::from_raw_mode(0o755));
                        if let Ok(d) = rustix::fs::openat(
                            fd,
                            "d",
                            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                            Mode::empty(),
                        ) {
                            let _ = rustix::fs::mkdirat(&d, "inner", Mode::from_raw_mode(0o755));
                        }
                        let _ = rustix::fs::symlinkat(&outside_link, fd, "s");
                        let _ = rustix::fs::symlinkat(outside_link.join("precious.txt"), fd, "f");
                    }
                }
            }
        }
    });
    // Let the attacker get going before the remover starts.
    while swaps.load(Ordering::Relaxed) < 20 {
        std::thread::yield_now();
    }
    let before = swaps.load(Ordering::Relaxed);
    let report = remove(scratch, "tree", options);
    let during = swaps.load(Ordering::Relaxed) - before;
    stop.raise();
    attacker.join().unwrap();
    (during, report)
}

fn fill_arena(arena: &Path, outside: &Path) {
    write(&arena.join("d/file"), "inside");
    write(&arena.join("d/inner/deeper/file"), "inside");
    symlink(outside, &arena.join("s"));
    symlink(outside.join("precious.txt"), &arena.join("f"));
}

/// A directory the remover is inside is moved out of the tree (a process
/// holding a descriptor inside can do that). Climbing back, the remover
/// finds `..` is no longer the directory it came from: it reports the moved
/// directory and never climbs into its new parent.
#[test]
fn a_directory_moved_out_while_inside_is_given_up_not_followed() {
    const LEVELS: usize = 120;
    const WATCH: usize = 80;
    let scratch = scratch!("moved").tmpfs("256m");
    let outside = scratch.join("outside");
    let before = outside_fixture(&outside);
    let tree = scratch.join("tree");
    let mut dir = tree.clone();
    let mut watched = None;
    let mut holder = None;
    for level in 0..LEVELS {
        mkdirs(&dir);
        if level >= WATCH {
            // Work below the watched level, so the mover is in time.
            let fd = open_dir(&dir);
            for i in 0..400 {
                let name = format!("f{i}");
                rustix::fs::mknodat(
                    &fd,
                    name.as_str(),
                    rustix::fs::FileType::RegularFile,
                    Mode::from_raw_mode(0o644),
                    0,
                )
                .unwrap();
            }
        }
        write(&dir.join("marker"), "x");
        if level == 10 {
            holder = Some(dir.clone());
        }
        if level == WATCH {
            watched = Some(dir.clone());
        }
        dir.push("down");
    }
    mkdirs(&dir);
    let holder = open_dir(&holder.unwrap());
    let watched = open_dir(&watched.unwrap());
    let outside_fd = open_dir(&outside);
    let mover = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        // Wait until the remover is deep inside (the watched level's files
        // are going), then move level 11 out of the tree.
        while rustix::fs::statat(&watched, "marker", rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
        {
            if Instant::now() > deadline {
                return false;
            }
            std::hint::spin_loop();
        }
        rustix::fs::renameat(&holder, "down", &outside_fd, "moved").is_ok()
    });
    let mut options = sequential();
    options.max_open(2);
    let report = remove(&scratch, "tree", &options);
    let moved = mover.join().unwrap();
    assert!(moved, "the remover never reached level {WATCH}");
    // The moved directory is reported; what was inside it went; the
    // directory itself and everything else in its new parent stayed.
    let mut want = tree.strip_prefix(scratch.path()).unwrap().to_path_buf();
    for _ in 0..=10 {
        want.push("down");
    }
    assert_eq!(left_of(&report), [(want, LeftReason::Moved)]);
    assert_eq!(report.remnant(), None, "the entry itself is gone");
    assert!(names(&outside.join("moved")).is_empty());
    rustix::fs::rmdir(outside.join("moved")).unwrap();
    assert_eq!(snapshot(&outside), before);
    assert_eq!(scratch.names(), ["outside"]);
}

// ------------------------------------------- replaced, vanished, killed

/// The entry itself is swapped with another directory of the parent while
/// it is being removed (with `expect`): the other directory must never be
/// removed, and every failed attempt must say why.
#[test]
fn an_entry_replaced_midway_is_never_mistaken() {
    let scratch = scratch!("replaced");
    write(&scratch.join("victim/marker"), "victim");
    generate(&scratch.join("victim/bulk"), 1, 30, 300, 3);
    write(&scratch.join("other/marker"), "other");
    generate(&scratch.join("other/bulk"), 2, 30, 300, 3);
    let other_before = snapshot(&scratch.join("other"));
    let (dev, ino) = identity(&scratch.join("victim"));
    let (_, other_ino) = identity(&scratch.join("other"));

    let stop = Stop::new();
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = std::thread::spawn({
        let (stop, swaps) = (stop.flag(), Arc::clone(&swaps));
        let parent = open_dir(scratch.path());
        move || {
            while !stop.load(Ordering::Relaxed) {
                if rustix::fs::renameat_with(
                    &parent,
                    "victim",
                    &parent,
                    "other",
                    RenameFlags::EXCHANGE,
                )
                .is_ok()
                {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    while swaps.load(Ordering::Relaxed) < 100 {
        std::thread::yield_now();
    }
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut removed = false;
    for _ in 0..2000 {
        match remove_entry(
            scratch.fd(),
            OsStr::new("victim"),
            RemoveOptions::new().expect(dev, ino),
        ) {
            Ok(report) => {
                assert!(report.is_complete(), "{report:?}");
                removed = true;
                break;
            }
            Err(e) => {
                let what = match e.kind() {
                    ErrorKind::Removal => "removal",
                    ErrorKind::Io
                        if e.io_error().map(io::Error::kind) == Some(io::ErrorKind::NotFound) =>
                    {
                        "not found"
                    }
                    other => panic!("unexpected error kind {other:?}: {e}"),
                };
                *outcomes.entry(what.to_owned()).or_default() += 1;
            }
        }
    }
    stop.raise();
    swapper.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!("replaced: {swaps} swaps, failed attempts {outcomes:?}, removed {removed}");
    // Find the other directory under whatever name it has now.
    let mut found_other = false;
    for name in scratch.names() {
        let path = scratch.join(&name);
        if fs::symlink_metadata(&path).unwrap().ino() == other_ino {
            assert_eq!(snapshot(&path), other_before, "{name:?}");
            found_other = true;
        } else {
            assert_ne!(
                fs::read_to_string(path.join("marker")).ok().as_deref(),
                Some("other")
            );
        }
    }
    assert!(
        found_other,
        "the other directory is gone: {:?}",
        scratch.names()
    );
    assert!(removed, "2000 attempts and the victim was never removed");
}

/// Another process deletes parts of the tree while the remover works: the
/// remover finishes with a clean report, it does not panic or give up.
#[test]
fn a_tree_that_disappears_midway_ends_cleanly() {
    let scratch = scratch!("vanish").tmpfs("256m");
    for round in 0..6u64 {
        let tree = scratch.join("tree");
        generate(&tree, round, 200, 3000, 5);
        let tree_fd = open_dir(&tree);
        let mut victims = names(&tree);
        victims.reverse();
        let deleter = std::thread::spawn(move || {
            for name in victims {
                crude_rm(tree_fd.as_fd(), &name);
            }
        });
        let options = if round % 2 == 0 {
            sequential()
        } else {
            parallel()
        };
        let report = remove(&scratch, "tree", &options);
        deleter.join().unwrap();
        assert!(report.is_complete(), "round {round}: {report:?}");
        assert!(scratch.names().is_empty(), "{:?}", scratch.names());
    }
}

#[test]
fn quarantine_leftovers_are_finished_by_the_next_removal() {
    let scratch = scratch!("leftovers");
    // What a remover killed half-way leaves: a half-emptied entry in the
    // quarantine, under a name only it knew.
    let trash = scratch.join(".sandkeeper-trash");
    generate(&trash.join("12345-dead-0-0123456789abcdef"), 9, 20, 100, 3);
    write(&trash.join("12345-dead-1-0123456789abcdef"), "a file entry");
    chmod(&trash, 0o700);
    write(&scratch.join("next/file"), "x");

    let report = remove(&scratch, "next", &sequential());

    assert!(report.is_complete());
    assert_eq!(report.removed().entries(), 2);
    assert_eq!(report.leftovers_removed().files(), 101);
    assert_eq!(report.leftovers_removed().dirs(), 21);
    assert!(report.leftovers_left().is_empty());
    assert!(scratch.names().is_empty(), "{:?}", scratch.names());
}

/// A real remover process is SIGKILLed in the middle of a removal; the next
/// removal in the same parent finishes its work.
#[test]
fn a_killed_remover_is_finished_by_the_next_one() {
    let scratch = scratch!("killed").tmpfs("512m");
    let shape = generate(&scratch.join("big"), 21, 400, 30_000, 4);
    write(&scratch.join("small/file"), "x");
    let mut child = test_command(&[], "remover_child")
        .env("SK_REMOVE_CHILD", scratch.join("big"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the entry is in the quarantine and partly removed.
    // (Its name has a random part: the one directory of that form.)
    let deadline = Instant::now() + Duration::from_secs(60);
    let in_progress = loop {
        let trash = scratch
            .names()
            .into_iter()
            .find(|n| n.as_encoded_bytes().starts_with(b".sandkeeper-trash"));
        if let Some(Ok(mut entries)) = trash.map(|t| fs::read_dir(scratch.join(t))) {
            if let Some(Ok(entry)) = entries.next() {
                break entry.path();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the child never started removing"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    std::thread::sleep(Duration::from_millis(20));
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_early = in_progress.exists();

    let report = remove(&scratch, "small", &parallel());

    assert!(report.is_complete());
    if killed_early {
        let finished = report.leftovers_removed();
        assert!(finished.entries() > 0 && finished.entries() <= shape.files + shape.dirs);
        assert!(report.leftovers_left().is_empty(), "{report:?}");
    } else {
        eprintln!("a_killed_remover_is_finished_by_the_next_one: the child finished first");
    }
    assert!(scratch.names().is_empty(), "{:?}", scratch.names());
}

/// Helper process for [`a_killed_remover_is_finished_by_the_next_one`].
#[test]
#[ignore = "helper process entry point, run by another test"]
fn remover_child() {
    if let Some(path) = std::env::var_os("SK_REMOVE_CHILD") {
        let _ = remove_path(Path::new(&path), &sequential());
    }
}

#[test]
fn concurrent_removals_share_one_quarantine_and_leave_nothing() {
    let scratch = scratch!("concurrent");
    for i in 0..8 {
        generate(&scratch.join(format!("e{i}")), i, 20, 200, 3);
    }
    std::thread::scope(|s| {
        for i in 0..8 {
            let scratch = &scratch;
            s.spawn(move || {
                let options = if i % 2 == 0 { sequential() } else { parallel() };
                let report = remove(scratch, &format!("e{i}"), &options);
                assert!(report.is_complete(), "{report:?}");
            });
        }
    });
    assert!(scratch.names().is_empty(), "{:?}", scratch.names());
}

#[test]
fn a_quarantine_name_taken_by_someone_else_is_not_used() {
    if !require_root("a_quarantine_name_taken_by_someone_else_is_not_used") {
        return;
    }
    let scratch = scratch!("taken");
    let outside = scratch.join("outside");
    let before = outside_fixture(&outside);
    // Another user's `.sandkeeper-trash`, with something in it.
    let theirs = scratch.join(".sandkeeper-trash");
    write(&theirs.join("their-file"), "theirs");
    rustix::fs::chown(&theirs, Some(rustix::process::Uid::from_raw(65534)), None).unwrap();
    write(&scratch.join("tree/file"), "x");

    let report = remove(&scratch, "tree", &sequential());
    assert!(report.is_complete());
    assert_eq!(
        fs::read_to_string(theirs.join("their-file")).unwrap(),
        "theirs"
    );
    assert_eq!(scratch.names(), [".sandkeeper-trash", "outside"]);

    // A symlink in its place, pointing outside: not followed, not used.
    crude_rm(scratch.fd(), OsStr::new(".sandkeeper-trash"));
    symlink(&outside, &theirs);
    write(&scratch.join("tree/file"), "x");
    let report = remove(&scratch, "tree", &sequential());
    assert!(report.is_complete());
    assert_eq!(snapshot(&outside), before);
    assert_eq!(scratch.names(), [".sandkeeper-trash", "outside"]);
    rustix::fs::unlink(&theirs).unwrap();
}

// -------------------------------------------------------------- scale

/// 100,000 nested directories: no recursion, and a bounded number of open
/// descriptors (sampled while the removal runs).
#[test]
fn a_hundred_thousand_deep_tree_is_removed_with_few_descriptors() {
    let depth = if is_root() { 100_000 } else { 10_000 };
    if depth < 100_000 {
        eprintln!("not root: {depth} levels on the disk instead of 100,000 on a tmpfs");
    }
    let scratch = scratch!("deep").tmpfs("1g");
    make_deep(&scratch.join("tree"), depth);
    let baseline = open_fds();
    let done = Stop::new();
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = std::thread::spawn({
        let (done, peak) = (done.flag(), Arc::clone(&peak));
        move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(open_fds(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    let report = remove(&scratch, "tree", &RemoveOptions::new());
    done.raise();
    sampler.join().unwrap();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.removed().dirs(), depth as u64 + 1);
    assert_eq!(report.removed().files(), 1);
    let peak = peak.load(Ordering::Relaxed);
    // Generous, since other tests share the process; unbounded would be
    // 100,000.
    assert!(peak < baseline + 1_000, "peak {peak} open descriptors");
    assert!(scratch.names().is_empty());
}

/// A deep tree with a narrow descriptor budget, content at every level and
/// side branches: every ancestor is reopened through `..` and checked.
#[test]
fn a_deep_tree_with_two_descriptors_per_thread() {
    const LEVELS: u64 = 300;
    let scratch = scratch!("deep-narrow");
    let tree = scratch.join("tree");
    for options in [sequential(), parallel()] {
        let mut dir = tree.clone();
        for level in 0..LEVELS {
            write(&dir.join(format!("file{level}")), "x");
            mkdirs(&dir.join(format!("side{level}/leaf")));
            dir.push("down");
        }
        mkdirs(&dir);
        let mut options = options;
        options.max_open(2);
        let report = remove(&scratch, "tree", &options);
        assert!(report.is_complete(), "{report:?}");
        assert_eq!(report.removed().files(), LEVELS);
        assert_eq!(report.removed().dirs(), 1 + LEVELS * 3);
        assert!(scratch.names().is_empty());
    }
}

fn make_deep(root: &Path, depth: usize) {
    mkdirs(root);
    let mut dir = open_dir(root);
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..depth {
        rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
        dir = rustix::fs::openat(&dir, "d", flags, Mode::empty()).unwrap();
    }
    let file = rustix::fs::openat(
        &dir,
        "bottom",
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    drop(file);
}

#[test]
fn a_directory_with_two_hundred_thousand_entries() {
    let entries = if is_root() { 200_000 } else { 20_000 };
    if entries < 200_000 {
        eprintln!("not root: {entries} entries on the disk instead of 200,000 on a tmpfs");
    }
    let scratch = scratch!("wide").tmpfs("1g");
    let tree = scratch.join("tree");
    mkdirs(&tree);
    let dir = open_dir(&tree);
    for i in 0..entries {
        let name = format!("entry-{i:06}");
        if i % 10 == 0 {
            rustix::fs::symlinkat("target", &dir, name.as_str()).unwrap();
        } else {
            rustix::fs::mknodat(
                &dir,
                name.as_str(),
                rustix::fs::FileType::RegularFile,
                Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap();
        }
    }
    drop(dir);
    let report = remove(&scratch, "tree", &RemoveOptions::new());
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.removed().files(), entries as u64);
    assert_eq!(report.removed().dirs(), 1);
    assert!(scratch.names().is_empty());
}

#[test]
fn names_are_bytes() {
    let scratch = scratch!("bytes");
    let root_name: &[u8] = b"tree-\xff\n";
    let tree = scratch.join(OsStr::from_bytes(root_name));
    let long_ascii = vec![b'x'; 255];
    let mut long_multibyte = "é".repeat(127).into_bytes();
    long_multibyte.push(b'x');
    assert_eq!(long_multibyte.len(), 255);
    let names: Vec<&[u8]> = vec![
        b"\xff\xfe",
        b"new\nline",
        b"\xc0\x80",
        b"-rf",
        b"*",
        b" ",
        b"\\",
        b"\x1b[31mred",
        &long_ascii,
        &long_multibyte,
    ];
    for name in &names {
        let dir = tree.join(OsStr::from_bytes(name));
        write(&dir.join(OsStr::from_bytes(name)), "x");
        symlink(OsStr::from_bytes(name), &dir.join("link"));
    }
    for options in [sequential(), parallel()] {
        let report = remove_entry(scratch.fd(), OsStr::from_bytes(root_name), &options).unwrap();
        assert!(report.is_complete(), "{report:?}");
        assert_eq!(report.removed().dirs(), names.len() as u64 + 1);
        assert_eq!(report.removed().files(), 2 * names.len() as u64);
        for name in &names {
            let dir = tree.join(OsStr::from_bytes(name));
            write(&dir.join(OsStr::from_bytes(name)), "x");
            symlink(OsStr::from_bytes(name), &dir.join("link"));
        }
    }
    let report = remove_path(&tree, &sequential()).unwrap();
    assert!(report.is_complete());
    assert!(scratch.names().is_empty());
}
