//! Bound unix sockets: `/proc/net/unix`.
//!
//! A listening socket's descriptor does not name the path it is bound to,
//! so the paths come from `/proc/net/unix`, which lists every socket of the
//! reader's network namespace:
//!
//! ```text
//! Num       RefCount Protocol Flags    Type St Inode Path
//! 0000000000000000: 00000002 00000000 00010000 0001 01 12345 /run/app.sock
//! 0000000000000000: 00000002 00000000 00010000 0001 01 12346 @abstract
//! ```
//!
//! The kernel prints the path's bytes as they are, unescaped: a path may
//! contain spaces, and a newline in a path continues it on the next line.

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
