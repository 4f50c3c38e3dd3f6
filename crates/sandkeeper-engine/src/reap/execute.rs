//! Carrying out a reap's decisions in one root: claim, move into the
//! quarantine, check, and at once put back or condemn; delete on a pool of
//! workers; and first, what killed reapers left in the quarantine.
//!
//! # Away from their names only while they are checked
//!
//! A group's entries are claimed and moved one after another (cheap: a
//! lock, a rename, a `statx`). A directory is moved through its claim's
//! own descriptor (the one that took the lock): the remover does not open
//! its name a second time, and checks that descriptor as it checks what
//! it opens itself (a directory on the root's mount, the scanned inode),
//! then that what arrived in the quarantine is that inode; a name swapped
//! since the claim is put back, never removed. The descriptor, and so the
//! lock, stays with the moved entry until it is removed or put back.
//!
//! The calling thread then checks the group ([`Guard`]): against a pass
//! taken after the moves; or, as root, against the pass taken before them
//! (a pass serves groups for [`PASS_FRESH`], or four times what it cost),
//! what fanotify saw other processes open or change on the root's
//! filesystem since that pass began (`touches`), and every thread's
//! working and root directory re-read after the moves (`inuse::cwds`).
//! Each entry gets its verdict as soon as the group is checked: held, it
//! goes back to its name (by an exchange if the name was taken); free, it
//! is renamed to its condemned name and handed to the pool. So an entry
//! is away from its name for its group's moves and checks only, which the
//! group's size keeps near 15 ms ([`super::Batches::after_group`]), not
//! for a pass (200 ms beside a thousand processes) nor for the deletion of
//! the entries before it.
//!
//! One pool of worker threads (one per core, at most 8, niced by
//! [`WORKER_NICE`]) is started for the root and kept for all its groups:
//! the workers delete the condemned entries, largest first, while the
//! calling thread claims, moves and checks the next group, then records
//! the group before in its order (woken once when the workers are done
//! with it, not per entry). So at most two groups are in flight, each
//! entry holding one descriptor (its claim's), and a listing waiting for
//! its deletion its directories' (at most an eighth of the descriptor
//! limit a group). A small entry is deleted on its worker alone; a large
//! one may use the remover's own helper threads. When `/proc` cannot be
//! read for a group, that group is put back (`unknown`), the group before
//! it still finishes and is recorded, and the reap of the root fails.
//!
//! With a [stop flag](super::PolicyBuilder::stop_flag) (`watch` sets one),
//! each worker looks, before it starts on an entry, at the stop flag:
//! after a stop **no new removal starts; the ones already under way
//! finish** (at most one per worker), the condemned entries not started go
//! back to their names, told as stopped (as do those of a group moved
//! while the stop came: they are not checked), and no further entry is
//! claimed. With a free-space target the pool has **one** worker and no
//! pipeline: each group is done before the next is claimed. The worker
//! takes the entries in the group's order (the policy's: the oldest
//! first) and re-measures the free space after each removal (counting the
//! group's quarantine, freed right after; the entry's directory was freed
//! with the removal, which had its claim's descriptor): once the target is
//! met no further removal starts, so exactly as many go as needed, and the
//! rest go back. Its groups grow 1, 2, 4, 8 (see the [reaper's
//! docs](super)), so few entries are moved only to be put back.
//!
//! # Small entries: one listing that checks, then deletes
//!
//! The check must see the whole entry before its first unlink: a held
//! file deep inside keeps every other file of the entry too. For an entry
//! below [`SMALL`] files and directories and [`SMALL_DIRS`] directories
//! (as scanned), the calling thread lists the entry once, in the quarantine,
//! into memory (`remove::Quarantined::list`): every name, each
//! directory opened as the remover opens it (`openat2` beneath its
//! parent's descriptor, no link, no mount crossed) and held open, each
//! other inode `statx`ed by name. Every inode is shown to the same check
//! as the check walk's (holders, kernel users, mount points, and the
//! write-lease probe when some processes were not read); the listing
//! stops at the first one held, and nothing is unlinked. Only when all of
//! it was listed and nothing found is it condemned, and a worker deletes
//! it from the listing: every listed directory checked (parents first)
//! to still be that inode under its name in its parent, then each
//! directory's files unlinked through its own descriptor, the directories
//! removed children first. Whatever does not go as listed — `ENOTEMPTY`
//! (something was added since the listing: only a process that already
//! had a descriptor or working directory inside could, and the check
//! looked for those), a directory swapped or moved, any error — hands what
//! is there now to the remover's own deletion, which lists it afresh:
//! exactly what became of something added between the check walk and the
//! deletion before. An entry that cannot be listed exactly (it grew past
//! twice the bound, an error, a name that changed kind, no descriptor
//! left) goes the two-walk way below. The memory is bounded by the bound
//! (the names and under 80 bytes per inode), the descriptors by
//! [`SMALL_DIRS`] per listing, fewer when the listings of the workers and
//! the calling thread would exceed a quarter of the soft `RLIMIT_NOFILE`,
//! and those waiting for a worker by an eighth of it a group.
//!
//! # Larger entries: the check and the deletion are two walks
//!
//! A walk that recorded a large tree for the deletion to replay would
//! cost memory in the size of the tree (the walks are bounded by its
//! depth), so a larger entry is walked twice, once to check
//! (`walk::Walker`, against the same index) and once to delete (the
//! remover: its confinement comes from its own descriptor-relative steps,
//! and it lists every directory again, so what was added since the check
//! is found by listing; `rmdir` fails on it). The entries are walked in
//! parallel.
//!
//! # One `/proc/locks` per group
//!
//! When some processes' holdings were not read (uninspectable, or vouched
//! for), every regular file is asked whether it is open elsewhere
//! (`inuse::open_elsewhere`), which needs `/proc/locks` (a file with a
//! lock or lease on it is answered "open" without being opened, so no
//! holder's lease is broken). It is read once per group, after the
//! group's moves, not once per entry; when it cannot be read, every entry
//! of the group is kept, saying why.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::events::Recorder;
use super::flat::Decisions;
use super::touches::Touches;
use super::{removed, skipped, KeepReason, ReapError, ReapReason, Reaper, Skipped, Target};
use crate::error::{Error, Result};
use crate::inuse::{cwds, InUse};
use crate::lease::{self, Claim, Locks, Probe};
use crate::remove::{self, LeftBy, Quarantined, RemovalReport, RemoveOptions, Restore};
use crate::scan::{self, Entry, EntryState};
use crate::walk::{self, FileKind, WalkState};
use rustix::fs::FileType;

/// The most worker threads a root's pool starts (as the remover's own
/// automatic choice: unlinking contends on filesystem locks).
const POOL_MAX: usize = 8;

/// How much nicer than the calling thread the workers are (they inherit
/// its priority, then add this; a failure leaves them as they are).
const WORKER_NICE: i32 = 5;

