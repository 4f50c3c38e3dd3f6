//! Finding 5(b), mounts: mounts that no mount table of a living process
//! names. A mount namespace kept alive only by a descriptor or by a bind
//! mount of its `nsfs` file (its tmpfs and bind mounts inside an entry);
//! an overlay with relative layer paths; an overlay lazily unmounted while
//! a process still works in it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandkeeper_engine::reap::KeepReason;
use sandkeeper_engine::sandbox;
use sandkeeper_engine::scan::EntryState;
use sandkeeper_testkit::mounts::Mount;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::process::spawn_ready;

use crate::kernel_support::{assert_in_use_and_kept, reap_all, sh, state_of};

/// Makes `root/app-tmpfs/mnt` and `root/app-bind/src`, bound at `bound`.
fn entries(root: &Path, bound: &Path) -> (PathBuf, PathBuf) {
    let tmpfs = root.join("app-tmpfs");
    let bind = root.join("app-bind");
    fs::create_dir_all(tmpfs.join("mnt")).unwrap();
    fs::create_dir_all(bind.join("src")).unwrap();
    fs::write(bind.join("src/data"), b"shown elsewhere").unwrap();
    fs::create_dir_all(bound).unwrap();
    (tmpfs, bind)
}

/// In the namespace at hand: a tmpfs with data inside `tmpfs/mnt`, and
/// `bind/src` bound at `$3`.
const MOUNTS: &str = r#"mount -t tmpfs sk-held "$1/mnt" && echo only-here > "$1/mnt/data" && mount --bind "$2/src" "$3""#;

#[test]
fn mounts_of_a_namespace_held_by_a_descriptor_are_in_use() {
    run_in_pid_namespace(
        "mounts_of_a_namespace_held_by_a_descriptor_are_in_use",
        "mounts::inner_mounts_of_a_namespace_held_by_a_descriptor",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_mounts_of_a_namespace_held_by_a_descriptor() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let elsewhere = sandbox!().unwrap();
    let bound = elsewhere.path().join("bound");
    let (tmpfs, bind) = entries(root.path(), &bound);
    // A process makes the mounts in a new mount namespace...
    let maker = spawn_ready(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!("{MOUNTS} && echo ready && exec sleep 600"))
            .arg("sh")
            .arg(&tmpfs)
            .arg(&bind)
            .arg(&bound),
    );
    // ...another, in ours, holds that namespace open...
    let holder = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg(r#"exec 3<"/proc/$1/ns/mnt" && echo ready && exec sleep 600"#)
            .arg("sh")
            .arg(maker.pid().to_string()),
    );
    // ...and the maker goes: no process lives in the namespace any more.
    drop(maker);
    assert!(fs::read_dir(tmpfs.join("mnt")).unwrap().next().is_none());
    assert_in_use_and_kept(root.path(), "app-tmpfs");
    assert_in_use_and_kept(root.path(), "app-bind");
    drop(holder);
}

