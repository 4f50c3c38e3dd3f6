//! The one sanitizer for text that reaches a terminal or a log.
//!
//! Entry names in a shared root, the lease records in them, and every path
//! and message built from them are chosen by whoever wrote them: a name is
//! any bytes but `/` and NUL, a record anything at all. Shown raw, an escape
//! sequence rewrites the screen or the window title, a carriage return or a
//! newline fakes a line of output, a bidi override reorders what is read.
//! Two layers keep them out:
//!
//! 1. Every untrusted value is rendered through [`Untrusted`]: each
//!    character [`is_dangerous`] says must not reach a terminal becomes a
//!    visible escape, the backslash itself is doubled (so an escape cannot
//!    be forged by writing one), and the value is quoted where it stands
//!    among other words and could be mistaken for them (spaces, quotes,
//!    anything escaped). [`Untrusted::max_chars`] bounds what a table shows.
//! 2. The printer and the watch log pass everything they write through
//!    [`line()`] or [`block`] once more: a render that forgot layer 1 still
//!    cannot put a control character on a terminal. Text that is already
//!    safe passes unchanged (and unallocated).
//!
//! The escapes: `\\` for a backslash, `\n`, `\r`, `\t`; `\xNN` for the
//! other ASCII controls and DEL; `\u{NN}` for C1 controls and the Unicode
//! format controls; `\xNN` for each byte that is not UTF-8 (always `\x80`
//! or above, so never confusable with an ASCII control); `\"` inside
//! quotes.
//!
//! JSON is escaped by its own rules ([`crate::json::pretty`]): `serde_json` escapes C0 controls; the
//! rest of [`is_dangerous`] becomes `\uXXXX`, so a JSON document printed
//! on a terminal is as safe as the table, and decodes to exactly the same
//! values.
//!
//! ```
//! use sandkeeper_engine::escape::{self, Untrusted};
//!
//! // A hostile name: an escape sequence that would retitle the terminal.
//! let name = "job-\u{1b}]0;pwned\u{7}";
//! assert_eq!(Untrusted::text(name).to_string(), r#""job-\x1b]0;pwned\x07""#);
//! assert_eq!(Untrusted::text("app-1").to_string(), "app-1");
//! assert_eq!(Untrusted::text("long-name").max_chars(5).to_string(), "long…");
//! // A line we built passes unchanged unless it carries a control.
//! assert_eq!(escape::line("removed 3 entries"), "removed 3 entries");
//! assert_eq!(escape::line("two\nlines"), r"two\nlines");
//! ```

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt::{self, Write as _};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether `c` must never reach a terminal as itself: C0 controls, DEL and
/// C1 controls (`char::is_control`), and the invisible characters that
/// change how text around them is shown or read: bidi embeddings,
/// overrides, isolates and marks (U+202A–U+202E, U+2066–U+2069, U+200E,
/// U+200F, U+061C), line and paragraph separators (U+2028, U+2029), and
/// the other format controls and fillers (zero-width space and joiners,
/// word joiner, invisible operators, BOM, soft hyphen, interlinear
/// annotation, tag characters, Hangul fillers).
pub fn is_dangerous(c: char) -> bool {
    c.is_control()
        || matches!(
            c as u32,
            0x00AD
                | 0x034F
                | 0x061C
                | 0x0600..=0x0605
                | 0x06DD
                | 0x070F
                | 0x0890..=0x0891
                | 0x08E2
                | 0x115F..=0x1160
                | 0x17B4..=0x17B5
                | 0x180B..=0x180F
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x206F
                | 0x3164
                | 0xFEFF
                | 0xFFA0
                | 0xFFF9..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0000..=0xE0FFF
        )
}

/// How much of the text is trusted to be ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A value someone else chose: escape everything, backslash included.
    Field,
    /// A whole line we built (escapes in it are ours): escape what is
    /// dangerous, newlines included.
    Line,
    /// Lines we built: as `Line`, but newlines stay.
    Block,
}

