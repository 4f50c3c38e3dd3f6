//! The audit: root → entries → sizes, holders, leases, states, families.
//!
//! One pass over `/proc` ([`crate::inuse`]) collects what every
//! process and the kernel hold; one walk per entry ([`crate::walk`],
//! both cores) sizes it like `du -x` and checks every inode it visits
//! against that index; each directory's lease is probed
//! ([`crate::lease`]); names are grouped into families
//! ([`crate::pattern`]). Nothing is modified and nothing is locked: live
//! or free is read from one snapshot of `/proc/locks`
//! ([`lease::Locks`]), taken after the root is listed, so a scan never
//! makes an owner's own non-blocking `flock` fail (the walk reads each
//! lease record meanwhile; the snapshot judges them afterwards).
//!
//! ```
//! use sandkeeper_engine::scan::Scanner;
//! # let root = sandkeeper_engine::Sandbox::new()?;
//! # std::fs::create_dir(root.path().join("app-235-101"))?;
//! let report = Scanner::new().scan(&[root.path()])?;
//! let family = &report.roots[0].groups[0];
//! println!("{}: {} entries, {} bytes", family.pattern, family.totals.entries, family.totals.disk_bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Memory
//!
//! A root's names are listed once into one buffer (a name costs its bytes
//! plus 8: where it ends, and its place in the sorted order) and sorted
//! without being copied (the tool's own directories are left out as they
//! are listed); the families are computed from them; then the
//! entries are walked 4,096 at a time (on all cores within a chunk), so
//! what is held per entry while it is walked (its probe, usage and
//! holders) is held for one chunk only. Each finished [`Entry`] is added to
//! its family's sums and handed on: [`Scanner::scan_root_with`] gives it to
//! the caller, a report keeps it only when
//! [`keep_entries`](Scanner::keep_entries) is on (the default, so small
//! callers see every entry). A hard-linked inode is counted once across
//! chunks, in the first entry by name that holds it. What stays per entry
//! is the name and a family number, plus the transient cost of
//! [`pattern::group`](crate::pattern::group) over all names.
//!
//! The names' bytes, chosen by whoever creates entries, are the one cost
//! that grows with something other than the number of entries (a million
//! names of 255 bytes are 255 MB). So they are held only up to a budget
//! ([`Scanner::name_memory`], 48 MiB by default): past it the scan keeps a
//! keyed fingerprint of 8 bytes per name and lists the root again, one
//! sorted window of names at a time, each window grouped and walked as
//! above (`scan/listing.rs`). A million names of 250 bytes: see
//! `bench/reap/memory.sh` (`NAME_LEN=250`) and `tests/memory.rs`.
//!
//! # Platform behavior
//!
//! Linux only: in-use detection needs `/proc`.

mod claims;
pub(crate) mod creators;
pub(crate) mod filesystem;
pub(crate) mod listing;
mod report;
mod state;
pub mod warnings;

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use claims::{program, Held, HolderName, PidCheck};
pub use creators::{
    CreatorCount, CreatorKey, Creators, EntryCount, KEY_ARGS, KEY_FIELD, MAX_KEYS, MAX_SLOTS, SLOTS,
};
pub use filesystem::{free_bytes, Filesystem};
pub use listing::{name_memory_from_env, NAME_MEMORY_DEFAULT, NAME_MEMORY_ENV, NAME_MEMORY_MIN};
pub use report::{Entry, Group, Report, RootReport, StateCounts, Totals};
pub use state::{EntryState, StateReason};

use crate::error::{Error, Result};
use crate::inuse::{InUse, InUseOptions};
use crate::lease::{self, Look, RecordState};
use crate::root::Root;
use crate::walk::{self, FileKind, WalkState};
use state::Facts;

/// A progress callback: `(entries started, entries in all)`.
pub type Progress = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// Scans roots. Options are set with the builder methods; [`scan`](Self::scan)
/// does the work.
#[derive(Clone, Default)]
pub struct Scanner {
    ignore_pids: Vec<u32>,
    trust_pid_namespace: Option<bool>,
    assume_unseen_free: Option<bool>,
    threads: usize,
    progress: Option<Progress>,
    pub(crate) stop: Option<Arc<AtomicBool>>,
    /// Whether reports leave out the entries (`keep_entries(false)`).
    drop_entries: bool,
    /// Whether each entry's origin is read and tallied per family
    /// (`origins(true)`).
    pub(crate) origins: bool,
    /// The bytes of names held at once (`name_memory`); `None`: from
    /// the environment, else the default.
    name_memory: Option<usize>,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("ignore_pids", &self.ignore_pids)
            .field("trust_pid_namespace", &self.trust_pid_namespace)
            .field("assume_unseen_free", &self.assume_unseen_free)
            .field("threads", &self.threads)
            .field("keep_entries", &!self.drop_entries)
            .field("origins", &self.origins)
            .finish_non_exhaustive()
    }
}

impl Scanner {
    /// A scanner with the defaults: no vouched-for processes, one walking
    /// thread per core, no progress callback.
    pub fn new() -> Scanner {
        Scanner::default()
    }

