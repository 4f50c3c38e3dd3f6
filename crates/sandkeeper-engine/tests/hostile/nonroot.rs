//! Issue 15: a normal user reaping their own leftovers on a host where
//! root and other users run processes the user cannot inspect.
//!
//! Permissions on a path prove nothing about descriptors already open: a
//! file opened before a `chmod`, or passed over a unix socket, needs no
//! path access. What the kernel does answer, for a regular file the user
//! owns, is whether *any* other open file description of it exists: a
//! write lease ([`open_elsewhere`]). These tests run the probe as uid 65534
//! (`setpriv`) in a private pid namespace with root's and another user's
//! (uid 65533) processes holding the user's files in every way a path
//! check cannot see, and pin what the lease sees and what it cannot.
//!
//! Each holder is a small Python program (python3 is in CI) that prints
//! `ready` once it holds.

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandkeeper_engine::inuse::{open_elsewhere, CannotTell, OpenElsewhere};
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::{NOBODY, SETPRIV_NOBODY};
use sandkeeper_testkit::process::{spawn_ready, test_command, Helper, Spawned};
use sandkeeper_testkit::scratch::Scratch;
use sandkeeper_testkit::tree::identity;

/// Another unprivileged user, neither root nor the reaper.
const OTHER: u32 = 65533;

/// Starts `python3 -c program args…` as root, or as `uid` through
/// `setpriv`, waiting for its `ready`.
fn python(uid: Option<u32>, program: &str, args: &[&Path]) -> Spawned {
    // The system's interpreter where there is one: a per-user shim (pyenv)
    // may not be executable by the other user.
    let python3 = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("python3");
    let mut cmd = match uid {
        None => Command::new(python3),
        Some(uid) => {
            let mut cmd = Command::new("setpriv");
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .args(["--clear-groups", "--", python3]);
            cmd
        }
    };
    spawn_ready(
        cmd.arg("-c")
            .arg(format!(
                "import fcntl, mmap, os, signal, socket, sys, time\n{program}"
            ))
            .args(args)
            .stdin(Stdio::null()),
    )
}

/// An entry of the user's: a directory owned by uid 65534 holding `data`,
/// a regular file of theirs.
fn entry(base: &Path, name: &str) -> PathBuf {
    let dir = base.join(name);
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("data"), vec![b'x'; 8192]).unwrap();
    chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    chown(dir.join("data"), Some(NOBODY), Some(NOBODY)).unwrap();
    dir
}

/// The probe, run as uid 65534: `open_elsewhere` on `data` of every entry
/// of `SK_BASE`, one `RESULT name answer` line each.
#[test]
#[ignore = "helper process entry point, run by the_lease_sees_what_a_path_check_cannot"]
fn probe_child() {
    let Some(base) = std::env::var_os("SK_BASE") else {
        return;
    };
    let locks = sandkeeper_engine::lease::Locks::read().expect("read /proc/locks");
    let mut names: Vec<_> = fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for name in names {
        let dir = fs::File::open(Path::new(&base).join(&name)).expect("open entry");
        let data = Path::new(&base).join(&name).join("data");
        let answer = open_elsewhere(&dir, "data".as_ref(), identity(&data), &locks);
        println!("RESULT {} {answer:?}", name.to_string_lossy());
    }
    // The same answer through a path below the base: no walk needs to keep
    // every directory open. A symlink on the way is never followed.
    let base_dir = fs::File::open(&base).unwrap();
    let data = Path::new(&base).join("chmod-after-open/data");
    let through = open_elsewhere(
        &base_dir,
        "chmod-after-open/data".as_ref(),
        identity(&data),
        &locks,
    );
    println!("THROUGH {through:?}");
    let data = Path::new(&base).join("free/data");
    let link = open_elsewhere(&base_dir, "link/data".as_ref(), identity(&data), &locks);
    println!("LINK {link:?}");
}

/// Every way another process can hold a file of the user's without path
/// access is seen by the lease as uid 65534; a free file is free; what
/// cannot be leased is "cannot tell", never "free"; no holder is disturbed.
#[test]
fn the_lease_sees_what_a_path_check_cannot() {
    run_in_pid_namespace(
        "the_lease_sees_what_a_path_check_cannot",
        "nonroot::inner_lease",
    );
}

