//! The in-use index against real processes, mounts, loop devices and
//! sockets.
//!
//! On the machines this project runs on, even root cannot inspect pid 1's
//! `/proc` entries, so a collection in the host's pid namespace is never
//! complete. Tests that need a complete index therefore re-run themselves
//! as pid 1 of a private pid and mount namespace
//! ([`sandkeeper_testkit::namespace::run_in_pid_namespace`]): the outer
//! `#[test]` needs root, the inner one is `#[ignore]`d and does the work
//! there. Everything an inner test starts dies with its namespace, and its
//! mounts with its private mount namespace; guards clean up earlier still.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandkeeper_engine::inuse::{
    BlindSpotKind, HoldKind, InUse, InUseOptions, InspectStep, KernelUse, KernelUseKind,
    MountNamespace, OverlayLayer,
};
use sandkeeper_engine::sandbox;
use sandkeeper_testkit::mounts::{LoopDevice, Mount};
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::SETPRIV_NOBODY;
use sandkeeper_testkit::process::{child_mode, wait_until, Helper, CHILD_ENV};
use sandkeeper_testkit::tree::identity;

#[test]
#[ignore = "helper process entry point, run by other tests"]
fn child_main() {
    let Some(mode) = child_mode() else {
        return;
    };
    let path = || PathBuf::from(std::env::var("SK_PATH").expect("SK_PATH"));
    let live = || std::thread::sleep(std::time::Duration::from_secs(600));
    match mode.as_str() {
        // Hold a file open.
        "open" => {
            let file = fs::File::open(path()).expect("open");
            println!("READY {}", std::os::fd::AsRawFd::as_raw_fd(&file));
            live();
            drop(file);
        }
        // Live in a directory.
        "cwd" => {
            std::env::set_current_dir(path()).expect("chdir");
            println!("READY cwd");
            live();
        }
        // Map a file, then close the descriptor: only the mapping holds it.
        "mmap" => {
            map_file(&path());
            println!("READY mmap");
            live();
        }
        // Change root into a directory.
        "chroot" => {
            std::os::unix::fs::chroot(path()).expect("chroot");
            std::env::set_current_dir("/").expect("chdir /");
            println!("READY root");
            live();
        }
        // One thread with its own working directory (unshare(CLONE_FS)).
        "thread-cwd" => {
            let (tx, rx) = std::sync::mpsc::channel();
            let dir = path();
            std::thread::spawn(move || {
                unshare_fs();
                std::env::set_current_dir(dir).expect("chdir in thread");
                tx.send(rustix::thread::gettid().as_raw_nonzero().get())
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_secs(600));
            });
            println!("READY {}", rx.recv().unwrap());
            live();
        }
        // Bind-mount SK_SRC onto SK_PATH in this (private) mount namespace.
        "bind" => {
            let src = PathBuf::from(std::env::var("SK_SRC").unwrap());
            rustix::mount::mount_bind(&src, path()).expect("bind mount");
            println!("READY bind");
            live();
        }
        // Collect with the pids in SK_IGNORE vouched for, and report.
        "collect" => {
            let mut options = InUseOptions::new();
            if let Ok(pids) = std::env::var("SK_IGNORE") {
                options.ignore_pids(pids.split(',').filter_map(|p| p.parse().ok()));
            }
            let index = options.collect().expect("collect");
            for u in index.uninspectable() {
                println!(
                    "UNINSPECTABLE {} {:?} {:?} {:?}",
                    u.pid,
                    u.step,
                    u.error().kind(),
                    u.comm
                );
            }
            for u in index.assumed() {
                println!("ASSUMED {}", u.pid);
            }
            println!("COMPLETE {}", index.is_complete());
        }
        other => panic!("unknown {} mode {other:?}", CHILD_ENV),
    }
}

/// `mmap(PROT_READ, MAP_SHARED)` of the whole file, never unmapped; the
/// descriptor is closed at once.
#[allow(unsafe_code)]
fn map_file(path: &Path) {
    use std::os::fd::AsRawFd;
    let file = fs::File::open(path).expect("open for mmap");
    let len = file.metadata().unwrap().len() as usize;
    // SAFETY: a fresh read-only shared mapping at an address the kernel
    // picks; nothing in this process aliases it, and it is never unmapped
    // or written, so no Rust reference is invalidated.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED, "mmap {}", path.display());
}

