//! Times and durations for people: the one way every output of sandkeeper
//! (reasons, tables, `explain`, the config's summary, a kept sandbox's
//! notice) writes them. Public through the engine (`sandkeeper_engine::human`).
//!
//! - An instant is UTC to the second: `2026-12-02 14:00:05 UTC`.
//! - A count agrees with its noun: `1 entry`, `2 entries` ([`plural`]).
//! - A duration is at most two of its largest units, in the units the
//!   duration parser takes back (`90s` → `1m 30s`, `86400s` → `1d`).
//!
//! ```
//! use std::time::Duration;
//! use sandkeeper::__engine::human;
//!
//! assert_eq!(human::instant(0), "1970-01-01 00:00:00 UTC");
//! assert_eq!(human::duration(Duration::from_secs(86_400)), "1d");
//! assert_eq!(human::duration(Duration::from_secs(5_400)), "1h 30m");
//! assert_eq!(human::kept_until(90_000, None), "kept until 1970-01-01 00:01:30 UTC");
//! assert_eq!(human::kept_until(90_000, Some(30_000)), "kept until 1970-01-01 00:01:30 UTC (1m from now)");
//! ```

use std::time::Duration;

/// `ms` since the epoch as `YYYY-MM-DD HH:MM:SS UTC` (sub-seconds dropped).
/// Instants past the year 9999 print as `after 9999`.
pub fn instant(ms: u64) -> String {
    let secs = ms / 1000;
    let days = secs / 86_400;
    let rest = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    if y > 9999 {
        return "after 9999".to_owned();
    }
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// A duration in at most its two largest units among `d`, `h`, `m`, `s`
/// (and `ms` below a second): `0s`, `250ms`, `45s`, `1m 30s`, `1d`,
/// `7d`, `1d 12h`. Rounded down; the parser of durations reads it back.
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        let ms = d.subsec_millis();
        return if ms == 0 {
            "0s".to_owned()
        } else {
            format!("{ms}ms")
        };
    }
    let units = [(86_400, "d"), (3600, "h"), (60, "m"), (1, "s")];
    let mut parts = Vec::new();
    let mut rest = secs;
    for (size, unit) in units {
        if rest >= size {
            parts.push(format!("{}{unit}", rest / size));
            rest %= size;
        } else if !parts.is_empty() {
            // A zero unit between two others ends it: "1d 5s" is not "1d".
            break;
        }
        if parts.len() == 2 {
            break;
        }
    }
    parts.join(" ")
}

/// The one phrase for a sandbox kept on purpose (`SANDKEEPER_KEEP`):
/// `kept until 2026-12-02 14:00:05 UTC`, and with `now_ms` how far that
/// is: `(23h from now)`.
pub fn kept_until(until_ms: u64, now_ms: Option<u64>) -> String {
    let mut out = format!("kept until {}", instant(until_ms));
    if let Some(now) = now_ms {
        let left = Duration::from_millis(until_ms.saturating_sub(now));
        // Minutes are enough for a time that far ahead.
        let left = if left >= Duration::from_secs(3600) {
            Duration::from_secs(left.as_secs() / 60 * 60)
        } else {
            Duration::from_secs(left.as_secs())
        };
        out.push_str(&format!(" ({} from now)", duration(left)));
    }
    out
}

/// A count with its noun, singular for one: `1 entry`, `2 entries`,
/// `0 families`. Every count in a sentence goes through here.
///
/// ```
/// assert_eq!(sandkeeper::__engine::human::plural(1, "entry", "entries"), "1 entry");
/// assert_eq!(sandkeeper::__engine::human::plural(0, "family", "families"), "0 families");
/// ```
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants() {
        let cases = [
            (0, "1970-01-01 00:00:00 UTC"),
            (951_782_400_000, "2000-02-29 00:00:00 UTC"),
            (1_764_597_605_999, "2025-12-01 14:00:05 UTC"),
            (253_402_300_799_000, "9999-12-31 23:59:59 UTC"),
            (u64::MAX, "after 9999"),
        ];
        for (ms, want) in cases {
            assert_eq!(instant(ms), want, "{ms}");
        }
    }

    #[test]
    fn durations() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(45), "45s"),
            (Duration::from_secs(90), "1m 30s"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_secs(5400), "1h 30m"),
            (Duration::from_secs(86_400), "1d"),
            (Duration::from_secs(86_405), "1d"),
            (Duration::from_secs(7 * 86_400), "7d"),
            (Duration::from_secs(36 * 3600), "1d 12h"),
        ];
        for (d, want) in cases {
            assert_eq!(duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn kept() {
        assert_eq!(
            kept_until(2 * 86_400_000, Some(86_400_000 - 59_000)),
            "kept until 1970-01-03 00:00:00 UTC (1d from now)"
        );
        assert_eq!(
            kept_until(1000, Some(5000)),
            "kept until 1970-01-01 00:00:01 UTC (0s from now)"
        );
    }
}
