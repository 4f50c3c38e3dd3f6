//! Rendering library results for people (tables) and programs (JSON).
//!
//! JSON carries names losslessly: a name that is valid UTF-8 is a string;
//! one that is not is still given as a string (invalid bytes replaced by
//! U+FFFD) *and* as `<field>_base64`, the exact bytes in standard base64.

pub mod claims;
pub mod escape;
pub mod explain;
pub mod ls;
pub mod metrics;
pub mod reap;
pub mod run;
pub mod scan;
pub mod watch;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use base64::Engine as _;
use serde_json::{json, Map, Value};

use sandkeeper::inuse::{Holder, KernelUse};
use sandkeeper::lease::LeaseRecord;

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

pub fn holder_json(h: &Holder) -> Value {
    json!({"pid": h.pid, "comm": &*h.comm, "how": h.how.to_string()})
}

pub fn kernel_json(k: &KernelUse) -> Value {
    let mut obj = Map::new();
    obj.insert(
        "kernel".into(),
        k.to_string().trim_start_matches("kernel: ").into(),
    );
    path_field(&mut obj, "path", k.path.as_os_str());
    Value::Object(obj)
}

pub fn lease_json(r: &LeaseRecord) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
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
}
