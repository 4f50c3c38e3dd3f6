//! Finding 9 of issue 10 (invariant I4): forged lease records and hostile
//! names shown as fact or as terminal control.
//!
//! `nobody` makes directories in a shared root whose names carry ESC, CR,
//! newline, a bidi override and invalid UTF-8, and writes into them a lease
//! record that claims uid 0 and `/usr/sbin/sshd -D`, with an OSC/CSI
//! sequence in `site` (set the title, clear the screen, print "all clear")
//! and CR/LF in `host`. Root then runs every human-facing command over the
//! root. No output byte may be a control character other than a newline,
//! no bidi or other format control may survive, the directory's real owner
//! is shown, and what only the record claims is labelled as a claim.
//!
//! Runs inside a private PID namespace (every process visible, so entries
//! are orphaned and `reap --dry-run` has something it would remove).

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use serde_json::Value;

use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::nobody_sh;
use sandkeeper_testkit::scratch::Scratch;

/// Names `nobody` chooses: every kind of byte a terminal or a reader
/// could be fooled by.
const HOSTILE_NAMES: [&[u8]; 6] = [
    b"esc-\x1b]0;pwned\x07\x1b[2J-x",
    b"cr-\rall clear",
    b"nl-\nall clear",
    "bidi-\u{202e}txt.exe".as_bytes(),
    b"bad-\xff\xfe-utf8",
    b"c1-\xc2\x9b31m-and-del\x7f",
];

/// The forged record: claims root and sshd; `site` rewrites the screen,
/// `host` fakes a line; `tag` carries a bidi override and `cmd` a very
/// long argument (the table must bound it).
fn forged_record() -> String {
    let long = "A".repeat(5000);
    format!(
        concat!(
            r#"{{"v":1,"pid":1,"start_ticks":1,"boot_id":"","uid":0,"#,
            r#""host":"evil\r\nhost: all clear","created_ms":1,"#,
            r#""tag":"t\u202eag","site":"\u001b]0;pwned\u0007\u001b[2J\u001b[H all clear","#,
            r#""cmd":["/usr/sbin/sshd","-D","{long}"],"checkout":"\u009b2J"}}"#,
            "\n"
        ),
        long = long
    )
}

