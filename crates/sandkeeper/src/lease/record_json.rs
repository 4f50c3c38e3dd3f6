//! Hand-written JSON encoding and strict decoding of [`LeaseRecord`] (protocol v1).
//!
//! The record is one line of JSON in a file that any local user may have
//! forged, so [`decode`] treats every byte as hostile: it never panics, never
//! recurses (nesting in ignored values is tracked on a heap stack of at most
//! one byte per input byte), reads the input once from left to right, and
//! allocates at most about 16 bytes per input byte (the worst case is a `cmd`
//! of empty strings: 24 bytes of `String` per 3 input bytes, plus `Vec` growth).
//!
//! The reference is `serde_json` with `#[derive(Serialize, Deserialize)]` on the
//! same struct, `#[serde(default)]` on `site`, `cmd`, `checkout` and
//! `keep_until_ms`, and `skip_serializing_if = "Option::is_none"` on the three
//! `Option`s. [`encode`] writes the bytes `serde_json::to_string` writes, and
//! [`decode`] accepts what `serde_json::from_slice` accepts, including its
//! corners: values of unknown fields are checked against the JSON grammar but,
//! as in serde_json's `ignore_value`, without a depth limit and without UTF-8
//! or surrogate checks in their strings; keys and known strings must be UTF-8
//! with paired surrogate escapes; integer fields take only `0|[1-9][0-9]*` in
//! range (so `-0`, `1.0` and `1e3` are errors); `null` is `None` for the
//! `Option`s and an error elsewhere; a known field given twice is an error.
//! One deliberate difference: serde's derive also accepts the struct as a JSON
//! array of its fields in order (`[1,2,3,"b",4,"h",5,"t"]`); we accept only
//! the object form, the only one ever written.

use std::fmt;

use super::LeaseRecord;

/// Encodes `r` as compact JSON, byte for byte what `serde_json::to_string` gives.
pub fn encode(r: &LeaseRecord) -> String {
    let mut o = format!(
        "{{\"v\":{},\"pid\":{},\"start_ticks\":{}",
        r.v, r.pid, r.start_ticks
    );
    push_str_field(&mut o, "boot_id", &r.boot_id);
    o += &format!(",\"uid\":{}", r.uid);
    push_str_field(&mut o, "host", &r.host);
    o += &format!(",\"created_ms\":{}", r.created_ms);
    push_str_field(&mut o, "tag", &r.tag);
    if let Some(site) = &r.site {
        push_str_field(&mut o, "site", site);
    }
    o += ",\"cmd\":[";
    for (i, arg) in r.cmd.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        push_json_str(&mut o, arg);
    }
    o.push(']');
    if let Some(checkout) = &r.checkout {
        push_str_field(&mut o, "checkout", checkout);
    }
    if let Some(keep) = r.keep_until_ms {
        o += &format!(",\"keep_until_ms\":{keep}");
    }
    o.push('}');
    o
}

fn push_str_field(o: &mut String, name: &str, value: &str) {
    *o += &format!(",\"{name}\":");
    push_json_str(o, value);
}

/// Writes `s` as a JSON string, escaped as serde_json escapes it.
fn push_json_str(o: &mut String, s: &str) {
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            '\u{8}' => o.push_str("\\b"),
            '\u{c}' => o.push_str("\\f"),
            '\0'..='\u{1f}' => *o += &format!("\\u{:04x}", u32::from(c)),
            _ => o.push(c),
        }
    }
    o.push('"');
}

