//! Sizes and ages for people, and names made safe for a terminal.

use std::borrow::Cow;

/// Bytes in binary units with three significant digits: `0 B`, `512 B`,
/// `1.5 KiB`, `67.0 MiB`, `14.6 GiB` (the library's, so the config's
/// watermarks print the same).
pub use sandkeeper_engine::config::value::human_size as size;

/// An age in the largest whole unit: `12s`, `5m`, `3h`, `2d`, `6w`, `3y`.
/// Negative ages (clock skew, future mtimes) print as `future`.
pub fn age(ms: i64) -> String {
    if ms < 0 {
        return "future".to_owned();
    }
    let secs = ms / 1000;
    let (value, unit) = match secs {
        s if s < 60 => (s, "s"),
        s if s < 3600 => (s / 60, "m"),
        s if s < 86_400 => (s / 3600, "h"),
        s if s < 14 * 86_400 => (s / 86_400, "d"),
        s if s < 365 * 86_400 => (s / (7 * 86_400), "w"),
        s => (s / (365 * 86_400), "y"),
    };
    format!("{value}{unit}")
}

/// A count with its noun, singular for one: `1 entry`, `2 entries`,
/// `0 families` (the library's, so its messages say it alike). Every
/// count in a sentence goes through here.
pub use sandkeeper_engine::human::plural;

/// The one phrase for a sandbox kept on purpose, with how long is left:
/// `kept until 2026-12-02 14:00:05 UTC (23h from now)` (the library's, so
/// reasons, tables and `explain` say it alike).
pub fn kept_until(until_ms: u64, now_ms: i64) -> String {
    sandkeeper_engine::human::kept_until(until_ms, Some(now_ms.max(0) as u64))
}

/// A duration as the library writes it: `90s` as `1m 30s`, `86400s` as
/// `1d` (read back by the duration parser).
pub use sandkeeper_engine::human::duration;

/// A name or path for a terminal, never quoted: control characters
/// (newlines, escape sequences), bidi and other format controls and invalid
/// UTF-8 become visible escapes, so a hostile file name cannot rewrite the
/// screen or fake a line of output. The one sanitizer is
/// [`crate::render::escape`]; this is its unquoted form.
pub fn sanitize(text: &[u8]) -> Cow<'_, str> {
    crate::render::escape::sanitize(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.00 KiB"),
            (1536, "1.50 KiB"),
            (67 * 1024 * 1024, "67.0 MiB"),
            (15_677_000_000, "14.6 GiB"),
            (150 * 1024 * 1024 * 1024, "150 GiB"),
            (u64::MAX, "16.0 EiB"),
        ];
        for (bytes, want) in cases {
            assert_eq!(size(bytes), want, "{bytes}");
        }
    }

    #[test]
    fn plurals() {
        let cases = [(0, "0 entries"), (1, "1 entry"), (2, "2 entries")];
        for (n, want) in cases {
            assert_eq!(plural(n, "entry", "entries"), want);
        }
        assert_eq!(plural(1, "family", "families"), "1 family");
    }

    #[test]
    fn ages() {
        let cases = [
            (-5, "future"),
            (0, "0s"),
            (59_999, "59s"),
            (60_000, "1m"),
            (3 * 3_600_000, "3h"),
            (2 * 86_400_000, "2d"),
            (30 * 86_400_000, "4w"),
            (800 * 86_400_000, "2y"),
        ];
        for (ms, want) in cases {
            assert_eq!(age(ms), want, "{ms}");
        }
    }
}
