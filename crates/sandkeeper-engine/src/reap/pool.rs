//! The pool of workers that delete a root's condemned entries while the
//! calling thread claims, moves and checks the next group (see
//! [`execute`](super::execute)): the queue, the workers, and the lanes that
//! record each group in its order.

use super::events::Recorder;
use super::fate::{own_quarantine, put_back, record_outcome, Doomed, Outcome, WORKER_NICE};
use super::{ReapReason, Reaper, Skipped, Target};
use crate::scan::{self, Entry};
use std::cmp::Reverse;
use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

/// A condemned entry for the pool: which batch, where in it.
pub(super) struct Task<'d> {
    pub(super) batch: usize,
    pub(super) at: usize,
    pub(super) entry: Entry,
    pub(super) reason: ReapReason,
    pub(super) doomed: Doomed<'d>,
}

/// What a worker did with a [`Task`].
pub(super) struct Done {
    pub(super) batch: usize,
    pub(super) at: usize,
    pub(super) entry: Entry,
    pub(super) reason: ReapReason,
    pub(super) outcome: Outcome,
}

/// The pool's tasks, batch after batch; closed when the root is done (or
/// its reap ends early): a worker then starts nothing more.
pub(super) struct Queue<'d> {
    pub(super) state: Mutex<(VecDeque<Task<'d>>, bool)>,
    pub(super) ready: Condvar,
}

impl<'d> Queue<'d> {
    pub(super) fn new() -> Queue<'d> {
        Queue {
            state: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        }
    }

    pub(super) fn push(&self, tasks: Vec<Task<'d>>) {
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
    pub(super) fn next(&self) -> Option<Task<'d>> {
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
    pub(super) fn try_next(&self) -> Option<Task<'d>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.1 {
            true => None,
            false => state.0.pop_front(),
        }
    }

    pub(super) fn close(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        self.ready.notify_all();
    }
}

/// Closes the queue when dropped: the calling thread's, on every way out
/// of a root's reap (an error, a panic in the caller's `on_event`), so no
/// worker waits for tasks that will not come.
pub(super) struct CloseOnDrop<'q, 'd>(pub(super) &'q Queue<'d>);

impl Drop for CloseOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Where the workers leave what they did. The calling thread is woken
/// when a batch is complete (or no worker is left), not for every entry:
/// each wake-up would take a core from a worker for a moment.
pub(super) struct Outbox {
    pub(super) state: Mutex<Outgoing>,
    pub(super) ready: Condvar,
}

pub(super) struct Outgoing {
    pub(super) done: Vec<Done>,
    /// Batches with tasks not done yet, and how many (at most two).
    pub(super) open: Vec<(usize, usize)>,
    /// Workers that have not left.
    pub(super) serving: usize,
}

impl Outbox {
    pub(super) fn new() -> Outbox {
        Outbox {
            state: Mutex::new(Outgoing {
                done: Vec::new(),
                open: Vec::new(),
                serving: 0,
            }),
            ready: Condvar::new(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Outgoing> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A worker's outcome; wakes the calling thread if it completes its
    /// batch.
    pub(super) fn deliver(&self, done: Done) {
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
pub(super) struct Leaving<'q, 'd>(pub(super) &'q Queue<'d>, pub(super) &'q Outbox);

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
pub(super) struct Work<'s> {
    pub(super) reaper: &'s Reaper,
    pub(super) dir: BorrowedFd<'s>,
    pub(super) path: &'s Path,
    pub(super) target: Option<Target>,
    /// Set by the worker whose removal met the target; looked at before
    /// every entry is started.
    pub(super) met: AtomicBool,
    pub(super) small_dirs: u64,
}

impl Work<'_> {
    /// A worker: takes tasks until the queue is closed.
    pub(super) fn serve(&self, queue: &Queue<'_>, outbox: &Outbox) {
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
    pub(super) fn carry_out(&self, task: Task<'_>) -> Done {
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
pub(super) struct Fed {
    pub(super) batch: usize,
    pub(super) slots: Vec<Option<Done>>,
}

impl Fed {
    pub(super) fn complete(&self) -> bool {
        self.slots.iter().all(Option::is_some)
    }
}

/// Puts an outcome in its batch's slot: `fed`'s, or `later`'s (the batch
/// fed after it).
pub(super) fn place(fed: &mut Fed, later: &mut Option<&mut Fed>, done: Done) {
    let slots = match later {
        Some(l) if l.batch == done.batch => &mut l.slots,
        _ => &mut fed.slots,
    };
    let at = done.at;
    slots[at] = Some(done);
}

/// The calling thread's side of the pool.
pub(super) struct Lane<'q, 'd> {
    pub(super) queue: &'q Queue<'d>,
    pub(super) outbox: &'q Outbox,
    /// No worker could be started: this thread carries out every task
    /// itself.
    pub(super) alone: bool,
}

impl<'d> Lane<'_, 'd> {
    /// Whether every worker has left before the end (one panicked: the
    /// panic is passed on when the root's reap ends): nothing more is
    /// claimed or moved then.
    pub(super) fn broken(&self) -> bool {
        !self.alone && self.outbox.lock().serving == 0
    }

    /// Hands a batch's condemned entries to the workers (largest first,
    /// so that no worker is left with a large one at the end while the
    /// others idle; in the batch's order with a target: the oldest
    /// first); `slots` holds the outcomes already known.
    pub(super) fn feed(
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
    pub(super) fn finish(
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

/// Records what a worker did with an entry, putting it back if it is
/// held or was not started (which lets its claim go).
pub(super) fn record(path: &Path, done: Done, result: &mut Recorder<'_>) {
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
pub(super) fn kept_done(
    batch: usize,
    at: usize,
    entry: Entry,
    reason: ReapReason,
    kept: Skipped,
) -> Done {
    Done {
        batch,
        at,
        entry,
        reason,
        outcome: Outcome::Kept(kept),
    }
}
