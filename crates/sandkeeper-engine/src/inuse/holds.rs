//! Who holds what: a process's hold on an inode ([`Holder`], by
//! [`HoldKind`]), and a kernel object's use of a path ([`KernelUse`]:
//! mounts and their sources, overlay layers, loop devices, bound sockets).

use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::Escaped;

/// How a process holds an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum HoldKind {
    /// An open file descriptor, with its number.
    Fd(u32),
    /// The process's working directory.
    Cwd,
    /// The process's root directory (`chroot`).
    Root,
    /// The process's executable.
    Exe,
    /// A file mapped into the process's memory (`mmap`, shared libraries).
    Mmap,
    /// The working directory of one thread (with its thread id), where it
    /// differs from the process's.
    ThreadCwd(u32),
    /// The root directory of one thread (with its thread id), where it
    /// differs from the process's.
    ThreadRoot(u32),
    /// An open descriptor (thread id, descriptor number) in the private
    /// descriptor table of one thread (`unshare(CLONE_FILES)`).
    ThreadFd(u32, u32),
    /// An inotify or fanotify watch on the inode, through the given
    /// descriptor: a program waits for changes there.
    Watch(u32),
    /// A file registered with the io_uring of the given descriptor
    /// (`IORING_REGISTER_FILES`): the ring holds it open without a
    /// descriptor of its own.
    IoUringFile(u32),
}

impl fmt::Display for HoldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldKind::Fd(n) => write!(f, "fd {n}"),
            HoldKind::Cwd => f.write_str("cwd"),
            HoldKind::Root => f.write_str("root"),
            HoldKind::Exe => f.write_str("exe"),
            HoldKind::Mmap => f.write_str("mmap"),
            HoldKind::ThreadCwd(tid) => write!(f, "cwd of thread {tid}"),
            HoldKind::ThreadRoot(tid) => write!(f, "root of thread {tid}"),
            HoldKind::ThreadFd(tid, fd) => write!(f, "fd {fd} of thread {tid}"),
            HoldKind::Watch(fd) => write!(f, "watch (fd {fd})"),
            HoldKind::IoUringFile(fd) => write!(f, "io_uring registered file (fd {fd})"),
        }
    }
}

/// A process holding an inode.
///
/// Displays as `pid 1234 (sleep) fd 3`, with control characters in the
/// command name escaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The process id, as the procfs read shows it.
    pub pid: u32,
    /// The command name (`comm`, at most 15 bytes, lossy UTF-8), shared by
    /// all of the process's holds.
    pub comm: Arc<str>,
    /// How the process holds the inode.
    pub how: HoldKind,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} ({}) {}",
            self.pid,
            Escaped(self.comm.as_bytes()),
            self.how
        )
    }
}

/// Which overlay layer a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum OverlayLayer {
    /// A read-only lower layer (`lowerdir=`, `lowerdir+=`).
    Lower,
    /// A data-only lower layer (after `::` in `lowerdir=`, or `datadir+=`).
    Data,
    /// The writable upper layer (`upperdir=`).
    Upper,
    /// The overlay's work directory (`workdir=`).
    Work,
}

impl OverlayLayer {
    pub(super) fn option_name(self) -> &'static str {
        match self {
            OverlayLayer::Lower => "lowerdir",
            OverlayLayer::Data => "datadir",
            OverlayLayer::Upper => "upperdir",
            OverlayLayer::Work => "workdir",
        }
    }
}

/// What a kernel user does with its path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum KernelUseKind {
    /// A filesystem is mounted at the path.
    MountPoint,
    /// The path is the source a mount names (a device node or image file,
    /// as given to `mount`).
    MountSource,
    /// The path is the directory or file a bind mount shows elsewhere.
    BindSource,
    /// The path is the backing file of a loop device.
    LoopBackingFile {
        /// The loop device's name (`loop0`).
        device: String,
    },
    /// The path is a layer of an overlay mount.
    OverlayLayer(OverlayLayer),
    /// A unix socket is bound to the file (`bind`; a listening server's
    /// address). Matched by the file's device and inode, which
    /// `NETLINK_SOCK_DIAG` reports; the path is the text given to `bind`
    /// (possibly relative, or through another mount).
    UnixSocket {
        /// For a socket of another network namespace, a process that
        /// lives in (or holds) that namespace.
        network_namespace_of: Option<u32>,
    },
}