    /// Vouches for a process that cannot be inspected: it is assumed to
    /// use nothing under the roots (default: none). The report lists it
    /// under [`Report::assumed`].
    pub fn ignore_pid(&mut self, pid: u32) -> &mut Scanner {
        self.ignore_pids.push(pid);
        self
    }

    /// Trusts that every process that can reach the roots is in the pid
    /// namespace of `/proc` (default: `false`, unless
    /// `SANDKEEPER_TRUST_PID_NAMESPACE=1`); see
    /// [`InUseOptions::trust_pid_namespace`]. The report lists what was
    /// assumed under [`Report::assumed_blind_spots`].
    pub fn trust_pid_namespace(&mut self, yes: bool) -> &mut Scanner {
        self.trust_pid_namespace = Some(yes);
        self
    }

    /// Assumes that every process that cannot be inspected holds nothing
    /// under the roots (default: `false`, unless
    /// `SANDKEEPER_ASSUME_UNSEEN_FREE=1`); see
    /// [`InUseOptions::assume_unseen_free`]. Regular files the caller owns
    /// are still asked (a write lease): one that such a process holds keeps
    /// its entry `in_use`. [`Report::assumes_unseen_free`] says so.
    pub fn assume_unseen_free(&mut self, yes: bool) -> &mut Scanner {
        self.assume_unseen_free = Some(yes);
        self
    }

    /// Walking threads (default 0: one per core).
    pub fn threads(&mut self, threads: usize) -> &mut Scanner {
        self.threads = threads;
        self
    }

    /// Whether reports keep every entry (default: `true`). With `false`,
    /// [`RootReport::entries`] and every [`Group::members`] are empty and
    /// memory stays flat in the number of entries; the totals, families and
    /// warnings are the same. What needs the entries one by one without
    /// holding them all uses [`scan_root_with`](Self::scan_root_with).
    pub fn keep_entries(&mut self, yes: bool) -> &mut Scanner {
        self.drop_entries = !yes;
        self
    }

    /// Whether to read each entry's origin (who made it, `crate::origin`)
    /// and group every family's members by creator
    /// ([`Group::creators`]) as the entries stream (default: `false`).
    ///
    /// Memory stays bounded whatever the number of entries (at most
    /// [`SLOTS`] creators per family, [`MAX_KEYS`] per root: see
    /// [`Creators`]). Only root can read origins: for anyone else this
    /// costs nothing and every family's `creators` is `None`; as root it
    /// costs an `openat2`, an `fstat` and a `getxattr` per entry, on the
    /// walking threads. Origins never change a state.
    ///
    /// # Platform behavior
    ///
    /// Linux only; elsewhere it does nothing.
    pub fn origins(&mut self, yes: bool) -> &mut Scanner {
        self.origins = yes;
        self
    }

