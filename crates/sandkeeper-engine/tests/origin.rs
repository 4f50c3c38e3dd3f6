//! The creator of each top-level entry of a watched root (issue 17): what
//! the fanotify tracker records, what is never taken as an origin, and
//! what survives a restart. Root only (fanotify, `trusted.*`).

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use sandkeeper_engine::origin::{self, Creator, Recorder, Tracker};
use sandkeeper_engine::root::Root;
use sandkeeper_testkit::privilege::{as_nobody, require_root};
use sandkeeper_testkit::process::{child_mode, wait_until, Helper};
use sandkeeper_testkit::scratch;

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn tracked(tag: &str) -> (sandkeeper_testkit::scratch::Scratch, Root, Tracker) {
    let dir = scratch!(tag);
    let root = Root::open_exact(dir.path()).unwrap();
    let tracker = Tracker::start(&root).unwrap();
    (dir, root, tracker)
}

/// `sh -c SCRIPT sh ROOT`, left running (killed on drop).
fn creator(script: &str, root: &Path) -> Helper {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).arg("sh").arg(root);
    Helper::spawn(cmd)
}

/// The helper side: `make` creates a directory, a file and a FIFO in
/// `SK_PATH` itself, says `READY`, and lives on.
#[test]
#[ignore = "a helper process, started by the tests"]
fn child_main() {
    let Some(mode) = child_mode() else {
        return;
    };
    let root = std::path::PathBuf::from(std::env::var("SK_PATH").expect("SK_PATH"));
    if mode == "make" {
        std::fs::create_dir(root.join("app-1")).unwrap();
        std::fs::write(root.join("file-1"), "x").unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("fifo-1"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        println!("READY made");
        std::thread::sleep(std::time::Duration::from_secs(600));
    }
    // `burst`: SK_COUNT directories at about SK_RATE per second, in steps
    // of 1 ms; then `DONE`.
    if mode == "burst" {
        let count: u64 = std::env::var("SK_COUNT").unwrap().parse().unwrap();
        let rate: u64 = std::env::var("SK_RATE").unwrap().parse().unwrap();
        let start = std::time::Instant::now();
        for i in 0..count {
            std::fs::create_dir(root.join(format!("burst-{i}"))).unwrap();
            let due = std::time::Duration::from_micros(i * 1_000_000 / rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                if wait > std::time::Duration::from_millis(1) {
                    std::thread::sleep(wait);
                }
            }
        }
        println!("DONE {}", start.elapsed().as_millis());
        std::thread::sleep(std::time::Duration::from_secs(600));
    }
}

/// A creator process makes a directory, a file and a FIFO in a watched
/// root: each is recorded with its name, executable, cgroup, uid, cwd and
/// parent's name — never its arguments (issue 25: they are the user's, and
/// reading them could block on the creator's memory map).
#[test]
fn creator_name_and_cgroup_are_recorded() {
    if !require_root("creator_name_and_cgroup_are_recorded") {
        return;
    }
    let (dir, root, tracker) = tracked("origin-argv");
    let path = dir.path().to_str().unwrap();
    let mut child = Helper::start("make", &[("SK_PATH", path), ("SK_MARKER", "marker-7f3")]);
    child.expect("READY");
    tracker.drain();
    let ours = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let ours = ours
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned);
    for entry in ["app-1", "file-1", "fifo-1"] {
        let got =
            origin::read(root.fd(), name(entry)).unwrap_or_else(|| panic!("{entry}: no origin"));
        assert_eq!(got.by, Recorder::Watch);
        let Creator::Process(p) = got.creator else {
            panic!("{entry}: {:?}", got.creator)
        };
        assert_eq!(p.pid, child.pid(), "{entry}");
        assert_eq!(p.argv, Vec::<String>::new(), "{entry}: no arguments");
        let exe = std::env::current_exe().unwrap();
        let file = exe.file_name().unwrap().to_str().unwrap();
        assert_eq!(p.comm.as_deref(), file.get(..15).or(Some(file)), "{entry}");
        assert_eq!(
            p.exe.as_deref(),
            std::env::current_exe()
                .ok()
                .and_then(|e| e.to_str().map(str::to_owned))
                .as_deref(),
            "{entry}"
        );
        assert_eq!(p.cgroup, ours, "{entry}");
        assert_eq!(p.uid, Some(0), "{entry}");
        assert!(p.cwd.is_some(), "{entry}");
        assert_eq!(
            p.parent_comm.as_deref(),
            file.get(..15).or(Some(file)),
            "{entry}: the test binary is the parent"
        );
    }
    assert!(tracker.stats().recorded >= 3);
    child.kill();
}

