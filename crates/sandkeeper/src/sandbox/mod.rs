//! Sandboxes: leased scratch directories that are removed on drop.

mod builder;
mod keep;
mod keyed;
mod open;
mod signals;
mod spawn;
mod teardown;
#[doc(hidden)]
pub mod test_macro;
mod worktree;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use builder::Builder;
pub use keep::{KeepPolicy, KEEP_ENV};
pub use keyed::WhenHeld;
pub use signals::teardown_on_signals;

use crate::error::{Error, ErrorKind, Result};
use crate::lease::{self, Lease, LeaseRecord};
use crate::remove_tree::{remove_in, Leftovers};
use teardown::Action;

/// A scratch directory with a lease, removed when dropped.
///
/// The directory is created mode 0700 (see [`Builder::permissions`]) and
/// carries a lease (see [`lease`](crate::lease)): while the `Sandbox` lives,
/// every garbage collector that speaks the protocol (`sandkeeper reap`,
/// `systemd-tmpfiles --clean`) sees it as live. If the process dies without
/// dropping it (SIGKILL, abort, a `static` at exit without the hook), the
/// kernel releases the lock and the directory becomes an *orphan* that the
/// next keyed creation or any reaper removes.
///
/// Removal happens on drop, during a panic too, after the teardown actions
/// registered with [`defer`](Sandbox::defer) and [`spawn`](Sandbox::spawn)
/// have run (last registered first). Use [`close`](Sandbox::close) to see
/// removal errors, and [`keep`](Sandbox::keep) to keep the directory.
///
/// The absolute path is fixed at creation: changing the working directory
/// later cannot redirect removal, and removal checks that the name still
/// refers to the directory that was created before touching it.
///
/// ```
/// use sandkeeper::Sandbox;
///
/// let sandbox = Sandbox::new()?;
/// std::fs::write(sandbox.path().join("data"), b"scratch")?;
/// let path = sandbox.path().to_owned();
/// drop(sandbox);
/// assert!(!path.exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Bind it to a name for as long as the directory is needed: `let _sb =
/// sandbox!()?;` keeps it to the end of the scope, while `let _ =
/// sandbox!()?;` drops it — and removes the directory — at once (`_` is
/// not a name). An unused `Sandbox` value is a warning (`#[must_use]`):
///
/// ```compile_fail
/// #[deny(unused_must_use)]
/// fn fixture() {
///     sandkeeper::Sandbox::new().unwrap(); // error: removed at once
/// }
/// ```
///
/// ```
/// #[deny(unused_must_use)]
/// fn fixture() -> Result<(), sandkeeper::Error> {
///     let _sb = sandkeeper::Sandbox::new()?; // lives to the end of the scope
///     Ok(())
/// }
/// # fixture().unwrap();
/// ```
#[must_use = "a Sandbox removes its directory when dropped: bind it to a name \
              (`let _sb = ...`, not `let _ = ...`) for as long as it is needed"]
pub struct Sandbox {
    inner: Arc<Inner>,
}

/// The shared state of a sandbox (shared with the registry of open
/// sandboxes: `open.rs`).
struct Inner {
    path: PathBuf,
    parent: PathBuf,
    name: OsString,
    identity: (u64, u64),
    /// The parent is the per-user root: remove it too once it is empty.
    in_user_root: bool,
    keep: KeepPolicy,
    /// Marked failed ([`Sandbox::mark_failed`]): kept as on a panic.
    failed: AtomicBool,
    keep_for: Duration,
    kill_grace: Duration,
    state: Mutex<State>,
}

struct State {
    lease: Option<Lease>,
    teardown: Vec<Action>,
    finished: bool,
}

impl Sandbox {
    /// Creates a sandbox with the default options: tag `sandbox`, in
    /// `SANDKEEPER_ROOT` if set, else the system temp directory.
    ///
    /// ```
    /// let sandbox = sandkeeper::Sandbox::new()?;
    /// assert!(sandbox.path().is_dir());
    /// # Ok::<(), sandkeeper::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Builder::create`].
    #[track_caller]
    pub fn new() -> Result<Sandbox> {
        Builder::new().create()
    }

