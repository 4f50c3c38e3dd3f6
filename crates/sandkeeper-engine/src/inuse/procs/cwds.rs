//! Working and root directories only: the part of a `/proc` pass that a
//! process can change without opening anything.
//!
//! The reaper of root takes its full pass ([`InUse`](super::InUse))
//! *before* it moves a group of entries out of their names, and covers the
//! time since with fanotify: every open, exec, create, removal or rename on
//! the root's filesystem by another process is reported
//! (`reap::touches`). A `chdir` or `chroot` opens nothing, so it is not;
//! this re-read, taken *after* the group's moves, finds a process that
//! entered an entry in between (two `statx` per thread: about 8 ms for a
//! thousand processes, against 200 ms for a full pass).

use std::collections::HashSet;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, Mode, StatxFlags};
use rustix::io::Errno;

use super::proc_files::{list_numeric_into, thread_link};
use super::{DENTS_BUFFER, DIR_FLAGS};

/// Answered from the caches, never by asking a filesystem (a dead FUSE or
/// network mount cannot block the read), and never triggering an
/// automount.
const LINK_FLAGS: AtFlags = AtFlags::STATX_DONT_SYNC.union(AtFlags::NO_AUTOMOUNT);

/// Where every thread works, as one re-read found it.
#[derive(Debug, Default)]
pub(crate) struct WorkingDirs {
    ids: HashSet<(u64, u64)>,
    /// Threads whose working or root directory could not be told, with
    /// why; only those not already accounted for by the caller.
    unread: Vec<(u32, Errno)>,
}

impl WorkingDirs {
    /// Whether some thread works in, or is rooted at, the inode `id`.
    pub(crate) fn holds(&self, id: (u64, u64)) -> bool {
        self.ids.contains(&id)
    }

    /// A process whose working or root directory could not be told, on a
    /// filesystem that may be `dev` (or on one that would not say), and
    /// why: every entry checked against this re-read must be kept.
    pub(crate) fn unread(&self) -> Option<(u32, Errno)> {
        self.unread.first().copied()
    }
}

/// Reads the working and root directory of every thread of every process
/// in `proc` (an open procfs), but this process's and those `skip` says
/// the caller already accounts for (ignored, assumed, or uninspectable in
/// the pass the re-read completes). Only identities on the filesystem
/// `dev` are kept: a process working elsewhere holds nothing there.
///
/// A thread that went away meanwhile is no holder. One whose directory
/// cannot be told (`EACCES` from a FUSE mount of another user namespace
/// is answered with the device alone, which is enough when it is another
/// filesystem) is [unread](WorkingDirs::unread).
///
/// # Errors
///
/// When `/proc` cannot be listed.
pub(crate) fn working_dirs(
    proc: BorrowedFd<'_>,
    dev: u64,
    skip: &dyn Fn(u32) -> bool,
) -> Result<WorkingDirs, Errno> {
    let me = std::process::id();
    let mut out = WorkingDirs::default();
    let mut dents = Vec::with_capacity(DENTS_BUFFER);
    let mut pids = Vec::new();
    // The same `/proc` descriptor serves every group: listed from the top.
    rustix::fs::seek(proc, rustix::fs::SeekFrom::Start(0))?;
    list_numeric_into(proc, &mut dents, &mut pids)?;
    let mut tids = Vec::new();
    let mut name = [0u8; 24];
    for &pid in &pids {
        if pid == me || skip(pid) {
            continue;
        }
        // `PID/task` counts the threads in its link count (two plus one
        // per thread): one thread needs no listing, and its links are
        // asked relative to `/proc` (three calls a process in all).
        let threads = match rustix::fs::statx(
            proc,
            thread_link(pid, b"/task\0", &mut name),
            AtFlags::empty(),
            StatxFlags::NLINK,
        ) {
            Ok(st) => u64::from(st.stx_nlink).saturating_sub(2),
            // Gone (or hidden, which the pass would have said).
            Err(_) => continue,
        };
        if threads <= 1 {
            for link in [&b"/cwd\0"[..], b"/root\0"] {
                read_link(proc, thread_link(pid, link, &mut name), pid, dev, &mut out);
            }
            continue;
        }
        let Ok(task) = rustix::fs::openat(
            proc,
            thread_link(pid, b"/task\0", &mut name),
            DIR_FLAGS,
            Mode::empty(),
        ) else {
            continue;
        };
        tids.clear();
        if list_numeric_into(task.as_fd(), &mut dents, &mut tids).is_err() {
            continue;
        }
        for &tid in &tids {
            for link in [&b"/cwd\0"[..], b"/root\0"] {
                read_link(
                    task.as_fd(),
                    thread_link(tid, link, &mut name),
                    pid,
                    dev,
                    &mut out,
                );
            }
        }
    }
    Ok(out)
}

/// Records the directory the magic link `link` (below `dir`) points to.
fn read_link(dir: BorrowedFd<'_>, link: &CStr, pid: u32, dev: u64, out: &mut WorkingDirs) {
    match rustix::fs::statx(dir, link, LINK_FLAGS, StatxFlags::INO) {
        Ok(st) => {
            let id = (
                rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
                st.stx_ino,
            );
            if id.0 == dev {
                out.ids.insert(id);
            }
        }
        // Gone meanwhile (or a kernel thread's): holds nothing.
        Err(Errno::NOENT | Errno::SRCH) => {}
        Err(e) => {
            // A FUSE mount refuses callers outside its user namespace, but
            // answers a request for nothing with its device: on another
            // filesystem, it cannot be in an entry.
            let elsewhere = rustix::fs::statx(dir, link, LINK_FLAGS, StatxFlags::empty())
                .is_ok_and(|st| {
                    (st.stx_dev_major, st.stx_dev_minor) != (0, 0)
                        && rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor) != dev
                });
            if !elsewhere {
                out.unread.push((pid, e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_thread_working_in_a_directory_is_found() {
        let dir = crate::Sandbox::new().unwrap();
        let meta = std::fs::metadata(dir.path()).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(dir.path())
            .spawn()
            .unwrap();
        let proc = rustix::fs::open("/proc", DIR_FLAGS, Mode::empty()).unwrap();
        // Waits for the child's exec (its cwd is set before).
        let found = working_dirs(proc.as_fd(), meta.dev(), &|_| false).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(found.holds((meta.dev(), meta.ino())));
        let later = working_dirs(proc.as_fd(), meta.dev(), &|_| false).unwrap();
        assert!(!later.holds((meta.dev(), meta.ino())), "the child is gone");
    }
}
