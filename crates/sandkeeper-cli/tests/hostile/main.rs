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
mod userns_fuse;
mod visibility;

use std::process::{Command, Stdio};

/// The `sandkeeper` binary, with sandkeeper's own variables cleared and no
/// standard input.
pub fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandkeeper"));
    cmd.env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .stdin(Stdio::null());
    cmd
}
