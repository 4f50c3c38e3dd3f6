//! The pass over `/proc/[0-9]*`: descriptors, working and root
//! directories, executables, mappings, threads and mount namespaces.
//!
//! Everything is relative to directory descriptors (`/proc`, `/proc/PID`,
//! `/proc/PID/fd`), with reused buffers, so a descriptor costs one
//! `getdents64` share and one `statx`, and no allocation.
//!
//! A process whose inspection fails (one caught mid-`exec`, exiting,
//! churning threads or its io_uring files) is looked at again after the
//! pass, a few times with short pauses ([`RECHECK_PAUSES`]), if it still has
//! the same pid and start time; only one that fails every look is
//! uninspectable.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::{AtFlags, Mode, OFlags, RawDir, StatxFlags, CWD};
use rustix::io::Errno;

use super::fdinfo::{self, Anon};
use super::mounts::{self, makedev, parse_dec, parse_dev};
use super::visibility::{self, PROC_PID_INIT_INO, PROC_USER_INIT_INO};
use super::{Found, HoldKind, Holder, InspectStep, MountNamespace};
use crate::error::{Error, ErrorKind, IoResultExt, Result};

/// A `(device, inode)` pair.
type Key = (u64, u64);

/// `PF_KTHREAD` in the flags of `/proc/PID/stat`: a kernel thread.
const PF_KTHREAD: u32 = 0x0020_0000;

/// Size of the `getdents64` buffer: a few hundred entries per call.
const DENTS_BUFFER: usize = 32 * 1024;

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOFOLLOW);

