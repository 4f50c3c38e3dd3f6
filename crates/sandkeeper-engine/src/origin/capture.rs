//! Reading a creator from `/proc`, safe against pid reuse, without
//! touching its memory.
//!
//! Only files whose kernel side takes no lock of the process's memory map
//! are read: `comm`, `stat`, `status`, `cgroup`, and the links `exe` and
//! `cwd` (their target is the file the kernel holds, printed with
//! `d_path`: no filesystem is asked). `cmdline`, `environ`, `maps` and
//! `mem` are never read: the kernel reads them out of the process's
//! memory under its `mmap` lock, which the process itself can keep taken
//! (a page of a FUSE file that never answers, a queued `mmap`): one read
//! would wait forever (issue 25). Arguments are not kept anyway: they are
//! the user's, and may be secrets.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::{openat, readlinkat, Mode, OFlags, CWD};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

use super::record::{bound, bound_argv, Creator, Process};

/// Whether the process behind `pidfd` has exited (the pidfd is readable
/// then, pidfd_open(2)). An error counts as exited.
pub(crate) fn exited(pidfd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&zero)) {
        Ok(0) => false,
        Ok(_) => true,
        Err(_) => true,
    }
}

/// `/proc/PID` as a directory descriptor.
fn proc_dir(pid: u32) -> Option<OwnedFd> {
    openat(
        CWD,
        format!("/proc/{pid}"),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

/// At most `limit` bytes of a file under `dir`.
fn read_small(dir: BorrowedFd<'_>, name: &str, limit: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let fd = openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .ok()?;
    let mut out = Vec::new();
    std::fs::File::from(fd)
        .take(limit as u64)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

fn link(dir: BorrowedFd<'_>, name: &str) -> Option<String> {
    let target = readlinkat(dir, name, Vec::new()).ok()?;
    Some(bound(
        String::from_utf8_lossy(target.as_bytes()).into_owned(),
    ))
}

/// The name of the process (`comm`, its trailing newline dropped).
fn comm_of(dir: BorrowedFd<'_>) -> Option<String> {
    let raw = read_small(dir, "comm", 64)?;
    let text = String::from_utf8_lossy(raw.strip_suffix(b"\n").unwrap_or(&raw));
    (!text.is_empty()).then(|| bound(text.into_owned()))
}

/// The parent's pid: field 4 of `/proc/PID/stat`, after the command in
/// parentheses (which may hold anything, `)` included).
fn ppid_of(dir: BorrowedFd<'_>) -> Option<u32> {
    let stat = read_small(dir, "stat", 4096)?;
    let after = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&stat[after + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The uids of a process, as `/proc/PID/status` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Uids {
    /// Real, effective, saved set, filesystem.
    ids: [u32; 4],
}

impl Uids {
    /// The real uid.
    pub(crate) fn real(&self) -> u32 {
        self.ids[0]
    }

    /// Whether `owner` is the real, effective or filesystem uid: a file
    /// the process made is owned by its filesystem uid (the effective one
    /// unless changed), so an inode owned by anyone else is not its making.
    pub(crate) fn own(&self, owner: u32) -> bool {
        [self.ids[0], self.ids[1], self.ids[3]].contains(&owner)
    }
}

fn uids_of(dir: BorrowedFd<'_>) -> Option<Uids> {
    let status = read_small(dir, "status", 16 * 1024)?;
    let text = String::from_utf8_lossy(&status);
    let line = text.lines().find(|l| l.starts_with("Uid:"))?;
    let mut ids = [0u32; 4];
    let mut fields = line.split_ascii_whitespace().skip(1);
    for id in &mut ids {
        *id = fields.next()?.parse().ok()?;
    }
    Some(Uids { ids })
}

/// The cgroup v2 path (`0::/path`), or the first line's path on v1.
fn cgroup_of(dir: BorrowedFd<'_>) -> Option<String> {
    let raw = read_small(dir, "cgroup", 16 * 1024)?;
    let text = String::from_utf8_lossy(&raw);
    let line = text
        .lines()
        .find(|l| l.starts_with("0::"))
        .or_else(|| text.lines().next())?;
    let path = line.splitn(3, ':').nth(2)?;
    Some(bound(path.to_owned()))
}

/// The creator `pid` of an event, read now, and its uids (`None` for a
/// creator that could not be read). `pidfd` is the event's (or one opened
/// now, on a kernel that gives none: before Linux 5.15 a pid recycled
/// between the event and this call could be misread, see
/// `docs/origins.md`): every field is read first, then the pidfd is
/// checked, and a process that is gone by then — whose pid may already
/// be someone else's — is [`Creator::Exited`].
pub(crate) fn capture(pid: u32, pidfd: Option<OwnedFd>) -> (Creator, Option<Uids>) {
    if pid == 0 {
        let why = "the creator is in a PID namespace this watcher cannot see";
        return (Creator::Unknown { reason: why.into() }, None);
    }
    let gone = (Creator::Exited { pid: Some(pid) }, None);
    let pidfd = match pidfd {
        Some(fd) => fd,
        None => match Pid::from_raw(pid as i32).map(|p| pidfd_open(p, PidfdFlags::empty())) {
            Some(Ok(fd)) => fd,
            _ => return gone,
        },
    };
    if exited(pidfd.as_fd()) {
        return gone;
    }
    let Some(dir) = proc_dir(pid) else {
        return gone;
    };
    let dir = dir.as_fd();
    let uids = uids_of(dir);
    let mut p = read_process(pid, dir, comm_of(dir), (Vec::new(), false));
    p.uid = uids.map(|u| u.real());
    if let Some(ppid) = p.ppid.filter(|p| *p > 0) {
        p.parent_comm = parent_comm(dir, ppid);
    }
    if exited(pidfd.as_fd()) || p.comm.is_none() && p.exe.is_none() {
        return gone;
    }
    if uids.is_none() {
        let why = "its uids could not be read from /proc";
        return (Creator::Unknown { reason: why.into() }, None);
    }
    (Creator::Process(p), uids)
}

/// The parent's name, if `ppid` is still the parent of the (live) child
/// after it was read: a parent that exited has passed its child on, so a
/// recycled `ppid` is never read as the parent.
fn parent_comm(child: BorrowedFd<'_>, ppid: u32) -> Option<String> {
    let pfd = Pid::from_raw(ppid as i32).map(|p| pidfd_open(p, PidfdFlags::empty()))?;
    let pfd = pfd.ok()?;
    let name = comm_of(proc_dir(ppid)?.as_fd());
    if exited(pfd.as_fd()) || ppid_of(child) != Some(ppid) {
        return None;
    }
    name
}

/// This process, as the creator of something it makes for `argv` (for
/// `sandkeeper run`: the command it runs, whose program name is its
/// name). Its own arguments are given, not read.
pub(crate) fn this_process(argv: Vec<String>) -> Process {
    let pid = std::process::id();
    let comm = argv
        .first()
        .and_then(|a| a.rsplit('/').next())
        .filter(|n| !n.is_empty())
        .map(|n| bound(n.to_owned()));
    let argv = bound_argv(argv);
    let Some(dir) = proc_dir(pid) else {
        return Process {
            pid,
            comm,
            argv: argv.0,
            argv_truncated: argv.1,
            ..Process::default()
        };
    };
    let dir = dir.as_fd();
    let mut p = read_process(pid, dir, comm, argv);
    p.uid = uids_of(dir).map(|u| u.real());
    p.parent_comm = p
        .ppid
        .filter(|p| *p > 0)
        .and_then(proc_dir)
        .and_then(|d| comm_of(d.as_fd()));
    p
}

/// The process `pid` as its `/proc` directory `dir` shows it, with the
/// name `comm` and `argv` (and whether it was cut) as given; no uid or
/// parent name yet.
fn read_process(
    pid: u32,
    dir: BorrowedFd<'_>,
    comm: Option<String>,
    (argv, argv_truncated): (Vec<String>, bool),
) -> Process {
    Process {
        pid,
        comm,
        exe: link(dir, "exe"),
        argv,
        argv_truncated,
        cwd: link(dir, "cwd"),
        uid: None,
        cgroup: cgroup_of(dir),
        ppid: ppid_of(dir),
        parent_comm: None,
        parent_argv: Vec::new(),
    }
}
