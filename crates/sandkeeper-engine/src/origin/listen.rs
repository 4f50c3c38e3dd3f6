//! The fanotify listener: one thread per watched root.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::FileType;
use rustix::io::Errno;

use super::{capture, entry, has_xattrs, store_path, write_fd, Origin, Recorder, Store, Written};
use crate::error::{IoResultExt, Result};
use crate::root::Root;
use crate::sys::fanotify as fan;

/// What a [`Tracker`] did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrackerStats {
    /// Creation events for the root's direct children.
    pub events: u64,
    /// Records written.
    pub recorded: u64,
    /// Of those, creators that exited before they could be read.
    pub exited: u64,
    /// Entries that had a record already (kept).
    pub already: u64,
    /// Entries gone, or replaced by another inode, before the event was
    /// read: nothing recorded.
    pub vanished: u64,
    /// Entries that could not take a record (a symlink, a hard link to a
    /// file elsewhere, no `trusted.*` attributes, another error).
    pub failed: u64,
    /// Entries their creator did not make, as far as the tracker can tell:
    /// an inode owned by someone else than the creator's real, effective
    /// or filesystem uid (moved or linked in), or, from a creator that
    /// could not be read, anything but a new directory. Nothing is written
    /// on them.
    pub not_made: u64,
    /// Queue overflows: the kernel dropped events (its queue holds 16384),
    /// so some entries of that moment have no origin.
    pub overflows: u64,
}

#[derive(Default)]
struct Counters {
    events: AtomicU64,
    recorded: AtomicU64,
    exited: AtomicU64,
    already: AtomicU64,
    vanished: AtomicU64,
    failed: AtomicU64,
    not_made: AtomicU64,
    overflows: AtomicU64,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    paused: AtomicBool,
    /// The thread's answer to a pause: it reads nothing until resumed.
    pause_seen: Mutex<bool>,
    pause_cv: Condvar,
    counters: Counters,
    /// (drains asked for, drains done).
    drain: Mutex<(u64, u64)>,
    drained: Condvar,
}

/// A root watched for new entries, whose creators are recorded as they
/// appear; stops when dropped.
///
/// ```no_run
/// let root = sandkeeper_engine::root::Root::open_exact("/tmp".as_ref())?;
/// let tracker = sandkeeper_engine::origin::Tracker::start(&root)?;
/// std::fs::create_dir("/tmp/app-1")?;
/// tracker.drain();
/// assert!(sandkeeper_engine::origin::read(root.fd(), "app-1".as_ref()).is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Tracker {
    path: PathBuf,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The store, when the root's filesystem has no `trusted.*`
    /// attributes, and the root (for [`prune`](Self::prune)).
    store: Option<(Arc<Store>, OwnedFd)>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker").field("path", &self.path).finish()
    }
}

impl Tracker {
    /// Starts watching `root` (its directory itself: direct children only).
    /// On a filesystem without `trusted.*` attributes the records go to the
    /// [`Store`] at [`store_path`]`(None)`.
    ///
    /// # Errors
    ///
    /// `PermissionDenied` without `CAP_SYS_ADMIN`; `Unsupported` on a
    /// kernel or filesystem without fanotify's directory events; each
    /// naming the root. Where the store is needed: why it cannot be used
    /// ([`Store::open`]).
    pub fn start(root: &Root) -> Result<Tracker> {
        Tracker::start_with_store(root, &store_path(None))
    }