    /// A [`Builder`] for a sandbox with non-default options; its
    /// [`site`](Builder::site) is the caller's location.
    #[track_caller]
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// The sandbox's absolute path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Device and inode of the directory that was created, fixed at
    /// creation: compare them with what [`path`](Self::path) names now to
    /// tell whether someone replaced it.
    pub fn identity(&self) -> (u64, u64) {
        self.inner.identity
    }

    /// A new descriptor (close-on-exec) of the directory that was created,
    /// wherever its name points now: to list or walk the sandbox without
    /// resolving its path again (a symlink put in its place is never
    /// followed). It shares the open file, and so the lease lock, with the
    /// sandbox: drop it before the sandbox is finished.
    ///
    /// ```
    /// # let sandbox = sandkeeper::Sandbox::new()?;
    /// std::fs::write(sandbox.path().join("data"), b"x")?;
    /// let dir = std::fs::File::from(sandbox.try_clone_dir()?);
    /// assert!(dir.metadata()?.is_dir());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When the sandbox is already finished, or `fcntl(F_DUPFD_CLOEXEC)`
    /// fails (out of descriptors).
    #[cfg(unix)]
    pub fn try_clone_dir(&self) -> Result<std::os::fd::OwnedFd> {
        let state = self.inner.lock();
        let lease = state.lease.as_ref().ok_or_else(|| {
            Error::new(ErrorKind::InvalidInput, "the sandbox is already finished").at(self.path())
        })?;
        rustix::io::fcntl_dupfd_cloexec(lease.dir(), 0).map_err(|e| {
            Error::io("cannot duplicate the sandbox's descriptor", e.into()).at(self.path())
        })
    }

    /// The lease record written at creation.
    pub fn record(&self) -> LeaseRecord {
        let state = self.inner.lock();
        match &state.lease {
            Some(lease) => lease.record().clone(),
            // Finished: the record is gone with the lease; rebuild what we can.
            None => LeaseRecord::for_current_process(""),
        }
    }

    /// Registers `action` to run before the directory is removed.
    ///
    /// Actions run last registered first, on drop, [`close`](Self::close),
    /// [`keep`](Self::keep) and (for process-lifetime sandboxes) at exit. A
    /// panicking action is skipped; the others still run. An action
    /// registered after the sandbox was finished runs at once.
    ///
    /// ```
    /// # let sandbox = sandkeeper::Sandbox::new()?;
    /// sandbox.defer(|| println!("unmount, stop the VM, ..."));
    /// # Ok::<(), sandkeeper::Error>(())
    /// ```
    pub fn defer(&self, action: impl FnOnce() + Send + 'static) {
        self.push(Action::Deferred(Box::new(action)));
    }

    /// Spawns `command` and registers it for teardown: before the directory
    /// is removed, the child gets SIGTERM, then SIGKILL after the kill grace
    /// ([`Builder::kill_grace`], default 5 s), and is waited for. Returns
    /// the child's pid.
    ///
    /// The child dies with this process, however it dies (SIGKILL and OOM
    /// kills included, where no teardown runs): on Linux and FreeBSD the
    /// kernel sends it SIGKILL when its launcher is gone, so whatever it
    /// held of the sandbox is freed and the next reap takes the directory.
    /// Its own children (what a VM starts) are not covered: they are
    /// reparented, not signalled; a program that starts some should set
    /// the same for them, or be made the leader of its process group and
    /// stop it. Use [`spawn_outliving`](Self::spawn_outliving) for a child
    /// that must outlive the launcher. (macOS and Windows offer nothing of
    /// the kind: there only the teardown stops the child.)
    ///
    /// The command's working directory and environment are left as the
    /// caller set them.
    ///
    /// ```
    /// # let sandbox = sandkeeper::Sandbox::new()?;
    /// let pid = sandbox.spawn(std::process::Command::new("sleep").arg("600"))?;
    /// sandbox.close()?; // `sleep` is dead before the directory goes
    /// # let _ = pid;
    /// # Ok::<(), sandkeeper::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When the command cannot be started.
    pub fn spawn(&self, command: &mut Command) -> Result<u32> {
        self.spawn_registered(command, spawn::spawn_tied)
    }

