//! sandkeeper's collector: what finds and removes the scratch directories
//! that leaked. The sandboxes themselves and the lease protocol are the
//! `sandkeeper` crate (re-exported here: [`Sandbox`], [`lease`]).
//!
//! Scratch directories that cannot leak unnoticed.
//!
//! Programs make scratch directories per run — test sandboxes in `/tmp`,
//! VM run directories with gigabyte disk images, build scratch — and
//! whenever the creator forgets, panics, is killed, or keeps the directory
//! in a `static`, the directory stays forever. sandkeeper makes such leaks
//! bounded and visible:
//!
//! - a [`Sandbox`] is removed on drop (panics included), after its
//!   teardown actions ([`Sandbox::defer`], [`Sandbox::spawn`]) ran;
//! - it carries a [`lease`]: a lock the kernel drops when the owner dies, so
//!   a garbage collector can tell live sandboxes from orphans without
//!   guessing from pids;
//! - a *keyed* sandbox ([`Builder::keyed`]) has a fixed name and reclaims
//!   what its dead predecessor left; a *process-lifetime* one
//!   ([`Builder::process_lifetime`]) works in a `static`;
//! - [`sandbox!`] gives each test its own keyed sandbox, named after the
//!   unit test or the integration test's file;
//! - [`remove`] deletes a tree without ever leaving it;
//! - [`run`] gives a command its own scratch directory as `TMPDIR`, stops
//!   what it leaves running and removes what it leaves behind.
//!
//! ```
//! use sandkeeper_engine::Sandbox;
//!
//! let sandbox = Sandbox::builder().tag("app").create()?;
//! std::fs::write(sandbox.path().join("config.toml"), "x = 1")?;
//! // ... use it; on drop the directory and everything in it is gone.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Design
//!
//! One lease protocol underlies everything (see [`lease`] and
//! `docs/lease-protocol.md`): the owner holds `flock(LOCK_SH)` on the
//! sandbox directory; a prober takes `flock(LOCK_EX|LOCK_NB)`, and succeeds
//! only when no owner is left. Sandboxes are created under a temporary name,
//! locked, given their record and renamed into place, so they never appear
//! unlocked.
//!
//! # Safety & security
//!
//! - **When `Drop` cannot run.** SIGKILL, `abort`, OOM kills, a
//!   `std::mem::forget`, and `std::process::exit` for non-static sandboxes
//!   skip destructors. The lease makes those leftovers safe to collect: the
//!   kernel releases the lock, so the next keyed creation or any reaper
//!   (`sandkeeper reap`) recognizes the directory as orphaned. Process-
//!   lifetime sandboxes are removed by an exit hook at normal exit.
//! - **When removal fails.** What a drop or [`Sandbox::close`] cannot
//!   remove (a mount inside, an immutable file) stays under its name with
//!   its lease record, so it is an orphaned sandbox that any reaper takes
//!   once nothing blocks it; a drop says so once on stderr, with why.
//! - **Predictable names.** Keyed and process-lifetime sandboxes live in a
//!   per-user directory `sandkeeper-<uid>` (mode 0700), opened without
//!   following symlinks and checked to belong to the user, so another user
//!   of a shared `/tmp` cannot pre-create or redirect them. That holds in
//!   the default root and in any root given to [`Builder::root`] that
//!   others may write; only in a private root of the caller's do keyed
//!   names go directly inside.
//! - **Removal and TOCTOU.** The path is fixed at creation; before removing,
//!   the name is checked to still be the inode that was created, and the
//!   removal itself is fd-relative and never follows symlinks or crosses
//!   mount points (see [`remove`]). Another process with write access to the
//!   *parent* can still rename things around; it can never make the removal
//!   touch anything outside the sandbox's own tree.
//! - **Live sandboxes are never wiped.** A keyed creation reclaims a
//!   directory only while holding its exclusive lock, which is impossible
//!   while any owner holds the shared one.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(clippy::print_stdout, clippy::print_stderr)]

#[cfg(feature = "config")]
pub mod config;
pub mod defaults;
mod dirlist;
pub mod escape;
mod error {
    //! The error type is the `sandkeeper` crate's: one type across both.
    pub use sandkeeper::__engine::IoResultExt;
    pub use sandkeeper::{Error, ErrorKind, Result};
}
pub use sandkeeper::clock;
pub(crate) use sandkeeper::fs_at;
pub(crate) use sandkeeper::names;
pub mod human;
pub mod inuse;
pub mod json;
pub mod leaks;
pub use sandkeeper::lease;
#[cfg(feature = "config")]
pub mod metrics;
#[cfg(target_os = "linux")]
pub mod origin;
pub mod output;
pub mod pattern;
pub mod reap;
pub mod remove;
pub mod root;
pub mod run;
pub mod scan;
pub mod signals;
pub mod supervise;
mod sys;
#[cfg(feature = "config")]
pub mod text;
pub mod walk;
#[cfg(feature = "config")]
pub mod watch;

pub use error::{Error, ErrorKind, Result};
pub use sandkeeper::{
    sandbox, teardown_on_signals, Builder, KeepPolicy, Sandbox, WhenHeld, KEEP_ENV,
};

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
