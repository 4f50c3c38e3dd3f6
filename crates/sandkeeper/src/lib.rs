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
//! - a launcher's VM started with [`Sandbox::spawn`] dies with the
//!   launcher, however it dies, and [`teardown_on_signals`] makes SIGTERM,
//!   SIGINT and SIGHUP tear down in order (`docs/launchers.md`);
//!
//! ```toml
//! [dev-dependencies]   # or [dependencies], for a launcher
//! sandkeeper = "0.2"   # from a checkout: { path = "crates/sandkeeper" }
//! ```
//!
//! This crate is the sandbox and the lease protocol's writer and probe,
//! nothing else. The collector that finds and removes what leaked (scan,
//! in-use detection, reap, watch) is the `sandkeeper-engine` crate and the
//! `sandkeeper` command.
//!
//! ```
//! use sandkeeper::Sandbox;
//!
//! let sandbox = Sandbox::builder().tag("app").create()?;
//! std::fs::write(sandbox.path().join("config.toml"), "x = 1")?;
//! // ... use it; on drop the directory and everything in it is gone.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Platforms
//!
//! Linux, macOS and FreeBSD: everything below. Windows: the same API but
//! [`Sandbox::try_clone_dir`] and [`Sandbox::share_lease_with_children`]
//! (descriptors), with the lease held as the record file open under a
//! share mode (Windows has no lock on a directory), paths resolved at each
//! call, a removal by `std::fs::remove_dir_all` (which follows no link or
//! junction), `identity()` `(0, 0)`, and spawned children ended at once
//! (no SIGTERM there). `docs/lease-protocol.md` ("Platforms") has the
//! details; CI type-checks all three (`scripts/check-targets.sh`).
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
//!   mount points. Another process with write access to the
//!   *parent* can still rename things around; it can never make the removal
//!   touch anything outside the sandbox's own tree.
//! - **Live sandboxes are never wiped.** A keyed creation reclaims a
//!   directory only while holding its exclusive lock, which is impossible
//!   while any owner holds the shared one.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(clippy::print_stdout, clippy::print_stderr)]

#[doc(hidden)]
pub mod clock;
mod error;
#[cfg(target_os = "linux")]
#[doc(hidden)]
pub mod fs_at;
#[doc(hidden)]
pub mod human;
pub mod lease;
#[doc(hidden)]
pub mod names;
mod remove_tree;
mod sandbox;
mod sys;

pub use error::{Error, ErrorKind, Result};
pub use sandbox::{teardown_on_signals, Builder, KeepPolicy, Sandbox, WhenHeld, KEEP_ENV};

#[doc(hidden)]
pub mod __private {
    pub use crate::sandbox::test_macro::{create, CallSite};
}

/// What the engine (`sandkeeper-engine`) shares with this crate: not part
/// of this crate's API, and may change in any release.
#[doc(hidden)]
pub mod __engine {
    pub use crate::error::{Escaped, IoResultExt};
    pub use crate::human;
}

/// A keyed [`Sandbox`] for a test, named after the test or the call site.
///
/// - `sandbox!()` in a unit test derives the tag from the running test and
///   the line (`tests-it_works-42`: the test's path with `::` as `-`, at
///   most 64 bytes of its end; libtest and nextest run each test on a
///   thread named after it). In an integration test, on a thread the test
///   spawned, or outside tests, from the file and line (`lease-42`).
/// - `sandbox!(tag)` uses the given tag: any string expression (`&str`,
///   `String`, `&format!(…)`, a helper's `&str` parameter).
/// - `sandbox!(outside_worktree)` and `sandbox!(outside_worktree, tag)`:
///   in the default root (`SANDKEEPER_ROOT`, else the system temp
///   directory), inside the per-user root, and refused with an error when
///   that is inside a git work tree (see [`Builder::outside_worktree`]) —
///   for tests that run `git init` or `cargo new`, or look for a `.git`
///   upwards.
/// - Otherwise, in an integration test (where cargo sets
///   `CARGO_TARGET_TMPDIR`) the sandbox goes into `target/tmp`; elsewhere
///   into the per-user root in the system temp directory, with the
///   checkout's hash in its name.
/// - It is keyed: a run reclaims what a killed earlier run left, and tests
///   running at once from one site take numbered slots.
/// - Its lease records the call site (`file:line`). In a function marked
///   `#[track_caller]` that is the function's caller, so a helper such as
///   `fn temp_cwd(tag: &str)` keeps its callers apart.
/// - Dropped during a panic, it is kept when `SANDKEEPER_KEEP=on-failure`,
///   and its path printed; a `-> Result` test is kept on `Err` too when it
///   ends in [`Sandbox::check`] or runs in [`Sandbox::scope`].
///
/// Evaluates to a `Result<Sandbox>`. Bind the sandbox to a name (`let _sb
/// = sandbox!()?;`): `let _ = sandbox!()?;` removes it at once. Two
/// *different* call sites claiming the same keyed name (the same explicit
/// tag) in one process is an [`ErrorKind::NameConflict`] naming both.
///
/// ```
/// use sandkeeper::{sandbox, Sandbox};
///
/// let sandbox = sandbox!()?;
/// std::fs::write(sandbox.path().join("input.txt"), "hello")?;
///
/// #[track_caller]
/// fn temp_cwd(tag: &str) -> Sandbox {
///     sandbox!(&format!("cwd-{tag}")).unwrap()
/// }
/// let dir = temp_cwd("build"); let line = line!();
/// assert_eq!(dir.record().site, Some(format!("{}:{line}", file!())));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[macro_export]
macro_rules! sandbox {
    () => {
        $crate::__private::create($crate::sandbox!(@site), ::core::option::Option::None, false)
    };
    (outside_worktree $(,)?) => {
        $crate::__private::create($crate::sandbox!(@site), ::core::option::Option::None, true)
    };
    (outside_worktree, $tag:expr $(,)?) => {
        $crate::__private::create(
            $crate::sandbox!(@site),
            ::core::option::Option::Some(::core::convert::AsRef::<str>::as_ref(&$tag)),
            true,
        )
    };
    (@site) => {
        $crate::__private::CallSite::here(
            ::core::option_env!("CARGO_MANIFEST_DIR"),
            ::core::option_env!("CARGO_TARGET_TMPDIR"),
            ::core::cfg!(test),
        )
    };
    ($tag:expr $(,)?) => {
        $crate::__private::create(
            $crate::sandbox!(@site),
            ::core::option::Option::Some(::core::convert::AsRef::<str>::as_ref(&$tag)),
            false,
        )
    };
}