/// Which mount namespace a kernel use was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MountNamespace {
    /// The caller's own: paths are as the caller sees them.
    Own,
    /// The namespace of the given process: paths are relative to its root.
    Of {
        /// A process living in that namespace.
        pid: u32,
    },
    /// A namespace that no process lives in, kept alive by a descriptor
    /// or a bind mount of its `nsfs` file: paths are relative to its root.
    Held {
        /// The namespace's inode number (`mnt:[N]`).
        ns: u64,
    },
}

/// A kernel object that uses a path: a mount, a loop device, an overlay.
///
/// Displays as the holder's description, such as `kernel: loop0 backing
/// file` or `kernel: overlay upperdir of /merged`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelUse {
    /// What the kernel object does with the path.
    pub kind: KernelUseKind,
    /// The path, unescaped, as the kernel reports it (for another mount
    /// namespace: relative to that namespace's root). Without its
    /// `(deleted)` marker, see [`KernelUse::deleted`].
    pub path: PathBuf,
    /// `(device, inode)` of the path where it could be stat'ed: for a mount
    /// point or bind source the root of what is mounted, for a layer or
    /// backing file the directory or file itself.
    pub inode: Option<(u64, u64)>,
    /// The kernel says the path no longer exists (a deleted backing file,
    /// a bind mount of a deleted directory).
    pub deleted: bool,
    /// The mount the use belongs to, for mount points, sources and layers.
    pub mount_point: Option<PathBuf>,
    /// The filesystem type of that mount (`tmpfs`, `overlay`, …).
    pub fstype: Option<String>,
    /// Where the use was found.
    pub namespace: MountNamespace,
    /// The device of the mounted filesystem, for uses that come from a
    /// mount table (`mountinfo` field 3).
    pub(super) device: Option<u64>,
}

