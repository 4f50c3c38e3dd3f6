//! Sizes, ages, counts and durations for people, and names made safe for
//! a terminal: the library's ([`sandkeeper_engine::human`],
//! [`sandkeeper_engine::escape`]), so every face says them alike.

pub use sandkeeper_engine::escape::sanitize;
pub use sandkeeper_engine::human::{duration, plural, size};
