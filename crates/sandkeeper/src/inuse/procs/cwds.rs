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
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, RawDir, StatxFlags};
use rustix::io::Errno;

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOFOLLOW);

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
    let mut buf = vec![MaybeUninit::uninit(); 32 * 1024];
    let mut pids = Vec::new();
    numbers(proc, &mut buf, &mut pids)?;
    let mut tids = Vec::new();
    let mut name = [0u8; 24];
    let mut small = [0u8; 24];
    for &pid in &pids {
        if pid == me || skip(pid) {
            continue;
        }
        // `PID/task` counts the threads in its link count (two plus one
        // per thread): one thread needs no listing, and its links are
        // asked relative to `/proc` (three calls a process in all).
        let threads = match rustix::fs::statx(
            proc,
            under(pid, c"task", &mut name),
            AtFlags::empty(),
            StatxFlags::NLINK,
        ) {
            Ok(st) => u64::from(st.stx_nlink).saturating_sub(2),
            // Gone (or hidden, which the pass would have said).
            Err(_) => continue,
        };
        if threads <= 1 {
            for link in [c"cwd", c"root"] {
                read_link(proc, under(pid, link, &mut name), pid, dev, &mut out);
            }
            continue;
        }
        let Ok(task) = rustix::fs::openat(
            proc,
            under(pid, c"task", &mut name),
            DIR_FLAGS,
            Mode::empty(),
        ) else {
            continue;
        };
        tids.clear();
        if numbers(task.as_fd(), &mut buf, &mut tids).is_err() {
            continue;
        }
        for &tid in &tids {
            if let Ok(t) = open_task(task.as_fd(), tid, &mut small) {
                for link in [c"cwd", c"root"] {
                    read_link(t.as_fd(), link, pid, dev, &mut out);
                }
            }
        }
    }
    Ok(out)
}

/// `PID/what` as a C string, in `buf`.
fn under<'b>(pid: u32, what: &CStr, buf: &'b mut [u8; 24]) -> &'b CStr {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cursor, "{pid}/");
    let _ = cursor.write_all(what.to_bytes_with_nul());
    let len = cursor.position() as usize;
    CStr::from_bytes_with_nul(&buf[..len]).unwrap_or(c"")
}

fn open_task(task: BorrowedFd<'_>, tid: u32, name: &mut [u8; 24]) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(task, decimal(tid, name), DIR_FLAGS, Mode::empty())
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

/// The numeric names of the directory `dir` (pids, tids), into `out`.
fn numbers(
    dir: BorrowedFd<'_>,
    buf: &mut [MaybeUninit<u8>],
    out: &mut Vec<u32>,
) -> Result<(), Errno> {
    rustix::fs::seek(dir, rustix::fs::SeekFrom::Start(0))?;
    let mut entries = RawDir::new(dir, buf);
    while let Some(entry) = entries.next() {
        let entry = entry?;
        if let Some(n) = parse(entry.file_name()) {
            out.push(n);
        }
    }
    Ok(())
}

fn parse(name: &CStr) -> Option<u32> {
    let bytes = name.to_bytes();
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// `n` in decimal as a C string, in `buf`.
fn decimal(n: u32, buf: &mut [u8; 24]) -> &CStr {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cursor, "{n}\0");
    let len = cursor.position() as usize;
    CStr::from_bytes_with_nul(&buf[..len]).unwrap_or(c"")
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

    #[test]
    fn decimal_names() {
        let mut buf = [0u8; 24];
        assert_eq!(decimal(4_294_967_295, &mut buf), c"4294967295");
        assert_eq!(parse(c"0012"), Some(12));
        assert_eq!(parse(c"self"), None);
    }
}
