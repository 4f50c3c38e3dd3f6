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
    /// The caller's file (as `file!()`; the caller's caller's through
    /// `#[track_caller]` functions).
    pub file: &'static str,
    /// The caller's line.
    pub line: u32,
    /// `env!("CARGO_MANIFEST_DIR")`, if built by cargo.
    pub manifest_dir: Option<&'static str>,
    /// `env!("CARGO_TARGET_TMPDIR")`: set only for integration tests.
    pub target_tmpdir: Option<&'static str>,
    /// `cfg!(test)` where the macro was expanded: the code runs under a
    /// test harness, whose threads are named after their tests.
    pub in_test: bool,
}

impl CallSite {
    /// The caller's location (`#[track_caller]`: a `#[track_caller]`
    /// function that expands `sandbox!()` passes its own caller's on).
    #[track_caller]
    pub fn here(
        manifest_dir: Option<&'static str>,
        target_tmpdir: Option<&'static str>,
        in_test: bool,
    ) -> CallSite {
        let caller = std::panic::Location::caller();
        CallSite {
            file: caller.file(),
            line: caller.line(),
            manifest_dir,
            target_tmpdir,
            in_test,
        }
    }
}

/// Keyed names claimed through `sandbox!()` in this process, with the
/// claiming site.
static CLAIMS: Mutex<Option<HashMap<PathBuf, String>>> = Mutex::new(None);

/// The longest test name kept in a derived tag (its end: the test's own
/// name is the last part of its path): short enough to leave room for
/// what the test puts inside (a unix socket's path has 107 bytes).
const MAX_TEST_NAME: usize = 64;

/// Creates the sandbox for a `sandbox!()` call: `tag` if one was given,
/// and whether it must be outside any git work tree.
#[doc(hidden)]
pub fn create(site: CallSite, tag: Option<&str>, outside_worktree: bool) -> Result<Sandbox> {
    let manifest = site.manifest_dir.unwrap_or("");
    let (tag, checkout) = match tag {
        // An explicit tag names a sandbox for the whole checkout: two sites
        // using it share the name, which is a conflict we report.
        Some(tag) => (tag.to_owned(), manifest.to_owned()),
        // A derived tag is unique to the site (and the test); the file
        // joins the checkout so that `a/mod.rs:10` and `b/mod.rs:10` differ.
        None => {
            // Unit tests only: an integration test's sandboxes are in its
            // crate's own `target/tmp` and its file names the test binary,
            // and paths there are long already (a unix socket's path may
            // not pass 107 bytes).
            let unit_test = site.in_test && site.target_tmpdir.is_none();
            let test = unit_test.then(current_test).flatten();
            (
                derived_tag(site.file, site.line, test.as_deref()),
                format!("{manifest}/{}", site.file),
            )
        }
    };
    let mut builder = Builder::new();
    builder
        .tag(tag)
        .keyed(true)
        .checkout(checkout)
        .macro_site(format!("{}:{}", site.file, site.line));
    if outside_worktree {
        builder.outside_worktree(true);
    } else if let Some(dir) = site.target_tmpdir {
        builder.root(dir);
    }
    builder.create()
}

/// The running test's name: libtest (under `cargo test` and `cargo
/// nextest run` alike) runs each test on a thread named after its path
/// (`tests::it_works`); where a test runs on the main thread, nextest's
/// `NEXTEST_TEST_NAME` (one test per process) says it. `None` on threads
/// without a name, such as those a test spawns, under either runner.
fn current_test() -> Option<String> {
    test_name(std::thread::current().name(), || {
        std::env::var("NEXTEST_TEST_NAME").ok()
    })
}

/// [`current_test`] from the thread's name and nextest's variable.
fn test_name(thread: Option<&str>, nextest: impl FnOnce() -> Option<String>) -> Option<String> {
    match thread {
        Some("main") => nextest().filter(|n| !n.is_empty()),
        Some(name) => Some(name.to_owned()),
        None => None,
    }
}

