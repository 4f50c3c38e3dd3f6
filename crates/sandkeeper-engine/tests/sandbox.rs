//! Sandboxes: removal on drop and panic, keep policies, teardown order,
//! keyed reclaim with real processes, process-lifetime sandboxes, and bad
//! input.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandkeeper_engine::lease::{self, Probe};
use sandkeeper_engine::{sandbox, Builder, ErrorKind, Sandbox, WhenHeld};
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::require_root;
use sandkeeper_testkit::process::{alive, pid_exists, test_command, Helper};
use sandkeeper_testkit::tree::names;

#[test]
#[ignore = "helper process entry point, run by other tests"]
fn child_main() {
    sandkeeper_testkit::child::main()
}

#[test]
fn drop_removes_the_tree() {
    let root = sandbox!().unwrap();
    let sandbox = Builder::new()
        .root(root.path())
        .tag("work")
        .create()
        .unwrap();
    let path = sandbox.path().to_owned();
    assert!(path.starts_with(root.path()));
    assert!(path
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("work-"));
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o700);
    fs::create_dir_all(path.join("a/b/c")).unwrap();
    fs::write(path.join("a/b/c/file"), b"data").unwrap();
    drop(sandbox);
    assert!(!path.exists());
    assert_eq!(
        names(root.path()),
        Vec::<OsString>::new(),
        "nothing left in the root"
    );
}

#[test]
fn a_panic_removes_the_sandbox() {
    let root = sandbox!().unwrap();
    let seen = Arc::new(Mutex::new(PathBuf::new()));
    let result = catch_unwind(AssertUnwindSafe(|| {
        let sandbox = Builder::new().root(root.path()).create().unwrap();
        *seen.lock().unwrap() = sandbox.path().to_owned();
        fs::write(sandbox.path().join("f"), b"x").unwrap();
        panic!("test failure");
    }));
    assert!(result.is_err());
    let path = seen.lock().unwrap().clone();
    assert!(!path.as_os_str().is_empty() && !path.exists());
}

#[test]
fn keep_on_failure_keeps_and_prints_the_path() {
    let helper = Helper::start("panic", &[("SANDKEEPER_KEEP", "on-failure")]);
    let path = helper.ready_path();
    let exit = helper.wait();
    let (ok, stderr) = (exit.success, exit.stderr);
    assert!(!ok, "the helper's test panicked");
    assert!(path.join("evidence").exists(), "kept after the panic");
    assert!(
        stderr.contains(&format!("kept sandbox {}", path.display())),
        "{stderr}"
    );
    let Probe::Free(claim) = lease::probe(&path).unwrap() else {
        panic!("lease still held")
    };
    let record = claim.record().record().unwrap().clone();
    let until = record.keep_until_ms.expect("keep_until_ms set");
    assert!(until > lease_now_ms() + 3_600_000, "kept for about a day");
    // Issue 29: said in the words `ls` and `explain` use (not "after 86400s").
    let phrase = sandkeeper_engine::human::kept_until(until, None);
    assert!(
        stderr.contains(&phrase) && stderr.contains(" from now); reapers may remove it after that"),
        "{stderr}"
    );
    drop(claim);
    remove_by_path(&path);
}

#[test]
fn without_keep_a_panicking_test_leaves_nothing() {
    let helper = Helper::start("panic", &[]);
    let path = helper.ready_path();
    let ok = helper.wait().success;
    assert!(!ok);
    assert!(!path.exists());
}

#[test]
fn a_bad_keep_value_is_an_error_naming_it() {
    let root = sandbox!().unwrap();
    let helper = Helper::start(
        "create",
        &[
            ("SK_ROOT", root.path().to_str().unwrap()),
            ("SANDKEEPER_KEEP", "sometimes"),
        ],
    );
    let err = helper.expect("ERR");
    assert!(err.starts_with("InvalidInput"), "{err}");
    assert!(
        err.contains("\"sometimes\"") && err.contains("on-failure"),
        "{err}"
    );
    assert_eq!(names(root.path()), Vec::<OsString>::new());
}

#[test]
fn keep_stops_managing_and_close_reports() {
    let root = sandbox!().unwrap();
    let kept = Builder::new().root(root.path()).create().unwrap();
    let kept_path = kept.keep();
    assert!(kept_path.is_dir());
    assert!(
        !kept_path.join(lease::LEASE_FILE).exists(),
        "unmanaged after keep()"
    );
    let Probe::Free(claim) = lease::probe(&kept_path).unwrap() else {
        panic!("still locked")
    };
    drop(claim);
    remove_by_path(&kept_path);

    let closed = Builder::new().root(root.path()).create().unwrap();
    let path = closed.path().to_owned();
    closed.close().unwrap();
    assert!(!path.exists());
}

