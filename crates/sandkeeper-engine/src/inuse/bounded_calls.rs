//! System calls that may have to wait for a filesystem that does not
//! answer (a dead FUSE server, an NFS or CIFS server gone away), run where
//! they can be abandoned: one long-lived worker thread, waited for with a
//! time limit.
//!
//! A worker that does not answer in time is abandoned (it stays stuck in
//! the kernel until the filesystem answers, and ends then) and the next
//! call starts another. What it was asked about is remembered as *hung*
//! until that stuck call returns, and is not asked again meanwhile: a dead
//! mount costs one thread, not one per scan.
//!
//! Spawning a thread per call would cost milliseconds on a loaded machine,
//! and reapers collect once per entry.

use std::collections::HashSet;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long the calls of one [`run`] may take in all before those not
/// answered count as unknown.
pub(super) const LIMIT: Duration = Duration::from_secs(2);

/// A call for [`run`]: its topic (what it looks at, for [`is_hung`]) and
/// the call itself.
pub(super) type Call<T> = (Vec<u8>, Box<dyn FnOnce() -> T + Send>);

/// A job: runs the call, sends its answer.
type Job = Box<dyn FnOnce() + Send>;

/// The worker, if one is alive and answering.
static WORKER: Mutex<Option<Sender<Job>>> = Mutex::new(None);

/// What an abandoned worker is stuck on (the `topic` of its call).
static HUNG: Mutex<Option<HashSet<Vec<u8>>>> = Mutex::new(None);

fn spawn() -> Option<Sender<Job>> {
    let (tx, rx): (Sender<Job>, Receiver<Job>) = mpsc::channel();
    std::thread::Builder::new()
        .name("sandkeeper-deadline".into())
        .spawn(move || {
            for job in rx {
                job();
            }
        })
        .ok()?;
    Some(tx)
}

fn hung() -> std::sync::MutexGuard<'static, Option<HashSet<Vec<u8>>>> {
    HUNG.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a call about `topic` is stuck in an abandoned worker.
pub(super) fn is_hung(topic: &[u8]) -> bool {
    hung().as_ref().is_some_and(|h| h.contains(topic))
}

/// Runs each `(topic, call)` on the worker, in order; the answers, in the
/// same order, `None` for those not answered within `limit` in all (and
/// for those whose topic is stuck already: they are not run). `topic`
/// names what the call looks at (a path), for [`is_hung`].
pub(super) fn run<T: Send + 'static>(calls: Vec<Call<T>>, limit: Duration) -> Vec<Option<T>> {
    let mut answers: Vec<Option<T>> = calls.iter().map(|_| None).collect();
    if calls.is_empty() {
        return answers;
    }
    // Held throughout: one caller at a time uses the worker.
    let mut worker = WORKER.lock().unwrap_or_else(PoisonError::into_inner);
    let (reply, replies) = mpsc::channel::<(usize, T)>();
    let mut sent = Vec::new();
    for (i, (topic, call)) in calls.into_iter().enumerate() {
        if is_hung(&topic) {
            continue;
        }
        if worker.is_none() {
            *worker = spawn();
        }
        let Some(tx) = worker.as_ref() else {
            break; // no thread can be started: nothing is asked
        };
        let reply = reply.clone();
        let done = topic.clone();
        let job: Job = Box::new(move || {
            let answer = call();
            // Asked again from now on (a stuck call that returns at last
            // is no longer hung).
            if let Some(h) = hung().as_mut() {
                h.remove(&done);
            }
            let _ = reply.send((i, answer));
        });
        if tx.send(job).is_err() {
            *worker = None; // it died: the next call starts another
            break;
        }
        sent.push((i, topic));
    }
    drop(reply);
    let deadline = Instant::now() + limit;
    let mut pending = sent.len();
    while pending > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        match replies.recv_timeout(left) {
            Ok((i, answer)) => {
                answers[i] = Some(answer);
                pending -= 1;
            }
            Err(_) => {
                // Stuck on the first call not answered: abandoned, and
                // that call's topic is hung until it returns. (The calls
                // queued behind it run then, answering nobody.)
                if let Some((_, topic)) = sent.iter().find(|(i, _)| answers[*i].is_none()) {
                    hung()
                        .get_or_insert_with(HashSet::new)
                        .insert(topic.clone());
                }
                *worker = None;
                break;
            }
        }
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_in_order_and_abandons_a_stuck_call() {
        let (unblock, blocked) = mpsc::channel::<()>();
        let calls: Vec<Call<u32>> = vec![
            (b"a".to_vec(), Box::new(|| 1)),
            (
                b"stuck".to_vec(),
                Box::new(move || {
                    let _ = blocked.recv();
                    2
                }),
            ),
            (b"c".to_vec(), Box::new(|| 3)),
        ];
        let answers = run(calls, Duration::from_millis(200));
        assert_eq!(answers, vec![Some(1), None, None]);
        assert!(is_hung(b"stuck"));
        // Not asked again while stuck; the others are, by a new worker.
        let again: Vec<Call<u32>> = vec![
            (b"stuck".to_vec(), Box::new(|| 20)),
            (b"c".to_vec(), Box::new(|| 3)),
        ];
        assert_eq!(run(again, Duration::from_secs(10)), vec![None, Some(3)]);
        // Once the stuck call returns, it may be asked again.
        unblock.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_hung(b"stuck") && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!is_hung(b"stuck"));
    }
}
