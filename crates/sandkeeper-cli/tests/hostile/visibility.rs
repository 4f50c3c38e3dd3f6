//! Issue 10, finding 5(a): `sandkeeper` running in a child pid namespace (a
//! container sharing the temp directory with the host) does not see a
//! holder outside it. Every output must say so and keep the entry
//! (`unknown`); `--trust-pid-namespace`, `SANDKEEPER_TRUST_PID_NAMESPACE=1`
//! and `trust_pid_namespace = true` trust the namespace, and every output
//! reports that as an assumption.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::{entry_state, json};
use sandkeeper_testkit::namespace::{TRUST_PID_NAMESPACE_ENV, UNSHARE_PID_NAMESPACE};
use sandkeeper_testkit::privilege::{nobody_living_in, require_root};
use sandkeeper_testkit::process::Spawned;
use sandkeeper_testkit::scratch::Scratch;

/// `sandkeeper ARGS` as pid 1's child in a new pid namespace with its own
/// `/proc`, with `env` set.
fn in_child_namespace(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(UNSHARE_PID_NAMESPACE[0]);
    cmd.args(&UNSHARE_PID_NAMESPACE[1..])
        .arg(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(args)
        .env_remove(TRUST_PID_NAMESPACE_ENV)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run unshare (util-linux)")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A shared root with `held-1`, in which a nobody process lives (in the
/// host's pid namespace), aged so that a reap rule selects it.
fn held_root() -> (Scratch, Spawned) {
    let sb = Scratch::reachable_by_others("cli-visibility");
    fs::set_permissions(sb.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let held = sb.path().join("held-1");
    fs::create_dir(&held).unwrap();
    fs::set_permissions(&held, fs::Permissions::from_mode(0o777)).unwrap();
    let holder = nobody_living_in(&held);
    sandkeeper_testkit::tree::age_tree(&held, std::time::Duration::from_secs(3 * 86400));
    (sb, holder)
}

/// Issue 10, finding 5(a): scan and reap in a child pid namespace keep an
/// entry a host process uses, and say why; trusting the namespace is
/// explicit and reported.
#[test]
fn a_child_pid_namespace_is_a_blind_spot_unless_trusted() {
    if !require_root("a_child_pid_namespace_is_a_blind_spot_unless_trusted") {
        return;
    }
    let (sb, _holder) = held_root();
    let root = sb.path().to_str().unwrap();

    // Not trusted: unknown, with a warning that says what and what to do.
    let out = in_child_namespace(&["scan", "--json", "--entries", root], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = json(&out);
    assert_eq!(entry_state(&doc, "held-1"), "unknown", "{doc}");
    let spots = doc["blind_spots"].as_array().unwrap();
    assert_eq!(spots.len(), 1, "{doc}");
    assert!(spots[0].as_str().unwrap().contains("child pid namespace"));
    assert_eq!(doc["assumed_blind_spots"], serde_json::json!([]));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("child pid namespace") && stderr.contains("--trust-pid-namespace"),
        "{stderr}"
    );

    // A reap that would select it keeps it.
    let reap = [
        "reap",
        "--json",
        "--match",
        "held-*",
        "--older-than",
        "1d",
        root,
    ];
    let out = in_child_namespace(&reap, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["removed"], serde_json::json!([]), "{doc}");
    assert_eq!(doc["skipped"][0]["reason_code"], "unknown", "{doc}");
    assert!(sb.path().join("held-1").is_dir());

    // Trusted by flag or environment: the assumption is in every output.
    for (how, args, env) in [
        (
            "flag",
            vec!["scan", "--json", "--entries", "--trust-pid-namespace", root],
            vec![],
        ),
        (
            "environment",
            vec!["scan", "--json", "--entries", root],
            vec![(TRUST_PID_NAMESPACE_ENV, "1")],
        ),
    ] {
        let out = in_child_namespace(&args, &env);
        assert!(out.status.success(), "{how}: {}", text(&out.stderr));
        let doc = json(&out);
        assert_eq!(entry_state(&doc, "held-1"), "idle", "{how}: {doc}");
        assert_eq!(doc["blind_spots"], serde_json::json!([]), "{how}: {doc}");
        let assumed = doc["assumed_blind_spots"].as_array().unwrap();
        assert_eq!(assumed.len(), 1, "{how}: {doc}");
        assert!(
            assumed[0].as_str().unwrap().contains("child pid namespace"),
            "{how}: {doc}"
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("assumed to use nothing (--trust-pid-namespace)"),
            "{how}: {stderr}"
        );
    }

    // A dry-run reap by a config file that trusts it reports the
    // assumption in its JSON, and explain in its text.
    let config = sb.path().join("config.toml");
    fs::write(
        &config,
        format!(
            "trust_pid_namespace = true\n[[root]]\npath = {root:?}\n[[root.rule]]\nmatch = \"held-*\"\nolder_than = \"1d\"\n"
        ),
    )
    .unwrap();
    let out = in_child_namespace(
        &[
            "reap",
            "--json",
            "--dry-run",
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = json(&out);
    assert_eq!(
        doc["assumed_blind_spots"].as_array().map(Vec::len),
        Some(1),
        "{doc}"
    );
    let held = sb.path().join("held-1");
    let out = in_child_namespace(&["explain", held.to_str().unwrap(), "--root", root], &[]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains(": unknown"), "{stdout}");
    assert!(
        stdout.contains("blind spot: this process runs in a child pid namespace"),
        "{stdout}"
    );
    let out = in_child_namespace(
        &[
            "explain",
            "--trust-pid-namespace",
            held.to_str().unwrap(),
            "--root",
            root,
        ],
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("assumed to use nothing (--trust-pid-namespace)"),
        "{stdout}"
    );
}

/// Issue 10, finding 5(a): a trust value other than `1` is an error (exit
/// 2) naming the variable and the valid value.
#[test]
fn a_bad_trust_value_is_a_usage_error() {
    let sb = sandkeeper_engine::sandbox!().unwrap();
    let root: &Path = sb.path();
    for args in [
        vec!["scan", root.to_str().unwrap()],
        vec!["reap", "--dry-run", root.to_str().unwrap()],
        vec!["ls", root.to_str().unwrap()],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
            .args(&args)
            .env(TRUST_PID_NAMESPACE_ENV, "yes")
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("SANDKEEPER_TRUST_PID_NAMESPACE=\"yes\"")
                && stderr.contains("set it to 1"),
            "{args:?}: {stderr}"
        );
    }
}
