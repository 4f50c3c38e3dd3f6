//! Parsing `mountinfo`: one line into a [`MountLine`], overlay layers
//! from superblock options, the paths a bind mount's subtree is visible
//! under, and the device numbers `/proc` files print.
//!
//! A `mountinfo` line (see proc(5)):
//!
//! ```text
//! 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//! (1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
//! ```
//!
//! (4) is the root of the mount inside its filesystem (not `/` for a bind
//! mount of a subdirectory, with `//deleted` appended when that directory
//! was deleted), (5) the mount point, (7) zero or more optional fields ended
//! by `-`, (9) the filesystem type, (10) the source and (11) the
//! superblock options. Space, tab, newline and backslash in (4), (5) and
//! (10) are escaped as `\040`, `\011`, `\012` and `\134`; option values
//! (`lowerdir=…`) escape `,` `=` and whitespace the same way.

use super::OverlayLayer;

/// One parsed `mountinfo` line, unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MountLine {
    /// Major device number of the filesystem.
    pub(super) major: u32,
    /// Minor device number of the filesystem.
    pub(super) minor: u32,
    /// The mounted directory inside its filesystem, without `//deleted`.
    pub(super) root: Vec<u8>,
    /// Whether the kernel marked `root` as deleted.
    pub(super) root_deleted: bool,
    /// Where it is mounted.
    pub(super) mount_point: Vec<u8>,
    /// Filesystem type (`ext4`, `overlay`, `fuse.sshfs`).
    pub(super) fstype: Vec<u8>,
    /// The source as given to mount (`/dev/vda1`, `tmpfs`, `overlay`).
    pub(super) source: Vec<u8>,
    /// Superblock options, still escaped (values are unescaped when split).
    pub(super) super_options: Vec<u8>,
}

/// Parses one `mountinfo` line; `None` when malformed.
pub(super) fn parse_mountinfo_line(line: &[u8]) -> Option<MountLine> {
    // Fields are separated by single spaces; an empty source shows as two
    // spaces in a row, so empty fields are kept.
    let mut fields = line.split(|&b| b == b' ');
    let _id: u32 = parse_dec(fields.next()?)?;
    let _parent: u32 = parse_dec(fields.next()?)?;
    let (major, minor) = parse_dev(fields.next()?, 10)?;
    let root = unescape_octal(fields.next()?);
    let mount_point = unescape_octal(fields.next()?);
    let _options = fields.next()?;
    // Optional fields (shared:N, master:N, …) up to the separator.
    loop {
        if fields.next()? == b"-" {
            break;
        }
    }
    let fstype = unescape_octal(fields.next()?);
    let source = unescape_octal(fields.next()?);
    let super_options = fields.next().unwrap_or_default().to_vec();
    if root.first() != Some(&b'/') || mount_point.is_empty() || fstype.is_empty() {
        return None;
    }
    let (root, root_deleted) = match root.strip_suffix(b"//deleted") {
        Some(r) => (
            if r.is_empty() {
                b"/".to_vec()
            } else {
                r.to_vec()
            },
            true,
        ),
        None => (root, false),
    };
    Some(MountLine {
        major,
        minor,
        root,
        root_deleted,
        mount_point,
        fstype,
        source,
        super_options,
    })
}

/// Parses every line of a `mountinfo` text, skipping malformed ones.
pub(super) fn parse_mountinfo(text: &[u8]) -> Vec<MountLine> {
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(parse_mountinfo_line)
        .collect()
}

/// Decodes `\ooo` octal escapes (three octal digits, value up to 255); a
/// backslash not starting one is kept as it is.
pub(super) fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\' {
            let digits = &field[i + 1..(i + 4).min(field.len())];
            if digits.len() == 3 && digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

/// The overlay layers named by an overlay mount's superblock options, in
/// order: `lowerdir=` (colon-separated, `\` escaping the next byte, layers
/// after `::` are data-only), `lowerdir+=`/`datadir+=` (one path each),
/// `upperdir=` and `workdir=`.
pub(super) fn overlay_layers(super_options: &[u8]) -> Vec<(OverlayLayer, Vec<u8>)> {
    let mut layers = Vec::new();
    for option in super_options.split(|&b| b == b',') {
        let Some(eq) = option.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (name, value) = (&option[..eq], unescape_octal(&option[eq + 1..]));
        match name {
            b"lowerdir" => split_lowerdir(&value, &mut layers),
            b"lowerdir+" => layers.push((OverlayLayer::Lower, value)),
            b"datadir+" => layers.push((OverlayLayer::Data, value)),
            b"upperdir" => layers.push((OverlayLayer::Upper, unescape_backslash(&value))),
            b"workdir" => layers.push((OverlayLayer::Work, unescape_backslash(&value))),
            _ => {}
        }
    }
    layers.retain(|(_, path)| !path.is_empty());
    layers
}

