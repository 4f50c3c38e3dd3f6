//! The lease protocol with real processes: live while the owner runs,
//! orphaned after SIGKILL, claimable by one prober at a time.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use sandkeeper_engine::lease::{self, LeaseRecord, OwnerStatus, Probe, RecordState};
use sandkeeper_engine::remove::{remove_entry, RemoveOptions};
use sandkeeper_engine::{sandbox, ErrorKind};
use sandkeeper_testkit::privilege::{require_root, SETPRIV_NOBODY};
use sandkeeper_testkit::process::Helper;

#[test]
#[ignore = "helper process entry point, run by other tests"]
fn child_main() {
    sandkeeper_testkit::child::main()
}

/// Removes a probed-free directory while holding its claim.
fn remove_claimed(path: &Path) {
    let Probe::Free(claim) = lease::probe(path).unwrap() else {
        panic!("{} is not free", path.display());
    };
    let parent = fs::File::open(path.parent().unwrap()).unwrap();
    let (dev, ino) = claim.identity();
    let report = remove_entry(
        std::os::fd::AsFd::as_fd(&parent),
        path.file_name().unwrap(),
        RemoveOptions::new().expect(dev, ino),
    )
    .unwrap();
    assert!(report.is_complete());
}

#[test]
fn live_while_owner_runs_orphaned_after_sigkill() {
    let root = sandbox!().unwrap();
    let mut owner = Helper::start("create", &[("SK_ROOT", root.path().to_str().unwrap())]);
    let path = owner.ready_path();

    match lease::probe(&path).unwrap() {
        Probe::Live { holders, record } => {
            assert_eq!(holders, vec![owner.pid()], "holder from /proc/locks");
            let record = record.expect("record readable while live");
            assert_eq!(record.pid, owner.pid());
            assert_eq!(record.owner_status(), OwnerStatus::Alive);
        }
        other => panic!("expected live, got {other:?}"),
    }

    owner.kill();
    match lease::probe(&path).unwrap() {
        Probe::Free(claim) => {
            let record = claim.record().record().expect("record survives the owner");
            assert_eq!(record.owner_status(), OwnerStatus::Dead);
        }
        other => panic!("expected free after SIGKILL, got {other:?}"),
    }
    remove_claimed(&path);
}

#[test]
fn a_claim_excludes_a_second_prober_in_another_process() {
    let root = sandbox!().unwrap();
    let record = LeaseRecord::for_current_process("orphan");
    let lease = lease::Lease::create(root.path(), "orphan".as_ref(), &record, 0o700).unwrap();
    let path = lease.path().to_owned();
    drop(lease); // the owner is gone: an orphan

    let first = Helper::start("probe", &[("SK_PATH", path.to_str().unwrap())]);
    assert_eq!(first.expect("PROBE"), "free");
    // While the first prober holds its claim, nobody else can take it.
    let second = Helper::start("probe", &[("SK_PATH", path.to_str().unwrap())]);
    assert_eq!(second.expect("PROBE"), "live");
    assert!(matches!(lease::probe(&path).unwrap(), Probe::Live { .. }));
    drop(first);
    remove_claimed(&path);
}

#[test]
fn a_shared_hold_keeps_a_sandbox_live_after_its_creator_dies() {
    let root = sandbox!().unwrap();
    let mut owner = Helper::start("create", &[("SK_ROOT", root.path().to_str().unwrap())]);
    let path = owner.ready_path();
    let holder = Helper::start("hold", &[("SK_PATH", path.to_str().unwrap())]);
    holder.ready_path();
    owner.kill();
    match lease::probe(&path).unwrap() {
        Probe::Live { holders, .. } => assert!(holders.contains(&holder.pid()), "{holders:?}"),
        other => panic!("expected live while held, got {other:?}"),
    }
    drop(holder);
    remove_claimed(&path);
}

#[test]
fn malformed_records_are_reported_not_fatal() {
    let root = sandbox!().unwrap();
    let cases: &[(&str, &[u8])] = &[
        ("empty", b""),
        ("truncated", br#"{"v":1,"pid":12,"start_ti"#),
        ("not-json", b"pid=12\n"),
        ("binary", &[0xff, 0xfe, 0x00, 0x01]),
    ];
    for (name, bytes) in cases {
        let dir = root.path().join(name);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join(lease::LEASE_FILE), bytes).unwrap();
        match lease::probe(&dir).unwrap() {
            Probe::Free(claim) => match claim.record() {
                RecordState::Invalid(e) => {
                    assert_eq!(e.kind(), ErrorKind::InvalidLease, "{name}");
                    assert_eq!(
                        e.path(),
                        Some(dir.join(lease::LEASE_FILE).as_path()),
                        "{name}"
                    );
                }
                other => panic!("{name}: expected invalid record, got {other:?}"),
            },
            other => panic!("{name}: expected free, got {other:?}"),
        }
    }
    // A directory without a record is unmanaged, not an error.
    let bare = root.path().join("bare");
    fs::create_dir(&bare).unwrap();
    let Probe::Free(claim) = lease::probe(&bare).unwrap() else {
        panic!("bare not free")
    };
    assert!(matches!(claim.record(), RecordState::Missing));
}