#[test]
fn teardown_runs_lifo_and_children_die_before_the_directory_goes() {
    let root = sandbox!().unwrap();
    let sandbox = Builder::new()
        .root(root.path())
        .kill_grace(Duration::from_secs(2))
        .create()
        .unwrap();
    let path = sandbox.path().to_owned();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let child_pid = Arc::new(Mutex::new(0u32));

    let (l, p, dir) = (log.clone(), child_pid.clone(), path.clone());
    sandbox.defer(move || {
        let pid = *p.lock().unwrap();
        l.lock().unwrap().push(format!(
            "first: child alive={} dir exists={}",
            pid_exists(pid),
            dir.exists()
        ));
    });
    // A child that holds a file open inside the sandbox.
    let pid = sandbox
        .spawn(
            Command::new("sh")
                .arg("-c")
                .arg("exec 3>\"$1/held\"; exec sleep 600")
                .arg("sh")
                .arg(&path),
        )
        .unwrap();
    *child_pid.lock().unwrap() = pid;
    let l = log.clone();
    sandbox.defer(move || l.lock().unwrap().push("last".into()));

    drop(sandbox);
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            "last".to_owned(),
            "first: child alive=false dir exists=true".to_owned()
        ]
    );
    assert!(!path.exists());
}

#[test]
fn keyed_reclaims_a_sigkilled_predecessor() {
    let root = sandbox!().unwrap();
    let env = [
        ("SK_ROOT", root.path().to_str().unwrap()),
        ("SK_TAG", "vm"),
        ("SK_CHECKOUT", "/checkouts/a"),
    ];
    let mut first = Helper::start("create", &env);
    let path = first.ready_path();
    fs::write(path.join("disk.img"), b"leftover").unwrap();
    first.kill();

    let next = Builder::new()
        .root(root.path())
        .tag("vm")
        .keyed(true)
        .checkout("/checkouts/a")
        .create()
        .unwrap();
    assert_eq!(
        next.path(),
        path,
        "same name: the predecessor was reclaimed"
    );
    assert!(!path.join("disk.img").exists(), "its contents are gone");
    assert_eq!(next.record().pid, std::process::id());
    drop(next);
    assert_eq!(names(root.path()), Vec::<OsString>::new());
}

#[test]
fn keyed_never_wipes_a_live_holder() {
    let root = sandbox!().unwrap();
    let env = [
        ("SK_ROOT", root.path().to_str().unwrap()),
        ("SK_TAG", "vm"),
        ("SK_CHECKOUT", "/checkouts/b"),
    ];
    let mut holder = Helper::start("create", &env);
    let held = holder.ready_path();
    fs::write(held.join("disk.img"), b"in use").unwrap();
    let keyed = || {
        let mut b = Builder::new();
        b.root(root.path())
            .tag("vm")
            .keyed(true)
            .checkout("/checkouts/b");
        b
    };

    // Default: the next slot.
    let second = keyed().create().unwrap();
    assert_eq!(
        second.path().file_name().unwrap().to_str().unwrap(),
        format!("{}-2", held.file_name().unwrap().to_str().unwrap())
    );
    assert_eq!(fs::read(held.join("disk.img")).unwrap(), b"in use");

    // Fail: an error naming the holder's pid and command.
    let err = keyed().when_held(WhenHeld::Fail).create().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Held);
    assert_eq!(err.pid(), Some(holder.pid()));
    assert!(
        err.to_string().contains(&format!("pid {}", holder.pid())),
        "{err}"
    );
    assert!(
        err.to_string().contains("child_main"),
        "names the command: {err}"
    );

    // Wait, bounded: times out while the holder lives.
    let err = keyed()
        .when_held(WhenHeld::Wait(Duration::from_millis(200)))
        .create()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    assert_eq!(fs::read(held.join("disk.img")).unwrap(), b"in use");

    // Wait: succeeds once the holder is gone, reclaiming slot 1.
    let pid = holder.pid();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
    });
    let third = keyed()
        .when_held(WhenHeld::Wait(Duration::from_secs(20)))
        .create()
        .unwrap();
    killer.join().unwrap();
    holder.kill();
    assert_eq!(third.path(), held);
    assert!(!held.join("disk.img").exists());
    drop((second, third));
    assert_eq!(names(root.path()), Vec::<OsString>::new());
}

