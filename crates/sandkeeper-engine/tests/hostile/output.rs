//! Issue 10, finding 4, at the library: `sandkeeper_engine::output` never lets a
//! directory or symlink owned by one user lead into files owned by another
//! (systemd's `CHASE_SAFE` rule), whatever uid 65534 planted on the way.
//! The states are made by root and handed to nobody with `chown`, as
//! nobody could have made them.

use std::fs;
use std::os::unix::fs::{chown, lchown, symlink, PermissionsExt};
use std::path::Path;

use sandkeeper_engine::output::write_atomic;
use sandkeeper_engine::ErrorKind;
use sandkeeper_testkit::privilege::{require_root, NOBODY};
use sandkeeper_testkit::scratch::Scratch;

fn nobodys_dir(path: &Path) {
    fs::create_dir(path).unwrap();
    chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
}

fn nobodys_link(target: &Path, link: &Path) {
    symlink(target, link).unwrap();
    lchown(link, Some(NOBODY), Some(NOBODY)).unwrap();
}

#[test]
fn nothing_owned_by_nobody_leads_into_roots_files() {
    if !require_root("nothing_owned_by_nobody_leads_into_roots_files") {
        return;
    }
    let base = Scratch::reachable_by_others("hostile-lib-output");
    let b = base.path();
    fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
    let roots = b.join("roots");
    fs::create_dir(&roots).unwrap();
    fs::write(roots.join("canary"), b"secret").unwrap();
    let theirs = b.join("theirs");
    nobodys_dir(&theirs);
    nobodys_dir(&theirs.join("own"));
    // A root-owned directory inside nobody's (moved in by them, say).
    fs::create_dir(theirs.join("rootdir")).unwrap();
    nobodys_link(&roots, &theirs.join("to-roots"));
    nobodys_link(Path::new("own"), &theirs.join("to-own"));
    nobodys_link(Path::new("../roots"), &theirs.join("up-to-roots"));

    // (row, path, accepted)
    let cases = [
        ("nobody's own directory", theirs.join("own/out"), true),
        (
            "nobody's link to nobody's directory",
            theirs.join("to-own/out"),
            true,
        ),
        (
            "a root-owned directory in nobody's",
            theirs.join("rootdir/out"),
            false,
        ),
        (
            "nobody's link to root's directory",
            theirs.join("to-roots/canary"),
            false,
        ),
        (
            "nobody's relative link up and over",
            theirs.join("up-to-roots/canary"),
            false,
        ),
        (
            "nobody's directory, then up",
            theirs.join("own/../../roots/canary"),
            false,
        ),
    ];
    for (row, path, ok) in cases {
        let result = write_atomic(&path, b"metrics", 0o644);
        match result {
            Ok(()) => assert!(ok, "{row}: written"),
            Err(e) => {
                assert!(!ok, "{row}: {e}");
                assert_eq!(e.kind(), ErrorKind::UnsafeRoot, "{row}: {e}");
                assert!(e.to_string().contains("uid 65534"), "{row}: {e}");
            }
        }
        assert_eq!(fs::read(roots.join("canary")).unwrap(), b"secret", "{row}");
        assert_eq!(
            fs::read_dir(&roots).unwrap().count(),
            1,
            "{row}: nothing new in root's"
        );
    }
}
