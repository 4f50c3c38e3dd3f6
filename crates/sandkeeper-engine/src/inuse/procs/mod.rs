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
//!
//! This module is the pass itself (who is scanned, by how many threads,
//! what the caller's own procfs and mounts show); `inspect` is what one
//! process is looked at for, and `read` the descriptor-relative reads and
//! line parsers both are made of.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags, CWD};
use rustix::io::Errno;

use self::one_process::Scanner;
use self::proc_files::{read_at, stat_at, timed_stat};
use super::mount_users;
use super::mountinfo::{self, parse_dec};
use super::pid_visibility::{self, PROC_PID_INIT_INO, PROC_USER_INIT_INO};
use super::{Found, MountNamespace};
use crate::error::{Error, ErrorKind, IoResultExt, Result};

pub(crate) mod cwds;
mod one_process;
mod proc_files;

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
    let own_mounts = mountinfo::parse_mountinfo(&scanner.text);
    // Whether that procfs lists every process that can reach the roots.
    let facts = visibility_facts(proc.as_fd(), &scanner.text);
    found.visibility(pid_visibility::decide(&facts, in_group));
    let mut unanswered = Vec::new();
    let mut stat_own = |path: &[u8], follow: bool| {
        let name = CString::new(path).ok()?;
        if !follow {
            // A mount point: the kernel's own path, not through a mount
            // that may not answer (see `mount_users::kernel_uses`).
            return stat_at(CWD, &name, false).ok();
        }
        timed_stat(None, name, path.to_vec(), &mut unanswered)
    };
    mount_users::kernel_uses(
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
    failure: one_process::Failure,
}

/// Below this many processes per worker, another thread costs more than
/// it saves.
const PIDS_PER_WORKER: usize = 32;

/// The number of scanning threads for `threads(0)`: the available
/// parallelism, at most 4.
pub(super) fn auto_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// What [`pid_visibility::decide`] needs to know about the opened procfs
/// `proc` and the caller, given the caller's own `mountinfo`.
fn visibility_facts(proc: BorrowedFd<'_>, own_mountinfo: &[u8]) -> pid_visibility::Facts {
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
        .and_then(|id| pid_visibility::mount_by_id(own_mountinfo, id))
        .filter(|(fstype, _)| fstype == b"proc")
        .map(|(_, options)| pid_visibility::parse_proc_options(&options));
    pid_visibility::Facts {
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

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

    #[test]
    fn mount_id_is_the_one_fdinfo_and_mountinfo_give() {
        use std::os::fd::AsRawFd;
        let proc = rustix::fs::open("/proc", DIR_FLAGS, Mode::empty()).unwrap();
        let id = mount_id(proc.as_fd()).expect("a mount id");
        let fdinfo =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", proc.as_raw_fd())).unwrap();
        assert!(fdinfo.contains(&format!("mnt_id:\t{id}\n")), "{fdinfo}");
        let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap();
        let (fstype, _) = pid_visibility::mount_by_id(&mountinfo, id).expect("its mountinfo line");
        assert_eq!(fstype, b"proc");
    }
}