#[test]
fn process_lifetime_sandbox_is_removed_at_normal_exit() {
    let root = sandbox!().unwrap();
    let env = [
        ("SK_ROOT", root.path().to_str().unwrap()),
        ("SK_TAG", "shared"),
        ("SK_CHECKOUT", "/checkouts/c"),
    ];
    let helper = Helper::start("static", &env);
    let path = helper.ready_path();
    let exit = helper.wait();
    let (ok, stderr) = (exit.success, exit.stderr);
    assert!(ok, "{stderr}");
    assert!(!path.exists(), "removed by the exit hook");
}

#[test]
fn process_lifetime_sandbox_is_reclaimed_after_sigkill() {
    let root = sandbox!().unwrap();
    let env = [
        ("SK_ROOT", root.path().to_str().unwrap()),
        ("SK_TAG", "shared"),
        ("SK_CHECKOUT", "/checkouts/d"),
        ("SK_SLEEP", "1"),
    ];
    let mut helper = Helper::start("static", &env);
    let path = helper.ready_path();
    helper.kill();
    assert!(path.join("state").exists(), "SIGKILL skips every hook");
    let next = Builder::new()
        .root(root.path())
        .tag("shared")
        .process_lifetime(true)
        .checkout("/checkouts/d")
        .create()
        .unwrap();
    assert_eq!(next.path(), path);
    assert!(!path.join("state").exists());
}

#[test]
fn per_user_root_is_private_and_left_clean() {
    let base = sandbox!().unwrap();
    let env = [
        ("SANDKEEPER_ROOT", base.path().to_str().unwrap()),
        ("SK_TAG", "k"),
        ("SK_CHECKOUT", "/checkouts/e"),
    ];
    let mut helper = Helper::start("create", &env);
    let path = helper.ready_path();
    let user_root = base
        .path()
        .join(format!("sandkeeper-{}", rustix::process::getuid().as_raw()));
    assert_eq!(path.parent().unwrap(), user_root);
    let meta = fs::symlink_metadata(&user_root).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.mode() & 0o777, 0o700);
    helper.kill();
    // The next keyed run reclaims it, and its drop leaves no empty root.
    let helper = Helper::start("static", &env);
    assert_eq!(helper.ready_path(), path);
    assert!(helper.wait().success);
    assert_eq!(names(base.path()), Vec::<OsString>::new());
}

#[test]
fn a_planted_per_user_root_is_refused() {
    let base = sandbox!().unwrap();
    let user_root = base
        .path()
        .join(format!("sandkeeper-{}", rustix::process::getuid().as_raw()));
    let elsewhere = base.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &user_root).unwrap();
    let env = [
        ("SANDKEEPER_ROOT", base.path().to_str().unwrap()),
        ("SK_TAG", "k"),
        ("SK_CHECKOUT", "/checkouts/f"),
    ];
    let err = Helper::start("create", &env).expect("ERR");
    assert!(err.starts_with("UnsafeRoot"), "{err}");
    assert_eq!(
        names(&elsewhere),
        Vec::<OsString>::new(),
        "nothing created through the link"
    );
    rustix::fs::unlink(&user_root).unwrap(); // the planted symlink

    if !require_root("a_planted_per_user_root_is_refused (other owner)") {
        return;
    }
    fs::create_dir(&user_root).unwrap();
    rustix::fs::chown(&user_root, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
    let err = Helper::start("create", &env).expect("ERR");
    assert!(
        err.starts_with("UnsafeRoot") && err.contains("65534"),
        "{err}"
    );
}

#[test]
fn relative_root_is_fixed_at_creation() {
    let base = sandbox!().unwrap();
    let helper = Helper::start("relative", &[("SK_ROOT", base.path().to_str().unwrap())]);
    let path = helper.ready_path();
    assert_eq!(
        path.parent(),
        Some(base.path()),
        "absolute and normalized: {}",
        path.display()
    );
    helper.expect("DONE");
    assert!(!path.exists(), "removed although the cwd changed");
}

