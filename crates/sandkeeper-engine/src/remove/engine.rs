//! Emptying one directory tree, on one thread or several.
//!
//! With one thread the calling thread walks the tree depth first
//! ([`Walker`]). With more, independent subtrees go to different threads:
//! directories near the top whose subdirectories are worth sharing become
//! [`Node`]s, and each of their subdirectories becomes a task in a shared
//! stack. A worker takes a task and, while there is plenty of work queued,
//! removes that whole subtree on its own with its walker; when the queue
//! runs low it shares the subtree's subdirectories in turn, so the other
//! thread does not idle. The last task to finish below a shared directory
//! removes it. Helper threads start only once there are two tasks to run,
//! so small trees never pay for a thread.
//!
//! Descriptors stay bounded: each worker keeps at most `max_open`, and at
//! most [`MAX_NODES`] shared directories are open at once.

use std::ffi::CStr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, Scope};

use rustix::io::Errno;

use super::node::Node;
use super::plan::Plan;
use super::report::{LeftReason, Op, Tally};
use super::worker::{Child, Walker};
use crate::fs_at::{self, Fence};

/// How deep below the root a directory may still be shared.
const SHARE_DEPTH: u32 = 8;
/// Shared directories open at once, at most.
const MAX_NODES: usize = 64;
/// How often a shared directory still not empty after all its tasks (a
/// concurrent writer) is emptied again before it is reported.
const MAX_SWEEPS: usize = 3;

/// A subdirectory waiting to be removed.
struct Task {
    parent: Arc<Node>,
    name: Box<CStr>,
}

