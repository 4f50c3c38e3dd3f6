//! Turning command-line text into validated values. Durations, sizes,
//! free-space targets and users are the library's
//! ([`sandkeeper_engine::config::value`], shared with the config file); the rest
//! are the command line's own. Every error names the bad value and what is
//! valid.

pub use sandkeeper_engine::config::value::{
    duration, free_inodes, free_target, size, user, user_name,
};

/// Whether `text` is a negative value (`-1s`, `-5%`, `-1`): the options
/// that take one allow a leading hyphen, so that it reaches the value's
/// parser and is refused as a value, with why.
fn negative(text: &str) -> bool {
    text.trim_start().starts_with('-')
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
