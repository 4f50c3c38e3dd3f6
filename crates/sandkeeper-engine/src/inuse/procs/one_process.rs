//! The inspection of one process: its descriptors (and what an inotify,
//! fanotify or io_uring descriptor holds), working and root directories,
//! executable, mappings, threads with their own descriptor tables, and
//! mount namespace.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::{Mode, RawDir, CWD};
use rustix::io::Errno;

use super::proc_files::{
    decimal, dents_buffer, gone, list_numeric_into, parse_comm, parse_maps_line, parse_stat,
    read_at, read_record_at, resolve_no_links_timed, stat_at, stat_refused, stat_typed,
    thread_link, timed_stat, Refusal,
};
use super::{own_pid, Key, Suspect, DENTS_BUFFER, DIR_FLAGS, PF_KTHREAD, RECHECK_PAUSES};
use crate::inuse::fdinfo::{self, Anon};
use crate::inuse::mount_users;
use crate::inuse::mountinfo::{self, parse_dec};
use crate::inuse::pid_visibility;
use crate::inuse::{BlindSpotKind, Found, HoldKind, Holder, InspectStep, MountNamespace};

/// What an inotify, fanotify or io_uring descriptor `fd` of the process
/// (or thread) at `base` holds, from its `fdinfo`: watched inodes, and
/// registered files.
///
/// Registered files are named by path only (as the reader sees it), and a
/// path is attacker-controlled text: it is resolved from our root with
/// `openat2(O_PATH | O_NOFOLLOW, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
/// — no link followed, nothing opened for reading, no FIFO or device
/// touched — and matched by the inode found. The listing is read again
/// afterwards and must be unchanged. A path that cannot be resolved so
/// (renamed meanwhile, through a symlink, in a mount this process cannot
/// reach), a listing that changed, or a count of files the kernel did not
/// list (it could not take the ring's lock) makes the process
/// uninspectable: fail closed. A file listed as deleted (` (deleted)`, not
/// found) is left out: no entry holds it any more.
fn anon_holds(
    p: &mut Proc,
    base: BorrowedFd<'_>,
    fd: u32,
    kind: Anon,
    info: &mut Vec<u8>,
    found: &mut Found,
) {
    let mut name = b"fdinfo/".to_vec();
    let mut num = [0u8; 12];
    name.extend_from_slice(decimal(fd, &mut num).to_bytes());
    let Ok(name) = CString::new(name) else {
        return;
    };
    let step = InspectStep::FdInfo(fd);
    // The descriptor (or the process) may be gone meanwhile: then it holds
    // nothing. Any other failure is a failure, ENOENT of a path included.
    let reread = |info: &mut Vec<u8>, p: &mut Proc| match read_at(base, &name, info) {
        Ok(()) => true,
        Err(e) if gone(e) => false,
        Err(e) => {
            p.failed(step, e);
            false
        }
    };
    if !reread(info, p) {
        return;
    }
    match kind {
        Anon::Watches => {
            let mut keys = Vec::new();
            if fdinfo::parse_watches(info, &mut keys).is_err() {
                return p.failed(step, Errno::INVAL);
            }
            for key in keys {
                p.hold(found, key, HoldKind::Watch(fd));
            }
        }
        Anon::IoUring => {
            // Listed only when the kernel took the ring's lock: try again a
            // few times if it counted files but listed none. A listing that
            // changed while its paths were resolved is read and resolved
            // again (a ring whose files are being swapped settles within a
            // few tries); only one that never holds still fails.
            //
            // Since Linux 6.11 a ring whose lock the kernel could not take
            // shows *nothing* of itself (no `SqMask:`, no `UserFiles:`):
            // another reader of its fdinfo, or its owner busy in the ring,
            // is enough, and any user can arrange either. That is read
            // again, and fails closed, never as "no files".
            let mut tries = 0;
            loop {
                let listed = fdinfo::parse_ring_files(info).or_else(|| {
                    // Not shown: counted as holding files, none listed.
                    (!fdinfo::ring_shown(info)).then(|| (u64::MAX, Vec::new()))
                });
                let Some((count, paths)) = listed else {
                    return; // a kernel that does not list registered files
                };
                if count == 0 {
                    return;
                }
                tries += 1;
                if paths.is_empty() {
                    if tries == RING_TRIES {
                        return p.failed(step, Errno::AGAIN);
                    }
                    if !reread(info, p) {
                        return;
                    }
                    continue;
                }
                let before = fdinfo::ring_files_section(info).to_vec();
                let mut keys = Vec::with_capacity(paths.len());
                for (path, resolved) in paths.iter().zip(resolve_no_links_timed(&paths)) {
                    match resolved {
                        Ok(key) => keys.push(key),
                        Err(Errno::NOENT) if path.ends_with(b" (deleted)") => {}
                        Err(e) => return p.failed(step, e),
                    }
                }
                if !reread(info, p) {
                    return;
                }
                if fdinfo::ring_files_section(info) == before.as_slice() {
                    for key in keys {
                        p.hold(found, key, HoldKind::IoUringFile(fd));
                    }
                    return;
                }
                if tries == RING_TRIES {
                    return p.failed(step, Errno::AGAIN);
                }
            }
        }
    }
}

