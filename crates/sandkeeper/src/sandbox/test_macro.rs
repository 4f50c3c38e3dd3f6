//! Support for the [`sandbox!`](crate::sandbox!) macro. Not a stable API.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{Builder, Sandbox};
use crate::error::{Error, ErrorKind, Result};

/// Where `sandbox!()` was called, captured by the macro.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct CallSite {
    /// `file!()`.
    pub file: &'static str,
    /// `line!()`.
    pub line: u32,
    /// `env!("CARGO_MANIFEST_DIR")`, if built by cargo.
    pub manifest_dir: Option<&'static str>,
    /// `env!("CARGO_TARGET_TMPDIR")`: set only for integration tests.
    pub target_tmpdir: Option<&'static str>,
    /// The tag given to the macro, if any.
    pub tag: Option<&'static str>,
}

/// Keyed names claimed through `sandbox!()` in this process, with the
/// claiming site.
static CLAIMS: Mutex<Option<HashMap<PathBuf, String>>> = Mutex::new(None);

/// Creates the sandbox for a `sandbox!()` call.
#[doc(hidden)]
pub fn create(site: CallSite) -> Result<Sandbox> {
    let manifest = site.manifest_dir.unwrap_or("");
    let (tag, checkout) = match site.tag {
        // An explicit tag names a sandbox for the whole checkout: two sites
        // using it share the name, which is a conflict we report.
        Some(tag) => (tag.to_owned(), manifest.to_owned()),
        // A derived tag is unique to the site; the file joins the checkout
        // so that `a/mod.rs:10` and `b/mod.rs:10` differ.
        None => (
            derived_tag(site.file, site.line),
            format!("{manifest}/{}", site.file),
        ),
    };
    let mut builder = Builder::new();
    builder
        .tag(tag)
        .keyed(true)
        .checkout(checkout)
        .site(format!("{}:{}", site.file, site.line));
    if let Some(dir) = site.target_tmpdir {
        builder.root(dir);
    }
    builder.create()
}

/// `<file stem>-<line>`; for `mod.rs`, `main.rs` and `lib.rs` the
/// directory name stands in for the stem.
fn derived_tag(file: &str, line: u32) -> String {
    let path = Path::new(file);
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
    let stem = match stem {
        "mod" | "main" | "lib" => path
            .parent()
            .and_then(Path::file_name)
            .and_then(|s| s.to_str())
            .unwrap_or(stem),
        _ => stem,
    };
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{clean}-{line}")
}

/// Records that `site` uses the keyed name `path`; an error naming both
/// sites if another site already does.
pub(crate) fn claim_site(path: &Path, site: &str) -> Result<()> {
    let mut claims = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
    let claims = claims.get_or_insert_with(HashMap::new);
    match claims.get(path) {
        Some(first) if first != site => Err(Error::new(
            ErrorKind::NameConflict,
            format!("sandbox!() at {site} claims the keyed name already claimed by sandbox!() at {first}"),
        )
        .at(path)
        .with_hint("give one of them a different tag")),
        Some(_) => Ok(()),
        None => {
            claims.insert(path.to_owned(), site.to_owned());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_tags() {
        let cases = [
            ("crates/sandkeeper/tests/lease.rs", 42, "lease-42"),
            ("src/sandbox/mod.rs", 7, "sandbox-7"),
            ("tests/cli/main.rs", 3, "cli-3"),
            ("src/lib.rs", 1, "src-1"),
            ("weird name.rs", 9, "weird_name-9"),
        ];
        for (file, line, want) in cases {
            assert_eq!(derived_tag(file, line), want, "{file}");
        }
    }

    #[test]
    fn conflicting_sites_are_named() {
        let path = Path::new("/nonexistent/claims-test-k");
        claim_site(path, "a.rs:1").unwrap();
        claim_site(path, "a.rs:1").unwrap();
        let err = claim_site(path, "b.rs:2").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NameConflict);
        let text = err.to_string();
        assert!(text.contains("a.rs:1") && text.contains("b.rs:2"), "{text}");
    }
}
