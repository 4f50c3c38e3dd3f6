//! One module per subcommand: turn arguments into library calls, hand the
//! result to a renderer.

pub mod explain;
pub mod ls;
pub mod reap;
pub mod run;
pub mod scan;
pub mod watch;

use std::path::PathBuf;

use sandkeeper::reap::Policy;

use crate::cli::RuleArgs;
use crate::error::CliError;

/// The roots to use when none are given: the system temp directory, and,
/// with `user_roots`, the per-user directories `sandkeeper-<uid>` in it
/// where keyed sandboxes live (all of them for root, else the caller's).
pub fn default_roots(given: &[PathBuf], user_roots: bool) -> Vec<PathBuf> {
    if !given.is_empty() {
        return given.to_vec();
    }
    let tmp = std::env::temp_dir();
    let mut roots = vec![tmp.clone()];
    if user_roots {
        let me = rustix::process::geteuid().as_raw();
        let root = me == 0;
        let mut found: Vec<PathBuf> = std::fs::read_dir(&tmp)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                // Root looks into every user's directory; anyone else only
                // into their own (the others are closed to them).
                name.strip_prefix("sandkeeper-")
                    .and_then(|uid| uid.parse::<u32>().ok())
                    .is_some_and(|uid| root || uid == me)
                    && e.file_type().is_ok_and(|t| t.is_dir())
            })
            .map(|e| e.path())
            .collect();
        found.sort();
        roots.extend(found);
    }
    roots
}

/// The reap policy the rule flags describe.
pub fn policy(rules: &RuleArgs, dry_run: bool) -> Result<Policy, CliError> {
    let mut b = Policy::builder();
    b.grace(rules.grace).dry_run(dry_run);
    for glob in &rules.globs {
        b.matching(glob.clone());
    }
    if let Some(age) = rules.older_than {
        b.older_than(age);
    }
    if let Some(n) = rules.keep_last {
        b.keep_last(n);
    }
    if let Some(t) = rules.target_free {
        b.target_free(t);
    }
    if let Some(uid) = rules.owner {
        b.owner(uid);
    }
    Ok(b.build()?)
}