#[test]
fn bad_roots_and_tags_are_clear_errors() {
    let base = sandbox!().unwrap();
    let file = base.path().join("file");
    fs::write(&file, b"x").unwrap();
    let cases: Vec<(&str, PathBuf, ErrorKind, &str)> = vec![
        (
            "missing",
            base.path().join("missing"),
            ErrorKind::UnusableRoot,
            "does not exist",
        ),
        (
            "file",
            file.clone(),
            ErrorKind::UnusableRoot,
            "not a directory",
        ),
    ];
    for (name, root, kind, words) in cases {
        let err = Builder::new().root(&root).create().unwrap_err();
        assert_eq!(err.kind(), kind, "{name}: {err}");
        assert!(err.to_string().contains(words), "{name}: {err}");
        assert_eq!(err.path(), Some(root.as_path()), "{name}");
    }
    for tag in ["a/b", "a\0b", "", "..", ".sandkeeper-new-x"] {
        let err = Builder::new()
            .root(base.path())
            .tag(tag)
            .create()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{tag:?}");
        assert!(err.to_string().contains(&format!("{tag:?}")), "{err}");
    }
    assert_eq!(names(base.path()), ["file"]);
}

#[test]
fn a_read_only_root_is_a_clear_error() {
    let base = sandbox!().unwrap();
    let ro = base.path().join("ro");
    fs::create_dir(&ro).unwrap();
    let _mount = if rustix::process::geteuid().is_root() {
        Some(Mount::read_only_tmpfs(&ro))
    } else {
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
        None
    };
    let err = Builder::new().root(&ro).create().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnusableRoot, "{err}");
    assert!(err.to_string().contains("not writable"), "{err}");
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).ok();
}

#[test]
fn two_call_sites_claiming_one_name_is_an_error() {
    let first = sandbox!("shared-fixture-name").unwrap();
    let err = sandbox!("shared-fixture-name").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NameConflict);
    let text = err.to_string();
    assert!(
        text.matches("tests/sandbox.rs:").count() == 2,
        "names both sites: {text}"
    );
    drop(first);
}

#[test]
fn one_call_site_used_concurrently_takes_slots() {
    fn fixture() -> Sandbox {
        sandbox!().unwrap()
    }
    let boxes: Vec<Sandbox> = (0..3).map(|_| fixture()).collect();
    let mut paths: Vec<&Path> = boxes.iter().map(Sandbox::path).collect();
    paths.dedup();
    assert_eq!(paths.len(), 3);
    assert!(paths[1].to_str().unwrap().ends_with("-2"));
}

#[test]
fn permissions_are_exact() {
    let root = sandbox!().unwrap();
    let sb = Builder::new()
        .root(root.path())
        .permissions(0o750)
        .create()
        .unwrap();
    assert_eq!(fs::metadata(sb.path()).unwrap().mode() & 0o7777, 0o750);
}

fn lease_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn remove_by_path(path: &Path) {
    let parent = fs::File::open(path.parent().unwrap()).unwrap();
    let report = sandkeeper_engine::remove::remove_entry(
        std::os::fd::AsFd::as_fd(&parent),
        path.file_name().unwrap(),
        &sandkeeper_engine::remove::RemoveOptions::new(),
    )
    .unwrap();
    assert!(report.is_complete());
}

