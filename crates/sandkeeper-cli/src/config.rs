//! Turning command-line text into validated values: durations, sizes,
//! percentages, users. Every error names the bad value and what is valid.

use std::time::Duration;

use sandkeeper::reap::{FreeInodes, FreeTarget};

/// Whether `text` is a negative value (`-1s`, `-5%`, `-1`): the options
/// that take one allow a leading hyphen, so that it reaches the value's
/// parser and is refused as a value, with why.
fn negative(text: &str) -> bool {
    text.trim_start().starts_with('-')
}

/// A humane duration: `90s`, `15m`, `2h`, `7d`, `1w`, `1h 30m`.
pub fn duration(text: &str) -> Result<Duration, String> {
    if negative(text) {
        return Err(format!(
            "negative durations are not allowed: {text:?}; use zero or more, such as 90s, 15m, 2h or 7d"
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

/// A tmpfs size: bytes with a unit (`10M`, `2G`) or a percentage of RAM
/// (`50%`); returned in the form the tmpfs `size=` option takes.
pub fn tmpfs_size(text: &str) -> Result<String, String> {
    let t = text.trim();
    if let Some(p) = t.strip_suffix('%').filter(|p| negative(p)) {
        return Err(format!(
            "negative percentages are not allowed: {text:?}; use a whole percentage from 1% to 100% of RAM (got {p}%)"
        ));
    }
    if let Some(p) = t.strip_suffix('%') {
        return match p.parse::<u32>() {
            Ok(n) if (1..=100).contains(&n) => Ok(format!("{n}%")),
            _ => Err(format!("invalid size {text:?}; use a whole percentage from 1% to 100% of RAM, or a size such as 10M")),
        };
    }
    match size(t) {
        Ok(0) => Err(format!("size {text:?} is zero; a tmpfs needs room")),
        Ok(bytes) => Ok(bytes.to_string()),
        Err(e) => Err(e),
    }
}

/// A count of entries (`--keep-last 3`): a whole number, zero or more.
pub fn count(text: &str) -> Result<usize, String> {
    if negative(text) {
        return Err(format!(
            "negative counts are not allowed: {text:?}; use a whole number of zero or more, such as 3"
        ));
    }
    text.trim().parse().map_err(|_| {
        format!("invalid count {text:?}; use a whole number of zero or more, such as 3")
    })
}

/// A process id (`--ignore-pid 1234`).
pub fn pid(text: &str) -> Result<u32, String> {
    if negative(text) {
        return Err(format!(
            "negative pids are not allowed: {text:?}; give the id of a process, such as 1234"
        ));
    }
    text.trim()
        .parse()
        .map_err(|_| format!("invalid pid {text:?}; give the id of a process, such as 1234"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases: [(&str, Option<u64>); 7] = [
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
    fn tmpfs_sizes() {
        let cases: [(&str, Option<&str>); 6] = [
            ("10M", Some("10000000")),
            ("10MiB", Some("10485760")),
            ("50%", Some("50%")),
            ("0%", None),
            ("0", None),
            ("huge", None),
        ];
        for (text, want) in cases {
            assert_eq!(tmpfs_size(text).ok().as_deref(), want, "{text}");
        }
    }

    #[test]
    fn negative_values() {
        let cases: [(&str, Result<(), String>); 7] = [
            ("duration", duration("-1s").map(drop)),
            ("size", size("-5GiB").map(drop)),
            ("percentage", free_target("-5%").map(drop)),
            ("free size", free_target("-1G").map(drop)),
            ("tmpfs percentage", tmpfs_size("-5%").map(drop)),
            ("count", count("-1").map(drop)),
            ("pid", pid("-1").map(drop)),
        ];
        for (name, got) in cases {
            let err = got.expect_err(name);
            assert!(err.starts_with("negative "), "{name}: {err}");
        }
        assert_eq!(count("3"), Ok(3));
        assert_eq!(pid("1234"), Ok(1234));
        assert!(count("many").unwrap_err().contains("invalid count"));
    }

    #[test]
    fn users() {
        assert_eq!(user("0"), Ok(0));
        assert_eq!(user("root"), Ok(0));
        let err = user("no-such-user-here").unwrap_err();
        assert!(err.contains("\"no-such-user-here\""), "{err}");
    }
}