/// One pass: the caller's mounts, then every process.
pub(super) fn collect(proc_root: &Path, include_self: bool, threads: usize) -> Result<Found> {
    let proc = rustix::fs::open(proc_root, DIR_FLAGS, Mode::empty())
        .with_path("cannot open procfs", || proc_root)?;
    let is_procfs = rustix::fs::fstatfs(&proc)
        .with_path("cannot open procfs", || proc_root)?
        .f_type
        == rustix::fs::PROC_SUPER_MAGIC;
    if !is_procfs {
        return Err(Error::new(
            ErrorKind::Io,
            "not a procfs: processes cannot be inspected through it",
        )
        .at(proc_root)
        .with_hint("give the mount point of a procfs, such as /proc"));
    }
    let mut found = Found::default();
    let seen_ns = Mutex::new(HashSet::new());
    let mut scanner = Scanner::new(proc.as_fd(), &seen_ns);

    // The caller's own mount namespace.
    read_self(proc.as_fd(), c"mountinfo", &mut scanner.text)
        .with_path("cannot read mount table", || {
            proc_root.join("self/mountinfo")
        })?;
    let own_mounts = mounts::parse_mountinfo(&scanner.text);
    // Whether that procfs lists every process that can reach the roots.
    let facts = visibility_facts(proc.as_fd(), &scanner.text);
    found.visibility(visibility::decide(&facts, in_group));
    let mut unanswered = Vec::new();
    let mut stat_own = |path: &[u8], follow: bool| {
        let name = CString::new(path).ok()?;
        if !follow {
            // A mount point: the kernel's own path, not through a mount
            // that may not answer (see `mounts::kernel_uses`).
            return stat_at(CWD, &name, false).ok();
        }
        timed_stat(None, name, path.to_vec(), &mut unanswered)
    };
    mounts::kernel_uses(
        &own_mounts,
        MountNamespace::Own,
        &mut stat_own,
        &mut found.kernel,
    );
    for path in unanswered {
        found.blind_spot_about(super::BlindSpotKind::UnansweredLookup, None, &path);
    }
    // Loop devices, sockets and namespaces without a process: see
    // `super::namespaces`, after this pass.

    // Every process, shared out among `threads` workers (the calling thread
    // among them): each process is inspected independently.
    let self_pid = if include_self {
        None
    } else {
        own_pid(proc.as_fd())
    };
    let mut pids = scanner
        .list_numeric(proc.as_fd())
        .with_path("cannot list procfs", || proc_root)?;
    pids.retain(|&pid| Some(pid) != self_pid);
    let workers = threads.clamp(1, pids.len() / PIDS_PER_WORKER + 1);
    let next = AtomicUsize::new(0);
    let work = |scanner: &mut Scanner<'_>, found: &mut Found| {
        while let Some(&pid) = pids.get(next.fetch_add(1, Ordering::Relaxed)) {
            scanner.scan(pid, found);
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..workers)
            .filter_map(|_| {
                // A thread that cannot be started leaves its share to the
                // others.
                std::thread::Builder::new()
                    .name("sandkeeper-inuse".into())
                    .spawn_scoped(scope, || {
                        let mut scanner = Scanner::new(proc.as_fd(), &seen_ns);
                        let mut found = Found::default();
                        work(&mut scanner, &mut found);
                        (found, scanner.suspects)
                    })
                    .ok()
            })
            .collect();
        work(&mut scanner, &mut found);
        for helper in helpers {
            match helper.join() {
                Ok((part, suspects)) => {
                    found.merge(part);
                    scanner.suspects.extend(suspects);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    scanner.recheck(&mut found);
    Ok(found)
}

/// The pauses before each new look at the processes that failed an
/// inspection: a process caught changing (mid-`exec`, exiting, churning
/// threads or its io_uring files) is readable again a moment later. At most
/// 40 ms of pauses per pass, however many processes failed.
pub(super) const RECHECK_PAUSES: [std::time::Duration; 5] = [
    std::time::Duration::from_millis(1),
    std::time::Duration::from_millis(2),
    std::time::Duration::from_millis(5),
    std::time::Duration::from_millis(10),
    std::time::Duration::from_millis(22),
];

/// A process whose inspection failed, to look at again after the pass.
struct Suspect {
    pid: u32,
    /// Field 22 of its `stat`: a process with the same pid and another
    /// start time is another process.
    start: u64,
    comm: Arc<str>,
    step: InspectStep,
    errno: Errno,
}

/// Below this many processes per worker, another thread costs more than
/// it saves.
const PIDS_PER_WORKER: usize = 32;

/// The number of scanning threads for `threads(0)`: the available
/// parallelism, at most 4.
pub(super) fn auto_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// What [`visibility::decide`] needs to know about the opened procfs
/// `proc` and the caller, given the caller's own `mountinfo`.
fn visibility_facts(proc: BorrowedFd<'_>, own_mountinfo: &[u8]) -> visibility::Facts {
    let shows_self = own_pid(proc) == Some(std::process::id());
    // Our namespaces, through this procfs if it lists us, else /proc.
    let open_ns = |name: &CStr| {
        let mut rel = b"self/ns/".to_vec();
        rel.extend_from_slice(name.to_bytes());
        let rel = CString::new(rel).ok()?;
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        if shows_self {
            rustix::fs::openat(proc, &rel, flags, Mode::empty()).ok()
        } else {
            let mut abs = b"/proc/".to_vec();
            abs.extend_from_slice(rel.as_bytes());
            let abs = CString::new(abs).ok()?;
            rustix::fs::open(&abs, flags, Mode::empty()).ok()
        }
    };
    let ns = |name: &CStr, init: u64| is_namespace(open_ns(name)?.as_fd(), init);
    // A listed process of the initial pid namespace proves the procfs is
    // that namespace's (pid 1, or 2 where pid 1 may not be inspected).
    let lists_init_process = [c"1/ns/pid", c"2/ns/pid"].iter().any(|name| {
        rustix::fs::openat(proc, *name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .ok()
            .and_then(|fd| is_namespace(fd.as_fd(), PROC_PID_INIT_INO))
            == Some(true)
    });
    let pid_ns_owned_by_init_user = open_ns(c"pid")
        .and_then(|pid_ns| crate::sys::ns_owner(pid_ns.as_fd()).ok())
        .and_then(|owner| is_namespace(owner.as_fd(), PROC_USER_INIT_INO));
    // The options of exactly the mount opened, by its mount id.
    let options = mount_id(proc)
        .and_then(|id| visibility::mount_by_id(own_mountinfo, id))
        .filter(|(fstype, _)| fstype == b"proc")
        .map(|(_, options)| visibility::parse_proc_options(&options));
    visibility::Facts {
        init_pid_ns: ns(c"pid", PROC_PID_INIT_INO),
        init_user_ns: ns(c"user", PROC_USER_INIT_INO),
        pid_ns_owned_by_init_user,
        shows_self,
        lists_init_process,
        options,
    }
}

/// The mount id of the mount `fd` is on: `statx` `STATX_MNT_ID` (Linux
/// 5.8), else the `mnt_id:` line of our own `/proc/self/fdinfo/FD` (3.15).
fn mount_id(fd: BorrowedFd<'_>) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let st = rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID).ok();
    if let Some(st) = st.filter(|st| st.stx_mask & StatxFlags::MNT_ID.bits() != 0) {
        return Some(st.stx_mnt_id);
    }
    let path = CString::new(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    let mut text = Vec::new();
    read_at(CWD, &path, &mut text).ok()?;
    text.split(|&b| b == b'\n').find_map(|line| {
        let v = line.strip_prefix(b"mnt_id:")?;
        std::str::from_utf8(v).ok()?.trim().parse().ok()
    })
}

/// Whether the namespace file `fd` is the initial namespace with the fixed
/// inode number `init`: `None` when it is not a namespace file at all.
fn is_namespace(fd: BorrowedFd<'_>, init: u64) -> Option<bool> {
    /// `NSFS_MAGIC` from `<linux/magic.h>`.
    const NSFS_MAGIC: u64 = 0x6e73_6673;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)] // the type varies by target
    let fs_type = rustix::fs::fstatfs(fd).ok()?.f_type as u64;
    if fs_type != NSFS_MAGIC {
        return None;
    }
    #[allow(clippy::useless_conversion)] // the type varies by target
    let ino = u64::from(rustix::fs::fstat(fd).ok()?.st_ino);
    Some(ino == init)
}

/// Whether the caller is in group `gid` (as the kernel's `in_group_p`:
/// the filesystem group or a supplementary group).
fn in_group(gid: u32) -> bool {
    let fsgid = rustix::process::getegid().as_raw();
    fsgid == gid
        || rustix::process::getgroups()
            .map(|groups| groups.iter().any(|g| g.as_raw() == gid))
            .unwrap_or(false)
}

/// The caller's pid as the procfs at hand sees it (`readlink self`).
///
/// `None` when that procfs does not show the caller (one of another pid
/// namespace): then nothing is left out, rather than a stranger who
/// happens to have our pid number there.
fn own_pid(proc: BorrowedFd<'_>) -> Option<u32> {
    let target = rustix::fs::readlinkat(proc, c"self", Vec::new()).ok()?;
    parse_dec(target.as_bytes())
}

/// Reads `self/<name>` of the procfs at hand into `buf`, or the caller's
/// own `/proc/self/<name>` when that procfs does not show the caller.
fn read_self(proc: BorrowedFd<'_>, name: &CStr, buf: &mut Vec<u8>) -> Result<(), Errno> {
    let mut rel = b"self/".to_vec();
    rel.extend_from_slice(name.to_bytes());
    let rel = CString::new(rel).map_err(|_| Errno::INVAL)?;
    match read_at(proc, &rel, buf) {
        Err(Errno::NOENT) => {
            let mut abs = b"/proc/self/".to_vec();
            abs.extend_from_slice(name.to_bytes());
            let abs = CString::new(abs).map_err(|_| Errno::INVAL)?;
            read_at(CWD, &abs, buf)
        }
        other => other,
    }
}

/// Whether an error means the process (or descriptor) went away.
fn gone(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::SRCH)
}

/// `statx(dir, name, AT_STATX_DONT_SYNC | AT_NO_AUTOMOUNT)`—the
/// `(device, inode)` of `name`, following a final symlink (or magic link
/// such as `/proc/PID/fd/N`) only when `follow` is set.
///
/// `AT_STATX_DONT_SYNC` lets network and FUSE filesystems answer from their
/// caches rather than block on a server; `AT_NO_AUTOMOUNT` keeps automount
/// points from being triggered.
///
/// # References
///
/// - [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html)
fn stat_at(dir: BorrowedFd<'_>, name: &CStr, follow: bool) -> Result<(u64, u64), Errno> {
    let mut flags = AtFlags::STATX_DONT_SYNC | AtFlags::NO_AUTOMOUNT;
    if !follow {
        flags |= AtFlags::SYMLINK_NOFOLLOW;
    }
    match rustix::fs::statx(dir, name, flags, StatxFlags::INO) {
        Ok(st) => Ok((makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino)),
        // Kernels before 4.11 have no statx; fstatat knows no DONT_SYNC.
        Err(Errno::NOSYS) => {
            let st = rustix::fs::statat(dir, name, flags - AtFlags::STATX_DONT_SYNC)?;
            #[allow(clippy::useless_conversion)] // the field types vary by target
            Ok((u64::from(st.st_dev), u64::from(st.st_ino)))
        }
        Err(e) => Err(e),
    }
}

/// [`stat_at`] of `name` (relative to `dir`, else absolute), following a
/// final symlink, on the [`deadline`](super::deadline) worker: a mount
/// source is text its mounter chose, and a symlink on the way may lead
/// into a filesystem that does not answer. Not answered within
/// [`deadline::LIMIT`](super::deadline::LIMIT) (or stuck since an earlier
/// call about the same `topic`), `topic` is added to `unanswered` and the
/// answer is `None`.
fn timed_stat(
    dir: Option<OwnedFd>,
    name: CString,
    topic: Vec<u8>,
    unanswered: &mut Vec<Vec<u8>>,
) -> Option<(u64, u64)> {
    let call = move || stat_at(dir.as_ref().map_or(CWD, |d| d.as_fd()), &name, true);
    let answer = super::deadline::run(
        vec![(topic.clone(), Box::new(call))],
        super::deadline::LIMIT,
    );
    match answer.into_iter().next().flatten() {
        Some(result) => result.ok(),
        None => {
            unanswered.push(topic);
            None
        }
    }
}

/// Like [`stat_at`] following the link, and whether the target is an
/// anonymous inode (no file type: inotify, io_uring, eventfd, …).
fn stat_typed(dir: BorrowedFd<'_>, name: &CStr) -> Result<(Key, bool), Errno> {
    let flags = AtFlags::STATX_DONT_SYNC | AtFlags::NO_AUTOMOUNT;
    /// `S_IFMT`, the file type bits of a mode.
    const S_IFMT: u32 = 0o170_000;
    match rustix::fs::statx(dir, name, flags, StatxFlags::INO | StatxFlags::TYPE) {
        Ok(st) => Ok((
            (makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino),
            u32::from(st.stx_mode) & S_IFMT == 0,
        )),
        Err(Errno::NOSYS) => {
            let st = rustix::fs::statat(dir, name, AtFlags::NO_AUTOMOUNT)?;
            #[allow(clippy::useless_conversion, clippy::unnecessary_cast)] // types vary by target
            Ok((
                (u64::from(st.st_dev), u64::from(st.st_ino)),
                (st.st_mode as u32) & S_IFMT == 0,
            ))
        }
        Err(e) => Err(e),
    }
}

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
            let mut tries = 0;
            loop {
                let Some((count, paths)) = fdinfo::parse_ring_files(info) else {
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

/// [`resolve_no_links`] of each path, all in one call to the
/// [`deadline`](super::deadline) worker: a path may lead through a
/// filesystem that does not answer. `ETIMEDOUT` for one that did not answer
/// in time (or is stuck since an earlier call).
fn resolve_no_links_timed(paths: &[Vec<u8>]) -> Vec<Result<Key, Errno>> {
    let calls: Vec<_> = paths
        .iter()
        .map(|path| {
            let owned = path.clone();
            let call: Box<dyn FnOnce() -> Result<Key, Errno> + Send> =
                Box::new(move || resolve_no_links(&owned));
            (path.clone(), call)
        })
        .collect();
    super::deadline::run(calls, super::deadline::LIMIT)
        .into_iter()
        .map(|answer| answer.unwrap_or(Err(Errno::TIMEDOUT)))
        .collect()
}

/// The `(device, inode)` of an absolute path, resolved from our root
/// without following any symlink or magic link (`openat2` with
/// `RESOLVE_NO_SYMLINKS`, `O_PATH | O_NOFOLLOW`: nothing is opened for
/// reading). `ELOOP` for a path through a symlink, `EINVAL` for a
/// relative one.
///
/// # References
///
/// - [openat2(2)](https://man7.org/linux/man-pages/man2/openat2.2.html)
fn resolve_no_links(path: &[u8]) -> Result<Key, Errno> {
    use rustix::fs::ResolveFlags;
    if path.first() != Some(&b'/') {
        return Err(Errno::INVAL);
    }
    let path = CString::new(path).map_err(|_| Errno::INVAL)?;
    let fd = rustix::fs::openat2(
        CWD,
        &path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    let st = rustix::fs::statx(
        &fd,
        c"",
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
        StatxFlags::INO,
    )?;
    Ok((makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino))
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
    failure: Option<(InspectStep, Errno)>,
    /// The process went away during the inspection.
    gone: bool,
}

impl Proc {
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
            self.failure = Some((step, e));
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
struct Scanner<'p> {
    proc: BorrowedFd<'p>,
    /// `getdents64` buffer (only its capacity is used).
    dents: Vec<u8>,
    /// File contents (`stat`, `maps`, `mountinfo`).
    text: Vec<u8>,
    /// Mapped inodes of one process.
    keys: Vec<(u64, u64)>,
    /// Thread ids of one process.
    tids: Vec<u32>,
    /// `(fd, inode)` of the descriptors in one process's table, to leave
    /// out of its threads' private tables what they share with it.
    fd_keys: Vec<(u32, Key)>,
    /// `fdinfo` contents.
    info: Vec<u8>,
    /// Pids in the procfs read are pids of our pid namespace, so `kcmp`
    /// may be asked about them.
    pids_are_ours: bool,
    /// The caller's mount namespace, and the others already read (shared
    /// by all threads).
    own_ns: Option<Key>,
    seen_ns: &'p Mutex<HashSet<Key>>,
    /// Processes whose inspection failed, for [`Scanner::recheck`].
    suspects: Vec<Suspect>,
}

impl<'p> Scanner<'p> {
    fn new(proc: BorrowedFd<'p>, seen_ns: &'p Mutex<HashSet<Key>>) -> Scanner<'p> {
        Scanner {
            proc,
            dents: Vec::with_capacity(DENTS_BUFFER),
            text: Vec::with_capacity(64 * 1024),
            keys: Vec::new(),
            tids: Vec::new(),
            fd_keys: Vec::new(),
            info: Vec::new(),
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
    fn list_numeric(&mut self, dir: BorrowedFd<'_>) -> Result<Vec<u32>, Errno> {
        let mut out = Vec::new();
        list_numeric_into(dir, &mut self.dents, &mut out)?;
        Ok(out)
    }

    /// Inspects one process, recording what it holds; one that could not
    /// be inspected (and did not go away) is a suspect, looked at again by
    /// [`Scanner::recheck`].
    fn scan(&mut self, pid: u32, found: &mut Found) {
        let Some((dir, stat)) = self.open(pid, found) else {
            return;
        };
        found.processes += 1;
        let (comm, start) = (Arc::clone(&stat.comm), stat.start);
        if let Some((step, errno)) = self.attempt(pid, dir.as_fd(), &stat, found) {
            self.suspects.push(Suspect {
                pid,
                start,
                comm,
                step,
                errno,
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
    ) -> Option<(InspectStep, Errno)> {
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
    fn recheck(&mut self, found: &mut Found) {
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
                    Some((step, errno)) => {
                        suspect.comm = stat.comm;
                        suspect.step = step;
                        suspect.errno = errno;
                        self.suspects.push(suspect);
                    }
                }
            }
        }
        for s in std::mem::take(&mut self.suspects) {
            found.uninspectable(s.pid, Some(&s.comm), s.step, s.errno.raw_os_error());
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
            // A kernel thread has no descriptors, executable or mappings.
            self.link(p, dir, c"cwd", HoldKind::Cwd, InspectStep::Cwd, found);
            self.link(p, dir, c"root", HoldKind::Root, InspectStep::Root, found);
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
        match stat_at(dir, name, true) {
            Ok(key) => {
                p.hold(found, key, how);
                Some(key)
            }
            // No such link right now (a zombie, an exiting process).
            Err(e) if gone(e) => None,
            Err(e) => {
                p.fail(step, e);
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
            let (key, anon) = match stat_typed(fd_dir.as_fd(), name) {
                Ok(st) => st,
                Err(e) if gone(e) => continue, // closed meanwhile
                Err(e) => {
                    // Access is decided per process: the other links would
                    // fail alike.
                    p.fail(
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
                match stat_at(task.as_fd(), name, true) {
                    Ok(key) if Some(key) != process_key => p.hold(found, key, how),
                    Ok(_) => {}
                    Err(e) if gone(e) => {} // the thread exited
                    Err(e) => p.fail(InspectStep::Threads, e),
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
        let lines = mounts::parse_mountinfo(&self.text);
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
        mounts::kernel_uses(&lines, namespace, &mut stat_there, &mut found.kernel);
        for topic in unanswered {
            found.blind_spot_about(super::BlindSpotKind::UnansweredLookup, None, &topic);
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

/// The `getdents64` buffer as the uninitialized bytes `RawDir` wants.
fn dents_buffer(buf: &mut Vec<u8>) -> &mut [MaybeUninit<u8>] {
    buf.clear();
    buf.spare_capacity_mut()
}

/// Appends the numeric entry names of `dir` to `out`.
fn list_numeric_into(
    dir: BorrowedFd<'_>,
    buf: &mut Vec<u8>,
    out: &mut Vec<u32>,
) -> Result<(), Errno> {
    let mut entries = RawDir::new(dir, dents_buffer(buf));
    while let Some(entry) = entries.next() {
        if let Some(n) = parse_dec(entry?.file_name().to_bytes()) {
            out.push(n);
        }
    }
    Ok(())
}

/// `openat(dir, name)` and read it whole into `buf` (cleared first), with
/// plain `read` calls: procfs files have no size to ask for.
fn read_at(dir: BorrowedFd<'_>, name: &CStr, buf: &mut Vec<u8>) -> Result<(), Errno> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    buf.clear();
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(buf.capacity().max(4096));
        }
        match rustix::io::read(&fd, rustix::buffer::spare_capacity(buf)) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Like [`read_at`], for files that the kernel produces as one
/// newline-terminated record in one `read` (`/proc/PID/stat`): a short read
/// ending in a newline is the whole file, which saves the `read` that would
/// only report the end.
fn read_record_at(dir: BorrowedFd<'_>, name: &CStr, buf: &mut Vec<u8>) -> Result<(), Errno> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    buf.clear();
    buf.reserve(4096);
    loop {
        let room = buf.capacity() - buf.len();
        match rustix::io::read(&fd, rustix::buffer::spare_capacity(buf)) {
            Ok(0) => return Ok(()),
            Ok(n) if n < room && buf.ends_with(b"\n") => return Ok(()),
            Ok(_) => buf.reserve(buf.capacity()),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `n` in decimal as a C string, in `buf`.
fn decimal(n: u32, buf: &mut [u8; 12]) -> &CStr {
    let mut digits = [0u8; 10];
    let mut len = 0;
    let mut n = n;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[i] = digits[len - 1 - i];
    }
    buf[len] = 0;
    // The digits contain no NUL and end with one.
    CStr::from_bytes_with_nul(&buf[..=len]).unwrap_or(c"")
}

/// `TID` + `suffix` (which ends in NUL) as a C string, in `buf`.
fn thread_link<'b>(tid: u32, suffix: &[u8], buf: &'b mut [u8; 24]) -> &'b CStr {
    let mut num = [0u8; 12];
    let digits = decimal(tid, &mut num).to_bytes();
    buf[..digits.len()].copy_from_slice(digits);
    buf[digits.len()..digits.len() + suffix.len()].copy_from_slice(suffix);
    CStr::from_bytes_with_nul(&buf[..digits.len() + suffix.len()]).unwrap_or(c"")
}

/// The fields of `/proc/PID/stat` the scan needs.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct StatLine<'a> {
    /// Field 2, the command name, without its parentheses.
    pub(super) comm: &'a [u8],
    /// Field 3, the state (`R`, `S`, `Z`, …).
    pub(super) state: u8,
    /// Field 9, the kernel flags (`PF_*`).
    pub(super) flags: u32,
    /// Field 20, the number of threads.
    pub(super) threads: u32,
    /// Field 22, the start time in clock ticks after boot.
    pub(super) start: u64,
}

/// Parses `/proc/PID/stat`. The command name may contain spaces and
/// parentheses, so it runs from the first `(` to the *last* `)`.
pub(super) fn parse_stat(text: &[u8]) -> Option<StatLine<'_>> {
    let open = text.iter().position(|&b| b == b'(')?;
    let close = text.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = match fields.next()?.as_bytes() {
        [state] => *state,
        _ => return None,
    };
    // Fields 4-8 (ppid, pgrp, session, tty_nr, tpgid), then 9 (flags).
    let flags = fields.nth(5)?.parse().ok()?;
    // Fields 10-19, then 20 (num_threads).
    let threads = fields.nth(10)?.parse().ok()?;
    // Field 21 (itrealvalue), then 22 (starttime).
    let start = fields.nth(1)?.parse().ok()?;
    Some(StatLine {
        comm: &text[open + 1..close],
        state,
        flags,
        threads,
        start,
    })
}

/// The command name from `/proc/PID/comm` (one trailing newline removed).
pub(super) fn parse_comm(text: &[u8]) -> String {
    String::from_utf8_lossy(text.strip_suffix(b"\n").unwrap_or(text)).into_owned()
}

/// The `(device, inode)` of a file mapping in one `/proc/PID/maps` line;
/// `None` for anonymous mappings (inode 0) and malformed lines.
///
/// `7f2c4a5e1000-7f2c4a5e3000 r--p 00000000 fd:01 1234567  /usr/lib/x.so`
pub(super) fn parse_maps_line(line: &[u8]) -> Option<(u64, u64)> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let dev = fields.next()?;
    let ino: u64 = parse_dec(fields.next()?)?;
    if !range.contains(&b'-') || ino == 0 {
        return None;
    }
    let (major, minor) = parse_dev(dev, 16)?;
    Some((makedev(major, minor), ino))
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

    #[test]
    fn parse_stat_cases() {
        let line = |comm: &str, state: &str, flags: u32, threads: u32| {
            format!(
                "123 ({comm}) {state} 1 123 123 0 -1 {flags} 90 0 0 0 5 6 0 0 20 0 {threads} 0 98765 5000 100"
            )
        };
        let stat = |comm: &'static str, state: u8, flags: u32, threads: u32| StatLine {
            comm: comm.as_bytes(),
            state,
            flags,
            threads,
            start: 98765,
        };
        let cases: Vec<(&str, String, Option<StatLine<'static>>)> = vec![
            (
                "plain",
                line("sleep", "S", 4194304, 1),
                Some(stat("sleep", b'S', 4194304, 1)),
            ),
            (
                "spaces",
                line("tmux: server", "S", 0, 3),
                Some(stat("tmux: server", b'S', 0, 3)),
            ),
            (
                "parentheses",
                line("a) (b", "R", 0, 1),
                Some(stat("a) (b", b'R', 0, 1)),
            ),
            (
                "kernel thread",
                line("kworker/0:1", "I", 0x0420_8060, 1),
                Some(stat("kworker/0:1", b'I', 0x0420_8060, 1)),
            ),
            (
                "zombie leader",
                line("app", "Z", 0, 4),
                Some(stat("app", b'Z', 0, 4)),
            ),
            (
                "empty comm",
                line("", "S", 0, 1),
                Some(stat("", b'S', 0, 1)),
            ),
            ("truncated", "123 (x) S 1 2 3".to_owned(), None),
            (
                "no start time",
                "123 (x) S 1 123 123 0 -1 0 90 0 0 0 5 6 0 0 20 0 1 0".to_owned(),
                None,
            ),
            ("no parenthesis", "123 x S 1".to_owned(), None),
            (
                "reversed parentheses",
                "123 )x( S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18".to_owned(),
                None,
            ),
            ("two-letter state", line("x", "SS", 0, 1), None),
            ("", String::new(), None),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_stat(text.as_bytes()), want, "{name}");
        }
        // A newline in the command name (prctl PR_SET_NAME allows it).
        let text = b"9 (a\nb) S 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0";
        assert_eq!(parse_stat(text).map(|s| s.start), Some(1));
        assert_eq!(parse_stat(text).map(|s| s.comm), Some(&b"a\nb"[..]));
    }

    #[test]
    fn parse_comm_cases() {
        let cases: &[(&str, &[u8], &str)] = &[
            ("plain", b"sleep\n", "sleep"),
            ("spaces and parens", b"a) (b\n", "a) (b"),
            ("only one newline removed", b"x\n\n", "x\n"),
            ("no newline", b"x", "x"),
            ("invalid utf-8", b"\xff\n", "\u{fffd}"),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_comm(text), *want, "{name}");
        }
    }

    #[test]
    fn parse_maps_cases() {
        let cases: &[(&str, &[u8], Option<(u64, u64)>)] = &[
            (
                "library",
                b"7f2c4a5e1000-7f2c4a5e3000 r--p 00000000 fd:01 1234567                    /usr/lib/x.so",
                Some((makedev(0xfd, 1), 1234567)),
            ),
            (
                "deleted file",
                b"7f2c4a5e1000-7f2c4a5e3000 rw-s 00000000 00:2e 42 /tmp/sb/data (deleted)",
                Some((makedev(0, 0x2e), 42)),
            ),
            (
                "path with spaces",
                b"7f2c4a5e1000-7f2c4a5e3000 r--s 00001000 00:2e 43 /tmp/a b/c",
                Some((makedev(0, 0x2e), 43)),
            ),
            (
                "large device numbers",
                b"7f2c4a5e1000-7f2c4a5e3000 r--p 00000000 103:1a3 7 /x",
                Some((makedev(0x103, 0x1a3), 7)),
            ),
            ("anonymous", b"7ffd5e4a4000-7ffd5e4c5000 rw-p 00000000 00:00 0 [stack]", None),
            ("anonymous, no name", b"7f2c4a5e1000-7f2c4a5e3000 rw-p 00000000 00:00 0", None),
            ("no range", b"r--p 00000000 fd:01 1234567 /x", None),
            ("bad device", b"1000-2000 r--p 00000000 fd01 12 /x", None),
            ("bad inode", b"1000-2000 r--p 00000000 fd:01 x12 /x", None),
            ("empty", b"", None),
        ];
        for (name, line, want) in cases {
            assert_eq!(parse_maps_line(line), *want, "{name}");
        }
    }

    #[test]
    fn decimal_and_thread_links() {
        let mut buf = [0u8; 12];
        assert_eq!(decimal(0, &mut buf), c"0");
        assert_eq!(decimal(4_294_967_295, &mut buf), c"4294967295");
        let mut buf = [0u8; 24];
        assert_eq!(
            thread_link(4_294_967_295, b"/root\0", &mut buf),
            c"4294967295/root"
        );
        assert_eq!(thread_link(7, b"/cwd\0", &mut buf), c"7/cwd");
    }

    #[test]
    fn mount_id_is_the_one_fdinfo_and_mountinfo_give() {
        use std::os::fd::AsRawFd;
        let proc = rustix::fs::open("/proc", DIR_FLAGS, Mode::empty()).unwrap();
        let id = mount_id(proc.as_fd()).expect("a mount id");
        let fdinfo =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", proc.as_raw_fd())).unwrap();
        assert!(fdinfo.contains(&format!("mnt_id:\t{id}\n")), "{fdinfo}");
        let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap();
        let (fstype, _) = visibility::mount_by_id(&mountinfo, id).expect("its mountinfo line");
        assert_eq!(fstype, b"proc");
    }

    #[test]
    fn stat_at_follows_magic_links_only_when_asked() {
        let me = rustix::fs::open(
            format!("/proc/{}", std::process::id()),
            DIR_FLAGS,
            Mode::empty(),
        )
        .unwrap();
        let cwd = std::fs::metadata(".").unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            stat_at(me.as_fd(), c"cwd", true).unwrap(),
            (cwd.dev(), cwd.ino())
        );
        assert_ne!(
            stat_at(me.as_fd(), c"cwd", false).unwrap(),
            (cwd.dev(), cwd.ino())
        );
        assert_eq!(
            stat_at(me.as_fd(), c"no-such-link", true),
            Err(Errno::NOENT)
        );
    }
}