/// The escape of a dangerous character.
fn push_escape(out: &mut String, c: char) {
    let _ = match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        c if c.is_ascii() => write!(out, "\\x{:02x}", c as u32),
        c => write!(out, "\\u{{{:x}}}", c as u32),
    };
}

/// Calls `f` with each unit of the escaped text: one character, or one
/// escape.
fn each_unit(bytes: &[u8], mode: Mode, quotes: bool, mut f: impl FnMut(&str) -> bool) {
    let mut unit = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            unit.clear();
            match c {
                '\n' if mode == Mode::Block => unit.push('\n'),
                '\\' if mode == Mode::Field => unit.push_str("\\\\"),
                '"' if quotes => unit.push_str("\\\""),
                c if is_dangerous(c) => push_escape(&mut unit, c),
                c => unit.push(c),
            }
            if !f(&unit) {
                return;
            }
        }
        for b in chunk.invalid() {
            unit.clear();
            let _ = write!(unit, "\\x{b:02x}");
            if !f(&unit) {
                return;
            }
        }
    }
}

/// Escapes `bytes` into `out` as `mode` says, quoting with `"` when
/// `quotes`. With a `limit`, at most that many characters are written
/// (quotes included): a longer text is cut, never inside an escape, and
/// ends in `…`.
fn escape_into(out: &mut String, bytes: &[u8], mode: Mode, quotes: bool, limit: Option<usize>) {
    let budget = limit.map(|l| l.saturating_sub(2 * usize::from(quotes)).max(1));
    let fits = budget.is_none_or(|b| {
        let mut total = 0;
        each_unit(bytes, mode, quotes, |u| {
            total += u.chars().count();
            total <= b
        });
        total <= b
    });
    if quotes {
        out.push('"');
    }
    match budget {
        Some(b) if !fits => {
            let mut count = 0;
            each_unit(bytes, mode, quotes, |u| {
                let n = u.chars().count();
                if count + n > b - 1 {
                    return false;
                }
                count += n;
                out.push_str(u);
                true
            });
            out.push('…');
        }
        _ => each_unit(bytes, mode, quotes, |u| {
            out.push_str(u);
            true
        }),
    }
    if quotes {
        out.push('"');
    }
}

/// Whether `bytes` pass unchanged in `mode` (and need no quotes).
fn is_plain(bytes: &[u8], mode: Mode) -> bool {
    // Printable ASCII (nearly all of a table or a JSON document, which
    // pass here whole) is looked at byte by byte, not decoded a char at a
    // time; from the first other byte on, char by char.
    let ascii = bytes
        .iter()
        .position(|&b| match b {
            b'\\' => mode == Mode::Field,
            b'\n' => mode != Mode::Block,
            b => !(0x20..0x7f).contains(&b),
        })
        .unwrap_or(bytes.len());
    let Ok(text) = std::str::from_utf8(&bytes[ascii..]) else {
        return false;
    };
    text.chars().all(|c| match c {
        '\n' => mode == Mode::Block,
        '\\' => mode != Mode::Field,
        c => !is_dangerous(c),
    })
}

/// Whether a field needs quotes to stand among other words: it is empty,
/// or has whitespace, quotes, or anything that is escaped.
fn needs_quotes(bytes: &[u8]) -> bool {
    bytes.is_empty()
        || !is_plain(bytes, Mode::Field)
        || std::str::from_utf8(bytes).is_ok_and(|t| {
            t.chars()
                .any(|c| c.is_whitespace() || c == '"' || c == '\'')
        })
}

/// A value someone else chose (an entry name, a path, a lease record
/// field), to be shown to a person: its [`Display`](fmt::Display) escapes
/// every dangerous character and the backslash, and quotes it when it
/// needs quotes. Width and alignment (`{:<20}`) apply to the escaped text.
///
/// ```text
/// esc-\x1b]0;x\x07   bidi-\u{202e}txt   "two words"   bad-\xff
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Untrusted<'a> {
    bytes: &'a [u8],
    quote: bool,
    limit: Option<usize>,
}

