//! Bound unix sockets, by the inode of their socket file:
//! `NETLINK_SOCK_DIAG` with `unix_diag`.
//!
//! A listening socket's descriptor does not name the file it is bound to,
//! and the path that `/proc/net/unix` prints is only the text given to
//! `bind` (relative to the binder's working directory, through whatever
//! mount it went), for the reader's network namespace alone. The kernel's
//! socket diagnostics give, per socket, the *device and inode* of the bound
//! file (`UDIAG_SHOW_VFS`) and that text (`UDIAG_SHOW_NAME`), in the
//! network namespace the netlink socket was made in; the caller repeats
//! the dump in every namespace (see `super::namespaces`).
//!
//! Everything the kernel sends is parsed defensively: lengths are checked
//! before every read, and a message not from the kernel (port 0) fails the
//! dump (a blind spot), as a forged end-of-dump could hide sockets.

use std::os::fd::AsFd;

use rustix::io::Errno;
use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use super::mountinfo::makedev;

/// `SOCK_DIAG_BY_FAMILY` (`<linux/sock_diag.h>`).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR`, `NLMSG_DONE` (`<linux/netlink.h>`).
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `NLM_F_REQUEST | NLM_F_DUMP`.
const DUMP_REQUEST: u16 = 0x1 | 0x300;
/// `UDIAG_SHOW_NAME | UDIAG_SHOW_VFS` (`<linux/unix_diag.h>`).
const SHOW_NAME_AND_VFS: u32 = 0x1 | 0x2;
/// Attribute types of a `unix_diag_msg`.
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;
/// `sizeof(struct nlmsghdr)`, `sizeof(struct unix_diag_msg)`.
const NLMSG_HDR: usize = 16;
const UNIX_DIAG_MSG: usize = 16;

/// A unix socket bound to a file, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BoundSocket {
    /// `(device, inode)` of the socket file, `st_dev` encoded as
    /// `makedev(3)`. The kernel reports only the low 32 bits of the inode
    /// number.
    pub(super) file: (u64, u32),
    /// The path as given to `bind`, without trailing NULs; may be relative.
    pub(super) name: Vec<u8>,
}

/// Lists the unix sockets bound to files in the calling thread's network
/// namespace.
///
/// # Errors
///
/// When the netlink socket cannot be made or used, the kernel reports an
/// error, or the reply is malformed or not from the kernel.
pub(super) fn bound_sockets(out: &mut Vec<BoundSocket>) -> Result<(), Errno> {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    rustix::net::sendto(
        fd.as_fd(),
        &dump_request(1),
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let (n, full, from) =
            match rustix::net::recvfrom(fd.as_fd(), &mut buf[..], RecvFlags::empty()) {
                Ok(got) => got,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e),
            };
        let from_kernel = from
            .and_then(|a| SocketAddrNetlink::try_from(a).ok())
            .is_some_and(|a| a.pid() == 0);
        if !from_kernel || full > n {
            return Err(Errno::PROTO);
        }
        if parse_dump(&buf[..n], 1, out)? == Dump::Done {
            return Ok(());
        }
    }
}

