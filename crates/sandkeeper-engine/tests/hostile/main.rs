//! Attacks on the library by an unprivileged local user (uid 65534, via
//! `setpriv`) in a shared root: one module per finding of the hostile
//! trial, each a regression test for a fix. See `docs/security.md` for the
//! threat model and the invariants these tests pin.
//!
//! Races are timed with inotify, not sleeps, so the tests are
//! deterministic; every test is bounded in time and leaves nothing behind.

mod exec_churn;
mod fd_tables;
mod full_fs;
mod kernel_support;
mod lock_free_scan;
mod loops;
mod messages;
mod mounts;
mod nonroot;
mod output;
mod reap_race;
mod records;
mod restore;
mod sockets;
mod squat;
mod visibility;
