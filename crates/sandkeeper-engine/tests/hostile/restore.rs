//! Issue 25, item 3: an entry judged in use is never lost. A reaper moves
//! an entry into its quarantine, and a check finds it in use (the victim's
//! job started using it after the scan); meanwhile another user took its
//! name. The put-back used to fail (`RENAME_NOREPLACE`), so the entry
//! stayed in root's 0700 quarantine: the victim's path resolved to the
//! attacker's directory (the victim read attacker-chosen data), and a job
//! that re-created its missing directory (`mkdir -p`) blocked the put-back
//! until a later reap deleted the original data the tool had judged in
//! use. Now the entry gets its name back atomically
//! (`renameat2(RENAME_EXCHANGE)`), and the newcomer is moved out beside it
//! as `<name>.taken-during-reap-<8 hex>`, unchanged. What a reaper killed
//! half-way through that leaves (under a `returning-` name) is moved back
//! out by the next one, never deleted.
//!
//! The victim is uid 65533, the attacker uid 65534, in a sticky,
//! world-writable root like `/tmp`; the remover is root. No `/proc` check
//! is involved (the handle's `restore` is what a reaper calls once its
//! check found the entry in use), so no PID namespace is needed.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sandkeeper_engine::remove::{
    finish_quarantine, pending_leftovers, LeftBy, NotRestored, QuarantineBatch, RemoveOptions,
    Restore,
};
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::privilege::{nobody_sh_in, require_root};
use sandkeeper_testkit::scratch::shared_root;
use sandkeeper_testkit::tree::name_set;

/// The victim's uid.
const VICTIM: u32 = 65533;

/// The victim's entry `name` in `root`: a directory of uid 65533 holding
/// `file` ("the victim's").
fn victims_entry(root: &Path, name: &str) -> PathBuf {
    let entry = root.join(name);
    fs::create_dir(&entry).unwrap();
    fs::write(entry.join("file"), "the victim's").unwrap();
    std::os::unix::fs::lchown(entry.join("file"), Some(VICTIM), Some(VICTIM)).unwrap();
    std::os::unix::fs::lchown(&entry, Some(VICTIM), Some(VICTIM)).unwrap();
    entry
}

