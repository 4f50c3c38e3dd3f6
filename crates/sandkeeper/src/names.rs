//! Names the tool makes: a sandbox's random suffix, the random part of a
//! temporary file's name, and a path split into its directory and the name
//! to create in it.

use std::ffi::OsStr;
use std::path::Path;

use crate::error::{Error, ErrorKind, Result};

/// The random part of a sandbox's name: 8 lowercase letters and digits
/// with a digit somewhere before a letter, so that even a lone sandbox reads
/// as random to the name families (`run-true-togrbepj` could be a word,
/// and `run-true-build123` a word and a counter; `run-true-to9rbepj` is
/// neither). Redrawn until it fits: about two draws in three do.
pub fn name_suffix() -> String {
    loop {
        let suffix = random_suffix(8);
        let b = suffix.as_bytes();
        let first_digit = b.iter().position(u8::is_ascii_digit);
        if first_digit.is_some_and(|i| b[i..].iter().any(u8::is_ascii_lowercase)) {
            return suffix;
        }
    }
}

/// `n` random lowercase letters and digits.
pub fn random_suffix(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..n)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// Splits an absolute or relative path into its parent and last name.
pub fn split_parent(path: &Path) -> Result<(&Path, &OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            Ok((parent, name))
        }
        _ => Err(Error::new(
            ErrorKind::InvalidInput,
            "path has no final name (it is `/`, ends in `..`, or is empty)",
        )
        .at(path)),
    }
}
