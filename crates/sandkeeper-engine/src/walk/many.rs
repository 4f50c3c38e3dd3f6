//! Measuring many entries of one directory on several threads: each
//! thread walks its share with its own [`Walker`] and [`HardLinks`], and the
//! hard links counted twice are corrected after the walks.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::links::HardLinks;
use super::walker::{Visit, Walker};
use super::{Usage, WalkState};
use crate::error::Result;

/// What one thread of [`usage_many`] measured, and the hard links it
/// counted.
type WorkerOutput = (Vec<(usize, Result<Usage>)>, HardLinks);

/// Measures the entries `names` of the open directory `parent` on
/// `threads` threads, with the results of measuring them one after the
/// other in slice order with one [`HardLinks`].
///
/// `threads` 0 means one per available core; it is never more than the
/// number of entries, and with 1 everything runs on the calling thread.
/// `visit` is called with the entry's index and may be called from several
/// threads at once (one entry's visits all come from one thread, in walk
/// order). The results are in the order of `names`.
///
/// # Hard links across threads
///
/// Each thread keeps its own [`HardLinks`] and its own [`Walker`], so the
/// walks share nothing and take no lock. An inode linked from entries that
/// different threads measured is then counted by each of them; after all
/// walks, the sets are merged and the inode stays with the entry of the
/// lowest index, the others' totals are corrected. So the per-entry numbers
/// do not depend on how the work was split: they are what
/// `du -x --max-depth=1` prints for the same entries in the same order
/// (pass the names in directory order to compare with `du`).
///
/// ```
/// use std::os::fd::AsFd;
/// use sandkeeper_engine::walk::{self, WalkState};
/// # let scratch = sandkeeper_engine::Sandbox::new()?;
/// # let root = scratch.path();
/// for name in ["a", "b", "c"] {
///     std::fs::create_dir(root.join(name))?;
/// }
/// std::fs::write(root.join("b/data"), vec![1u8; 50_000])?;
/// std::fs::hard_link(root.join("b/data"), root.join("c/data"))?;
///
/// let parent = std::fs::File::open(root)?;
/// let results = walk::usage_many(parent.as_fd(), &["a", "b", "c"], 2, &|_, _| WalkState::Continue);
/// let files: Vec<u64> = results.iter().map(|r| r.as_ref().unwrap().files).collect();
/// assert_eq!(files, [0, 1, 0], "the shared file is counted in `b`, the first entry holding it");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// Each entry's result is an error when that entry cannot be `statx`ed or,
/// being a directory, opened (see [`usage_at`](super::usage_at)).
///
/// # Panics
///
/// When `visit` panics, the panic is passed on after every thread stopped.
pub fn usage_many<S: AsRef<OsStr> + Sync>(
    parent: BorrowedFd<'_>,
    names: &[S],
    threads: usize,
    visit: &(dyn Fn(usize, &Visit<'_>) -> WalkState + Sync),
) -> Vec<Result<Usage>> {
    usage_many_after(parent, names, threads, &mut HardLinks::new(), visit)
}

/// As [`usage_many`], for a batch of entries that comes after the entries
/// measured before with `counted`: a hard-linked inode already in
/// `counted` is counted in none of this batch, and the inodes this batch
/// counts are added to it. Measuring a long list batch by batch with one
/// set gives the numbers of one [`usage_many`] over the whole list, in
/// memory bounded by the batch (plus the hard-linked inodes).
pub(crate) fn usage_many_after<S: AsRef<OsStr> + Sync>(
    parent: BorrowedFd<'_>,
    names: &[S],
    threads: usize,
    counted: &mut HardLinks,
    visit: &(dyn Fn(usize, &Visit<'_>) -> WalkState + Sync),
) -> Vec<Result<Usage>> {
    let threads = match threads {
        0 => cores(),
        n => n,
    }
    .clamp(1, names.len().max(1));
    let next = AtomicUsize::new(0);
    // Asked once for all the entries, not once per entry.
    let parent_fence = super::walker::parent_fence_of(parent);
    let work = || {
        let mut walker = Walker::new();
        let mut links = HardLinks::new();
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(name) = names.get(i) else { break };
            let seq = u32::try_from(i).unwrap_or(u32::MAX);
            let result = walker.walk(
                parent,
                Some(parent_fence),
                name.as_ref(),
                &mut links,
                seq,
                &mut |v| visit(i, v),
            );
            done.push((i, result));
        }
        (done, links)
    };
    let parts: Vec<WorkerOutput> = if threads == 1 {
        vec![work()]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
            let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
            joined
                .into_iter()
                .map(|r| r.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect()
        })
    };

    let mut results = Vec::with_capacity(names.len());
    let mut sets = Vec::with_capacity(parts.len());
    for (done, links) in parts {
        results.extend(done);
        sets.push(links);
    }
    results.sort_unstable_by_key(|(i, _)| *i);
    counted.absorb(sets, &mut results);
    results.into_iter().map(|(_, r)| r).collect()
}

/// The cores this process may use, asked once: `available_parallelism`
/// reads the cgroup's files on every call, which cost a reap of thousands
/// of entries a tenth of its time.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