/// Entries with at least this many files and directories (as scanned) may
/// use the remover's helper threads besides their worker; smaller ones
/// are deleted on their worker alone.
const LARGE: u64 = 512;

/// Entries with fewer files and directories than this (as scanned) are
/// checked and deleted in one walk (`remove::Quarantined::list`); the listing
/// itself stops at twice as many, handing the entry back to the two
/// walks (it grew since the scan).
const SMALL: u64 = 4096;

/// Directories such a listing holds open at most (each until it is
/// deleted); an entry with more is checked and deleted by the two walks.
/// Lower when the descriptor limit is low: the pool's workers together
/// hold at most a quarter of it ([`small_dirs`]).
const SMALL_DIRS: u64 = 128;

/// [`SMALL_DIRS`], or less, so that `workers` listings together hold at
/// most a quarter of the soft `RLIMIT_NOFILE` (1024 by default for a
/// service: 8 workers then list up to 32 directories each). Besides them,
/// the entries in flight hold one descriptor each (their claim's, which
/// the move and the removal use): at most two batches' worth.
fn small_dirs(workers: usize) -> u64 {
    (soft_nofile() / 4 / workers.max(1) as u64).min(SMALL_DIRS)
}

/// The soft `RLIMIT_NOFILE` (unlimited: `u64::MAX`), which the reap's
/// descriptors in flight are kept within ([`small_dirs`],
/// [`most_per_batch`](super::most_per_batch)).
pub(super) fn soft_nofile() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// An entry of a batch that is in the quarantine. A directory's claim
/// went with it: its locked descriptor is the handle's (the lock is let go
/// when the entry is removed or put back).
struct Moved<'d> {
    entry: Entry,
    reason: ReapReason,
    q: Quarantined<'d>,
}

/// A checked entry nothing holds, renamed to its condemned name: only its
/// deletion is left (or, when a stop or the target comes first, its way
/// back to its name).
enum Doomed<'d> {
    /// Listed whole by its check: deleted from the listing.
    Listed(remove::Listing<'d>),
    /// Checked by a walk: deleted by the remover's own.
    Walked(Quarantined<'d>),
}

impl<'d> Doomed<'d> {
    fn condemn(&mut self) -> Result<()> {
        match self {
            Doomed::Listed(l) => l.condemn(),
            Doomed::Walked(q) => q.condemn(),
        }
    }

    fn delete(self) -> Result<RemovalReport> {
        match self {
            Doomed::Listed(l) => l.remove(),
            Doomed::Walked(q) => q.remove(),
        }
    }

    fn into_quarantined(self) -> Quarantined<'d> {
        match self {
            Doomed::Listed(l) => l.into_quarantined(),
            Doomed::Walked(q) => q,
        }
    }
}

/// What a check decided for a moved entry.
enum Checked<'d> {
    /// Something holds it, or the check cannot tell: why.
    Held(String, Quarantined<'d>),
    /// Nothing holds it.
    Clear(Doomed<'d>),
}

/// What became of an entry of a batch.
enum Outcome {
    /// Checked, found unused, and deleted (or what deleting it left).
    Removed(Result<RemovalReport>),
    /// Kept: put back (or left pending), and why.
    Kept(Skipped),
    /// Could not be marked condemned after its check: left pending.
    Failed(ReapError),
}

/// A record of a batch's claims and moves, told only once the batch
/// before it is recorded (so the records stay in the batches' order).
enum Note {
    Kept(Skipped),
    Failed(ReapError),
}

fn tell(notes: Vec<Note>, result: &mut Recorder<'_>) {
    for note in notes {
        match note {
            Note::Kept(s) => result.kept(s),
            Note::Failed(e) => result.failed(e),
        }
    }
}

/// A condemned entry for the pool: which batch, where in it.
struct Task<'d> {
    batch: usize,
    at: usize,
    entry: Entry,
    reason: ReapReason,
    doomed: Doomed<'d>,
}

/// What a worker did with a [`Task`].
struct Done {
    batch: usize,
    at: usize,
    entry: Entry,
    reason: ReapReason,
    outcome: Outcome,
}

/// The pool's tasks, batch after batch; closed when the root is done (or
/// its reap ends early): a worker then starts nothing more.
struct Queue<'d> {
    state: Mutex<(VecDeque<Task<'d>>, bool)>,
    ready: Condvar,
}

impl<'d> Queue<'d> {
    fn new() -> Queue<'d> {
        Queue {
            state: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        }
    }

    fn push(&self, tasks: Vec<Task<'d>>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .extend(tasks);
        self.ready.notify_all();
    }

    /// The next task, waiting for one while the queue is open; `None` once
    /// it is closed (what is left in it then stays condemned in the
    /// quarantine, which any later remover finishes).
    fn next(&self) -> Option<Task<'d>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if state.1 {
                return None;
            }
            if let Some(task) = state.0.pop_front() {
                return Some(task);
            }
            state = self
                .ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The next task, if there is one now.
    fn try_next(&self) -> Option<Task<'d>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.1 {
            true => None,
            false => state.0.pop_front(),
        }
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        self.ready.notify_all();
    }
}

/// Closes the queue when dropped: the calling thread's, on every way out
/// of a root's reap (an error, a panic in the caller's `on_event`), so no
/// worker waits for tasks that will not come.
struct CloseOnDrop<'q, 'd>(&'q Queue<'d>);

impl Drop for CloseOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Where the workers leave what they did. The calling thread is woken
/// when a batch is complete (or no worker is left), not for every entry:
/// each wake-up would take a core from a worker for a moment.
struct Outbox {
    state: Mutex<Outgoing>,
    ready: Condvar,
}

struct Outgoing {
    done: Vec<Done>,
    /// Batches with tasks not done yet, and how many (at most two).
    open: Vec<(usize, usize)>,
    /// Workers that have not left.
    serving: usize,
}