/// `unshare(CLONE_FS)` for the calling thread.
#[allow(unsafe_code)]
fn unshare_fs() {
    // SAFETY: CLONE_FS only gives this thread its own working directory,
    // root and umask; no file descriptor tables are split.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) }
        .expect("unshare(CLONE_FS)");
}

/// What `index` says about `path`'s inode: `(pid, how)` pairs.
fn holds(index: &InUse, path: &Path) -> Vec<(u32, HoldKind)> {
    let (dev, ino) = identity(path);
    index
        .holders(dev, ino)
        .iter()
        .map(|h| (h.pid, h.how))
        .collect()
}

fn has(index: &InUse, path: &Path, pid: u32, how: HoldKind) -> bool {
    holds(index, path).contains(&(pid, how))
}

fn collect() -> InUse {
    InUse::collect(&InUseOptions::new()).expect("collect")
}

fn make_file(path: &Path, len: usize) {
    fs::write(path, vec![b'x'; len]).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

// ---------------------------------------------------------------------
// Without namespaces or root.

/// A child that holds a file open is found by the file's inode; once it is
/// gone, nothing holds the file. (The test's own child is always
/// inspectable, so this needs neither root nor a namespace.)
#[test]
fn a_child_holding_a_file_is_found_and_forgotten() {
    let sb = sandbox!().unwrap();
    let file = sb.path().join("held.txt");
    make_file(&file, 10);
    let mut holder = Helper::start("open", &[("SK_PATH", file.to_str().unwrap())]);
    let fd: u32 = holder.expect("READY").parse().unwrap();

    let index = collect();
    assert!(
        has(&index, &file, holder.pid(), HoldKind::Fd(fd)),
        "{:?}",
        holds(&index, &file)
    );
    let holder_entry = index.holders(identity(&file).0, identity(&file).1)[0].clone();
    assert!(holder_entry
        .to_string()
        .starts_with(&format!("pid {} (", holder.pid())));

    holder.kill();
    assert!(holds(&collect(), &file).is_empty());
}

/// Spreading the processes over threads finds the same holders.
#[test]
fn threaded_and_serial_collections_agree() {
    let sb = sandbox!().unwrap();
    let file = sb.path().join("held.txt");
    make_file(&file, 10);
    let holders: Vec<Helper> = (0..3)
        .map(|_| Helper::start("open", &[("SK_PATH", file.to_str().unwrap())]))
        .collect();
    for h in &holders {
        h.expect("READY");
    }
    let serial = InUseOptions::new().threads(1).collect().unwrap();
    for threads in [0, 4] {
        let threaded = InUseOptions::new().threads(threads).collect().unwrap();
        assert_eq!(
            holds(&threaded, &file),
            holds(&serial, &file),
            "threads({threads})"
        );
    }
    let mut pids: Vec<u32> = holds(&serial, &file).iter().map(|&(pid, _)| pid).collect();
    pids.sort_unstable();
    let mut want: Vec<u32> = holders.iter().map(Helper::pid).collect();
    want.sort_unstable();
    assert_eq!(pids, want);
}

/// The caller is left out by default (its own claim descriptors would make
/// entries look in use), and included on request.
#[test]
fn the_calling_process_is_left_out_unless_asked() {
    let sb = sandbox!().unwrap();
    let file = sb.path().join("mine.txt");
    make_file(&file, 1);
    let open = fs::File::open(&file).unwrap();
    let me = std::process::id();

    let default = collect();
    assert!(holds(&default, &file).iter().all(|&(pid, _)| pid != me));
    let mut options = InUseOptions::new();
    options.include_self(true).threads(1);
    let with_self = options.collect().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&open) as u32;
    assert!(
        has(&with_self, &file, me, HoldKind::Fd(fd)),
        "{:?}",
        holds(&with_self, &file)
    );
    // The sandbox's own lease descriptor is a hold of ours on the directory.
    assert!(holds(&with_self, sb.path())
        .iter()
        .any(|&(pid, _)| pid == me));
    drop(open);
}

