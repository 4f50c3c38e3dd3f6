//! When a sandbox is kept instead of removed (for debugging).

use std::ffi::OsStr;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, ErrorKind, Result};

/// The environment variable that overrides a sandbox's [`KeepPolicy`].
///
/// ```
/// // SANDKEEPER_KEEP=on-failure cargo test: a failing test's sandbox stays.
/// assert_eq!(sandkeeper::KEEP_ENV, "SANDKEEPER_KEEP");
/// ```
pub const KEEP_ENV: &str = "SANDKEEPER_KEEP";

/// When a sandbox survives its drop, for someone to look inside.
///
/// A kept sandbox prints its path on stderr and its lease record gets
/// `keep_until_ms` (see [`Builder::keep_for`](crate::Builder::keep_for)), after
/// which reapers may take it.
///
/// ```
/// use sandkeeper::KeepPolicy;
/// assert_eq!("on-failure".parse::<KeepPolicy>()?, KeepPolicy::OnFailure);
/// assert!("sometimes".parse::<KeepPolicy>().is_err());
/// # Ok::<(), sandkeeper::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeepPolicy {
    /// Always remove (the default).
    #[default]
    Never,
    /// Keep when dropped while the thread panics, or when
    /// [marked failed](crate::Sandbox::mark_failed) (a test that returned
    /// `Err` through [`Sandbox::check`](crate::Sandbox::check) or
    /// [`Sandbox::scope`](crate::Sandbox::scope)): a failing test.
    OnFailure,
    /// Always keep.
    Always,
}

impl KeepPolicy {
    /// The policy from `SANDKEEPER_KEEP`, or `None` when it is unset or
    /// empty.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] naming the value and the valid ones.
    pub fn from_env() -> Result<Option<KeepPolicy>> {
        match std::env::var_os(KEEP_ENV) {
            None => Ok(None),
            Some(v) if v.is_empty() => Ok(None),
            Some(v) => parse_os(&v).map(Some),
        }
    }

    /// Whether a sandbox finished now is kept, `failed` telling whether the
    /// thread unwinds or the sandbox was marked failed.
    pub(crate) fn keeps(self, failed: bool) -> bool {
        match self {
            KeepPolicy::Never => false,
            KeepPolicy::OnFailure => failed,
            KeepPolicy::Always => true,
        }
    }
}

fn parse_os(v: &OsStr) -> Result<KeepPolicy> {
    v.to_str()
        .ok_or_else(|| invalid(&v.to_string_lossy()))
        .and_then(str::parse)
}

fn invalid(value: &str) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("{KEEP_ENV}={value:?} is not valid; use one of: on-failure, always, never"),
    )
}

impl FromStr for KeepPolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<KeepPolicy> {
        match s {
            "never" => Ok(KeepPolicy::Never),
            "on-failure" => Ok(KeepPolicy::OnFailure),
            "always" => Ok(KeepPolicy::Always),
            other => Err(invalid(other)),
        }
    }
}

impl fmt::Display for KeepPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeepPolicy::Never => "never",
            KeepPolicy::OnFailure => "on-failure",
            KeepPolicy::Always => "always",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases: &[(&str, Option<KeepPolicy>)] = &[
            ("never", Some(KeepPolicy::Never)),
            ("on-failure", Some(KeepPolicy::OnFailure)),
            ("always", Some(KeepPolicy::Always)),
            ("Always", None),
            ("on_failure", None),
            ("", None),
            ("1", None),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<KeepPolicy>().ok(), *want, "{text:?}");
        }
        let err = "yes".parse::<KeepPolicy>().unwrap_err().to_string();
        assert!(
            err.contains("\"yes\"") && err.contains("on-failure"),
            "{err}"
        );
    }

    #[test]
    fn keeps_table() {
        let cases = [
            (KeepPolicy::Never, false, false),
            (KeepPolicy::Never, true, false),
            (KeepPolicy::OnFailure, false, false),
            (KeepPolicy::OnFailure, true, true),
            (KeepPolicy::Always, false, true),
            (KeepPolicy::Always, true, true),
        ];
        for (policy, panicking, want) in cases {
            assert_eq!(
                policy.keeps(panicking),
                want,
                "{policy} panicking={panicking}"
            );
        }
    }
}
