//! Reading `/proc` through descriptors: `statx` of magic links, paths
//! resolved without following any link, listings and small files read
//! into reused buffers, and the parsers of `stat`, `comm` and `maps` lines.

use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, RawDir, StatxFlags, CWD};
use rustix::io::Errno;

use super::Key;
use crate::inuse::bounded_calls;
use crate::inuse::fdinfo;
use crate::inuse::mountinfo::{makedev, parse_dec, parse_dev};

/// Whether an error means the process (or descriptor) went away.
pub(super) fn gone(e: Errno) -> bool {
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
pub(super) fn stat_at(dir: BorrowedFd<'_>, name: &CStr, follow: bool) -> Result<(u64, u64), Errno> {
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
/// final symlink, on the [`deadline`] worker: a mount
/// source is text its mounter chose, and a symlink on the way may lead
/// into a filesystem that does not answer. Not answered within
/// [`bounded_calls::LIMIT`] (or stuck since an earlier
/// call about the same `topic`), `topic` is added to `unanswered` and the
/// answer is `None`.
pub(super) fn timed_stat(
    dir: Option<OwnedFd>,
    name: CString,
    topic: Vec<u8>,
    unanswered: &mut Vec<Vec<u8>>,
) -> Option<(u64, u64)> {
    let call = move || stat_at(dir.as_ref().map_or(CWD, |d| d.as_fd()), &name, true);
    let answer = bounded_calls::run(vec![(topic.clone(), Box::new(call))], bounded_calls::LIMIT);
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
pub(super) fn stat_typed(dir: BorrowedFd<'_>, name: &CStr) -> Result<(Key, bool), Errno> {
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

/// Why [`stat_refused`] found no inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The magic link itself could not be followed (`/proc` refused, or
    /// the process or descriptor went away): the first error stands.
    Link(Errno),
    /// The link could be followed, but the file is on a filesystem that
    /// refuses the caller and is not FUSE (or its mount is not listed where
    /// it could be told): what it holds cannot be known.
    Filesystem(Errno),
}

/// The `(device, inode)` that the magic link `name` under `dir` (a
/// `/proc/PID/fd/N`, `cwd`, `root` or `exe`) leads to, where `statx`
/// through it failed with `EACCES`: FUSE refuses every caller outside the
/// user namespace that mounted it (any user can mount one in a namespace
/// of their own), root included, without asking its server.
///
/// Nothing here asks the file's filesystem: the link is opened `O_PATH`
/// (which opens nothing and checks no permission of the file); on that
/// descriptor of our own, `statx` with an empty mask gives the device and
/// mount id (FUSE answers a caller it refuses with the device alone), and
/// our own `/proc/thread-self/fdinfo/N` the inode number and mount id.
/// The mount must be FUSE (`fuse`, `fuse.*`, `fuseblk`) by its
/// `mountinfo` line, found by mount id in `mount_tables` (the holder's
/// namespace's, then ours): there `statx` reports the superblock's device
/// and the inode's own number, so the pair is the one the walker would
/// see. Any other refusal stays a failure, named as the filesystem's.
///
/// # References
///
/// - [statx(2)](https://man7.org/linux/man-pages/man2/statx.2.html),
///   [proc_pid_fdinfo(5)](https://man7.org/linux/man-pages/man5/proc_pid_fdinfo.5.html)
pub(super) fn stat_refused(
    dir: BorrowedFd<'_>,
    name: &CStr,
    mount_tables: &mut dyn FnMut(u64) -> Option<Vec<u8>>,
) -> Result<Key, Refusal> {
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::openat(dir, name, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map_err(Refusal::Link)?;
    let refused = Refusal::Filesystem(Errno::ACCESS);
    let st = rustix::fs::statx(
        &fd,
        c"",
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC | AtFlags::NO_AUTOMOUNT,
        StatxFlags::empty(),
    )
    .map_err(Refusal::Filesystem)?;
    if st.stx_mask & StatxFlags::MNT_ID.bits() == 0 {
        return Err(refused); // a kernel before 5.8: the mount cannot be told
    }
    let fstype = mount_tables(st.stx_mnt_id).ok_or(refused)?;
    if !is_fuse(&fstype) {
        return Err(refused);
    }
    let mut info = Vec::new();
    let path = CString::new(format!("/proc/thread-self/fdinfo/{}", fd.as_raw_fd()))
        .map_err(|_| refused)?;
    read_at(CWD, &path, &mut info).map_err(Refusal::Filesystem)?;
    let (mnt_id, ino) = fdinfo::parse_mount_and_inode(&info).ok_or(refused)?;
    if mnt_id != st.stx_mnt_id {
        return Err(refused);
    }
    Ok((makedev(st.stx_dev_major, st.stx_dev_minor), ino))
}

/// Whether a `mountinfo` filesystem type is FUSE's (`fuse`, `fuse.sshfs`,
/// `fuseblk`).
pub(super) fn is_fuse(fstype: &[u8]) -> bool {
    let base = fstype.split(|&b| b == b'.').next().unwrap_or(fstype);
    matches!(base, b"fuse" | b"fuseblk")
}

/// [`resolve_no_links`] of each path, all in one call to the
/// [`deadline`] worker: a path may lead through a
/// filesystem that does not answer. `ETIMEDOUT` for one that did not answer
/// in time (or is stuck since an earlier call).
pub(super) fn resolve_no_links_timed(paths: &[Vec<u8>]) -> Vec<Result<Key, Errno>> {
    let calls: Vec<_> = paths
        .iter()
        .map(|path| {
            let owned = path.clone();
            let call: Box<dyn FnOnce() -> Result<Key, Errno> + Send> =
                Box::new(move || resolve_no_links(&owned));
            (path.clone(), call)
        })
        .collect();
    bounded_calls::run(calls, bounded_calls::LIMIT)
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

/// The `getdents64` buffer as the uninitialized bytes `RawDir` wants.
pub(super) fn dents_buffer(buf: &mut Vec<u8>) -> &mut [MaybeUninit<u8>] {
    buf.clear();
    buf.spare_capacity_mut()
}

/// Appends the numeric entry names of `dir` to `out`.
pub(super) fn list_numeric_into(
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
pub(super) fn read_at(dir: BorrowedFd<'_>, name: &CStr, buf: &mut Vec<u8>) -> Result<(), Errno> {
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
pub(super) fn read_record_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    buf: &mut Vec<u8>,
) -> Result<(), Errno> {
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
pub(super) fn decimal(n: u32, buf: &mut [u8; 12]) -> &CStr {
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
pub(super) fn thread_link<'b>(tid: u32, suffix: &[u8], buf: &'b mut [u8; 24]) -> &'b CStr {
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
    use crate::inuse::procs::DIR_FLAGS;

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