    /// As [`start`](Self::start), with the store (where needed) at
    /// `store` (the config's `origin_store`).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with_store(root: &Root, store: &Path) -> Result<Tracker> {
        let path = root.path().to_owned();
        let store = match has_xattrs(root.fd()) {
            true => None,
            false => Some(Arc::new(Store::open(store)?)),
        };
        // The richest reporting the kernel offers: the new entry's own
        // handle (5.17) and a pidfd (5.15), else less.
        let group = match [(true, true), (false, true)]
            .iter()
            .find_map(|&(target, pidfd)| fan::fanotify_init(target, pidfd).ok())
        {
            Some(g) => g,
            None => fan::fanotify_init(false, false).with_path(
                "cannot start fanotify (tracking origins needs root) for",
                || path.clone(),
            )?,
        };
        fan::mark_creates(group.as_fd(), root.fd())
            .with_path("cannot watch with fanotify", || path.clone())?;
        let handle = fan::file_handle(root.fd())
            .with_path("cannot take the file handle of", || path.clone())?;
        let root_fd = root
            .fd()
            .try_clone_to_owned()
            .with_path("cannot duplicate the descriptor of", || path.clone())?;
        let store = match store {
            Some(s) => Some((
                s,
                root.fd()
                    .try_clone_to_owned()
                    .with_path("cannot duplicate the descriptor of", || path.clone())?,
            )),
            None => None,
        };
        let shared = Arc::new(Shared::default());
        let worker = Arc::clone(&shared);
        let worker_store = store.as_ref().map(|(s, _)| Arc::clone(s));
        let thread = std::thread::Builder::new()
            .name("sandkeeper-origins".into())
            .spawn(move || listen(&group, &root_fd, &handle, &worker, worker_store.as_deref()))
            .with_path("cannot start the origin thread for", || path.clone())?;
        Ok(Tracker {
            path,
            shared,
            thread: Some(thread),
            store,
        })
    }

    /// The store this tracker records in, when the root's filesystem has
    /// no `trusted.*` attributes.
    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref().map(|(s, _)| &**s)
    }

    /// Drops the store's records of entries that are gone (or are other
    /// entries now); `Ok(0)` for a root whose records are attributes
    /// (they go with their entries). `watch` does this on each pass.
    ///
    /// # Errors
    ///
    /// When the store file cannot be locked or written.
    pub fn prune(&self) -> Result<usize> {
        match &self.store {
            Some((store, root)) => store.prune(root.as_fd()),
            None => Ok(0),
        }
    }

    /// The root watched.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The counts so far.
    pub fn stats(&self) -> TrackerStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TrackerStats {
            events: get(&c.events),
            recorded: get(&c.recorded),
            exited: get(&c.exited),
            already: get(&c.already),
            vanished: get(&c.vanished),
            failed: get(&c.failed),
            not_made: get(&c.not_made),
            overflows: get(&c.overflows),
        }
    }

    /// Stops (or resumes) reading events; meanwhile they wait in the
    /// kernel's queue (up to its limit, then [`TrackerStats::overflows`]).
    /// A pause returns once the thread has stopped reading: no event of
    /// an entry made after it is read before the resume. For tests and
    /// benchmarks: a paused tracker reads creators late.
    pub fn set_paused(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::SeqCst);
        if !paused {
            return;
        }
        let mut seen = self
            .shared
            .pause_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        while !*seen && !self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            seen = self
                .shared
                .pause_cv
                .wait_timeout(seen, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits until every event queued before this call is handled
    /// (returns at once while paused or stopped).
    pub fn drain(&self) {
        if self.shared.paused.load(Ordering::Relaxed) || self.thread.is_none() {
            return;
        }
        let mut state = self.shared.drain.lock().unwrap_or_else(|p| p.into_inner());
        state.0 += 1;
        let want = state.0;
        while state.1 < want && !self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            state = self
                .shared
                .drained
                .wait_timeout(state, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Stops watching, after the events already read are handled.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The thread: read, handle, until stopped.
fn listen(
    group: &OwnedFd,
    root: &OwnedFd,
    handle: &(i32, Vec<u8>),
    shared: &Shared,
    store: Option<&Store>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let tick = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 50_000_000,
    };
    while !shared.stop.load(Ordering::Relaxed) {
        if let Ok(mut seen) = shared.pause_seen.lock() {
            *seen = shared.paused.load(Ordering::SeqCst);
            shared.pause_cv.notify_all();
            if *seen {
                drop(seen);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        let mut fds = [PollFd::new(group, PollFlags::IN)];
        let _ = poll(&mut fds, Some(&tick));
        // Read until empty (non-blocking), then tell waiting drains.
        let asked = shared.drain.lock().map(|s| s.0).unwrap_or(0);
        loop {
            match rustix::io::read(group, &mut buf[..]) {
                Ok(0) => break,
                Ok(n) => {
                    // A creator read once per buffer: a burst from one
                    // process costs one `/proc` read per read(2).
                    let mut batch = Batch {
                        to_store: store.is_some(),
                        ..Batch::default()
                    };
                    parse(&buf[..n], &mut |ev| {
                        handle_event(ev, root.as_fd(), handle, shared, &mut batch)
                    });
                    if let Some(store) = store {
                        // One write of the store file per read(2).
                        flush(store, root.as_fd(), &mut batch, &shared.counters);
                    }
                }
                Err(Errno::INTR) => continue,
                Err(_) => break, // EAGAIN: empty
            }
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
        }
        if let Ok(mut s) = shared.drain.lock() {
            s.1 = s.1.max(asked);
            shared.drained.notify_all();
        }
    }
}

/// A creator as read, and its uids when it could be read.
type Read = (super::Creator, Option<capture::Uids>);

/// The creators read for one buffer of events: (pid, its pidfd, what was
/// read). Reused only while that pidfd shows the process alive, so a pid
/// is never matched to a later process; at most a few.
#[derive(Default)]
struct Batch {
    seen: Vec<(u32, OwnedFd, Read)>,
    /// Whether records go to the store (no `trusted.*` attributes).
    to_store: bool,
    /// The records for the store, written together after the buffer.
    pending: Vec<(Vec<u8>, super::store::Born, Origin)>,
}

/// Writes the batch's records to the store, and counts them.
fn flush(store: &Store, root: BorrowedFd<'_>, batch: &mut Batch, c: &Counters) {
    let pending = std::mem::take(&mut batch.pending);
    if pending.is_empty() {
        return;
    }
    let exited: Vec<bool> = pending
        .iter()
        .map(|(_, _, o)| matches!(o.creator, super::Creator::Exited { .. }))
        .collect();
    let n = pending.len() as u64;
    match store.put(root, pending) {
        Ok(written) => {
            for (w, exited) in written.into_iter().zip(exited) {
                match w {
                    Written::Recorded => {
                        c.recorded.fetch_add(1, Ordering::Relaxed);
                        if exited {
                            c.exited.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Written::AlreadyRecorded => {
                        c.already.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        Err(_) => {
            c.failed.fetch_add(n, Ordering::Relaxed);
        }
    }
}

impl Batch {
    const MAX: usize = 8;

    fn creator(&mut self, pid: u32, pidfd: Option<OwnedFd>) -> Read {
        if let Some((_, fd, c)) = self.seen.iter().find(|(p, _, _)| *p == pid) {
            if !capture::exited(fd.as_fd()) {
                return c.clone();
            }
        }
        let Some(fd) = pidfd else {
            return capture::capture(pid, None);
        };
        let keep = fd.try_clone().ok();
        let creator = capture::capture(pid, Some(fd));
        if let (Some(fd), (super::Creator::Process(_), _)) = (keep, &creator) {
            self.seen.retain(|(p, _, _)| *p != pid);
            if self.seen.len() >= Self::MAX {
                self.seen.remove(0);
            }
            self.seen.push((pid, fd, creator.clone()));
        }
        creator
    }
}

/// One event, as parsed from the buffer.
pub(crate) struct Event<'a> {
    mask: u64,
    pid: i32,
    dir: Option<Handle<'a>>,
    name: Option<&'a [u8]>,
    target: Option<Handle<'a>>,
    pidfd: Option<OwnedFd>,
    /// Whether the event had a pidfd record (the group asked for them):
    /// then a missing pidfd means the creator is gone, and its pid is
    /// never opened again (it may be another process's by now).
    pidfd_reported: bool,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// `fsid` (8 bytes), then `struct file_handle`: its type and bytes, and
/// what follows it.
/// A file handle in an event: its type and bytes.
type Handle<'a> = (i32, &'a [u8]);

fn file_handle(b: &[u8]) -> Option<(Handle<'_>, &[u8])> {
    let len = u32_at(b, 8)? as usize;
    let kind = i32_at(b, 12)?;
    let bytes = b.get(16..16 + len)?;
    Some(((kind, bytes), &b[16 + len..]))
}

/// Parses a buffer of fanotify events (fanotify(7)); every descriptor in
/// it is owned (and closed) whether or not the event is used.
pub(crate) fn parse<'a>(buf: &'a [u8], each: &mut dyn FnMut(Event<'a>)) {
    const META: usize = 24;
    let mut off = 0;
    while off + META <= buf.len() {
        let (Some(len), Some(meta_len)) = (u32_at(buf, off), u16_at(buf, off + 6)) else {
            return;
        };
        let (len, meta_len) = (len as usize, meta_len as usize);
        if buf[off + 4] != libc::FANOTIFY_METADATA_VERSION
            || len < META
            || meta_len < META
            || meta_len > len
            || off + len > buf.len()
        {
            return;
        }
        let ev = &buf[off..off + len];
        let mut event = Event {
            mask: u64_at(ev, 8).unwrap_or(0),
            pid: i32_at(ev, 20).unwrap_or(0),
            dir: None,
            name: None,
            target: None,
            pidfd: None,
            pidfd_reported: false,
        };
        // With fid reporting, `fd` is FAN_NOFD; own anything else.
        drop(fan::own_event_fd(i32_at(ev, 16).unwrap_or(-1)));
        let mut info = &ev[meta_len..];
        while info.len() >= 4 {
            let kind = info[0];
            let ilen = u16_at(info, 2).unwrap_or(0) as usize;
            if ilen < 4 || ilen > info.len() {
                break;
            }
            let body = &info[4..ilen];
            match kind {
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME => {
                    if let Some((h, rest)) = file_handle(body) {
                        event.dir = Some(h);
                        let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
                        event.name = Some(&rest[..end]);
                    }
                }
                libc::FAN_EVENT_INFO_TYPE_FID => {
                    event.target = file_handle(body).map(|(h, _)| h);
                }
                libc::FAN_EVENT_INFO_TYPE_PIDFD => {
                    event.pidfd_reported = true;
                    event.pidfd = i32_at(body, 0).and_then(fan::own_event_fd);
                }
                _ => {}
            }
            info = &info[ilen..];
        }
        each(event);
        off += len;
    }
}

fn handle_event(
    ev: Event<'_>,
    root: BorrowedFd<'_>,
    handle: &(i32, Vec<u8>),
    shared: &Shared,
    batch: &mut Batch,
) {
    let c = &shared.counters;
    if ev.mask & libc::FAN_Q_OVERFLOW != 0 {
        c.overflows.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // Only the root directory itself: its direct children.
    let (Some((kind, bytes)), Some(name)) = (ev.dir, ev.name) else {
        return;
    };
    if kind != handle.0 || bytes != handle.1.as_slice() {
        return;
    }
    let name = OsStr::from_bytes(name);
    let pid = u32::try_from(ev.pid).unwrap_or(0);
    if pid == std::process::id() {
        return; // this process's own quarantine and moves
    }
    c.events.fetch_add(1, Ordering::Relaxed);
    let (creator, uids) = match (ev.pidfd, ev.pidfd_reported) {
        // FAN_NOPIDFD / FAN_EPIDFD: exited (and reaped) before the event
        // was read.
        (None, true) if pid != 0 => (super::Creator::Exited { pid: Some(pid) }, None),
        (pidfd, _) => batch.creator(pid, pidfd),
    };
    let Ok((fd, ino)) = entry(root, name) else {
        c.vanished.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // The name may have been replaced since: only the inode the event
    // was about gets its creator.
    if let Some((tkind, tbytes)) = ev.target {
        match fan::file_handle(fd.as_fd()) {
            Ok((k, b)) if k == tkind && b == tbytes => {}
            _ => {
                c.vanished.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
    let Ok(st) = rustix::fs::fstat(&fd) else {
        c.vanished.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if !made_by(&st, uids, ev.mask, ev.target.is_some()) {
        c.not_made.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if batch.to_store {
        // The entry's birth now (no descriptor is held until the flush).
        let Ok((_, born)) = super::store::identity(fd.as_fd()) else {
            c.vanished.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let origin = Origin::now(ino, Recorder::Watch, creator);
        batch.pending.push((name.as_bytes().to_vec(), born, origin));
        return;
    }
    let exited = matches!(creator, super::Creator::Exited { .. });
    match write_fd(fd.as_fd(), ino, Recorder::Watch, creator) {
        Ok(Written::Recorded) => {
            c.recorded.fetch_add(1, Ordering::Relaxed);
            if exited {
                c.exited.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(Written::AlreadyRecorded) => {
            c.already.fetch_add(1, Ordering::Relaxed);
        }
        Err(Errno::NOENT) => {
            c.vanished.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether the entry (as `st`, through the very descriptor a record is
/// written through) is what the event's process made, so that a record
/// may be written on it: the tracker never writes on an inode someone
/// else made (issue 25).
///
/// - A creator that was read (`uids`): the inode is owned by its real,
///   effective or filesystem uid (a new inode is owned by the maker's
///   filesystem uid; a user's process moving or linking in an inode of
///   root's is not root), and a file has no other name (a hard link made
///   into the root names an inode made elsewhere).
/// - A creator that could not be read (exited first, or in a PID namespace
///   this watcher cannot see): only a directory from `FAN_CREATE` whose
///   own handle the event carried (`checked`, Linux 5.17) — `mkdir` always
///   makes a new inode, its maker's; a file's `FAN_CREATE` may be a
///   `link(2)` of someone else's inode, whose first name is gone since.
fn made_by(st: &rustix::fs::Stat, uids: Option<capture::Uids>, mask: u64, checked: bool) -> bool {
    let dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
    match uids {
        Some(uids) => uids.own(st.st_uid) && (dir || st.st_nlink <= 1),
        None => dir && mask & libc::FAN_CREATE != 0 && checked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event as the kernel writes it: metadata, a DFID_NAME record
    /// (fsid, handle of 8 bytes, "app-1\0"), a PIDFD record of
    /// FAN_NOPIDFD.
    #[test]
    fn parse_reads_name_handle_and_missing_pidfd() {
        let mut dfid = vec![libc::FAN_EVENT_INFO_TYPE_DFID_NAME, 0, 0, 0];
        dfid.extend([0u8; 8]); // fsid
        dfid.extend(8u32.to_ne_bytes());
        dfid.extend(1i32.to_ne_bytes());
        dfid.extend([7u8; 8]);
        dfid.extend(b"app-1\0");
        while dfid.len() % 4 != 0 {
            dfid.push(0);
        }
        let len = dfid.len() as u16;
        dfid[2..4].copy_from_slice(&len.to_ne_bytes());
        let mut pidfd = vec![libc::FAN_EVENT_INFO_TYPE_PIDFD, 0, 8, 0];
        pidfd.extend((-1i32).to_ne_bytes());
        let mut ev = vec![0u8; 24];
        let total = (24 + dfid.len() + pidfd.len()) as u32;
        ev[0..4].copy_from_slice(&total.to_ne_bytes());
        ev[4] = libc::FANOTIFY_METADATA_VERSION;
        ev[6..8].copy_from_slice(&24u16.to_ne_bytes());
        ev[8..16].copy_from_slice(&libc::FAN_CREATE.to_ne_bytes());
        ev[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        ev[20..24].copy_from_slice(&42i32.to_ne_bytes());
        ev.extend(dfid);
        ev.extend(pidfd);
        let mut seen = 0;
        parse(&ev, &mut |e| {
            seen += 1;
            assert_eq!(e.name, Some(&b"app-1"[..]));
            assert_eq!(e.dir, Some((1, &[7u8; 8][..])));
            assert_eq!(e.pid, 42);
            assert!(e.pidfd.is_none() && e.pidfd_reported);
        });
        assert_eq!(seen, 1);
    }

    #[test]
    fn parse_survives_garbage() {
        let cases: &[(&str, Vec<u8>)] = &[
            ("empty", vec![]),
            ("short", vec![1, 2, 3]),
            ("len past end", {
                let mut b = vec![0u8; 24];
                b[0..4].copy_from_slice(&1000u32.to_ne_bytes());
                b[4] = libc::FANOTIFY_METADATA_VERSION;
                b[6..8].copy_from_slice(&24u16.to_ne_bytes());
                b
            }),
            ("info len zero", {
                let mut b = vec![0u8; 32];
                b[0..4].copy_from_slice(&32u32.to_ne_bytes());
                b[4] = libc::FANOTIFY_METADATA_VERSION;
                b[6..8].copy_from_slice(&24u16.to_ne_bytes());
                b[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
                b[24] = libc::FAN_EVENT_INFO_TYPE_DFID_NAME;
                b
            }),
        ];
        for (name, buf) in cases {
            let mut n = 0;
            parse(buf, &mut |e| {
                n += 1;
                assert!(e.name.is_none(), "{name}");
            });
            assert!(n <= 1, "{name}");
        }
    }
}