/// Bound unix socket paths show up under their directory (spaces and all)
/// and disappear when the socket is closed; `/tmp/a` does not contain
/// `/tmp/ab`.
#[test]
fn bound_socket_paths_are_found_under_their_entry() {
    let sb = sandbox!().unwrap();
    let entry = sb.path().join("app");
    fs::create_dir_all(entry.join("run dir")).unwrap();
    fs::create_dir(sb.path().join("app-2")).unwrap();
    let socket = entry.join("run dir").join("my sock");
    let listener = UnixListener::bind(&socket).unwrap();

    let index = collect();
    assert_eq!(index.socket_paths_under(&entry), vec![socket.as_path()]);
    assert_eq!(index.socket_paths_under(sb.path()), vec![socket.as_path()]);
    assert!(index
        .socket_paths_under(&sb.path().join("app-2"))
        .is_empty());
    assert!(index.socket_paths_under(&sb.path().join("ap")).is_empty());
    assert!(index.socket_paths().contains(&socket));

    drop(listener);
    assert!(collect().socket_paths_under(&entry).is_empty());
}

/// An unusable proc root is the one hard error, and names the path.
#[test]
fn an_unusable_proc_root_is_an_error_with_its_path() {
    let sb = sandbox!().unwrap();
    let missing = sb.path().join("no-proc");
    let err = InUseOptions::new()
        .proc_root(&missing)
        .collect()
        .unwrap_err();
    assert_eq!(err.path(), Some(missing.as_path()));
}

// ---------------------------------------------------------------------
// In a private pid namespace (root).

/// Every way a process can hold an inode, each found with the right pid and
/// kind, in a complete index; and all gone once the holders are killed.
#[test]
fn process_holders_in_a_private_pid_namespace() {
    run_in_pid_namespace(
        "process_holders_in_a_private_pid_namespace",
        "inner_process_holders",
    );
}