/// Splits a `lowerdir=` value at unescaped `:`; after an empty component
/// (`::`) the layers are data-only.
fn split_lowerdir(value: &[u8], out: &mut Vec<(OverlayLayer, Vec<u8>)>) {
    let mut kind = OverlayLayer::Lower;
    let mut current = Vec::new();
    let mut bytes = value.iter();
    let mut flush = |current: &mut Vec<u8>, kind: &mut OverlayLayer| {
        if current.is_empty() {
            *kind = OverlayLayer::Data;
        } else {
            out.push((*kind, std::mem::take(current)));
        }
    };
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => current.push(*bytes.next().unwrap_or(&b'\\')),
            b':' => flush(&mut current, &mut kind),
            _ => current.push(b),
        }
    }
    if !current.is_empty() {
        flush(&mut current, &mut kind);
    }
}

/// Removes `\` escapes (`\:` → `:`, `\\` → `\`), as overlayfs does when it
/// parses a layer option.
fn unescape_backslash(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.iter();
    while let Some(&b) = bytes.next() {
        out.push(if b == b'\\' {
            *bytes.next().unwrap_or(&b'\\')
        } else {
            b
        });
    }
    out
}

/// For a mount of a subtree (`root` is not `/`: a bind mount, a btrfs
/// subvolume), the paths under which that subtree is visible through the
/// *other* mounts of the same filesystem in the same namespace.
pub(super) fn bind_source_paths(mounts: &[MountLine], index: usize) -> Vec<Vec<u8>> {
    let m = &mounts[index];
    let mut paths = Vec::new();
    if m.root == b"/" || m.root_deleted {
        return paths;
    }
    for (j, other) in mounts.iter().enumerate() {
        if j == index || (other.major, other.minor) != (m.major, m.minor) {
            continue;
        }
        // `other` shows `other.root`; `m.root` must lie strictly below it.
        let Some(rest) = strip_dir_prefix(&m.root, &other.root) else {
            continue;
        };
        if rest.is_empty() {
            continue; // the same subtree mounted twice: not its source
        }
        let mut path = other.mount_point.clone();
        if path != b"/" {
            path.push(b'/');
        }
        path.extend_from_slice(rest);
        paths.push(path);
    }
    paths.sort();
    paths.dedup();
    paths
}

/// `path` without the directory `dir` and the following `/`, if `path` is
/// `dir` (then empty) or lies under it.
pub(super) fn strip_dir_prefix<'a>(path: &'a [u8], dir: &[u8]) -> Option<&'a [u8]> {
    if dir == b"/" {
        return Some(path.strip_prefix(b"/").unwrap_or(path));
    }
    let rest = path.strip_prefix(dir)?;
    match rest {
        [] => Some(rest),
        [b'/', tail @ ..] => Some(tail),
        _ => None,
    }
}

/// `major:minor` in the given radix.
pub(super) fn parse_dev(text: &[u8], radix: u32) -> Option<(u32, u32)> {
    let colon = text.iter().position(|&b| b == b':')?;
    let num = |t: &[u8]| u32::from_str_radix(std::str::from_utf8(t).ok()?, radix).ok();
    Some((num(&text[..colon])?, num(&text[colon + 1..])?))
}

/// A decimal number with nothing else around it.
pub(super) fn parse_dec<T: std::str::FromStr>(text: &[u8]) -> Option<T> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// The major number of a `dev_t` encoded as `makedev(3)`.
pub(super) fn major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)) as u32
}