    /// As [`spawn`](Self::spawn), but the child is not killed when this
    /// process dies: for a child meant to outlive its launcher (a VM
    /// handed over to another supervisor, a server a test leaves for the
    /// next). The teardown still stops it when the sandbox is finished
    /// normally; after a crash it runs on, and if it holds the lease
    /// ([`Sandbox::share_lease_with_children`]) the directory stays live
    /// for as long as it does.
    ///
    /// ```
    /// # let sandbox = sandkeeper::Sandbox::new()?;
    /// let pid = sandbox.spawn_outliving(std::process::Command::new("sleep").arg("600"))?;
    /// sandbox.close()?; // stopped by the teardown all the same
    /// # let _ = pid;
    /// # Ok::<(), sandkeeper::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When the command cannot be started.
    pub fn spawn_outliving(&self, command: &mut Command) -> Result<u32> {
        self.spawn_registered(command, Command::spawn)
    }

    fn spawn_registered(
        &self,
        command: &mut Command,
        start: impl FnOnce(&mut Command) -> std::io::Result<std::process::Child>,
    ) -> Result<u32> {
        let child = start(command).map_err(|e| {
            Error::io(
                format!("cannot spawn {:?} for sandbox", command.get_program()),
                e,
            )
            .at(self.path())
        })?;
        let pid = child.id();
        self.push(Action::Child(child));
        Ok(pid)
    }

    fn push(&self, action: Action) {
        let mut state = self.inner.lock();
        if state.finished {
            drop(state);
            teardown::run_stack(vec![action], self.inner.kill_grace);
        } else {
            state.teardown.push(action);
        }
    }

    /// Runs the teardown actions and removes the directory, returning what
    /// went wrong instead of ignoring it as `Drop` does.
    ///
    /// With `SANDKEEPER_KEEP=always` the directory is kept, and with
    /// `on-failure` when the sandbox was [marked failed](Self::mark_failed)
    /// (see [`KeepPolicy`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Removal`] when the directory could not be removed
    /// completely (its source says what was left and why: `left mnt: mount
    /// point (not descended)`), or an io error when it could not be
    /// reached. What is left stays under its name *with its lease record*,
    /// so once the lease is released it is an `orphaned` sandbox that any
    /// reaper removes when nothing blocks it any more. A drop that fails
    /// so says it once on stderr (`sandkeeper: sandbox could not be
    /// removed completely: …`).
    pub fn close(self) -> Result<()> {
        self.inner.finish(false)
    }

    /// Runs the teardown actions, then keeps the directory and stops
    /// managing it: the lease record is deleted and the lock released, so
    /// the directory becomes an ordinary, unmanaged one that no reaper takes
    /// without an explicit rule. Returns its path.
    #[must_use = "the kept directory is no longer removed; use its path"]
    pub fn keep(self) -> PathBuf {
        let inner = &self.inner;
        let _finishing = open::Finishing::begin();
        if let Some((mut lease, actions)) = inner.take_for_finish() {
            teardown::run_stack(actions, inner.kill_grace);
            let _ = lease.forget_record();
        }
        inner.path.clone()
    }
}

