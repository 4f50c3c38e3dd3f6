//! Issue 11, item 3: on a full filesystem nothing could be removed. Every
//! removal first made its quarantine directory, which needs a free inode
//! (and, on ext4 without reserved blocks, a free block): a tmpfs out of
//! inodes or an ext4 made with `-m 0` at 100 % got `ENOSPC`, exactly when
//! removal matters. Now a removal reuses a quarantine of ours when there is
//! one, and otherwise a directory becomes its own quarantine (owned by the
//! remover, mode 0700, renamed in place): no new inode or block is needed.
//!
//! The filler is uid 65534, in a sticky world-writable root (like `/tmp`);
//! root's reap runs in a private PID namespace (every process visible).
//! One entry is held open by the filler: it is kept, untouched. And a
//! directory that became its own quarantine is out of reach of its owner
//! until it is put back exactly as it was, owner and mode included (by the
//! remover, or by the next reap when the remover was killed).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sandkeeper_engine::reap::{Policy, Reaper};
use sandkeeper_testkit::mounts::{Mount, ENOSPC};
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::{nobody_sh_in, setpriv_nobody};
use sandkeeper_testkit::process::spawn_ready;
use sandkeeper_testkit::scratch::Scratch;
use sandkeeper_testkit::tree::age_tree;

/// Runs a command as root; panics with its output when it fails.
fn run(program: &str, args: &[&std::ffi::OsStr]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An ext4 image made with `mkfs.ext4 -m 0` (no blocks reserved for root)
/// and `extra` options, loop-mounted (the loop device is detached when it
/// is unmounted: `mount -o loop` sets autoclear); unmounted on drop.
struct Ext4 {
    mnt: PathBuf,
}

impl Ext4 {
    fn mount(dir: &Path, extra: &[&str]) -> Ext4 {
        let img = dir.join("ext4.img");
        fs::File::create(&img).unwrap().set_len(16 << 20).unwrap();
        let mut args: Vec<&std::ffi::OsStr> = ["-q", "-F", "-m", "0"]
            .iter()
            .chain(extra)
            .map(std::ffi::OsStr::new)
            .collect();
        args.push(img.as_os_str());
        run("mkfs.ext4", &args);
        let mnt = dir.join("mnt");
        fs::create_dir(&mnt).unwrap();
        run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                img.as_os_str(),
                mnt.as_os_str(),
            ],
        );
        Ext4 { mnt }
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// What fills the filesystem, as uid 65534, in its own directory `fill`.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// Empty files until no inode is left.
    Inodes,
    /// One big file, then small ones, until no block is left.
    Blocks,
}

const FILL_INODES: &str = "mkdir fill; i=0; \
    while [ $i -lt 20000 ] && touch fill/f$i 2>/dev/null; do i=$((i+1)); done";
const FILL_BLOCKS: &str = "mkdir fill; head -c 256M /dev/zero > fill/big 2>/dev/null || true; \
    i=0; while [ $i -lt 2000 ] && head -c 1024 /dev/zero > fill/s$i 2>/dev/null; do i=$((i+1)); done; \
    sync";

/// Fills `root` (sticky, world-writable) as uid 65534, with root's entries
/// made first: `app-1` and `app-2` (root's) and `app-held` (the filler's,
/// mode 0751, a file in it held open by the filler); then reaps `app-*`.
fn full_then_reap(root: &Path, fill: Fill, what: &str) {
    fs::set_permissions(root, fs::Permissions::from_mode(0o1777)).unwrap();
    for name in ["app-1", "app-2"] {
        let entry = root.join(name);
        fs::create_dir_all(entry.join("sub")).unwrap();
        for f in 0..3 {
            fs::write(entry.join(format!("f{f}")), "data").unwrap();
        }
        fs::write(entry.join("sub/file"), "data").unwrap();
        age_tree(&entry, Duration::from_secs(7200));
    }
    nobody_sh_in(
        "mkdir app-held && echo held > app-held/file && chmod 0751 app-held",
        root,
    );
    age_tree(&root.join("app-held"), Duration::from_secs(9000));
    let holder = spawn_ready(
        setpriv_nobody()
            .args([
                "sh",
                "-c",
                "exec 3<app-held/file; echo ready; exec sleep 120",
            ])
            .current_dir(root),
    );
    nobody_sh_in(
        match fill {
            Fill::Inodes => FILL_INODES,
            Fill::Blocks => FILL_BLOCKS,
        },
        root,
    );
    // The precondition: nothing left of what was filled.
    let vfs = rustix::fs::statvfs(root).unwrap();
    let left = match fill {
        Fill::Inodes => vfs.f_ffree,
        Fill::Blocks => vfs.f_bavail,
    };
    assert_eq!(
        left, 0,
        "{what}: the filesystem is not full ({} inodes, {} blocks free)",
        vfs.f_ffree, vfs.f_bavail
    );
    if let Err(e) = fs::create_dir(root.join("probe")) {
        assert_eq!(e.raw_os_error(), Some(ENOSPC), "{what}");
    } else {
        // tmpfs needs no block for a directory.
        assert!(matches!(fill, Fill::Blocks), "{what}: made a directory");
        rustix::fs::unlinkat(
            rustix::fs::CWD,
            root.join("probe"),
            rustix::fs::AtFlags::REMOVEDIR,
        )
        .unwrap();
    }

    let policy = Policy::builder()
        .matching("app-*")
        .grace(Duration::ZERO)
        .build()
        .unwrap();
    let report = Reaper::new(policy).reap(&[root]).unwrap();

    let r = &report.roots[0];
    assert!(r.errors.is_empty(), "{what}: {:?}", r.errors);
    let removed: Vec<_> = r
        .removed
        .iter()
        .map(|e| e.path.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(removed, ["app-1", "app-2"], "{what}: {r:?}");
    // The held entry is back as it was: its name, owner, mode, content.
    let held = root.join("app-held");
    let meta = fs::symlink_metadata(&held).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (65534, 65534, 0o751),
        "{what}"
    );
    assert_eq!(fs::read_to_string(held.join("file")).unwrap(), "held\n");
    let mut names: Vec<String> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.retain(|n| n != "lost+found");
    assert_eq!(names, ["app-held", "fill"], "{what}: nothing else is left");
    drop(holder);
}