    /// The bytes of a root's names a scan holds at once (default:
    /// [`NAME_MEMORY_DEFAULT`], 48 MiB, unless `SANDKEEPER_NAME_MEMORY`
    /// says otherwise: [`NAME_MEMORY_ENV`]); at least [`NAME_MEMORY_MIN`].
    ///
    /// Names are chosen by whoever creates entries, up to 255 bytes each.
    /// Up to this budget they are listed once and held; past it, only a
    /// fingerprint of 8 bytes per name is kept and the root is listed
    /// again, once per window of half the budget (and a reaper once per
    /// batch of names it needs back): memory stays bounded whatever the
    /// names, for a few more listings. Each window is grouped into
    /// families on its own (merged by pattern), which may split a family
    /// that a heuristic reads differently in different windows.
    ///
    /// ```
    /// use sandkeeper_engine::scan::Scanner;
    /// # let root = sandkeeper_engine::Sandbox::new()?;
    /// # for i in 0..200 { std::fs::write(root.path().join(format!("app-235-{i}-{}", "x".repeat(200))), "")?; }
    /// // 200 names of over 200 bytes: more than 16 KiB, so listed again.
    /// let report = Scanner::new().name_memory(16 << 10).scan(&[root.path()])?;
    /// let apps = report.roots[0].groups.iter().filter(|g| g.pattern.starts_with("app-235-"));
    /// assert_eq!(apps.map(|g| g.totals.entries).sum::<u64>(), 200);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn name_memory(&mut self, bytes: usize) -> &mut Scanner {
        self.name_memory = Some(bytes.max(NAME_MEMORY_MIN));
        self
    }

    /// The budget of [`name_memory`](Self::name_memory).
    fn name_budget(&self) -> Result<usize> {
        match self.name_memory {
            Some(bytes) => Ok(bytes),
            None => name_memory_from_env(),
        }
    }

    /// Calls `progress(started, total)` as entries are walked.
    pub fn progress(&mut self, progress: Progress) -> &mut Scanner {
        self.progress = Some(progress);
        self
    }

    /// A flag another thread (or a signal handler) raises to stop a scan
    /// early (default: none): the walks stop at their next inode and the
    /// scan fails with [`ErrorKind::Stopped`](crate::ErrorKind::Stopped).
    /// A reaper passes its policy's flag on.
    pub fn stop_flag(&mut self, stop: Arc<AtomicBool>) -> &mut Scanner {
        self.stop = Some(stop);
        self
    }

    /// Whether the [`stop_flag`](Self::stop_flag) is raised.
    fn stop_requested(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// Fails with [`ErrorKind::Stopped`](crate::ErrorKind::Stopped) once a
    /// stop was asked for.
    pub(crate) fn check_stop(&self, root: &Path) -> Result<()> {
        match self.stop_requested() {
            true => Err(Error::stopped().at(root)),
            false => Ok(()),
        }
    }

    /// One pass over `/proc` with this scanner's options.
    ///
    /// # Errors
    ///
    /// When `/proc` cannot be read at all, or
    /// `SANDKEEPER_TRUST_PID_NAMESPACE` has a value other than `1`.
    pub fn in_use(&self) -> Result<InUse> {
        let mut opts = InUseOptions::new();
        opts.ignore_pids(self.ignore_pids.iter().copied());
        if let Some(yes) = self.trust_pid_namespace {
            opts.trust_pid_namespace(yes);
        }
        if let Some(yes) = self.assume_unseen_free {
            opts.assume_unseen_free(yes);
        }
        InUse::collect(&opts)
    }

    /// Scans `roots`: each top-level entry's size, holders, lease and
    /// state, grouped into families.
    ///
    /// All roots are checked before any work, so a bad root fails fast.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnusableRoot`](crate::ErrorKind::UnusableRoot) when a root does not exist, is not a
    /// directory, or cannot be read; an error when `/proc` cannot be read.
    /// Entries that vanish or cannot be read are warnings, not errors.
    pub fn scan<P: AsRef<Path>>(&self, roots: &[P]) -> Result<Report> {
        let opened: Vec<Root> = roots
            .iter()
            .map(|r| Root::open(r.as_ref()))
            .collect::<Result<_>>()?;
        self.scan_roots(&opened)
    }

    /// Scans roots the caller opened (see [`Root`]): everything is relative
    /// to their descriptors.
    ///
    /// # Errors
    ///
    /// When `/proc` cannot be read, or a root's filesystem cannot be
    /// measured or the root cannot be listed.
    pub fn scan_roots(&self, roots: &[Root]) -> Result<Report> {
        let started_ms = crate::clock::now_ms() as i64;
        if let Some(first) = roots.first() {
            self.check_stop(first.path())?;
        }
        let inuse = self.in_use()?;
        let roots = roots
            .iter()
            .map(|root| self.scan_root(root, &inuse))
            .collect::<Result<Vec<_>>>()?;
        Ok(Report::of(roots, &inuse, started_ms))
    }

    /// Scans one open root against an in-use index the caller collected
    /// (so a reaper can re-check with a fresh one).
    ///
    /// The report holds every entry unless [`keep_entries`](Self::keep_entries)
    /// was turned off; [`scan_root_with`](Self::scan_root_with) hands the
    /// entries over one by one instead.
    ///
    /// # Errors
    ///
    /// As [`scan_roots`](Self::scan_roots).
    pub fn scan_root(&self, root: &Root, inuse: &InUse) -> Result<RootReport> {
        if self.drop_entries {
            return Ok(self.scan_root_each(root, inuse, false, &mut |_| {})?.0);
        }
        let mut entries = Vec::new();
        let (mut report, _) = self.scan_root_each(root, inuse, true, &mut |step| match step {
            Streaming::Start { names, .. } => entries.reserve_exact(names),
            Streaming::Entry { entry, .. } => entries.push(entry),
        })?;
        report.entries = entries;
        Ok(report)
    }

    /// Scans one open root, giving each entry to `on_entry` as soon as it
    /// is measured and classified, in name order (bytes), its
    /// [`pattern`](Entry::pattern) set: memory stays flat in the number of
    /// entries (the names, stored compactly, are the only per-entry cost).
    ///
    /// The report returned has the totals, the families and the warnings,
    /// but no [`entries`](RootReport::entries) and no family
    /// [`members`](Group::members) (they index `entries`); the entries
    /// given to `on_entry` are those a [`scan_root`](Self::scan_root)
    /// report would list, in that order, with the same values.
    ///
    /// ```
    /// use sandkeeper_engine::{root::Root, scan::Scanner};
    /// # let dir = sandkeeper_engine::Sandbox::new()?;
    /// # let path = dir.path().join("root");
    /// # std::fs::create_dir_all(path.join("app-235-101"))?;
    /// let scanner = Scanner::new();
    /// let root = Root::open(&path)?;
    /// let mut names = Vec::new();
    /// let report = scanner.scan_root_with(&root, &scanner.in_use()?, &mut |e| names.push(e.name))?;
    /// assert_eq!(names, ["app-235-101"]);
    /// assert_eq!(report.totals.entries, 1);
    /// assert!(report.entries.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`scan_roots`](Self::scan_roots). `on_entry` may have been called
    /// for some entries before an error (a [stop](Self::stop_flag)).
    pub fn scan_root_with(
        &self,
        root: &Root,
        inuse: &InUse,
        on_entry: &mut dyn FnMut(Entry),
    ) -> Result<RootReport> {
        let (report, _) = self.scan_root_each(root, inuse, false, &mut |step| {
            if let Streaming::Entry { entry, .. } = step {
                on_entry(entry);
            }
        })?;
        Ok(report)
    }

    /// As [`scan_root_with`](Self::scan_root_with), for a caller that
    /// keeps something per entry (the reaper): `on_step` is told how many
    /// names were listed and how many families they form before the first
    /// entry ([`Streaming::Start`]), then gets each entry with its number
    /// among the names (vanished ones leave gaps) and its family's number
    /// ([`Streaming::Entry`]); and the names and the families' patterns
    /// come back when the scan ends, so that the caller needs no copy of
    /// its own.
    pub(crate) fn scan_root_streamed(
        &self,
        root: &Root,
        inuse: &InUse,
        on_step: &mut dyn FnMut(Streaming),
    ) -> Result<(RootReport, Streamed)> {
        self.scan_root_each(root, inuse, false, on_step)
    }

    /// The scan of one root: names listed once into one buffer and sorted,
    /// families computed from the names, then the entries walked
    /// [`CHUNK`] at a time (in parallel within a chunk) and handed to
    /// `on_entry` in name order; `members`: whether the families list
    /// their members (indexes in the order of the entries given). See
    /// [`scan_root_streamed`](Self::scan_root_streamed) for `on_step` and
    /// what comes back besides the report.
    fn scan_root_each(
        &self,
        root: &Root,
        inuse: &InUse,
        members: bool,
        on_step: &mut dyn FnMut(Streaming),
    ) -> Result<(RootReport, Streamed)> {
        let path = root.path().to_owned();
        let dir = root.fd();
        let filesystem = Filesystem::of(dir)
            .map_err(|e| Error::io("cannot measure the filesystem of root", e).at(&path))?;
        let (listing, leftovers) = list_names(dir, &path, self.name_budget()?)?;
        // Live or free from one snapshot of `/proc/locks`, taken after the
        // listing: a scan takes no lock (a program's own `flock(LOCK_NB)`
        // must not fail because we looked). Read on a thread while the
        // names are sorted and the first entries walked: the kernel makes a
        // process's first reading wait for an RCU grace period (several
        // ms).
        let locks = lease::LocksReading::start();
        let total = listing.len();
        let mut warnings: Vec<String> = root
            .followed()
            .iter()
            .map(|(link, target)| {
                format!(
                    "{} is a symlink to {}: followed it",
                    link.display(),
                    target.display()
                )
            })
            .collect();
        self.check_stop(&path)?;
        let mut totals = Totals::default();
        let mut tally = creators::Tally::default();
        #[cfg(target_os = "linux")]
        let origins = match self.origins {
            true => crate::origin::Reader::new(dir),
            false => None,
        };
        #[cfg(not(target_os = "linux"))]
        let origins = None;
        let mut links = walk::HardLinks::new();
        let started = AtomicUsize::new(0);
        let mut given = 0usize;
        // Finished by the first who needs it: the walk reads each entry's
        // lease record, and the classification judges it live or free by
        // the snapshot (`Unjudged`), so the walk need not wait for it.
        let locks = lease::PendingLocks::new(locks);
        let pass = Pass {
            root: &path,
            dir,
            inuse,
            locks: &locks,
            started: &started,
            total,
            origins: origins.as_ref(),
        };
        // The families are told from a window's names before its walk,
        // not during it: what grouping a million names takes for a while
        // would add to what the walk holds. Held names are one window
        // (see [`listing`]).
        let mut families = report::Families::new(total, crate::clock::now_ms() as i64);
        let mut told_start = false;
        let names = listing.windows(dir, &path, |window_first, window| {
            families.add_window(window, window_first);
            if !told_start {
                on_step(Streaming::Start {
                    names: total,
                    families: families.len(),
                });
                told_start = true;
            }
            let mut hand_over = |first: usize, examined: Vec<(usize, Entry)>| {
                for (i, mut entry) in examined {
                    let index = window_first + first + i;
                    totals.add(&entry);
                    entry.pattern = families.add(index, &entry, members.then_some(given));
                    #[cfg(target_os = "linux")]
                    if let Some(o) = &entry.origin {
                        tally.add(&entry.pattern, CreatorKey::of(o), entry.disk_bytes);
                    }
                    given += 1;
                    on_step(Streaming::Entry {
                        index,
                        family: families.family_of(index),
                        entry,
                    });
                }
            };
            // Each chunk is walked on a thread of its own while this one
            // classifies the chunk before it and hands it over (`on_step`:
            // a JSON writer serializes every entry there), so neither is a
            // pause of the walk. The hard-link set goes to the walk and
            // comes back with it: one chunk is walked at a time, in order.
            std::thread::scope(|scope| -> Result<()> {
                let mut pending: Option<(usize, Walked<'_>)> = None;
                for first in (0..window.len()).step_by(CHUNK) {
                    let chunk: Vec<&OsStr> = (first..window.len().min(first + CHUNK))
                        .map(|i| window.get(i))
                        .collect();
                    let mut chunk_links = std::mem::take(&mut links);
                    // (The walk's own threads are started the same way.)
                    let pass = &pass;
                    let walking = scope.spawn(move || {
                        let walked = self.walk_chunk(pass, chunk, &mut chunk_links);
                        (walked, chunk_links)
                    });
                    if let Some((before, walked)) = pending.take() {
                        hand_over(before, self.classify(pass, walked, &mut warnings));
                    }
                    let (walked, chunk_links) = walking
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                    links = chunk_links;
                    self.check_stop(&path)?;
                    pending = Some((first, walked));
                }
                if let Some((before, walked)) = pending.take() {
                    hand_over(before, self.classify(&pass, walked, &mut warnings));
                }
                Ok(())
            })
        })?;
        if !told_start {
            // Every name went before its window was listed.
            on_step(Streaming::Start {
                names: total,
                families: 0,
            });
        }
        if let Err(e) = locks.get() {
            warnings.push(format!(
                "cannot read /proc/locks ({e}): whether leases are held cannot be told"
            ));
        }
        let patterns = families.patterns();
        let mut groups = families.into_groups();
        let mut creators = tally.into_families();
        for g in &mut groups {
            g.creators = creators.remove(g.pattern.as_str()).map(Box::new);
        }
        let report = RootReport {
            path,
            filesystem,
            totals,
            groups,
            entries: Vec::new(),
            warnings,
            origins_read: origins.is_some(),
        };
        Ok((
            report,
            Streamed {
                names,
                patterns,
                leftovers,
            },
        ))
    }

    /// Walks the entries `names` (one chunk) of the pass's directory:
    /// what the walk tells of each, for [`Scanner::classify`] to make
    /// entries of. Split in two so that the next chunk's walk need not
    /// wait for this one's classification.
    fn walk_chunk<'n>(
        &self,
        pass: &Pass<'_>,
        chunk: Vec<&'n OsStr>,
        links: &mut walk::HardLinks,
    ) -> Walked<'n> {
        let Pass {
            root,
            dir,
            inuse,
            locks,
            started,
            total,
            origins,
        } = *pass;
        let names = &chunk[..];
        let hits: Mutex<Vec<(usize, crate::inuse::Holder)>> = Mutex::new(Vec::new());
        let kernel_hits: Mutex<Vec<(usize, crate::inuse::KernelUse)>> = Mutex::new(Vec::new());
        let progress = self.progress.clone();
        // The lease probe of each entry runs on the walking threads, when
        // the walk reaches the entry itself.
        let probes: Vec<OnceLock<Probed>> = names.iter().map(|_| OnceLock::new()).collect();
        // Each entry's creator, read on the walking threads too.
        let origins_read: Vec<OnceLock<ReadOrigin>> = match origins {
            Some(_) => names.iter().map(|_| OnceLock::new()).collect(),
            None => Vec::new(),
        };
        // Processes whose holdings were not read (uninspectable, or vouched
        // for): each regular file is asked whether it is open anywhere
        // else (a write lease, `inuse::open_elsewhere`).
        let ask = inuse.has_unread_processes();
        let asked: Vec<Asked> = match ask {
            true => names.iter().map(|_| Asked::default()).collect(),
            false => Vec::new(),
        };
        let visit = |i: usize, v: &walk::Visit<'_>| {
            if self.stop_requested() {
                return WalkState::Quit;
            }
            if v.depth() == 0 {
                let n = started.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(p) = &progress {
                    p(n, total);
                }
                let _ = probes[i].set(probe_entry(dir, root, names[i], v, locks));
                // Through the walk's own descriptor of the entry where it
                // has one (a directory it opened): not opened again.
                #[cfg(target_os = "linux")]
                if let Some(o) = origins.and_then(|r| match v.dir() {
                    Some(fd) => r.read_open(names[i], fd, v.ino()),
                    None => r.read(names[i]),
                }) {
                    let _ = origins_read[i].set(o);
                }
                if v.is_mount_point() {
                    // In use by definition; never entered (the mounted
                    // filesystem may not answer).
                    return WalkState::Skip;
                }
            }
            let (dev, ino) = (v.dev(), v.ino());
            let holders = inuse.holders(dev, ino);
            if !holders.is_empty() {
                let mut hits = hits.lock().unwrap_or_else(|e| e.into_inner());
                hits.extend(holders.iter().map(|h| (i, h.clone())));
            }
            for k in inuse.kernel_users_of(dev, ino) {
                kernel_hits
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((i, k.clone()));
            }
            if ask && v.kind() == FileKind::File {
                asked[i].ask(dir, names[i], v, locks.get().ok());
            }
            WalkState::Continue
        };
        let usages = walk::usage_many_after(dir, names, self.threads, links, &visit);
        let mut hits = hits.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut kernel_hits = kernel_hits.into_inner().unwrap_or_else(|e| e.into_inner());
        hits.sort_by_key(|(i, h)| (*i, h.pid));
        kernel_hits.sort_by_key(|(i, _)| *i);
        Walked {
            names: chunk,
            usages,
            hits,
            kernel_hits,
            probes,
            origins_read,
            asked,
        }
    }

    /// Classifies the entries of one walked chunk; gives them back with
    /// their indexes in the chunk (and their origins, when read), in
    /// order, without those that vanished.
    fn classify(
        &self,
        pass: &Pass<'_>,
        walked: Walked<'_>,
        warnings: &mut Vec<String>,
    ) -> Vec<(usize, Entry)> {
        let Pass {
            root, inuse, locks, ..
        } = *pass;
        let Walked {
            names,
            usages,
            hits,
            kernel_hits,
            mut probes,
            mut origins_read,
            asked,
        } = walked;
        // The mounts, loop devices and sockets at or under this root, found
        // once: most roots have none, and then no entry needs a lookup.
        let paths_within = inuse.paths_within(root);
        let mut hits = hits.into_iter().peekable();
        let mut kernel_hits = kernel_hits.into_iter().peekable();
        let uninspectable = inuse.uninspectable().len();
        let blind_spot = inuse.blind_spots().first().map(|b| b.kind);
        let mut entries = Vec::with_capacity(names.len());
        for (i, (name, usage)) in names.iter().zip(usages).enumerate() {
            let usage = match usage {
                Ok(u) => u,
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
                {
                    continue; // removed while we looked: nothing to report
                }
                Err(e) => {
                    let path = root.join(name);
                    warnings.push(format!("cannot measure {}: {e}", path.display()));
                    walk::Usage {
                        error_count: 1,
                        ..walk::Usage::default()
                    }
                }
            };
            // Taken, not copied: each probe serves its entry once.
            let Some(mut probed) = probes[i].take() else {
                continue; // vanished before the walk reached it
            };
            judge_probed(&mut probed, root, name, locks.get());
            if probed.vanished {
                continue;
            }
            warnings.extend(probed.warning);
            let mut facts = probed.facts;
            facts.uninspectable = uninspectable;
            facts.blind_spot = blind_spot;
            facts.unreadable = usage.error_count as usize;
            if let Some(a) = asked.get(i) {
                facts.open_elsewhere = a.open_elsewhere.load(Ordering::Relaxed);
                facts.unasked = a.unasked.load(Ordering::Relaxed);
            }
            let holders: Vec<_> = take_for(&mut hits, i);
            let mut kernel: Vec<_> = take_for(&mut kernel_hits, i);
            for k in paths_within.kernel_users_under(name) {
                if !kernel.contains(k) {
                    kernel.push(k.clone());
                }
            }
            let sockets: Vec<PathBuf> = paths_within
                .socket_paths_under(name)
                .into_iter()
                .map(Path::to_owned)
                .collect();
            facts.held |= !holders.is_empty() || !kernel.is_empty() || !sockets.is_empty();
            let (state, reason) = state::classify(&facts);
            entries.push((
                i,
                Entry {
                    name: (*name).to_owned(),
                    pattern: Arc::from(""),
                    kind: probed.kind,
                    state,
                    reason,
                    disk_bytes: usage.disk_bytes,
                    apparent_bytes: usage.apparent_bytes,
                    files: usage.files,
                    dirs: usage.dirs,
                    newest_mtime_ms: usage.newest_mtime_ms,
                    uid: probed.uid,
                    mode: probed.mode,
                    identity: probed.identity,
                    holders,
                    kernel,
                    sockets,
                    lease: probed.lease,
                    lease_invalid: probed.lease_invalid,
                    unreadable: usage.error_count,
                    mount_points: usage.mount_points,
                    #[cfg(target_os = "linux")]
                    origin: origins_read.get_mut(i).and_then(|o| o.take()).map(Box::new),
                },
            ));
        }
        entries
    }
}

