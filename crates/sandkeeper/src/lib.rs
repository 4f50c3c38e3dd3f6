//! Scratch directories that cannot leak unnoticed.
//!
//! PLACEHOLDER crate docs: rewritten below once the modules land.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod error;
pub mod remove;

pub use error::{Error, ErrorKind, Result};