/// The characters that must never reach a terminal: C0 (but `\n`), DEL,
/// C1, and the bidi and other format controls.
fn dangerous(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// Asserts that `bytes` (one stream of `what`) is UTF-8 and free of
/// dangerous characters; returns it as text.
fn clean(what: &str, bytes: &[u8]) -> String {
    let text = std::str::from_utf8(bytes).unwrap_or_else(|e| {
        panic!(
            "{what}: not UTF-8 ({e}): {:?}",
            String::from_utf8_lossy(bytes)
        )
    });
    if let Some((at, c)) = text.char_indices().find(|&(_, c)| dangerous(c)) {
        panic!("{what}: {c:?} at byte {at} reached the terminal:\n{text:?}");
    }
    text.to_owned()
}

/// Both streams of a run, checked; `(stdout, stderr)`.
fn checked(what: &str, out: &Output) -> (String, String) {
    (
        clean(&format!("{what} stdout"), &out.stdout),
        clean(&format!("{what} stderr"), &out.stderr),
    )
}

fn run(args: &[&OsStr]) -> Output {
    crate::bin()
        .args(args)
        .env("SANDKEEPER_TRUST_PID_NAMESPACE", "1")
        .output()
        .expect("run sandkeeper")
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// A shared root (mode 1777, like /tmp) where nobody made the hostile
/// entries, each with the forged record, plus `forged` (a plain name with
/// the forged record) and `held` (the forged record, its lease lock held
/// by nobody's `flock`).
struct Hostile {
    root: Scratch,
    _holder: sandkeeper_testkit::process::Spawned,
    holder_pid: u32,
}

fn hostile_root() -> Hostile {
    let root = Scratch::reachable_by_others("hostile-records");
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    let record = forged_record();
    let make = r#"mkdir -- "$SK_ROOT/$SK_NAME" && printf '%s' "$SK_RECORD" > "$SK_ROOT/$SK_NAME/.sandkeeper-lease""#;
    let names = HOSTILE_NAMES
        .iter()
        .copied()
        .chain([&b"forged"[..], b"held"]);
    for name in names {
        nobody_sh(
            make,
            &[
                ("SK_ROOT", root.path().as_os_str()),
                ("SK_NAME", OsStr::from_bytes(name)),
                ("SK_RECORD", OsStr::new(&record)),
            ],
        );
    }
    // nobody holds the lease lock of `held`: a live sandbox whose record
    // still lies about who made it.
    let held = root.path().join("held");
    let holder = sandkeeper_testkit::process::spawn_ready(
        Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .args(["flock", "--shared"])
            .arg(&held)
            .args(["sh", "-c", "echo ready; exec sleep 600"]),
    );
    let holder_pid = holder.pid();
    Hostile {
        root,
        _holder: holder,
        holder_pid,
    }
}

#[test]
fn forged_records_and_hostile_names_never_reach_a_terminal_as_fact_or_control() {
    run_in_pid_namespace(
        "forged_records_and_hostile_names_never_reach_a_terminal_as_fact_or_control",
        "records::inner_forged",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_forged() {
    if !in_namespace() {
        return;
    }
    let h = hostile_root();
    let root = h.root.path();
    let r = root.as_os_str();

    // ls: the real owner, the claims labelled, the long argument bounded.
    let out = run(&[os("ls"), r]);
    let (ls, _) = checked("ls", &out);
    assert_eq!(out.status.code(), Some(0), "{ls}");
    let forged = line_with(&ls, "/forged");
    assert!(forged.contains("nobody"), "real owner shown: {forged}");
    assert!(
        forged.contains("record claims uid 0 (root); the directory belongs to nobody"),
        "{forged}"
    );
    assert!(
        forged.contains("record: \"sshd -D"),
        "the command is labelled a claim (by its program's name, issue 15): {forged}"
    );
    for line in ls.lines() {
        assert!(line.chars().count() < 400, "bounded: {line}");
    }
    // The live one: its pid and command come from /proc, not the record.
    let held = line_with(&ls, "/held");
    assert!(
        held.contains(&h.holder_pid.to_string()) && held.contains("flock"),
        "the verified lock holder: {held}"
    );
    assert!(!held.contains("sshd"), "not the record's command: {held}");
    for name in ["esc-", "cr-", "nl-", "bidi-", "bad-", "c1-"] {
        assert!(ls.contains(name), "{name} listed: {ls}");
    }

    // explain: the record in its own, labelled section, in full but escaped.
    let target = root.join(OsStr::from_bytes(HOSTILE_NAMES[0]));
    for path in [root.join("forged"), target] {
        let out = run(&[os("explain"), path.as_os_str(), os("--root"), r]);
        let (text, err) = checked("explain", &out);
        assert_eq!(out.status.code(), Some(0), "{text}{err}");
        assert!(
            text.contains("lease record (as written by its creator, unverified)"),
            "{text}"
        );
        assert!(
            text.contains("record claims uid 0 (root); the directory belongs to nobody"),
            "{text}"
        );
        assert!(text.contains("owner: nobody (uid 65534)"), "{text}");
        assert!(
            text.contains(r"\x1b]0;pwned\x07\x1b[2J\x1b[H all clear"),
            "the site, escaped: {text}"
        );
        assert!(text.contains(r"evil\r\nhost"), "{text}");
        assert!(text.contains(&"A".repeat(5000)), "in full: {text}");
    }
    let out = run(&[
        os("explain"),
        root.join("held").as_os_str(),
        os("--root"),
        r,
    ]);
    let (text, _) = checked("explain held", &out);
    assert!(
        text.contains(&format!("lease lock held by: pid {} (flock)", h.holder_pid)),
        "{text}"
    );
    assert!(
        text.contains("pid: 1 (does not hold the lease lock)"),
        "the record's pid is not believed: {text}"
    );

    // scan, scan --entries, and reap --dry-run --verbose.
    let runs: [&[&OsStr]; 4] = [
        &[os("scan"), r],
        &[os("scan"), os("--entries"), r],
        &[os("scan"), os("--entries"), os("--verbose"), r],
        &[
            os("reap"),
            os("--dry-run"),
            os("--verbose"),
            os("--match"),
            os("*"),
            os("--older-than"),
            os("0s"),
            os("--grace"),
            os("0s"),
            r,
        ],
    ];
    for args in runs {
        let out = run(args);
        let what = format!("{args:?}");
        let (text, err) = checked(&what, &out);
        assert!(out.status.code().is_some(), "{what}: {text}{err}");
        if args.len() > 2 && args[1] == "--entries" {
            assert!(text.contains("record claims"), "{what}: {text}");
        }
        if args[0] == "reap" {
            assert!(text.contains("would remove"), "{what}: {text}");
        }
    }

    // JSON stays JSON: ESC is \u001b (serde_json), the bidi override is
    // \u202e, and the names decode to exactly what nobody made.
    let out = run(&[os("scan"), os("--json"), os("--entries"), r]);
    let (json, _) = checked("scan --json", &out);
    assert!(json.contains(r"\u001b]0;pwned\u0007"), "{json}");
    assert!(json.contains(r"\u202e"), "{json}");
    let doc: Value = serde_json::from_str(&json).unwrap();
    let entries = doc["roots"][0]["entries"].as_array().unwrap();
    let bidi = entries
        .iter()
        .find(|e| e["name"].as_str().is_some_and(|n| n.starts_with("bidi-")))
        .unwrap();
    assert_eq!(bidi["name"], "bidi-\u{202e}txt.exe");
    let out = run(&[os("ls"), os("--json"), r]);
    let (json, _) = checked("ls --json", &out);
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert!(doc["sandboxes"].as_array().unwrap().len() >= 8, "{json}");

    // watch's log lines.
    let conf = sandkeeper_engine::sandbox!().unwrap();
    let config = conf.path().join("watch.toml");
    fs::write(
        &config,
        format!(
            "[[root]]\npath = \"{}\"\ngrace = \"0s\"\norphan_age = \"0s\"\nuser_dirs = false\n[[root.rule]]\nmatch = \"*\"\nolder_than = \"0s\"\n",
            root.display()
        ),
    )
    .unwrap();
    let out = run(&[
        os("watch"),
        os("--once"),
        os("--dry-run"),
        os("--verbose"),
        os("--config"),
        config.as_os_str(),
    ]);
    let (_, log) = checked("watch --once", &out);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("would remove"), "{log}");
    // Nothing was removed, nothing left behind but what the sandbox drops.
    assert!(root.join("forged").exists());
}

/// Error messages and `run`'s leftover line carry hostile names too: each
/// stays one line, with nothing a terminal would act on.
#[test]
fn messages_stay_one_line() {
    let root = sandkeeper_engine::sandbox!().unwrap();
    let missing = root.path().join(OsStr::from_bytes(
        b"nl-\nerror: all clear\x1b[2J\xe2\x80\xae",
    ));
    let out = run(&[
        os("explain"),
        missing.as_os_str(),
        os("--root"),
        root.path().as_os_str(),
    ]);
    let (_, err) = checked("explain of a missing hostile path", &out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "one error line: {err}"
    );
    // (Escaped by the engine, which places the path: `\u{1b}`; the
    // command's own escaper writes `\x1b`. Either is one inert line.)
    assert!(
        err.contains(r"nl-\nerror: all clear\x1b[2J\u{202e}")
            || err.contains(r"nl-\nerror: all clear\u{1b}[2J\u{202e}"),
        "{err}"
    );

    let out = run(&[
        os("run"),
        os("--root"),
        root.path().as_os_str(),
        os("--"),
        os("sh"),
        os("-c"),
        os(r#"mkdir "$TMPDIR/$(printf 'left-\033]0;pwned\007\342\200\256')""#),
    ]);
    let (_, err) = checked("run's leftover line", &out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("left 1 entry"), "{err}");
}

/// The one line of `text` that contains `needle`.
fn line_with<'t>(text: &'t str, needle: &str) -> &'t str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle}:\n{text}"))
}

/// A name with ESC in it, given to `scan --json` unprivileged and without
/// a namespace: JSON escapes it, and the name round-trips.
#[test]
fn json_escapes_a_hostile_name() {
    let root = sandkeeper_engine::sandbox!().unwrap();
    let name = OsStr::from_bytes(b"x\x1b[2Jy\xe2\x80\xae");
    fs::create_dir(root.path().join(name)).unwrap();
    let out = run(&[
        os("scan"),
        os("--json"),
        os("--entries"),
        root.path().as_os_str(),
    ]);
    let (json, _) = checked("scan --json", &out);
    assert!(json.contains(r#""name": "x\u001b[2Jy\u202e""#), "{json}");
    let doc: Value = serde_json::from_str(&json).unwrap();
    let entries = doc["roots"][0]["entries"].as_array().unwrap();
    assert!(
        entries.iter().any(|e| e["name"] == "x\u{1b}[2Jy\u{202e}"),
        "{json}"
    );
}
