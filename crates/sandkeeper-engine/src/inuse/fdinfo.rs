//! What `/proc/PID/fdinfo/N` says about descriptors that hold inodes
//! without being open on them: inotify and fanotify watches, and the files
//! registered with an io_uring.

use super::mountinfo::{makedev, unescape_octal};

/// What an anonymous-inode descriptor is, from its link text
/// (`anon_inode:inotify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Anon {
    /// `anon_inode:inotify` or `anon_inode:[fanotify]`: watches inodes.
    Watches,
    /// `anon_inode:[io_uring]`: may hold registered files.
    IoUring,
}

/// Which kind of anonymous descriptor a link text names, if one that can
/// hold inodes.
pub(super) fn anon_kind(link: &[u8]) -> Option<Anon> {
    match link {
        b"anon_inode:inotify" | b"anon_inode:[fanotify]" => Some(Anon::Watches),
        b"anon_inode:[io_uring]" => Some(Anon::IoUring),
        _ => None,
    }
}

/// The `(device, inode)` of every watched inode in an inotify or fanotify
/// fdinfo, appended to `out`: `inotify wd:1 ino:3c4a7 sdev:fe00000 …`,
/// `fanotify ino:… sdev:… mflags:…`. `sdev` is the kernel's internal device
/// number (major above bit 20). Fanotify marks on a whole mount or
/// filesystem (no `ino:`) name no inode and are left out.
///
/// # Errors
///
/// `Err(())` for an inotify line without a readable inode or device: the
/// watches cannot all be known.
pub(super) fn parse_watches(text: &[u8], out: &mut Vec<(u64, u64)>) -> Result<(), ()> {
    for line in text.split(|&b| b == b'\n') {
        let inotify = line.starts_with(b"inotify ");
        if !inotify && !line.starts_with(b"fanotify ") {
            continue;
        }
        let field = |name: &[u8]| {
            line.split(|&b| b == b' ')
                .find_map(|f| f.strip_prefix(name))
                .and_then(|v| u64::from_str_radix(std::str::from_utf8(v).ok()?, 16).ok())
        };
        match (field(b"ino:"), field(b"sdev:")) {
            (Some(ino), Some(sdev)) => {
                let (major, minor) = ((sdev >> 20) as u32, (sdev & 0xf_ffff) as u32);
                out.push((makedev(major, minor), ino));
            }
            (None, _) if !inotify => {} // a mount or filesystem mark
            _ => return Err(()),
        }
    }
    Ok(())
}

/// The `mnt_id:` and `ino:` lines of a descriptor's fdinfo (both
/// decimal): the mount it was opened through and its inode's number, as
/// the kernel keeps them, without asking the filesystem. `None` when
/// either is missing (`ino:` is printed since Linux 5.14).
pub(super) fn parse_mount_and_inode(text: &[u8]) -> Option<(u64, u64)> {
    let field = |name: &[u8]| {
        text.split(|&b| b == b'\n').find_map(|line| {
            let v = line.strip_prefix(name)?;
            std::str::from_utf8(v).ok()?.trim().parse().ok()
        })
    };
    Some((field(b"mnt_id:")?, field(b"ino:")?))
}

/// Whether an io_uring fdinfo shows the ring at all: since Linux 6.11 the
/// kernel prints none of the ring's fields (`SqMask:` is its first) when
/// it could not take the ring's lock.
pub(super) fn ring_shown(text: &[u8]) -> bool {
    text.split(|&b| b == b'\n')
        .any(|l| l.starts_with(b"SqMask:"))
}

/// The registered files of an io_uring fdinfo: the `UserFiles:` count and
/// the listed paths, unescaped (`\040` for a space, as `seq_file_path`
/// writes them), in slot order. Empty slots are not listed; when the kernel
/// could not take the ring's lock, none are.
///
/// `None` when there is no `UserFiles:` line (a kernel that does not say).
pub(super) fn parse_ring_files(text: &[u8]) -> Option<(u64, Vec<Vec<u8>>)> {
    let mut lines = text.split(|&b| b == b'\n');
    let count = lines.by_ref().find_map(|l| {
        let v = l.strip_prefix(b"UserFiles:")?;
        std::str::from_utf8(v).ok()?.trim().parse().ok()
    })?;
    let mut paths = Vec::new();
    for line in lines {
        // `%5u: <path>`
        let trimmed = line.trim_ascii_start();
        let Some(colon) = trimmed.iter().position(|&b| b == b':') else {
            break;
        };
        let (slot, rest) = trimmed.split_at(colon);
        if slot.is_empty() || !slot.iter().all(u8::is_ascii_digit) {
            break;
        }
        let path = rest.strip_prefix(b": ").unwrap_or(&rest[1..]);
        paths.push(unescape_octal(path));
    }
    Some((count, paths))
}