/// Failures that are not panics: a test that returns `Err`.
impl Sandbox {
    /// Marks the work done in this sandbox as failed, so that
    /// `SANDKEEPER_KEEP=on-failure` (or [`KeepPolicy::OnFailure`]) keeps it
    /// when it is finished — dropped, [`close`](Self::close)d, or at exit —
    /// as it does for a sandbox dropped during a panic. Under `never` and
    /// `always` it changes nothing.
    ///
    /// A test that returns `Err` does not panic, so nothing else tells the
    /// sandbox it failed; [`check`](Self::check) and [`scope`](Self::scope)
    /// call this for an `Err`.
    pub fn mark_failed(&self) {
        self.inner.failed.store(true, Ordering::Relaxed);
    }

    /// Whether [`mark_failed`](Self::mark_failed) was called.
    pub fn is_marked_failed(&self) -> bool {
        self.inner.failed.load(Ordering::Relaxed)
    }

    /// Returns `result` unchanged, [marking the sandbox
    /// failed](Self::mark_failed) when it is an `Err`: the last expression
    /// of a `-> Result` test, so that `SANDKEEPER_KEEP=on-failure` keeps
    /// its sandbox when it fails.
    ///
    /// ```
    /// use sandkeeper::sandbox;
    ///
    /// fn body(dir: &std::path::Path) -> std::io::Result<()> {
    ///     std::fs::write(dir.join("input.txt"), "hello")?;
    ///     std::fs::read_to_string(dir.join("missing")).map(drop) // fails
    /// }
    ///
    /// let sb = sandbox!()?;
    /// let result = sb.check(body(sb.path()));
    /// assert!(result.is_err() && sb.is_marked_failed());
    /// # Ok::<(), sandkeeper::Error>(())
    /// ```
    pub fn check<T, E>(&self, result: std::result::Result<T, E>) -> std::result::Result<T, E> {
        if result.is_err() {
            self.mark_failed();
        }
        result
    }

    /// Runs `test` with the sandbox, then finishes the sandbox (as a drop
    /// does) and returns what `test` returned. When `test` returns `Err`
    /// the sandbox is [marked failed](Self::mark_failed) first, so
    /// `SANDKEEPER_KEEP=on-failure` keeps it; a panic in `test` keeps it
    /// as any panic does. The body of a `-> Result` test, `?` and all:
    ///
    /// ```
    /// use sandkeeper::sandbox;
    ///
    /// // #[test]
    /// fn writes_its_input() -> Result<(), Box<dyn std::error::Error>> {
    ///     sandbox!()?.scope(|sb| {
    ///         std::fs::write(sb.path().join("input.txt"), "hello")?;
    ///         assert_eq!(std::fs::read_to_string(sb.path().join("input.txt"))?, "hello");
    ///         Ok(())
    ///     })
    /// }
    /// # writes_its_input().unwrap();
    /// ```
    pub fn scope<T, E>(
        self,
        test: impl FnOnce(&Sandbox) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let result = test(&self);
        self.check(result)
    }
}

impl Sandbox {
    /// Runs the teardown actions, then keeps the directory *managed*: its
    /// record gets `keep_until_ms = now + keep_for` and the lease is
    /// released, so reapers leave it alone until then and take it after.
    /// Returns its path. (Compare [`keep`](Self::keep), which stops managing
    /// it for good.)
    ///
    /// ```
    /// # let sandbox = sandkeeper::Sandbox::new()?;
    /// let path = sandbox.persist_for(std::time::Duration::from_secs(3600))?;
    /// assert!(path.is_dir());
    /// # std::fs::remove_dir_all(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When the record cannot be rewritten; the directory is kept anyway.
    pub fn persist_for(self, keep_for: Duration) -> Result<PathBuf> {
        let inner = &self.inner;
        let _finishing = open::Finishing::begin();
        if let Some((lease, actions)) = inner.take_for_finish() {
            teardown::run_stack(actions, inner.kill_grace);
            mark_kept(
                lease,
                crate::clock::now_ms().saturating_add(keep_for.as_millis() as u64),
            )?;
        }
        Ok(inner.path.clone())
    }

