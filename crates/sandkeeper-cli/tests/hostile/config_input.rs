//! Config input (issue "Hostile /tmp, part 2", item 5): a config that is
//! a FIFO, a device or huge is refused with exit 2 and the reason, never
//! waited on or read without bound; the root-overlap check stays fast with
//! thousands of roots.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use sandkeeper_engine::Sandbox;

/// Runs `sandkeeper args…`, killing it if it has not finished in `limit`.
fn bounded(args: &[&str], limit: Duration) -> Output {
    let child: Child = Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sandkeeper");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    // Reading both pipes while waiting: a full pipe must not stall it.
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("output"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("sandkeeper {args:?} still ran after {limit:?}");
        }
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_config_that_is_not_a_regular_file_is_refused_at_once() {
    let dir = Sandbox::new().unwrap();
    let fifo = dir.path().join("config.toml");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let limit = Duration::from_secs(20);
    for (args, what) in [
        (vec!["watch", "--check", "--config", p(&fifo)], "a FIFO"),
        (vec!["reap", "--dry-run", "--config", p(&fifo)], "a FIFO"),
        (
            vec!["watch", "--check", "--config", "/dev/zero"],
            "a device",
        ),
        (
            vec!["watch", "--check", "--config", p(dir.path())],
            "a directory",
        ),
    ] {
        let out = bounded(&args, limit);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(what), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_huge_config_is_refused_without_reading_it_all() {
    let dir = Sandbox::new().unwrap();
    let big = dir.path().join("config.toml");
    let file = fs::File::create(&big).unwrap();
    file.set_len(8 << 30).unwrap(); // sparse: 8 GiB of NULs, no disk
    let out = bounded(
        &["watch", "--check", "--config", p(&big)],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("bytes"), "{}", stderr(&out));
}

#[test]
fn thousands_of_roots_are_checked_for_overlap_quickly() {
    let dir = Sandbox::new().unwrap();
    let base = dir.path();
    let mut text = String::new();
    for i in 0..6000 {
        text.push_str(&format!("[[root]]\npath = \"{}/r{i}\"\n", p(base)));
    }
    let config = base.join("config.toml");
    fs::write(&config, &text).unwrap();
    // Seconds, not the minutes a quadratic check with a canonicalize per
    // pair took: the bound only catches that, it measures nothing.
    let out = bounded(
        &["watch", "--check", "--config", p(&config)],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // One root inside another, far apart in the file: found, with both lines.
    text.push_str(&format!("[[root]]\npath = \"{}/r7/inner\"\n", p(base)));
    fs::write(&config, &text).unwrap();
    let out = bounded(
        &["watch", "--check", "--config", p(&config)],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("r7/inner") && err.contains("is inside") && err.contains("(line 16)"),
        "{err}"
    );
}