impl<'a> Untrusted<'a> {
    /// Raw bytes (a name, which need not be UTF-8).
    pub fn bytes(bytes: &'a [u8]) -> Untrusted<'a> {
        Untrusted {
            bytes,
            quote: true,
            limit: None,
        }
    }

    /// A string (a record field).
    pub fn text(text: &'a str) -> Untrusted<'a> {
        Untrusted::bytes(text.as_bytes())
    }

    /// An OS string (a name).
    pub fn os(name: &'a OsStr) -> Untrusted<'a> {
        Untrusted::bytes(name.as_bytes())
    }

    /// A path.
    pub fn path(path: &'a Path) -> Untrusted<'a> {
        Untrusted::os(path.as_os_str())
    }

    /// Never quoted (where the value stands alone or its end is clear).
    pub fn bare(mut self) -> Untrusted<'a> {
        self.quote = false;
        self
    }

    /// At most `n` characters of output (quotes included), cut with `…`:
    /// for tables; `explain` shows fields in full.
    pub fn max_chars(mut self, n: usize) -> Untrusted<'a> {
        self.limit = Some(n);
        self
    }

    /// The escaped text.
    pub fn to_cow(self) -> Cow<'a, str> {
        let quotes = self.quote && needs_quotes(self.bytes);
        if !quotes && is_plain(self.bytes, Mode::Field) {
            // Plain UTF-8 by the check above.
            let text = std::str::from_utf8(self.bytes).unwrap_or_default();
            if self.limit.is_none_or(|l| text.chars().count() <= l) {
                return Cow::Borrowed(text);
            }
        }
        let mut out = String::with_capacity(self.bytes.len() + 8);
        escape_into(&mut out, self.bytes, Mode::Field, quotes, self.limit);
        Cow::Owned(out)
    }
}

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.to_cow())
    }
}

/// A name or path made safe for a terminal, never quoted: what
/// `Untrusted::bytes(text).bare()` shows.
pub fn sanitize(text: &[u8]) -> Cow<'_, str> {
    Untrusted::bytes(text).bare().to_cow()
}

/// One line of text we built (a warning, an error, a log line) made safe
/// for a terminal: every dangerous character, a newline too, becomes an
/// escape. Escapes already in it stay as they are.
pub fn line(text: &str) -> Cow<'_, str> {
    sink(text, Mode::Line)
}

/// Lines of text we built (a table, a report) made safe for a terminal:
/// as [`line()`], but newlines stay.
pub fn block(text: &str) -> Cow<'_, str> {
    sink(text, Mode::Block)
}

/// A writer of lines of text we built, written a piece at a time (a long
/// JSON document as the scan goes), that passes them through [`block`] on
/// their way to `out`: each write is escaped up to its last newline, the
/// rest with the next newline or at [`finish`](Self::finish). So a cut
/// between two writes never falls inside a character or an escape, and
/// the bytes that reach `out` are those `block` gives for the whole text
/// (bytes that are not UTF-8 become `\xNN`, as in a field).
pub struct BlockWriter<W: io::Write> {
    out: W,
    /// The text after the last newline written.
    pending: Vec<u8>,
    /// The first error a write met.
    failed: Option<io::ErrorKind>,
}

impl<W: io::Write> BlockWriter<W> {
    /// A writer into `out`; call [`BlockWriter::finish`] at the end.
    pub fn new(out: W) -> BlockWriter<W> {
        BlockWriter {
            out,
            pending: Vec::new(),
            failed: None,
        }
    }