/// The request: every unix socket (all states), with its name and file.
fn dump_request(seq: u32) -> [u8; NLMSG_HDR + 24] {
    let mut req = [0u8; NLMSG_HDR + 24];
    req[0..4].copy_from_slice(&((NLMSG_HDR + 24) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&DUMP_REQUEST.to_ne_bytes());
    req[8..12].copy_from_slice(&seq.to_ne_bytes());
    // struct unix_diag_req: family, protocol, pad, states, ino, show, cookie.
    req[16] = libc::AF_UNIX as u8;
    req[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    req[28..32].copy_from_slice(&SHOW_NAME_AND_VFS.to_ne_bytes());
    req
}

/// Whether a dump goes on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Dump {
    More,
    Done,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// `NLMSG_ALIGN`/`RTA_ALIGN`: rounded up to 4.
fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// Parses one datagram of a `sock_diag` dump for request `seq`, appending
/// the sockets bound to files.
///
/// # Errors
///
/// `EPROTO` for a malformed message or one of another request; the
/// kernel's error for `NLMSG_ERROR`.
pub(super) fn parse_dump(
    mut b: &[u8],
    seq: u32,
    out: &mut Vec<BoundSocket>,
) -> Result<Dump, Errno> {
    while !b.is_empty() {
        let len = u32_at(b, 0).ok_or(Errno::PROTO)? as usize;
        let kind = u16_at(b, 4).ok_or(Errno::PROTO)?;
        let msg_seq = u32_at(b, 8).ok_or(Errno::PROTO)?;
        if len < NLMSG_HDR || len > b.len() || msg_seq != seq {
            return Err(Errno::PROTO);
        }
        let payload = &b[NLMSG_HDR..len];
        match kind {
            NLMSG_DONE => return Ok(Dump::Done),
            NLMSG_ERROR => {
                let code = u32_at(payload, 0).ok_or(Errno::PROTO)? as i32;
                return Err(if code < 0 {
                    Errno::from_raw_os_error(-code)
                } else {
                    Errno::PROTO
                });
            }
            SOCK_DIAG_BY_FAMILY => parse_socket(payload, out)?,
            _ => return Err(Errno::PROTO),
        }
        b = &b[align4(len).min(b.len())..];
    }
    Ok(Dump::More)
}

/// One `unix_diag_msg` and its attributes.
fn parse_socket(msg: &[u8], out: &mut Vec<BoundSocket>) -> Result<(), Errno> {
    if msg.len() < UNIX_DIAG_MSG || msg[0] != libc::AF_UNIX as u8 {
        return Err(Errno::PROTO);
    }
    let mut attrs = &msg[UNIX_DIAG_MSG..];
    let (mut name, mut file) = (None, None);
    while attrs.len() >= 4 {
        let len = usize::from(u16_at(attrs, 0).ok_or(Errno::PROTO)?);
        let kind = u16_at(attrs, 2).ok_or(Errno::PROTO)?;
        if len < 4 || len > attrs.len() {
            return Err(Errno::PROTO);
        }
        let data = &attrs[4..len];
        match kind {
            UNIX_DIAG_NAME => name = Some(data),
            UNIX_DIAG_VFS => {
                let ino = u32_at(data, 0).ok_or(Errno::PROTO)?;
                let dev = u32_at(data, 4).ok_or(Errno::PROTO)?;
                // The kernel's own dev_t: major in the top 12 bits.
                file = Some((makedev(dev >> 20, dev & 0xf_ffff), ino));
            }
            _ => {}
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    if let Some(file) = file {
        let mut name = name.unwrap_or_default();
        while let [rest @ .., 0] = name {
            name = rest;
        }
        out.push(BoundSocket {
            file,
            name: name.to_vec(),
        });
    }
    Ok(())
}

// The fallback, where a network namespace cannot be entered: the text of
// `/proc/PID/net/unix`. It can only prove that a namespace has *no* socket
// bound to a file (then nothing there can hold an entry); a listed path is
// never trusted to say where the file is.

/// Appends the bound pathname-socket paths listed in the text of
/// `/proc/net/unix` to `out`; abstract (`@…`) and unbound sockets are left
/// out.
///
/// A line that is not a socket line continues the previous socket's path
/// (a path containing a newline).
pub(super) fn parse_net_unix(text: &[u8], out: &mut Vec<Vec<u8>>) {
    // Whether the last socket line had a path that a continuation extends.
    let mut open_path = false;
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    for (n, line) in text.split(|&b| b == b'\n').enumerate() {
        if n == 0 {
            continue; // the header
        }
        match parse_unix_line(line) {
            Some(UnixLine::Path(path)) => {
                out.push(path.to_vec());
                open_path = true;
            }
            Some(UnixLine::Abstract | UnixLine::Unbound) => open_path = false,
            None if open_path => {
                if let Some(last) = out.last_mut() {
                    last.push(b'\n');
                    last.extend_from_slice(line);
                }
            }
            None => {}
        }
    }
}

/// What one socket line of `/proc/net/unix` says about its address.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum UnixLine<'a> {
    /// Bound to a filesystem path (absolute or relative, as bound).
    Path(&'a [u8]),
    /// Bound to an abstract name (printed with a leading `@`).
    Abstract,
    /// Not bound.
    Unbound,
}

/// Parses one socket line; `None` for the header and anything malformed.
///
/// Seven fields (`Num:`, RefCount, Protocol, Flags, Type, St, Inode) are
/// separated by runs of spaces; then, if the socket is bound, one space and
/// the path's raw bytes up to the end of the line.
pub(super) fn parse_unix_line(line: &[u8]) -> Option<UnixLine<'_>> {
    let mut rest = line;
    for field in 0..7 {
        let start = rest.iter().position(|&b| b != b' ')?;
        rest = &rest[start..];
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        let token = &rest[..end];
        let valid = match field {
            0 => token.len() > 1 && token.ends_with(b":") && is_hex(&token[..token.len() - 1]),
            6 => !token.is_empty() && token.iter().all(u8::is_ascii_digit),
            _ => is_hex(token),
        };
        if !valid {
            return None;
        }
        rest = &rest[end..];
    }
    match rest {
        [] => Some(UnixLine::Unbound),
        [b' ', b'@', ..] => Some(UnixLine::Abstract),
        [b' ', path @ ..] if !path.is_empty() => Some(UnixLine::Path(path)),
        _ => None,
    }
}

fn is_hex(token: &[u8]) -> bool {
    !token.is_empty() && token.iter().all(u8::is_ascii_hexdigit)
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

    /// A netlink message of `kind` with `payload`, padded to 4.
    fn message(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDR + payload.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(align4(m.len()), 0);
        m
    }

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(data);
        a.resize(align4(a.len()), 0);
        a
    }

    fn socket(attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut m = vec![libc::AF_UNIX as u8, 1, 10, 0];
        m.extend_from_slice(&77u32.to_ne_bytes());
        m.extend_from_slice(&[0u8; 8]);
        for a in attrs {
            m.extend_from_slice(a);
        }
        m
    }

    fn vfs(ino: u32, dev: u32) -> Vec<u8> {
        let mut d = ino.to_ne_bytes().to_vec();
        d.extend_from_slice(&dev.to_ne_bytes());
        attr(UNIX_DIAG_VFS, &d)
    }

    #[test]
    fn request_layout() {
        let req = dump_request(9);
        assert_eq!(u32_at(&req, 0), Some(40));
        assert_eq!(u16_at(&req, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(u32_at(&req, 8), Some(9));
        assert_eq!(req[16], libc::AF_UNIX as u8);
        assert_eq!(u32_at(&req, 20), Some(u32::MAX), "all states");
        assert_eq!(u32_at(&req, 28), Some(3), "name and vfs");
    }

    #[test]
    fn dumps_are_parsed_and_hostile_ones_refused() {
        let bound = socket(&[attr(UNIX_DIAG_NAME, b"rel/s\0"), vfs(42, (8 << 20) | 3)]);
        let abstract_ = socket(&[attr(UNIX_DIAG_NAME, b"\0abstract")]);
        let unbound = socket(&[]);
        let want = BoundSocket {
            file: (makedev(8, 3), 42),
            name: b"rel/s".to_vec(),
        };
        let cat = |parts: &[Vec<u8>]| parts.concat();
        let cases: Vec<(&str, Vec<u8>, Result<(Dump, Vec<BoundSocket>), Errno>)> = vec![
            (
                "sockets, then more",
                cat(&[
                    message(SOCK_DIAG_BY_FAMILY, 1, &bound),
                    message(SOCK_DIAG_BY_FAMILY, 1, &abstract_),
                    message(SOCK_DIAG_BY_FAMILY, 1, &unbound),
                ]),
                Ok((Dump::More, vec![want.clone()])),
            ),
            (
                "done",
                cat(&[
                    message(SOCK_DIAG_BY_FAMILY, 1, &bound),
                    message(NLMSG_DONE, 1, &[0; 4]),
                ]),
                Ok((Dump::Done, vec![want.clone()])),
            ),
            (
                "a file without a name",
                message(SOCK_DIAG_BY_FAMILY, 1, &socket(&[vfs(5, 7)])),
                Ok((
                    Dump::More,
                    vec![BoundSocket {
                        file: (makedev(0, 7), 5),
                        name: Vec::new(),
                    }],
                )),
            ),
            (
                "kernel error",
                message(NLMSG_ERROR, 1, &(-13i32).to_ne_bytes()),
                Err(Errno::ACCESS),
            ),
            (
                "another request",
                message(NLMSG_DONE, 2, &[0; 4]),
                Err(Errno::PROTO),
            ),
            ("unknown type", message(99, 1, &[]), Err(Errno::PROTO)),
            ("truncated header", vec![40, 0, 0], Err(Errno::PROTO)),
            (
                "length past the end",
                message(SOCK_DIAG_BY_FAMILY, 1, &bound)[..30].to_vec(),
                Err(Errno::PROTO),
            ),
            (
                "attribute past the end",
                message(SOCK_DIAG_BY_FAMILY, 1, &{
                    let mut s = socket(&[]);
                    s.extend_from_slice(&200u16.to_ne_bytes());
                    s.extend_from_slice(&1u16.to_ne_bytes());
                    s
                }),
                Err(Errno::PROTO),
            ),
            (
                "short vfs attribute",
                message(
                    SOCK_DIAG_BY_FAMILY,
                    1,
                    &socket(&[attr(UNIX_DIAG_VFS, &[1, 2])]),
                ),
                Err(Errno::PROTO),
            ),
            (
                "not a unix socket",
                message(SOCK_DIAG_BY_FAMILY, 1, &[2u8; 16]),
                Err(Errno::PROTO),
            ),
            ("empty", Vec::new(), Ok((Dump::More, Vec::new()))),
        ];
        for (name, bytes, want) in cases {
            let mut out = Vec::new();
            let got = parse_dump(&bytes, 1, &mut out).map(|d| (d, out));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut rng = fastrand::Rng::with_seed(0x50c4_d1a6);
        for _ in 0..2000 {
            let len = rng.usize(0..200);
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            if bytes.len() >= 12 && rng.bool() {
                // Often a plausible header, so the parser gets further.
                bytes[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
                bytes[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
                bytes[8..12].copy_from_slice(&1u32.to_ne_bytes());
            }
            let _ = parse_dump(&bytes, 1, &mut Vec::new());
        }
    }

    #[test]
    fn own_namespace_dump_finds_a_bound_socket() {
        use std::os::unix::fs::MetadataExt;
        let dir = crate::Sandbox::new().unwrap();
        let path = dir.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mut out = Vec::new();
        let result = bound_sockets(&mut out);
        drop(listener);
        result.unwrap();
        let found = out
            .iter()
            .find(|s| s.name == path.as_os_str().as_encoded_bytes())
            .unwrap_or_else(|| panic!("{} not in {out:?}", path.display()));
        assert_eq!(found.file, (meta.dev(), meta.ino() as u32));
    }

    #[test]
    fn parse_unix_lines() {
        let cases: &[(&str, &[u8], Option<UnixLine<'_>>)] = &[
            (
                "listening pathname socket",
                b"0000000000000000: 00000002 00000000 00010000 0001 01 12345 /run/app.sock",
                Some(UnixLine::Path(b"/run/app.sock")),
            ),
            (
                "path with spaces",
                b"ffff8a0c1e2b4400: 00000002 00000000 00010000 0001 01  1234 /tmp/my dir/s ock",
                Some(UnixLine::Path(b"/tmp/my dir/s ock")),
            ),
            (
                "path starting with a space (relative)",
                b"0000000000000000: 00000002 00000000 00010000 0001 01 7  x",
                Some(UnixLine::Path(b" x")),
            ),
            (
                "relative path",
                b"0000000000000000: 00000002 00000000 00010000 0001 01 7 sock",
                Some(UnixLine::Path(b"sock")),
            ),
            (
                "non-utf8 path",
                b"0000000000000000: 00000002 00000000 00010000 0001 01 7 /tmp/\xff",
                Some(UnixLine::Path(b"/tmp/\xff")),
            ),
            (
                "abstract",
                b"0000000000000000: 00000002 00000000 00010000 0001 01 12346 @/tmp/.X11-unix/X0",
                Some(UnixLine::Abstract),
            ),
            (
                "unbound, padded inode",
                b"000000004ea0e72a: 00000003 00000000 00000000 0001 03    45",
                Some(UnixLine::Unbound),
            ),
            (
                "32-bit kernel pointer",
                b"c5d2a000: 00000002 00000000 00010000 0001 01 99 /run/a",
                Some(UnixLine::Path(b"/run/a")),
            ),
            (
                "header",
                b"Num       RefCount Protocol Flags    Type St Inode Path",
                None,
            ),
            (
                "too few fields",
                b"0000000000000000: 00000002 00000000",
                None,
            ),
            (
                "not hex",
                b"zzzz: 00000002 00000000 00010000 0001 01 7 /x",
                None,
            ),
            (
                "inode not a number",
                b"0000: 00000002 00000000 00010000 0001 01 x7 /x",
                None,
            ),
            (
                "trailing space only",
                b"0000: 00000002 00000000 00010000 0001 01 7 ",
                None,
            ),
            ("empty", b"", None),
        ];
        for (name, line, want) in cases {
            assert_eq!(&parse_unix_line(line), want, "{name}");
        }
    }

    #[test]
    fn parse_net_unix_file() {
        let text: &[u8] = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
0000000000000000: 00000002 00000000 00010000 0001 01 11 /run/a.sock\n\
0000000000000000: 00000002 00000000 00010000 0001 01 12 @abstract\n\
0000000000000000: 00000003 00000000 00000000 0001 03    13\n\
0000000000000000: 00000002 00000000 00010000 0001 01 14 /tmp/new\n\
line/sock\n\
0000000000000000: 00000002 00000000 00010000 0001 01 15 rel.sock\n";
        let mut out = Vec::new();
        parse_net_unix(text, &mut out);
        let want: Vec<&[u8]> = vec![b"/run/a.sock", b"/tmp/new\nline/sock", b"rel.sock"];
        assert_eq!(out, want);

        let mut out = Vec::new();
        parse_net_unix(b"", &mut out);
        assert!(out.is_empty(), "empty file");
    }
}
