//! Attacks on the `sandkeeper` binary running as root, by an unprivileged
//! local user (uid 65534, via `setpriv`) in a shared root: one module per
//! finding of the hostile trial, each a regression test for a fix. See
//! `docs/security.md` for the threat model and the invariants these tests
//! pin.
//!
//! Races are timed with inotify, not sleeps, so the tests are
//! deterministic; every test is bounded in time and leaves nothing behind.

mod config_input;
mod fuzz_render;
mod kernelusers;
mod output;
mod records;
mod roots;
mod run_tmpdir;
mod scan_locks;
mod visibility;