#[test]
fn keyed_leaves_another_users_leftover_alone() {
    if !require_root("keyed_leaves_another_users_leftover_alone") {
        return;
    }
    let root = sandbox!().unwrap();
    let keyed = || {
        let mut b = Builder::new();
        b.root(root.path())
            .tag("shared")
            .keyed(true)
            .checkout("/checkouts/g");
        b
    };
    // Learn the keyed name, then plant another user's directory there.
    let first = keyed().create().unwrap();
    let name = first.path().to_owned();
    drop(first);
    fs::create_dir(&name).unwrap();
    fs::write(name.join("theirs"), b"x").unwrap();
    rustix::fs::chown(&name, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
    let second = keyed().create().unwrap();
    assert!(
        second.path().to_str().unwrap().ends_with("-2"),
        "{}",
        second.path().display()
    );
    assert!(
        name.join("theirs").exists(),
        "another user's directory was not touched"
    );
}

/// Issue 11, item 10: a sandbox whose removal on drop fails (a tmpfs is
/// mounted inside) says so once on stderr, with why, and keeps its lease
/// record: once the mount is gone it is an `orphaned` sandbox, which a
/// reap takes without any rule. (It used to lose its record first and
/// become an unmanaged `idle` entry, silently.)
#[test]
fn a_sandbox_whose_removal_fails_on_drop_stays_managed() {
    run_in_pid_namespace(
        "a_sandbox_whose_removal_fails_on_drop_stays_managed",
        "inner_a_sandbox_whose_removal_fails_on_drop_stays_managed",
    );
}

/// Tells [`drop_with_a_mount_inside`] where to make its sandbox.
const DROP_ROOT_ENV: &str = "SK_DROP_ROOT";

#[test]
#[ignore = "helper: makes a sandbox in SK_DROP_ROOT, mounts a tmpfs inside, drops it"]
fn drop_with_a_mount_inside() {
    let Some(root) = std::env::var_os(DROP_ROOT_ENV) else {
        return;
    };
    let sandbox = Builder::new().root(root).tag("mounted").create().unwrap();
    fs::write(sandbox.path().join("data"), b"removed").unwrap();
    let mnt = sandbox.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    rustix::mount::mount(
        "sk-drop",
        &mnt,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .unwrap();
    println!("PATH {}", sandbox.path().display());
    drop(sandbox);
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_a_sandbox_whose_removal_fails_on_drop_stays_managed() {
    use sandkeeper_engine::reap::{Policy, Reaper};
    use sandkeeper_engine::scan::{EntryState, Scanner};
    if !in_namespace() {
        return;
    }
    let root = Sandbox::builder().tag("drop-fails").create().unwrap();
    let out = test_command(&[], "drop_with_a_mount_inside")
        .env(DROP_ROOT_ENV, root.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{stderr}"
    );
    let path = PathBuf::from(
        stdout
            .lines()
            .find_map(|l| Some(&l[l.find("PATH ")? + 5..]))
            .unwrap_or_else(|| panic!("no sandbox from the helper:\n{stdout}\n{stderr}")),
    );
    // Lazily unmounts what the helper mounted, even when the test fails.
    let mounted = Mount::adopt(path.join("mnt"));
    let name = path.file_name().unwrap().to_str().unwrap().to_owned();

    // Said once, with why.
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sandkeeper:"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].contains("could not be removed completely")
            && said[0].contains(&*path.to_string_lossy())
            && said[0].contains("mnt: mount point"),
        "{said:?}"
    );
    // What could go went; the rest stays with its record.
    assert!(!path.join("data").exists());
    assert!(
        path.join(lease::LEASE_FILE).is_file(),
        "the record was lost"
    );

    let state = |root: &Path| {
        let report = Scanner::new().scan(&[root]).unwrap();
        let entry = report.roots[0]
            .entries
            .iter()
            .find(|e| e.name == *name)
            .unwrap_or_else(|| panic!("{name} not scanned"));
        (entry.state, entry.reason.to_string())
    };
    assert_eq!(
        state(root.path()).0,
        EntryState::InUse,
        "the mount is a use"
    );
    drop(mounted);
    let (now, why) = state(root.path());
    assert_eq!(now, EntryState::Orphaned, "{why}");

    // No rule needed: the lease is the truth.
    let policy = Policy::builder().grace(Duration::ZERO).build().unwrap();
    let report = Reaper::new(policy).reap(&[root.path()]).unwrap();
    assert!(
        report.roots[0]
            .removed
            .iter()
            .any(|r| r.path.file_name() == Some(name.as_ref())),
        "{report:#?}"
    );
    assert!(!path.exists());
}

/// Issue 15: the natural port of a `temp_cwd(tag: &str)` helper compiles.
/// `sandbox!(&format!(…))` and `sandbox!(tag)` with a borrowed `tag` used
/// to fail with E0716 / E0597 (the macro wanted a `&'static str`).
#[test]
fn sandbox_takes_any_string_as_its_tag() {
    fn temp_cwd(tag: &str) -> Sandbox {
        sandbox!(&format!("cwd-{tag}")).unwrap()
    }
    fn borrowed(tag: &str) -> Sandbox {
        sandbox!(tag).unwrap()
    }
    let owned = String::from("owned-tag");
    let boxes = [
        temp_cwd("a"),
        temp_cwd("b"),
        borrowed("borrowed-tag"),
        sandbox!(owned).unwrap(),
        sandbox!(format!("formatted-{}", 1)).unwrap(),
    ];
    let wants = [
        "cwd-a-",
        "cwd-b-",
        "borrowed-tag-",
        "owned-tag-",
        "formatted-1-",
    ];
    for (sandbox, want) in boxes.iter().zip(wants) {
        let name = sandbox.path().file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(want), "{name} for {want}");
        assert_eq!(sandbox.record().tag, want.trim_end_matches('-'));
    }
    assert_eq!(owned, "owned-tag", "not moved");
}

/// Issue 15: helpers keep provenance. A `#[track_caller]` helper records
/// its caller's `file:line` (through `sandbox!()` and through the
/// builder); a plain helper records its own.
#[test]
fn track_caller_helpers_record_their_callers_site() {
    #[track_caller]
    fn via_macro() -> Sandbox {
        sandbox!().unwrap()
    }
    #[track_caller]
    fn via_macro_tagged(tag: &str) -> Sandbox {
        sandbox!(tag).unwrap()
    }
    #[track_caller]
    fn via_builder(root: &Path) -> Sandbox {
        Sandbox::builder().root(root).create().unwrap()
    }
    fn plain() -> (Sandbox, u32) {
        (sandbox!().unwrap(), line!())
    }
    let site = |line: u32| Some(format!("{}:{line}", file!()));
    let root = sandbox!().unwrap();

    let (a, line_a) = (via_macro(), line!());
    let (b, line_b) = (via_macro(), line!());
    assert_eq!(a.record().site, site(line_a));
    assert_eq!(b.record().site, site(line_b));
    assert_ne!(a.path(), b.path(), "two callers, two sandboxes");
    let name = a.path().file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with(&format!("sandbox-{line_a}-")), "{name}");

    let (c, line_c) = (via_macro_tagged("helper-tag"), line!());
    assert_eq!(c.record().site, site(line_c));

    let (d, line_d) = (via_builder(root.path()), line!());
    assert_eq!(d.record().site, site(line_d));

    let (e, line_e) = plain();
    assert_eq!(e.record().site, site(line_e), "the helper's own line");

    let (f, line_f) = (Builder::new().root(root.path()).create().unwrap(), line!());
    assert_eq!(f.record().site, site(line_f));
    let g = Builder::new()
        .root(root.path())
        .site("job 42")
        .create()
        .unwrap();
    assert_eq!(g.record().site.as_deref(), Some("job 42"));
}