/// The one name in `root` of the form `<name>.taken-during-reap-<8 hex>`.
fn taken_beside(root: &Path, name: &str) -> String {
    let prefix = format!("{name}.taken-during-reap-");
    let taken: Vec<String> = name_set(root)
        .into_iter()
        .filter(|n| {
            n.strip_prefix(&prefix)
                .is_some_and(|hex| hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .collect();
    assert_eq!(taken.len(), 1, "{:?}", name_set(root));
    taken.into_iter().next().unwrap()
}

#[test]
fn a_taken_name_is_given_back_and_the_newcomer_kept_beside_it() {
    if !require_root("a_taken_name_is_given_back_and_the_newcomer_kept_beside_it") {
        return;
    }
    // What the attacker puts under the victim's name once the entry left
    // it; `bait` is the attacker's directory a symlink points to.
    let kinds = [
        ("directory", "mkdir app-1 && echo theirs > app-1/file"),
        ("file", "echo theirs > app-1"),
        (
            "symlink",
            "mkdir bait && echo theirs > bait/file && ln -s bait app-1",
        ),
    ];
    for (kind, take) in kinds {
        let (_base, root) = shared_root("hostile-restore");
        let entry = victims_entry(&root, "app-1");
        let before = fs::symlink_metadata(&entry).unwrap();
        let dir = fs::File::open(&root).unwrap();
        let mut batch = QuarantineBatch::new(dir.as_fd()).unwrap();
        let held = batch
            .quarantine_entry(OsStr::new("app-1"), &RemoveOptions::new())
            .unwrap();
        assert_eq!(held.identity(), (before.dev(), before.ino()));
        // The check (not run here) found it in use; meanwhile the name was
        // taken.
        nobody_sh_in(take, &root);

        let restored = held.restore();
        drop(batch);

        // The entry is back under its name: the same inode, as it was.
        let now = fs::symlink_metadata(&entry).unwrap();
        assert_eq!(
            (now.dev(), now.ino(), now.uid(), now.mode()),
            (before.dev(), before.ino(), VICTIM, before.mode()),
            "{kind}: the victim's entry has its name back ({restored:?})"
        );
        assert_eq!(
            fs::read_to_string(entry.join("file")).unwrap(),
            "the victim's"
        );
        // The newcomer is beside it, unchanged, and nothing else is there
        // (the quarantine, empty, is gone).
        let taken = taken_beside(&root, "app-1");
        let newcomer = root.join(&taken);
        let meta = fs::symlink_metadata(&newcomer).unwrap();
        assert_eq!(meta.uid(), 65534, "{kind}: still the attacker's");
        match kind {
            "directory" => assert_eq!(
                fs::read_to_string(newcomer.join("file")).unwrap(),
                "theirs\n"
            ),
            "file" => assert_eq!(fs::read_to_string(&newcomer).unwrap(), "theirs\n"),
            _ => {
                assert!(meta.file_type().is_symlink(), "moved as a link");
                assert_eq!(fs::read_link(&newcomer).unwrap(), Path::new("bait"));
                assert_eq!(
                    fs::read_to_string(root.join("bait/file")).unwrap(),
                    "theirs\n",
                    "the link was not followed"
                );
            }
        }
        let mut want: BTreeSet<String> = ["app-1".to_owned(), taken.clone()].into();
        if kind == "symlink" {
            want.insert("bait".to_owned());
        }
        assert_eq!(name_set(&root), want, "{kind}: nothing lost, nothing left");
        // And the outcome says so.
        assert!(
            matches!(&restored, Restore::Exchanged { newcomer, kind: Some(k), uid: Some(65534), .. }
                if *newcomer == Path::new(&taken) && *k == kind),
            "{kind}: {restored:?}"
        );
        let said = restored.describe(&root);
        assert!(
            said.contains("uid 65534") && said.contains(&taken),
            "{said}"
        );
    }
}

#[test]
fn a_job_recreating_its_directory_does_not_block_the_put_back() {
    if !require_root("a_job_recreating_its_directory_does_not_block_the_put_back") {
        return;
    }
    // Harm (b): the job itself runs `mkdir -p` on its missing directory.
    // Its original data used to stay pending, and a later reap deleted it.
    let (_base, root) = shared_root("hostile-restore-mkdir");
    let entry = victims_entry(&root, "job");
    let dir = fs::File::open(&root).unwrap();
    let opts = RemoveOptions::new();
    let held =
        sandkeeper_engine::remove::quarantine_entry(dir.as_fd(), OsStr::new("job"), &opts).unwrap();
    fs::create_dir_all(entry.join("sub")).unwrap();
    std::os::unix::fs::lchown(&entry, Some(VICTIM), Some(VICTIM)).unwrap();

    assert!(matches!(held.restore(), Restore::Exchanged { .. }));

    assert_eq!(
        fs::read_to_string(entry.join("file")).unwrap(),
        "the victim's"
    );
    let taken = taken_beside(&root, "job");
    assert!(
        root.join(&taken).join("sub").is_dir(),
        "the re-created one kept"
    );
    // Nothing is left pending for a later reap to delete.
    assert!(pending_leftovers(dir.as_fd(), &opts).unwrap().is_empty());
    assert_eq!(name_set(&root), ["job".to_owned(), taken].into());
}

/// The `returning-<16 hex>.<hex of name>` name a put-back gives an entry
/// (see the quarantine's module docs).
fn returning(name: &str, random: u64) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("returning-{random:016x}.{hex}")
}

#[test]
fn what_a_killed_put_back_left_returning_is_moved_out_never_deleted() {
    if !require_root("what_a_killed_put_back_left_returning_is_moved_out_never_deleted") {
        return;
    }
    let (_base, root) = shared_root("hostile-returning");
    // A quarantine the library made, holding two entries left pending.
    victims_entry(&root, "app-1");
    victims_entry(&root, "app-2");
    let dir = fs::File::open(&root).unwrap();
    let opts = RemoveOptions::new();
    let mut batch = QuarantineBatch::new(dir.as_fd()).unwrap();
    let one = batch.quarantine_entry(OsStr::new("app-1"), &opts).unwrap();
    let two = batch.quarantine_entry(OsStr::new("app-2"), &opts).unwrap();
    let (one_at, two_at) = (
        root.join(one.path_in_parent()),
        root.join(two.path_in_parent()),
    );
    let quarantine = one_at.parent().unwrap().to_owned();
    // Dropped without a restore or a removal: they stay pending.
    drop((one, two, batch));
    // A reaper killed right after marking app-1 returning (its name free
    // again) and one killed right after app-2's exchange: app-2 has its
    // name back, and the attacker's newcomer is under the returning name.
    fs::rename(&one_at, quarantine.join(returning("app-1", 1))).unwrap();
    fs::rename(&two_at, root.join("app-2")).unwrap();
    let newcomer = quarantine.join(returning("app-2", 2));
    fs::create_dir(&newcomer).unwrap();
    fs::write(newcomer.join("file"), "theirs").unwrap();
    std::os::unix::fs::lchown(&newcomer, Some(65534), Some(65534)).unwrap();

    let report = finish_quarantine(dir.as_fd(), &opts).unwrap();

    assert_eq!(report.leftovers_removed().entries(), 0, "nothing deleted");
    assert_eq!(
        fs::read_to_string(root.join("app-1/file")).unwrap(),
        "the victim's",
        "app-1 is back under its name"
    );
    assert_eq!(
        fs::read_to_string(root.join("app-2/file")).unwrap(),
        "the victim's"
    );
    let taken = taken_beside(&root, "app-2");
    let beside = root.join(&taken);
    assert_eq!(fs::read_to_string(beside.join("file")).unwrap(), "theirs");
    assert_eq!(fs::symlink_metadata(&beside).unwrap().uid(), 65534);
    let returned: BTreeSet<PathBuf> = report.leftovers_returned().iter().cloned().collect();
    assert_eq!(
        returned,
        [PathBuf::from("app-1"), PathBuf::from(&taken)].into()
    );
    assert_eq!(
        name_set(&root),
        ["app-1".to_owned(), "app-2".to_owned(), taken].into(),
        "the empty quarantine is gone"
    );
}

#[test]
fn a_put_back_whose_exchange_fails_stays_pending_and_says_why() {
    if !require_root("a_put_back_whose_exchange_fails_stays_pending_and_says_why") {
        return;
    }
    // A mount point cannot be renamed (`EBUSY`): the exchange fails, the
    // entry stays pending, and the next reap is told it was kept on
    // purpose, not left by a killed reaper.
    let (_base, root) = shared_root("hostile-restore-busy");
    let entry = victims_entry(&root, "app-1");
    let dir = fs::File::open(&root).unwrap();
    let opts = RemoveOptions::new();
    let held = sandkeeper_engine::remove::quarantine_entry(dir.as_fd(), OsStr::new("app-1"), &opts)
        .unwrap();
    assert_eq!(held.left_by(), LeftBy::ThisCaller);
    let mount = Mount::tmpfs(&entry, "1m");

    let restored = held.restore();

    let Restore::KeptInQuarantine { at, why, .. } = &restored else {
        panic!("{restored:?}");
    };
    assert!(
        matches!(why, NotRestored::Failed { errno, .. } if *errno == rustix::io::Errno::BUSY),
        "{why:?}"
    );
    assert!(
        at.file_name()
            .unwrap()
            .as_bytes()
            .starts_with(b"pending-kept-"),
        "{at:?}"
    );
    assert_eq!(
        fs::read_to_string(root.join(at).join("file")).unwrap(),
        "the victim's"
    );
    drop(mount);
    rustix::fs::unlinkat(rustix::fs::CWD, &entry, rustix::fs::AtFlags::REMOVEDIR).unwrap();

    let mut pending = pending_leftovers(dir.as_fd(), &opts).unwrap();
    assert_eq!(pending.len(), 1);
    let again = pending.pop().unwrap();
    assert_eq!(again.left_by(), LeftBy::NotPutBack);
    assert_eq!(again.original_name(), Some(OsStr::new("app-1")));
    assert_eq!(again.restore(), Restore::Restored);
    assert_eq!(
        fs::read_to_string(entry.join("file")).unwrap(),
        "the victim's"
    );
    assert_eq!(name_set(&root), ["app-1".to_owned()].into());
}