/// Why [`decode`] rejected its input, and the byte offset where it noticed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub kind: ErrorKind,
    pub offset: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed input (bad JSON, a string that cannot be a Rust `String`,
    /// bytes after the record): says what, e.g. "unexpected end of input",
    /// "expected `:`", "lone surrogate in \u escape", "invalid UTF-8".
    Syntax(&'static str),
    /// A known field holds a value of the wrong type or out of range.
    InvalidValue {
        field: &'static str,
        expected: &'static str,
    },
    MissingField(&'static str),
    DuplicateField(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Syntax(what) => write!(f, "invalid JSON: {what}")?,
            ErrorKind::InvalidValue { field, expected } => {
                write!(f, "invalid value for `{field}`: expected {expected}")?
            }
            ErrorKind::MissingField(field) => write!(f, "missing field `{field}`")?,
            ErrorKind::DuplicateField(field) => write!(f, "duplicate field `{field}`")?,
        }
        write!(f, " at byte {}", self.offset)
    }
}

impl std::error::Error for DecodeError {}

type Res<T> = Result<T, DecodeError>;

/// Field names in declaration order; the first eight are required.
pub(crate) const FIELDS: [&str; 12] = [
    "v",
    "pid",
    "start_ticks",
    "boot_id",
    "uid",
    "host",
    "created_ms",
    "tag",
    "site",
    "cmd",
    "checkout",
    "keep_until_ms",
];
const U32: u64 = u32::MAX as u64;
const EOF: &str = "unexpected end of input";

/// Decodes one record, accepting what `serde_json::from_slice` accepts (see
/// the module documentation for the one exception). JSON whitespace may
/// surround the object; anything else is an error.
pub fn decode(bytes: &[u8]) -> Result<LeaseRecord, DecodeError> {
    let mut p = Parser { b: bytes, i: 0 };
    let mut r = LeaseRecord {
        v: 0,
        pid: 0,
        start_ticks: 0,
        boot_id: String::new(),
        uid: 0,
        host: String::new(),
        created_ms: 0,
        tag: String::new(),
        site: None,
        cmd: Vec::new(),
        checkout: None,
        keep_until_ms: None,
    };
    let mut seen = 0u16; // bit k set: FIELDS[k] was present
    p.expect(b'{', "expected a JSON object")?;
    if p.ws() == Some(b'}') {
        p.i += 1;
    } else {
        loop {
            if p.ws() != Some(b'"') {
                return Err(p.unexpected("expected a string key"));
            }
            let at = p.i;
            let key = p.string(true)?;
            let key = std::str::from_utf8(&key).map_err(|_| p.err_at(at, "invalid UTF-8"))?;
            p.expect(b':', "expected `:`")?;
            if let Some(k) = FIELDS.iter().position(|&f| f == key) {
                let name = FIELDS[k];
                if seen & 1 << k != 0 {
                    let kind = ErrorKind::DuplicateField(name);
                    return Err(DecodeError { kind, offset: at });
                }
                seen |= 1 << k;
                match k {
                    0 => r.v = p.uint(name, U32)? as u32,
                    1 => r.pid = p.uint(name, U32)? as u32,
                    2 => r.start_ticks = p.uint(name, u64::MAX)?,
                    3 => r.boot_id = p.str_value(name)?,
                    4 => r.uid = p.uint(name, U32)? as u32,
                    5 => r.host = p.str_value(name)?,
                    6 => r.created_ms = p.uint(name, u64::MAX)?,
                    7 => r.tag = p.str_value(name)?,
                    8 => r.site = p.nullable(|p| p.str_value(name))?,
                    9 => r.cmd = p.str_array(name)?,
                    10 => r.checkout = p.nullable(|p| p.str_value(name))?,
                    _ => r.keep_until_ms = p.nullable(|p| p.uint(name, u64::MAX))?,
                }
            } else {
                p.skip_value()?;
            }
            if p.close_or_comma(b'}')? {
                break;
            }
        }
    }
    // Reported in declaration order, after the object, as serde's derive does.
    if let Some(k) = (0..8).find(|k| seen & 1 << k == 0) {
        let kind = ErrorKind::MissingField(FIELDS[k]);
        return Err(DecodeError { kind, offset: p.i });
    }
    if p.ws().is_some() {
        return Err(p.err("trailing characters after the record"));
    }
    Ok(r)
}

/// A cursor over the input; every method keeps `i <= b.len()`.
struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err_at(&self, offset: usize, what: &'static str) -> DecodeError {
        DecodeError {
            kind: ErrorKind::Syntax(what),
            offset,
        }
    }

    fn err(&self, what: &'static str) -> DecodeError {
        self.err_at(self.i, what)
    }

    /// The error for the byte at the cursor not being what was expected.
    fn unexpected(&self, expected: &'static str) -> DecodeError {
        self.err(if self.i < self.b.len() { expected } else { EOF })
    }

    /// Like [`Self::unexpected`], for the value of a known field.
    fn invalid(&self, field: &'static str, expected: &'static str) -> DecodeError {
        if self.i == self.b.len() {
            return self.err(EOF);
        }
        let kind = ErrorKind::InvalidValue { field, expected };
        DecodeError {
            kind,
            offset: self.i,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Skips JSON whitespace and returns the next byte without consuming it.
    fn ws(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
        self.peek()
    }

    fn expect(&mut self, c: u8, what: &'static str) -> Res<()> {
        if self.ws() != Some(c) {
            return Err(self.unexpected(what));
        }
        self.i += 1;
        Ok(())
    }

    /// After a member of a container: consumes `close` (returning true) or `,`.
    fn close_or_comma(&mut self, close: u8) -> Res<bool> {
        match self.ws() {
            Some(c) if c == close => {}
            Some(b',') => {}
            _ => return Err(self.unexpected("expected `,` or a closing bracket")),
        }
        self.i += 1;
        Ok(self.b[self.i - 1] == close)
    }

    /// Consumes `word` (`null`, `true` or `false`), which starts at the cursor.
    fn literal(&mut self, word: &[u8]) -> Res<()> {
        for &c in word {
            if self.peek() != Some(c) {
                return Err(self.unexpected("expected a JSON value"));
            }
            self.i += 1;
        }
        Ok(())
    }

    /// `null` gives `None`; anything else is parsed by `value`.
    fn nullable<T>(&mut self, value: impl FnOnce(&mut Self) -> Res<T>) -> Res<Option<T>> {
        if self.ws() == Some(b'n') {
            return self.literal(b"null").map(|()| None);
        }
        value(self).map(Some)
    }

    /// An integer field: `0|[1-9][0-9]*`, at most `max`, with no fraction or
    /// exponent after it.
    fn uint(&mut self, field: &'static str, max: u64) -> Res<u64> {
        const UINT: &str = "a non-negative integer";
        self.ws();
        let at = self.i;
        let digits = &self.b[at..at + self.digits()];
        let bad = |expected| {
            let kind = ErrorKind::InvalidValue { field, expected };
            DecodeError { kind, offset: at }
        };
        if digits.is_empty() {
            return Err(self.invalid(field, UINT));
        } else if digits.len() > 1 && digits[0] == b'0' {
            return Err(bad("a number without leading zeros"));
        } else if let Some(b'.' | b'e' | b'E') = self.peek() {
            return Err(bad(UINT));
        }
        let n = digits.iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        });
        match n {
            Some(n) if n <= max => Ok(n),
            _ if max == U32 => Err(bad("an integer that fits in u32")),
            _ => Err(bad("an integer that fits in u64")),
        }
    }

    /// The value of a known string field: UTF-8 with paired surrogate escapes.
    fn str_value(&mut self, field: &'static str) -> Res<String> {
        if self.ws() != Some(b'"') {
            return Err(self.invalid(field, "a string"));
        }
        let at = self.i;
        String::from_utf8(self.string(true)?).map_err(|_| self.err_at(at, "invalid UTF-8"))
    }

    fn str_array(&mut self, field: &'static str) -> Res<Vec<String>> {
        if self.ws() != Some(b'[') {
            return Err(self.invalid(field, "an array of strings"));
        }
        self.i += 1;
        let mut out = Vec::new();
        if self.ws() == Some(b']') {
            self.i += 1;
            return Ok(out);
        }
        loop {
            out.push(self.str_value(field)?);
            if self.close_or_comma(b']')? {
                return Ok(out);
            }
        }
    }

    /// Scans the string whose opening quote is at the cursor. With `keep`,
    /// returns its unescaped bytes (UTF-8 still unchecked) and rejects lone
    /// surrogates; without, returns nothing and checks only escapes and control
    /// characters, as serde_json does for ignored values.
    fn string(&mut self, keep: bool) -> Res<Vec<u8>> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let c = self.peek().ok_or_else(|| self.err(EOF))?;
            match c {
                0..=0x1f => return Err(self.err("control character in string")),
                b'"' => {
                    self.i += 1;
                    return Ok(out);
                }
                b'\\' => self.escape(keep, &mut out)?,
                _ if keep => out.push(c),
                _ => {}
            }
            self.i += usize::from(c != b'\\');
        }
    }

    /// Handles the escape whose backslash is at the cursor.
    fn escape(&mut self, keep: bool, out: &mut Vec<u8>) -> Res<()> {
        let at = self.i;
        self.i += 1;
        let c = match self.peek() {
            None => return Err(self.err(EOF)),
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(c @ (b'"' | b'\\' | b'/' | b'u')) => c,
            Some(_) => return Err(self.err("invalid escape")),
        };
        self.i += 1;
        if c != b'u' {
            if keep {
                out.push(c);
            }
            return Ok(());
        }
        let hi = self.hex4()?;
        if !keep {
            return Ok(());
        }
        let lone = self.err_at(at, "lone surrogate in \\u escape");
        let code = match hi {
            0xD800..=0xDBFF => {
                if self.b.get(self.i..self.i + 2) != Some(b"\\u") {
                    return Err(lone);
                }
                self.i += 2;
                match self.hex4()? {
                    lo @ 0xDC00..=0xDFFF => 0x10000 + ((hi - 0xD800) << 10 | (lo - 0xDC00)),
                    _ => return Err(lone),
                }
            }
            0xDC00..=0xDFFF => return Err(lone),
            _ => hi,
        };
        let c = char::from_u32(code).ok_or(lone)?;
        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        Ok(())
    }

    fn hex4(&mut self) -> Res<u32> {
        let Some(digits) = self.b.get(self.i..self.i + 4) else {
            self.i = self.b.len();
            return Err(self.err(EOF));
        };
        let mut n = 0;
        for &d in digits {
            let v = char::from(d).to_digit(16);
            n = n * 16 + v.ok_or_else(|| self.err("invalid \\u escape"))?;
        }
        self.i += 4;
        Ok(n)
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    /// Skips a number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn skip_number(&mut self) -> Res<()> {
        let at = self.i;
        self.i += usize::from(self.peek() == Some(b'-'));
        let int = self.i;
        let mut ok = match self.digits() {
            0 => false,
            n => n == 1 || self.b[int] != b'0',
        };
        if self.peek() == Some(b'.') {
            self.i += 1;
            ok &= self.digits() > 0;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            self.i += usize::from(matches!(self.peek(), Some(b'+' | b'-')));
            ok &= self.digits() > 0;
        }
        if ok {
            Ok(())
        } else {
            Err(self.err_at(at, "invalid number"))
        }
    }

    /// Skips one JSON value of any kind without recursion: `stack` holds the
    /// closing bracket of each open container.
    fn skip_value(&mut self) -> Res<()> {
        let mut stack = Vec::new();
        loop {
            match self.ws() {
                Some(b'n') => self.literal(b"null")?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'"') => _ = self.string(false)?,
                Some(b'-' | b'0'..=b'9') => self.skip_number()?,
                Some(open @ (b'[' | b'{')) => {
                    self.i += 1;
                    let close = open + 2; // `]` and `}` come two after `[` and `{`
                    if self.ws() == Some(close) {
                        self.i += 1;
                    } else {
                        stack.push(close);
                        if close == b'}' {
                            self.skip_key()?;
                        }
                        continue;
                    }
                }
                _ => return Err(self.unexpected("expected a JSON value")),
            }
            // A value is complete: close finished containers, then take a `,`.
            while let Some(&close) = stack.last() {
                if !self.close_or_comma(close)? {
                    if close == b'}' {
                        self.skip_key()?;
                    }
                    break;
                }
                stack.pop();
            }
            if stack.is_empty() {
                return Ok(());
            }
        }
    }

    /// Skips `"key":` inside an ignored object.
    fn skip_key(&mut self) -> Res<()> {
        if self.ws() != Some(b'"') {
            return Err(self.unexpected("expected a string key"));
        }
        self.string(false)?;
        self.expect(b':', "expected `:`")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::{Deserialize, Serialize};
    use std::time::{Duration, Instant};

    /// The same struct as serde would see it: the reference implementation.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Mirror {
        v: u32,
        pid: u32,
        start_ticks: u64,
        boot_id: String,
        uid: u32,
        host: String,
        created_ms: u64,
        tag: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        site: Option<String>,
        #[serde(default)]
        cmd: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkout: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keep_until_ms: Option<u64>,
    }

    fn mirror(r: &LeaseRecord) -> Mirror {
        let r = r.clone();
        Mirror {
            v: r.v,
            pid: r.pid,
            start_ticks: r.start_ticks,
            boot_id: r.boot_id,
            uid: r.uid,
            host: r.host,
            created_ms: r.created_ms,
            tag: r.tag,
            site: r.site,
            cmd: r.cmd,
            checkout: r.checkout,
            keep_until_ms: r.keep_until_ms,
        }
    }

    fn unmirror(m: Mirror) -> LeaseRecord {
        LeaseRecord {
            v: m.v,
            pid: m.pid,
            start_ticks: m.start_ticks,
            boot_id: m.boot_id,
            uid: m.uid,
            host: m.host,
            created_ms: m.created_ms,
            tag: m.tag,
            site: m.site,
            cmd: m.cmd,
            checkout: m.checkout,
            keep_until_ms: m.keep_until_ms,
        }
    }

    /// Checks that `decode` and serde_json agree on `input`: both reject, or
    /// both accept with the same record.
    fn agree(input: &[u8]) -> Result<(), String> {
        let ours = decode(input);
        let theirs = serde_json::from_slice::<Mirror>(input).map(unmirror);
        match (&ours, &theirs) {
            (Ok(a), Ok(b)) if a == b => Ok(()),
            (Err(_), Err(_)) => Ok(()),
            _ => Err(format!(
                "disagreement on {:?}\n  ours:  {ours:?}\n  serde: {theirs:?}",
                String::from_utf8_lossy(input)
            )),
        }
    }

    fn sample() -> LeaseRecord {
        LeaseRecord {
            v: 1,
            pid: 4242,
            start_ticks: 123_456,
            boot_id: "0b1e6c1a-7f0e-4a55-9d7c-3b1f2c4d5e6f".into(),
            uid: 1000,
            host: "box".into(),
            created_ms: 1_700_000_000_000,
            tag: "build".into(),
            site: Some("eu".into()),
            cmd: vec!["make".into(), "-j2".into()],
            checkout: None,
            keep_until_ms: Some(1_700_000_100_000),
        }
    }

    /// The required fields, valid, to build inputs around.
    const REQ: &str = r#""v":1,"pid":2,"start_ticks":3,"boot_id":"b","uid":4,"host":"h","created_ms":5,"tag":"t""#;

    fn obj(extra: &str) -> Vec<u8> {
        format!("{{{REQ}{extra}}}").into_bytes()
    }

    fn corpus() -> Vec<Vec<u8>> {
        let mut c: Vec<Vec<u8>> = Vec::new();
        let mut s = |x: &str| c.push(x.as_bytes().to_vec());
        // Whole-document shape.
        for x in [
            "",
            " ",
            "{",
            "}",
            "[]",
            "{}",
            "\"x\"",
            "null",
            "1",
            "[{}]",
            "{\"v\":1}",
        ] {
            s(x);
        }
        s(&format!("{{{REQ}}}"));
        s(&format!(
            " \t\r\n{{ {} }} \n",
            REQ.replace(',', " ,\n ").replace(':', "\t:\r")
        ));
        s(&format!("\u{feff}{{{REQ}}}")); // BOM
        s(&format!("{{{REQ}}}x"));
        s(&format!("{{{REQ}}}{{}}"));
        s(&format!("{{{REQ}}}\u{0c}")); // form feed is not JSON whitespace
        s(&format!("{{{REQ}}}\0"));
        s(&format!("{{{REQ},}}"));
        s(&format!("{{,{REQ}}}"));
        s(&format!("{{{}}}", REQ.replacen(',', ",,", 1)));
        s(&format!("{{{}}}", REQ.replacen(':', "", 1)));
        s(&format!("{{{}}}", REQ.replacen(',', "", 1)));
        s(&format!("{{{REQ}"));
        s(&format!("{{{REQ},\"cmd\":[\"a\"]"));
        // Missing required fields, each in turn; nulls.
        for f in [
            "v",
            "pid",
            "start_ticks",
            "boot_id",
            "uid",
            "host",
            "created_ms",
            "tag",
        ] {
            let fields: Vec<&str> = REQ
                .split(',')
                .filter(|kv| !kv.starts_with(&format!("\"{f}\"")))
                .collect();
            s(&format!("{{{}}}", fields.join(",")));
            let nulled: Vec<String> = REQ
                .split(',')
                .map(|kv| {
                    if kv.starts_with(&format!("\"{f}\"")) {
                        format!("\"{f}\":null")
                    } else {
                        kv.into()
                    }
                })
                .collect();
            s(&format!("{{{}}}", nulled.join(",")));
        }
        let mut o = |extra: &str| c.push(obj(extra));
        for extra in [
            ",\"site\":null,\"checkout\":null,\"keep_until_ms\":null",
            ",\"site\":\"s\",\"checkout\":\"c\",\"keep_until_ms\":7",
            ",\"cmd\":null",
            ",\"cmd\":[]",
            ",\"cmd\":[ ]",
            ",\"cmd\":[\"a\",\"b\"]",
            ",\"cmd\":[\"a\",]",
            ",\"cmd\":[,]",
            ",\"cmd\":[\"a\" \"b\"]",
            ",\"cmd\":[1]",
            ",\"cmd\":[null]",
            ",\"cmd\":[[\"a\"]]",
            ",\"cmd\":\"a\"",
            ",\"cmd\":{}",
            ",\"site\":1",
            ",\"site\":[]",
            ",\"site\":nul",
            ",\"site\":nullx",
            ",\"site\":Null",
            ",\"keep_until_ms\":\"7\"",
            ",\"keep_until_ms\":true",
            // Duplicates: known fields are errors, unknown are fine.
            ",\"pid\":2",
            ",\"site\":null,\"site\":null",
            ",\"cmd\":[],\"cmd\":[]",
            ",\"x\":1,\"x\":2",
            ",\"p\\u0069d\":9", // an escaped key is the same key: duplicate
            // Unknown fields with every kind of value.
            ",\"x\":null,\"y\":true,\"z\":false,\"w\":-0.5e+10,\"u\":\"\\ud800\",\"q\":{\"a\":[1,{\"b\":[]}],\"a\":{}}",
            ",\"x\":[1,2,[3,[4]],{},[]]",
            ",\"x\":{\"k\" : [ ] , \"k2\":{ } }",
            ",\"x\":[1,]",
            ",\"x\":{\"a\":1,}",
            ",\"x\":{\"a\"}",
            ",\"x\":{\"a\":}",
            ",\"x\":{1:2}",
            ",\"x\":[1 2]",
            ",\"x\":[}",
            ",\"x\":{]",
            ",\"x\":tru",
            ",\"x\":True",
            ",\"x\":NaN",
            ",\"x\":Infinity",
            ",\"x\":+1",
            ",\"x\":01",
            ",\"x\":-",
            ",\"x\":-01",
            ",\"x\":1.",
            ",\"x\":.5",
            ",\"x\":1e",
            ",\"x\":1e+",
            ",\"x\":1E-7",
            ",\"x\":-0",
            ",\"x\":123456789012345678901234567890",
            ",\"x\":\"\\x\"",
            ",\"x\":\"\\u12\"",
            ",\"x\":\"\\u12G4\"",
            ",\"x\":\"\\uDC00\\uD800\"", // lone surrogates are fine in ignored values
            ",\"x\":\"\t\"",             // raw control character
            ",\"x\":\"\u{7f}\"",
            ",\"x\":'a'",
            ",x:1",
            ",\"x\"",
            ",\"x\":",
            ",\"\":1",
            // Integers in known fields.
            ",\"keep_until_ms\":18446744073709551615",
            ",\"keep_until_ms\":18446744073709551616",
            ",\"keep_until_ms\":99999999999999999999999",
            ",\"keep_until_ms\":0",
            ",\"keep_until_ms\":00",
            ",\"keep_until_ms\":-0",
            ",\"keep_until_ms\":-1",
            ",\"keep_until_ms\":1.0",
            ",\"keep_until_ms\":1e3",
            ",\"keep_until_ms\":1E3",
            ",\"keep_until_ms\":0.0",
            ",\"keep_until_ms\":1.5",
            ",\"keep_until_ms\":+1",
            // Strings in known fields.
            ",\"site\":\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
            ",\"site\":\"\\uD83D\\uDE00\"",
            ",\"site\":\"\\ud800\"",
            ",\"site\":\"\\udc00\"",
            ",\"site\":\"\\ud800\\u0041\"",
            ",\"site\":\"\\ud800\\ud800\"",
            ",\"site\":\"\\ude00\\ud83d\"",
            ",\"site\":\"\\ud83d\\n\"",
            ",\"site\":\"\\ud83d",
            ",\"site\":\"\\u0000\"",
            ",\"site\":\"\\U0041\"",
            ",\"site\":\"\\a\"",
            ",\"site\":\"\n\"",
            ",\"site\":\"\u{1f}\"",
            ",\"site\":\"\u{7f}é😀\"",
            ",\"site\":\"abc",
        ] {
            o(extra);
        }
        // Integers at the edges of u32 fields.
        for n in [
            "4294967295",
            "4294967296",
            "0",
            "-0",
            "-1",
            "1.0",
            "1e3",
            "01",
            "00",
            "\"1\"",
            "true",
            "[]",
            "{}",
        ] {
            c.push(
                format!(
                    "{{{}}}",
                    REQ.replacen("\"pid\":2", &format!("\"pid\":{n}"), 1)
                )
                .into_bytes(),
            );
            c.push(
                format!(
                    "{{{}}}",
                    REQ.replacen("\"created_ms\":5", &format!("\"created_ms\":{n}"), 1)
                )
                .into_bytes(),
            );
        }
        // Invalid UTF-8: in a known string, in a key, in an ignored string, outside strings.
        for bad in [
            &b"\xff"[..],
            b"\xc3",
            b"\xc3\x28",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"\xc0\xaf",
        ] {
            for (pre, post) in [
                (",\"site\":\"", "\""),
                (",\"", "\":1"),
                (",\"x\":\"", "\""),
                (",\"x\":", ""),
            ] {
                let mut v = format!("{{{REQ}{pre}").into_bytes();
                v.extend_from_slice(bad);
                v.extend_from_slice(post.as_bytes());
                v.push(b'}');
                c.push(v);
            }
        }
        // Raw UTF-8 split by an escape: valid only as a whole.
        c.push([format!("{{{REQ},\"site\":\"").as_bytes(), b"\xc3\\u00a9\"}"].concat());
        // Deep nesting: in an ignored value, in `cmd`, and as the document.
        for depth in [127, 128, 129, 200, 5000] {
            let nest = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            c.push(obj(&format!(",\"x\":{nest}")));
            c.push(obj(&format!(
                ",\"x\":{}",
                "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth)
            )));
            c.push(obj(&format!(",\"x\":{}", "[".repeat(depth))));
            c.push(obj(&format!(",\"cmd\":{nest}")));
            c.push(nest.into_bytes());
        }
        // The positional (array) form is deliberately not supported; see `known_disagreement`.
        c
    }

    #[test]
    fn corpus_agrees_with_serde_json() {
        let failures: Vec<String> = corpus()
            .iter()
            .filter_map(|input| agree(input).err())
            .collect();
        assert!(
            failures.is_empty(),
            "{} disagreements:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    /// serde's derive also accepts a struct as an array of its fields in
    /// declaration order; we accept only the object form, which is all that
    /// `encode` ever writes.
    #[test]
    fn known_disagreement_positional_array_form() {
        let input = br#"[1,2,3,"b",4,"h",5,"t"]"#;
        assert!(serde_json::from_slice::<Mirror>(input).is_ok());
        assert!(decode(input).is_err());
    }

    #[test]
    fn encode_sample_exactly() {
        let r = sample();
        assert_eq!(
            encode(&r),
            r#"{"v":1,"pid":4242,"start_ticks":123456,"boot_id":"0b1e6c1a-7f0e-4a55-9d7c-3b1f2c4d5e6f","uid":1000,"host":"box","created_ms":1700000000000,"tag":"build","site":"eu","cmd":["make","-j2"],"keep_until_ms":1700000100000}"#
        );
        let weird = LeaseRecord {
            tag: "\"\\\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}é😀/".into(),
            ..sample()
        };
        assert!(encode(&weird).contains(r#""tag":"\"\\\n\r\t\b\f\u0000\u001f"#));
        assert_eq!(
            encode(&weird),
            serde_json::to_string(&mirror(&weird)).unwrap()
        );
    }

    #[test]
    fn errors_say_what_and_where() {
        let msg = |input: &[u8]| decode(input).unwrap_err().to_string();
        let no_tag = REQ.replace(",\"tag\":\"t\"", "");
        assert_eq!(
            msg(format!("{{{no_tag}}}").as_bytes()),
            format!("missing field `tag` at byte {}", no_tag.len() + 2)
        );
        assert_eq!(
            msg(&obj(",\"pid\":7")),
            format!("duplicate field `pid` at byte {}", REQ.len() + 2)
        );
        assert_eq!(
            msg(br#"{"v":1,"pid":"17"}"#),
            "invalid value for `pid`: expected a non-negative integer at byte 13"
        );
        assert_eq!(
            msg(br#"{"v":1,"pid":-1}"#),
            "invalid value for `pid`: expected a non-negative integer at byte 13"
        );
        assert_eq!(
            msg(br#"{"v":4294967296}"#),
            "invalid value for `v`: expected an integer that fits in u32 at byte 5"
        );
        assert_eq!(
            msg(br#"{"v":1.0}"#),
            "invalid value for `v`: expected a non-negative integer at byte 5"
        );
        assert_eq!(
            msg(br#"{"cmd":null}"#),
            "invalid value for `cmd`: expected an array of strings at byte 7"
        );
        assert_eq!(
            msg(br#"{"v":1"#),
            "invalid JSON: unexpected end of input at byte 6"
        );
        let mut trailing = obj("");
        trailing.extend_from_slice(b" x");
        let end = trailing.len() - 1;
        assert_eq!(
            msg(&trailing),
            format!("invalid JSON: trailing characters after the record at byte {end}")
        );
        assert_eq!(
            msg(br#"{"v":01}"#),
            "invalid value for `v`: expected a number without leading zeros at byte 5"
        );
        assert_eq!(
            msg(br#"{"x":-01}"#),
            "invalid JSON: invalid number at byte 5"
        );
        assert_eq!(
            msg(br#"{"site":"\ud800"}"#),
            "invalid JSON: lone surrogate in \\u escape at byte 9"
        );
        assert_eq!(
            msg(b"{\"site\":\"\xff\"}"),
            "invalid JSON: invalid UTF-8 at byte 8"
        );
        assert_eq!(
            msg(b"{\"site\":\"\n\"}"),
            "invalid JSON: control character in string at byte 9"
        );
        assert_eq!(msg(b"[]"), "invalid JSON: expected a JSON object at byte 0");
        assert_eq!(msg(b""), "invalid JSON: unexpected end of input at byte 0");
        assert_eq!(
            decode(&obj(",\"pid\":7")).unwrap_err().kind,
            ErrorKind::DuplicateField("pid")
        );
    }

    #[test]
    fn hostile_sizes_are_cheap() {
        const LIMIT: usize = 64 * 1024;
        let head = format!("{{{REQ},\"x\":");
        let inputs = [
            vec![b'['; LIMIT],
            vec![b'{'; LIMIT],
            [head.as_bytes(), &vec![b'['; LIMIT - head.len()]].concat(),
            [
                head.as_bytes(),
                &b"{\"a\":".repeat((LIMIT - head.len()) / 5),
            ]
            .concat(),
            obj(&format!(
                ",\"x\":{}{}",
                "[".repeat(LIMIT / 2 - 100),
                "]".repeat(LIMIT / 2 - 100)
            )),
            obj(&format!(
                ",\"cmd\":[{}\"\"]",
                "\"\",".repeat(LIMIT / 3 - 100)
            )),
            obj(&format!(
                ",\"site\":\"{}\"",
                "\\ud83d\\ude00".repeat(LIMIT / 12 - 20)
            )),
            vec![b' '; LIMIT],
            [b"{\"".as_slice(), &vec![b'\\'; LIMIT]].concat(),
        ];
        for input in &inputs {
            assert!(input.len() <= LIMIT + 16, "{}", input.len());
            let start = Instant::now();
            let ours = decode(input);
            assert!(start.elapsed() < Duration::from_secs(2), "too slow");
            agree(input).unwrap();
            if let Ok(r) = ours {
                assert!(
                    r.cmd.len() < LIMIT / 3
                        && r.site.as_ref().is_none_or(|s| s.len() <= input.len())
                );
            }
        }
    }

    fn tricky_string() -> impl Strategy<Value = String> {
        let special = prop::sample::select(vec![
            '"',
            '\\',
            '/',
            '\n',
            '\r',
            '\t',
            '\0',
            '\u{8}',
            '\u{b}',
            '\u{c}',
            '\u{1f}',
            '\u{7f}',
            '\u{80}',
            'é',
            '€',
            '😀',
            '\u{2028}',
            '\u{feff}',
            '\u{ffff}',
            '\u{10ffff}',
            'a',
            ' ',
        ]);
        let ch =
            prop_oneof![2 => any::<char>(), 2 => special, 1 => (0u8..0x20).prop_map(char::from)];
        prop::collection::vec(ch, 0..12).prop_map(String::from_iter)
    }

    fn int<T: Arbitrary + From<u32> + Copy + 'static>(max: T) -> impl Strategy<Value = T> {
        prop_oneof![
            Just(T::from(0)),
            Just(max),
            any::<T>(),
            (0u32..1000).prop_map(T::from)
        ]
    }

    fn record() -> impl Strategy<Value = LeaseRecord> {
        let ints = (
            int(u32::MAX),
            int(u32::MAX),
            int(u64::MAX),
            int(u32::MAX),
            int(u64::MAX),
        );
        let strs = (tricky_string(), tricky_string(), tricky_string());
        let opts = (
            prop::option::of(tricky_string()),
            prop::collection::vec(tricky_string(), 0..4),
            prop::option::of(tricky_string()),
            prop::option::of(int(u64::MAX)),
        );
        (ints, strs, opts).prop_map(
            |(
                (v, pid, start_ticks, uid, created_ms),
                (boot_id, host, tag),
                (site, cmd, checkout, keep_until_ms),
            )| {
                LeaseRecord {
                    v,
                    pid,
                    start_ticks,
                    boot_id,
                    uid,
                    host,
                    created_ms,
                    tag,
                    site,
                    cmd,
                    checkout,
                    keep_until_ms,
                }
            },
        )
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Set(prop::sample::Index, u8),
        Insert(prop::sample::Index, u8),
        Delete(prop::sample::Index),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        // Bytes that matter to JSON are much likelier than others.
        let byte = prop_oneof![
            1 => any::<u8>(),
            3 => prop::sample::select(b"{}[]\",:\\/ \t\n0123456789-+.eEnulltruefalseuD8Cx".to_vec()),
        ];
        prop_oneof![
            (any::<prop::sample::Index>(), byte.clone()).prop_map(|(i, b)| Mutation::Set(i, b)),
            (any::<prop::sample::Index>(), byte).prop_map(|(i, b)| Mutation::Insert(i, b)),
            any::<prop::sample::Index>().prop_map(Mutation::Delete),
        ]
    }

    fn apply(mut bytes: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
        for m in muts {
            match m {
                Mutation::Set(i, b) if !bytes.is_empty() => {
                    let i = i.index(bytes.len());
                    bytes[i] = *b;
                }
                Mutation::Insert(i, b) => {
                    let i = i.index(bytes.len() + 1);
                    bytes.insert(i, *b);
                }
                Mutation::Delete(i) if !bytes.is_empty() => {
                    bytes.remove(i.index(bytes.len()));
                }
                _ => {}
            }
        }
        bytes
    }

    /// Any JSON value, as serde_json writes it, for unknown fields.
    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            tricky_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((tricky_string(), inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn round_trip(r in record()) {
            prop_assert_eq!(decode(encode(&r).as_bytes()), Ok(r));
        }

        #[test]
        fn encode_matches_serde_json(r in record()) {
            prop_assert_eq!(encode(&r), serde_json::to_string(&mirror(&r)).unwrap());
        }

        #[test]
        fn unknown_fields_are_ignored(r in record(), name in tricky_string(), value in json_value(), front in any::<bool>()) {
            let field = format!("{}:{}", serde_json::to_string(&name).unwrap(), value);
            let enc = encode(&r);
            let input = if front { format!("{{{field},{}", &enc[1..]) } else { format!("{},{field}}}", &enc[..enc.len() - 1]) };
            agree(input.as_bytes()).map_err(TestCaseError::fail)?;
            if !matches!(name.as_str(), "v" | "pid" | "start_ticks" | "boot_id" | "uid" | "host" | "created_ms" | "tag"
                | "site" | "cmd" | "checkout" | "keep_until_ms") {
                prop_assert_eq!(decode(input.as_bytes()), Ok(r));
            }
        }

        #[test]
        fn random_bytes_agree(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            agree(&bytes).map_err(TestCaseError::fail)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn mutated_encodings_agree(r in record(), muts in prop::collection::vec(mutation(), 1..4)) {
            agree(&apply(encode(&r).into_bytes(), &muts)).map_err(TestCaseError::fail)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(8))]
        #[test]
        fn random_64k_bytes(bytes in prop::collection::vec(any::<u8>(), 65536), start in 0usize..2) {
            // Half the cases start like a record so the parser gets past byte 0.
            let input = if start == 1 { [format!("{{{REQ},\"x\":").as_bytes(), &bytes].concat() } else { bytes };
            let t = Instant::now();
            let _ = decode(&input);
            prop_assert!(t.elapsed() < Duration::from_secs(2));
            agree(&input).map_err(TestCaseError::fail)?;
        }
    }
}