#[test]
fn a_fifo_or_symlink_record_is_never_opened_as_a_record() {
    let root = sandbox!().unwrap();
    let fifo_dir = root.path().join("fifo");
    fs::create_dir(&fifo_dir).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fifo_dir.join(lease::LEASE_FILE),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let link_dir = root.path().join("link");
    fs::create_dir(&link_dir).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", link_dir.join(lease::LEASE_FILE)).unwrap();
    for dir in [fifo_dir, link_dir] {
        let Probe::Free(claim) = lease::probe(&dir).unwrap() else {
            panic!("not free")
        };
        assert!(
            matches!(claim.record(), RecordState::Invalid(_)),
            "{}",
            dir.display()
        );
    }
}

#[test]
fn probing_a_symlink_or_file_or_missing_path_is_an_error() {
    let root = sandbox!().unwrap();
    let target = root.path().join("target");
    fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, root.path().join("link")).unwrap();
    fs::write(root.path().join("file"), b"x").unwrap();
    for name in ["link", "file", "missing"] {
        let err = lease::probe(&root.path().join(name)).unwrap_err();
        assert_eq!(
            err.path(),
            Some(root.path().join(name).as_path()),
            "{name}: {err}"
        );
    }
}

/// The fallback: a directory the prober cannot open is judged by the
/// record's pid and start time.
#[test]
fn unopenable_directory_falls_back_to_the_record() {
    if !require_root("unopenable_directory_falls_back_to_the_record") {
        return;
    }
    // `nobody` must be able to reach it: not under a private checkout or
    // TMPDIR.
    let root = sandkeeper_testkit::scratch::Scratch::reachable_by_others("lease-unopenable");
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let record = LeaseRecord::for_current_process("locked-up");
    let lease = lease::Lease::create(root.path(), "locked-up".as_ref(), &record, 0o711).unwrap();
    // `nobody` can search the directory but not open (read) it.
    let probe = |path: &Path| {
        let path = path.to_str().unwrap();
        let exit = Helper::start_via(&SETPRIV_NOBODY, "probe", &[("SK_PATH", path)]).wait();
        exit.stdout.join("\n")
    };
    let out = probe(lease.path());
    assert!(out.contains("PROBE other Unopenable"), "{out}");
    assert!(out.contains("owner: Alive"), "{out}");
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o700)).unwrap();
}

/// `systemd-tmpfiles --clean` must skip a live (locked) sandbox even when
/// its configuration ages everything at 0, and remove an unlocked twin.
#[test]
fn systemd_tmpfiles_clean_spares_live_sandboxes() {
    let Ok(out) = Command::new("systemd-tmpfiles").arg("--version").output() else {
        // .ci/run installs systemd; outside CI the binary may be missing.
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-tmpfiles missing in CI"
        );
        eprintln!("skipping: systemd-tmpfiles is not installed");
        return;
    };
    assert!(out.status.success());
    let root = sandbox!().unwrap();
    let aged = root.path().join("aged");
    fs::create_dir(&aged).unwrap();
    let live = sandkeeper_engine::Sandbox::builder()
        .root(&aged)
        .tag("live")
        .create()
        .unwrap();
    fs::write(live.path().join("data"), b"precious").unwrap();
    let dead = aged.join("dead");
    fs::create_dir(&dead).unwrap();
    fs::write(dead.join("data"), b"garbage").unwrap();
    // Age both well into the past so that only the lock can save one.
    let old = fs::FileTimes::new()
        .set_accessed(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
        .set_modified(
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000),
        );
    for file in [live.path().join("data"), dead.join("data")] {
        fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_times(old)
            .unwrap();
    }
    for dir in [live.path(), dead.as_path()] {
        fs::File::open(dir).unwrap().set_times(old).unwrap();
    }
    let conf = root.path().join("sandkeeper-test.conf");
    fs::write(&conf, format!("d {} 0700 - - 0\n", aged.display())).unwrap();
    let out = Command::new("systemd-tmpfiles")
        .arg("--clean")
        .arg(&conf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dead.join("data").exists(),
        "the unlocked twin was cleaned (the test can fail)"
    );
    assert!(
        live.path().join("data").exists(),
        "the live sandbox survived"
    );
}

/// The Python example in docs/lease-protocol.md, run as written: another
/// language takes part in the protocol.
#[test]
fn python_sandbox_takes_part_in_the_protocol() {
    let doc = include_str!("../../../docs/lease-protocol.md");
    let script = doc
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a python block in docs/lease-protocol.md");
    let root = sandbox!().unwrap();
    let script_path = root.path().join("lease_example.py");
    fs::write(&script_path, script).unwrap();
    let mut child = Command::new("python3")
        .arg(&script_path)
        .arg(root.path())
        .arg("py-sandbox")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let path = root.path().join("py-sandbox");
    assert_eq!(line.trim(), format!("READY {}", path.display()));
    let probed = lease::probe(&path);
    let status_while_running = match &probed {
        Ok(Probe::Live {
            record: Some(r), ..
        }) => Some(r.owner_status()),
        _ => None,
    };
    let _ = child.kill();
    let _ = child.wait();
    match probed.unwrap() {
        Probe::Live { holders, record } => {
            assert_eq!(holders, vec![child.id()]);
            let record = record.expect("python's record parses");
            assert_eq!(record.pid, child.id());
            assert_eq!(record.tag, "py-job");
            assert_eq!(
                status_while_running,
                Some(OwnerStatus::Alive),
                "start_ticks agree"
            );
        }
        other => panic!("expected live, got {other:?}"),
    }
    // The owner is gone: the record's fallback agrees with the lock.
    let Probe::Free(claim) = lease::probe(&path).unwrap() else {
        panic!("still live")
    };
    assert_eq!(
        claim.record().record().unwrap().owner_status(),
        OwnerStatus::Dead
    );
    drop(claim);
    remove_claimed(&path);
}
