//! Attacks on the `sandkeeper` binary running as root, by an unprivileged
//! local user (uid 65534, via `setpriv`) in a shared root: one module per
//! finding of the hostile trial, each a regression test for a fix. See
//! `docs/security.md` for the threat model and the invariants these tests
//! pin.
//!
//! Races are timed with inotify, not sleeps, so the tests are
//! deterministic; every test is bounded in time and leaves nothing behind.

mod config_input;
mod full_fs;
mod fuzz_render;
mod hang;
mod kernelusers;
mod messages;
mod metrics_privacy;
mod nonroot;
mod output;
mod records;
mod report_dir;
mod roots;
mod run_tmpdir;
mod scan_locks;
mod unit_caps;
mod userns_fuse;
mod visibility;

use std::process::{Command, Output, Stdio};

/// The `sandkeeper` binary, with sandkeeper's own variables cleared and no
/// standard input.
pub fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandkeeper"));
    cmd.env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .stdin(Stdio::null());
    cmd
}

/// Runs `sandkeeper args…` ([`bin`]) to the end; its output.
pub fn sandkeeper(args: &[&str]) -> Output {
    bin().args(args).output().expect("run sandkeeper")
}

/// All of `out` for a failure message: the exit status, stdout and stderr.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The JSON document on `out`'s stdout; panics with stdout and stderr
/// when there is none.
pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The `state` of the entry `name` of the first root in a `--json`
/// document of `scan --entries` (`?` when it has none); panics when the
/// entry is not there.
pub fn entry_state(doc: &serde_json::Value, name: &str) -> String {
    doc["roots"][0]["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries in {doc}"))
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {doc}"))["state"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}