/// How often the registered files of one ring are read and resolved before
/// a listing that keeps changing (or is never given) counts as a failure.
const RING_TRIES: usize = 4;

/// The mount tables [`stat_refused`] looks a mount id up in, each read
/// once: the inspected process's namespace's (read again for each
/// process), and ours.
#[derive(Debug, Default)]
struct MountTables {
    holder: Option<Vec<u8>>,
    own: Option<Vec<u8>>,
}

/// The `(device, inode)` of what the magic link `name` under `dir`
/// leads to (a descriptor, working or root directory, executable of the
/// process at `base`), and whether it is an anonymous inode: `statx`
/// through the link, and where the file's filesystem refuses that
/// (`EACCES`: a FUSE mount of another user namespace), the inode
/// that [`stat_refused`] finds without asking it.
fn stat_held(
    mounts: &mut MountTables,
    base: BorrowedFd<'_>,
    dir: BorrowedFd<'_>,
    name: &CStr,
) -> Result<(Key, bool), Refusal> {
    match stat_typed(dir, name) {
        Err(Errno::ACCESS) => {}
        other => return other.map_err(Refusal::Link),
    }
    let (holder, own) = (&mut mounts.holder, &mut mounts.own);
    let mut fstype_of = |id: u64| {
        let holder = holder.get_or_insert_with(|| {
            let mut text = Vec::new();
            read_at(base, c"mountinfo", &mut text).map_or(Vec::new(), |()| text)
        });
        if let Some((fstype, _)) = pid_visibility::mount_by_id(holder, id) {
            return Some(fstype);
        }
        // A descriptor of a mount of another namespace (received, or
        // opened before a `setns`): ours is the other table at hand.
        let own = own.get_or_insert_with(|| {
            let mut text = Vec::new();
            read_at(CWD, c"/proc/thread-self/mountinfo", &mut text).map_or(Vec::new(), |()| text)
        });
        pid_visibility::mount_by_id(own, id).map(|(fstype, _)| fstype)
    };
    stat_refused(dir, name, &mut fstype_of).map(|key| (key, false))
}

/// What [`Scanner::open`] read from a process's `stat`.
struct Stat {
    comm: Arc<str>,
    state: u8,
    flags: u32,
    threads: u32,
    start: u64,
}

/// A process being inspected.
struct Proc {
    pid: u32,
    comm: Arc<str>,
    /// The first thing that could not be read, with why.
    failure: Option<Failure>,
    /// The process went away during the inspection.
    gone: bool,
}

/// What could not be read of a process, and why: the error, and whether
/// a filesystem refused a file it holds (rather than `/proc` refusing the
/// process).
#[derive(Debug, Clone, Copy)]
pub(super) struct Failure {
    pub(super) step: InspectStep,
    pub(super) errno: Errno,
    pub(super) filesystem: bool,
}