struct Queue {
    tasks: Vec<Task>,
    /// Workers currently running a task.
    active: usize,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    fence: Fence,
    plan: Plan,
    /// Threads started, the calling one included.
    started: AtomicUsize,
    /// Shared directories currently open.
    nodes: AtomicUsize,
    tally: Mutex<Tally>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic in another worker cannot leave the queue inconsistent
        // (every update is a single push, pop or counter change).
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Removes everything inside `root` (not `root` itself). Whatever had to
/// be left is in the returned tally, and `root.left_inside` is set.
/// `thorough` when `root` was emptied before and turned out not to be empty
/// (see [`Walker::empty`]).
pub(crate) fn empty_dir(root: &Arc<Node>, fence: &Fence, plan: &Plan, thorough: bool) -> Tally {
    let mut walker = Walker::new(plan);
    if plan.threads <= 1 {
        walker.empty(root, fence, thorough);
        return walker.tally;
    }
    let subdirs = walker.list_subdirs(root, thorough);
    if subdirs.is_empty() {
        return walker.tally;
    }
    root.outstanding.store(subdirs.len(), Ordering::Release);
    let tasks = subdirs
        .into_iter()
        .map(|name| Task {
            parent: Arc::clone(root),
            name,
        })
        .collect();
    let shared = Shared {
        queue: Mutex::new(Queue { tasks, active: 0 }),
        wake: Condvar::new(),
        fence: *fence,
        plan: *plan,
        started: AtomicUsize::new(1),
        nodes: AtomicUsize::new(0),
        tally: Mutex::new(Tally::default()),
    };
    thread::scope(|scope| {
        maybe_spawn(scope, &shared);
        work(scope, &shared, walker);
    });
    shared
        .tally
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Starts another worker if there is queued work for it and the plan
/// allows one more thread.
fn maybe_spawn<'scope>(scope: &'scope Scope<'scope, '_>, shared: &'scope Shared) {
    if shared.lock().tasks.len() < 2 {
        return;
    }
    let started = shared.started.load(Ordering::Relaxed);
    if started >= shared.plan.threads
        || shared
            .started
            .compare_exchange(started, started + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let spawned = thread::Builder::new()
        .name("sandkeeper-rm".into())
        .spawn_scoped(scope, move || {
            work(scope, shared, Walker::new(&shared.plan));
        });
    if spawned.is_err() {
        // No thread to be had: the running workers do it all.
        shared.started.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A worker: takes tasks until none are left and no one is making more.
fn work<'scope>(scope: &'scope Scope<'scope, '_>, shared: &'scope Shared, mut walker: Walker) {
    loop {
        let (task, backlog) = {
            let mut queue = shared.lock();
            loop {
                if let Some(task) = queue.tasks.pop() {
                    queue.active += 1;
                    break (task, queue.tasks.len());
                }
                if queue.active == 0 {
                    shared.wake.notify_all();
                    drop(queue);
                    let tally = std::mem::take(&mut walker.tally);
                    shared
                        .tally
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .merge(tally);
                    return;
                }
                queue = shared
                    .wake
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        run_task(scope, shared, &mut walker, task, backlog);
        let mut queue = shared.lock();
        queue.active -= 1;
        if queue.active == 0 && queue.tasks.is_empty() {
            shared.wake.notify_all();
        }
    }
}

fn run_task<'scope>(
    scope: &'scope Scope<'scope, '_>,
    shared: &'scope Shared,
    walker: &mut Walker,
    task: Task,
    backlog: usize,
) {
    let depth = task.parent.depth + 1;
    let share = backlog < shared.plan.threads
        && depth < SHARE_DEPTH
        && shared.nodes.load(Ordering::Relaxed) < MAX_NODES;
    if !share {
        let left = walker.remove_child(&task.parent, &task.name, &shared.fence);
        complete(shared, walker, &task.parent, left);
        return;
    }
    let (fd, st) = match walker.open_child(&task.parent, &task.name, &shared.fence) {
        Child::Dir(fd, st) => (fd, st),
        Child::Done(left) => {
            complete(shared, walker, &task.parent, left);
            return;
        }
    };
    shared.nodes.fetch_add(1, Ordering::AcqRel);
    let node = Arc::new(Node::new(fd, st, task.name, Some(task.parent), depth));
    let subdirs = walker.list_subdirs(&node, false);
    if subdirs.is_empty() {
        finish(shared, walker, node);
        return;
    }
    node.outstanding.store(subdirs.len(), Ordering::Release);
    {
        let mut queue = shared.lock();
        queue.tasks.extend(subdirs.into_iter().map(|name| Task {
            parent: Arc::clone(&node),
            name,
        }));
    }
    shared.wake.notify_all();
    maybe_spawn(scope, shared);
}

/// A task below `parent` is done; the last one finishes `parent`.
fn complete(shared: &Shared, walker: &mut Walker, parent: &Arc<Node>, left: bool) {
    if left {
        parent.left_inside.store(true, Ordering::Release);
    }
    if parent.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
        finish(shared, walker, Arc::clone(parent));
    }
}

/// Everything below the shared directory `node` is done: remove it from its
/// parent, and finish the parent too if this was its last task. The root
/// has no parent; the caller removes it.
fn finish(shared: &Shared, walker: &mut Walker, mut node: Arc<Node>) {
    loop {
        let Some(parent) = node.parent.clone() else {
            return;
        };
        let mut sweeps = 0;
        while !node.left_inside.load(Ordering::Acquire) {
            match fs_at::rmdir(parent.fd.as_fd(), &node.name) {
                Ok(()) => {
                    walker.tally.counts.dirs += 1;
                    walker.tally.counts.bytes += node.st.disk;
                    break;
                }
                Err(Errno::NOENT) => break,
                Err(Errno::ACCESS) if !parent.fixed.swap(true, Ordering::AcqRel) => {
                    // The parent is not writable: make it so, once.
                    let _ = fs_at::make_writable(parent.fd.as_fd(), parent.st.perm);
                }
                Err(Errno::NOTEMPTY) if sweeps < MAX_SWEEPS => {
                    sweeps += 1;
                    walker.empty(&node, &shared.fence, true);
                }
                Err(errno) => {
                    let reason = LeftReason::Errno {
                        op: Op::Rmdir,
                        errno,
                    };
                    walker.tally.leave(node.path(), reason);
                    node.left_inside.store(true, Ordering::Release);
                }
            }
        }
        shared.nodes.fetch_sub(1, Ordering::AcqRel);
        if node.left_inside.load(Ordering::Acquire) {
            parent.left_inside.store(true, Ordering::Release);
        }
        drop(node);
        if parent.outstanding.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        node = parent;
    }
}
