//! Rendering library results for people: tables, summaries, log lines.
//! The JSON documents are the library's ([`sandkeeper_engine::json`]): every face
//! gives the same schemas.

pub mod claims;
pub mod escape;
pub mod explain;
pub mod ls;
pub mod metrics;
pub mod origin;
pub mod reap;
pub mod report;
pub mod run;
pub mod scan;
pub mod watch;

pub use sandkeeper_engine::json::{lease_value as lease_json, path_field};

use sandkeeper_engine::scan::Entry;

/// Until when `e` is kept on purpose at `now_ms`, under the default cap
/// (what a reap without `--max-keep` does): the one test `scan`, `ls` and
/// `explain` use, the reaper's own ([`Entry::kept_until`]).
pub fn kept_until(e: &Entry, now_ms: i64) -> Option<u64> {
    e.kept_until(now_ms, sandkeeper_engine::reap::DEFAULT_MAX_KEEP)
}

/// The state as tables show it: `kept` for an orphaned sandbox kept on
/// purpose (a reap keeps it), else the state's name.
pub fn state_word(e: &Entry, now_ms: i64) -> &'static str {
    if kept_until(e, now_ms).is_some() {
        "kept"
    } else {
        e.state.as_str()
    }
}