/// An integration test's `sandbox!()` is in its crate's `target/tmp`,
/// named after its file and line (unit tests' are named after the test:
/// see `a_unit_test_sandbox_is_named_after_its_test`).
#[test]
fn an_integration_test_sandbox_is_named_after_its_file() {
    let (sandbox, line) = (sandbox!().unwrap(), line!());
    let name = sandbox.path().file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with(&format!("sandbox-{line}-")), "{name}");
    assert_eq!(
        sandbox.path().parent(),
        Some(Path::new(env!("CARGO_TARGET_TMPDIR")))
    );
}

/// Issue 15: `.root(temp_dir())` keeps the per-user root. A keyed sandbox
/// in a root others may write (1777, like /tmp) goes into
/// `sandkeeper-<uid>` inside it, vetted as in the default root; in a
/// private root it goes directly inside.
#[test]
fn a_shared_root_keeps_the_per_user_root() {
    let shared = Builder::new().permissions(0o1777).create().unwrap();
    let user_root = shared
        .path()
        .join(format!("sandkeeper-{}", rustix::process::getuid().as_raw()));
    let keyed = || {
        let mut b = Builder::new();
        b.root(shared.path())
            .tag("k")
            .keyed(true)
            .checkout("/checkouts/h");
        b
    };
    let sandbox = keyed().create().unwrap();
    assert_eq!(sandbox.path().parent(), Some(user_root.as_path()));
    let meta = fs::symlink_metadata(&user_root).unwrap();
    assert!(meta.is_dir() && meta.mode() & 0o777 == 0o700);
    drop(sandbox);
    assert_eq!(
        names(shared.path()),
        Vec::<OsString>::new(),
        "no empty per-user root left"
    );

    // The protection holds there too: a planted symlink is refused.
    let elsewhere = sandbox!().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &user_root).unwrap();
    let err = keyed().create().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsafeRoot, "{err}");
    assert_eq!(names(elsewhere.path()), Vec::<OsString>::new());
    rustix::fs::unlink(&user_root).unwrap(); // the planted symlink

    // A private root (0700, ours): directly inside, as before.
    let private = sandbox!().unwrap();
    let direct = Builder::new()
        .root(private.path())
        .tag("k")
        .keyed(true)
        .create()
        .unwrap();
    assert_eq!(direct.path().parent(), Some(private.path()));
}

