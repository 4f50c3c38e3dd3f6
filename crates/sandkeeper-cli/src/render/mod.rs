//! Rendering for people: the library's documents ([`sandkeeper_engine::text`],
//! the same words in every face, and [`sandkeeper_engine::json`]), and this
//! command's own lines (`run`'s notes, `watch`'s log).

pub mod run;
pub mod watch;

pub use sandkeeper_engine::escape;
pub use sandkeeper_engine::text::{explain, ls, reap, report, scan};
