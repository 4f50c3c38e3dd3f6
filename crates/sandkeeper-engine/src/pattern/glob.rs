//! The pattern syntax: escaping names into patterns, and matching.

use std::fmt::Write as _;

/// Appends `bytes` to a pattern, escaped (see the [module
/// docs](super#pattern-syntax)).
pub(super) fn escape_into(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '*' | '?' | '[' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                c if c.is_ascii_control() => {
                    let _ = write!(out, "\\x{:02x}", c as u8);
                }
                c => out.push(c),
            }
        }
        for &b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
}

/// A parsed pattern: literal bytes and stars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Glob {
    Byte(u8),
    Star,
}

pub(super) fn parse_glob(pattern: &str) -> Vec<Glob> {
    let bytes = pattern.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'*' => out.push(Glob::Star),
            b'\\' if i + 1 < bytes.len() => {
                i += 1;
                let hex = |b: u8| (b as char).to_digit(16);
                match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
                    (b'x', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                        let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                        out.push(Glob::Byte(value as u8));
                        i += 2;
                    }
                    (b, _, _) => out.push(Glob::Byte(b)),
                }
            }
            b => out.push(Glob::Byte(b)),
        }
        i += 1;
    }
    out
}

/// Glob matching with `*` only: linear backtracking to the last star.
pub(super) fn glob_match(pattern: &[Glob], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(Glob::Star) => {
                star = Some((p, n));
                p += 1;
            }
            Some(Glob::Byte(b)) if *b == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|g| *g == Glob::Star)
}