impl Outbox {
    fn new() -> Outbox {
        Outbox {
            state: Mutex::new(Outgoing {
                done: Vec::new(),
                open: Vec::new(),
                serving: 0,
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outgoing> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A worker's outcome; wakes the calling thread if it completes its
    /// batch.
    fn deliver(&self, done: Done) {
        let mut state = self.lock();
        let batch = done.batch;
        state.done.push(done);
        if let Some(at) = state.open.iter().position(|&(b, _)| b == batch) {
            state.open[at].1 -= 1;
            if state.open[at].1 == 0 {
                state.open.remove(at);
                self.ready.notify_all();
            }
        }
    }
}

/// A worker's leaving (at the end, or when it panics: then the queue is
/// closed, so the other workers stop too), told to the calling thread.
struct Leaving<'q, 'd>(&'q Queue<'d>, &'q Outbox);

impl Drop for Leaving<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.close();
        }
        self.1.lock().serving -= 1;
        self.1.ready.notify_all();
    }
}

/// What a root's workers share: where they work, the free-space target
/// (then there is one worker) and whether it is met.
struct Work<'s> {
    reaper: &'s Reaper,
    dir: BorrowedFd<'s>,
    path: &'s Path,
    target: Option<Target>,
    /// Set by the worker whose removal met the target; looked at before
    /// every entry is started.
    met: AtomicBool,
    small_dirs: u64,
}

impl Work<'_> {
    /// A worker: takes tasks until the queue is closed.
    fn serve(&self, queue: &Queue<'_>, outbox: &Outbox) {
        let _leaving = Leaving(queue, outbox);
        // Deleting is throughput; the calling thread's checks are the time
        // entries are away from their names: on a busy host they go first.
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), WORKER_NICE);
        while let Some(task) = queue.next() {
            outbox.deliver(self.carry_out(task));
        }
    }

    /// Deletes a condemned entry; unless a stop was asked for, or the
    /// target met, before it was started: after that no new removal
    /// starts (the ones under way on other workers finish), and it goes
    /// back to its name.
    fn carry_out(&self, task: Task<'_>) -> Done {
        let Task {
            batch,
            at,
            entry,
            reason,
            doomed,
        } = task;
        let outcome = match self.reaper.halted(self.met.load(Ordering::Acquire)) {
            Some(why) => Outcome::Kept(put_back(self.path, &entry, doomed.into_quarantined(), why)),
            None => {
                let ours = self.target.map(|_| match &doomed {
                    Doomed::Listed(l) => own_quarantine(self.dir, l.quarantined()),
                    Doomed::Walked(q) => own_quarantine(self.dir, q),
                });
                let removal = doomed.delete();
                if let Some(t) = self.target {
                    // The entry's directory was held open by its claim's
                    // descriptor, which the removal had and closed: its
                    // inode is freed. Unlinked-but-open files free
                    // nothing: measured, not counted. The quarantine
                    // itself goes when the batch is done.
                    let free = scan::filesystem::free(self.dir)
                        .map(|free| free.plus(ours.unwrap_or_default()));
                    if free.is_ok_and(|free| t.met(free)) {
                        self.met.store(true, Ordering::Release);
                    }
                }
                Outcome::Removed(removal)
            }
        };
        Done {
            batch,
            at,
            entry,
            reason,
            outcome,
        }
    }
}

/// A batch whose condemned entries were handed to the pool, its slots
/// filled as its outcomes come back (those kept by the check at once).
struct Fed {
    batch: usize,
    slots: Vec<Option<Done>>,
}

impl Fed {
    fn complete(&self) -> bool {
        self.slots.iter().all(Option::is_some)
    }
}

/// Puts an outcome in its batch's slot: `fed`'s, or `later`'s (the batch
/// fed after it).
fn place(fed: &mut Fed, later: &mut Option<&mut Fed>, done: Done) {
    let slots = match later {
        Some(l) if l.batch == done.batch => &mut l.slots,
        _ => &mut fed.slots,
    };
    let at = done.at;
    slots[at] = Some(done);
}

/// The calling thread's side of the pool.
struct Lane<'q, 'd> {
    queue: &'q Queue<'d>,
    outbox: &'q Outbox,
    /// No worker could be started: this thread carries out every task
    /// itself.
    alone: bool,
}

impl<'d> Lane<'_, 'd> {
    /// Whether every worker has left before the end (one panicked: the
    /// panic is passed on when the root's reap ends): nothing more is
    /// claimed or moved then.
    fn broken(&self) -> bool {
        !self.alone && self.outbox.lock().serving == 0
    }

    /// Hands a batch's condemned entries to the workers (largest first,
    /// so that no worker is left with a large one at the end while the
    /// others idle; in the batch's order with a target: the oldest
    /// first); `slots` holds the outcomes already known.
    fn feed(
        &self,
        batch: usize,
        slots: Vec<Option<Done>>,
        mut tasks: Vec<Task<'d>>,
        ordered: bool,
    ) -> Fed {
        if !ordered {
            tasks.sort_by_key(|t| Reverse(t.entry.files.saturating_add(t.entry.dirs)));
        }
        if !self.alone && !tasks.is_empty() {
            self.outbox.lock().open.push((batch, tasks.len()));
        }
        self.queue.push(tasks);
        Fed { batch, slots }
    }

    /// Waits until the workers are done with `fed`, then records every
    /// outcome in its batch's order; outcomes of `later`, the batch fed
    /// after it, that came back meanwhile wait in its slots.
    fn finish(
        &self,
        work: &Work<'_>,
        mut fed: Fed,
        mut later: Option<&mut Fed>,
        result: &mut Recorder<'_>,
    ) {
        if self.alone {
            while !fed.complete() {
                let Some(task) = self.queue.try_next() else {
                    break;
                };
                place(&mut fed, &mut later, work.carry_out(task));
            }
        } else {
            let mut state = self.outbox.lock();
            loop {
                for done in std::mem::take(&mut state.done) {
                    place(&mut fed, &mut later, done);
                }
                if fed.complete() || state.serving == 0 {
                    break;
                }
                state = self
                    .outbox
                    .ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
        // Only when a worker panicked (the panic is passed on by the
        // scope) could a slot stay empty; what its task held stays
        // condemned in the quarantine, which any later remover finishes.
        for done in fed.slots.into_iter().flatten() {
            record(work.path, done, result);
        }
    }
}

/// How a group's moved entries are known untouched since they left their
/// names: as root, by a pass taken **before** the moves and what fanotify
/// and a re-read of the working directories say of the time since (so the
/// entries are away from their names for the moves and their checks, not
/// for a pass); otherwise by a pass taken after the moves.
struct Guard<'d> {
    touches: Option<Touches<'d>>,
    /// The pass the touches count from, when it was begun, what it cost.
    pass: Option<(Arc<InUse>, Instant, Duration)>,
    proc: Option<OwnedFd>,
    dev: u64,
}

/// Why an entry is kept whose inodes another process touched while its
/// group was checked ([`Check::late_touches`]).
const TOUCHED_DURING_CHECK: &str =
    "another process opened something in it, or changed its names, during its check";

/// The least time between a group's moves and the last reading of the
/// events its verdicts stand on (see [`Reaper::give_verdicts`]).
const SETTLE: Duration = Duration::from_millis(2);

/// A pass before the moves serves groups until it is this old, or four
/// times as old as it took to take, whichever is later: the events since
/// it began are what the checks stand on, and fewer passes are what
/// keeps a reap beside a thousand processes from being mostly passes.
const PASS_FRESH: Duration = Duration::from_millis(250);

