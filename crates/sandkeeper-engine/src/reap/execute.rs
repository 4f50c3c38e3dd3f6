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
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::check::{check_entry, check_quarantined, Check, Guard, SETTLE, TOUCHED_DURING_CHECK};
use super::decisions::Decisions;
use super::events::Recorder;
use super::fate::{
    keep_leftover, put_back, small_dirs, soft_nofile, tell, Checked, Doomed, Moved, Note, Outcome,
    LARGE, POOL_MAX,
};
use super::pool::{kept_done, CloseOnDrop, Done, Fed, Lane, Outbox, Queue, Task, Work};
use super::{skipped, KeepReason, ReapError, Reaper, Skipped, Target};
use crate::error::{Error, Result};
use crate::lease::{self, Claim, Probe};
use crate::remove::{self, LeftBy, RemoveOptions};
use crate::scan::{self, Entry, EntryState};
use crate::walk::{self, FileKind};

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
    pub(super) fn run_batches<'w: 'd, 'd>(
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
    pub(super) fn give_verdicts<'d>(
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
    pub(super) fn claim_and_move<'d>(
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

/// After a failed move into the quarantine: whether the failure was a race
/// with the entry's owner, not an error. The scanned inode was claimed,
/// but its name held another one when the remover looked or moved (a
/// program removed its directory and made it again, or swapped it: the
/// remover says so, [`Error::replaced`]), or the name holds another one or
/// nothing now: what has the name was never scanned, so it is left alone
/// (a benign race, `changed`; the next reap judges it afresh). Any other
/// failure on the scanned inode is the removal's own: an error.
pub(super) fn raced_by_owner(dir: BorrowedFd<'_>, entry: &Entry, err: &Error) -> Option<String> {
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

pub(super) fn is_not_found(e: &Error) -> bool {
    e.io_error()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Why an entry could not be claimed.
pub(super) enum ClaimFailure {
    /// It vanished: someone else removed it; nothing to report.
    Gone,
    /// It became live, or is not what was scanned.
    Changed(String),
}
use ClaimFailure::{Changed, Gone};

/// Takes the entry's lock (directories) and checks it is the scanned inode.
/// Anything else (a file, socket, symlink) has no lock: its identity is
/// checked, and the move into the quarantine checks it again.
pub(super) fn claim(
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