/// An entry's origin as the walk reads it (none off Linux).
#[cfg(target_os = "linux")]
type ReadOrigin = crate::origin::Origin;
#[cfg(not(target_os = "linux"))]
type ReadOrigin = ();

/// One chunk as its walk left it ([`Scanner::walk_chunk`]), for
/// [`Scanner::classify`].
struct Walked<'n> {
    names: Vec<&'n OsStr>,
    usages: Vec<Result<walk::Usage>>,
    /// Holders and kernel users found by inode, by index in the chunk,
    /// sorted.
    hits: Vec<(usize, crate::inuse::Holder)>,
    kernel_hits: Vec<(usize, crate::inuse::KernelUse)>,
    probes: Vec<OnceLock<Probed>>,
    origins_read: Vec<OnceLock<ReadOrigin>>,
    asked: Vec<Asked>,
}

/// What a streamed scan of one root tells as it goes
/// ([`Scanner::scan_root_streamed`]). Not boxed: an entry is moved
/// through once, and a box would be one more allocation per entry.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Streaming {
    /// Before the first entry: how many names were listed, and how many
    /// families they form.
    Start { names: usize, families: usize },
    /// An entry, name number `index`, of family number `family`.
    Entry {
        index: usize,
        family: u32,
        entry: Entry,
    },
}

