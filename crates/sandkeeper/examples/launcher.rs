//! The launcher recipe of `docs/launchers.md`: a run dir with a sparse
//! 1 GiB image, mounted on an autoclear loop device, and a VM (here a
//! stand-in, `sleep`, or the command given) that never outlives the
//! launcher, however the launcher ends.
//!
//! As root, in a mount namespace of its own, so the kernel undoes the
//! mount should the launcher be killed:
//!
//! ```sh
//! cargo build --example launcher
//! sudo unshare --mount --propagation private target/debug/examples/launcher [VM COMMAND…]
//! ```
//!
//! Then press Enter, or end it any way (Ctrl-C, `kill`, `kill -9`): nothing of it is left
//! running, and one `sandkeeper reap` leaves nothing on disk.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::process::Command;

use sandkeeper::Sandbox;

fn run(program: &str, args: &[&OsStr]) {
    let status = Command::new(program).args(args).status();
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "{program} failed: {status:?}"
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    sandkeeper::teardown_on_signals()?; // first
    let sb = Sandbox::builder().tag("vm").create()?;
    let image = sb.join("rootfs.img");
    File::create(&image)?.set_len(1 << 30)?; // a sparse 1 GiB image
    run(
        "mkfs.ext4",
        &["-q".as_ref(), "-F".as_ref(), image.as_os_str()],
    );
    let mnt = sb.join("mnt");
    fs::create_dir(&mnt)?;
    // `mount -o loop`: an autoclear loop device, gone with the last unmount.
    run(
        "mount",
        &[
            "-o".as_ref(),
            "loop".as_ref(),
            image.as_os_str(),
            mnt.as_os_str(),
        ],
    );
    let unmount = mnt.clone();
    sb.defer(move || run("umount", &[unmount.as_os_str()]));
    let mut vm: Vec<String> = std::env::args().skip(1).collect();
    if vm.is_empty() {
        vm = vec!["sleep".into(), "3600".into()];
    }
    let pid = sb.spawn(Command::new(&vm[0]).args(&vm[1..]).current_dir(&mnt))?;
    println!(
        "run dir {}, VM pid {pid}; press Enter to stop, or end me any way",
        sb.display()
    );
    // The job; here, wait for Enter (or the end of standard input).
    std::io::stdin().read_line(&mut String::new())?;
    sb.close()?; // VM stopped and waited for, unmounted, removed
    Ok(())
}