impl<'d> Guard<'d> {
    fn new(dir: BorrowedFd<'d>) -> Guard<'d> {
        let dev = rustix::fs::fstat(dir).map(|st| st.st_dev).unwrap_or(0);
        let proc = rustix::fs::open(
            "/proc",
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok();
        let touches = match proc {
            Some(_) => Touches::start(dir, dev),
            None => None,
        };
        Guard {
            touches,
            pass: None,
            proc,
            dev,
        }
    }

    fn ahead(&self) -> bool {
        self.touches.is_some()
    }

    /// Before a group's moves: a fresh pass when the one in use is stale
    /// (or the events since it began cannot vouch for anything).
    fn before_moves(&mut self, reaper: &Reaper) -> Result<()> {
        let Some(touches) = &self.touches else {
            return Ok(());
        };
        let stale = match &self.pass {
            None => true,
            Some((_, at, cost)) => {
                touches.blind().is_some() || at.elapsed() > PASS_FRESH.max(*cost * 4)
            }
        };
        if stale {
            self.pass = None;
            // Whatever is queued now happened before this pass began.
            touches.restart();
            let begun = Instant::now();
            let pass = reaper.scanner.in_use()?;
            self.pass = Some((Arc::new(pass), begun, begun.elapsed()));
        }
        Ok(())
    }

    /// After a group's moves: the check its entries get.
    fn check(&self, reaper: &Reaper) -> Result<Check<'_>> {
        if let (Some(touches), Some((pass, _, _)), Some(proc)) =
            (&self.touches, &self.pass, &self.proc)
        {
            touches.drain();
            if touches.blind().is_none() {
                let skip = |pid: u32| {
                    pass.uninspectable()
                        .iter()
                        .chain(pass.assumed())
                        .any(|u| u.pid == pid)
                };
                let cwds = cwds::working_dirs(proc.as_fd(), self.dev, &skip)
                    .map_err(|e| Error::io("cannot list /proc", e.into()).at("/proc"))?;
                let mark = touches.mark();
                return Ok(Check::new(
                    Arc::clone(pass),
                    Some(Ahead {
                        cwds,
                        touches,
                        mark,
                    }),
                ));
            }
        }
        // No events to stand on: a pass taken after the moves.
        Ok(Check::new(Arc::new(reaper.scanner.in_use()?), None))
    }
}

impl Reaper {
    /// Removes a root's `candidates` (numbers of `decisions`, in the order
    /// they go), group after group: each group is claimed and moved into
    /// the quarantine and checked on this thread (see the [module
    /// docs](self)): what is held goes back to its name at once, what
    /// nothing holds is marked condemned at once, and a pool of workers
    /// kept for the whole root deletes it while the next group is
    /// claimed. With a target, group by group, re-measuring the free space
    /// after each removal.
    ///
    /// # Errors
    ///
    /// When the root cannot be inspected or `/proc` cannot be read (that
    /// group is put back; the one before it still finishes and is
    /// recorded).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn remove_candidates<'d>(
        &'d self,
        dir: BorrowedFd<'d>,
        path: &'d Path,
        decisions: &'d Decisions<'_>,
        candidates: &[u32],
        target: Option<Target>,
        target_met: &mut bool,
        result: &mut Recorder<'_>,
    ) -> Result<()> {
        if candidates.is_empty() {
            return Ok(());
        }
        // With a target, one worker: the free space is measured after each
        // removal before the next starts, so exactly as many go as needed
        // (two workers would each start one more before either had met it).
        let workers = match target {
            Some(_) => 1,
            None => walk::cores().clamp(1, POOL_MAX).min(candidates.len()),
        };
        let work = Work {
            reaper: self,
            dir,
            path,
            target,
            met: AtomicBool::new(*target_met),
            small_dirs: small_dirs(workers + 1),
        };
        let queue = Queue::new();
        let outbox = Outbox::new();
        std::thread::scope(|scope| {
            let _close = CloseOnDrop(&queue);
            for _ in 0..workers {
                // Counted before it starts: it may leave at once.
                outbox.lock().serving += 1;
                let (work, queue, outbox) = (&work, &queue, &outbox);
                let spawned = std::thread::Builder::new()
                    .name("sandkeeper-reap".into())
                    .spawn_scoped(scope, move || work.serve(queue, outbox));
                if spawned.is_err() {
                    outbox.lock().serving -= 1;
                }
            }
            let lane = Lane {
                queue: &queue,
                outbox: &outbox,
                // No thread to be had: this one does it all.
                alone: outbox.lock().serving == 0,
            };
            let done = self.run_batches(&work, &lane, decisions, candidates, target_met, result);
            // The last two workers out of the quarantine may each have
            // left it to the other.
            remove::tidy_quarantine(dir);
            done
        })
    }

