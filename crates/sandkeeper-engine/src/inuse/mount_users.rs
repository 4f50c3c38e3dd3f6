//! Kernel users of paths, from parsed `mountinfo` ([`super::mountinfo`]):
//! mount points and sources, overlay layers, and loop devices.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::mountinfo::{
    bind_source_paths, makedev, overlay_layers, parse_dec, parse_dev, strip_dir_prefix, MountLine,
};
use super::{KernelUse, KernelUseKind, MountNamespace};

/// `stat(path, follow)`: the `(device, inode)` of an absolute path of the
/// namespace at hand, following a final symlink when `follow` is set.
pub(super) type StatPath<'a> = dyn FnMut(&[u8], bool) -> Option<(u64, u64)> + 'a;

/// Whether a lookup in a filesystem of type `fstype` may have to wait for
/// a server or a process that may never answer: FUSE (`fuse`,
/// `fuse.sshfs`, `fuseblk`), network and cluster filesystems (NFS, CIFS,
/// 9p, Ceph, AFS, Lustre, …), virtio and hypervisor shares, and `autofs`
/// (whose lookups mount).
pub(super) fn may_not_answer(fstype: &[u8]) -> bool {
    let base = fstype.split(|&b| b == b'.').next().unwrap_or(fstype);
    matches!(
        base,
        b"fuse"
            | b"fuseblk"
            | b"fuse3"
            | b"nfs"
            | b"nfs4"
            | b"cifs"
            | b"smb3"
            | b"smbfs"
            | b"9p"
            | b"ceph"
            | b"glusterfs"
            | b"afs"
            | b"coda"
            | b"lustre"
            | b"gfs2"
            | b"ocfs2"
            | b"gpfs"
            | b"beegfs"
            | b"orangefs"
            | b"pvfs2"
            | b"ncpfs"
            | b"virtiofs"
            | b"vboxsf"
            | b"vmhgfs"
            | b"davfs"
            | b"sshfs"
            | b"autofs"
    )
}

/// The first mount of `mounts` that [may not answer](may_not_answer) and
/// that a lookup of the absolute `path` would pass through (its mount
/// point is `path` or a directory above it), judged by the text alone.
pub(super) fn silent_mount_on_the_way<'a>(
    mounts: &'a [MountLine],
    path: &[u8],
) -> Option<&'a MountLine> {
    mounts
        .iter()
        .find(|m| may_not_answer(&m.fstype) && strip_dir_prefix(path, &m.mount_point).is_some())
}

/// Turns the mounts of one namespace into kernel uses, appending to `out`.
///
/// `stat(path, follow)` gives the `(device, inode)` of an absolute path of
/// that namespace, following a final symlink when `follow` is set. It is
/// never asked about a path through a mount that
/// [may not answer](may_not_answer) (a dead FUSE or NFS server would hang
/// the lookup in the kernel): those uses keep no inode and are matched by
/// their path alone. The walker never enters such a mount, so an inode on
/// it could only matter to a root on that very filesystem.
pub(super) fn kernel_uses(
    mounts: &[MountLine],
    namespace: MountNamespace,
    stat: &mut StatPath<'_>,
    out: &mut Vec<KernelUse>,
) {
    for (i, m) in mounts.iter().enumerate() {
        let fstype = String::from_utf8_lossy(&m.fstype).into_owned();
        let mount_point = path_buf(&m.mount_point);
        let use_ = |kind, path: &[u8], inode, deleted| KernelUse {
            kind,
            path: path_buf(path),
            inode,
            deleted,
            mount_point: Some(mount_point.clone()),
            fstype: Some(fstype.clone()),
            namespace,
            device: Some(makedev(m.major, m.minor)),
        };
        // The mount point resolves to the root of what is mounted: for a
        // bind mount, the source directory or file itself.
        let silent = |path: &[u8]| silent_mount_on_the_way(mounts, path).is_some();
        let root_inode = if silent(&m.mount_point) {
            None
        } else {
            stat(&m.mount_point, false)
        };
        out.push(use_(
            KernelUseKind::MountPoint,
            &m.mount_point,
            root_inode,
            false,
        ));
        for source in bind_source_paths(mounts, i) {
            out.push(use_(
                KernelUseKind::BindSource,
                &source,
                root_inode,
                m.root_deleted,
            ));
        }
        if m.source.first() == Some(&b'/') {
            let inode = if silent(&m.source) {
                None
            } else {
                stat(&m.source, true)
            };
            out.push(use_(KernelUseKind::MountSource, &m.source, inode, false));
        }
        if m.fstype == b"overlay" {
            for (layer, path) in overlay_layers(&m.super_options) {
                // Resolved by the caller, in the namespace's root and
                // without following links (see `resolve_layers`); a
                // relative layer was relative to the mounter's working
                // directory of the time, which nothing records.
                let inode = None;
                out.push(use_(
                    KernelUseKind::OverlayLayer(layer),
                    &path,
                    inode,
                    false,
                ));
            }
        }
    }
}

