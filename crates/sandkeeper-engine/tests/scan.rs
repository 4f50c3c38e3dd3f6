//! The scan's states with real processes, run inside a private PID
//! namespace where every process can be inspected (on some machines even
//! root cannot inspect PID 1; the scanner must not ignore what it cannot
//! see, so the tests make a world where it can see everything).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use sandkeeper_engine::scan::{EntryState, RootReport, Scanner};
use sandkeeper_engine::{sandbox, Sandbox};
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::SETPRIV_NOBODY;
use sandkeeper_testkit::process::{spawn_ready, test_command, Helper};

#[test]
#[ignore = "helper process entry point, run by other tests"]
fn child_main() {
    sandkeeper_testkit::child::main()
}

fn states(report: &RootReport) -> BTreeMap<String, EntryState> {
    report
        .entries
        .iter()
        .map(|e| (e.name.to_string_lossy().into_owned(), e.state))
        .collect()
}

fn scan(root: &Sandbox) -> RootReport {
    let scanner = Scanner::new();
    let inuse = scanner.in_use().unwrap();
    assert!(
        inuse.is_complete(),
        "everything is visible in the namespace: {:?}",
        inuse.uninspectable()
    );
    let opened = sandkeeper_engine::root::Root::open(root.path()).unwrap();
    scanner.scan_root(&opened, &inuse).unwrap()
}

#[test]
fn holders_make_entries_in_use_and_leases_tell_live_from_orphaned() {
    run_in_pid_namespace(
        "holders_make_entries_in_use_and_leases_tell_live_from_orphaned",
        "inner_holders_and_leases",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_holders_and_leases() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    for dir in ["held-fd", "held-cwd", "held-mmap", "plain"] {
        fs::create_dir(root.path().join(dir)).unwrap();
        fs::write(root.path().join(dir).join("file"), vec![7u8; 8192]).unwrap();
    }
    let p = |name: &str| root.path().join(name);
    let fd_holder = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$1/file\"; echo ready; exec sleep 600")
            .arg("sh")
            .arg(p("held-fd")),
    );
    let cwd_holder = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("echo ready; exec sleep 600")
            .current_dir(p("held-cwd")),
    );
    let mmap_holder = spawn_ready(Command::new("python3").arg("-c").arg(
        "import mmap,sys,time\nf=open(sys.argv[1],'rb')\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nf.close()\nprint('ready',flush=True)\ntime.sleep(600)",
    ).arg(p("held-mmap").join("file")));
    let mut owner = Helper::start(
        "create",
        &[
            ("SK_ROOT", root.path().to_str().unwrap()),
            ("SK_TAG", "sandbox"),
        ],
    );
    let sandbox_path = owner.ready_path();
    let sandbox_name = sandbox_path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();

    let report = scan(&root);
    let got = states(&report);
    assert_eq!(got["held-fd"], EntryState::InUse);
    assert_eq!(got["held-cwd"], EntryState::InUse);
    assert_eq!(got["held-mmap"], EntryState::InUse);
    assert_eq!(got["plain"], EntryState::Idle);
    assert_eq!(got[&sandbox_name], EntryState::Live);
    let holder_of = |name: &str| -> Vec<(u32, String)> {
        let e = report.entries.iter().find(|e| e.name == name).unwrap();
        e.holders
            .iter()
            .map(|h| (h.pid, h.how.to_string()))
            .collect()
    };
    assert!(
        holder_of("held-fd").contains(&(fd_holder.0.id(), "fd 3".to_owned())),
        "{:?}",
        holder_of("held-fd")
    );
    assert!(
        holder_of("held-cwd").contains(&(cwd_holder.0.id(), "cwd".to_owned())),
        "{:?}",
        holder_of("held-cwd")
    );
    assert!(
        holder_of("held-mmap")
            .iter()
            .any(|(pid, how)| *pid == mmap_holder.0.id() && how == "mmap"),
        "{:?}",
        holder_of("held-mmap")
    );
    let live = report
        .entries
        .iter()
        .find(|e| e.name.to_string_lossy() == sandbox_name)
        .unwrap();
    assert_eq!(live.lease.as_ref().unwrap().pid, owner.pid());

    drop((fd_holder, cwd_holder, mmap_holder));
    owner.kill();
    let got = states(&scan(&root));
    for name in ["held-fd", "held-cwd", "held-mmap", "plain"] {
        assert_eq!(
            got[name],
            EntryState::Idle,
            "{name} after its holder exited"
        );
    }
    assert_eq!(got[&sandbox_name], EntryState::Orphaned);
}