#[test]
#[ignore = "run inside a private pid namespace by process_holders_in_a_private_pid_namespace"]
fn inner_process_holders() {
    if !in_namespace() {
        return;
    }
    assert_eq!(
        std::process::id(),
        1,
        "inner_process_holders: expected to be pid 1 of a new pid namespace"
    );
    let sb = sandbox!().unwrap();
    let other = sandbox!("inuse-elsewhere").unwrap();
    let p = |name: &str| sb.path().join(name);
    for dir in [
        "workdir",
        "jail",
        "thread-dir",
        "real",
        "before",
        "bin",
        "foreign-src",
    ] {
        fs::create_dir(p(dir)).unwrap();
    }
    make_file(&p("held.txt"), 10);
    make_file(&p("mapped.bin"), 8192);
    make_file(&p("real/file.txt"), 10);
    make_file(&p("before/file.txt"), 10);

    // A file opened through a bind mount elsewhere is the same inode.
    let alias = other.path().join("alias");
    fs::create_dir(&alias).unwrap();
    let _alias_mount = Mount::bind(&p("real"), &alias);

    // An executable inside the entry.
    let sleep = which("sleep");
    fs::copy(&sleep, p("bin/sleep")).unwrap();
    fs::set_permissions(p("bin/sleep"), fs::Permissions::from_mode(0o755)).unwrap();

    let env = |path: &Path| vec![("SK_PATH", path.to_str().unwrap().to_owned())];
    let start = |mode: &str, path: &Path| {
        let env = env(path);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Helper::start(mode, &env)
    };
    let opener = start("open", &p("held.txt"));
    let fd: u32 = opener.expect("READY").parse().unwrap();
    let in_dir = start("cwd", &p("workdir"));
    in_dir.expect("READY");
    let mapper = start("mmap", &p("mapped.bin"));
    mapper.expect("READY");
    let jailed = start("chroot", &p("jail"));
    jailed.expect("READY");
    let threaded = start("thread-cwd", &p("thread-dir"));
    let tid: u32 = threaded.expect("READY").parse().unwrap();
    let via_alias = start("open", &alias.join("file.txt"));
    let alias_fd: u32 = via_alias.expect("READY").parse().unwrap();
    let renamed = start("open", &p("before/file.txt"));
    let renamed_fd: u32 = renamed.expect("READY").parse().unwrap();
    fs::rename(p("before"), p("after")).unwrap();
    let mut exe_cmd = Command::new(p("bin/sleep"));
    exe_cmd.arg("600");
    let exe = Helper::spawn(exe_cmd);
    let exe_inode = identity(&p("bin/sleep"));
    wait_until("the copied sleep to run", || {
        fs::metadata(format!("/proc/{}/exe", exe.pid())).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino()) == exe_inode
        })
    });
    // A process in another mount namespace with a bind mount whose source
    // is inside the entry.
    let target = other.path().join("foreign-target");
    fs::create_dir(&target).unwrap();
    let foreign = Helper::start_via(
        &["unshare", "--mount", "--propagation", "private"],
        "bind",
        &[
            ("SK_PATH", target.to_str().unwrap()),
            ("SK_SRC", p("foreign-src").to_str().unwrap()),
        ],
    );
    foreign.expect("READY");

    let index = collect();
    assert!(
        index.is_complete(),
        "uninspectable: {:?}",
        index.uninspectable()
    );
    assert!(index.process_count() >= 8, "{}", index.process_count());
    let cases: &[(&str, PathBuf, u32, HoldKind)] = &[
        (
            "open descriptor",
            p("held.txt"),
            opener.pid(),
            HoldKind::Fd(fd),
        ),
        (
            "working directory",
            p("workdir"),
            in_dir.pid(),
            HoldKind::Cwd,
        ),
        (
            "file mapping",
            p("mapped.bin"),
            mapper.pid(),
            HoldKind::Mmap,
        ),
        ("root directory", p("jail"), jailed.pid(), HoldKind::Root),
        (
            "thread working directory",
            p("thread-dir"),
            threaded.pid(),
            HoldKind::ThreadCwd(tid),
        ),
        (
            "opened through a bind mount",
            p("real/file.txt"),
            via_alias.pid(),
            HoldKind::Fd(alias_fd),
        ),
        (
            "parent renamed since",
            p("after/file.txt"),
            renamed.pid(),
            HoldKind::Fd(renamed_fd),
        ),
        ("executable", p("bin/sleep"), exe.pid(), HoldKind::Exe),
        (
            "executable mapping",
            p("bin/sleep"),
            exe.pid(),
            HoldKind::Mmap,
        ),
    ];
    for (name, path, pid, how) in cases {
        assert!(
            has(&index, path, *pid, *how),
            "{name}: {:?}",
            holds(&index, path)
        );
    }
    // The mapping is the only hold on the mapped file (its fd was closed).
    assert_eq!(
        holds(&index, &p("mapped.bin")),
        vec![(mapper.pid(), HoldKind::Mmap)]
    );
    // The process's own working directory is not repeated per thread.
    assert!(!holds(&index, Path::new("/"))
        .iter()
        .any(|(_, how)| matches!(how, HoldKind::ThreadCwd(_))));

    // The other mount namespace's bind mount, found by inode and by path.
    let (dev, ino) = identity(&p("foreign-src"));
    let foreign_ns = MountNamespace::Of { pid: foreign.pid() };
    let by_inode: Vec<&KernelUse> = index.kernel_users_of(dev, ino).collect();
    assert!(
        by_inode
            .iter()
            .any(|k| k.namespace == foreign_ns && k.kind == KernelUseKind::BindSource),
        "{by_inode:#?}"
    );
    let by_path = index.kernel_users_under(&p("foreign-src"));
    assert!(
        by_path.iter().any(|k| k.namespace == foreign_ns),
        "{by_path:#?}"
    );
    assert!(by_path.iter().all(|k| k.to_string().ends_with(&format!(
        "(in the mount namespace of pid {})",
        foreign.pid()
    ))));

    let helpers = [
        opener, in_dir, mapper, jailed, threaded, via_alias, renamed, exe, foreign,
    ];
    drop(helpers);
    let index = collect();
    assert!(
        index.is_complete(),
        "uninspectable: {:?}",
        index.uninspectable()
    );
    for (name, path, ..) in cases {
        assert!(
            holds(&index, path).is_empty(),
            "{name}: {:?}",
            holds(&index, path)
        );
    }
    assert_eq!(index.kernel_users_of(dev, ino).count(), 0);
}

/// A process the collector may not inspect makes the index incomplete and
/// is named; vouching for it moves it to "assumed". The collector runs as
/// `nobody` while root-owned processes exist.
#[test]
fn uninspectable_processes_in_a_private_pid_namespace() {
    run_in_pid_namespace(
        "uninspectable_processes_in_a_private_pid_namespace",
        "inner_uninspectable",
    );
}