    /// The calling thread's loop of [`remove_candidates`](Self::remove_candidates):
    /// claims and moves group N+1, checks it and gives each entry its
    /// verdict, feeds the condemned ones to the workers, then records
    /// group N (which they were deleting meanwhile), then the claims of
    /// N+1 that kept or failed an entry.
    fn run_batches<'w: 'd, 'd>(
        &self,
        work: &Work<'w>,
        lane: &Lane<'_, 'd>,
        decisions: &'d Decisions<'_>,
        candidates: &[u32],
        target_met: &mut bool,
        result: &mut Recorder<'_>,
    ) -> Result<()> {
        let (dir, path) = (work.dir, work.path);
        let mut walker = walk::Walker::new();
        let mut fed: Option<Fed> = None;
        let mut guard = Guard::new(dir);
        let mut batches = super::Batches::new(candidates, work.target.is_some(), guard.ahead());
        for batch in 0.. {
            let Some(numbers) = batches.next() else {
                break;
            };
            if lane.broken() {
                break;
            }
            if let Err(e) = guard.before_moves(self) {
                if let Some(before) = fed.take() {
                    lane.finish(work, before, None, result);
                }
                return Err(e);
            }
            let (moved, mut notes) =
                match self.claim_and_move(dir, path, decisions, numbers, *target_met) {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        if let Some(before) = fed.take() {
                            lane.finish(work, before, None, result);
                        }
                        return Err(e);
                    }
                };
            let away = Instant::now();
            let mut next = None;
            let mut failed = None;
            if let Some(why) = self.halted(*target_met).filter(|_| !moved.is_empty()) {
                // Asked to stop during the moves: none of these starts.
                for m in moved {
                    notes.push(Note::Kept(put_back(path, &m.entry, m.q, why.clone())));
                }
            } else if !moved.is_empty() {
                let asked = Instant::now();
                let checked = match guard.check(self) {
                    Ok(check) => {
                        let fixed = asked.elapsed();
                        let processes = check.inuse.process_count();
                        let count = moved.len();
                        let verdicts =
                            self.give_verdicts(work, check, batch, moved, away, &mut walker);
                        Ok((verdicts, processes, fixed, count))
                    }
                    Err(e) => Err((e, moved)),
                };
                match checked {
                    Ok(((slots, tasks), processes, fixed, count)) => {
                        batches.after_group(processes, away.elapsed(), fixed, count);
                        next = Some(lane.feed(batch, slots, tasks, work.target.is_some()));
                    }
                    Err((e, moved)) => {
                        for m in moved {
                            notes.push(Note::Kept(put_back(
                                path,
                                &m.entry,
                                m.q,
                                KeepReason::Unknown,
                            )));
                        }
                        failed = Some(e);
                    }
                }
            }
            if let Some(before) = fed.take() {
                lane.finish(work, before, next.as_mut(), result);
            }
            tell(notes, result);
            if let Some(e) = failed {
                return Err(e);
            }
            let Some(t) = work.target else {
                fed = next;
                continue;
            };
            if let Some(this) = next {
                // With a target, batch by batch: this one is done before
                // the next is claimed.
                lane.finish(work, this, None, result);
                remove::tidy_quarantine(dir);
                // The pool counted the quarantine as freed; what the next
                // batch decides on is what is really free. But once a
                // removal met the target, the rest of this batch was put
                // back (told `target met`), and this reap ends: were a
                // writer to take the space again meanwhile, going on with
                // the next batch would skip those older entries for newer
                // ones ("oldest first" broken). The next reap (a watermark
                // poll) starts again from the oldest.
                let met_here = work.met.load(Ordering::Acquire);
                *target_met = met_here || scan::filesystem::free(dir).is_ok_and(|free| t.met(free));
                work.met.store(*target_met, Ordering::Release);
            }
        }
        if let Some(last) = fed.take() {
            lane.finish(work, last, None, result);
        }
        Ok(())
    }

    /// Checks a group's moved entries on this thread and gives each its
    /// verdict at once: what is held goes back to its name (its outcome in
    /// `slots`), what nothing holds is renamed to its condemned name and
    /// becomes a task for the workers. Returns the slots and the tasks.
    ///
    /// With a check that stands on events, the events that came during
    /// the checks are read once more before the verdicts: an entry one of
    /// whose inodes they name is held after all.
    fn give_verdicts<'d>(
        &self,
        work: &Work<'_>,
        check: Check<'_>,
        batch: usize,
        moved: Vec<Moved<'d>>,
        moved_at: Instant,
        walker: &mut walk::Walker,
    ) -> (Vec<Option<Done>>, Vec<Task<'d>>) {
        let path = work.path;
        let mut slots: Vec<Option<Done>> = (0..moved.len()).map(|_| None).collect();
        // Two threads check a group (this one and a helper), so that the
        // checks keep pace with the workers' deletions; each takes the
        // next entry, largest first. Without a helper (no thread to be
        // had, one core) this one checks them all.
        let mut order: Vec<(usize, Moved<'d>)> = moved.into_iter().enumerate().collect();
        order.sort_by_key(|(_, m)| Reverse(m.entry.files.saturating_add(m.entry.dirs)));
        let next = Mutex::new(order.into_iter());
        let part = |walker: &mut walk::Walker| {
            let mut inodes: Vec<(u64, u32)> = Vec::new();
            let mut out = Vec::new();
            loop {
                let taken = next.lock().unwrap_or_else(PoisonError::into_inner).next();
                let Some((at, Moved { entry, reason, q })) = taken else {
                    break;
                };
                let mut seen = |ino: u64| inodes.push((ino, at as u32));
                let checked =
                    check_entry(path, &entry, q, &check, work.small_dirs, walker, &mut seen);
                // Held: back to its name at once.
                let checked = match checked {
                    Checked::Held(what, q) => {
                        Err(put_back(path, &entry, q, KeepReason::Changed(what)))
                    }
                    Checked::Clear(doomed) => Ok(doomed),
                };
                out.push((at, entry, reason, checked));
            }
            (out, inodes)
        };
        let ((mut checked, mut inodes), helped) = std::thread::scope(|scope| {
            let helper = (walk::cores() > 1 && slots.len() > 1)
                .then(|| {
                    std::thread::Builder::new()
                        .name("sandkeeper-check".into())
                        .spawn_scoped(scope, || part(&mut walk::Walker::new()))
                        .ok()
                })
                .flatten();
            let mine = part(walker);
            let helped = helper.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            (mine, helped)
        });
        if let Some((more, more_inodes)) = helped {
            checked.extend(more);
            inodes.extend(more_inodes);
        }
        let mut clear = Vec::with_capacity(checked.len());
        for (at, entry, reason, checked) in checked {
            match checked {
                Err(kept) => slots[at] = Some(kept_done(batch, at, entry, reason, kept)),
                Ok(doomed) => clear.push((at, entry, reason, doomed)),
            }
        }
        clear.sort_by_key(|(at, ..)| *at);
        // A system call that looked the entry up before its move may still
        // be opening it: its event comes when the open is done. The last
        // look at the events is at least this long after the moves.
        if check.ahead.is_some() {
            if let Some(rest) = SETTLE.checked_sub(moved_at.elapsed()) {
                std::thread::sleep(rest);
            }
        }
        let late = check.late_touches(&mut inodes);
        drop(check);
        let mut tasks = Vec::with_capacity(clear.len());
        // The listings wait for a worker with their directories open: at
        // most an eighth of the descriptor limit for a group (two are in
        // flight); past that, a listing is given up and its entry deleted
        // by the remover's own walk (it was checked whole all the same).
        let mut held_open = 0usize;
        let budget = usize::try_from(soft_nofile() / 8).unwrap_or(usize::MAX);
        for (at, entry, reason, mut doomed) in clear {
            if let Doomed::Listed(listing) = &doomed {
                held_open += listing.descriptors();
                if held_open > budget {
                    doomed = Doomed::Walked(doomed.into_quarantined());
                }
            }
            if late.binary_search(&at).is_ok() {
                let kept = put_back(
                    path,
                    &entry,
                    doomed.into_quarantined(),
                    KeepReason::Changed(TOUCHED_DURING_CHECK.into()),
                );
                slots[at] = Some(kept_done(batch, at, entry, reason, kept));
                continue;
            }
            match doomed.condemn() {
                Ok(()) => tasks.push(Task {
                    batch,
                    at,
                    entry,
                    reason,
                    doomed,
                }),
                Err(e) => {
                    let error = ReapError {
                        path: path.join(&entry.name),
                        error: e.to_string(),
                    };
                    slots[at] = Some(Done {
                        batch,
                        at,
                        entry,
                        reason,
                        outcome: Outcome::Failed(error),
                    });
                }
            }
        }
        (slots, tasks)
    }
    /// Claims each entry of a batch (`numbers` of `decisions`) and moves it
    /// into the quarantine (the root is inspected, and its quarantine
    /// opened and checked, once for the batch; every entry's own checks
    /// stay per entry). Returns the moved entries, and the records of
    /// those kept or failed on the way, in the batch's order.
    fn claim_and_move<'d>(
        &self,
        dir: BorrowedFd<'d>,
        path: &Path,
        decisions: &'d Decisions<'_>,
        numbers: &[u32],
        target_met: bool,
    ) -> Result<(Vec<Moved<'d>>, Vec<Note>)> {
        let mut quarantine = remove::QuarantineBatch::new(dir).map_err(|e| e.at(path))?;
        let mut moved = Vec::with_capacity(numbers.len());
        let mut notes = Vec::new();
        for &i in numbers {
            let i = i as usize;
            let Some(super::Verdict::Reap(reason)) = decisions.verdict(i) else {
                continue;
            };
            // A small entry rebuilt per candidate of the batch: what the
            // claim, the move and the check after it use. Without its name
            // (past the scan's budget of names, not found again by the
            // listing that loaded the batch) it is gone.
            let (Some(entry), Some(name)) = (decisions.entry(i), decisions.name(i)) else {
                continue;
            };
            if let Some(why) = self.halted(target_met) {
                notes.push(Note::Kept(skipped(path, &entry, why)));
                continue;
            }
            let claim = match claim(dir, path, &entry) {
                Ok(claim) => claim,
                Err(Gone) => continue,
                Err(Changed(what)) => {
                    notes.push(Note::Kept(skipped(path, &entry, KeepReason::Changed(what))));
                    continue;
                }
            };
            let (dev, ino) = entry.identity;
            let mut opts = RemoveOptions::new();
            // The leftovers of killed reapers were finished at the start.
            opts.expect(dev, ino).find_leftovers(false);
            if entry.files.saturating_add(entry.dirs) < LARGE {
                // Deleted on a worker of the pool, alone.
                opts.threads(1);
            }
            // A directory is moved through its claim's descriptor (no
            // second open of its name), checked as the remover checks what
            // it opens itself, and what arrives must be that inode.
            let q = match claim {
                Some(claim) => quarantine.quarantine_claimed(name, claim.into_dir(), &opts),
                None => quarantine.quarantine_entry(name, &opts),
            };
            match q {
                Ok(q) => moved.push(Moved { entry, reason, q }),
                Err(e) if is_not_found(&e) => {}
                Err(e) => notes.push(match raced_by_owner(dir, &entry, &e) {
                    Some(what) => Note::Kept(skipped(path, &entry, KeepReason::Changed(what))),
                    None => Note::Failed(ReapError {
                        path: path.join(&entry.name),
                        error: e.to_string(),
                    }),
                }),
            }
        }
        // The moved entries hold shares of the quarantine; the last one
        // out removes it when empty.
        drop(quarantine);
        Ok((moved, notes))
    }

    /// Deals with what killed reapers left in the quarantine of `dir`:
    /// condemned entries are deleted; pending ones (moved in, never
    /// cleared) are checked against a fresh `/proc` pass, then removed if
    /// nothing holds them, else put back (or left pending when their name
    /// is taken or unknown).
    pub(super) fn finish_leftovers(
        &self,
        dir: BorrowedFd<'_>,
        root: &Path,
        out: &mut Recorder<'_>,
    ) {
        let opts = RemoveOptions::new();
        if let Ok(r) = remove::finish_quarantine(dir, &opts) {
            out.finished_leftovers(r.leftovers_removed().entries());
            for at in r.leftovers_returned() {
                out.kept(Skipped {
                    path: root.join(at),
                    pattern: std::sync::Arc::from(""),
                    state: EntryState::Unknown,
                    reason: KeepReason::Changed(
                        "moved back out of the quarantine, where an interrupted put-back \
                         left it on its way back to its name (never checked nor deleted: \
                         found in use, or the newcomer that had taken its name)"
                            .to_owned(),
                    ),
                    disk_bytes: 0,
                });
            }
        }
        let pending = match remove::pending_leftovers(dir, &opts) {
            Ok(pending) => pending,
            Err(e) => {
                out.failed(ReapError {
                    path: root.to_owned(),
                    error: format!("cannot check what an interrupted reap left: {e}"),
                });
                return;
            }
        };
        if pending.is_empty() {
            return;
        }
        let check = self
            .scanner
            .in_use()
            .map(|inuse| Check::new(Arc::new(inuse), None));
        let mut walker = walk::Walker::new();
        for q in pending {
            let here = root.join(q.path_in_parent());
            let shown = q
                .original_name()
                .map_or_else(|| here.clone(), |name| root.join(name));
            let claim = match q.is_dir() {
                true => match lease::probe_at(q.dir(), &here, q.name_in_quarantine()) {
                    Ok(Probe::Free(claim)) if claim.identity() == q.identity() => Some(claim),
                    _ => {
                        keep_leftover(
                            out,
                            root,
                            &shown,
                            q,
                            "its lock is held or it cannot be opened",
                        );
                        continue;
                    }
                },
                false => None,
            };
            let why = match &check {
                Ok(check) => check_quarantined(root, q.original_name(), &q, check, &mut walker),
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = why {
                keep_leftover(out, root, &shown, q, &why);
                drop(claim);
                continue;
            }
            let left_by = q.left_by();
            match q.remove() {
                Ok(r) if left_by == LeftBy::NotPutBack => {
                    out.rechecked_leftovers(r.removed().entries())
                }
                Ok(r) => out.finished_leftovers(r.removed().entries()),
                Err(e) => out.failed(ReapError {
                    path: here,
                    error: e.to_string(),
                }),
            }
            drop(claim);
        }
    }
}