/// A creator that is gone (exited and reaped) before its event is read
/// — the tracker paused meanwhile — is recorded as exited, with its pid,
/// never as whatever process has its pid now.
#[test]
fn short_lived_creator_is_recorded_as_exited() {
    if !require_root("short_lived_creator_is_recorded_as_exited") {
        return;
    }
    let (dir, root, tracker) = tracked("origin-exited");
    tracker.set_paused(true);
    let mut child = Command::new("mkdir")
        .arg(dir.join("gone-1"))
        .spawn()
        .unwrap();
    let pid = child.id();
    let status = child.wait().unwrap();
    assert!(status.success() && status.signal().is_none());
    tracker.set_paused(false);
    tracker.drain();
    let got = origin::read(root.fd(), name("gone-1")).expect("an origin");
    assert_eq!(got.creator, Creator::Exited { pid: Some(pid) });
    assert_eq!(tracker.stats().exited, 1);
}

/// A `user.*` attribute (any owner can set one) shaped exactly like a
/// record, a record copied onto another inode, a planted file named like
/// the attribute, and a symlink are never taken as origins; and a user
/// cannot write the `trusted.*` attribute.
#[test]
fn forged_origins_are_never_taken() {
    if !require_root("forged_origins_are_never_taken") {
        return;
    }
    let dir = scratch!("origin-forged");
    let root = Root::open_exact(dir.path()).unwrap();
    std::fs::create_dir(dir.join("victim")).unwrap();
    std::fs::create_dir(dir.join("other")).unwrap();
    // A real record on `other`, then its bytes copied everywhere.
    assert!(origin::write(
        root.fd(),
        name("other"),
        Recorder::Watch,
        Creator::Exited { pid: Some(1) }
    )
    .is_ok());
    let record = xattr_get(&dir.join("other"), origin::XATTR).expect("the real record");
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let forged = String::from_utf8(record).unwrap().replace(
        &format!("\"ino\":{}", ino(&dir.join("other"))),
        &format!("\"ino\":{}", ino(&dir.join("victim"))),
    );
    rustix::fs::setxattr(
        dir.join("victim"),
        "user.sandkeeper.origin",
        forged.as_bytes(),
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    std::fs::write(dir.join("victim/trusted.sandkeeper.origin"), &forged).unwrap();
    std::fs::write(dir.join(".sandkeeper-origins"), &forged).unwrap();
    assert_eq!(
        origin::read(root.fd(), name("victim")),
        None,
        "user.* or a planted file"
    );
    // The real record, copied to another inode (as `cp -a` by root would).
    let copied = xattr_get(&dir.join("other"), origin::XATTR).unwrap();
    std::fs::create_dir(dir.join("copy")).unwrap();
    rustix::fs::setxattr(
        dir.join("copy"),
        origin::XATTR,
        &copied,
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    assert_eq!(
        origin::read(root.fd(), name("copy")),
        None,
        "a copied record"
    );
    // A symlink to an entry with a record is not that entry.
    std::os::unix::fs::symlink(dir.join("other"), dir.join("link")).unwrap();
    assert_eq!(origin::read(root.fd(), name("link")), None, "a symlink");
    assert!(origin::read(root.fd(), name("other")).is_some());
    // Users cannot write the attribute.
    std::fs::create_dir(dir.join("mine")).unwrap();
    std::os::unix::fs::chown(dir.join("mine"), Some(65534), Some(65534)).unwrap();
    // Through a descriptor opened beforehand: the answer is about the
    // attribute, not about whether nobody may search the path to it (a
    // checkout may sit under a private directory).
    let mine = std::fs::File::open(dir.join("mine")).unwrap();
    let denied = as_nobody(|| {
        rustix::fs::fsetxattr(
            &mine,
            origin::XATTR,
            forged.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
    });
    assert_eq!(denied, Err(rustix::io::Errno::PERM));
    for bad in ["", ".", "..", "a/b"] {
        assert_eq!(origin::read(root.fd(), name(bad)), None, "{bad:?}");
    }
}

/// A hard link made into a watched root names a file made elsewhere, by
/// someone else perhaps: the tracker writes no record on it (it would
/// land on that other file's inode), while a plain new file gets one.
#[test]
fn a_hard_link_into_the_root_gets_no_record() {
    if !require_root("a_hard_link_into_the_root_gets_no_record") {
        return;
    }
    let outside = scratch!("origin-outside");
    let elsewhere = outside.join("precious");
    std::fs::write(&elsewhere, "not the creator's").unwrap();
    let (dir, root, tracker) = tracked("origin-hardlink");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"ln "$1" "$2/linked" && echo x > "$2/plain" && exec sleep 60"#)
        .arg("sh")
        .arg(&elsewhere)
        .arg(dir.path());
    let mut maker = Helper::spawn(cmd);
    wait_until("plain", || dir.join("plain").exists());
    tracker.drain();
    assert!(
        origin::read(root.fd(), name("plain")).is_some(),
        "a plain file is recorded"
    );
    assert_eq!(
        xattr_get(&elsewhere, origin::XATTR),
        None,
        "nothing written on the other file"
    );
    assert_eq!(origin::read(root.fd(), name("linked")), None);
    assert!(tracker.stats().not_made >= 1, "{:?}", tracker.stats());
    maker.kill();
}

/// A tracker stopped and started again keeps the origins of the entries
/// that exist; an entry renamed inside the root keeps its first creator.
#[test]
fn restart_keeps_origins() {
    if !require_root("restart_keeps_origins") {
        return;
    }
    let (dir, root, tracker) = tracked("origin-restart");
    let mut first = creator(
        r#"mkdir "$1/app-1" && exec sleep 60 # first-creator"#,
        dir.path(),
    );
    wait_until("app-1", || dir.join("app-1").exists());
    tracker.drain();
    tracker.stop();
    first.kill();
    let before = origin::read(root.fd(), name("app-1")).expect("recorded");
    let tracker = Tracker::start(&root).unwrap();
    let mut second = creator(
        r#"mv "$1/app-1" "$1/app-2" && exec sleep 60 # second"#,
        dir.path(),
    );
    wait_until("app-2", || dir.join("app-2").exists());
    tracker.drain();
    let after = origin::read(root.fd(), name("app-2")).expect("still recorded");
    assert_eq!(before, after);
    assert_eq!(tracker.stats().events, 0, "a move is not a creation");
    second.kill();
}

fn xattr_get(path: &Path, attr: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 16384];
    let n = rustix::fs::getxattr(path, attr, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// `watch` with `track_origins = true` on a root records the creators of
/// its new entries, and says so; a root without it gets no tracker.
#[test]
fn watch_tracks_roots_that_ask() {
    use sandkeeper_engine::config::Config;
    use sandkeeper_engine::watch::{Driver, Wake, WatchEvent, WatchOptions, Watcher};
    use std::time::Instant;

    if !require_root("watch_tracks_roots_that_ask") {
        return;
    }
    struct Fake<'a> {
        now: Instant,
        root: &'a Path,
        started: Vec<String>,
        recorded: bool,
    }
    impl Driver for Fake<'_> {
        fn now(&mut self) -> Instant {
            self.now
        }
        fn wait(&mut self, until: Instant) -> Wake {
            self.now = until;
            let mut child = Helper::start("make", &[("SK_PATH", self.root.to_str().unwrap())]);
            child.expect("READY");
            let root = Root::open_exact(self.root).unwrap();
            wait_until("the origin of app-1", || {
                origin::read(root.fd(), name("app-1")).is_some()
            });
            self.recorded = matches!(
                origin::read(root.fd(), name("app-1")).map(|o| o.creator),
                Some(Creator::Process(p)) if p.pid == child.pid()
            );
            child.kill();
            Wake::Stop
        }
        fn event(&mut self, event: WatchEvent<'_>) {
            if let WatchEvent::Origins(change) = event {
                self.started.push(format!("{change:?}"));
            }
        }
    }
    let dir = scratch!("origin-watch");
    let mut config = Config::defaults();
    config.roots[0].path = dir.path().to_owned();
    config.roots[0].track_origins = true;
    config.roots[0].user_dirs = false;
    let mut fake = Fake {
        now: Instant::now(),
        root: dir.path(),
        started: Vec::new(),
        recorded: false,
    };
    Watcher::new(config, WatchOptions::new()).run(&mut fake);
    assert_eq!(fake.started.len(), 1, "{:?}", fake.started);
    assert!(
        fake.started[0].starts_with("Started("),
        "{:?}",
        fake.started
    );
    assert!(fake.recorded, "the helper is the creator");
}

/// The benchmark behind `bench/origins/run.sh` (not a test: run by that
/// script with `--ignored`): a tracker on a tmpfs root receiving
/// `SK_COUNT` creates at `SK_RATE` per second from another process — the
/// CPU this process spent (the tracker is all it does), events lost; then
/// the scan of that root, and the scan plus reading every origin, medians
/// of 5.
#[test]
#[ignore = "a benchmark, run by bench/origins/run.sh"]
fn bench_origins() {
    if !require_root("bench_origins") {
        return;
    }
    let count: u64 = std::env::var("SK_COUNT").map_or(10_000, |v| v.parse().unwrap());
    let rate: u64 = std::env::var("SK_RATE").map_or(10_000, |v| v.parse().unwrap());
    let dir = scratch!("origin-bench").tmpfs("1g");
    let root = Root::open_exact(dir.path()).unwrap();
    let tracker = Tracker::start(&root).unwrap();
    let cpu = || {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<u64> = rest
            .split(' ')
            .skip(11)
            .take(2)
            .map(|x| x.parse().unwrap())
            .collect();
        (f[0] + f[1]) * 1000 / rustix::param::clock_ticks_per_second()
    };
    let (cpu0, wall0) = (cpu(), std::time::Instant::now());
    let path = dir.path().to_str().unwrap().to_owned();
    let (c, r) = (count.to_string(), rate.to_string());
    let mut child = Helper::start(
        "burst",
        &[("SK_PATH", &path), ("SK_COUNT", &c), ("SK_RATE", &r)],
    );
    let made_ms = child.expect("DONE");
    tracker.drain();
    let (cpu_ms, wall_ms) = (cpu() - cpu0, wall0.elapsed().as_millis());
    child.kill();
    let s = tracker.stats();
    println!("creates {count} at {rate}/s: made in {made_ms} ms; tracker done after {wall_ms} ms");
    println!(
        "tracker CPU {cpu_ms} ms ({:.1}% of one core over the burst)",
        cpu_ms as f64 * 100.0 / wall_ms.max(1) as f64
    );
    println!(
        "events {} recorded {} (exited {}) vanished {} failed {} overflows {}; without a record: {}",
        s.events, s.recorded, s.exited, s.vanished, s.failed, s.overflows,
        count.saturating_sub(s.recorded)
    );
    drop(tracker);
    let median = |f: &mut dyn FnMut()| {
        let mut t: Vec<u128> = (0..5)
            .map(|_| {
                let start = std::time::Instant::now();
                f();
                start.elapsed().as_micros()
            })
            .collect();
        t.sort();
        t[2] as f64 / 1000.0
    };
    let mut scanner = sandkeeper_engine::scan::Scanner::new();
    scanner.trust_pid_namespace(true);
    let mut found = 0;
    let plain = median(&mut || {
        scanner.scan_roots(std::slice::from_ref(&root)).unwrap();
    });
    let with = median(&mut || {
        let report = scanner.scan_roots(std::slice::from_ref(&root)).unwrap();
        found = report.roots[0]
            .entries
            .iter()
            .filter(|e| origin::read(root.fd(), &e.name).is_some())
            .count();
    });
    println!("scan of {count} entries: {plain:.1} ms; with every origin read: {with:.1} ms ({:.2}x); {found} origins", with / plain);
    // The streaming scan (no entries kept), without and with the creators
    // tallied per family on the walking threads (`Scanner::origins`).
    scanner.keep_entries(false);
    let streamed = median(&mut || {
        scanner.scan_roots(std::slice::from_ref(&root)).unwrap();
    });
    scanner.origins(true);
    let mut tallied = 0;
    let with_tally = median(&mut || {
        let report = scanner.scan_roots(std::slice::from_ref(&root)).unwrap();
        tallied = report.roots[0]
            .groups
            .iter()
            .filter_map(|g| g.creators.as_deref())
            .map(|c| c.top.iter().map(|t| t.count.entries).sum::<u64>() + c.other.entries)
            .sum::<u64>();
    });
    println!("scan streamed of {count} entries: {streamed:.1} ms; with creators tallied: {with_tally:.1} ms ({:.2}x); {tallied} tallied", with_tally / streamed);
}

/// A ramfs mounted at a scratch directory (ramfs has no `trusted.*`
/// attributes, and no birth times): unmounted when dropped.
struct Ramfs {
    dir: sandkeeper_testkit::scratch::Scratch,
}

impl Ramfs {
    fn new(tag: &str) -> Ramfs {
        let dir = scratch!(tag);
        rustix::mount::mount(
            "sandkeeper-test",
            dir.path(),
            "ramfs",
            rustix::mount::MountFlags::empty(),
            Some(c"mode=0755"),
        )
        .unwrap_or_else(|e| panic!("mount ramfs at {}: {e}", dir.path().display()));
        Ramfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        // What is in it goes with it; the scratch directory is removed after.
        let _ = rustix::mount::unmount(self.dir.path(), rustix::mount::UnmountFlags::DETACH);
    }
}

/// Issue 17, the fallback store: on a filesystem without `trusted.*`
/// attributes (ramfs, checked here) the tracker records each creator in
/// the store (a 0700 directory of root's, made on first use), readers
/// find it there, a restarted tracker keeps it, and `watch`'s prune drops
/// the records of entries that are gone.
#[test]
fn the_store_records_where_trusted_attributes_are_not_supported() {
    if !require_root("the_store_records_where_trusted_attributes_are_not_supported") {
        return;
    }
    let ramfs = Ramfs::new("origin-store-ramfs");
    let store_base = scratch!("origin-store-dir");
    let store = store_base.join("var/lib/origins");
    let root = Root::open_exact(ramfs.path()).unwrap();
    let probe = ramfs.path().join("probe");
    std::fs::create_dir(&probe).unwrap();
    assert_eq!(
        rustix::fs::setxattr(&probe, origin::XATTR, b"x", rustix::fs::XattrFlags::empty()),
        Err(rustix::io::Errno::OPNOTSUPP),
        "ramfs has no trusted.* attributes here"
    );
    rustix::fs::unlinkat(root.fd(), "probe", rustix::fs::AtFlags::REMOVEDIR).unwrap();

    let tracker = Tracker::start_with_store(&root, &store).unwrap();
    let st = std::fs::metadata(&store).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (st.uid(), st.mode() & 0o7777),
        (0, 0o700),
        "made 0700, root's"
    );
    let path = ramfs.path().to_str().unwrap();
    let mut child = Helper::start("make", &[("SK_PATH", path)]);
    child.expect("READY");
    tracker.drain();
    let reader = origin::Reader::with_store(root.fd(), &store).unwrap();
    for entry in ["app-1", "file-1", "fifo-1"] {
        let got = reader
            .read(name(entry))
            .unwrap_or_else(|| panic!("{entry}: no origin in the store"));
        let Creator::Process(p) = got.creator else {
            panic!("{entry}: {:?}", got.creator)
        };
        assert_eq!(p.pid, child.pid(), "{entry}");
    }
    assert!(tracker.stats().recorded >= 3, "{:?}", tracker.stats());
    child.kill();
    let files: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(files.len(), 1, "one file per root: {files:?}");
    let file = store.join(&files[0]);
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);

    // Restarted: the records stay, and are not replaced.
    tracker.stop();
    let tracker = Tracker::start_with_store(&root, &store).unwrap();
    assert!(origin::Reader::with_store(root.fd(), &store)
        .unwrap()
        .read(name("app-1"))
        .is_some());

    // A new entry under a name that had a record does not inherit it, nor
    // does an entry whose inode changed since (ramfs has no birth time:
    // its ctime is the identity, and a new child changes a directory's).
    tracker.set_paused(true);
    rustix::fs::unlinkat(root.fd(), "file-1", rustix::fs::AtFlags::empty()).unwrap();
    std::fs::write(ramfs.path().join("file-1"), "y").unwrap();
    std::fs::write(ramfs.path().join("app-1/inside"), "z").unwrap();
    let reader = origin::Reader::with_store(root.fd(), &store).unwrap();
    assert!(
        reader.read(name("file-1")).is_none(),
        "a new entry, a new name"
    );
    assert!(
        reader.read(name("app-1")).is_none(),
        "another ctime: not taken"
    );
    assert!(reader.read(name("fifo-1")).is_some());

    // Prune: the records whose entries are gone or changed are dropped.
    rustix::fs::unlinkat(root.fd(), "fifo-1", rustix::fs::AtFlags::empty()).unwrap();
    let before = std::fs::read_to_string(&file).unwrap();
    assert!(
        before.contains("6669666f2d31"),
        "fifo-1's record, its name in hex"
    );
    assert_eq!(
        tracker.prune().unwrap(),
        3,
        "fifo-1 gone, file-1 and app-1 other"
    );
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(!after.contains("6669666f2d31"), "fifo-1's record dropped");
    tracker.set_paused(false);
    drop(tracker);
}