#[test]
#[ignore = "run inside a private pid namespace by uninspectable_processes_in_a_private_pid_namespace"]
fn inner_uninspectable() {
    if !in_namespace() {
        return;
    }
    assert_eq!(
        std::process::id(),
        1,
        "inner_uninspectable: expected to be pid 1 of a new pid namespace"
    );
    let sb = sandbox!().unwrap();
    let root_holder = Helper::start("cwd", &[("SK_PATH", sb.path().to_str().unwrap())]);
    root_holder.expect("READY");
    let as_nobody = |ignore: &str| {
        let exit = Helper::start_via(&SETPRIV_NOBODY, "collect", &[("SK_IGNORE", ignore)]).wait();
        let (ok, lines) = (exit.success, exit.stdout);
        assert!(ok, "collector as nobody failed: {lines:?}");
        lines
    };
    let field = |lines: &[String], key: &str| -> Vec<String> {
        let prefix = format!("{key} ");
        lines
            .iter()
            .filter_map(|l| Some(l[l.find(&prefix)? + prefix.len()..].to_owned()))
            .collect()
    };

    // Pid 1 (this test) and the holder are root's; nobody cannot read their
    // descriptor tables.
    let lines = as_nobody("");
    assert_eq!(field(&lines, "COMPLETE"), ["false"], "{lines:?}");
    let uninspectable = field(&lines, "UNINSPECTABLE");
    let pids: Vec<&str> = uninspectable
        .iter()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        pids,
        ["1".to_owned(), root_holder.pid().to_string()],
        "{lines:?}"
    );
    let want = format!(
        "{:?} {:?}",
        InspectStep::FdTable,
        std::io::ErrorKind::PermissionDenied
    );
    for line in &uninspectable {
        assert!(line.contains(&want), "{line}");
        assert!(line.contains("Some("), "comm is readable: {line}");
    }

    // Vouched for, they are assumed to hold nothing.
    let lines = as_nobody(&format!("1,{}", root_holder.pid()));
    assert_eq!(field(&lines, "COMPLETE"), ["true"], "{lines:?}");
    assert!(field(&lines, "UNINSPECTABLE").is_empty(), "{lines:?}");
    assert_eq!(
        field(&lines, "ASSUMED"),
        ["1".to_owned(), root_holder.pid().to_string()]
    );

    // Vouching for one leaves the other.
    let lines = as_nobody("1");
    assert_eq!(field(&lines, "COMPLETE"), ["false"], "{lines:?}");
    assert_eq!(field(&lines, "ASSUMED"), ["1"]);

    // procfs mounted with hidepid=invisible hides processes from whoever
    // may not inspect them, without a trace: a blind spot, even for root,
    // unless it is in the exempt group (gid=, 0 by default: issue 10,
    // finding 7).
    let proc_dir = sb.path().join("proc");
    fs::create_dir(&proc_dir).unwrap();
    rustix::mount::mount(
        "proc",
        &proc_dir,
        "proc",
        rustix::mount::MountFlags::empty(),
        c"hidepid=invisible,gid=4242",
    )
    .unwrap();
    let _proc_mount = Mount::adopt(proc_dir.clone());
    let index = InUseOptions::new().proc_root(&proc_dir).collect().unwrap();
    let spots: Vec<BlindSpotKind> = index.blind_spots().iter().map(|b| b.kind).collect();
    assert_eq!(spots, [BlindSpotKind::HiddenProcesses]);
    assert!(!index.is_complete());
    assert!(holds(&index, sb.path()).contains(&(root_holder.pid(), HoldKind::Cwd)));
}