impl Proc {
    /// Records a failure to stat a held file through its magic link.
    fn fail_held(&mut self, step: InspectStep, e: Refusal) {
        match e {
            Refusal::Link(e) => self.fail(step, e),
            Refusal::Filesystem(e) => {
                if self.failure.is_none() {
                    self.failure = Some(Failure {
                        step,
                        errno: e,
                        filesystem: true,
                    });
                }
            }
        }
    }

    fn fail(&mut self, step: InspectStep, e: Errno) {
        if gone(e) {
            self.gone = true;
        } else {
            self.failed(step, e);
        }
    }

    /// Records a failure whatever the error: for steps where `ENOENT` does
    /// not mean that the process went away (a path it names is not found).
    fn failed(&mut self, step: InspectStep, e: Errno) {
        if self.failure.is_none() {
            self.failure = Some(Failure {
                step,
                errno: e,
                filesystem: false,
            });
        }
    }

    fn hold(&self, found: &mut Found, key: (u64, u64), how: HoldKind) {
        found.holds.push((
            key,
            Holder {
                pid: self.pid,
                comm: Arc::clone(&self.comm),
                how,
            },
        ));
    }
}

/// The reusable state of one scanning thread.
pub(super) struct Scanner<'p> {
    proc: BorrowedFd<'p>,
    /// `getdents64` buffer (only its capacity is used).
    dents: Vec<u8>,
    /// File contents (`stat`, `maps`, `mountinfo`).
    pub(super) text: Vec<u8>,
    /// Mapped inodes of one process.
    keys: Vec<(u64, u64)>,
    /// Thread ids of one process.
    tids: Vec<u32>,
    /// `(fd, inode)` of the descriptors in one process's table, to leave
    /// out of its threads' private tables what they share with it.
    fd_keys: Vec<(u32, Key)>,
    /// `fdinfo` contents.
    info: Vec<u8>,
    /// Mount tables for [`stat_refused`].
    mounts: MountTables,
    /// Pids in the procfs read are pids of our pid namespace, so `kcmp`
    /// may be asked about them.
    pids_are_ours: bool,
    /// The caller's mount namespace, and the others already read (shared
    /// by all threads).
    own_ns: Option<Key>,
    seen_ns: &'p Mutex<HashSet<Key>>,
    /// Processes whose inspection failed, for [`Scanner::recheck`].
    pub(super) suspects: Vec<Suspect>,
}