/// The store is root's alone: nobody cannot write into it nor read it, and
/// a store that is a symlink, open to others, or another user's is refused
/// (nothing is written there).
#[test]
fn the_store_is_root_only_and_unsafe_ones_are_refused() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    if !require_root("the_store_is_root_only_and_unsafe_ones_are_refused") {
        return;
    }
    let base = sandkeeper_testkit::scratch::Scratch::reachable_by_others("origin-store-perm");
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let store = base.join("store");
    let opened = origin::Store::open(&store).unwrap();
    assert_eq!(opened.path(), store);
    let ramfs = Ramfs::new("origin-store-perm-ramfs");
    std::fs::create_dir(ramfs.path().join("job-1")).unwrap();
    let root = Root::open_exact(ramfs.path()).unwrap();
    origin::write_with_store(
        root.fd(),
        name("job-1"),
        Recorder::Run,
        Creator::Exited { pid: Some(9) },
        &store,
    )
    .unwrap();
    let file = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let (planted, written, read) = as_nobody(|| {
        (
            std::fs::write(store.join("planted.json"), "{}").is_ok(),
            std::fs::OpenOptions::new().append(true).open(&file).is_ok(),
            std::fs::read(&file).is_ok(),
        )
    });
    assert!(
        !planted && !written && !read,
        "nobody cannot touch the store"
    );

    let refused = |p: &Path, why: &str| {
        let err = origin::Store::open(p).unwrap_err();
        assert_eq!(
            err.kind(),
            sandkeeper_engine::ErrorKind::UnsafeRoot,
            "{why}: {err}"
        );
        assert!(err.to_string().contains("origin store"), "{why}: {err}");
    };
    let open_to_others = base.join("wide");
    std::fs::create_dir(&open_to_others).unwrap();
    std::fs::set_permissions(&open_to_others, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(&open_to_others, "0755");
    let link = base.join("link");
    symlink(&store, &link).unwrap();
    refused(&link, "a symlink");
    refused(&link.join("below"), "below a symlink");
    let theirs = base.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
    rustix::fs::chown(&theirs, Some(rustix::process::Uid::from_raw(65534)), None).unwrap();
    refused(&theirs, "nobody's");
    refused(&theirs.join("inside"), "below nobody's directory");
    // A writer refused the store records nothing.
    std::fs::create_dir(ramfs.path().join("job-2")).unwrap();
    assert!(origin::write_with_store(
        root.fd(),
        name("job-2"),
        Recorder::Run,
        Creator::Exited { pid: None },
        &link,
    )
    .is_err());
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
}