#[test]
#[ignore = "run inside a private pid namespace by the_lease_sees_what_a_path_check_cannot"]
fn inner_lease() {
    if !in_namespace() {
        return;
    }
    // Other users work inside: a scratch whose every ancestor they can
    // search (a checkout may sit under a private directory).
    let sb = Scratch::reachable_by_others("nonroot-lease");
    let base = sb.path().join("base");
    fs::create_dir(&base).unwrap();
    fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
    let data = |name: &str| base.join(name).join("data");

    entry(&base, "free");

    // Another user opens the file while the directory is open to all; then
    // the user closes it (0700): the descriptor stays valid.
    let dir = entry(&base, "chmod-after-open");
    let _before_chmod = python(
        Some(OTHER),
        "f = open(sys.argv[1]); print('ready', flush=True); time.sleep(600)",
        &[&data("chmod-after-open")],
    );
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();

    // Root opens the file, sends it over a socket pair and closes its own
    // copy: the descriptor is only in the socket's queue (in flight), which
    // no /proc file shows.
    entry(&base, "scm-in-flight");
    let _in_flight = python(
        None,
        "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
         fd = os.open(sys.argv[1], os.O_RDONLY)\n\
         socket.send_fds(a, [b'x'], [fd]); os.close(fd)\n\
         print('ready', flush=True); time.sleep(600)",
        &[&data("scm-in-flight")],
    );

    // Root passes the file to another user's process, which receives it;
    // root's copy is closed.
    entry(&base, "scm-passed");
    let _passed = python(
        None,
        "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
         pid = os.fork()\n\
         if pid == 0:\n\
         \x20   os.setgroups([]); os.setgid(65533); os.setuid(65533)\n\
         \x20   _, fds, _, _ = socket.recv_fds(b, 1, 1); b.send(b'k'); time.sleep(600)\n\
         fd = os.open(sys.argv[1], os.O_RDONLY)\n\
         socket.send_fds(a, [b'x'], [fd]); os.close(fd); a.recv(1)\n\
         print('ready', flush=True); time.sleep(600)",
        &[&data("scm-passed")],
    );

    // Root maps the file and closes the descriptor: only the mapping holds
    // it.
    entry(&base, "mmap");
    let _mapped = python(
        None,
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n\
         m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ); os.close(fd)\n\
         print('ready', flush=True); time.sleep(600)",
        &[&data("mmap")],
    );

    // Root holds the file with a write lease of its own and SIGIO's default
    // action: an open by the probe would break the lease and kill it.
    entry(&base, "leased");
    let mut leased = python(
        None,
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n\
         fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n\
         print('ready', flush=True); time.sleep(600)",
        &[&data("leased")],
    );

    // Root holds only an O_PATH descriptor: it opens nothing, and the lease
    // cannot see it (a documented limit).
    entry(&base, "o-path");
    let _o_path = python(
        None,
        "fd = os.open(sys.argv[1], os.O_PATH)\n\
         print('ready', flush=True); time.sleep(600)",
        &[&data("o-path")],
    );

    // A file of root's inside the user's entry: only its owner may lease it.
    entry(&base, "not-mine");
    chown(data("not-mine"), Some(0), Some(0)).unwrap();

    // A FIFO in the user's entry: never opened, cannot be leased.
    let fifo = base.join("fifo");
    fs::create_dir(&fifo).unwrap();
    let made = Command::new("mkfifo")
        .arg(fifo.join("data"))
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    chown(&fifo, Some(NOBODY), Some(NOBODY)).unwrap();
    chown(fifo.join("data"), Some(NOBODY), Some(NOBODY)).unwrap();

    // A symlink of the user's to their free entry: not followed.
    std::os::unix::fs::symlink("free", base.join("link")).unwrap();
    std::os::unix::fs::lchown(base.join("link"), Some(NOBODY), Some(NOBODY)).unwrap();

    let mut cmd = test_command(&SETPRIV_NOBODY, "nonroot::probe_child");
    cmd.env("SK_BASE", &base);
    let exit = Helper::spawn(cmd).wait();
    assert!(exit.success, "probe as nobody failed: {exit:?}");
    let answers: Vec<(String, String)> = exit
        .stdout
        .iter()
        .filter_map(|l| {
            let (name, answer) = l.split_once("RESULT ")?.1.split_once(' ')?;
            if name == "link" {
                return None; // not an entry with data: the symlink itself
            }
            Some((name.to_owned(), answer.to_owned()))
        })
        .collect();
    let yes = format!("{:?}", OpenElsewhere::Yes);
    let no = format!("{:?}", OpenElsewhere::No);
    let cannot = |why| format!("{:?}", OpenElsewhere::CannotTell(why));
    let want: Vec<(String, String)> = [
        ("chmod-after-open", yes.clone()),
        ("fifo", cannot(CannotTell::NotRegular)),
        ("free", no.clone()),
        ("leased", yes.clone()),
        ("mmap", yes.clone()),
        ("not-mine", cannot(CannotTell::NotOwner { uid: 0 })),
        ("o-path", no.clone()),
        ("scm-in-flight", yes.clone()),
        ("scm-passed", yes.clone()),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b))
    .collect();
    assert_eq!(answers, want, "{exit:?}");
    let line = |key: &str| {
        exit.stdout
            .iter()
            .find_map(|l| l.strip_prefix(key))
            .map(str::to_owned)
    };
    assert_eq!(line("THROUGH ").as_deref(), Some(yes.as_str()), "{exit:?}");
    assert_eq!(
        line("LINK ").unwrap(),
        format!(
            "{:?}",
            OpenElsewhere::CannotTell(CannotTell::Failed { errno: libc::ELOOP })
        ),
        "{exit:?}"
    );
    // The lease holder was never broken (its SIGIO would have ended it).
    assert!(
        leased.0.try_wait().unwrap().is_none(),
        "the probe broke a holder's lease"
    );
}