/// What a streamed scan of one root hands back besides its report
/// ([`Scanner::scan_root_streamed`]): the names, sorted, and each
/// family's pattern by number.
pub(crate) struct Streamed {
    pub(crate) names: listing::ScanNames,
    pub(crate) patterns: Vec<Arc<str>>,
    /// Whether a name listed may hold what a killed reaper left (a
    /// quarantine, a directory left as its own): a reaper that sees none
    /// does not list the root again to look for them.
    pub(crate) leftovers: bool,
}

/// Entries walked at a time: what is held per entry while it is walked
/// (its probe, its usage, its holders) is held for this many at most.
/// Large enough that both cores stay busy, small enough to be a few MB.
const CHUNK: usize = 4096;

/// What the kernel said about one entry's regular files
/// ([`crate::inuse::open_elsewhere`]), counted by the walking threads.
#[derive(Debug, Default)]
struct Asked {
    /// Files open elsewhere (a write lease refused).
    open_elsewhere: AtomicUsize,
    /// Files that could not be asked (not the caller's, unreadable, no
    /// leases on the filesystem, replaced meanwhile).
    unasked: AtomicUsize,
}

impl Asked {
    /// Asks about the regular file `v` of the entry `name` of `dir`, by a
    /// path below `dir` (no symlink, no mount on the way); `locks`: the
    /// snapshot of `/proc/locks` (`None`: unreadable, nothing can be
    /// asked).
    fn ask(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        v: &walk::Visit<'_>,
        locks: Option<&lease::Locks>,
    ) {
        use crate::inuse::{open_elsewhere, OpenElsewhere};
        let answer = match locks {
            Some(locks) => {
                let below = match v.depth() {
                    0 => PathBuf::from(name),
                    _ => Path::new(name).join(v.path()),
                };
                open_elsewhere(dir, below.as_os_str(), (v.dev(), v.ino()), locks)
            }
            None => {
                OpenElsewhere::CannotTell(crate::inuse::CannotTell::Failed { errno: libc::EIO })
            }
        };
        match answer {
            OpenElsewhere::No => {}
            OpenElsewhere::Yes => {
                self.open_elsewhere.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.unasked.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What every chunk of one root's scan shares.
#[derive(Clone, Copy)]
struct Pass<'a> {
    root: &'a Path,
    dir: BorrowedFd<'a>,
    inuse: &'a InUse,
    /// The snapshot of `/proc/locks`, finished when first needed.
    locks: &'a lease::PendingLocks,
    /// Entries started, over all chunks (for the progress callback).
    started: &'a AtomicUsize,
    /// Entries in all.
    total: usize,
    /// Reads each entry's origin, when asked for and possible.
    #[cfg(target_os = "linux")]
    origins: Option<&'a crate::origin::Reader<'a>>,
    #[cfg(not(target_os = "linux"))]
    origins: Option<&'a ()>,
}

/// What the probe of one entry found (its lease and identity).
#[derive(Debug)]
struct Probed {
    kind: FileKind,
    uid: u32,
    mode: u32,
    identity: (u64, u64),
    /// The lease part of the facts; the in-use part is added later.
    facts: Facts,
    lease: Option<Box<lease::LeaseRecord>>,
    lease_invalid: bool,
    warning: Option<String>,
    vanished: bool,
    /// The record read by the walk, not yet judged live or free by the
    /// snapshot of `/proc/locks` ([`judge_probed`]).
    unjudged: Option<Unjudged>,
}

/// A lease record the walk read ([`probe_entry`]), for [`judge_probed`]:
/// a chunk holds one [`Probed`] per entry, so a record is boxed, and no
/// record (the common case) costs no allocation.
#[derive(Debug)]
enum Unjudged {
    Missing,
    Read(Box<RecordState>),
}

/// Looks at the lease of the entry the walk is visiting (depth 0), without
/// locking it: its record is read through the walk's descriptor and left
/// [unjudged](Probed::unjudged) for [`judge_probed`], which tells live from
/// free by the snapshot of `/proc/locks` once it is there; an entry the
/// walk could not open is opened here, which tells why (that waits for
/// the snapshot).
fn probe_entry(
    dir: BorrowedFd<'_>,
    root: &Path,
    name: &OsStr,
    v: &walk::Visit<'_>,
    locks: &lease::PendingLocks,
) -> Probed {
    let mut probed = Probed {
        kind: v.kind(),
        uid: v.uid(),
        mode: v.mode(),
        identity: (v.dev(), v.ino()),
        // A sandbox still being created (or whose creator died in its
        // first microseconds) belongs to the protocol: once its lock is
        // free it is an orphan, not an unmanaged leftover.
        facts: Facts {
            has_lease: lease::is_internal_name(name),
            ..Facts::default()
        },
        lease: None,
        lease_invalid: false,
        warning: None,
        vanished: false,
        unjudged: None,
    };
    if v.is_mount_point() {
        // In use by definition, and never opened: the mounted filesystem
        // may be a dead FUSE or network one, and its lease (if any) is not
        // the entry's.
        probed.facts.held = true;
        return probed;
    }
    if probed.kind != FileKind::Dir {
        return probed;
    }
    match v.dir() {
        Some(fd) => {
            probed.unjudged = Some(match lease::read_record(fd, &root.join(name)) {
                RecordState::Missing => Unjudged::Missing,
                record => Unjudged::Read(Box::new(record)),
            });
        }
        None => match locks.get() {
            Ok(locks) => {
                let looked = lease::look_at(dir, root, name, locks);
                apply_look(&mut probed, root, name, looked);
            }
            Err(_) => probed.facts.unopenable = Some(None),
        },
    }
    probed
}

/// Tells the entry `probed` live or free by `locks` when its record was
/// read unjudged ([`probe_entry`]); `Err`: `/proc/locks` could not be
/// read, and then nothing can be told (fail closed).
fn judge_probed(
    probed: &mut Probed,
    root: &Path,
    name: &OsStr,
    locks: Result<&lease::Locks, &str>,
) {
    let Some(record) = probed.unjudged.take() else {
        return;
    };
    match locks {
        Ok(locks) => {
            let record = match record {
                Unjudged::Missing => RecordState::Missing,
                Unjudged::Read(record) => *record,
            };
            let looked = Ok(lease::judge(probed.identity, record, locks));
            apply_look(probed, root, name, looked);
        }
        Err(_) => probed.facts.unopenable = Some(None),
    }
}

/// What a look at the entry `name`'s lease makes of `probed`'s facts.
fn apply_look(probed: &mut Probed, root: &Path, name: &OsStr, looked: Result<Look>) {
    let facts = &mut probed.facts;
    match looked {
        Ok(Look::Live { holders, record }) => {
            facts.lock_held = Some(holders);
            facts.has_lease = true;
            probed.lease = record.map(Box::new);
        }
        Ok(Look::Free { record, .. }) => {
            match record {
                RecordState::Missing => {}
                RecordState::Valid(r) => probed.lease = Some(Box::new(r)),
                // (`Invalid`, and any state a later protocol adds: not
                // trusted.)
                _ => probed.lease_invalid = true,
            }
            facts.has_lease |= probed.lease.is_some() || probed.lease_invalid;
        }
        Ok(Look::MountPoint) => facts.held = true,
        Ok(Look::Unopenable { record, owner, .. }) => {
            facts.unopenable = Some(match owner {
                lease::OwnerStatus::Alive => Some(true),
                lease::OwnerStatus::Dead => Some(false),
                lease::OwnerStatus::Unknown => None,
            });
            facts.has_lease |= record.is_some();
            probed.lease = record.map(Box::new);
        }
        // Any answer a later protocol adds: held.
        Ok(_) => facts.held = true,
        Err(e)
            if e.io_error()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
        {
            probed.vanished = true;
        }
        Err(e) => {
            probed.warning = Some(format!("cannot probe {}: {e}", root.join(name).display()));
            facts.unopenable = Some(None);
        }
    }
}

/// The values of `list` (pairs sorted by index, taken in increasing
/// `i`) for index `i`; those of smaller indexes, whose entries vanished,
/// are dropped on the way. Linear over all entries, not quadratic.
fn take_for<T>(list: &mut std::iter::Peekable<std::vec::IntoIter<(usize, T)>>, i: usize) -> Vec<T> {
    let mut taken = Vec::new();
    while let Some((j, t)) = list.next_if(|(j, _)| *j <= i) {
        if j == i {
            taken.push(t);
        }
    }
    taken
}

/// The names in `dir`, without `.`, `..` and the tool's own directories
/// (per-user roots, which are roots of their own, and our quarantine, whose
/// contents are already on their way out), told apart by owner and mode,
/// not by name alone: see [`crate::root`]; held while they cost at most
/// `budget` bytes (see [`listing`]). And whether any name (left out
/// or not) may hold what a killed reaper left
/// ([`remove::may_hold_leftovers`](crate::remove::may_hold_leftovers)).
pub(crate) fn list_names(
    dir: BorrowedFd<'_>,
    path: &Path,
    budget: usize,
) -> Result<(listing::Listing, bool)> {
    let mut leftovers = false;
    let names = listing::list_where(dir, path, budget, |name| {
        leftovers |= crate::remove::may_hold_leftovers(name);
        !crate::root::is_own_dir(dir, OsStr::from_bytes(name))
    })?;
    Ok((names, leftovers))
}

#[cfg(test)]
mod tests {
    use super::take_for;

    #[test]
    fn each_entry_takes_its_own_hits_and_skipped_entries_lose_theirs() {
        let hits = vec![(0, 'a'), (0, 'b'), (2, 'c'), (3, 'd'), (3, 'e'), (5, 'f')];
        let mut hits = hits.into_iter().peekable();
        assert_eq!(take_for(&mut hits, 0), ['a', 'b']);
        assert_eq!(take_for(&mut hits, 1), Vec::<char>::new());
        // Entry 2 vanished: its hit is dropped when entry 3 takes its own.
        assert_eq!(take_for(&mut hits, 3), ['d', 'e']);
        assert_eq!(take_for(&mut hits, 4), Vec::<char>::new());
        assert_eq!(take_for(&mut hits, 5), ['f']);
        assert!(hits.next().is_none());
    }
}
