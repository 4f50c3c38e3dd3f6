//! The documents for people, beside the machine's ([`crate::json`]): the
//! tables, summaries and explanations every face prints, so the same facts
//! are said in the same words wherever they are shown (as ripgrep's
//! printer is a library beside its command line).
//!
//! Every value someone else chose (a name, a record's field, an origin)
//! goes through [`crate::escape`]; a renderer reads only the report it is
//! given: no system call, no decision (the scan and the reaper made them).
//!
//! ```
//! # let dir = sandkeeper_engine::Sandbox::new()?;
//! # let roots = [sandkeeper_engine::root::Root::open(dir.path())?];
//! use sandkeeper_engine::{scan::Scanner, text};
//!
//! let report = Scanner::new().scan_roots(&roots)?;
//! let table = text::scan::table(&report, false, false);
//! assert!(table.contains("used"));
//! # Ok::<(), sandkeeper_engine::Error>(())
//! ```

pub mod claims;
pub mod explain;
pub mod ls;
pub mod origin;
pub mod reap;
pub mod report;
pub mod scan;

/// The one phrase for a sandbox kept on purpose, with how long is left at
/// `now_ms` ([`crate::human::kept_until`]).
fn kept_until(until_ms: u64, now_ms: i64) -> String {
    crate::human::kept_until(until_ms, Some(now_ms.max(0) as u64))
}