/// The part of an io_uring fdinfo that lists registered files, for
/// checking that it did not change while the paths were resolved.
pub(super) fn ring_files_section(text: &[u8]) -> &[u8] {
    let Some(start) = find(text, b"UserFiles:") else {
        return &[];
    };
    let rest = &text[start..];
    let end = find(rest, b"\nUserBufs:").unwrap_or(rest.len());
    &rest[..end]
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

    #[test]
    fn anon_kinds() {
        let cases: &[(&[u8], Option<Anon>)] = &[
            (b"anon_inode:inotify", Some(Anon::Watches)),
            (b"anon_inode:[fanotify]", Some(Anon::Watches)),
            (b"anon_inode:[io_uring]", Some(Anon::IoUring)),
            (b"anon_inode:[eventfd]", None),
            (b"/tmp/anon_inode:inotify", None),
        ];
        for (link, want) in cases {
            assert_eq!(anon_kind(link), *want, "{}", String::from_utf8_lossy(link));
        }
    }

    #[test]
    fn watch_cases() {
        let cases: &[(&str, &[u8], Result<Vec<(u64, u64)>, ()>)] = &[
            (
                "inotify",
                b"pos:\t0\nflags:\t00\nmnt_id:\t17\nino:\t17\ninotify wd:1 ino:3c4a7 sdev:fe00000 mask:100 ignored_mask:0 fhandle-bytes:8 fhandle-type:1 f_handle:a7c4030000000000\n",
                Ok(vec![(makedev(254, 0), 0x3c4a7)]),
            ),
            (
                "two watches, minor device",
                b"inotify wd:2 ino:10 sdev:2d mask:2 ignored_mask:0\ninotify wd:1 ino:a sdev:800001 mask:2\n",
                Ok(vec![(makedev(0, 0x2d), 0x10), (makedev(8, 1), 0xa)]),
            ),
            ("no watches", b"pos:\t0\nflags:\t00\n", Ok(vec![])),
            (
                "fanotify inode mark, then a mount mark",
                b"fanotify flags:0 event-flags:0\nfanotify ino:42 sdev:800001 mflags:0 mask:1 ignored_mask:0\nfanotify mnt_id:1c mflags:0 mask:1\n",
                Ok(vec![(makedev(8, 1), 0x42)]),
            ),
            ("inotify without inode", b"inotify wd:1 sdev:800001 mask:2\n", Err(())),
            ("bad hex", b"inotify wd:1 ino:xyz sdev:800001 mask:2\n", Err(())),
        ];
        for (name, text, want) in cases {
            let mut got = Vec::new();
            let result = parse_watches(text, &mut got).map(|()| got);
            assert_eq!(result, *want, "{name}");
        }
    }

    #[test]
    fn mount_and_inode_cases() {
        let cases: &[(&str, &[u8], Option<(u64, u64)>)] = &[
            (
                "a directory on FUSE",
                b"pos:\t0\nflags:\t012000000\nmnt_id:\t114\nino:\t2\n",
                Some((114, 2)),
            ),
            (
                "large inode",
                b"pos:\t0\nflags:\t02\nmnt_id:\t1\nino:\t18446744073709551615\n",
                Some((1, u64::MAX)),
            ),
            (
                "no ino line (before 5.14)",
                b"pos:\t0\nflags:\t02\nmnt_id:\t9\n",
                None,
            ),
            ("no mnt_id line", b"pos:\t0\nino:\t9\n", None),
            ("not a number", b"mnt_id:\tx\nino:\t9\n", None),
            (
                "inotify ino: is hex, not the line",
                b"mnt_id:\t3\ninotify wd:1 ino:3c sdev:1\n",
                None,
            ),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_mount_and_inode(text), *want, "{name}");
        }
    }

    #[test]
    fn ring_file_cases() {
        let ring = b"SqMask:\t0x3\nSqThreadCpu:\t-1\nUserFiles:\t3\n    0: /tmp/e/a\\040file\\011with\\012breaks\n    2: /tmp/e/b\nUserBufs:\t0\nPollList:\n";
        let cases: &[(&str, &[u8], Option<(u64, Vec<&[u8]>)>)] = &[
            (
                "escaped names, an empty slot",
                ring,
                Some((3, vec![&b"/tmp/e/a file\twith\nbreaks"[..], b"/tmp/e/b"])),
            ),
            (
                "no files",
                b"UserFiles:\t0\nUserBufs:\t0\n",
                Some((0, vec![])),
            ),
            (
                "lock not taken: counted, not listed",
                b"UserFiles:\t2\nUserBufs:\t0\n",
                Some((2, vec![])),
            ),
            (
                "wide slot numbers",
                b"UserFiles:\t100001\n100000: /x\nUserBufs:\t0\n",
                Some((100001, vec![&b"/x"[..]])),
            ),
            ("old kernel", b"SqMask:\t0x3\n", None),
        ];
        for (name, text, want) in cases {
            let want = want
                .as_ref()
                .map(|(n, p)| (*n, p.iter().map(|p| p.to_vec()).collect::<Vec<_>>()));
            assert_eq!(parse_ring_files(text), want, "{name}");
        }
        assert_eq!(
            ring_files_section(ring),
            &b"UserFiles:\t3\n    0: /tmp/e/a\\040file\\011with\\012breaks\n    2: /tmp/e/b"[..]
        );
        assert_eq!(ring_files_section(b"SqMask:\t0x3\n"), b"");
        // Linux 6.11+: a ring whose lock the kernel could not take shows
        // nothing of itself, which is not "no files".
        assert!(ring_shown(ring) && ring_shown(b"SqMask:\t0x3\n"));
        assert!(!ring_shown(b"pos:\t0\nflags:\t02\nmnt_id:\t16\nino:\t1\n"));
    }
}
