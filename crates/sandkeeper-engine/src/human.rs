//! Times and durations for people: the one way every output of sandkeeper
//! (reasons, tables, `explain`, the config's summary, a kept sandbox's
//! notice) writes them. Shared with the `sandkeeper` crate, whose kept
//! sandboxes say when they may go in the same words.
//!
//! - An instant is UTC to the second: `2026-12-02 14:00:05 UTC`.
//! - A count agrees with its noun: `1 entry`, `2 entries` ([`plural`]).
//! - A duration is at most two of its largest units, in the units the
//!   duration parser takes back (`90s` → `1m 30s`, `86400s` → `1d`).
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
//! ```

pub use sandkeeper::__engine::human::{duration, instant, kept_until, plural};