impl fmt::Display for KernelUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mount = self
            .mount_point
            .as_deref()
            .map(|p| Escaped(p.as_os_str().as_bytes()));
        let fstype = self.fstype.as_deref().unwrap_or("?");
        f.write_str("kernel: ")?;
        match (&self.kind, mount) {
            (KernelUseKind::MountPoint, Some(m)) => write!(f, "mount {fstype} at {m}")?,
            (KernelUseKind::MountPoint, None) => write!(f, "mount {fstype}")?,
            (KernelUseKind::MountSource, Some(m)) => write!(f, "mount source of {m} ({fstype})")?,
            (KernelUseKind::BindSource, Some(m)) => write!(f, "bind mount source of {m}")?,
            (KernelUseKind::MountSource | KernelUseKind::BindSource, None) => {
                f.write_str("mount source")?
            }
            (KernelUseKind::LoopBackingFile { device }, _) => {
                write!(f, "{} backing file", Escaped(device.as_bytes()))?
            }
            (KernelUseKind::OverlayLayer(layer), Some(m)) => {
                write!(f, "overlay {} of {m}", layer.option_name())?
            }
            (KernelUseKind::OverlayLayer(layer), None) => {
                write!(f, "overlay {}", layer.option_name())?
            }
            (
                KernelUseKind::UnixSocket {
                    network_namespace_of,
                },
                _,
            ) => {
                let path = Escaped(self.path.as_os_str().as_bytes());
                write!(f, "unix socket bound as {path}")?;
                if let Some(pid) = network_namespace_of {
                    write!(f, " in the network namespace of pid {pid}")?;
                }
            }
        }
        match self.namespace {
            MountNamespace::Own => {}
            MountNamespace::Of { pid } => write!(f, " (in the mount namespace of pid {pid})")?,
            MountNamespace::Held { ns } => write!(
                f,
                " (in mount namespace mnt:[{ns}], which no process lives in)"
            )?,
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

    #[test]
    fn display_escapes_hostile_names() {
        let cases: &[(&str, Holder, &str)] = &[
            (
                "plain",
                Holder {
                    pid: 7,
                    comm: Arc::from("sleep"),
                    how: HoldKind::Fd(3),
                },
                "pid 7 (sleep) fd 3",
            ),
            (
                "spaces and parens",
                Holder {
                    pid: 7,
                    comm: Arc::from("a) (b"),
                    how: HoldKind::Cwd,
                },
                "pid 7 (a) (b) cwd",
            ),
            (
                "control characters",
                Holder {
                    pid: 7,
                    comm: Arc::from("x\n\x1b[2J"),
                    how: HoldKind::ThreadCwd(9),
                },
                "pid 7 (x\\n\\u{1b}[2J) cwd of thread 9",
            ),
        ];
        for (name, holder, want) in cases {
            assert_eq!(holder.to_string(), *want, "{name}");
        }
        assert_eq!(Escaped(b"a\xffb").to_string(), "a\\xffb");
    }

    #[test]
    fn kernel_use_display() {
        let base = KernelUse {
            kind: KernelUseKind::MountPoint,
            path: PathBuf::from("/tmp/x/mnt"),
            inode: None,
            deleted: false,
            mount_point: Some(PathBuf::from("/tmp/x/mnt")),
            fstype: Some("tmpfs".into()),
            namespace: MountNamespace::Own,
            device: None,
        };
        let with = |kind, mount: Option<&str>, ns| KernelUse {
            kind,
            mount_point: mount.map(PathBuf::from),
            namespace: ns,
            ..base.clone()
        };
        let cases: &[(&str, KernelUse, &str)] = &[
            (
                "mount point",
                base.clone(),
                "kernel: mount tmpfs at /tmp/x/mnt",
            ),
            (
                "bind source",
                with(KernelUseKind::BindSource, Some("/mnt"), MountNamespace::Own),
                "kernel: bind mount source of /mnt",
            ),
            (
                "loop",
                with(
                    KernelUseKind::LoopBackingFile {
                        device: "loop0".into(),
                    },
                    None,
                    MountNamespace::Own,
                ),
                "kernel: loop0 backing file",
            ),
            (
                "overlay in another namespace",
                with(
                    KernelUseKind::OverlayLayer(OverlayLayer::Lower),
                    Some("/merged"),
                    MountNamespace::Of { pid: 12 },
                ),
                "kernel: overlay lowerdir of /merged (in the mount namespace of pid 12)",
            ),
        ];
        for (name, use_, want) in cases {
            assert_eq!(use_.to_string(), *want, "{name}");
        }
    }

    #[test]
    fn kernel_user_displays_of_sockets_and_held_namespaces() {
        let socket = |of| KernelUse {
            kind: KernelUseKind::UnixSocket {
                network_namespace_of: of,
            },
            path: PathBuf::from("rel/s\x1b[2J"),
            inode: Some((1, 2)),
            deleted: false,
            mount_point: None,
            fstype: None,
            namespace: MountNamespace::Own,
            device: None,
        };
        assert_eq!(
            socket(None).to_string(),
            "kernel: unix socket bound as rel/s\\u{1b}[2J"
        );
        assert_eq!(
            socket(Some(9)).to_string(),
            "kernel: unix socket bound as rel/s\\u{1b}[2J in the network namespace of pid 9"
        );
        let held = KernelUse {
            kind: KernelUseKind::MountPoint,
            path: PathBuf::from("/tmp/x/mnt"),
            inode: None,
            deleted: false,
            mount_point: Some(PathBuf::from("/tmp/x/mnt")),
            fstype: Some("tmpfs".into()),
            namespace: MountNamespace::Held { ns: 4026532300 },
            device: None,
        };
        assert_eq!(
            held.to_string(),
            "kernel: mount tmpfs at /tmp/x/mnt (in mount namespace mnt:[4026532300], which no process lives in)"
        );
    }
}