/// Kernel threads hold no user files: a normal user, who may not read
/// their `cwd` or `root`, must not count them as uninspectable (issue 15:
/// 58 kernel threads made every entry `unknown` for uid 65534). They are
/// told by `PF_KTHREAD` in `/proc/PID/stat`, which no process can forge,
/// never by name. Runs in the host's pid namespace, where the kernel
/// threads are listed.
#[test]
fn kernel_threads_are_never_uninspectable() {
    if !sandkeeper_testkit::privilege::require_root("kernel_threads_are_never_uninspectable") {
        return;
    }
    let is_kthread = |pid: &str| {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let flags: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(6)?
            .parse()
            .ok()?;
        Some(flags & 0x0020_0000 != 0)
    };
    let kthreads = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|p| is_kthread(p) == Some(true))
        .count();
    if kthreads == 0 {
        eprintln!("skipping: this procfs lists no kernel thread");
        return;
    }
    let exit = Helper::start_via(&SETPRIV_NOBODY, "collect", &[]).wait();
    assert!(
        exit.success,
        "collector as nobody failed: {:?}",
        exit.stdout
    );
    let counted: Vec<&String> = exit
        .stdout
        .iter()
        .filter(|l| {
            l.split_once("UNINSPECTABLE ")
                .and_then(|(_, rest)| rest.split(' ').next())
                .is_some_and(|pid| is_kthread(pid) == Some(true))
        })
        .collect();
    assert!(
        counted.is_empty(),
        "{} of {kthreads} kernel threads counted as uninspectable: {counted:?}",
        counted.len()
    );
}

/// Mount points, bind sources, overlay layers and loop backing files
/// inside an entry are kernel users of it, by path and by inode.
#[test]
fn kernel_users_in_a_private_pid_namespace() {
    run_in_pid_namespace(
        "kernel_users_in_a_private_pid_namespace",
        "inner_kernel_users",
    );
}

#[test]
#[ignore = "run inside a private pid namespace by kernel_users_in_a_private_pid_namespace"]
fn inner_kernel_users() {
    if !in_namespace() {
        return;
    }
    assert_eq!(
        std::process::id(),
        1,
        "inner_kernel_users: expected to be pid 1 of a new pid namespace"
    );
    let sb = sandbox!().unwrap();
    let other = sandbox!("inuse-targets").unwrap();
    let p = |name: &str| sb.path().join(name);
    let q = |name: &str| other.path().join(name);
    for dir in ["mnt", "src", "lower dir", "upper", "work"] {
        fs::create_dir(p(dir)).unwrap();
    }
    for dir in ["bound", "merged"] {
        fs::create_dir(q(dir)).unwrap();
    }
    make_file(&p("disk.img"), 1 << 20);
    let kinds = |entry: &Path| -> Vec<(PathBuf, KernelUseKind)> {
        collect()
            .kernel_users_under(entry)
            .into_iter()
            .map(|k| (k.path.clone(), k.kind.clone()))
            .collect()
    };
    let find = |index: &InUse, path: &Path, kind: &KernelUseKind| -> KernelUse {
        index
            .kernel_users_under(path)
            .into_iter()
            .find(|k| k.path == path && &k.kind == kind)
            .unwrap_or_else(|| {
                panic!(
                    "no {kind:?} at {}: {:#?}",
                    path.display(),
                    index.kernel_users()
                )
            })
            .clone()
    };
    assert!(kinds(sb.path()).is_empty(), "{:?}", kinds(sb.path()));

    // A tmpfs mounted inside the entry.
    rustix::mount::mount(
        "tmpfs",
        p("mnt"),
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        c"size=1m",
    )
    .unwrap();
    let tmpfs = Mount::adopt(p("mnt"));
    // A bind mount elsewhere whose source is inside the entry.
    let bind = Mount::bind(&p("src"), &q("bound"));
    // An overlay whose layers are inside the entry (one with a space).
    let overlay = {
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            p("lower dir").display(),
            p("upper").display(),
            p("work").display()
        );
        let options = std::ffi::CString::new(options).unwrap();
        match rustix::mount::mount(
            "overlay",
            q("merged"),
            "overlay",
            rustix::mount::MountFlags::empty(),
            options.as_c_str(),
        ) {
            Ok(()) => Some(Mount::adopt(q("merged"))),
            Err(e) => {
                eprintln!("skipping the overlay case: cannot mount overlayfs here: {e}");
                None
            }
        }
    };
    // A loop device backed by a file inside the entry.
    let loop_dev = match LoopDevice::attach(&p("disk.img")) {
        Ok(dev) => Some(dev),
        Err(reason) => {
            eprintln!("skipping the loop device case: {reason}");
            None
        }
    };

    let index = collect();
    assert!(
        index.is_complete(),
        "uninspectable: {:?}",
        index.uninspectable()
    );

    let mount_point = find(&index, &p("mnt"), &KernelUseKind::MountPoint);
    assert_eq!(mount_point.fstype.as_deref(), Some("tmpfs"));
    assert_eq!(
        mount_point.inode,
        Some(identity(&p("mnt"))),
        "the tmpfs root"
    );
    assert_eq!(mount_point.namespace, MountNamespace::Own);
    assert_eq!(
        mount_point.to_string(),
        format!("kernel: mount tmpfs at {}", p("mnt").display())
    );

    let source = find(&index, &p("src"), &KernelUseKind::BindSource);
    assert_eq!(source.inode, Some(identity(&p("src"))));
    assert_eq!(source.mount_point.as_deref(), Some(q("bound").as_path()));
    let (dev, ino) = identity(&p("src"));
    assert!(index
        .kernel_users_of(dev, ino)
        .any(|k| k.kind == KernelUseKind::BindSource));
    // The bind's mount point is a kernel user of the other entry.
    find(&index, &q("bound"), &KernelUseKind::MountPoint);

    if overlay.is_some() {
        for (dir, layer) in [
            ("lower dir", OverlayLayer::Lower),
            ("upper", OverlayLayer::Upper),
            ("work", OverlayLayer::Work),
        ] {
            let use_ = find(&index, &p(dir), &KernelUseKind::OverlayLayer(layer));
            assert_eq!(use_.inode, Some(identity(&p(dir))), "{dir}");
            assert_eq!(
                use_.mount_point.as_deref(),
                Some(q("merged").as_path()),
                "{dir}"
            );
        }
    }

    if let Some(dev) = &loop_dev {
        let kind = KernelUseKind::LoopBackingFile { device: dev.name() };
        let backing = find(&index, &p("disk.img"), &kind);
        assert_eq!(backing.inode, Some(identity(&p("disk.img"))));
        assert!(!backing.deleted);
        assert_eq!(
            backing.to_string(),
            format!("kernel: {} backing file", dev.name())
        );
    }

    // Component-wise: a sibling whose name extends the entry's is no match.
    let sibling = PathBuf::from(format!("{}x", p("mnt").display()));
    assert!(index.kernel_users_under(&sibling).is_empty());

    drop((loop_dev, overlay, bind, tmpfs));
    assert!(kinds(sb.path()).is_empty(), "{:?}", kinds(sb.path()));
}

