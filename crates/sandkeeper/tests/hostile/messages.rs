//! Issue 11, item 9: messages that sent their reader the wrong way.
//!
//! (b) A squatted per-user root `sandkeeper-<uid>` (another user's
//! directory, symlink or file at that name in a sticky directory) told its
//! victim to "remove it", which they cannot do there. Now it says what is
//! there and whose it is, who can remove it (an administrator, or
//! `sandkeeper reap` as root), and what to do meanwhile
//! (`SANDKEEPER_ROOT`).
//!
//! The victim is uid 65534 (this test binary, re-run through `setpriv`);
//! the squatter is uid 65533.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use sandkeeper::Sandbox;
use sandkeeper_testkit::{reachable_by_others, require_root};

/// Run as the victim: makes a keyed sandbox in the per-user root under
/// `$TMPDIR` and prints the error, its path and its hint.
#[test]
#[ignore = "victim process entry point, run by the squatting tests"]
fn victim_main() {
    if std::env::var_os("SK_VICTIM").is_none() {
        return;
    }
    match Sandbox::builder().tag("victim").keyed(true).create() {
        Ok(s) => println!("CREATED {}", s.path().display()),
        Err(e) => println!(
            "ERROR {e}\nHINT {}\nKIND {:?}",
            e.hint().unwrap_or(""),
            e.kind()
        ),
    }
}

/// A sticky 1777 base where uid 65533 plants `sandkeeper-65534` with the
/// shell command `plant`; what the victim's keyed creation says.
fn victim_says(tag: &str, plant: &str) -> String {
    let base = Sandbox::builder()
        .root(reachable_by_others())
        .tag(tag)
        .create()
        .unwrap();
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65533", "--regid=65533", "--clear-groups", "--"])
        .args(["sh", "-ec", plant])
        .current_dir(base.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "messages::victim_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SK_VICTIM", "1")
        .env("TMPDIR", base.path())
        .env_remove("SANDKEEPER_ROOT")
        .env_remove("SANDKEEPER_KEEP")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains("ERROR "), "{said}");
    // Still there: nothing of the squatter's was touched.
    assert!(fs::symlink_metadata(base.path().join("sandkeeper-65534")).is_ok());
    said
}

fn assert_says_who_can_remove_it(said: &str, what: &str) {
    assert!(said.contains(what), "{said}");
    assert!(said.contains("uid 65533"), "names the owner: {said}");
    assert!(
        said.contains("not by you (uid 65534)"),
        "names the victim: {said}"
    );
    assert!(said.contains("You cannot remove it"), "{said}");
    assert!(said.contains("administrator"), "{said}");
    assert!(
        said.contains("sandkeeper reap --match 'sandkeeper-65534'"),
        "{said}"
    );
    assert!(said.contains("SANDKEEPER_ROOT"), "{said}");
    assert!(
        !said.contains("HINT remove it") && !said.contains("; remove it"),
        "tells the victim to do what they cannot: {said}"
    );
}

#[test]
fn a_squatted_user_root_directory_names_its_owner() {
    if !require_root("a_squatted_user_root_directory_names_its_owner") {
        return;
    }
    let said = victim_says("hostile-msg-squat-dir", "mkdir -m 0755 sandkeeper-65534");
    assert_says_who_can_remove_it(&said, "is a directory, owned by uid 65533");
}

#[test]
fn a_squatted_user_root_symlink_names_its_owner() {
    if !require_root("a_squatted_user_root_symlink_names_its_owner") {
        return;
    }
    let said = victim_says(
        "hostile-msg-squat-link",
        "mkdir -m 0777 there; ln -s there sandkeeper-65534",
    );
    assert_says_who_can_remove_it(&said, "is a symlink, not a directory, owned by uid 65533");
}

#[test]
fn a_squatted_user_root_file_names_its_owner() {
    if !require_root("a_squatted_user_root_file_names_its_owner") {
        return;
    }
    let said = victim_says("hostile-msg-squat-file", "echo x > sandkeeper-65534");
    assert_says_who_can_remove_it(&said, "is a file, not a directory, owned by uid 65533");
}