impl<'p> Scanner<'p> {
    pub(super) fn new(proc: BorrowedFd<'p>, seen_ns: &'p Mutex<HashSet<Key>>) -> Scanner<'p> {
        Scanner {
            proc,
            dents: Vec::with_capacity(DENTS_BUFFER),
            text: Vec::with_capacity(64 * 1024),
            keys: Vec::new(),
            tids: Vec::new(),
            fd_keys: Vec::new(),
            info: Vec::new(),
            mounts: MountTables::default(),
            pids_are_ours: own_pid(proc) == Some(std::process::id()),
            own_ns: stat_at(proc, c"self/ns/mnt", true)
                .or_else(|_| stat_at(CWD, c"/proc/self/ns/mnt", true))
                .ok(),
            seen_ns,
            suspects: Vec::new(),
        }
    }

    /// The numeric entries of a directory (pids of `/proc`, tids of
    /// `task`), into `self.tids`'s sibling: a fresh vector.
    pub(super) fn list_numeric(&mut self, dir: BorrowedFd<'_>) -> Result<Vec<u32>, Errno> {
        let mut out = Vec::new();
        list_numeric_into(dir, &mut self.dents, &mut out)?;
        Ok(out)
    }

    /// Inspects one process, recording what it holds; one that could not
    /// be inspected (and did not go away) is a suspect, looked at again by
    /// [`Scanner::recheck`].
    pub(super) fn scan(&mut self, pid: u32, found: &mut Found) {
        let Some((dir, stat)) = self.open(pid, found) else {
            return;
        };
        found.processes += 1;
        let (comm, start) = (Arc::clone(&stat.comm), stat.start);
        if let Some(failure) = self.attempt(pid, dir.as_fd(), &stat, found) {
            self.suspects.push(Suspect {
                pid,
                start,
                comm,
                failure,
            });
        }
    }

    /// Opens `/proc/PID` and reads its `stat`: `None` when the process is
    /// gone, or could not be read (then it is recorded as uninspectable).
    fn open(&mut self, pid: u32, found: &mut Found) -> Option<(OwnedFd, Stat)> {
        let mut name = [0u8; 12];
        let dir = match rustix::fs::openat(
            self.proc,
            decimal(pid, &mut name),
            DIR_FLAGS,
            Mode::empty(),
        ) {
            Ok(dir) => dir,
            Err(e) if gone(e) => return None,
            Err(e) => {
                found.uninspectable(pid, None, InspectStep::Process, e.raw_os_error());
                return None;
            }
        };
        let stat = match read_record_at(dir.as_fd(), c"stat", &mut self.text) {
            Ok(()) => Ok(parse_stat(&self.text).map(|s| Stat {
                comm: Arc::from(String::from_utf8_lossy(s.comm).as_ref()),
                state: s.state,
                flags: s.flags,
                threads: s.threads,
                start: s.start,
            })),
            Err(e) if gone(e) => return None,
            Err(e) => Err(e),
        };
        match stat {
            Ok(Some(stat)) => Some((dir, stat)),
            Ok(None) | Err(_) => {
                // Unreadable or unparsable: name it by `comm` if possible.
                let errno = stat.err().unwrap_or(Errno::INVAL).raw_os_error();
                let comm = read_at(dir.as_fd(), c"comm", &mut self.text)
                    .ok()
                    .map(|()| parse_comm(&self.text));
                found.uninspectable(pid, comm.as_deref(), InspectStep::Status, errno);
                None
            }
        }
    }

    /// One inspection of the process at `dir`: the first failure, unless
    /// it went away meanwhile. What it was seen to hold is recorded
    /// either way.
    fn attempt(
        &mut self,
        pid: u32,
        dir: BorrowedFd<'_>,
        stat: &Stat,
        found: &mut Found,
    ) -> Option<Failure> {
        self.mounts.holder = None;
        let mut p = Proc {
            pid,
            comm: Arc::clone(&stat.comm),
            failure: None,
            gone: false,
        };
        self.inspect(&mut p, dir, stat.state, stat.flags, stat.threads, found);
        match (p.gone, p.failure) {
            (false, Some(failure)) => Some(failure),
            _ => None,
        }
    }

    /// Looks again at the processes that failed their inspection during
    /// the pass, after each of [`RECHECK_PAUSES`]: a process that is gone,
    /// or whose pid now has another start time (it exited and the pid was
    /// reused), held nothing to fear; one that can now be read whole is
    /// inspected (what it holds is added); only one that failed every look
    /// is uninspectable, with its last failure.
    pub(super) fn recheck(&mut self, found: &mut Found) {
        for pause in RECHECK_PAUSES {
            if self.suspects.is_empty() {
                return;
            }
            std::thread::sleep(pause);
            let suspects = std::mem::take(&mut self.suspects);
            for mut suspect in suspects {
                let mut ignored = Found::default();
                let Some((dir, stat)) = self.open(suspect.pid, &mut ignored) else {
                    if ignored.uninspectable.is_empty() {
                        continue; // gone
                    }
                    // Now not even its stat can be read: still a suspect.
                    self.suspects.push(suspect);
                    continue;
                };
                if stat.start != suspect.start {
                    continue; // exited; the pid is another process's now
                }
                match self.attempt(suspect.pid, dir.as_fd(), &stat, found) {
                    None => {}
                    Some(failure) => {
                        suspect.comm = stat.comm;
                        suspect.failure = failure;
                        self.suspects.push(suspect);
                    }
                }
            }
        }
        for s in std::mem::take(&mut self.suspects) {
            let Failure {
                step,
                errno,
                filesystem,
            } = s.failure;
            found.uninspectable(s.pid, Some(&s.comm), step, errno.raw_os_error());
            if filesystem {
                if let Some(u) = found.uninspectable.last_mut() {
                    u.filesystem = true;
                }
            }
        }
    }

    fn inspect(
        &mut self,
        p: &mut Proc,
        dir: BorrowedFd<'_>,
        state: u8,
        flags: u32,
        threads: u32,
        found: &mut Found,
    ) {
        if flags & PF_KTHREAD != 0 {
            // A kernel thread has no descriptors, executable or mappings,
            // and holds no user file: its working and root directory are
            // the kernel's own (kthreadd's). They are recorded where they
            // can be read (root), but one that may not be read (a normal
            // user) is no reason to fail: `PF_KTHREAD` is set by the kernel
            // only, no process can claim it, so this never hides a user
            // process.
            found.kernel_threads.push(p.pid);
            let mut kernel = Proc {
                pid: p.pid,
                comm: Arc::clone(&p.comm),
                failure: None,
                gone: false,
            };
            self.link(
                &mut kernel,
                dir,
                c"cwd",
                HoldKind::Cwd,
                InspectStep::Cwd,
                found,
            );
            self.link(
                &mut kernel,
                dir,
                c"root",
                HoldKind::Root,
                InspectStep::Root,
                found,
            );
            return;
        }
        // A zombie has released its files. But if only the main thread has
        // exited, the others still hold everything: look through one of them.
        let live_thread: OwnedFd;
        let (base, base_tid) = if state == b'Z' {
            if threads <= 1 {
                return;
            }
            match self.any_other_thread(dir, p.pid) {
                Ok(Some((fd, tid))) => {
                    live_thread = fd;
                    (live_thread.as_fd(), tid)
                }
                Ok(None) => return,
                Err(e) => return p.fail(InspectStep::Threads, e),
            }
        } else {
            (dir, p.pid)
        };

        self.fd_keys.clear();
        self.fds(p, base, found, None);
        let cwd = self.link(p, base, c"cwd", HoldKind::Cwd, InspectStep::Cwd, found);
        let root = self.link(p, base, c"root", HoldKind::Root, InspectStep::Root, found);
        self.link(p, base, c"exe", HoldKind::Exe, InspectStep::Exe, found);
        if p.gone {
            return;
        }
        self.maps(p, base, found);
        if threads > 1 {
            self.threads(p, dir, base_tid, (cwd, root), found);
        }
        self.mount_namespace(p, base, found);
    }

    /// Stats a magic link (`cwd`, `root`, `exe`) and records it.
    fn link(
        &mut self,
        p: &mut Proc,
        dir: BorrowedFd<'_>,
        name: &CStr,
        how: HoldKind,
        step: InspectStep,
        found: &mut Found,
    ) -> Option<(u64, u64)> {
        match stat_held(&mut self.mounts, dir, dir, name) {
            Ok((key, _)) => {
                p.hold(found, key, how);
                Some(key)
            }
            // No such link right now (a zombie, an exiting process).
            Err(Refusal::Link(e)) if gone(e) => None,
            Err(e) => {
                p.fail_held(step, e);
                None
            }
        }
    }

    /// Every open descriptor, stat'ed through `/proc/PID/fd/N`, of the
    /// process (`thread` `None`: its table is remembered in `fd_keys`) or
    /// of one thread with a private table (what it shares with the
    /// process's is left out). Watches and registered files of inotify,
    /// fanotify and io_uring descriptors are read from `fdinfo`.
    fn fds(&mut self, p: &mut Proc, base: BorrowedFd<'_>, found: &mut Found, thread: Option<u32>) {
        let table_step = thread.map_or(InspectStep::FdTable, InspectStep::ThreadFdTable);
        let fd_dir = match rustix::fs::openat(base, c"fd", DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if thread.is_some() && gone(e) => return, // the thread exited
            Err(e) => return p.fail(table_step, e),
        };
        let mut entries = RawDir::new(fd_dir.as_fd(), dents_buffer(&mut self.dents));
        while let Some(entry) = entries.next() {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return p.fail(table_step, e),
            };
            let name = entry.file_name();
            let Some(fd) = parse_dec::<u32>(name.to_bytes()) else {
                continue; // "." and ".."
            };
            let (key, anon) = match stat_held(&mut self.mounts, base, fd_dir.as_fd(), name) {
                Ok(st) => st,
                Err(Refusal::Link(e)) if gone(e) => continue, // closed meanwhile
                Err(e) => {
                    // Access is decided per process (or per filesystem,
                    // which one descriptor is enough to show).
                    p.fail_held(
                        thread.map_or(InspectStep::Fd(fd), InspectStep::ThreadFdTable),
                        e,
                    );
                    return;
                }
            };
            match thread {
                None => {
                    self.fd_keys.push((fd, key));
                    p.hold(found, key, HoldKind::Fd(fd));
                }
                // Shared with the process's table (copied at the unshare).
                Some(_) if self.fd_keys.contains(&(fd, key)) => continue,
                Some(tid) => p.hold(found, key, HoldKind::ThreadFd(tid, fd)),
            }
            if anon {
                // Anonymous inodes have no file type; only a few kinds
                // hold other inodes.
                let kind = rustix::fs::readlinkat(fd_dir.as_fd(), name, Vec::new())
                    .ok()
                    .and_then(|link| fdinfo::anon_kind(link.as_bytes()));
                if let Some(kind) = kind {
                    anon_holds(p, base, fd, kind, &mut self.info, found);
                }
            }
        }
    }

    /// Every mapped file, from `/proc/PID/maps` (which gives device and
    /// inode, so nothing needs to be stat'ed), each inode once.
    fn maps(&mut self, p: &mut Proc, base: BorrowedFd<'_>, found: &mut Found) {
        if let Err(e) = read_at(base, c"maps", &mut self.text) {
            return p.fail(InspectStep::Maps, e);
        }
        self.keys.clear();
        self.keys
            .extend(self.text.split(|&b| b == b'\n').filter_map(parse_maps_line));
        self.keys.sort_unstable();
        self.keys.dedup();
        for &key in &self.keys {
            p.hold(found, key, HoldKind::Mmap);
        }
    }

    /// The working and root directories of the other threads, where they
    /// differ from the process's (after `unshare(CLONE_FS)`).
    fn threads(
        &mut self,
        p: &mut Proc,
        dir: BorrowedFd<'_>,
        base_tid: u32,
        (cwd, root): (Option<Key>, Option<Key>),
        found: &mut Found,
    ) {
        let task = match rustix::fs::openat(dir, c"task", DIR_FLAGS, Mode::empty()) {
            Ok(task) => task,
            Err(e) => return p.fail(InspectStep::Threads, e),
        };
        let mut tids = std::mem::take(&mut self.tids);
        tids.clear();
        if let Err(e) = list_numeric_into(task.as_fd(), &mut self.dents, &mut tids) {
            p.fail(InspectStep::Threads, e);
        }
        // Threads whose private descriptor tables were read, each distinct.
        let mut tables: Vec<u32> = Vec::new();
        for &tid in tids.iter().filter(|&&t| t != base_tid) {
            self.thread_fds(p, task.as_fd(), base_tid, tid, &mut tables, found);
            let links = [
                (&b"/cwd\0"[..], cwd, HoldKind::ThreadCwd(tid)),
                (&b"/root\0"[..], root, HoldKind::ThreadRoot(tid)),
            ];
            for (suffix, process_key, how) in links {
                let mut buf = [0u8; 24];
                let name = thread_link(tid, suffix, &mut buf);
                match stat_held(&mut self.mounts, dir, task.as_fd(), name) {
                    Ok((key, _)) if Some(key) != process_key => p.hold(found, key, how),
                    Ok(_) => {}
                    Err(Refusal::Link(e)) if gone(e) => {} // the thread exited
                    Err(e) => p.fail_held(InspectStep::Threads, e),
                }
            }
        }
        self.tids = tids;
    }

    /// The descriptors of thread `tid` if it has a descriptor table of its
    /// own (`unshare(CLONE_FILES)`), not shared with the process's (`base`)
    /// nor with one read before (`tables`): `kcmp(KCMP_FILES)` tells, so a
    /// table is read once however many threads share it. Where `kcmp`
    /// cannot tell (no `CONFIG_KCMP`, pids of another pid namespace, no
    /// access), the thread's table is read anyway.
    fn thread_fds(
        &mut self,
        p: &mut Proc,
        task: BorrowedFd<'_>,
        base: u32,
        tid: u32,
        tables: &mut Vec<u32>,
        found: &mut Found,
    ) {
        let ours = self.pids_are_ours;
        let same = |a: u32, b: u32| {
            if !ours {
                return None;
            }
            crate::sys::kcmp_files(a, b).ok()
        };
        match same(base, tid) {
            Some(true) => return,
            Some(false) => {
                if tables.iter().any(|&t| same(t, tid) == Some(true)) {
                    return;
                }
                tables.push(tid);
            }
            None => {}
        }
        let mut name = [0u8; 12];
        let dir = match rustix::fs::openat(task, decimal(tid, &mut name), DIR_FLAGS, Mode::empty())
        {
            Ok(dir) => dir,
            Err(e) if gone(e) => return,
            Err(e) => return p.fail(InspectStep::ThreadFdTable(tid), e),
        };
        self.fds(p, dir.as_fd(), found, Some(tid));
    }

    /// Reads the mounts of the process's mount namespace, the first time a
    /// process of a namespace other than ours is met.
    fn mount_namespace(&mut self, p: &mut Proc, base: BorrowedFd<'_>, found: &mut Found) {
        let Some(own) = self.own_ns else {
            return; // cannot tell namespaces apart: ours is all we know
        };
        let ns = match stat_at(base, c"ns/mnt", true) {
            Ok(ns) => ns,
            Err(e) => return p.fail(InspectStep::Mounts, e),
        };
        if ns == own {
            return;
        }
        // Held while reading, so that each namespace is read once.
        let mut seen = self.seen_ns.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(&ns) {
            return;
        }
        if let Err(e) = read_at(base, c"mountinfo", &mut self.text) {
            return p.fail(InspectStep::Mounts, e);
        }
        seen.insert(ns);
        drop(seen);
        let lines = mountinfo::parse_mountinfo(&self.text);
        // Paths of that namespace are relative to the process's root.
        let mut unanswered = Vec::new();
        let pid = p.pid;
        let mut stat_there = |path: &[u8], follow: bool| {
            if path.first() != Some(&b'/') {
                return None;
            }
            let mut rel = Vec::with_capacity(path.len() + 5);
            rel.extend_from_slice(b"root");
            rel.extend_from_slice(path);
            let rel = CString::new(rel).ok()?;
            if !follow {
                return stat_at(base, &rel, false).ok();
            }
            let base = rustix::io::fcntl_dupfd_cloexec(base, 0).ok()?;
            let mut topic = path.to_vec();
            topic.extend_from_slice(format!(" in the mount namespace of pid {pid}").as_bytes());
            timed_stat(Some(base), rel, topic, &mut unanswered)
        };
        let namespace = MountNamespace::Of { pid };
        mount_users::kernel_uses(&lines, namespace, &mut stat_there, &mut found.kernel);
        for topic in unanswered {
            found.blind_spot_about(BlindSpotKind::UnansweredLookup, None, &topic);
        }
    }

    /// Opens `/proc/PID/task/TID` for some thread other than the main one.
    fn any_other_thread(
        &mut self,
        dir: BorrowedFd<'_>,
        pid: u32,
    ) -> Result<Option<(OwnedFd, u32)>, Errno> {
        let task = rustix::fs::openat(dir, c"task", DIR_FLAGS, Mode::empty())?;
        let mut tids = std::mem::take(&mut self.tids);
        tids.clear();
        let listed = list_numeric_into(task.as_fd(), &mut self.dents, &mut tids);
        let mut result = listed.map(|()| None);
        for &tid in tids.iter().filter(|&&t| t != pid) {
            let mut name = [0u8; 12];
            match rustix::fs::openat(&task, decimal(tid, &mut name), DIR_FLAGS, Mode::empty()) {
                Ok(fd) => {
                    result = Ok(Some((fd, tid)));
                    break;
                }
                Err(e) if gone(e) => continue,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.tids = tids;
        result
    }
}
