//! Whether a sandbox root lies inside a git work tree
//! ([`Builder::outside_worktree`](super::Builder::outside_worktree)).

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// The name git looks for upwards: a directory, or the file (`gitdir: …`)
/// of a linked work tree or a submodule.
const DOT_GIT: &str = ".git";

/// Fails when `root`, or a directory above it, holds a `.git`: the
/// sandbox would be inside that work tree.
///
/// `root` is resolved first (symlinks followed, as git's `getcwd` sees it).
/// Every ancestor is looked at, up to `/`, whatever filesystem it is on:
/// git stops at a mount boundary only when told to, and a sandbox meant to
/// be outside every work tree errs toward refusing.
pub(super) fn check_outside(root: &Path) -> Result<()> {
    let real = std::fs::canonicalize(root).map_err(|e| {
        Error::io("cannot resolve the sandbox root", e)
            .at(root)
            .with_hint("pass an existing directory as the root, or set SANDKEEPER_ROOT or TMPDIR")
    })?;
    match enclosing_worktree(&real) {
        None => Ok(()),
        Some(tree) => Err(Error::new(
            ErrorKind::UnusableRoot,
            format!(
                "sandbox root is inside the git work tree {} (it has {}), and this sandbox \
                 was asked to be outside any work tree",
                tree.display(),
                tree.join(DOT_GIT).display()
            ),
        )
        .at(root)
        .with_hint(
            "set SANDKEEPER_ROOT (or TMPDIR) to a directory outside any git work tree, \
             such as /tmp",
        )),
    }
}

/// The nearest directory at or above `dir` that holds a `.git`.
fn enclosing_worktree(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| std::fs::symlink_metadata(d.join(DOT_GIT)).is_ok())
        .map(Path::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_nearest_work_tree() {
        let base = crate::Sandbox::new().unwrap();
        let top = base.path();
        std::fs::create_dir_all(top.join("repo/.git")).unwrap();
        std::fs::create_dir_all(top.join("repo/sub/linked")).unwrap();
        std::fs::write(top.join("repo/sub/linked/.git"), "gitdir: elsewhere\n").unwrap();
        std::fs::create_dir_all(top.join("plain/deep")).unwrap();
        let cases: &[(&str, Option<&str>)] = &[
            ("repo", Some("repo")),
            ("repo/sub", Some("repo")),
            ("repo/sub/linked", Some("repo/sub/linked")),
            ("plain/deep", None),
        ];
        for (dir, want) in cases {
            let found = enclosing_worktree(&top.join(dir));
            // Above the sandbox (the system temp dir) there is no work tree
            // on a sane machine; only look at what is inside it.
            let found = found.filter(|f| f.starts_with(top));
            assert_eq!(found, want.map(|w| top.join(w)), "{dir}");
        }
        let err = check_outside(&top.join("repo/sub")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnusableRoot);
        let text = err.to_string();
        assert!(text.contains("repo") && text.contains(".git"), "{text}");
        assert!(err.hint().unwrap().contains("SANDKEEPER_ROOT"));
    }
}
