//! The size walker against `du`: hard links inside one entry and across
//! entries, sparse files, symlinks, FIFOs and sockets, mount points (tmpfs
//! and same-filesystem bind mounts), newest mtime, unreadable directories,
//! a 100,000-deep tree, and the visitor's `Skip` and `Quit`.

use std::ffi::OsString;
use std::fs::{self, File, FileTimes};
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, Mode, OFlags};
use sandkeeper_engine::walk::{self, FileKind, HardLinks, Usage, WalkState};
use sandkeeper_engine::{sandbox, ErrorKind};
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::privilege::require_root;
use sandkeeper_testkit::process::{open_fds, within};
use sandkeeper_testkit::tree::{fifo, mkdirs, open_dir};

/// `du -sxB1 [--apparent-size] path` in bytes.
fn du_bytes(path: &Path, apparent: bool) -> u64 {
    let mut cmd = Command::new("du");
    cmd.arg("-sxB1");
    if apparent {
        cmd.arg("--apparent-size");
    }
    let out = cmd.arg(path).output().expect("run du");
    assert!(out.status.success(), "du failed: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// `du -xB1 [--apparent-size] --max-depth=1 dir`: bytes per entry name,
/// sorted by name (the last line, `dir` itself, left out).
fn du_entries(dir: &Path, apparent: bool) -> Vec<(OsString, u64)> {
    let mut cmd = Command::new("du");
    cmd.args(["-xB1", "--max-depth=1"]);
    if apparent {
        cmd.arg("--apparent-size");
    }
    let out = cmd.arg(dir).output().expect("run du");
    assert!(out.status.success(), "du failed: {out:?}");
    let mut entries: Vec<(OsString, u64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (bytes, path) = line.split_once('\t')?;
            let path = Path::new(path);
            (path != dir).then(|| (path.file_name().unwrap().to_owned(), bytes.parse().unwrap()))
        })
        .collect();
    entries.sort();
    entries
}

/// Writes `len` bytes of data into `path`.
fn write_file(path: &Path, len: usize) {
    fs::write(path, vec![0x5a; len]).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A sparse file: `len` bytes long, with 8 KiB of data at `len / 2`.
fn sparse_file(path: &Path, len: u64) {
    let mut f = File::create(path).unwrap();
    f.set_len(len).unwrap();
    f.seek(SeekFrom::Start(len / 2)).unwrap();
    f.write_all(&[1u8; 8192]).unwrap();
}

fn continue_all(_: &walk::Visit<'_>) -> WalkState {
    WalkState::Continue
}

/// A tree with a bit of everything: nested directories, files of several
/// sizes, hard links inside it, a sparse file, a symlink to a directory
/// outside, a FIFO and a socket. Returns the entry's path.
fn mixed_tree(root: &Path) -> PathBuf {
    let outside = root.join("outside");
    mkdirs(&outside);
    write_file(&outside.join("big"), 3 << 20);

    let t = root.join("tree");
    mkdirs(&t.join("a/b/c"));
    mkdirs(&t.join("empty"));
    write_file(&t.join("small"), 10);
    write_file(&t.join("a/one-block"), 4096);
    write_file(&t.join("a/b/odd"), 12_345);
    write_file(&t.join("a/b/c/large"), 1 << 20);
    fs::hard_link(t.join("a/b/c/large"), t.join("large-again")).unwrap();
    fs::hard_link(t.join("a/b/c/large"), t.join("a/large-thrice")).unwrap();
    sparse_file(&t.join("sparse"), 1 << 30);
    symlink(&outside, t.join("to-outside")).unwrap();
    symlink("dangling-target", t.join("a/dangling")).unwrap();
    fifo(&t.join("a/fifo"));
    let socket = std::os::unix::net::UnixListener::bind(t.join("a/b/socket")).unwrap();
    drop(socket); // the socket file stays
    t
}

#[test]
fn sizes_match_du() {
    let sb = sandbox!().unwrap();
    let tree = mixed_tree(sb.path());
    let usage = {
        let tree = tree.clone();
        within(Duration::from_secs(60), move || walk::usage(&tree).unwrap())
    };
    assert_eq!(usage.disk_bytes, du_bytes(&tree, false), "{usage:?}");
    assert_eq!(usage.apparent_bytes, du_bytes(&tree, true), "{usage:?}");
    // tree, a, a/b, a/b/c, empty
    assert_eq!(usage.dirs, 5);
    // small, one-block, odd, large (3 names), sparse, 2 symlinks, fifo, socket
    assert_eq!(usage.files, 9);
    assert!(
        usage.errors.is_empty() && usage.error_count == 0,
        "{:?}",
        usage.errors
    );
    assert!(usage.mount_points.is_empty());
    assert!(!usage.stopped);
}

#[test]
fn sparse_files_count_their_blocks_not_their_length() {
    let sb = sandbox!().unwrap();
    let dir = sb.path().join("vm");
    mkdirs(&dir);
    sparse_file(&dir.join("rootfs.ext4"), 1 << 30);
    let usage = walk::usage(&dir).unwrap();
    assert!(usage.apparent_bytes > 1 << 30, "{usage:?}");
    assert!(usage.disk_bytes < 1 << 20, "{usage:?}");
    assert_eq!(usage.disk_bytes, du_bytes(&dir, false));
    assert_eq!(usage.apparent_bytes, du_bytes(&dir, true));
}

#[test]
fn symlinks_are_counted_not_followed() {
    let sb = sandbox!().unwrap();
    let outside = sb.path().join("outside");
    mkdirs(&outside);
    write_file(&outside.join("big"), 2 << 20);
    let dir = sb.path().join("dir");
    mkdirs(&dir);
    symlink(&outside, dir.join("link")).unwrap();

    let usage = walk::usage(&dir).unwrap();
    assert_eq!((usage.dirs, usage.files), (1, 1));
    assert!(usage.disk_bytes < 1 << 20, "{usage:?}");
    // The link itself: its length is its apparent size.
    let link_len = outside.as_os_str().len() as u64;
    let dir_size = fs::symlink_metadata(&dir).unwrap().len();
    assert_eq!(usage.apparent_bytes, dir_size + link_len);

    // Measuring the symlink itself measures the link, not its target.
    let link = walk::usage(&dir.join("link")).unwrap();
    assert_eq!(
        (link.dirs, link.files, link.apparent_bytes),
        (0, 1, link_len)
    );
}

#[test]
fn fifos_and_sockets_are_not_opened() {
    let sb = sandbox!().unwrap();
    let dir = sb.path().join("pipes");
    mkdirs(&dir);
    fifo(&dir.join("fifo"));
    let listener = std::os::unix::net::UnixListener::bind(dir.join("socket")).unwrap();
    listener.set_nonblocking(true).unwrap();
    let kinds = {
        let dir = dir.clone();
        within(Duration::from_secs(20), move || {
            let mut kinds = Vec::new();
            let parent = open_dir(dir.parent().unwrap());
            let usage = walk::usage_at(
                parent.as_fd(),
                dir.file_name().unwrap(),
                &mut HardLinks::new(),
                &mut |v| {
                    kinds.push((v.path(), v.kind()));
                    WalkState::Continue
                },
            )
            .unwrap();
            assert_eq!(usage.files, 2);
            kinds.sort_by(|a, b| a.0.cmp(&b.0));
            kinds
        })
    };
    assert_eq!(
        kinds,
        [
            (PathBuf::new(), FileKind::Dir),
            (PathBuf::from("fifo"), FileKind::Fifo),
            (PathBuf::from("socket"), FileKind::Socket),
        ]
    );
    // Nobody connected to the socket.
    assert!(listener.accept().is_err());
}

#[test]
fn hard_links_inside_one_entry_count_once() {
    let sb = sandbox!().unwrap();
    let dir = sb.path().join("links");
    mkdirs(&dir.join("sub"));
    write_file(&dir.join("data"), 100_000);
    for name in ["l1", "l2", "sub/l3"] {
        fs::hard_link(dir.join("data"), dir.join(name)).unwrap();
    }
    let usage = walk::usage(&dir).unwrap();
    assert_eq!(usage.files, 1);
    assert_eq!(usage.disk_bytes, du_bytes(&dir, false));
    assert_eq!(usage.apparent_bytes, du_bytes(&dir, true));
    assert!(usage.apparent_bytes < 200_000);
}

/// Entries `e0`..`e5` of `parent` with hard links between them, inodes
/// linked from up to three entries.
fn linked_entries(parent: &Path) {
    for i in 0..6 {
        mkdirs(&parent.join(format!("e{i}/sub")));
        write_file(&parent.join(format!("e{i}/own")), 1000 * (i + 1));
    }
    write_file(&parent.join("e1/shared-a"), 300_000);
    write_file(&parent.join("e4/sub/shared-b"), 70_000);
    write_file(&parent.join("e5/shared-c"), 9_000);
    let links = [
        ("e1/shared-a", "e3/sub/a"),
        ("e1/shared-a", "e5/a"),
        ("e4/sub/shared-b", "e0/b"),
        ("e4/sub/shared-b", "e2/sub/b"),
        ("e5/shared-c", "e5/sub/c-again"),
        ("e5/shared-c", "e2/c"),
    ];
    for (from, to) in links {
        fs::hard_link(parent.join(from), parent.join(to)).unwrap();
    }
}

/// The entries of `dir` in directory order (the order `du` walks them).
fn dir_order(dir: &Path) -> Vec<OsString> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect()
}

fn by_name(names: &[OsString], usages: &[Usage], apparent: bool) -> Vec<(OsString, u64)> {
    let mut out: Vec<(OsString, u64)> = names
        .iter()
        .zip(usages)
        .map(|(n, u)| {
            (
                n.clone(),
                if apparent {
                    u.apparent_bytes
                } else {
                    u.disk_bytes
                },
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn hard_links_across_entries_match_du_max_depth() {
    let sb = sandbox!().unwrap();
    let parent = sb.path().join("parent");
    linked_entries(&parent);
    let names = dir_order(&parent);
    let fd = open_dir(&parent);

    // One after the other with one set, in du's order.
    let mut links = HardLinks::new();
    let sequential: Vec<Usage> = names
        .iter()
        .map(|n| walk::usage_at(fd.as_fd(), n, &mut links, &mut continue_all).unwrap())
        .collect();
    assert_eq!(links.len(), 3);
    for apparent in [false, true] {
        assert_eq!(
            by_name(&names, &sequential, apparent),
            du_entries(&parent, apparent)
        );
    }

    // In parallel: the same numbers however the work was split.
    for threads in [1, 2, 3, 6] {
        let parallel: Vec<Usage> =
            walk::usage_many(fd.as_fd(), &names, threads, &|_, _| WalkState::Continue)
                .into_iter()
                .map(Result::unwrap)
                .collect();
        assert_eq!(parallel, sequential, "{threads} threads");
    }
}

#[test]
fn usage_many_attributes_links_to_the_first_entry_in_slice_order() {
    let sb = sandbox!().unwrap();
    let parent = sb.path().join("parent");
    linked_entries(&parent);
    let fd = open_dir(&parent);
    let forward: Vec<&str> = vec!["e0", "e1", "e2", "e3", "e4", "e5"];
    let backward: Vec<&str> = forward.iter().rev().copied().collect();
    let files = |names: &[&str], threads| -> Vec<u64> {
        walk::usage_many(fd.as_fd(), names, threads, &|_, _| WalkState::Continue)
            .into_iter()
            .map(|r| r.unwrap().files)
            .collect()
    };
    // Each entry's own file plus the shared ones it is first to hold.
    assert_eq!(files(&forward, 2), [2, 2, 2, 1, 1, 1]);
    assert_eq!(files(&backward, 2), [3, 2, 1, 1, 1, 1]);
    assert_eq!(files(&backward, 1), [3, 2, 1, 1, 1, 1]);
    let total = |names: &[&str]| -> u64 {
        walk::usage_many(fd.as_fd(), names, 2, &|_, _| WalkState::Continue)
            .into_iter()
            .map(|r| r.unwrap().disk_bytes)
            .sum()
    };
    assert_eq!(total(&forward), total(&backward));
}

#[test]
fn newest_mtime_is_the_newest_anywhere_inside() {
    let sb = sandbox!().unwrap();
    let dir = sb.path().join("times");
    let deep = dir.join("a/b/c/d");
    mkdirs(&deep);
    write_file(&dir.join("top-file"), 10);
    write_file(&deep.join("deep-file"), 10);

    let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
    let set = |path: &Path, when: SystemTime| {
        File::open(path)
            .unwrap()
            .set_times(FileTimes::new().set_modified(when))
            .unwrap_or_else(|e| panic!("set_times {}: {e}", path.display()));
    };
    let old = at(1_500_000_000);
    for p in ["top-file", "a", "a/b", "a/b/c", "a/b/c/d", ""] {
        set(&dir.join(p), old);
    }
    let newer = at(1_600_000_000) + Duration::from_millis(123);
    set(&deep.join("deep-file"), newer);
    let usage = walk::usage(&dir).unwrap();
    assert_eq!(usage.newest_mtime_ms, Some(1_600_000_000_123));

    // The entry itself counts too.
    set(&dir, at(1_700_000_000));
    assert_eq!(
        walk::usage(&dir).unwrap().newest_mtime_ms,
        Some(1_700_000_000_000)
    );
}

#[test]
fn an_unreadable_directory_is_a_soft_error() {
    let sb = sandbox!().unwrap();
    // A world-searchable parent: the walk below may run as `nobody`, and
    // gets the parent as a descriptor (the sandbox itself is 0700).
    let parent = sb.path().join("public");
    let tree = parent.join("tree");
    mkdirs(&tree.join("open"));
    mkdirs(&tree.join("locked/inner"));
    write_file(&tree.join("open/file"), 5000);
    write_file(&tree.join("locked/inner/secret"), 5000);
    for (p, mode) in [
        ("", 0o755),
        ("tree", 0o755),
        ("tree/open", 0o755),
        ("tree/locked", 0o000),
    ] {
        fs::set_permissions(parent.join(p), fs::Permissions::from_mode(mode)).unwrap();
    }
    let fd = open_dir(&parent);

    let walk_unprivileged = move || {
        if rustix::process::geteuid().is_root() {
            // Root reads mode 000 directories: become nobody, on this
            // thread only (raw syscalls: the rest of the test process keeps
            // its credentials).
            let gid = rustix::process::Gid::from_raw(65534);
            let uid = rustix::process::Uid::from_raw(65534);
            rustix::thread::set_thread_groups(&[]).unwrap();
            rustix::thread::set_thread_res_gid(gid, gid, gid).unwrap();
            rustix::thread::set_thread_res_uid(uid, uid, uid).unwrap();
        }
        walk::usage_at(
            fd.as_fd(),
            "tree".as_ref(),
            &mut HardLinks::new(),
            &mut continue_all,
        )
    };
    let usage = within(Duration::from_secs(20), walk_unprivileged).unwrap();
    fs::set_permissions(tree.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();

    assert_eq!(usage.error_count, 1, "{:?}", usage.errors);
    let error = &usage.errors[0];
    assert_eq!(error.path(), Path::new("locked"));
    assert_eq!(error.raw_os_error(), 13, "EACCES: {error}");
    assert_eq!(error.operation(), "cannot open directory");
    // tree, open, locked (counted, not entered); open/file.
    assert_eq!((usage.dirs, usage.files), (3, 1));
}

#[test]
fn failure_on_the_entry_itself_is_an_error() {
    let sb = sandbox!().unwrap();
    let missing = sb.path().join("missing");
    let err = walk::usage(&missing).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert_eq!(err.path(), Some(missing.as_path()));
    assert_eq!(err.io_error().unwrap().kind(), std::io::ErrorKind::NotFound);

    let fd = open_dir(sb.path());
    let err = walk::usage_at(
        fd.as_fd(),
        "nul\0name".as_ref(),
        &mut HardLinks::new(),
        &mut continue_all,
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);

    let results = walk::usage_many(fd.as_fd(), &["missing", ".sandkeeper-lease"], 2, &|_, _| {
        WalkState::Continue
    });
    assert!(results[0].is_err());
    assert_eq!(results[1].as_ref().unwrap().files, 1);
}

#[test]
fn visitor_skip_and_quit() {
    let sb = sandbox!().unwrap();
    let dir = sb.path().join("visit");
    mkdirs(&dir.join("skipped/deeper"));
    mkdirs(&dir.join("walked"));
    write_file(&dir.join("skipped/inside"), 50_000);
    write_file(&dir.join("walked/inside"), 50_000);
    let fd = open_dir(sb.path());

    // Skip: the directory is counted, its contents are neither visited nor
    // counted.
    let mut seen = Vec::new();
    let usage = walk::usage_at(
        fd.as_fd(),
        "visit".as_ref(),
        &mut HardLinks::new(),
        &mut |v| {
            seen.push(v.path());
            if v.name() == "skipped" {
                WalkState::Skip
            } else {
                WalkState::Continue
            }
        },
    )
    .unwrap();
    seen.sort();
    let want: Vec<PathBuf> = ["", "skipped", "walked", "walked/inside"]
        .iter()
        .map(PathBuf::from)
        .collect();
    assert_eq!(seen, want);
    assert_eq!((usage.dirs, usage.files), (3, 1));
    assert!(!usage.stopped);

    // Quit: the walk ends at once, without counting that inode.
    let mut visits = 0;
    let usage = walk::usage_at(
        fd.as_fd(),
        "visit".as_ref(),
        &mut HardLinks::new(),
        &mut |v| {
            visits += 1;
            if v.kind() == FileKind::File {
                WalkState::Quit
            } else {
                WalkState::Continue
            }
        },
    )
    .unwrap();
    assert!(usage.stopped);
    assert_eq!(usage.files, 0);
    assert!(usage.dirs >= 1 && usage.dirs < 5, "{usage:?}");
    assert!(visits <= 5, "{visits}");

    // Quit at the entry itself: nothing counted.
    let usage = walk::usage_at(
        fd.as_fd(),
        "visit".as_ref(),
        &mut HardLinks::new(),
        &mut |_| WalkState::Quit,
    )
    .unwrap();
    assert!(usage.stopped);
    assert_eq!(
        (
            usage.dirs,
            usage.files,
            usage.disk_bytes,
            usage.newest_mtime_ms
        ),
        (0, 0, 0, None)
    );

    // Skip at the entry itself: only the entry.
    let usage = walk::usage_at(
        fd.as_fd(),
        "visit".as_ref(),
        &mut HardLinks::new(),
        &mut |_| WalkState::Skip,
    )
    .unwrap();
    assert_eq!((usage.dirs, usage.files), (1, 0));
}

#[test]
fn visits_carry_identity_and_lazy_paths() {
    let sb = sandbox!().unwrap();
    let dir = sb.path().join("ids");
    mkdirs(&dir.join("x/y"));
    write_file(&dir.join("x/y/f"), 1);
    let fd = open_dir(sb.path());
    let mut seen = Vec::new();
    walk::usage_at(
        fd.as_fd(),
        "ids".as_ref(),
        &mut HardLinks::new(),
        &mut |v| {
            seen.push((v.path(), v.depth(), v.dev(), v.ino(), v.nlink()));
            WalkState::Continue
        },
    )
    .unwrap();
    assert_eq!(seen.len(), 4);
    for (path, depth, dev, ino, nlink) in seen {
        let st = fs::symlink_metadata(dir.join(&path)).unwrap();
        assert_eq!(
            (dev, ino, nlink),
            (st.dev(), st.ino(), st.nlink()),
            "{}",
            path.display()
        );
        assert_eq!(depth, path.components().count(), "{}", path.display());
    }
}

/// A chain `deep/d/d/…/d/bottom`, removed level by level on drop: each
/// step moves the rest of the chain up (`rename` does not depend on the
/// depth), so neither the removal nor the sandbox's own cleanup goes deep.
struct Chain {
    base: OwnedFd,
}

impl Chain {
    /// Creates `base/deep` with `depth` levels below it and a file at the
    /// bottom, holding one descriptor at a time.
    fn create(base: &Path, depth: usize) -> Chain {
        let chain = Chain {
            base: open_dir(base),
        };
        let dir_mode = Mode::from_raw_mode(0o755);
        rustix::fs::mkdirat(&chain.base, "deep", dir_mode).unwrap();
        let mut fd =
            rustix::fs::openat(&chain.base, "deep", OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&fd, "d", dir_mode).unwrap();
            fd = rustix::fs::openat(&fd, "d", OFlags::DIRECTORY, Mode::empty()).unwrap();
        }
        let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC;
        let file = rustix::fs::openat(&fd, "bottom", flags, Mode::from_raw_mode(0o644)).unwrap();
        rustix::io::write(&file, b"the bottom").unwrap();
        chain
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        let base = &self.base;
        loop {
            let Ok(top) = rustix::fs::openat(base, "deep", OFlags::DIRECTORY, Mode::empty()) else {
                return;
            };
            let moved = rustix::fs::renameat(&top, "d", base, "deep.next");
            let _ = rustix::fs::unlinkat(&top, "bottom", AtFlags::empty());
            let _ = rustix::fs::unlinkat(base, "deep", AtFlags::REMOVEDIR);
            if moved.is_err() {
                return;
            }
            let _ = rustix::fs::renameat(base, "deep.next", base, "deep");
        }
    }
}

#[test]
fn a_100000_deep_tree_needs_no_recursion_and_few_descriptors() {
    let sb = sandbox!().unwrap();
    // 100,000 levels on a tmpfs of its own (a mkdir per level takes minutes
    // on a journalled disk filesystem in a VM); without root, fewer levels
    // on the sandbox's filesystem.
    let mut mounts: Vec<Mount> = Vec::new();
    let (base, depth) = if rustix::process::geteuid().is_root() {
        let base = sb.path().join("deep-fs");
        mkdirs(&base);
        mounts.push(Mount::tmpfs_with(&base, "size=64m,mode=1777"));
        (base, 100_000)
    } else {
        eprintln!("not root: 20,000 levels on the sandbox's filesystem");
        (sb.path().to_owned(), 20_000)
    };
    let chain = Chain::create(&base, depth);
    let fd = open_dir(&base);
    let fds_before = open_fds();

    // A small stack: a walk that recursed per level would overflow it.
    let walker = std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut max_depth = 0;
            let mut max_fds = 0;
            let mut bottom = None;
            let mut visit = |v: &walk::Visit<'_>| {
                max_depth = max_depth.max(v.depth());
                if v.depth() % 10_000 == 0 {
                    max_fds = max_fds.max(open_fds());
                }
                if v.name() == "bottom" {
                    bottom = Some(v.path());
                }
                WalkState::Continue
            };
            let usage = walk::usage_at(
                fd.as_fd(),
                "deep".as_ref(),
                &mut HardLinks::new(),
                &mut visit,
            )
            .unwrap();
            (usage, max_depth, max_fds, bottom)
        })
        .unwrap();
    let (usage, max_depth, max_fds, bottom) = walker.join().expect("walk thread");
    assert!(usage.errors.is_empty(), "{:?}", usage.errors);
    assert_eq!(usage.dirs, depth as u64 + 1);
    assert_eq!(usage.files, 1);
    assert_eq!(max_depth, depth + 1);
    let bottom = bottom.expect("the bottom file was visited");
    assert_eq!(bottom.components().count(), depth + 1);
    assert!(bottom.ends_with("d/d/bottom"));
    // At most 32 directories open at once (other tests run alongside, so
    // allow for their descriptors too).
    assert!(
        max_fds < fds_before + 200,
        "{max_fds} open descriptors (from {fds_before})"
    );
    drop(chain);
    drop(mounts);
}

#[test]
fn mount_points_are_reported_and_not_entered() {
    if !require_root("mount_points_are_reported_and_not_entered") {
        return;
    }
    let sb = sandbox!().unwrap();
    let tree = sb.path().join("tree");
    mkdirs(&tree.join("sub/tmpfs"));
    mkdirs(&tree.join("bind"));
    write_file(&tree.join("sub/file"), 20_000);
    let outside = sb.path().join("outside");
    mkdirs(&outside);
    write_file(&outside.join("bound-data"), 300_000);
    let mut mounts: Vec<Mount> = Vec::new();

    let tmpfs = tree.join("sub/tmpfs");
    mounts.push(Mount::tmpfs_with(&tmpfs, "size=64m,mode=1777"));
    write_file(&tmpfs.join("in-tmpfs"), 1 << 20);
    mkdirs(&tmpfs.join("dir-in-tmpfs"));

    // A bind mount of the same filesystem: same st_dev, another mount id.
    let bind = tree.join("bind");
    mounts.push(Mount::bind(&outside, &bind));
    assert_eq!(
        fs::symlink_metadata(&bind).unwrap().dev(),
        fs::symlink_metadata(&tree).unwrap().dev()
    );

    let mut visited = Vec::new();
    let fd = open_dir(sb.path());
    let usage = walk::usage_at(
        fd.as_fd(),
        "tree".as_ref(),
        &mut HardLinks::new(),
        &mut |v| {
            visited.push(v.path());
            WalkState::Continue
        },
    )
    .unwrap();
    let mut mount_points = usage.mount_points.clone();
    mount_points.sort();
    assert_eq!(
        mount_points,
        [PathBuf::from("bind"), PathBuf::from("sub/tmpfs")]
    );
    visited.sort();
    let want: Vec<PathBuf> = ["", "sub", "sub/file"].iter().map(PathBuf::from).collect();
    assert_eq!(
        visited, want,
        "mount points and what is under them are not visited"
    );
    assert_eq!((usage.dirs, usage.files), (2, 1));
    assert!(usage.apparent_bytes < 100_000, "{usage:?}");

    // Nothing under or of the mount points is counted: the tree, `sub` and
    // `sub/file`, no more.
    let blocks = |p: &Path| fs::symlink_metadata(p).unwrap().blocks() * 512;
    let counted = blocks(&tree) + blocks(&tree.join("sub")) + blocks(&tree.join("sub/file"));
    assert_eq!(usage.disk_bytes, counted);

    // The entry itself may be a mount point: then its mount is walked.
    let inside = walk::usage(&tmpfs).unwrap();
    assert_eq!((inside.dirs, inside.files), (2, 1));
    assert!(inside.mount_points.is_empty());
    drop(mounts);
}

/// Deeper than the walker keeps directories open, with something left to
/// enter in every level after the deep descent: the closed levels are
/// reopened through `..` and finished.
#[test]
fn reopened_levels_are_finished() {
    let sb = sandbox!().unwrap();
    let tree = sb.path().join("wide-deep");
    let mut level = tree.clone();
    for _ in 0..45 {
        for leaf in ["y1", "y2", "y3"] {
            mkdirs(&level.join(leaf));
            write_file(&level.join(leaf).join("f"), 3000);
        }
        level = level.join("x");
    }
    mkdirs(&level);
    let usage = walk::usage(&tree).unwrap();
    assert!(usage.errors.is_empty(), "{:?}", usage.errors);
    assert_eq!(usage.dirs, 1 + 45 * 4);
    assert_eq!(usage.files, 45 * 3);
    assert_eq!(usage.disk_bytes, du_bytes(&tree, false));
    assert_eq!(usage.apparent_bytes, du_bytes(&tree, true));
}

/// The visitor gets the entry's own descriptor at depth 0 when the entry is
/// a directory the walk opened (the very inode it `statx`ed: a name read
/// through it is the entry's), and nowhere else: not for deeper inodes, a
/// file, or a mount point (not opened before its visit).
#[test]
fn the_entry_s_own_descriptor_is_shown_at_depth_0_only() {
    let sb = sandbox!().unwrap();
    mkdirs(&sb.path().join("dir/sub"));
    fs::write(sb.path().join("dir/marker"), b"inside dir").unwrap();
    fs::write(sb.path().join("dir/sub/f"), b"x").unwrap();
    fs::write(sb.path().join("file"), b"a file").unwrap();
    let fd = open_dir(sb.path());
    let mut shown = Vec::new();
    for name in ["dir", "file"] {
        walk::usage_at(fd.as_fd(), name.as_ref(), &mut HardLinks::new(), &mut |v| {
            let read = v.dir().map(|dir| {
                let marker = rustix::fs::openat(
                    dir,
                    "marker",
                    OFlags::RDONLY | OFlags::NOFOLLOW,
                    Mode::empty(),
                )
                .map(File::from);
                let st = rustix::fs::fstat(dir).unwrap();
                assert_eq!((st.st_dev, st.st_ino), (v.dev(), v.ino()));
                marker.map_or(String::new(), |mut f| {
                    let mut text = String::new();
                    std::io::Read::read_to_string(&mut f, &mut text).unwrap();
                    text
                })
            });
            shown.push((name, v.depth(), v.path(), read));
            WalkState::Continue
        })
        .unwrap();
    }
    shown.sort();
    assert_eq!(
        shown,
        [
            ("dir", 0, PathBuf::new(), Some("inside dir".to_string())),
            ("dir", 1, PathBuf::from("marker"), None),
            ("dir", 1, PathBuf::from("sub"), None),
            ("dir", 2, PathBuf::from("sub/f"), None),
            ("file", 0, PathBuf::new(), None),
        ]
    );
    if !require_root("the_entry_s_own_descriptor_is_shown_at_depth_0_only (mount point)") {
        return;
    }
    let mnt = Mount::tmpfs(&sb.path().join("mnt"), "1m");
    let mut at_mount = None;
    let usage = walk::usage_at(
        fd.as_fd(),
        "mnt".as_ref(),
        &mut HardLinks::new(),
        &mut |v| {
            if v.depth() == 0 {
                at_mount = Some((v.is_mount_point(), v.dir().is_some()));
            }
            WalkState::Skip
        },
    )
    .unwrap();
    assert_eq!(at_mount, Some((true, false)));
    assert_eq!(usage.mount_points, [PathBuf::from(".")]);
    drop(mnt);
}
