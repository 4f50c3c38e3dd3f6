//! The wall clock as the protocol writes it: milliseconds since the Unix
//! epoch (a record's `created_ms`, a kept sandbox's `keep_until_ms`, a
//! scan's start). One function, so every face reads the same clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