/// The absolute path of a program on `PATH`.
fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} not found on PATH"))
}

/// The cost of asking the kernel whether a file is open elsewhere
/// (`open_elsewhere`: `openat2` `O_PATH`, `fstat`, reopen, `fstat`, two
/// `fcntl`s, two closes) against one `fstatat` per file, over FILES files
/// (default 5000), median of 5 runs. A measurement, not a test: run by
/// `bench/lease/run.sh`, it asserts nothing.
#[test]
#[ignore = "a measurement: bench/lease/run.sh"]
fn lease_probe_cost() {
    use std::os::unix::fs::MetadataExt;
    use std::time::Instant;
    let files: usize = std::env::var("FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let sb = sandbox!().unwrap();
    let names: Vec<String> = (0..files).map(|i| format!("f{i}")).collect();
    let mut keys = Vec::new();
    for name in &names {
        make_file(&sb.path().join(name), 100);
        let m = fs::metadata(sb.path().join(name)).unwrap();
        keys.push((m.dev(), m.ino()));
    }
    let dir = fs::File::open(sb.path()).unwrap();
    let locks = sandkeeper_engine::lease::Locks::read().unwrap();
    let median = |f: &dyn Fn()| {
        let mut runs: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e9 / files as f64
            })
            .collect();
        runs.sort_by(f64::total_cmp);
        runs[2]
    };
    let lease = median(&|| {
        for (name, key) in names.iter().zip(&keys) {
            let answer =
                sandkeeper_engine::inuse::open_elsewhere(&dir, name.as_ref(), *key, &locks);
            assert_eq!(answer, sandkeeper_engine::inuse::OpenElsewhere::No);
        }
    });
    let stat = median(&|| {
        for name in &names {
            rustix::fs::statat(&dir, name.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW).unwrap();
        }
    });
    println!(
        "{files} files: open_elsewhere {lease:.0} ns/file, fstatat {stat:.0} ns/file, ratio {:.1}x",
        lease / stat
    );
}