/// Appends the backing files of the loop devices under `sys_block`
/// (`/sys/block/loopN`) to `out`, each with the `(device, inode)` that the
/// kernel holds: `LOOP_GET_STATUS64` on `dev_dir/loopN`.
///
/// That request makes the kernel `stat` the backing file, asking its
/// filesystem, inline: a FUSE server that read the request and never
/// answers keeps the caller waiting uninterruptibly, and a process with
/// such a thread cannot exit, even on `SIGKILL`. So it is made only where
/// the backing path (`loop/backing_file`, which sysfs gives without asking
/// any filesystem) lies on no mount that [may not answer](may_not_answer)
/// in any known mount table: `silent(path)` tells. Elsewhere the loop
/// device is kept by its path alone (no inode, no blind spot): the walker
/// never enters such a filesystem, and `/dev/loopN` is not even opened.
///
/// The path in `loop/backing_file` is only text: the file may have been
/// attached through a mount of another (even a since-gone) namespace, or
/// its name replaced since, so it is kept for display and for a match by
/// path (which can only make an entry look in use) and never stat'ed.
/// A bound device whose backing inode cannot be had is returned in
/// `unknown` with why, by number: a blind spot, as the file could be
/// anywhere. Unbound devices (no `loop/` directory, or `ENXIO`) are
/// skipped.
///
/// # Errors
///
/// When `sys_block` cannot be listed.
#[cfg(target_os = "linux")]
pub(super) fn loop_devices(
    sys_block: &Path,
    dev_dir: &Path,
    silent: &dyn Fn(&[u8]) -> bool,
    out: &mut Vec<KernelUse>,
    unknown: &mut Vec<(u32, i32)>,
) -> io::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    let mut dev = None;
    for dent in std::fs::read_dir(sys_block)? {
        let dent = dent?;
        let name = dent.file_name();
        let Some(number) = name
            .as_bytes()
            .strip_prefix(b"loop")
            .and_then(parse_dec::<u32>)
        else {
            continue; // not a loop device (nor a partition of one)
        };
        let dir = sys_block.join(&name);
        let text = match std::fs::read(dir.join("loop/backing_file")) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // unbound
            Err(e) => {
                unknown.push((number, e.raw_os_error().unwrap_or(libc::EIO)));
                continue;
            }
        };
        let Some((path, deleted)) = parse_backing_file(&text) else {
            continue;
        };
        let use_ = |inode| KernelUse {
            kind: KernelUseKind::LoopBackingFile {
                device: name.to_string_lossy().into_owned(),
            },
            path: path_buf(path),
            inode,
            deleted,
            mount_point: None,
            fstype: None,
            namespace: MountNamespace::Own,
            device: None,
        };
        if silent(path) {
            out.push(use_(None));
            continue;
        }
        let queried = (|| -> Result<Option<(u64, u64)>, rustix::io::Errno> {
            let rdev = std::fs::read(dir.join("dev"))
                .ok()
                .and_then(|t| parse_dev(t.trim_ascii(), 10))
                .ok_or(rustix::io::Errno::NODEV)?;
            if dev.is_none() {
                dev = Some(rustix::fs::open(
                    dev_dir,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?);
            }
            let Some(dev) = dev.as_ref() else {
                return Err(rustix::io::Errno::NODEV);
            };
            // Only the device node itself, never a link, and first O_PATH
            // (which opens nothing): the node must be this loop device,
            // as another driver could read the request number otherwise.
            let path_fd = rustix::fs::openat(
                dev,
                name.as_os_str(),
                OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )?;
            let st = rustix::fs::fstat(&path_fd)?;
            let want = makedev(rdev.0, rdev.1);
            #[allow(clippy::useless_conversion)] // the field types vary by target
            if FileType::from_raw_mode(st.st_mode) != FileType::BlockDevice
                || u64::from(st.st_rdev) != want
            {
                return Err(rustix::io::Errno::NODEV);
            }
            // Then that very node, read-only; O_NONBLOCK so that nothing
            // waits for media.
            let fd = rustix::fs::open(
                format!(
                    "/proc/thread-self/fd/{}",
                    std::os::fd::AsRawFd::as_raw_fd(&path_fd)
                ),
                OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
                Mode::empty(),
            )?;
            match crate::sys::loopdev::loop_backing_inode(std::os::fd::AsFd::as_fd(&fd)) {
                Ok(key) => Ok(Some(key)),
                Err(rustix::io::Errno::NXIO) => Ok(None), // detached meanwhile
                Err(e) => Err(e),
            }
        })();
        let inode = match queried {
            Ok(Some(key)) => key,
            Ok(None) => continue,
            Err(e) => {
                unknown.push((number, e.raw_os_error()));
                continue;
            }
        };
        out.push(use_(Some(inode)));
    }
    Ok(())
}