/// Records what a worker did with an entry, putting it back if it is
/// held or was not started (which lets its claim go).
fn record(path: &Path, done: Done, result: &mut Recorder<'_>) {
    let Done {
        entry,
        reason,
        outcome,
        ..
    } = done;
    match outcome {
        Outcome::Removed(removal) => record_outcome(path, &entry, reason, removal, result),
        Outcome::Kept(kept) => result.kept(kept),
        Outcome::Failed(e) => result.failed(e),
    }
}

/// The outcome of an entry its check kept (already put back).
fn kept_done(batch: usize, at: usize, entry: Entry, reason: ReapReason, kept: Skipped) -> Done {
    Done {
        batch,
        at,
        entry,
        reason,
        outcome: Outcome::Kept(kept),
    }
}

/// What the batch's quarantine itself takes on the filesystem (one inode
/// and its blocks), freed when the batch is done; nothing when the entry
/// is its own quarantine (a full filesystem).
fn own_quarantine(dir: BorrowedFd<'_>, q: &Quarantined<'_>) -> scan::filesystem::Free {
    match (rustix::fs::fstat(q.dir()), rustix::fs::fstat(dir)) {
        (Ok(qst), Ok(parent)) if (qst.st_dev, qst.st_ino) != (parent.st_dev, parent.st_ino) => {
            scan::filesystem::Free {
                bytes: (qst.st_blocks as u64).saturating_mul(512),
                inodes: 1,
            }
        }
        _ => scan::filesystem::Free::default(),
    }
}

/// Records a removal's outcome: removed, what was left of it, or why it
/// could not be started.
fn record_outcome(
    root: &Path,
    entry: &Entry,
    reason: ReapReason,
    removal: Result<RemovalReport>,
    result: &mut Recorder<'_>,
) {
    match removal {
        Ok(removal) => record_removal(root, entry, reason, &removal, result),
        Err(e) => result.failed(ReapError {
            path: root.join(&entry.name),
            error: e.to_string(),
        }),
    }
}