/// `<test>-<line>` when the test is known (its path with `::` as `-`: as
/// many whole segments from its end as fit in 64 bytes); else `<file stem>-<line>`, where for
/// `mod.rs`, `main.rs` and `lib.rs` the directory name stands in for the
/// stem. Only `[A-Za-z0-9_-]`: other characters become `_`.
fn derived_tag(file: &str, line: u32, test: Option<&str>) -> String {
    if let Some(test) = test {
        // Whole segments of the path from its end, as many as fit; the
        // end of the last one if it alone is too long.
        let mut kept: Vec<String> = Vec::new();
        let mut len = 0;
        for segment in test.rsplit("::").filter(|s| !s.is_empty()) {
            let segment = sanitize(segment);
            let with_dash = segment.len() + usize::from(!kept.is_empty());
            if len + with_dash > MAX_TEST_NAME {
                if kept.is_empty() {
                    kept.push(segment[segment.len() - MAX_TEST_NAME..].to_owned());
                }
                break;
            }
            len += with_dash;
            kept.push(segment);
        }
        kept.reverse();
        let tail = kept.join("-");
        let tail = tail.trim_start_matches(['-', '_']);
        if !tail.is_empty() {
            return format!("{tail}-{line}");
        }
    }
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
    format!("{}-{line}", sanitize(stem))
}

/// `text` with every character outside `[A-Za-z0-9_-]` replaced by `_`.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
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
        let long = format!("a::{}::it_works", "m".repeat(100));
        let long_name = format!("tests::{}", "n".repeat(100));
        let long_name_want = format!("{}-7", "n".repeat(64));
        let cases = [
            (
                "crates/sandkeeper-engine/tests/lease.rs",
                42,
                None,
                "lease-42",
            ),
            ("src/sandbox/mod.rs", 7, None, "sandbox-7"),
            ("tests/cli/main.rs", 3, None, "cli-3"),
            ("src/lib.rs", 1, None, "src-1"),
            ("weird name.rs", 9, None, "weird_name-9"),
            (
                "src/lib.rs",
                12,
                Some("tests::it_works"),
                "tests-it_works-12",
            ),
            ("src/lib.rs", 3, Some("it_works"), "it_works-3"),
            ("src/lib.rs", 4, Some("tests::ünï code"), "tests-_n__code-4"),
            ("src/lib.rs", 5, Some(long.as_str()), "it_works-5"),
            (
                "src/lib.rs",
                7,
                Some(long_name.as_str()),
                long_name_want.as_str(),
            ),
            ("src/lib.rs", 8, Some("a::b::c"), "a-b-c-8"),
            // Nothing usable left: the file stands in.
            ("src/lib.rs", 6, Some("::"), "src-6"),
        ];
        for (file, line, test, want) in cases {
            let tag = derived_tag(file, line, test);
            assert_eq!(tag, want, "{file} {test:?}");
            assert!(super::super::builder::validate_tag(&tag).is_ok(), "{tag}");
        }
    }

    #[test]
    fn test_names() {
        let nextest = || Some("tests::from_env".to_owned());
        let unset = || None;
        let cases = [
            (Some("tests::it_works"), nextest(), Some("tests::it_works")),
            (Some("tests::it_works"), None, Some("tests::it_works")),
            (Some("main"), nextest(), Some("tests::from_env")),
            (Some("main"), None, None),
            (Some("main"), Some(String::new()), None),
            (None, nextest(), None),
        ];
        for (thread, env, want) in cases {
            let got = test_name(thread, || env.clone());
            assert_eq!(got.as_deref(), want, "{thread:?} {env:?}");
        }
        assert_eq!(test_name(Some("main"), unset), None);
    }

    /// Issue 15: unit-test sandboxes are named after their test, not
    /// `src-<line>` (this test runs on the thread libtest names after it).
    #[test]
    fn a_unit_test_sandbox_is_named_after_its_test() {
        let sandbox = crate::sandbox!().unwrap();
        let line = line!() - 1;
        let name = sandbox.path().file_name().unwrap().to_str().unwrap();
        // Its path, `sandbox::test_macro::tests::…`, is cut to the whole
        // segments that fit in 64 bytes.
        let want = format!("test_macro-tests-a_unit_test_sandbox_is_named_after_its_test-{line}-");
        assert!(name.starts_with(&want), "{name}");
        assert_eq!(sandbox.record().site, Some(format!("{}:{line}", file!())));
        // Off the test's thread (a thread it spawned): the file and line.
        fn make() -> (Result<Sandbox>, u32) {
            (crate::sandbox!(), line!())
        }
        let (other, line) = std::thread::spawn(make).join().unwrap();
        let other = other.unwrap();
        let name = other.path().file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(&format!("test_macro-{line}-")), "{name}");
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