/// The scan and the reap, run as uid 65534 over `SK_BASE` (with or without
/// `SANDKEEPER_ASSUME_UNSEEN_FREE=1`, as the parent set it): one
/// `STATE name state` line per entry, then one `REMOVED name` line per
/// entry the reaper removed.
#[test]
#[ignore = "helper process entry point, run by a_user_reaps_what_nobody_holds"]
fn reap_child() {
    let Some(base) = std::env::var_os("SK_BASE") else {
        return;
    };
    let base = PathBuf::from(base);
    let report = sandkeeper_engine::scan::Scanner::new()
        .scan(&[&base])
        .expect("scan as nobody");
    println!("ASSUMES {}", report.assumes_unseen_free);
    for e in &report.roots[0].entries {
        println!(
            "STATE {} {} ({})",
            e.name.to_string_lossy(),
            e.state,
            e.reason
        );
    }
    let policy = sandkeeper_engine::reap::Policy::builder()
        .matching("app-*")
        .grace(std::time::Duration::ZERO)
        .build()
        .unwrap();
    let reaped = sandkeeper_engine::reap::Reaper::new(policy)
        .reap(&[&base])
        .expect("reap as nobody");
    for r in &reaped.roots[0].removed {
        println!("REMOVED {}", r.path.file_name().unwrap().to_string_lossy());
    }
}

/// As uid 65534 with root's and another user's processes present (none of
/// which the user can inspect): an entry of the user's files that nobody
/// holds is still `unknown` without the switch (a hidden process's working
/// directory cannot be proven absent), and reaped with it; an entry whose
/// file a hidden process holds (opened before a `chmod`, in flight over a
/// unix socket, mapped with its descriptor closed) is `in_use` and never
/// reaped, switch or not; an entry that is only a hidden process's working
/// directory is kept without the switch.
#[test]
fn a_user_reaps_what_nobody_holds() {
    run_in_pid_namespace("a_user_reaps_what_nobody_holds", "nonroot::inner_reap");
}

