//! Mounts and loop devices a test sets up, each undone when its guard is
//! dropped, even when the test fails. Declare a guard *after* the scratch
//! directory it lives in, so it is undone first.

use std::ffi::CString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The errno of a full filesystem (`ENOSPC`), as
/// [`std::io::Error::raw_os_error`] gives it: what a write to a filled
/// tmpfs or loop-mounted image fails with.
pub const ENOSPC: i32 = rustix::io::Errno::NOSPC.raw_os_error();

/// A mount, lazily unmounted (`MNT_DETACH`) when dropped.
pub struct Mount(PathBuf);

impl Mount {
    /// Mounts a tmpfs of `size` (`8m`, `1g`) at `at` (mode 0755), creating
    /// `at` first.
    pub fn tmpfs(at: &Path, size: &str) -> Mount {
        Mount::tmpfs_with(at, &format!("size={size}"))
    }

    /// Mounts a tmpfs with these mount options (`size=8m,nr_inodes=64`)
    /// at `at`, creating it; `mode=0755` unless the options say otherwise.
    pub fn tmpfs_with(at: &Path, options: &str) -> Mount {
        fs::create_dir_all(at).unwrap_or_else(|e| panic!("mkdir {}: {e}", at.display()));
        let data = CString::new(format!("mode=0755,{options}")).expect("no NUL in options");
        rustix::mount::mount(
            "sandkeeper-test",
            at,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            Some(data.as_c_str()),
        )
        .unwrap_or_else(|e| panic!("mount tmpfs at {}: {e}", at.display()));
        Mount(at.to_owned())
    }

    /// Mounts an empty read-only tmpfs at `at`.
    pub fn read_only_tmpfs(at: &Path) -> Mount {
        rustix::mount::mount("none", at, "tmpfs", rustix::mount::MountFlags::RDONLY, None)
            .unwrap_or_else(|e| panic!("mount tmpfs on {}: {e}", at.display()));
        Mount(at.to_owned())
    }

    /// Bind-mounts `source` (a directory or a file) onto `target`.
    pub fn bind(source: &Path, target: &Path) -> Mount {
        rustix::mount::mount_bind(source, target)
            .unwrap_or_else(|e| panic!("bind {} on {}: {e}", source.display(), target.display()));
        Mount(target.to_path_buf())
    }

    /// Takes charge of a mount at `at` made some other way (by a shell
    /// command, a helper process, the code under test).
    pub fn adopt(at: impl Into<PathBuf>) -> Mount {
        Mount(at.into())
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

/// A loop device, detached when dropped.
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub device: PathBuf,
}

impl LoopDevice {
    /// `losetup --find --show file`; `Err` with the reason when no loop
    /// device can be set up here.
    pub fn attach(file: &Path) -> Result<LoopDevice, String> {
        let output = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run losetup: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let device = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        Ok(LoopDevice {
            device: PathBuf::from(device),
        })
    }

    /// `loop0` for `/dev/loop0`.
    pub fn name(&self) -> String {
        self.device
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let status = Command::new("losetup")
            .arg("--detach")
            .arg(&self.device)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("cannot detach {}: {status:?}", self.device.display());
        }
    }
}