/// Parses the text of a loop device's `backing_file`: the path, and whether
/// the kernel marked it ` (deleted)`. `None` when empty.
pub(super) fn parse_backing_file(text: &[u8]) -> Option<(&[u8], bool)> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    if text.is_empty() {
        return None;
    }
    Some(match text.strip_suffix(b" (deleted)") {
        Some(path) => (path, true),
        None => (text, false),
    })
}

fn path_buf(bytes: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;
    use crate::inuse::mountinfo::{parse_mountinfo, test_line as line};

    #[test]
    fn silent_mounts_are_never_looked_up() {
        let mounts = vec![
            line("/", "/", "ext4", "/dev/vda", ""),
            line("/", "/mnt/dead", "fuse.sshfs", "me@host:", ""),
            line("/", "/mnt/dead/sub", "tmpfs", "tmpfs", ""),
            line("/x", "/srv/bind", "nfs4", "server:/x", ""),
            line("/", "/srv/named", "tmpfs", "/mnt/dead/sub/x", ""),
            line("/", "/tmp", "tmpfs", "/dev/sdb", ""),
        ];
        let mut asked = Vec::new();
        let mut stat = |p: &[u8], _follow: bool| {
            asked.push(String::from_utf8_lossy(p).into_owned());
            Some((9, asked.len() as u64))
        };
        let mut out = Vec::new();
        kernel_uses(&mounts, MountNamespace::Own, &mut stat, &mut out);
        assert_eq!(asked, ["/", "/dev/vda", "/srv/named", "/tmp", "/dev/sdb"]);
        let unresolved: Vec<_> = out
            .iter()
            .filter(|k| k.inode.is_none() && k.kind != KernelUseKind::BindSource)
            .map(|k| k.path.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            unresolved,
            ["/mnt/dead", "/mnt/dead/sub", "/srv/bind", "/mnt/dead/sub/x"]
        );
        let cases: &[(&str, &[u8], bool)] = &[
            ("fuse", b"fuse", true),
            ("fuse subtype", b"fuse.sshfs", true),
            ("fuseblk", b"fuseblk", true),
            ("nfs", b"nfs", true),
            ("nfs4", b"nfs4", true),
            ("cifs", b"cifs", true),
            ("9p", b"9p", true),
            ("ceph", b"ceph", true),
            ("autofs", b"autofs", true),
            ("ext4", b"ext4", false),
            ("tmpfs", b"tmpfs", false),
            ("overlay", b"overlay", false),
            ("a prefix is not a type", b"nfsd", false),
        ];
        for (name, fstype, want) in cases {
            assert_eq!(may_not_answer(fstype), *want, "{name}");
        }
    }

    #[test]
    fn backing_file_cases() {
        let cases: &[(&str, &[u8], Option<(&[u8], bool)>)] = &[
            (
                "plain",
                b"/tmp/sb/disk.img\n",
                Some((b"/tmp/sb/disk.img", false)),
            ),
            (
                "deleted",
                b"/tmp/sb/disk.img (deleted)\n",
                Some((b"/tmp/sb/disk.img", true)),
            ),
            (
                "space in name",
                b"/tmp/a b.img\n",
                Some((b"/tmp/a b.img", false)),
            ),
            ("no newline", b"/x", Some((b"/x", false))),
            ("empty", b"\n", None),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_backing_file(text), *want, "{name}");
        }
    }

    #[test]
    fn kernel_uses_from_mounts() {
        let mounts = parse_mountinfo(
            b"1 0 0:2 / / rw - ext4 /dev/vda rw\n\
              2 1 0:3 / /tmp rw - tmpfs tmpfs rw\n\
              3 2 0:3 /sb/src /mnt rw - tmpfs tmpfs rw\n\
              4 2 0:4 / /merged rw - overlay overlay rw,lowerdir=/tmp/sb/lo,upperdir=/tmp/sb/up,workdir=/tmp/sb/wk\n\
              garbage\n",
        );
        assert_eq!(mounts.len(), 4);
        let mut stats = Vec::new();
        let mut stat = |p: &[u8], follow: bool| {
            stats.push((String::from_utf8_lossy(p).into_owned(), follow));
            Some((9, stats.len() as u64))
        };
        let mut out = Vec::new();
        kernel_uses(&mounts, MountNamespace::Own, &mut stat, &mut out);
        let got: Vec<(String, KernelUseKind)> = out
            .iter()
            .map(|k| (k.path.display().to_string(), k.kind.clone()))
            .collect();
        use KernelUseKind::*;
        let want = vec![
            ("/".to_owned(), MountPoint),
            ("/dev/vda".to_owned(), MountSource),
            ("/tmp".to_owned(), MountPoint),
            ("/mnt".to_owned(), MountPoint),
            ("/tmp/sb/src".to_owned(), BindSource),
            ("/merged".to_owned(), MountPoint),
            (
                "/tmp/sb/lo".to_owned(),
                OverlayLayer(crate::inuse::OverlayLayer::Lower),
            ),
            (
                "/tmp/sb/up".to_owned(),
                OverlayLayer(crate::inuse::OverlayLayer::Upper),
            ),
            (
                "/tmp/sb/wk".to_owned(),
                OverlayLayer(crate::inuse::OverlayLayer::Work),
            ),
        ];
        assert_eq!(got, want);
        // The bind source carries the inode of the mount point's root.
        assert_eq!(out[4].inode, out[3].inode);
        assert_eq!(out[4].mount_point.as_deref(), Some(Path::new("/mnt")));
        // Mount points are not followed; sources and layers are.
        assert_eq!(stats[0], ("/".to_owned(), false));
        assert_eq!(stats[1], ("/dev/vda".to_owned(), true));
    }
}