/// What a user does with an inode root made in the user's own directory
/// `home`, to bring it into the watched root as `name`: (what, whether it
/// is a directory, the script, run by `python3 -c SCRIPT HOME ROOT`).
const NOT_MADE_BY_THEM: [(&str, bool, &str); 4] = [
    (
        "a file renamed in by a process that lives on",
        false,
        "os.rename(f'{h}/precious', f'{r}/precious'); live()",
    ),
    (
        "a directory renamed in by a process that lives on",
        true,
        "os.rename(f'{h}/precious', f'{r}/precious'); live()",
    ),
    (
        "a file renamed in by a process gone before it could be read",
        false,
        "os.rename(f'{h}/precious', f'{r}/precious')",
    ),
    (
        "a file linked in, its first name removed",
        false,
        "os.link(f'{h}/precious', f'{r}/precious'); os.unlink(f'{h}/precious'); live()",
    ),
];

/// Issue 25, item 2: a user brings into a watched root an inode root made
/// (in a directory the user owns, so the user may move it or, with write
/// access, link it): the tracker wrote `trusted.sandkeeper.origin` on
/// root's inode (its ctime changed) and named the user as its creator. It
/// now records only on an inode its creator owns: nothing is written (the
/// ctime stays), no origin is given — with attributes and in the store.
#[test]
fn an_inode_its_creator_did_not_make_gets_no_record() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !require_root("an_inode_its_creator_did_not_make_gets_no_record") {
        return;
    }
    let base = scratch::Scratch::reachable_by_others("origin-not-theirs");
    let ramfs = base.join("ramfs");
    std::fs::create_dir(&ramfs).unwrap();
    rustix::mount::mount(
        "sandkeeper-test",
        &ramfs,
        "ramfs",
        rustix::mount::MountFlags::empty(),
        Some(c"mode=0755"),
    )
    .unwrap();
    let unmount = scopeguard(|| {
        let _ = rustix::mount::unmount(&ramfs, rustix::mount::UnmountFlags::DETACH);
    });
    let store_dir = scratch!("origin-not-theirs-store");
    let store = store_dir.join("store");
    for (fs_name, fs_dir) in [("attributes", base.path()), ("store", ramfs.as_path())] {
        for (n, (what, dir, script)) in NOT_MADE_BY_THEM.iter().enumerate() {
            let case = format!("{what}, {fs_name}");
            let top = fs_dir.join(format!("case-{n}"));
            let (home, watched) = (top.join("home"), top.join("root"));
            for d in [&top, &home, &watched] {
                std::fs::create_dir(d).unwrap();
            }
            std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(&watched, std::fs::Permissions::from_mode(0o1777)).unwrap();
            std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
            let precious = home.join("precious");
            match dir {
                true => std::fs::create_dir(&precious).unwrap(),
                false => std::fs::write(&precious, "root's").unwrap(),
            }
            // Open to the user: a directory moved needs its `..` written,
            // a file linked without owning it needs read and write access.
            std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o777)).unwrap();
            let root = Root::open_exact(&watched).unwrap();
            let tracker = Tracker::start_with_store(&root, &store).unwrap();
            tracker.set_paused(true);
            let mut cmd = sandkeeper_testkit::privilege::setpriv_nobody();
            // (Not a `python3` first in root's PATH: it may be one others
            // cannot run.)
            cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .args(["python3", "-c"])
                .arg(format!(
                    "import os, sys, time\n\
                     h, r = sys.argv[1], sys.argv[2]\n\
                     def live():\n    print('READY moved', flush=True); time.sleep(600)\n\
                     {script}\nprint('READY moved', flush=True)"
                ))
                .arg(&home)
                .arg(&watched);
            let mut mover = Helper::spawn(cmd);
            mover.expect("READY");
            let moved = watched.join("precious");
            let ctime = |p: &Path| {
                let m = std::fs::symlink_metadata(p).unwrap();
                (m.ctime(), m.ctime_nsec())
            };
            let before = ctime(&moved);
            if !script.contains("live()") {
                mover.kill(); // gone (and reaped) before its event is read
            }
            tracker.set_paused(false);
            tracker.drain();
            assert_eq!(ctime(&moved), before, "{case}: written on");
            assert_eq!(xattr_get(&moved, origin::XATTR), None, "{case}");
            let reader = origin::Reader::with_store(root.fd(), &store).unwrap();
            assert_eq!(reader.read(name("precious")), None, "{case}");
            assert_eq!(tracker.stats().recorded, 0, "{case}: {:?}", tracker.stats());
            mover.kill();
            tracker.stop();
        }
    }
    drop(unmount);
}

/// Runs `f` when dropped.
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