#[test]
fn mounts_of_a_namespace_held_by_a_bind_mount_are_in_use() {
    run_in_pid_namespace(
        "mounts_of_a_namespace_held_by_a_bind_mount_are_in_use",
        "mounts::inner_mounts_of_a_namespace_held_by_a_bind_mount",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_mounts_of_a_namespace_held_by_a_bind_mount() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let elsewhere = sandbox!().unwrap();
    let bound = elsewhere.path().join("bound");
    let (tmpfs, bind) = entries(root.path(), &bound);
    let ns_file = elsewhere.path().join("ns");
    fs::write(&ns_file, b"").unwrap();
    // `unshare --mount=FILE` keeps the namespace by a bind mount of its
    // nsfs file at FILE; the process exits at once. The kernel refuses
    // (EINVAL) a bind that might make a namespace loop, judged by
    // namespace ids, which on some kernels are not handed out in creation
    // order across CPUs: a few bounded attempts.
    let made = (0..10).any(|_| {
        Command::new("sh")
            .arg("-c")
            .arg(r#"unshare --mount="$4" --propagation private sh -c "$5" sh "$1" "$2" "$3""#)
            .arg("sh")
            .args([&tmpfs, &bind, &bound, &ns_file])
            .arg(MOUNTS)
            .status()
            .is_ok_and(|s| s.success())
    });
    if !made {
        eprintln!("skipping: cannot bind-mount a mount namespace here");
        return;
    }
    let _ns = Mount::adopt(ns_file);
    assert!(fs::read_dir(tmpfs.join("mnt")).unwrap().next().is_none());
    assert_in_use_and_kept(root.path(), "app-tmpfs");
    assert_in_use_and_kept(root.path(), "app-bind");
}

/// Makes the layer directories of an overlay in `entry`.
fn layers(entry: &Path) {
    for dir in ["lower", "upper", "work"] {
        fs::create_dir_all(entry.join(dir)).unwrap();
    }
    fs::write(entry.join("lower/data"), b"lower layer").unwrap();
}

#[test]
fn overlay_with_relative_layer_paths_is_not_idle() {
    run_in_pid_namespace(
        "overlay_with_relative_layer_paths_is_not_idle",
        "mounts::inner_overlay_with_relative_layer_paths",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_overlay_with_relative_layer_paths() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let elsewhere = sandbox!().unwrap();
    let entry = root.path().join("app-overlay");
    let merged = elsewhere.path().join("merged");
    layers(&entry);
    fs::create_dir(&merged).unwrap();
    // Relative to the mounter's working directory, which the kernel keeps
    // only as text.
    sh(
        r#"cd "$1" && mount -t overlay sk-rel -o lowerdir=lower,upperdir=upper,workdir=work "$2""#,
        &[&entry, &merged],
    );
    let _overlay = Mount::adopt(merged);
    let (state, why) = state_of(root.path(), "app-overlay");
    // The layers could be anywhere: every entry is unknown, and the
    // report says why.
    assert_eq!(state, EntryState::Unknown, "{why}");
    assert!(why.contains("relative path (lowerdir=lower"), "{why}");
    assert_eq!(
        reap_all(root.path(), "app-overlay"),
        Some(KeepReason::Unknown),
        "{why}"
    );
    assert!(entry.join("lower/data").exists());
}

#[test]
fn overlay_detached_while_in_use_is_not_idle() {
    run_in_pid_namespace(
        "overlay_detached_while_in_use_is_not_idle",
        "mounts::inner_overlay_detached_while_in_use",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_overlay_detached_while_in_use() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let elsewhere = sandbox!().unwrap();
    let entry = root.path().join("app-overlay");
    let merged = elsewhere.path().join("merged");
    layers(&entry);
    fs::create_dir(&merged).unwrap();
    let p = |d: &str| entry.join(d).display().to_string();
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        p("lower"),
        p("upper"),
        p("work")
    );
    sh(
        r#"mount -t overlay sk-detached -o "$2" "$1""#,
        &[&merged, Path::new(&options)],
    );
    let mut overlay = Some(Mount::adopt(merged.clone()));
    // A process works in the overlay; then the overlay is detached.
    let worker = spawn_ready(
        Command::new("sh")
            .arg("-c")
            .arg("echo ready; exec sleep 600")
            .current_dir(&merged),
    );
    drop(overlay.take()); // umount -l
    assert!(!merged.join("data").exists(), "detached");
    // No mount table names its layers any more: every entry is unknown,
    // and the report names the process.
    let (state, why) = state_of(root.path(), "app-overlay");
    assert_eq!(state, EntryState::Unknown, "{why}");
    assert!(
        why.contains(&format!(
            "pid {} works in an overlay that no mount table lists",
            worker.pid()
        )),
        "{why}"
    );
    assert_eq!(
        reap_all(root.path(), "app-overlay"),
        Some(KeepReason::Unknown),
        "{why}"
    );
    assert!(entry.join("lower/data").exists());
}

#[test]
fn overlay_layer_through_a_repointed_symlink_is_not_idle() {
    run_in_pid_namespace(
        "overlay_layer_through_a_repointed_symlink_is_not_idle",
        "mounts::inner_overlay_layer_through_a_repointed_symlink",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_overlay_layer_through_a_repointed_symlink() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let elsewhere = sandbox!().unwrap();
    let entry = root.path().join("app-overlay");
    let decoy = elsewhere.path().join("decoy");
    let link = elsewhere.path().join("link");
    let merged = elsewhere.path().join("merged");
    layers(&entry);
    layers(&decoy);
    fs::create_dir(&merged).unwrap();
    std::os::unix::fs::symlink(&entry, &link).unwrap();
    // The layers are named through the link; the kernel keeps the text.
    let l = |d: &str| link.join(d).display().to_string();
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        l("lower"),
        l("upper"),
        l("work")
    );
    sh(
        r#"mount -t overlay sk-link -o "$2" "$1""#,
        &[&merged, Path::new(&options)],
    );
    let _overlay = Mount::adopt(merged);
    // Then the link points at a decoy with the same names.
    let repointed = elsewhere.path().join("link.new");
    std::os::unix::fs::symlink(&decoy, &repointed).unwrap();
    fs::rename(&repointed, &link).unwrap();
    let (state, why) = state_of(root.path(), "app-overlay");
    assert_eq!(state, EntryState::Unknown, "{why}");
    assert!(why.contains("is not found at its path"), "{why}");
    assert_eq!(
        reap_all(root.path(), "app-overlay"),
        Some(KeepReason::Unknown),
        "{why}"
    );
    assert!(entry.join("lower/data").exists());
}
