//! Values as people write them, in the config file and on the command
//! line: durations (`90s`, `2h`), sizes (`500M`, `2GiB`), free-space and
//! free-inode targets (`25%`, `5000`), users. Every error names the bad
//! value and what would be valid.
//!
//! ```
//! use std::time::Duration;
//! use sandkeeper_engine::config::value;
//!
//! assert_eq!(value::duration("1h 30m"), Ok(Duration::from_secs(5400)));
//! assert_eq!(value::size("2GiB"), Ok(2 << 30));
//! assert!(value::duration("-5s").unwrap_err().starts_with("negative durations"));
//! assert_eq!(value::human_size(1536), "1.50 KiB");
//! ```

use std::time::Duration;

use crate::reap::{FreeInodes, FreeTarget};

/// Whether `text` is a negative value (`-1s`, `-5%`, `-1`): the options
/// that take one allow a leading hyphen, so that it reaches the value's
/// parser and is refused as a value, with why.
pub(crate) fn negative(text: &str) -> bool {
    text.trim_start().starts_with('-')
}

/// A humane duration: `90s`, `15m`, `2h`, `7d`, `1w`, `1h 30m`.
///
/// One rule for every duration, on the command line and in the config
/// file: a number needs a unit, except `0` (zero is zero in any unit);
/// a bare `5` is refused with the hint `5s`, never guessed.
///
/// ```
/// use std::time::Duration;
/// use sandkeeper_engine::config::value::duration;
///
/// assert_eq!(duration("0"), Ok(Duration::ZERO));
/// assert!(duration("5").unwrap_err().contains("write 5s for seconds"));
/// ```
pub fn duration(text: &str) -> Result<Duration, String> {
    if negative(text) {
        return Err(format!(
            "negative durations are not allowed: {text:?}; use zero or more, such as 90s, 15m, 2h or 7d"
        ));
    }
    let t = text.trim();
    let bare_number = !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if let Some(n) = bare_number.then(|| t.parse::<f64>().ok()).flatten() {
        if n == 0.0 {
            return Ok(Duration::ZERO);
        }
        return Err(format!(
            "duration {text:?} has no unit; write {t}s for seconds (or {t}m, {t}h, {t}d); only 0 may stand without a unit"
        ));
    }
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!(
            "invalid duration {text:?} ({e}); use a number with a unit, such as 90s, 15m, 2h or 7d"
        )
    })
}

/// A byte size: `1024`, `500M`, `2GiB`, `1.5 GB`.
pub fn size(text: &str) -> Result<u64, String> {
    if negative(text) {
        return Err(format!(
            "negative sizes are not allowed: {text:?}; use bytes or a unit, such as 500M or 2GiB"
        ));
    }
    parse_size::parse_size(text.trim()).map_err(|e| {
        format!("invalid size {text:?} ({e}); use bytes or a unit, such as 500M or 2GiB")
    })
}

/// A free-space target: a percentage (`25%`) of the filesystem, or a size.
pub fn free_target(text: &str) -> Result<FreeTarget, String> {
    let t = text.trim();
    if let Some(number) = t.strip_suffix('%') {
        if negative(number) {
            return Err(format!(
                "negative percentages are not allowed: {text:?}; use a number from 0 to 100 followed by %, such as 25%"
            ));
        }
        let p: f64 = number.trim().parse().map_err(|_| {
            format!("invalid percentage {text:?}; use a number from 0 to 100 followed by %, such as 25%")
        })?;
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("percentage {text:?} is outside 0% to 100%"));
        }
        return Ok(FreeTarget::Percent(p));
    }
    if negative(t) {
        return size(t).map(FreeTarget::Bytes);
    }
    size(t).map(FreeTarget::Bytes).map_err(|_| {
        format!("invalid free-space target {text:?}; use a percentage such as 25% or a size such as 2GiB")
    })
}

