//! The defaults every face shares, one constant each: the reap's and
//! `watch`'s (the CLI's flags show them in `--help`, the config file falls
//! back to them, the Python package's arguments default to them).

use std::time::Duration;

/// Nothing whose newest change inside is younger than this is removed.
pub const GRACE: Duration = Duration::from_secs(60);
/// The cap on how long a lease's `keep_until_ms` is honoured, from the
/// entry's newest change.
pub const MAX_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// `watch`'s full-cycle interval.
pub const INTERVAL: Duration = Duration::from_secs(300);
/// `watch`'s watermark poll.
pub const POLL: Duration = Duration::from_secs(5);

/// [`GRACE`] as the CLI writes it (`--grace`'s default).
pub const GRACE_TEXT: &str = "60s";
/// [`MAX_KEEP`] as the CLI writes it (`--max-keep`'s default).
pub const MAX_KEEP_TEXT: &str = "7d";