/// Tells [`outside_worktree_helper`] to run.
const OUTSIDE_ENV: &str = "SK_OUTSIDE_WORKTREE";

#[test]
#[ignore = "helper: sandbox!(outside_worktree) under the SANDKEEPER_ROOT it is given"]
fn outside_worktree_helper() {
    if std::env::var_os(OUTSIDE_ENV).is_none() {
        return;
    }
    match sandbox!(outside_worktree, "outside") {
        Ok(sandbox) => println!("READY {}", sandbox.path().display()),
        Err(e) => println!("ERR {:?} {e} (hint: {})", e.kind(), e.hint().unwrap_or("")),
    }
}

/// Issue 15: `sandbox!(outside_worktree)` is in the per-user root of the
/// default root (not `target/tmp`, which is inside the work tree), and is
/// refused, naming the work tree, when that root is inside one.
#[test]
fn outside_worktree_sandboxes_are_outside_any_work_tree() {
    // target/tmp is inside this checkout: the system temp directory.
    let base = Builder::new().outside_worktree(true).create().unwrap();
    let repo = base.path().join("repo");
    fs::create_dir_all(repo.join(".git")).unwrap();
    fs::create_dir_all(repo.join("sub")).unwrap();
    let plain = base.path().join("plain");
    fs::create_dir(&plain).unwrap();

    let run = |root: &Path| {
        let mut cmd = test_command(&[], "outside_worktree_helper");
        cmd.env(OUTSIDE_ENV, "1").env("SANDKEEPER_ROOT", root);
        Helper::spawn(cmd)
    };
    let helper = run(&repo.join("sub"));
    let err = helper.expect("ERR");
    assert!(err.starts_with("UnusableRoot"), "{err}");
    assert!(
        err.contains(&format!("work tree {}", repo.display())) && err.contains("SANDKEEPER_ROOT"),
        "{err}"
    );

    let helper = run(&plain);
    let path = helper.ready_path();
    assert_eq!(
        path.parent(),
        Some(&*plain.join(format!("sandkeeper-{}", rustix::process::getuid().as_raw())))
    );
    assert!(helper.wait().success);
    assert_eq!(names(&plain), Vec::<OsString>::new(), "removed, root too");

    // In this process, with the default root: not in target/tmp.
    let outside = sandbox!(outside_worktree).unwrap();
    assert!(!outside
        .path()
        .starts_with(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")));
    assert!(!outside.path().starts_with(env!("CARGO_TARGET_TMPDIR")));
}

/// Tells [`result_test_helper`] how to end: `ok`, `err` (through
/// `Sandbox::scope`) or `check-err` (through `Sandbox::check`).
const OUTCOME_ENV: &str = "SK_OUTCOME";

#[test]
#[ignore = "helper: a -> Result test that fails or passes as SK_OUTCOME says"]
fn result_test_helper() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(outcome) = std::env::var(OUTCOME_ENV) else {
        return Ok(());
    };
    let body = |sb: &Sandbox| -> Result<(), Box<dyn std::error::Error>> {
        fs::write(sb.path().join("evidence"), b"x")?;
        println!("READY {}", sb.path().display());
        match outcome.as_str() {
            "ok" => Ok(()),
            _ => Err("the test failed".into()),
        }
    };
    let sandbox = sandbox!()?;
    match outcome.as_str() {
        "check-err" => {
            let result = body(&sandbox);
            sandbox.check(result)
        }
        _ => sandbox.scope(body),
    }
}

/// Issue 15: `SANDKEEPER_KEEP=on-failure` keeps the sandbox of a failing
/// `-> Result` test that ends in `Sandbox::check` or runs in
/// `Sandbox::scope`; a passing one, or one without the variable, leaves
/// nothing.
#[test]
fn keep_on_failure_keeps_a_test_that_returns_err() {
    let cases: &[(&str, Option<&str>, bool, bool)] = &[
        // outcome, SANDKEEPER_KEEP, test passes, kept
        ("err", Some("on-failure"), false, true),
        ("check-err", Some("on-failure"), false, true),
        ("ok", Some("on-failure"), true, false),
        ("err", None, false, false),
        ("err", Some("never"), false, false),
    ];
    for &(outcome, keep, passes, kept) in cases {
        let mut cmd = test_command(&[], "result_test_helper");
        cmd.env(OUTCOME_ENV, outcome).env_remove("SANDKEEPER_KEEP");
        if let Some(keep) = keep {
            cmd.env("SANDKEEPER_KEEP", keep);
        }
        let helper = Helper::spawn(cmd);
        let path = helper.ready_path();
        let exit = helper.wait();
        let case = format!("{outcome} {keep:?}");
        assert_eq!(exit.success, passes, "{case}: {}", exit.stderr);
        assert_eq!(path.join("evidence").exists(), kept, "{case}");
        if kept {
            assert!(
                exit.stderr
                    .contains(&format!("kept sandbox {}", path.display())),
                "{case}: {}",
                exit.stderr
            );
            let Probe::Free(claim) = lease::probe(&path).unwrap() else {
                panic!("{case}: lease still held")
            };
            let until = claim.record().record().unwrap().keep_until_ms;
            assert!(until.is_some(), "{case}: keep_until_ms set");
            drop(claim);
            remove_by_path(&path);
        } else {
            assert!(!path.exists(), "{case}");
        }
    }
}

/// Issue 15: a sandbox marked failed is kept under `on-failure` by
/// `close()` as by a drop; unmarked, it is removed.
#[test]
fn a_sandbox_marked_failed_is_kept_on_failure() {
    let root = sandbox!().unwrap();
    let make = || {
        Builder::new()
            .root(root.path())
            .keep_policy(sandkeeper_engine::KeepPolicy::OnFailure)
            .keep_env(false)
            .create()
            .unwrap()
    };
    let passed = make();
    let passed_path = passed.path().to_owned();
    assert_eq!(passed.check(Ok::<_, ()>(1)), Ok(1));
    assert!(!passed.is_marked_failed());
    passed.close().unwrap();
    assert!(!passed_path.exists());

    let failed = make();
    let failed_path = failed.path().to_owned();
    assert_eq!(failed.check(Err::<(), _>("no")), Err("no"));
    assert!(failed.is_marked_failed());
    failed.close().unwrap();
    assert!(failed_path.is_dir(), "kept");
    remove_by_path(&failed_path);
}

/// Issue 27: a launcher killed outright (SIGKILL: no teardown runs) takes
/// the children `Sandbox::spawn` started with it, even one started from a
/// thread that ended long before; `spawn_outliving` is the one way out.
#[test]
fn a_killed_launchers_children_die_with_it() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    for mode in ["tied", "outliving"] {
        let root = sandbox!(format!("launcher-{mode}")).unwrap();
        let mut launcher = test_command(&[], "launcher_helper")
            .env("SK_LAUNCHER_MODE", mode)
            .env("SK_LAUNCHER_ROOT", root.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(launcher.stdout.take().unwrap());
        let mut child = None;
        let mut line = String::new();
        while out.read_line(&mut line).unwrap() > 0 {
            // (After the harness's "test launcher_helper ... ", no newline.)
            if let Some(at) = line.find("CHILD ") {
                child = Some(line[at + 6..].trim().parse::<u32>().unwrap());
                break;
            }
            line.clear();
        }
        let child = child.unwrap_or_else(|| panic!("{mode}: the launcher started no child"));
        // Started from a thread that has ended since: alive all the same.
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            alive(child),
            "{mode}: the child died with its spawning thread"
        );
        launcher.kill().unwrap();
        launcher.wait().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(child) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        match mode {
            "tied" => assert!(!alive(child), "the child outlived its SIGKILLed launcher"),
            _ => {
                assert!(
                    alive(child),
                    "spawn_outliving's child died with the launcher"
                );
                let pid = rustix::process::Pid::from_raw(child as i32).unwrap();
                rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
            }
        }
    }
}

#[test]
#[ignore = "helper: a launcher that spawns `sleep` from a short-lived thread and waits to be killed"]
fn launcher_helper() {
    let (Some(mode), Some(root)) = (
        std::env::var_os("SK_LAUNCHER_MODE"),
        std::env::var_os("SK_LAUNCHER_ROOT"),
    ) else {
        return;
    };
    let sandbox = Sandbox::builder()
        .root(root)
        .tag("launcher")
        .create()
        .unwrap();
    let pid = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut sleep = Command::new("sleep");
                sleep.arg("600");
                match mode.to_str() {
                    Some("tied") => sandbox.spawn(&mut sleep),
                    _ => sandbox.spawn_outliving(&mut sleep),
                }
                .unwrap()
            })
            .join()
            .unwrap()
    });
    println!("CHILD {pid}");
    std::thread::sleep(Duration::from_secs(600));
}