/// A free-inode target: a percentage (`10%`) of the filesystem's inodes,
/// or a number of inodes (`5000`).
pub fn free_inodes(text: &str) -> Result<FreeInodes, String> {
    let t = text.trim();
    if let Some(number) = t.strip_suffix('%') {
        let p: f64 = number.trim().parse().map_err(|_| {
            format!("invalid percentage {text:?}; use a number from 0 to 100 followed by %, such as 10%")
        })?;
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("percentage {text:?} is outside 0% to 100%"));
        }
        return Ok(FreeInodes::Percent(p));
    }
    t.parse::<u64>().map(FreeInodes::Count).map_err(|_| {
        format!("invalid free-inode target {text:?}; use a percentage of the filesystem's inodes such as 10%, or a number of inodes such as 5000")
    })
}

/// A user name or numeric uid.
pub fn user(text: &str) -> Result<u32, String> {
    if let Ok(uid) = text.parse::<u32>() {
        return Ok(uid);
    }
    uzers::get_user_by_name(text)
        .map(|u| u.uid())
        .ok_or_else(|| format!("unknown user {text:?}; give a user name from the password database or a numeric uid"))
}

/// The name of `uid`, or the number.
pub fn user_name(uid: u32) -> String {
    uzers::get_user_by_uid(uid)
        .map(|u| u.name().to_string_lossy().into_owned())
        .unwrap_or_else(|| uid.to_string())
}

/// Bytes in binary units with three significant digits ([`crate::human::size`]).
pub use crate::human::size as human_size;

#[cfg(test)]
mod tests {
    /// What `human::duration` writes, this parser reads back.
    #[test]
    fn durations_read_back() {
        for secs in [1, 59, 61, 3600, 5400, 86_400, 129_600, 604_800] {
            let d = std::time::Duration::from_secs(secs);
            let shown = crate::human::duration(d);
            assert_eq!(super::duration(&shown), Ok(d), "{shown}");
        }
    }

    #[test]
    fn the_default_texts_say_the_defaults() {
        use crate::defaults::{GRACE, GRACE_TEXT, MAX_KEEP, MAX_KEEP_TEXT};
        assert_eq!(super::duration(GRACE_TEXT), Ok(GRACE));
        assert_eq!(super::duration(MAX_KEEP_TEXT), Ok(MAX_KEEP));
    }

    use super::*;

    #[test]
    fn durations() {
        let cases: [(&str, Option<u64>); 10] = [
            ("0", Some(0)),
            ("00", Some(0)),
            ("5", None),
            ("90s", Some(90)),
            ("2h", Some(7200)),
            ("7d", Some(7 * 86_400)),
            ("1h 30m", Some(5400)),
            ("0s", Some(0)),
            ("ten minutes", None),
            ("-5s", None),
        ];
        for (text, want) in cases {
            assert_eq!(duration(text).ok().map(|d| d.as_secs()), want, "{text}");
        }
        assert!(duration("soon").unwrap_err().contains("\"soon\""));
        assert!(duration("5").unwrap_err().contains("write 5s for seconds"));
        assert!(duration(" -1s").unwrap_err().contains("negative durations"));
    }

    #[test]
    fn free_targets() {
        let cases: [(&str, Option<FreeTarget>); 7] = [
            ("25%", Some(FreeTarget::Percent(25.0))),
            ("0.5 %", Some(FreeTarget::Percent(0.5))),
            ("2GiB", Some(FreeTarget::Bytes(2 << 30))),
            ("1024", Some(FreeTarget::Bytes(1024))),
            ("120%", None),
            ("lots", None),
            ("%", None),
        ];
        for (text, want) in cases {
            assert_eq!(free_target(text).ok(), want, "{text}");
        }
    }

    #[test]
    fn free_inode_targets() {
        let cases: [(&str, Option<FreeInodes>); 7] = [
            ("10%", Some(FreeInodes::Percent(10.0))),
            (" 0.5 % ", Some(FreeInodes::Percent(0.5))),
            ("5000", Some(FreeInodes::Count(5000))),
            ("0", Some(FreeInodes::Count(0))),
            ("101%", None),
            ("5k", None),
            ("-5", None),
        ];
        for (text, want) in cases {
            assert_eq!(free_inodes(text).ok(), want, "{text}");
        }
        assert!(free_inodes("many").unwrap_err().contains("\"many\""));
    }

    #[test]
    fn users() {
        assert_eq!(user("0"), Ok(0));
        assert_eq!(user("root"), Ok(0));
        let err = user("no-such-user-here").unwrap_err();
        assert!(err.contains("\"no-such-user-here\""), "{err}");
    }
}