/// The `dev_t` encoding of glibc and `stat` (as `makedev(3)`).
pub(super) fn makedev(major: u32, minor: u32) -> u64 {
    let (major, minor) = (u64::from(major), u64::from(minor));
    ((major & 0xffff_f000) << 32)
        | ((major & 0x0000_0fff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0x0000_00ff)
}

/// A mount line for tests: device `0:0`, its root not deleted.
#[cfg(test)]
pub(super) fn test_line(
    root: &str,
    mount_point: &str,
    fstype: &str,
    source: &str,
    super_options: &str,
) -> MountLine {
    MountLine {
        major: 0,
        minor: 0,
        root: root.into(),
        root_deleted: false,
        mount_point: mount_point.into(),
        fstype: fstype.into(),
        source: source.into(),
        super_options: super_options.into(),
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::test_line as line;
    use super::*;

    #[test]
    fn parse_mountinfo_lines() {
        let dev = |mut l: MountLine, major, minor| {
            l.major = major;
            l.minor = minor;
            l
        };
        let cases: Vec<(&str, &[u8], Option<MountLine>)> = vec![
            (
                "root filesystem",
                b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard",
                Some(dev(line("/", "/", "ext4", "/dev/vda", "rw,discard"), 254, 0)),
            ),
            (
                "optional fields",
                b"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue",
                Some(dev(line("/mnt1", "/mnt2", "ext3", "/dev/root", "rw,errors=continue"), 98, 0)),
            ),
            (
                "escaped space, tab, newline, backslash",
                b"40 27 0:50 / /tmp/a\\040b\\011c\\012d\\134e rw - tmpfs tmpfs rw",
                Some(dev(line("/", "/tmp/a b\tc\nd\\e", "tmpfs", "tmpfs", "rw"), 0, 50)),
            ),
            (
                "bind of a deleted directory",
                b"41 27 254:0 /tmp/gone//deleted /mnt rw - ext4 /dev/vda rw",
                Some(MountLine {
                    root_deleted: true,
                    ..dev(line("/tmp/gone", "/mnt", "ext4", "/dev/vda", "rw"), 254, 0)
                }),
            ),
            (
                "empty source",
                b"42 27 0:51 / /x rw - tmpfs  rw",
                Some(dev(line("/", "/x", "tmpfs", "", "rw"), 0, 51)),
            ),
            (
                "no super options",
                b"42 27 0:51 / /x rw - tmpfs none",
                Some(dev(line("/", "/x", "tmpfs", "none", ""), 0, 51)),
            ),
            ("no separator", b"42 27 0:51 / /x rw shared:1 tmpfs none rw", None),
            ("bad device", b"42 27 0-51 / /x rw - tmpfs none rw", None),
            ("bad id", b"x 27 0:51 / /x rw - tmpfs none rw", None),
            ("truncated", b"42 27 0:51 /", None),
            ("empty", b"", None),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_mountinfo_line(text), want, "{name}");
        }
    }

    #[test]
    fn unescape_octal_cases() {
        let cases: &[(&str, &[u8], &[u8])] = &[
            ("none", b"/tmp/a", b"/tmp/a"),
            ("space", b"/a\\040b", b"/a b"),
            ("at end", b"/a\\134", b"/a\\"),
            ("comma", b"/a\\054b", b"/a,b"),
            ("colon", b"/a\\072b", b"/a:b"),
            ("too short", b"/a\\04", b"/a\\04"),
            ("not octal", b"/a\\089", b"/a\\089"),
            ("over 255", b"/a\\777", b"/a\\777"),
            ("lone backslash", b"\\", b"\\"),
        ];
        for (name, input, want) in cases {
            assert_eq!(unescape_octal(input), *want, "{name}");
        }
    }

    #[test]
    fn overlay_layer_cases() {
        use OverlayLayer::{Data, Lower, Upper, Work};
        let cases: &[(&str, &[u8], &[(OverlayLayer, &[u8])])] = &[
            (
                "classic",
                b"rw,lowerdir=/l1:/l2,upperdir=/u,workdir=/w,xino=off",
                &[
                    (Lower, b"/l1"),
                    (Lower, b"/l2"),
                    (Upper, b"/u"),
                    (Work, b"/w"),
                ],
            ),
            (
                "octal escapes in values",
                b"rw,lowerdir=/a\\040b:/c\\054d,upperdir=/e\\075f,workdir=/w",
                &[
                    (Lower, b"/a b"),
                    (Lower, b"/c,d"),
                    (Upper, b"/e=f"),
                    (Work, b"/w"),
                ],
            ),
            (
                "escaped colon in a layer",
                b"rw,lowerdir=/a\\134:b:/c",
                &[(Lower, b"/a:b"), (Lower, b"/c")],
            ),
            (
                "data-only layers after ::",
                b"ro,lowerdir=/l1::/d1:/d2",
                &[(Lower, b"/l1"), (Data, b"/d1"), (Data, b"/d2")],
            ),
            (
                "new mount api",
                b"ro,lowerdir+=/l1,lowerdir+=/l2,datadir+=/d",
                &[(Lower, b"/l1"), (Lower, b"/l2"), (Data, b"/d")],
            ),
            ("read-only, no upper", b"ro,lowerdir=/l", &[(Lower, b"/l")]),
            (
                "relative layer",
                b"rw,lowerdir=rel,upperdir=/u,workdir=/w",
                &[(Lower, b"rel"), (Upper, b"/u"), (Work, b"/w")],
            ),
            ("no layers", b"rw,size=4k", &[]),
            ("empty", b"", &[]),
        ];
        for (name, options, want) in cases {
            let got = overlay_layers(options);
            let got: Vec<(OverlayLayer, &[u8])> =
                got.iter().map(|(k, p)| (*k, p.as_slice())).collect();
            assert_eq!(got, *want, "{name}");
        }
    }

    #[test]
    fn bind_sources_are_translated_through_other_mounts() {
        let with_dev = |mut l: MountLine, minor| {
            l.minor = minor;
            l
        };
        let mounts = vec![
            with_dev(line("/", "/", "ext4", "/dev/vda", "rw"), 1),
            with_dev(line("/", "/tmp", "tmpfs", "tmpfs", "rw"), 2),
            // /tmp/sb/dir bound to /mnt/a and again to /mnt/b.
            with_dev(line("/sb/dir", "/mnt/a", "tmpfs", "tmpfs", "rw"), 2),
            with_dev(line("/sb/dir", "/mnt/b", "tmpfs", "tmpfs", "rw"), 2),
            // A bind of a file of the root filesystem.
            with_dev(
                line("/etc/hosts", "/tmp/sb/hosts", "ext4", "/dev/vda", "rw"),
                1,
            ),
            // A subtree of a filesystem not mounted whole anywhere.
            with_dev(line("/vol", "/data", "btrfs", "/dev/sdb", "rw"), 3),
        ];
        let cases: &[(&str, usize, &[&str])] = &[
            ("whole filesystem", 1, &[]),
            ("bind of a tmpfs subdirectory", 2, &["/tmp/sb/dir"]),
            ("second bind of the same subtree", 3, &["/tmp/sb/dir"]),
            ("file bind from the root filesystem", 4, &["/etc/hosts"]),
            ("source filesystem not visible", 5, &[]),
        ];
        for (name, index, want) in cases {
            let got = bind_source_paths(&mounts, *index);
            let want: Vec<Vec<u8>> = want.iter().map(|s| s.as_bytes().to_vec()).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn strip_dir_prefix_cases() {
        let cases: &[(&str, &str, &str, Option<&str>)] = &[
            ("below", "/a/b/c", "/a", Some("b/c")),
            ("equal", "/a", "/a", Some("")),
            ("from root", "/a/b", "/", Some("a/b")),
            ("sibling prefix", "/ab/c", "/a", None),
            ("unrelated", "/x", "/a", None),
        ];
        for (name, path, dir, want) in cases {
            let got = strip_dir_prefix(path.as_bytes(), dir.as_bytes());
            assert_eq!(got, want.map(str::as_bytes), "{name}");
        }
    }

    #[test]
    fn dev_numbers() {
        let cases: &[(&str, &[u8], u32, Option<(u32, u32)>)] = &[
            ("decimal", b"254:0", 10, Some((254, 0))),
            ("hex", b"fd:01", 16, Some((0xfd, 1))),
            ("wide hex minor", b"00:1a3", 16, Some((0, 0x1a3))),
            ("no colon", b"254", 10, None),
            ("junk", b"x:y", 10, None),
        ];
        for (name, text, radix, want) in cases {
            assert_eq!(parse_dev(text, *radix), *want, "{name}");
        }
        assert_eq!(makedev(8, 1), 0x801);
        assert_eq!(major(makedev(259, 0x1_0005)), 259);
        assert_eq!(major(makedev(0x0001_2345, 7)), 0x0001_2345);
        assert_eq!(makedev(259, 0x1_0005), 0x1001_0305);
    }
}
