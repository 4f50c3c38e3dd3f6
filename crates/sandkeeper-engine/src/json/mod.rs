//! The machine-readable documents every face gives: `sandkeeper.scan/v1`
//! ([`scan`] from a report, or [`write_scan`] as the scan goes, in memory
//! flat in the number of entries), `sandkeeper.reap/v1` ([`reap`]),
//! `sandkeeper.report/v1` ([`report`]), `sandkeeper.run/v1` ([`run`]),
//! `sandkeeper.ls/v1` ([`ls`]), and
//! the helpers they are built with. Their fields are documented in `docs/scan-json.md` and
//! `docs/reap-json.md`; a field is never removed or changed in meaning
//! within a schema version.
//!
//! Names are carried losslessly: a name that is valid UTF-8 is a string;
//! one that is not is still given as a string (invalid bytes replaced by
//! U+FFFD) *and* as `<field>_base64`, the exact bytes in standard base64.
//! And the text is safe to print: every character a terminal would act on
//! is written as a `\uXXXX` escape ([`pretty`]).
//!
//! ```
//! use serde_json::{json, Map, Value};
//!
//! let mut obj = Map::new();
//! sandkeeper_engine::json::bytes_field(&mut obj, "name", b"bad\xff");
//! assert_eq!(Value::Object(obj), json!({"name": "bad\u{fffd}", "name_base64": "YmFk/w=="}));
//! assert_eq!(sandkeeper_engine::json::pretty(&"\u{1b}[2J"), r#""\u001b[2J""#);
//! ```

mod ls;
mod reap;
mod report;
mod run;
mod scan;
mod stream;

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;

use base64::Engine as _;
use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};
use serde_json::{json, Map, Value};

use crate::inuse::{Holder, KernelUse};
use crate::lease::LeaseRecord;

pub use ls::ls;
pub use reap::{reap, REAP_SCHEMA};
pub use report::report;
pub use run::run;
pub use scan::{scan, SCAN_SCHEMA};
pub use stream::write_scan;

/// Whether `c` must never reach a terminal as itself (the one list: [`crate::escape::is_dangerous`]).
pub use crate::escape::is_dangerous;

/// `value` as pretty JSON (what `serde_json::to_string_pretty` gives),
/// but with every character [`is_dangerous`] written as a `\uXXXX` escape
/// (a surrogate pair above the BMP): the same document, decoded, and
/// nothing in it a terminal would act on.
pub fn pretty<T: Serialize + ?Sized>(value: &T) -> String {
    let mut buf = Vec::with_capacity(4096);
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, SafeFormatter::default());
    if value.serialize(&mut ser).is_err() {
        return String::new();
    }
    // serde_json writes UTF-8 only.
    String::from_utf8(buf).unwrap_or_default()
}

/// `PrettyFormatter` that escapes what a terminal would act on.
#[derive(Default)]
struct SafeFormatter<'a>(PrettyFormatter<'a>);

impl Formatter for SafeFormatter<'_> {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // Printable ASCII is never dangerous, and it is nearly every name:
        // written as it is, without decoding a char at a time (that took
        // most of the time of writing a scan's JSON).
        let plain = fragment
            .bytes()
            .position(|b| !(0x20..0x7f).contains(&b))
            .unwrap_or(fragment.len());
        writer.write_all(&fragment.as_bytes()[..plain])?;
        // A char boundary: every byte before it is ASCII.
        let mut rest = &fragment[plain..];
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| is_dangerous(c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// Inserts `key` (and `key_base64` when the bytes are not UTF-8).
pub fn bytes_field(obj: &mut Map<String, Value>, key: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => {
            obj.insert(key.into(), s.into());
        }
        Err(_) => {
            obj.insert(
                key.into(),
                String::from_utf8_lossy(bytes).into_owned().into(),
            );
            obj.insert(
                format!("{key}_base64"),
                base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .into(),
            );
        }
    }
}

/// [`bytes_field`] for a path.
pub fn path_field(obj: &mut Map<String, Value>, key: &str, path: &OsStr) {
    bytes_field(obj, key, path.as_bytes());
}

/// A holder: `{pid, comm, how}`.
pub fn holder_value(h: &Holder) -> Value {
    json!({"pid": h.pid, "comm": &*h.comm, "how": h.how.to_string()})
}

/// A kernel user: `{kernel, path}`.
pub fn kernel_value(k: &KernelUse) -> Value {
    let mut obj = Map::new();
    obj.insert(
        "kernel".into(),
        k.to_string().trim_start_matches("kernel: ").into(),
    );
    path_field(&mut obj, "path", k.path.as_os_str());
    Value::Object(obj)
}

/// A lease record, as its fields.
pub fn lease_value(r: &LeaseRecord) -> Value {
    // The record's own line (the `sandkeeper` crate writes it without
    // serde), read back as a value: the same fields as on disk.
    serde_json::from_str(&r.to_line()).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lossless() {
        let cases: [(&[u8], Value); 2] = [
            (b"app-1", json!({"name": "app-1"})),
            (
                b"bad\xff",
                json!({"name": "bad\u{fffd}", "name_base64": "YmFk/w=="}),
            ),
        ];
        for (raw, want) in cases {
            let mut obj = Map::new();
            bytes_field(&mut obj, "name", raw);
            assert_eq!(Value::Object(obj), want);
        }
    }

    #[test]
    fn only_what_a_terminal_acts_on_is_escaped() {
        let cases = [
            ("app-235-1234", r#""app-235-1234""#),
            ("a\u{7f}b", r#""a\u007fb""#),
            ("caf\u{e9}-\u{1b}[2J", "\"caf\u{e9}-\\u001b[2J\""),
            ("x\u{202e}y\u{200b}", r#""x\u202ey\u200b""#),
            ("\u{85}\u{9b}31m", r#""\u0085\u009b31m""#),
            ("tag\u{e0041}", r#""tag\udb40\udc41""#),
            ("\u{1f600} ok", "\"\u{1f600} ok\""),
        ];
        for (raw, want) in cases {
            assert_eq!(pretty(raw), want, "{raw:?}");
            // The same string, decoded.
            assert_eq!(serde_json::from_str::<String>(want).unwrap(), raw);
        }
    }
}
