//! Rendering library results for people: tables, summaries, log lines.
//! The JSON documents are the library's ([`sandkeeper::json`]): every face
//! gives the same schemas.

pub mod claims;
pub mod escape;
pub mod explain;
pub mod ls;
pub mod metrics;
pub mod origin;
pub mod reap;
pub mod run;
pub mod scan;
pub mod watch;

pub use sandkeeper::json::{lease_value as lease_json, path_field};
