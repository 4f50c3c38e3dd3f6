//! Times and durations for people: the one way every output of sandkeeper
//! (reasons, tables, `explain`, the config's summary, a kept sandbox's
//! notice) writes them. Shared with the `sandkeeper` crate, whose kept
//! sandboxes say when they may go in the same words.
//!
//! - An instant is UTC to the second: `2026-12-02 14:00:05 UTC`.
//! - A count agrees with its noun: `1 entry`, `2 entries` ([`plural`]).
//! - A duration is at most two of its largest units, in the units the
//!   duration parser takes back (`90s` → `1m 30s`, `86400s` → `1d`).
//! - A size is binary units to three significant digits (`14.6 GiB`,
//!   [`size`]); an age the largest whole unit (`3h`, [`age`]).
//!
//! ```
//! use std::time::Duration;
//! use sandkeeper_engine::human;
//!
//! assert_eq!(human::instant(0), "1970-01-01 00:00:00 UTC");
//! assert_eq!(human::duration(Duration::from_secs(86_400)), "1d");
//! assert_eq!(human::duration(Duration::from_secs(5_400)), "1h 30m");
//! assert_eq!(human::kept_until(90_000, None), "kept until 1970-01-01 00:01:30 UTC");
//! assert_eq!(human::kept_until(90_000, Some(30_000)), "kept until 1970-01-01 00:01:30 UTC (1m from now)");
//! assert_eq!(human::plural(2, "entry", "entries"), "2 entries");
//! assert_eq!(human::size(15_677_000_000), "14.6 GiB");
//! assert_eq!(human::age(3 * 3_600_000), "3h");
//! ```

pub use sandkeeper::__engine::human::{duration, instant, kept_until, plural};

/// Bytes in binary units with three significant digits: `0 B`, `512 B`,
/// `1.50 KiB`, `67.0 MiB`, `14.6 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else if value >= 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// An age in milliseconds in its largest whole unit: `12s`, `5m`, `3h`,
/// `2d`, `6w`, `3y`. A negative age (clock skew, a future mtime) is
/// `future`.
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