#[test]
#[ignore = "run inside a private pid namespace by a_user_reaps_what_nobody_holds"]
fn inner_reap() {
    if !in_namespace() {
        return;
    }
    let sb = Scratch::reachable_by_others("nonroot-reap");
    // Processes of root and of another user that hold nothing of the
    // user's: they make the scan incomplete for uid 65534.
    let _root_idle = python(None, "print('ready', flush=True); time.sleep(600)", &[]);
    let _other_idle = python(
        Some(OTHER),
        "print('ready', flush=True); time.sleep(600)",
        &[],
    );
    let run = |assume: bool| -> (Vec<String>, Vec<String>, String) {
        let base = sb.path().join(if assume { "with" } else { "without" });
        fs::create_dir(&base).unwrap();
        chown(&base, Some(NOBODY), Some(NOBODY)).unwrap();
        fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
        let data = |name: &str| base.join(name).join("data");
        let mut holders = Vec::new();

        entry(&base, "app-free");
        fs::create_dir(base.join("app-free/sub")).unwrap();
        fs::write(base.join("app-free/sub/more"), b"y").unwrap();
        chown(base.join("app-free/sub"), Some(NOBODY), Some(NOBODY)).unwrap();
        chown(base.join("app-free/sub/more"), Some(NOBODY), Some(NOBODY)).unwrap();

        let dir = entry(&base, "app-chmod-after-open");
        holders.push(python(
            Some(OTHER),
            "f = open(sys.argv[1]); print('ready', flush=True); time.sleep(600)",
            &[&data("app-chmod-after-open")],
        ));
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();

        entry(&base, "app-scm-in-flight");
        holders.push(python(
            None,
            "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
             fd = os.open(sys.argv[1], os.O_RDONLY)\n\
             socket.send_fds(a, [b'x'], [fd]); os.close(fd)\n\
             print('ready', flush=True); time.sleep(600)",
            &[&data("app-scm-in-flight")],
        ));

        entry(&base, "app-mmap");
        holders.push(python(
            None,
            "fd = os.open(sys.argv[1], os.O_RDONLY)\n\
             m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ); os.close(fd)\n\
             print('ready', flush=True); time.sleep(600)",
            &[&data("app-mmap")],
        ));

        // Only a directory: root's working directory, nothing open.
        let cwd = entry(&base, "app-cwd");
        holders.push(python(
            None,
            "os.chdir(sys.argv[1]); print('ready', flush=True); time.sleep(600)",
            &[&cwd],
        ));

        let mut cmd = test_command(&SETPRIV_NOBODY, "nonroot::reap_child");
        cmd.env("SK_BASE", &base);
        if assume {
            cmd.env("SANDKEEPER_ASSUME_UNSEEN_FREE", "1");
        } else {
            cmd.env_remove("SANDKEEPER_ASSUME_UNSEEN_FREE");
        }
        let exit = Helper::spawn(cmd).wait();
        assert!(exit.success, "scan/reap as nobody failed: {exit:?}");
        let pick = |key: &str| -> Vec<String> {
            exit.stdout
                .iter()
                .filter_map(|l| l.strip_prefix(key))
                .map(|l| l.split(" (").next().unwrap().to_owned())
                .collect()
        };
        let (states, mut removed) = (pick("STATE "), pick("REMOVED "));
        removed.sort();
        drop(holders);
        (states, removed, format!("{exit:?}"))
    };

    let (states, removed, out) = run(false);
    assert_eq!(
        states,
        [
            "app-chmod-after-open in_use",
            "app-cwd unknown",
            "app-free unknown",
            "app-mmap in_use",
            "app-scm-in-flight in_use",
        ],
        "{out}"
    );
    assert!(removed.is_empty(), "removed without the switch: {out}");

    let (states, removed, out) = run(true);
    assert_eq!(
        states,
        [
            "app-chmod-after-open in_use",
            "app-cwd idle",
            "app-free idle",
            "app-mmap in_use",
            "app-scm-in-flight in_use",
        ],
        "{out}"
    );
    // The switch covers directories only: every held file stays.
    assert_eq!(removed, ["app-cwd", "app-free"], "{out}");
    assert!(out.contains("ASSUMES true"), "{out}");
}
