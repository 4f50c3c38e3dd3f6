//! Reading a creator from `/proc`, safe against pid reuse.

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

fn argv_of(dir: BorrowedFd<'_>) -> (Vec<String>, bool) {
    let raw = read_small(dir, "cmdline", 64 * 1024).unwrap_or_default();
    let args = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    bound_argv(args)
}

/// The parent's pid: field 4 of `/proc/PID/stat`, after the command in
/// parentheses (which may hold anything, `)` included).
fn ppid_of(dir: BorrowedFd<'_>) -> Option<u32> {
    let stat = read_small(dir, "stat", 4096)?;
    let after = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&stat[after + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

fn uid_of(dir: BorrowedFd<'_>) -> Option<u32> {
    let status = read_small(dir, "status", 16 * 1024)?;
    let text = String::from_utf8_lossy(&status);
    let line = text.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_ascii_whitespace().nth(1)?.parse().ok()
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

/// The creator `pid` of an event, read now. `pidfd` is the event's (or
/// one opened now, on a kernel that gives none: before Linux 5.15 a pid
/// recycled between the event and this call could be misread, see
/// `docs/origins.md`): every field is read first,
/// then the pidfd is checked, and a process that is gone by then —
/// whose pid may already be someone else's — is [`Creator::Exited`].
pub(crate) fn capture(pid: u32, pidfd: Option<OwnedFd>) -> Creator {
    if pid == 0 {
        return Creator::Unknown {
            reason: "the creator is in a PID namespace this watcher cannot see".into(),
        };
    }
    let gone = Creator::Exited { pid: Some(pid) };
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
    let mut p = read_process(pid, dir, argv_of(dir));
    if let Some(ppid) = p.ppid.filter(|p| *p > 0) {
        p.parent_argv = parent_argv(pid, dir, ppid);
    }
    if exited(pidfd.as_fd()) || p.argv.is_empty() && p.exe.is_none() {
        return gone;
    }
    Creator::Process(p)
}

/// The parent's argv, if `ppid` is still the parent of the (live) child
/// after it was read: a parent that exited has passed its child on, so a
/// recycled `ppid` is never read as the parent.
fn parent_argv(pid: u32, child: BorrowedFd<'_>, ppid: u32) -> Vec<String> {
    let _ = pid;
    let Some(Ok(pfd)) = Pid::from_raw(ppid as i32).map(|p| pidfd_open(p, PidfdFlags::empty()))
    else {
        return Vec::new();
    };
    let Some(pdir) = proc_dir(ppid) else {
        return Vec::new();
    };
    let argv = argv_of(pdir.as_fd()).0;
    if exited(pfd.as_fd()) || ppid_of(child) != Some(ppid) {
        return Vec::new();
    }
    argv
}

/// This process, as the creator of something it makes for `argv` (for
/// `sandkeeper run`: the command it runs).
pub(crate) fn this_process(argv: Vec<String>) -> Process {
    let pid = std::process::id();
    let Some(dir) = proc_dir(pid) else {
        return Process {
            pid,
            argv: bound_argv(argv).0,
            ..Process::default()
        };
    };
    let dir = dir.as_fd();
    let mut p = read_process(pid, dir, bound_argv(argv));
    p.parent_argv = p
        .ppid
        .filter(|p| *p > 0)
        .and_then(proc_dir)
        .map(|d| argv_of(d.as_fd()).0)
        .unwrap_or_default();
    p
}

/// The process `pid` as its `/proc` directory `dir` shows it, with `argv`
/// (and whether it was cut) as given; no parent argv yet.
fn read_process(
    pid: u32,
    dir: BorrowedFd<'_>,
    (argv, argv_truncated): (Vec<String>, bool),
) -> Process {
    Process {
        pid,
        exe: link(dir, "exe"),
        argv,
        argv_truncated,
        cwd: link(dir, "cwd"),
        uid: uid_of(dir),
        cgroup: cgroup_of(dir),
        ppid: ppid_of(dir),
        parent_argv: Vec::new(),
    }
}