    /// Lets processes this one starts inherit the locked lease descriptor
    /// (it is close-on-exec otherwise), so the sandbox stays live as long as
    /// any of them runs, even if this process dies first.
    ///
    /// ```
    /// # let sandbox = sandkeeper::Sandbox::new()?;
    /// sandbox.share_lease_with_children()?;
    /// # Ok::<(), sandkeeper::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// When the sandbox is already finished, or `fcntl` fails.
    #[cfg(unix)]
    pub fn share_lease_with_children(&self) -> Result<()> {
        let state = self.inner.lock();
        let lease = state.lease.as_ref().ok_or_else(|| {
            Error::new(ErrorKind::InvalidInput, "the sandbox is already finished").at(self.path())
        })?;
        lease.inherit_into_children()?;
        Ok(())
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave State inconsistent:
        // every update is a single assignment or push.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the sandbox finished and hands out what finishing needs;
    /// `None` if it was already finished.
    fn take_for_finish(&self) -> Option<(Lease, Vec<Action>)> {
        let mut state = self.lock();
        if state.finished {
            return None;
        }
        state.finished = true;
        let actions = std::mem::take(&mut state.teardown);
        state.lease.take().map(|lease| (lease, actions))
    }

    /// Teardown, then keep or remove.
    fn finish(&self, panicking: bool) -> Result<()> {
        let _finishing = open::Finishing::begin();
        let Some((mut lease, actions)) = self.take_for_finish() else {
            return Ok(());
        };
        teardown::run_stack(actions, self.kill_grace);
        if self
            .keep
            .keeps(panicking || self.failed.load(Ordering::Relaxed))
        {
            self.keep_for_debugging(lease);
            return Ok(());
        }
        // Remove while still holding the lease, so no reaper or creator can
        // claim the directory halfway.
        let result = self.remove(&mut lease);
        drop(lease);
        if self.in_user_root {
            // Leave no empty per-user root behind; another process that
            // creates in it concurrently recreates it.
            // (rmdir by name: it removes only an empty directory.)
            #[allow(clippy::disallowed_methods)]
            let _ = std::fs::remove_dir(&self.parent);
        }
        result
    }

    /// Removes the directory, the lease still held. What cannot be removed
    /// (a mount inside, an immutable file) stays under the sandbox's name
    /// (the removal works in place); it gets its lease record back before
    /// the lease is released, so it stays a managed sandbox: `orphaned`,
    /// which any reaper takes once nothing blocks it, never an unmanaged
    /// leftover.
    fn remove(&self, lease: &mut Lease) -> Result<()> {
        let parent = lease::open_root_dir(&self.parent)?;
        // (Windows: the record's handle is the lease, and no directory
        // with an open file in it can be removed.)
        lease.release_record();
        let left = remove_in(
            lease::root_ref(&parent),
            &self.name,
            self.identity,
            Path::new(&self.name),
        )
        .map_err(|e| Error::io("cannot remove sandbox", e).at(&self.path))?;
        if left.is_empty() {
            return Ok(());
        }
        let record_kept = lease.update_record(lease.record().clone()).is_ok();
        Err(incomplete(&self.path, &left, record_kept))
    }

    /// Marks the record with `keep_until_ms` and says where the directory
    /// is. The one place the library prints: a kept sandbox nobody hears of
    /// is a leak, and the caller (a test that just panicked) cannot print it.
    fn keep_for_debugging(&self, lease: Lease) {
        let now = crate::clock::now_ms();
        let until = now.saturating_add(self.keep_for.as_millis() as u64);
        let _ = mark_kept(lease, until);
        #[allow(clippy::print_stderr)]
        {
            // The words `ls` and `explain` use for it.
            eprintln!(
                "sandkeeper: kept sandbox {} ({}={}): {}; reapers may remove it after that",
                self.path.display(),
                KEEP_ENV,
                self.keep,
                crate::human::kept_until(until, Some(now))
            );
        }
    }
}

/// Writes `keep_until_ms = until` into the record, then releases the lease
/// (by dropping it).
fn mark_kept(mut lease: Lease, until: u64) -> Result<()> {
    let mut record = lease.record().clone();
    record.keep_until_ms = Some(until);
    lease.update_record(record)
}

/// The error of a removal that left something: what was left and why
/// (the first three entries), and what becomes of the rest.
fn incomplete(path: &Path, left: &Leftovers, record_kept: bool) -> Error {
    let mounted = std::io::Error::other("mount point");
    let reasons = left
        .mounts
        .iter()
        .map(|p| (p, &mounted))
        .chain(left.failures.iter().map(|(p, e)| (p, e)));
    let count = left.mounts.len() + left.failures.len();
    let mut said: Vec<String> = reasons
        .take(3)
        .map(|(p, reason)| {
            // Paths start with the sandbox's own name: show them inside it.
            let inside: PathBuf = p.components().skip(1).collect();
            if inside.as_os_str().is_empty() {
                reason.to_string()
            } else {
                let name = crate::error::Escaped(inside.as_os_str().as_encoded_bytes());
                format!("{name}: {reason}")
            }
        })
        .collect();
    if count > 3 {
        said.push(format!("{} more", count - 3));
    }
    let left = said;
    let hint = if record_kept {
        "it keeps its lease record: once what blocked the removal is gone (unmount a mount \
         inside), `sandkeeper reap` of its root removes it as an orphaned sandbox"
    } else {
        "what is left is not a managed sandbox any more; remove it by hand, or with a \
         `sandkeeper reap --match` rule, once what blocked the removal is gone"
    };
    Error::new(
        ErrorKind::Removal,
        "sandbox could not be removed completely",
    )
    .at(path)
    .with_source(std::io::Error::other(format!("left {}", left.join("; "))))
    .with_hint(hint)
}

impl Drop for Sandbox {
    /// Tears down and removes the sandbox (see [`Sandbox::close`]). A
    /// removal that fails is said once on stderr, with why: the caller of
    /// a drop cannot hear of it otherwise, and a leftover nobody hears of
    /// is a leak.
    fn drop(&mut self) {
        self.inner.finish_and_say_if(std::thread::panicking());
    }
}

impl Inner {
    /// Finishes, saying on stderr what could not be removed.
    fn finish_and_say_if(&self, panicking: bool) {
        if let Err(e) = self.finish(panicking) {
            #[allow(clippy::print_stderr)]
            {
                let hint = e.hint().map(|h| format!(" ({h})")).unwrap_or_default();
                eprintln!("sandkeeper: {e}{hint}");
            }
        }
    }
}

impl AsRef<Path> for Sandbox {
    fn as_ref(&self) -> &Path {
        self.path()
    }
}

/// A sandbox stands wherever a `&Path` is wanted: `&sandbox` coerces to
/// `&Path`, and `Path`'s methods (`join`, `exists`, `display`) work on it
/// directly. A test helper that returned a `PathBuf` can return a
/// `Sandbox` and its callers' `&dir`, `dir.join(…)` and `fn f(p: &Path)`
/// calls keep compiling; what changes is that the directory goes when
/// the value is dropped. (A `Sandbox` is a handle to one directory, as a
/// `PathBuf` is to a path: nothing of `Path` is shadowed by its own
/// methods.)
///
/// ```
/// use std::path::Path;
/// fn count(dir: &Path) -> usize { std::fs::read_dir(dir).unwrap().count() }
///
/// let dir = sandkeeper::Sandbox::new()?;
/// std::fs::write(dir.join("a"), "1")?;
/// assert!(dir.join("a").exists());
/// assert_eq!(count(&dir), 2); // `a` and the lease record
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl std::ops::Deref for Sandbox {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.path()
    }
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("path", &self.inner.path)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_is_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Sandbox>();
        check::<Builder>();
    }
}