/// Whether `script` succeeds as uid 65534 in `dir`.
fn nobody_can(script: &str, dir: &Path) -> bool {
    setpriv_nobody()
        .args(["sh", "-c", script])
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run setpriv (util-linux)")
        .success()
}

/// The remover's half, without a reap: on a tmpfs without a free inode a
/// directory becomes its own quarantine. Its owner can then no longer look
/// inside (nor see it under its name); restored, or handed out again as a
/// killed remover's leftover and restored, it is exactly as it was.
#[test]
fn an_entry_that_is_its_own_quarantine_comes_back_as_it_was() {
    use sandkeeper_engine::remove::{pending_leftovers, quarantine_entry, RemoveOptions, Restore};
    use std::ffi::OsStr;
    use std::os::fd::AsFd;

    if !sandkeeper_testkit::privilege::require_root(
        "an_entry_that_is_its_own_quarantine_comes_back_as_it_was",
    ) {
        return;
    }
    let base = Scratch::reachable_by_others("hostile-full-own");
    let mnt = Mount::tmpfs_with(&base.path().join("mnt"), "size=16m,nr_inodes=64");
    let root = mnt.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o1777)).unwrap();
    nobody_sh_in(
        "mkdir app-held && echo mine > app-held/file && chmod 2751 app-held",
        root,
    );
    nobody_sh_in(FILL_INODES, root);
    let dir = fs::File::open(root).unwrap();
    let fd = dir.as_fd();
    let opts = RemoveOptions::new();
    let as_it_was = |what: &str| {
        let meta = fs::symlink_metadata(root.join("app-held")).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (65534, 65534, 0o2751),
            "{what}"
        );
        assert_eq!(
            fs::read_to_string(root.join("app-held/file")).unwrap(),
            "mine\n"
        );
        assert!(nobody_can("cat app-held/file", root), "{what}");
    };

    let held = quarantine_entry(fd, OsStr::new("app-held"), &opts).unwrap();
    let at = root.join(held.path_in_parent());
    assert!(
        held.path_in_parent()
            .as_os_str()
            .as_encoded_bytes()
            .starts_with(b".sandkeeper-pending-0-"),
        "{}",
        at.display()
    );
    assert!(!root.join("app-held").exists());
    let meta = fs::symlink_metadata(&at).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o700));
    let inside = at.join("file");
    assert!(
        !nobody_can(&format!("cat '{}'", inside.display()), root),
        "its owner can still look inside"
    );
    assert_eq!(held.restore(), Restore::Restored);
    as_it_was("restored");

    // A remover killed after the move: the next check gets it back.
    let held = quarantine_entry(fd, OsStr::new("app-held"), &opts).unwrap();
    drop(held);
    let mut pending = pending_leftovers(fd, &opts).unwrap();
    assert_eq!(pending.len(), 1);
    let again = pending.pop().unwrap();
    assert_eq!(again.original_name(), Some(OsStr::new("app-held")));
    assert_eq!(again.restore(), Restore::Restored);
    as_it_was("restored by the next check");
}

#[test]
fn a_full_filesystem_is_still_reaped() {
    run_in_pid_namespace(
        "a_full_filesystem_is_still_reaped",
        "full_fs::inner_full_filesystems",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_full_filesystems() {
    if !in_namespace() {
        return;
    }
    {
        let base = Scratch::reachable_by_others("hostile-full-tmpfs-inodes");
        let fs = Mount::tmpfs_with(&base.path().join("mnt"), "size=16m,nr_inodes=64");
        full_then_reap(fs.path(), Fill::Inodes, "tmpfs, no inode left");
    }
    {
        let base = Scratch::reachable_by_others("hostile-full-tmpfs-blocks");
        let fs = Mount::tmpfs_with(&base.path().join("mnt"), "size=1m");
        full_then_reap(fs.path(), Fill::Blocks, "tmpfs, no block left");
    }
    {
        let base = Scratch::reachable_by_others("hostile-full-ext4-blocks");
        let fs = Ext4::mount(base.path(), &[]);
        full_then_reap(&fs.mnt, Fill::Blocks, "ext4 -m 0, no block left");
    }
    {
        let base = Scratch::reachable_by_others("hostile-full-ext4-inodes");
        let fs = Ext4::mount(base.path(), &["-N", "64"]);
        full_then_reap(&fs.mnt, Fill::Inodes, "ext4 -m 0, no inode left");
    }
}