/// Keeps a pending leftover of an interrupted reap: put back, or left in
/// the quarantine when its name is taken or unknown.
fn keep_leftover(out: &mut Recorder<'_>, root: &Path, shown: &Path, q: Quarantined<'_>, why: &str) {
    let left = match q.left_by() {
        LeftBy::NotPutBack => {
            "kept in the quarantine by an earlier reap (in use then, its name could not be given back)"
        }
        _ => "left in the quarantine by an interrupted reap",
    };
    let note = format!("{left}; {why}: {}", q.restore().describe(root));
    out.kept(Skipped {
        path: shown.to_owned(),
        pattern: std::sync::Arc::from(""),
        state: EntryState::Unknown,
        reason: KeepReason::Changed(note),
        disk_bytes: 0,
    });
}

/// Puts a quarantined entry back, and returns the record of why it stays.
/// If its name was taken meanwhile it stays pending in the quarantine
/// (never deleted without a fresh check), and the record says where.
fn put_back(root: &Path, entry: &Entry, q: Quarantined<'_>, why: KeepReason) -> Skipped {
    let why = match q.restore() {
        Restore::Restored => why,
        other => KeepReason::Changed(format!("{}; {}", why_text(&why), other.describe(root))),
    };
    skipped(root, entry, why)
}

fn why_text(why: &KeepReason) -> String {
    match why {
        KeepReason::Changed(what) => what.clone(),
        other => other.to_string(),
    }
}

/// Records a finished removal: removed, or what was left of it.
fn record_removal(
    root: &Path,
    entry: &Entry,
    reason: ReapReason,
    removal: &RemovalReport,
    result: &mut Recorder<'_>,
) {
    if removal.is_complete() {
        // The scan measured it (its disk usage is what was freed); the
        // remover does not re-stat.
        result.removed(removed(root, entry, reason));
        return;
    }
    let left: Vec<String> = removal
        .left()
        .iter()
        .take(5)
        .map(|l| format!("{}: {}", l.path().display(), l.reason()))
        .collect();
    result.failed(ReapError {
        path: root.join(&entry.name),
        error: format!(
            "{} could not be removed: {}",
            crate::human::plural(removal.left().len() as u64, "item", "items"),
            left.join("; ")
        ),
    });
}

/// After a failed move into the quarantine: whether the failure was a race
/// with the entry's owner, not an error. The scanned inode was claimed,
/// but its name held another one when the remover looked or moved (a
/// program removed its directory and made it again, or swapped it: the
/// remover says so, [`Error::replaced`]), or the name holds another one or
/// nothing now: what has the name was never scanned, so it is left alone
/// (a benign race, `changed`; the next reap judges it afresh). Any other
/// failure on the scanned inode is the removal's own: an error.
fn raced_by_owner(dir: BorrowedFd<'_>, entry: &Entry, err: &Error) -> Option<String> {
    const RECREATED: &str = "re-created under its name during the reap (a race with its owner); \
                             the new one is left alone";
    if err.replaced() {
        return Some(RECREATED.into());
    }
    match rustix::fs::statat(dir, &entry.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if (st.st_dev, st.st_ino) == entry.identity => None,
        Ok(_) => Some(RECREATED.into()),
        Err(rustix::io::Errno::NOENT) => Some("gone from its name during the reap".into()),
        Err(_) => None,
    }
}

fn is_not_found(e: &Error) -> bool {
    e.io_error()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Why an entry could not be claimed.
enum ClaimFailure {
    /// It vanished: someone else removed it; nothing to report.
    Gone,
    /// It became live, or is not what was scanned.
    Changed(String),
}
use ClaimFailure::{Changed, Gone};

/// Takes the entry's lock (directories) and checks it is the scanned inode.
/// Anything else (a file, socket, symlink) has no lock: its identity is
/// checked, and the move into the quarantine checks it again.
fn claim(
    dir: BorrowedFd<'_>,
    root: &Path,
    entry: &Entry,
) -> std::result::Result<Option<Claim>, ClaimFailure> {
    if entry.kind != FileKind::Dir {
        return match rustix::fs::statat(dir, &entry.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if (st.st_dev, st.st_ino) == entry.identity => Ok(None),
            Ok(_) => Err(Changed("replaced by another file".into())),
            Err(_) => Err(Gone),
        };
    }
    match lease::probe_at(dir, root, &entry.name) {
        Ok(Probe::Free(claim)) if claim.identity() == entry.identity => Ok(Some(claim)),
        Ok(Probe::Free(_)) => Err(Changed("replaced by another directory".into())),
        Ok(Probe::Live { .. }) => Err(Changed("its lock is now held".into())),
        Ok(Probe::MountPoint) => Err(Changed("a filesystem is mounted on it".into())),
        Ok(_) => Err(Changed("it can no longer be opened".into())),
        Err(e) if is_not_found(&e) => Err(Gone),
        Err(e) => Err(Changed(e.to_string())),
    }
}

/// What a group's checks share: the in-use index (taken after the group's
/// moves; or, as root, before them, with [`Ahead`] for the time since)
/// and, when some processes' holdings were not read, one reading of
/// `/proc/locks` taken after the moves (for
/// [`open_elsewhere`](crate::inuse::open_elsewhere), which answers "open"
/// for a file that has a lock or lease without opening it).
struct Check<'t> {
    inuse: Arc<InUse>,
    /// `None` when every process was read (no file is asked).
    locks: Option<std::result::Result<Locks, String>>,
    ahead: Option<Ahead<'t>>,
}

/// What stands in for a pass after the moves when the pass was taken
/// before them: every working and root directory re-read after the moves,
/// and what other processes opened or changed names in since the pass
/// began (`mark`: how many touched inodes the checks were given).
struct Ahead<'t> {
    cwds: cwds::WorkingDirs,
    touches: &'t Touches<'t>,
    mark: usize,
}