#[test]
fn uninspectable_processes_make_entries_unknown_unless_vouched_for() {
    run_in_pid_namespace(
        "uninspectable_processes_make_entries_unknown_unless_vouched_for",
        "inner_uninspectable",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_uninspectable() {
    if !in_namespace() {
        return;
    }
    // `nobody` scans it: not under a private checkout or TMPDIR.
    let root = sandkeeper_testkit::scratch::Scratch::reachable_by_others("scan-uninspectable");
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir(root.path().join("plain")).unwrap();
    fs::set_permissions(root.path().join("plain"), fs::Permissions::from_mode(0o755)).unwrap();
    // A root-owned process that `nobody` cannot inspect.
    let hidden = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("echo ready; exec sleep 600"),
    );
    let scan_as_nobody = |ignore: &str| {
        let out = test_command(&SETPRIV_NOBODY, "inner_print_states")
            .env("SK_IN_NAMESPACE", "1")
            .env("SK_ROOT", root.path())
            .env("SK_IGNORE", ignore)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = scan_as_nobody("");
    assert!(out.contains("STATE plain unknown"), "{out}");
    assert!(
        out.contains(&format!("UNINSPECTABLE {}", hidden.0.id())),
        "{out}"
    );
    // Vouch for every root-owned process in the namespace: then it is idle.
    let pids: Vec<String> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .map(|p| p.to_string())
        .collect();
    let out = scan_as_nobody(&pids.join(","));
    assert!(out.contains("STATE plain idle"), "{out}");
    assert!(out.contains(&format!("ASSUMED {}", hidden.0.id())), "{out}");
}

/// Scans `SK_ROOT` and prints one line per entry state and uninspectable
/// or assumed process (run as another user by the test above).
#[test]
#[ignore = "runs as another user, started by another test"]
fn inner_print_states() {
    let Some(root) = std::env::var_os("SK_ROOT") else {
        return;
    };
    let mut scanner = Scanner::new();
    for pid in std::env::var("SK_IGNORE")
        .unwrap_or_default()
        .split(',')
        .filter_map(|p| p.parse().ok())
    {
        scanner.ignore_pid(pid);
    }
    let report = scanner.scan(&[Path::new(&root)]).unwrap();
    for e in &report.roots[0].entries {
        println!("\nSTATE {} {}", e.name.to_string_lossy(), e.state);
    }
    for u in &report.uninspectable {
        println!("\nUNINSPECTABLE {}", u.pid);
    }
    for a in &report.assumed {
        println!("\nASSUMED {}", a.pid);
    }
}

#[test]
fn a_bad_root_is_a_clear_error() {
    let base = sandbox!().unwrap();
    fs::write(base.path().join("file"), b"x").unwrap();
    let cases = [("missing", "does not exist"), ("file", "not a directory")];
    for (name, words) in cases {
        let err = Scanner::new().scan(&[base.path().join(name)]).unwrap_err();
        assert_eq!(
            err.kind(),
            sandkeeper_engine::ErrorKind::UnusableRoot,
            "{name}"
        );
        assert!(err.to_string().contains(words), "{name}: {err}");
    }
}

/// The streaming scan (`scan_root_with`) gives the entries a collecting
/// `scan_root` lists, in the same order with the same values, and the same
/// totals and families (without members); `keep_entries(false)` gives the
/// same report without entries.
#[test]
fn streaming_scan_gives_what_the_collecting_scan_lists() {
    let root = sandbox!().unwrap();
    for name in [
        "app-235-101",
        "app-235-102",
        "app-236-7",
        "cargo-home-x1Yz9Q",
        "zz",
    ] {
        fs::create_dir(root.path().join(name)).unwrap();
    }
    fs::write(root.path().join("app-235-101/data"), vec![1u8; 20_000]).unwrap();
    fs::hard_link(
        root.path().join("app-235-101/data"),
        root.path().join("app-236-7/data"),
    )
    .unwrap();
    fs::write(root.path().join("top-file"), b"x").unwrap();
    fs::create_dir(root.path().join("zz/inner")).unwrap();

    let scanner = Scanner::new();
    let inuse = scanner.in_use().unwrap();
    let opened = sandkeeper_engine::root::Root::open(root.path()).unwrap();
    let collected = scanner.scan_root(&opened, &inuse).unwrap();
    let mut streamed = Vec::new();
    let summary = scanner
        .scan_root_with(&opened, &inuse, &mut |e| streamed.push(e))
        .unwrap();
    let mut lean = Scanner::new();
    lean.keep_entries(false);
    let lean = lean.scan_root(&opened, &inuse).unwrap();

    // The sandbox's own lease record is an entry too.
    assert_eq!(collected.entries.len(), 7, "{:?}", collected.entries);
    assert_eq!(format!("{streamed:?}"), format!("{:?}", collected.entries));
    let app = collected
        .entries
        .iter()
        .find(|e| e.name == "app-235-101")
        .unwrap();
    assert_eq!(&*app.pattern, "app-235-*");
    for report in [&summary, &lean] {
        assert!(report.entries.is_empty());
        assert_eq!(report.totals, collected.totals);
        assert_eq!(report.warnings, collected.warnings);
        assert_eq!(report.groups.len(), collected.groups.len());
        for (got, want) in report.groups.iter().zip(&collected.groups) {
            assert!(got.members.is_empty());
            let mut want = want.clone();
            want.members.clear();
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
    }
    // Every member listed once, in its family.
    let mut members: Vec<usize> = collected
        .groups
        .iter()
        .flat_map(|g| {
            for &i in &g.members {
                assert_eq!(*collected.entries[i].pattern, g.pattern);
            }
            g.members.iter().copied()
        })
        .collect();
    members.sort_unstable();
    assert_eq!(members, (0..7).collect::<Vec<_>>());
}

/// A root of more entries than one chunk of the walk: a file hard-linked
/// from the first and the last entry is counted once, in the first (by
/// name), as `du -x --max-depth=1` over the sorted names counts it.
#[test]
fn hard_links_across_walk_chunks_are_counted_once() {
    let root = sandbox!().unwrap();
    let n = 9_000;
    for i in 0..n {
        fs::create_dir(root.path().join(format!("d{i:05}"))).unwrap();
    }
    let last = format!("d{:05}", n - 1);
    fs::write(root.path().join("d00000/data"), vec![1u8; 40_000]).unwrap();
    fs::hard_link(
        root.path().join("d00000/data"),
        root.path().join(&last).join("data"),
    )
    .unwrap();
    let scanner = Scanner::new();
    let inuse = scanner.in_use().unwrap();
    let opened = sandkeeper_engine::root::Root::open(root.path()).unwrap();
    let report = scanner.scan_root(&opened, &inuse).unwrap();
    // The sandbox's own lease record sorts first.
    assert_eq!(report.entries.len(), n + 1);
    let (first, end) = (&report.entries[1], &report.entries[n]);
    assert_eq!(
        (&*first.name, &*end.name),
        ("d00000".as_ref(), last.as_ref())
    );
    assert_eq!((first.files, end.files), (1, 0), "{first:?} {end:?}");
    assert!(first.disk_bytes > end.disk_bytes);
    assert_eq!(end.disk_bytes, report.entries[2].disk_bytes);
    assert_eq!(report.totals.files, 2, "the record and the linked file");
    assert_eq!(report.totals.dirs, n as u64);
}

/// Issue 14 (memory flat in the number of entries): `json::write_scan`
/// writes, as the entries stream, the document `json::scan` builds from a
/// collected report: the same values (only the order of a root's members
/// differs), over two roots, several families, a live lease, an invalid
/// one, an entry in use, a name that is not UTF-8 and one with terminal
/// escapes; and, without entries, the same document as before.
#[test]
fn streamed_json_equals_the_collected_document() {
    run_in_pid_namespace(
        "streamed_json_equals_the_collected_document",
        "inner_streamed_json",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_streamed_json() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use sandkeeper_engine::json;
    use sandkeeper_engine::root::Root;
    use serde_json::Value;

    if !in_namespace() {
        return;
    }
    let base = sandbox!().unwrap();
    let (one, two) = (base.path().join("one"), base.path().join("two"));
    fs::create_dir(&one).unwrap();
    fs::create_dir(&two).unwrap();
    for name in [
        "app-235-101",
        "app-235-102",
        "app-236-7",
        "cargo-home-x1Yz9Q",
        "held",
        "forged",
        "zz",
    ] {
        fs::create_dir(one.join(name)).unwrap();
    }
    fs::write(one.join("app-235-101/data"), vec![1u8; 20_000]).unwrap();
    fs::write(one.join("top-file"), b"x").unwrap();
    fs::write(one.join("held/file"), b"x").unwrap();
    // In use: a process holds a file inside.
    let _holder = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$1/file\"; echo ready; exec sleep 600")
            .arg("sh")
            .arg(one.join("held")),
    );
    // Both scans name the holder by its command: wait for the `exec` after
    // "ready" (before it, it is `sh`).
    let comm = format!("/proc/{}/comm", _holder.pid());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never ran sleep"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A record that is not one: `{"invalid": true}`.
    fs::write(one.join("forged/.sandkeeper-lease"), b"not json").unwrap();
    fs::create_dir(one.join(OsStr::from_bytes(b"bad\xff-1"))).unwrap();
    fs::create_dir(one.join("esc-\x1b]0;pwned\x07-\u{202e}txt")).unwrap();
    // Live: this process holds its lease.
    let _live = Sandbox::builder()
        .root(&one)
        .tag("leased")
        .create()
        .unwrap();
    for name in ["run-1", "run-2", "other"] {
        fs::create_dir(two.join(name)).unwrap();
    }
    let roots = [Root::open(&one).unwrap(), Root::open(&two).unwrap()];
    let mut scanner = Scanner::new();
    scanner.origins(true);

    // What changes between two scans: when, and the free space.
    let parse = |text: &[u8]| -> Value {
        let mut doc: Value = serde_json::from_slice(text).expect("one JSON document");
        doc["started_ms"] = Value::Null;
        for root in doc["roots"].as_array_mut().unwrap() {
            root["filesystem"]["free_bytes"] = Value::Null;
        }
        doc
    };
    for entries in [true, false] {
        let collected = json::scan(&scanner.scan_roots(&roots).unwrap(), entries);
        let mut streamed = Vec::new();
        let report = json::write_scan(&scanner, &roots, entries, &mut streamed).unwrap();
        let text = String::from_utf8(streamed).expect("UTF-8");
        assert_eq!(
            parse(text.as_bytes()),
            parse(collected.as_bytes()),
            "{text}"
        );
        // Safe to print, as the collected one.
        assert!(!text.contains(['\x1b', '\x07', '\u{202e}']), "{text}");
        assert!(text.ends_with("}\n"));
        // The report has what a lean scan keeps: no entry.
        assert_eq!(report.roots.len(), 2);
        assert!(report.roots.iter().all(|r| r.entries.is_empty()));
        assert_eq!(report.roots[0].totals.entries, 11);
        if !entries {
            // Not one member moved.
            assert_eq!(stable(&text), stable(&collected));
            continue;
        }
        let doc = parse(text.as_bytes());
        let listed = doc["roots"][0]["entries"].as_array().unwrap();
        let state = |name: &str| {
            let e = listed.iter().find(|e| e["name"] == name).unwrap();
            e["state"].as_str().unwrap().to_owned()
        };
        assert_eq!(state("held"), "in_use");
        assert_eq!(state("app-235-102"), "idle");
        assert_eq!(state("forged"), "orphaned");
        let live = _live.path().file_name().unwrap().to_str().unwrap();
        assert_eq!(state(live), "live");
        assert!(text.contains(r#""name_base64": "YmFk/y0x""#), "{text}");
        assert!(
            text.contains(r"esc-\u001b]0;pwned\u0007-\u202etxt"),
            "{text}"
        );
        assert_eq!(doc["roots"][1]["entries"].as_array().unwrap().len(), 3);
    }
}

/// A document's text without the lines that change between two scans.
fn stable(doc: &str) -> String {
    doc.lines()
        .filter(|l| !l.contains("\"started_ms\"") && !l.contains("\"free_bytes\""))
        .collect::<Vec<_>>()
        .join("\n")
}