    /// Writes what is still pending and flushes; fails with the first
    /// error any write met, if one did (then nothing more is tried).
    pub fn finish(mut self) -> io::Result<W> {
        if let Some(kind) = self.failed {
            return Err(kind.into());
        }
        let rest = std::mem::take(&mut self.pending);
        self.escaped(&rest)?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// `text` escaped as [`block`] does, to `out`.
    fn escaped(&mut self, text: &[u8]) -> io::Result<()> {
        let written = match is_plain(text, Mode::Block) {
            true => self.out.write_all(text),
            false => {
                let mut out = String::with_capacity(text.len() + 16);
                escape_into(&mut out, text, Mode::Block, false, None);
                self.out.write_all(out.as_bytes())
            }
        };
        if let Err(e) = &written {
            self.failed.get_or_insert(e.kind());
        }
        written
    }
}

impl<W: io::Write> io::Write for BlockWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let Some(last) = bytes.iter().rposition(|&b| b == b'\n') else {
            self.pending.extend_from_slice(bytes);
            return Ok(bytes.len());
        };
        let mut lines = std::mem::take(&mut self.pending);
        lines.extend_from_slice(&bytes[..=last]);
        let written = self.escaped(&lines);
        // The buffer is kept for what comes next.
        lines.clear();
        lines.extend_from_slice(&bytes[last + 1..]);
        self.pending = lines;
        written.map(|()| bytes.len())
    }

    /// Flushes what was escaped; the text after the last newline waits.
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn sink(text: &str, mode: Mode) -> Cow<'_, str> {
    if is_plain(text.as_bytes(), mode) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    escape_into(&mut out, text.as_bytes(), mode, false, None);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let cases: [(&str, &[u8], &str); 16] = [
            ("plain", b"app-235-1", "app-235-1"),
            ("utf8", "ünï".as_bytes(), "ünï"),
            ("newline", b"two\nlines", r#""two\nlines""#),
            ("cr", b"x\rall clear", r#""x\rall clear""#),
            ("tab", b"a\tb", r#""a\tb""#),
            ("esc", b"\x1b[31mred", r#""\x1b[31mred""#),
            ("osc", b"\x1b]0;t\x07", r#""\x1b]0;t\x07""#),
            ("del", b"a\x7f", r#""a\x7f""#),
            ("c1 csi", b"\xc2\x9b2J", r#""\u{9b}2J""#),
            ("bidi", "a\u{202e}b".as_bytes(), r#""a\u{202e}b""#),
            (
                "isolate",
                "\u{2066}x\u{2069}".as_bytes(),
                r#""\u{2066}x\u{2069}""#,
            ),
            ("invalid", b"bad\xffutf8", r#""bad\xffutf8""#),
            ("backslash", br"a\x1b", r#""a\\x1b""#),
            ("space", b"two words", r#""two words""#),
            ("quote", b"say \"hi\"", r#""say \"hi\"""#),
            ("empty", b"", r#""""#),
        ];
        for (name, raw, want) in cases {
            assert_eq!(Untrusted::bytes(raw).to_string(), want, "{name}");
        }
    }

    #[test]
    fn bare_and_sanitize() {
        let cases: [(&[u8], &str); 4] = [
            (b"app-1", "app-1"),
            (b"two\nlines", r"two\nlines"),
            (b"a b", "a b"),
            (b"\x1b[2J", r"\x1b[2J"),
        ];
        for (raw, want) in cases {
            assert_eq!(sanitize(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn limits() {
        let cases: [(&[u8], usize, &str); 5] = [
            (b"short", 10, "short"),
            (b"exactly-10", 10, "exactly-10"),
            (b"much-longer-name", 8, "much-lo…"),
            // Never inside an escape.
            (b"ab\x1bcdef", 5, "\"ab…\""),
            (b"\x1b\x1b\x1b", 9, "\"\\x1b…\""),
        ];
        for (raw, n, want) in cases {
            assert_eq!(
                Untrusted::bytes(raw).max_chars(n).to_string(),
                want,
                "{raw:?}"
            );
            assert!(
                Untrusted::bytes(raw)
                    .max_chars(n)
                    .to_string()
                    .chars()
                    .count()
                    <= n.max(3)
            );
        }
    }

    #[test]
    fn padding_applies_to_the_escaped_text() {
        assert_eq!(
            format!("[{:<8}]", Untrusted::bytes(b"a\x1b")),
            "[\"a\\x1b\" ]"
        );
    }

    #[test]
    fn sinks() {
        let cases: [(&str, &str, &str); 5] = [
            ("ours", "removed 3 entries\n", "removed 3 entries\\n"),
            ("escapes stay", r"a\x1b b", r"a\x1b b"),
            ("esc", "a\x1b[2Jb", r"a\x1b[2Jb"),
            ("cr", "x\ry", r"x\ry"),
            ("bidi", "x\u{202e}y", r"x\u{202e}y"),
        ];
        for (name, text, want) in cases {
            assert_eq!(line(text), want, "{name}");
        }
        assert_eq!(block("a\nb\x1b\n"), "a\nb\\x1b\n");
        assert!(matches!(block("table\nrows\n"), Cow::Borrowed(_)));
    }

    /// Written a piece at a time, cut anywhere (inside a character, an
    /// escape, a line), the text comes out as `block` gives it whole.
    #[test]
    fn block_writer_equals_block_wherever_the_text_is_cut() {
        use std::io::Write as _;

        let text = "{\n  \"name\": \"caf\u{e9}-\u{1b}[2J\u{202e}\",\n  \"n\": \"\u{1f600}\"\n}\nend \u{7f}";
        let whole = block(text);
        for size in 1..=text.len() {
            let mut w = BlockWriter::new(Vec::new());
            for piece in text.as_bytes().chunks(size) {
                w.write_all(piece).unwrap();
            }
            let got = w.finish().unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), whole, "pieces of {size}");
        }
        // Not UTF-8: as in a field.
        let mut w = BlockWriter::new(Vec::new());
        w.write_all(b"bad\xff\n").unwrap();
        assert_eq!(w.finish().unwrap(), b"bad\\xff\n".to_vec());
    }

    /// A failed write is told by `finish`, even when nothing was pending.
    #[test]
    fn block_writer_tells_the_first_error() {
        use std::io::Write as _;

        struct Closed;
        impl io::Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut w = BlockWriter::new(Closed);
        assert!(w.write_all(b"line\n").is_err());
        let err = w.finish().err().map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::BrokenPipe));
    }

    /// Every byte, alone and in every UTF-8 sequence of every dangerous
    /// character: nothing dangerous survives any layer.
    #[test]
    fn nothing_dangerous_survives() {
        let survives = |s: &str, newline_ok: bool| {
            s.chars()
                .any(|c| is_dangerous(c) && !(newline_ok && c == '\n'))
        };
        let mut inputs: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b'x', b, b'y']).collect();
        for pair in 0..=0xFFFFu32 {
            let [a, b, ..] = pair.to_le_bytes();
            inputs.push(vec![a, b]);
        }
        for c in (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|&c| is_dangerous(c))
        {
            inputs.push(format!("a{c}b").into_bytes());
        }
        for raw in &inputs {
            let field = Untrusted::bytes(raw).to_string();
            assert!(!survives(&field, false), "{raw:?} -> {field:?}");
            assert!(!survives(&sanitize(raw), false), "{raw:?}");
            let lossy = String::from_utf8_lossy(raw);
            assert!(!survives(&line(&lossy), false), "{raw:?}");
            assert!(!survives(&block(&lossy), true), "{raw:?}");
            let json = crate::json::pretty(&lossy.as_ref());
            assert!(!survives(&json, false), "{raw:?} -> {json}");
            let back: String = serde_json::from_str(&json).unwrap();
            assert_eq!(back, lossy, "JSON decodes to the same text");
        }
        let required = [
            '\u{1b}', '\u{7}', '\r', '\n', '\u{7f}', '\u{85}', '\u{9b}', '\u{9d}', '\u{202a}',
            '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}',
            '\u{2069}', '\u{200e}', '\u{200f}', '\u{61c}',
        ];
        for c in required {
            assert!(is_dangerous(c), "{c:?}");
        }
    }

    #[test]
    fn json_is_unchanged_but_for_escapes() {
        let value = serde_json::json!({"name": "a\u{202e}b\u{1b}", "n": [1, 2], "plain": "ünï"});
        let want = serde_json::to_string_pretty(&value)
            .unwrap()
            .replace('\u{202e}', "\\u202e");
        assert_eq!(crate::json::pretty(&value), want);
    }
}