impl<'t> Check<'t> {
    fn new(inuse: Arc<InUse>, ahead: Option<Ahead<'t>>) -> Check<'t> {
        let locks = inuse
            .has_unread_processes()
            .then(|| Locks::read().map_err(|e| e.to_string()));
        Check {
            inuse,
            locks,
            ahead,
        }
    }

    /// The entries (numbers in the group, sorted) one of whose inodes
    /// (`inodes`: as the checks saw them, with their entry's number)
    /// another process touched after the checks were given the events:
    /// read now, just before the verdicts. Sorts `inodes`.
    fn late_touches(&self, inodes: &mut [(u64, u32)]) -> Vec<usize> {
        let Some(ahead) = &self.ahead else {
            return Vec::new();
        };
        // What came during the checks.
        ahead.touches.drain();
        let late = ahead.touches.since(ahead.mark);
        if late.is_empty() {
            return Vec::new();
        }
        inodes.sort_unstable();
        let mut found: Vec<usize> = late
            .iter()
            .flat_map(|&ino| {
                let from = inodes.partition_point(|&(i, _)| i < ino);
                inodes[from..]
                    .iter()
                    .take_while(move |&&(i, _)| i == ino)
                    .map(|&(_, at)| at as usize)
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// What holds the entry by path (mounts, loop devices, overlays, bound
    /// unix sockets, asked about its old path, when known, and its path in
    /// the quarantine: mounts of other mount namespaces move with it), or
    /// why it cannot be told; before any walk.
    fn by_path(
        &self,
        root: &Path,
        original: Option<&OsStr>,
        q: &Quarantined<'_>,
    ) -> Option<String> {
        if !self.inuse.is_complete() {
            return Some("some processes cannot be inspected".into());
        }
        if let Some(Err(e)) = &self.locks {
            return Some(format!("cannot read /proc/locks ({e})"));
        }
        if let Some((pid, e)) = self.ahead.as_ref().and_then(|a| a.cwds.unread()) {
            return Some(format!(
                "the working or root directory of pid {pid} cannot be read ({e})"
            ));
        }
        let paths = original
            .map(|name| root.join(name))
            .into_iter()
            .chain([root.join(q.path_in_parent())]);
        for path in paths {
            if let Some(k) = self.inuse.kernel_users_under(&path).first() {
                return Some(k.to_string());
            }
            if let Some(s) = self.inuse.socket_paths_under(&path).first() {
                return Some(format!("unix socket {}", s.display()));
            }
        }
        None
    }

    /// What holds the inode `id` (of type `kind`, the name `name` in the
    /// open directory `dir`, shown as `shown`): a process, a kernel user,
    /// a process that works there or touched it since the pass (as root),
    /// or — when some processes were not read — a regular file open
    /// elsewhere or that cannot be asked.
    fn inode(
        &self,
        id: (u64, u64),
        is_file: bool,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        shown: &dyn Fn() -> PathBuf,
    ) -> Option<String> {
        if let Some(h) = self.inuse.holders(id.0, id.1).first() {
            return Some(h.to_string());
        }
        if let Some(k) = self.inuse.kernel_users_of(id.0, id.1).next() {
            return Some(k.to_string());
        }
        if let Some(ahead) = &self.ahead {
            if ahead.cwds.holds(id) {
                return Some(format!(
                    "a process works in {} (or is rooted there)",
                    shown().display()
                ));
            }
            if ahead.touches.touched(id) {
                return Some(format!(
                    "another process opened {} (or changed names in it) during the reap",
                    shown().display()
                ));
            }
        }
        let (Some(Ok(locks)), true) = (&self.locks, is_file) else {
            return None;
        };
        match crate::inuse::open_elsewhere(dir, name, id, locks) {
            crate::inuse::OpenElsewhere::No => None,
            crate::inuse::OpenElsewhere::Yes => Some(format!(
                "{} is open in a process that could not be inspected",
                shown().display()
            )),
            crate::inuse::OpenElsewhere::CannotTell(why) => Some(format!(
                "{} cannot be asked whether it is open: {why}",
                shown().display()
            )),
        }
    }
}

/// Checks a quarantined entry against its group's check (`seen` is told
/// every inode number it looks at): a small one ([`SMALL`]) in one walk
/// that lists it and checks every inode, any other (or one that could not
/// be listed exactly) by the check walk. [`Checked::Held`] when anything
/// holds it, or the check cannot tell; nothing is removed either way.
fn check_entry<'d>(
    root: &Path,
    entry: &Entry,
    q: Quarantined<'d>,
    check: &Check<'_>,
    small_dirs: u64,
    walker: &mut walk::Walker,
    seen: &mut dyn FnMut(u64),
) -> Checked<'d> {
    if let Some(what) = check.by_path(root, Some(&entry.name), &q) {
        return Checked::Held(what, q);
    }
    let q = match entry.files.saturating_add(entry.dirs) < SMALL && entry.dirs <= small_dirs {
        false => q,
        true => {
            let limits = remove::Limits {
                inodes: 2 * SMALL as usize,
                dirs: small_dirs as usize,
            };
            let qname = PathBuf::from(q.name_in_quarantine());
            let listed = q.list(limits, &mut |s: &remove::Seen<'_>| {
                seen(s.id.1);
                let name = OsStr::from_bytes(s.name.to_bytes());
                let shown = || qname.join(s.path());
                check.inode(
                    s.id,
                    s.kind == FileType::RegularFile,
                    s.parent,
                    name,
                    &shown,
                )
            });
            match listed {
                // Every inode listed and checked, nothing found: it may be
                // deleted from the listing.
                remove::Listed::Clear(listing) => return Checked::Clear(Doomed::Listed(listing)),
                remove::Listed::Kept(what, q) => return Checked::Held(what, q),
                remove::Listed::Unlisted(q) => q,
            }
        }
    };
    match walk_check(&q, check, walker, seen) {
        Some(what) => Checked::Held(what, q),
        // The check walked all of it and found nothing.
        None => Checked::Clear(Doomed::Walked(q)),
    }
}

/// The check of a quarantined entry (`original`: its old name, when
/// known): by path ([`Check::by_path`]), then every inode found by walking
/// it in the quarantine through descriptors. `Some(what)` if anything
/// holds it, or the index cannot tell.
fn check_quarantined(
    root: &Path,
    original: Option<&OsStr>,
    q: &Quarantined<'_>,
    check: &Check<'_>,
    walker: &mut walk::Walker,
) -> Option<String> {
    check
        .by_path(root, original, q)
        .or_else(|| walk_check(q, check, walker, &mut |_| {}))
}

/// The walk of [`check_quarantined`]; `seen` is told every inode number.
fn walk_check(
    q: &Quarantined<'_>,
    check: &Check<'_>,
    walker: &mut walk::Walker,
    seen: &mut dyn FnMut(u64),
) -> Option<String> {
    let mut found: Option<String> = None;
    let mut links = walk::HardLinks::new();
    let walked = walker.usage_at(q.dir(), q.name_in_quarantine(), &mut links, &mut |v| {
        if v.is_mount_point() {
            // Something is mounted on it: in use by definition.
            found = Some("a filesystem is mounted on it".into());
            return WalkState::Quit;
        }
        seen(v.ino());
        // Regular files are asked through the quarantine by their path
        // below it (`openat2` beneath it, through no link and no mount).
        let below = || match v.depth() {
            0 => PathBuf::from(q.name_in_quarantine()),
            _ => Path::new(q.name_in_quarantine()).join(v.path()),
        };
        let is_file = v.kind() == FileKind::File;
        let name = match is_file {
            true => below().into_os_string(),
            false => std::ffi::OsString::new(),
        };
        match check.inode((v.dev(), v.ino()), is_file, q.dir(), &name, &below) {
            Some(what) => {
                found = Some(what);
                WalkState::Quit
            }
            None => WalkState::Continue,
        }
    });
    match walked {
        Ok(_) if found.is_some() => found,
        Ok(usage) if usage.error_count > 0 => Some(format!(
            "{} inside cannot be read",
            crate::human::plural(usage.error_count, "place", "places")
        )),
        Ok(usage) if !usage.mount_points.is_empty() => Some(format!(
            "a mount point inside ({})",
            usage.mount_points[0].display()
        )),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}
