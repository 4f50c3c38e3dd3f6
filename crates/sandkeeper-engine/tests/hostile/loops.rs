//! Finding 5(b), loop devices: a loop device attached through a path of a
//! mount namespace that is gone since. `/sys/block/loopN/loop/backing_file`
//! names a path that resolves to nothing (or to something else) in ours;
//! the kernel still holds the file inside the entry. Matched by the
//! backing file's device and inode (`LOOP_GET_STATUS64`).

use std::fs;
use std::path::{Path, PathBuf};

use sandkeeper_engine::sandbox;
use sandkeeper_testkit::mounts::LoopDevice;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};

use crate::kernel_support::{assert_in_use_and_kept, sh};

#[test]
fn loop_backed_through_a_gone_namespace_is_in_use() {
    run_in_pid_namespace(
        "loop_backed_through_a_gone_namespace_is_in_use",
        "loops::inner_loop_backed_through_a_gone_namespace",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_loop_backed_through_a_gone_namespace() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let elsewhere = sandbox!().unwrap();
    let entry = root.path().join("app-loop");
    let alias = elsewhere.path().join("alias");
    fs::create_dir(&entry).unwrap();
    fs::create_dir(&alias).unwrap();
    fs::write(entry.join("disk.img"), vec![0u8; 1 << 20]).unwrap();
    // In a namespace that dies with the script: the entry bound at the
    // alias, the loop device attached through the alias.
    let dev = sh(
        r#"exec unshare --mount --propagation private sh -c 'mount --bind "$1" "$2" && exec losetup -f --show "$2/disk.img"' sh "$1" "$2""#,
        &[&entry, &alias],
    );
    let dev = dev.trim().to_owned();
    if !dev.starts_with("/dev/loop") {
        eprintln!("skipping: losetup said {dev:?}");
        return;
    }
    let _attached = LoopDevice {
        device: PathBuf::from(&dev),
    };
    let name = Path::new(&dev).file_name().unwrap().to_str().unwrap();
    let named = fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).unwrap();
    assert!(
        !Path::new(named.trim()).exists(),
        "the backing path {named:?} must not resolve here"
    );
    assert_in_use_and_kept(root.path(), "app-loop");
}
