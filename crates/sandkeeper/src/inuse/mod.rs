//! Which processes — and which kernel objects — hold what: one pass over
//! `/proc` that builds an index the directory walker queries for every
//! inode it visits.
//!
//! [`InUse::collect`] gathers, in one pass:
//!
//! - **processes**: for every `/proc/[0-9]*`, every open descriptor
//!   (`/proc/PID/fd/*`, and those of threads with a table of their own),
//!   the working directory, root directory and executable, every file
//!   mapping (`/proc/PID/maps`), every inode an inotify or fanotify
//!   descriptor watches and every file registered with an io_uring
//!   (`/proc/PID/fdinfo/N`), each as a `(device, inode)` pair. Links are `stat`ed *through* the magic link, so
//!   a process that reached the file through another mount namespace, a bind
//!   mount or a since-renamed parent is still found. Targets are never
//!   opened (no FIFO, device or socket is ever touched); look them up with
//!   [`InUse::holders`].
//! - **bound unix sockets**: the paths in `/proc/net/unix` (a listening
//!   socket's descriptor does not name its path); see
//!   [`InUse::socket_paths_under`].
//! - **kernel users**: mount points, mount and bind-mount sources, overlay
//!   layers (`lowerdir`, `upperdir`, `workdir`, …) from `mountinfo`, and
//!   loop device backing files from `/sys/block/loop*/loop/backing_file`;
//!   see [`InUse::kernel_users_under`] (by path) and
//!   [`InUse::kernel_users_of`] (by inode).
//!
//! The index only answers questions; deciding what an entry's state is
//! belongs to the scan.
//!
//! ```no_run
//! use sandkeeper::inuse::{InUse, InUseOptions};
//! use std::os::unix::fs::MetadataExt;
//!
//! let index = InUse::collect(&InUseOptions::new())?;
//! let meta = std::fs::symlink_metadata("/tmp/app-1234/log.txt")?;
//! for holder in index.holders(meta.dev(), meta.ino()) {
//!     println!("{holder}"); // pid 1234 (cargo) fd 7
//! }
//! for user in index.kernel_users_under("/tmp/app-1234".as_ref()) {
//!     println!("{} {user}", user.path.display()); // … kernel: mount tmpfs at …
//! }
//! if !index.is_complete() {
//!     for p in index.uninspectable() {
//!         println!("could not inspect {p}");
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Fail closed
//!
//! A process whose `/proc` entries cannot be read (`EACCES`/`EPERM`: not
//! root, `/proc` mounted with `hidepid`, a process a security module hides
//! even from root) is listed in [`InUse::uninspectable`], and the index is
//! then not [complete](InUse::is_complete): the scan must treat every entry
//! as possibly in use. The same holds for [blind spots](InUse::blind_spots)
//! that affect all processes: processes the procfs does not list at all
//! (the caller runs in a child pid namespace, so the host's processes are
//! never listed; a procfs of another pid namespace; `hidepid=invisible`
//! without the exempt group; `hidepid=ptraceable`; procfs options that
//! cannot be read), an unreadable `/proc/net/unix` or `/sys/block`. Which
//! processes are listed is decided from what can be proven, never from a
//! path or one spelling of a mount option:
//!
//! - the caller's pid namespace is the initial one when `/proc/self/ns/pid`
//!   is on nsfs with the initial namespace's fixed inode number
//!   (`PROC_PID_INIT_INO`); `NSpid:` cannot tell, as a container's own
//!   `/proc` lists one level;
//! - the procfs read is of that namespace when it lists the caller under
//!   its own pid; or, whatever the caller's namespace, the procfs is the
//!   initial namespace's when it lists a process (pid 1 or 2) whose
//!   `ns/pid` is the initial one (a container given the host's `/proc`);
//! - its `hidepid=` and `gid=` are read from the `mountinfo` line whose
//!   mount id is that of the opened procfs (`statx` `STATX_MNT_ID`), in
//!   both spellings (`2`/`invisible`, `4`/`ptraceable`); `gid=` is absent
//!   when it is 0, which exempts root by default; it is compared with the
//!   caller's groups only when both are numbers of the initial user
//!   namespace. `hidepid=ptraceable` exempts no group, and what even root
//!   may not ptrace cannot be counted, so it is always a blind spot.
//!
//! An operator may vouch for named pids ([`InUseOptions::ignore_pid`]):
//! those move to [`InUse::assumed`], so the output can say what was
//! assumed rather than known. One who knows that no process outside the
//! pid namespace can reach the roots (a container that owns its temp
//! directory, a test in its own namespace) may trust it
//! ([`InUseOptions::trust_pid_namespace`],
//! `SANDKEEPER_TRUST_PID_NAMESPACE=1`): the pid-namespace blind spots move
//! to [`InUse::assumed_blind_spots`].
//!
//! Processes that exit during the scan (`ENOENT`/`ESRCH`) are skipped, as
//! are descriptors closed during the scan: what is gone holds nothing.
//!
//! # The scanning process itself
//!
//! By default the calling process is left out ([`InUseOptions::include_self`]):
//! a scanner holds descriptors of its own inside the entries it examines —
//! above all the exclusive lease claim ([`crate::lease::Claim`]), an open,
//! locked directory descriptor — and those would make every claimed entry
//! look in use. The caller knows what it holds itself. Other processes
//! (children included) are always reported.
//!
//! # Threads
//!
//! Threads share their process's descriptor table and memory, so
//! `/proc/PID/fd` and `/proc/PID/maps` are read once per process. A thread
//! can however have its own working and root directory
//! (`unshare(CLONE_FS)`): for processes with more than one thread, each
//! thread's `cwd` and `root` are stat'ed too and reported as
//! [`HoldKind::ThreadCwd`]/[`HoldKind::ThreadRoot`] when they differ from the
//! process's. A thread can also have a private descriptor table
//! (`unshare(CLONE_FILES)`), which `/proc/PID/fd` does not show: each other
//! thread is compared with the process by `kcmp(KCMP_FILES)` (one system
//! call per thread), and only a table that differs — from the process's
//! and from those already read — is read, as
//! [`HoldKind::ThreadFd`] (descriptors it shares with the process's table
//! are left out). Where `kcmp` cannot tell (a kernel without
//! `CONFIG_KCMP`, a procfs of another pid namespace), every thread's table
//! is read. When a process's main thread has exited but other threads run
//! on (a zombie leader), a live thread is inspected in its place.
//!
//! # Watches and io_uring
//!
//! A descriptor on an anonymous inode is looked at more closely when its
//! link names inotify, fanotify or io_uring:
//!
//! - inotify watches and fanotify inode marks are a use of the watched
//!   inode ([`HoldKind::Watch`]): a program waits for files there. Their
//!   `ino:`/`sdev:` in `fdinfo` give the inode; fanotify marks on a whole
//!   mount or filesystem name no entry and are left out.
//! - files registered with an io_uring stay open with no descriptor of
//!   their own ([`HoldKind::IoUringFile`]). `fdinfo` names them by path
//!   only, so each path is resolved from the caller's root without
//!   following any link (`openat2` `RESOLVE_NO_SYMLINKS`, `O_PATH`) and
//!   matched by inode; the listing must be the same after. What cannot be
//!   resolved so, or a ring whose files the kernel counted but did not list,
//!   makes the process uninspectable (step [`InspectStep::FdInfo`]).
//!
//! # Namespaces
//!
//! - Processes in every pid namespace visible in the `/proc` used are
//!   inspected; pids are as that `/proc` shows them.
//! - Mounts are read from `/proc/self/mountinfo` (the caller's mount
//!   namespace) and, for every other mount namespace a process lives in,
//!   from that process's `mountinfo`. Paths from another namespace are
//!   relative to that process's root: their inodes are found by `stat`
//!   through `/proc/PID/root`, and their paths are still matched by
//!   [`InUse::kernel_users_under`] as if they were ours (a coincidental
//!   match only makes an entry look in use).
//! - `/proc/net/unix` lists the sockets of the *reader's* network namespace
//!   only; sockets bound in other network namespaces are not seen. Their
//!   socket files are still visible to the walker as socket inodes.
//!
//! # Performance
//!
//! About 20 system calls per process plus one `statx` per descriptor, all
//! relative to open `/proc` directories, with reused buffers and no
//! allocation per descriptor; then a hash map keyed by `(device, inode)`
//! with a cheap hash for the walker's lookups. Nearly all the time is
//! kernel work (resolving links, formatting `maps`): on a small VM about
//! 0.1 ms per process, so tens of milliseconds for a few hundred
//! processes, where `lsof +D` spends seconds on a large tree because it
//! stats every file of the tree for every query.
//! [`InUseOptions::threads`] spreads processes over threads.
//!
//! `statx` is called with `AT_STATX_DONT_SYNC`, so network and FUSE
//! filesystems answer from their caches instead of asking a server that
//! may hang, and with `AT_NO_AUTOMOUNT`, so automount points are not
//! triggered. A path lookup *through* a hung network or FUSE mount (a mount
//! point below one) can still block, as it would for `lsof`.
//!
//! # Platform behavior
//!
//! Linux only. Elsewhere [`InUse::collect`] returns
//! [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
//!
//! # Limitations
//!
//! - What the kernel does not expose cannot be seen: a descriptor in flight
//!   over `SCM_RIGHTS` (sent on a unix socket, not yet received, the
//!   sender's copy closed) is held by the socket's queue only, and no
//!   `/proc` file names it; an entry held only that way is `idle`. Likewise
//!   a file held only by an in-flight io_uring request, or by a kernel
//!   object that is not a mount, loop device, descriptor or mapping.
//! - Watches are matched by the filesystem's device number (`sdev`), which
//!   differs from what `stat` reports on btrfs subvolumes: a watch there is
//!   not matched.
//! - Only *absolute* socket and overlay layer paths can be matched by path;
//!   relative ones (resolved against the binder's or mounter's working
//!   directory at the time) are kept in [`InUse::socket_paths`] and
//!   [`InUse::kernel_users`] but match no entry. Paths are as they were when
//!   the socket was bound or the overlay mounted; the kernel does not follow
//!   later renames. Layers and loop backing files are also matched by inode
//!   where they could be stat'ed.
//! - A mount point in *another* mount namespace is matched by its path and
//!   by the inode of what is mounted on it, not by the inode of the
//!   directory it covers.
//! - Device numbers in `/proc/PID/maps` are the ones the kernel reports for
//!   the mapping; for files on overlayfs that is the underlying layer's file.

#[cfg(target_os = "linux")]
mod deadline;
#[cfg(target_os = "linux")]
mod fdinfo;
mod mounts;
#[cfg(target_os = "linux")]
mod namespaces;
#[cfg(target_os = "linux")]
mod procs;
mod sockets;
mod visibility;

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;

/// What to collect and what to assume; see [`InUse::collect`].
///
/// ```
/// use sandkeeper::inuse::InUseOptions;
///
/// let mut options = InUseOptions::new();
/// options.ignore_pid(1).include_self(false);
/// ```
#[derive(Debug, Clone)]
pub struct InUseOptions {
    ignore_pids: BTreeSet<u32>,
    include_self: bool,
    proc_root: PathBuf,
    threads: usize,
    trust_pid_namespace: Option<bool>,
}

/// The environment variable that trusts the pid namespace when
/// [`InUseOptions::trust_pid_namespace`] was not called: `1` trusts it;
/// unset does not; any other value is an error.
pub const TRUST_PID_NAMESPACE_ENV: &str = "SANDKEEPER_TRUST_PID_NAMESPACE";

/// The value of [`TRUST_PID_NAMESPACE_ENV`]: `Ok(false)` when unset.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for any
/// value but `1`, naming the variable and the valid values.
pub fn trust_pid_namespace_from_env() -> Result<bool> {
    match std::env::var_os(TRUST_PID_NAMESPACE_ENV) {
        None => Ok(false),
        Some(v) if v == "1" => Ok(true),
        Some(v) => Err(crate::error::Error::new(
            crate::ErrorKind::InvalidInput,
            format!(
                "{TRUST_PID_NAMESPACE_ENV}={:?} is not valid: set it to 1 to trust that \
                 every process that can reach the roots is in this pid namespace, or unset it",
                v.to_string_lossy()
            ),
        )),
    }
}

impl Default for InUseOptions {
    fn default() -> Self {
        InUseOptions::new()
    }
}

impl InUseOptions {
    /// The defaults: vouch for no process, leave out the calling process,
    /// read `/proc`.
    pub fn new() -> InUseOptions {
        InUseOptions {
            ignore_pids: BTreeSet::new(),
            include_self: false,
            proc_root: PathBuf::from("/proc"),
            threads: 1,
            trust_pid_namespace: None,
        }
    }

    /// Trusts that every process that can reach the roots is in the pid
    /// namespace the procfs shows. Default: `false`, unless
    /// `SANDKEEPER_TRUST_PID_NAMESPACE=1` ([`TRUST_PID_NAMESPACE_ENV`]) is
    /// set; calling this overrides the variable.
    ///
    /// Without it, running in a child pid namespace (a container that
    /// shares its temp directory with the host) or reading a procfs that
    /// does not list the calling process is a [blind spot](InUse::blind_spots):
    /// processes outside cannot be seen, so nothing is known to be unused.
    /// With it, those blind spots are [assumed](InUse::assumed_blind_spots)
    /// away instead, and the output should say so. Other blind spots
    /// (`hidepid`, unreadable tables) are not affected.
    pub fn trust_pid_namespace(&mut self, yes: bool) -> &mut Self {
        self.trust_pid_namespace = Some(yes);
        self
    }

    /// Vouches for `pid`: should it be uninspectable, it is assumed to hold
    /// nothing and listed in [`InUse::assumed`] instead of
    /// [`InUse::uninspectable`]. Default: no pid.
    ///
    /// A vouch only covers what cannot be seen: whatever can be read of the
    /// process is still reported. A pid that does not exist is ignored.
    pub fn ignore_pid(&mut self, pid: u32) -> &mut Self {
        self.ignore_pids.insert(pid);
        self
    }

    /// Vouches for every pid in `pids`, as [`InUseOptions::ignore_pid`].
    pub fn ignore_pids(&mut self, pids: impl IntoIterator<Item = u32>) -> &mut Self {
        self.ignore_pids.extend(pids);
        self
    }

    /// Whether the calling process is inspected like any other. Default:
    /// `false`, because a scanner's own descriptors (the lease claim it
    /// holds on an entry, the directories it walks) would make entries look
    /// in use. Its threads go with it; its children are always inspected.
    pub fn include_self(&mut self, yes: bool) -> &mut Self {
        self.include_self = yes;
        self
    }

    /// The procfs to read. Default: `/proc`.
    ///
    /// Pass another mount of procfs, such as one without `hidepid` or one
    /// of another pid namespace; pids are then as that procfs shows them,
    /// and "self" is the calling process as seen there.
    pub fn proc_root(&mut self, root: impl Into<PathBuf>) -> &mut Self {
        self.proc_root = root.into();
        self
    }

    /// How many threads inspect processes. Default: `1`, the calling
    /// thread only; `0` means the available parallelism, at most 4. Fewer
    /// are used when there are few processes (one per 32), and a thread
    /// that cannot be started leaves its share to the others.
    ///
    /// Inspecting a process is kernel work (resolving descriptor links,
    /// formatting `/proc/PID/maps`) that is independent per process, so it
    /// can spread over cores; the results are the same either way.
    pub fn threads(&mut self, n: usize) -> &mut Self {
        self.threads = n;
        self
    }

    /// Collects the index with these options; see [`InUse::collect`].
    ///
    /// # Errors
    ///
    /// As [`InUse::collect`].
    pub fn collect(&self) -> Result<InUse> {
        InUse::collect(self)
    }
}

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
    fn option_name(self) -> &'static str {
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
    device: Option<u64>,
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

/// What could not be read of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InspectStep {
    /// Its `/proc/PID` directory.
    Process,
    /// Its `/proc/PID/stat`.
    Status,
    /// Its descriptor table (`/proc/PID/fd`).
    FdTable,
    /// One descriptor link (`/proc/PID/fd/N`).
    Fd(u32),
    /// Its working directory link.
    Cwd,
    /// Its root directory link.
    Root,
    /// Its executable link.
    Exe,
    /// Its memory map (`/proc/PID/maps`).
    Maps,
    /// Its threads (`/proc/PID/task`).
    Threads,
    /// Its mount namespace (`/proc/PID/ns/mnt`, `/proc/PID/mountinfo`).
    Mounts,
    /// The descriptor table of one thread that has its own (with its
    /// thread id), after `unshare(CLONE_FILES)`.
    ThreadFdTable(u32),
    /// What one descriptor watches or has registered, from
    /// `/proc/PID/fdinfo/N`: an inotify or fanotify descriptor's watches,
    /// an io_uring's registered files.
    FdInfo(u32),
}

impl fmt::Display for InspectStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InspectStep::Process => f.write_str("its /proc directory"),
            InspectStep::Status => f.write_str("its status"),
            InspectStep::FdTable => f.write_str("its descriptor table"),
            InspectStep::Fd(n) => write!(f, "its fd {n}"),
            InspectStep::Cwd => f.write_str("its working directory"),
            InspectStep::Root => f.write_str("its root directory"),
            InspectStep::Exe => f.write_str("its executable"),
            InspectStep::Maps => f.write_str("its memory map"),
            InspectStep::Threads => f.write_str("its threads"),
            InspectStep::Mounts => f.write_str("its mount namespace"),
            InspectStep::ThreadFdTable(tid) => {
                write!(f, "the descriptor table of its thread {tid}")
            }
            InspectStep::FdInfo(n) => write!(f, "what its fd {n} watches or registered"),
        }
    }
}

/// A process whose holds could not be (fully) read.
///
/// Displays as `pid 1 (init): cannot inspect its fd 3: Permission denied
/// (os error 13)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uninspectable {
    /// The process id.
    pub pid: u32,
    /// Its command name, if that could be read.
    pub comm: Option<String>,
    /// The first thing that could not be read.
    pub step: InspectStep,
    errno: i32,
}

impl Uninspectable {
    /// Why it could not be read (usually `PermissionDenied`).
    pub fn error(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno)
    }
}

impl fmt::Display for Uninspectable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if let Some(comm) = &self.comm {
            write!(f, " ({})", Escaped(comm.as_bytes()))?;
        }
        write!(f, ": cannot inspect {}: {}", self.step, self.error())
    }
}

/// Something that hides holders of *every* process from the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BlindSpotKind {
    /// procfs is mounted with `hidepid=invisible` (`2`) and the caller is
    /// not in its exempt group (`gid=`, 0 by default): processes it may not
    /// inspect are not even listed, so they cannot be named.
    HiddenProcesses,
    /// procfs is mounted with `hidepid=ptraceable` (`4`, systemd's
    /// `ProtectProc=ptraceable`): processes the caller may not ptrace —
    /// even root may not ptrace some — are not listed, and no group is
    /// exempt.
    HiddenUnptraceable,
    /// The options of the procfs's mount could not be read or are not
    /// understood, so it may hide processes.
    ProcfsOptions,
    /// The caller runs in a child pid namespace (a container): processes
    /// outside it — the host's, other containers' — are never listed,
    /// though they may share the roots. Trusting the pid namespace
    /// ([`InUseOptions::trust_pid_namespace`]) assumes this away.
    PidNamespace,
    /// The procfs read does not list the caller: it belongs to another pid
    /// namespace, and processes outside that one are not listed. Trusting
    /// the pid namespace assumes this away.
    ForeignProcfs,
    /// The bound unix sockets of the caller's network namespace could not
    /// be listed (`NETLINK_SOCK_DIAG`).
    Sockets,
    /// The bound unix sockets of another network namespace, one that the
    /// process `pid` lives in or holds (or one bound to a path), could not
    /// be listed: it could not be entered (not root).
    SocketsOf {
        /// A process in (or holding) that network namespace; `None` for a
        /// namespace kept by a bind mount of its `nsfs` file.
        pid: Option<u32>,
    },
    /// `/sys/block` could not be read: loop devices are unknown.
    LoopDevices,
    /// The backing file of one bound loop device (`loopN`, by number)
    /// could not be identified: `/dev/loopN` could not be queried with
    /// `LOOP_GET_STATUS64` (not root, no such node, or not that device).
    LoopDevice {
        /// The `N` of `loopN`.
        number: u32,
    },
    /// A mount namespace that no process lives in, kept alive by a
    /// descriptor that process `pid` holds or by a bind mount of its
    /// `nsfs` file, could not be entered or read: its mounts are unknown.
    MountNamespace {
        /// The process holding it, if it is held by a descriptor.
        pid: Option<u32>,
        /// The namespace's inode number (`mnt:[N]`).
        ns: u64,
    },
    /// An overlay names a layer by a relative path (relative to the
    /// mounter's working directory at the time, which is not recorded):
    /// that layer could be anywhere.
    RelativeOverlayLayer,
    /// An overlay names a layer by a path that does not resolve (any
    /// more): the layer was moved or deleted since the mount, and could be
    /// anywhere.
    UnresolvedOverlayLayer,
    /// Process `pid` works in an overlay that no mount table lists (it was
    /// lazily unmounted): its layers are unknown.
    DetachedOverlay {
        /// A process using the overlay.
        pid: u32,
    },
    /// Process `pid` uses a filesystem that no mount table lists and that
    /// could not be identified in time (`statfs` did not answer).
    UnlistedFilesystem {
        /// A process using the filesystem.
        pid: u32,
    },
    /// A path from a mount table (a mount's source, which its mounter
    /// chose) could not be looked up in time: a filesystem on the way
    /// does not answer. What it names could be inside any entry.
    UnansweredLookup,
}

/// A [`BlindSpotKind`] with the error that caused it, if any.
///
/// Displays as what is not visible, why, and what to do; the alternate
/// form (`{:#}`) leaves out what to do, for blind spots that were assumed
/// away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlindSpot {
    /// What is unknown.
    pub kind: BlindSpotKind,
    errno: Option<i32>,
    /// What it concerns, for the message (a mount point, a layer).
    detail: Option<Box<[u8]>>,
}

impl BlindSpot {
    /// The error that caused it, if it came from a failed read.
    pub fn error(&self) -> Option<io::Error> {
        self.errno.map(io::Error::from_raw_os_error)
    }

    /// Whether it is about the pid namespace boundary, which
    /// [`InUseOptions::trust_pid_namespace`] may assume away.
    pub fn is_pid_namespace(&self) -> bool {
        matches!(
            self.kind,
            BlindSpotKind::PidNamespace | BlindSpotKind::ForeignProcfs
        )
    }
}

impl fmt::Display for BlindSpot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let detail = Escaped(self.detail.as_deref().unwrap_or(b"?"));
        match self.kind {
            BlindSpotKind::HiddenProcesses => f.write_str(
                "procfs is mounted with hidepid=invisible: processes that may not be inspected are not listed",
            )?,
            BlindSpotKind::Sockets => {
                f.write_str("bound unix sockets are unknown (cannot list them with sock_diag)")?
            }
            BlindSpotKind::HiddenUnptraceable => f.write_str(
                "procfs is mounted with hidepid=ptraceable: processes that may not be ptraced (even by root) are not listed",
            )?,
            BlindSpotKind::ProcfsOptions => {
                f.write_str("cannot tell whether procfs hides processes (hidepid)")?
            }
            BlindSpotKind::PidNamespace => f.write_str(
                "this process runs in a child pid namespace: processes outside it (the host's, other containers') are not visible",
            )?,
            BlindSpotKind::ForeignProcfs => f.write_str(
                "the procfs read does not list this process: it belongs to another pid namespace, whose outside is not visible",
            )?,
            BlindSpotKind::SocketsOf { pid: Some(pid) } => write!(
                f,
                "bound unix sockets of the network namespace of pid {pid} are unknown (cannot enter it)"
            )?,
            BlindSpotKind::SocketsOf { pid: None } => write!(
                f,
                "bound unix sockets of the network namespace bound at {detail} are unknown (cannot enter it)"
            )?,
            BlindSpotKind::LoopDevices => {
                f.write_str("loop devices are unknown (cannot read /sys/block)")?
            }
            BlindSpotKind::LoopDevice { number } => write!(
                f,
                "the backing file of loop device loop{number} is unknown (cannot query /dev/loop{number})"
            )?,
            BlindSpotKind::MountNamespace { pid, ns } => {
                write!(f, "mounts of mount namespace mnt:[{ns}], which no process lives in")?;
                match pid {
                    Some(pid) => write!(f, " (held open by pid {pid})")?,
                    None => write!(f, " (bound at {detail})")?,
                }
                f.write_str(", are unknown (cannot enter it)")?
            }
            BlindSpotKind::RelativeOverlayLayer => write!(
                f,
                "an overlay names a layer by a relative path ({detail}), which cannot be resolved: the layer could be inside any entry"
            )?,
            BlindSpotKind::UnresolvedOverlayLayer => write!(
                f,
                "an overlay names a layer that is not found at its path ({detail}; moved or deleted since): the layer could be inside any entry"
            )?,
            BlindSpotKind::DetachedOverlay { pid } => write!(
                f,
                "pid {pid} works in an overlay that no mount table lists (lazily unmounted): its layers could be inside any entry"
            )?,
            BlindSpotKind::UnlistedFilesystem { pid } => write!(
                f,
                "pid {pid} uses a filesystem that no mount table lists and that did not answer statfs in time: what it uses is unknown"
            )?,
            BlindSpotKind::UnansweredLookup => write!(
                f,
                "looking up {detail} (a mount's source) did not finish in time: a filesystem on the way does not answer, so what it names could be inside any entry"
            )?,
        }
        let visibility = matches!(
            self.kind,
            BlindSpotKind::HiddenProcesses
                | BlindSpotKind::HiddenUnptraceable
                | BlindSpotKind::ProcfsOptions
                | BlindSpotKind::PidNamespace
                | BlindSpotKind::ForeignProcfs
        );
        if let (true, Some(why)) = (visibility, &self.detail) {
            write!(f, " ({})", Escaped(why))?;
        }
        if let Some(e) = self.error() {
            write!(f, ": {e}")?;
        }
        if f.alternate() {
            return Ok(());
        }
        match self.kind {
            BlindSpotKind::HiddenProcesses
            | BlindSpotKind::HiddenUnptraceable
            | BlindSpotKind::ProcfsOptions => f.write_str(
                "; run where procfs is mounted without hidepid (systemd: ProtectProc=default), or give a procfs mounted without it",
            ),
            BlindSpotKind::PidNamespace | BlindSpotKind::ForeignProcfs => f.write_str(
                "; run in the host's pid namespace with its /proc, or, if no process outside can reach the roots, trust it (--trust-pid-namespace, SANDKEEPER_TRUST_PID_NAMESPACE=1)",
            ),
            BlindSpotKind::Sockets
            | BlindSpotKind::SocketsOf { .. }
            | BlindSpotKind::LoopDevices
            | BlindSpotKind::LoopDevice { .. }
            | BlindSpotKind::MountNamespace { .. }
            | BlindSpotKind::RelativeOverlayLayer
            | BlindSpotKind::UnresolvedOverlayLayer
            | BlindSpotKind::DetachedOverlay { .. }
            | BlindSpotKind::UnlistedFilesystem { .. }
            | BlindSpotKind::UnansweredLookup => Ok(()),
        }
    }
}

/// The index: who holds which inode, which paths the kernel uses, which
/// socket paths are bound, and what could not be inspected.
///
/// Built once per scan by [`InUse::collect`]; queries are cheap and never
/// touch the system. It is a snapshot: a process that opens a file after
/// the collection is not in it (the reaper re-collects before removing).
#[derive(Debug, Clone)]
pub struct InUse {
    holders: Vec<Holder>,
    index: HashMap<(u64, u64), (u32, u32), BuildHasherDefault<InodeHasher>>,
    kernel: Vec<KernelUse>,
    kernel_inodes: Vec<((u64, u64), u32)>,
    kernel_paths: Vec<(Vec<u8>, u32)>,
    sockets: Vec<PathBuf>,
    socket_keys: Vec<(Vec<u8>, u32)>,
    uninspectable: Vec<Uninspectable>,
    assumed: Vec<Uninspectable>,
    blind_spots: Vec<BlindSpot>,
    assumed_blind_spots: Vec<BlindSpot>,
    processes: usize,
}

impl InUse {
    /// Scans `/proc` (and `mountinfo`, `/proc/net/unix`, `/sys/block`) once.
    ///
    /// Per-process failures do not fail the collection: they make the index
    /// incomplete ([`InUse::uninspectable`]).
    ///
    /// # Errors
    ///
    /// Only when procfs itself is unusable: the proc root cannot be opened
    /// or listed, is not a procfs, or the caller's own `mountinfo` cannot be
    /// read; and [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// when [`InUseOptions::trust_pid_namespace`] was not called and
    /// `SANDKEEPER_TRUST_PID_NAMESPACE` has a value other than `1`.
    ///
    /// # Platform behavior
    ///
    /// Linux only; elsewhere [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    pub fn collect(opts: &InUseOptions) -> Result<InUse> {
        #[cfg(target_os = "linux")]
        {
            let threads = match opts.threads {
                0 => procs::auto_threads(),
                n => n,
            };
            let trust = match opts.trust_pid_namespace {
                Some(yes) => yes,
                None => trust_pid_namespace_from_env()?,
            };
            let mut found = procs::collect(&opts.proc_root, opts.include_self, threads)?;
            namespaces::collect(&opts.proc_root, &mut found);
            // Trusting the pid namespace turns its blind spots into
            // assumptions, which the output reports.
            let (assumed, blind): (Vec<_>, Vec<_>) = std::mem::take(&mut found.blind_spots)
                .into_iter()
                .partition(|b| trust && b.is_pid_namespace());
            found.blind_spots = blind;
            let mut index = InUse::from_found(found, &opts.ignore_pids);
            index.assumed_blind_spots = assumed;
            Ok(index)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err(crate::error::Error::new(
                crate::ErrorKind::Unsupported,
                "finding what processes hold needs Linux /proc",
            )
            .at(&opts.proc_root))
        }
    }

    /// The processes holding the inode `(dev, ino)`: by descriptor,
    /// working or root directory, executable or mapping. Empty if none.
    ///
    /// A process appears once per way it holds the inode (once per
    /// descriptor; mappings once in all), ordered by pid, then as found.
    /// A hash lookup.
    pub fn holders(&self, dev: u64, ino: u64) -> &[Holder] {
        match self.index.get(&(dev, ino)) {
            Some(&(start, len)) => &self.holders[start as usize..(start + len) as usize],
            None => &[],
        }
    }

    /// The kernel users whose path resolved to the inode `(dev, ino)` when
    /// collected: a mount point or bind mount source (the root of what is
    /// mounted), an overlay layer, a loop backing file.
    ///
    /// A bound unix socket is matched by the low 32 bits of the inode
    /// number, all that the kernel reports for it: on a filesystem with
    /// larger inode numbers another file may match too (which can only
    /// make an entry look in use).
    pub fn kernel_users_of(&self, dev: u64, ino: u64) -> impl Iterator<Item = &KernelUse> + '_ {
        let exact = self.kernel_inodes_at((dev, ino));
        // Only the sockets among the uses of the truncated number.
        let truncated = if ino > u64::from(u32::MAX) {
            self.kernel_inodes_at((dev, ino & u64::from(u32::MAX)))
        } else {
            &[]
        };
        exact.iter().map(|&(_, i)| &self.kernel[i as usize]).chain(
            truncated
                .iter()
                .map(|&(_, i)| &self.kernel[i as usize])
                .filter(|k| matches!(k.kind, KernelUseKind::UnixSocket { .. })),
        )
    }

    /// The entries of `kernel_inodes` for `key`.
    fn kernel_inodes_at(&self, key: (u64, u64)) -> &[((u64, u64), u32)] {
        let start = self.kernel_inodes.partition_point(|(k, _)| *k < key);
        let len = self.kernel_inodes[start..]
            .iter()
            .take_while(|(k, _)| *k == key)
            .count();
        &self.kernel_inodes[start..start + len]
    }

    /// Whether any process or kernel user holds the inode `(dev, ino)`.
    pub fn is_held(&self, dev: u64, ino: u64) -> bool {
        !self.holders(dev, ino).is_empty() || self.kernel_users_of(dev, ino).next().is_some()
    }

    /// The kernel users whose path is `entry` or lies under it, by path
    /// components (`/tmp/a` does not contain `/tmp/ab`), in path order.
    ///
    /// Paths are compared after collapsing `//` and `.` and resolving `..`
    /// lexically; a relative `entry` is made absolute against the current
    /// directory. Relative kernel paths never match.
    pub fn kernel_users_under(&self, entry: &Path) -> Vec<&KernelUse> {
        under(&self.kernel_paths, entry)
            .into_iter()
            .map(|i| &self.kernel[i as usize])
            .collect()
    }

    /// Every kernel user found, in path order.
    pub fn kernel_users(&self) -> &[KernelUse] {
        &self.kernel
    }

    /// The bound unix socket paths that are `entry` or lie under it
    /// (compared as for [`InUse::kernel_users_under`]), in path order.
    pub fn socket_paths_under(&self, entry: &Path) -> Vec<&Path> {
        under(&self.socket_keys, entry)
            .into_iter()
            .map(|i| self.sockets[i as usize].as_path())
            .collect()
    }

    /// Every bound pathname socket in the reader's network namespace,
    /// relative ones included; abstract sockets are left out.
    pub fn socket_paths(&self) -> &[PathBuf] {
        &self.sockets
    }

    /// The processes that could not be (fully) inspected and were not
    /// vouched for, by pid.
    pub fn uninspectable(&self) -> &[Uninspectable] {
        &self.uninspectable
    }

    /// The uninspectable processes that were vouched for
    /// ([`InUseOptions::ignore_pid`]) and are assumed to hold nothing.
    pub fn assumed(&self) -> &[Uninspectable] {
        &self.assumed
    }

    /// What hides the holders of every process; see [`BlindSpotKind`].
    pub fn blind_spots(&self) -> &[BlindSpot] {
        &self.blind_spots
    }

    /// The blind spots that were assumed away because the pid namespace
    /// was trusted ([`InUseOptions::trust_pid_namespace`]): what is not
    /// seen, and assumed to use nothing.
    pub fn assumed_blind_spots(&self) -> &[BlindSpot] {
        &self.assumed_blind_spots
    }

    /// Whether every process could be inspected (or was vouched for) and
    /// nothing was hidden: only then does "no holder" mean "not in use".
    pub fn is_complete(&self) -> bool {
        self.uninspectable.is_empty() && self.blind_spots.is_empty()
    }

    /// How many processes were looked at (the caller and processes that
    /// exited during the scan not counted).
    pub fn process_count(&self) -> usize {
        self.processes
    }

    /// Builds the index from the raw findings.
    fn from_found(found: Found, ignore_pids: &BTreeSet<u32>) -> InUse {
        let Found {
            mut holds,
            mut kernel,
            sockets,
            uninspectable: failed,
            blind_spots,
            processes,
        } = found;

        // Group holds by inode, then pid. The sort is stable, so each
        // process's holds stay in scan order; drop exact repeats (same pid,
        // same way).
        holds.sort_by_key(|(key, holder)| (*key, holder.pid));
        holds.dedup_by(|b, a| a.0 == b.0 && a.1.pid == b.1.pid && a.1.how == b.1.how);
        let mut index = HashMap::with_capacity_and_hasher(holds.len(), Default::default());
        let mut holders = Vec::with_capacity(holds.len());
        for (key, holder) in holds {
            let at = holders.len() as u32;
            index
                .entry(key)
                .and_modify(|range: &mut (u32, u32)| range.1 += 1)
                .or_insert((at, 1));
            holders.push(holder);
        }

        kernel.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        kernel.dedup();
        let mut kernel_inodes: Vec<((u64, u64), u32)> = kernel
            .iter()
            .enumerate()
            .filter_map(|(i, k)| Some((k.inode?, i as u32)))
            .collect();
        kernel_inodes.sort_unstable();
        // Sockets are matched by path through `sockets` (below), not twice.
        let kernel_paths: Vec<(Vec<u8>, u32)> = path_keys(kernel.iter().map(|k| match k.kind {
            KernelUseKind::UnixSocket { .. } => &b""[..],
            _ => k.path.as_os_str().as_bytes(),
        }));

        let mut sockets: Vec<PathBuf> = sockets
            .into_iter()
            .map(|b| PathBuf::from(OsString::from_vec(b)))
            .collect();
        sockets.sort();
        sockets.dedup();
        let socket_keys = path_keys(sockets.iter().map(|p| p.as_os_str().as_bytes()));

        let mut failed = failed;
        failed.sort_by_key(|u| u.pid);
        let (assumed, uninspectable) = failed
            .into_iter()
            .partition(|u: &Uninspectable| ignore_pids.contains(&u.pid));

        InUse {
            holders,
            index,
            kernel,
            kernel_inodes,
            kernel_paths,
            sockets,
            socket_keys,
            uninspectable,
            assumed,
            blind_spots,
            assumed_blind_spots: Vec::new(),
            processes,
        }
    }
}

impl KernelUse {
    /// Path order first; the rest only makes equal uses adjacent.
    #[allow(clippy::type_complexity)]
    fn sort_key(
        &self,
    ) -> (
        &[u8],
        MountNamespace,
        &KernelUseKind,
        &Option<PathBuf>,
        Option<(u64, u64)>,
        bool,
        &Option<String>,
    ) {
        (
            self.path.as_os_str().as_bytes(),
            self.namespace,
            &self.kind,
            &self.mount_point,
            self.inode,
            self.deleted,
            &self.fstype,
        )
    }
}

/// What one pass found, before indexing.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub(crate) holds: Vec<((u64, u64), Holder)>,
    pub(crate) kernel: Vec<KernelUse>,
    pub(crate) sockets: Vec<Vec<u8>>,
    pub(crate) uninspectable: Vec<Uninspectable>,
    pub(crate) blind_spots: Vec<BlindSpot>,
    pub(crate) processes: usize,
}

impl Found {
    pub(crate) fn uninspectable(
        &mut self,
        pid: u32,
        comm: Option<&str>,
        step: InspectStep,
        errno: i32,
    ) {
        self.uninspectable.push(Uninspectable {
            pid,
            comm: comm.map(str::to_owned),
            step,
            errno,
        });
    }

    /// Adds what another scanning thread found.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn merge(&mut self, other: Found) {
        self.holds.extend(other.holds);
        self.kernel.extend(other.kernel);
        self.sockets.extend(other.sockets);
        self.uninspectable.extend(other.uninspectable);
        self.blind_spots.extend(other.blind_spots);
        self.processes += other.processes;
    }

    pub(crate) fn blind_spot(&mut self, kind: BlindSpotKind, errno: Option<i32>) {
        self.blind_spots.push(BlindSpot {
            kind,
            errno,
            detail: None,
        });
    }

    /// Records what [`visibility::decide`] found.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) fn visibility(&mut self, spots: Vec<visibility::Spot>) {
        self.blind_spots
            .extend(spots.into_iter().map(|s| BlindSpot {
                kind: s.kind,
                errno: None,
                detail: s.detail.map(|d| d.into_bytes().into_boxed_slice()),
            }));
    }

    /// A blind spot about something named by `detail` (a path).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn blind_spot_about(
        &mut self,
        kind: BlindSpotKind,
        errno: Option<i32>,
        detail: &[u8],
    ) {
        self.blind_spots.push(BlindSpot {
            kind,
            errno,
            detail: Some(detail.into()),
        });
    }
}

/// Sorted `(normalized absolute path, index)` pairs for prefix queries;
/// relative paths are left out.
fn path_keys<'a>(paths: impl Iterator<Item = &'a [u8]>) -> Vec<(Vec<u8>, u32)> {
    let mut keys: Vec<(Vec<u8>, u32)> = paths
        .enumerate()
        .filter_map(|(i, p)| Some((normalize_absolute(p)?, i as u32)))
        .collect();
    keys.sort_unstable();
    keys
}

/// The indices of `keys` (sorted normalized paths) at or under `entry`, in
/// path order.
fn under(keys: &[(Vec<u8>, u32)], entry: &Path) -> Vec<u32> {
    let entry = std::path::absolute(entry)
        .ok()
        .and_then(|abs| normalize_absolute(abs.as_os_str().as_bytes()));
    let Some(mut key) = entry else {
        return Vec::new();
    };
    if key == b"/" {
        return keys.iter().map(|&(_, i)| i).collect();
    }
    let first = |k: &[u8]| keys.partition_point(|(x, _)| x.as_slice() < k);
    // Sorted: `e`, then siblings such as `e-1` and `e.x` ('-' and '.' sort
    // before '/'), then everything under `e/`, which ends before `e0`.
    let exact = first(&key)..keys.partition_point(|(x, _)| x.as_slice() <= key.as_slice());
    key.push(b'/');
    let below_start = first(&key);
    key.pop();
    key.push(b'0');
    let below = below_start..first(&key);
    keys[exact]
        .iter()
        .chain(&keys[below])
        .map(|&(_, i)| i)
        .collect()
}

/// An absolute path with `//` and `.` collapsed, `..` resolved lexically and
/// no trailing `/`; `None` for relative paths.
fn normalize_absolute(path: &[u8]) -> Option<Vec<u8>> {
    if path.first() != Some(&b'/') {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(path.len());
    for part in path.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                let cut = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(cut);
            }
            _ => {
                out.push(b'/');
                out.extend_from_slice(part);
            }
        }
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Some(out)
}

/// Bytes shown with control characters and invalid UTF-8 escaped, so that
/// hostile names cannot drive a terminal.
pub(crate) struct Escaped<'a>(pub(crate) &'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                if c.is_control() {
                    write!(f, "{}", c.escape_default())?;
                } else {
                    f.write_char(c)?;
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

/// A cheap hash for `(device, inode)` keys (the multiply-rotate of
/// rustc's FxHash). Inode numbers are handed out by the kernel, not chosen
/// by users, so hash flooding is not a concern; the walker looks up every
/// inode of large trees.
#[derive(Default)]
struct InodeHasher(u64);

impl Hasher for InodeHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        const K: u64 = 0xf135_7aea_2e62_a9c5;
        self.0 = self.0.wrapping_add(n).wrapping_mul(K);
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

    #[test]
    fn normalize_absolute_cases() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("root", "/", Some("/")),
            ("plain", "/tmp/a", Some("/tmp/a")),
            ("trailing slash", "/tmp/a/", Some("/tmp/a")),
            ("double slash", "//tmp//a", Some("/tmp/a")),
            ("dot", "/tmp/./a/.", Some("/tmp/a")),
            ("dotdot", "/tmp/x/../a", Some("/tmp/a")),
            ("dotdot above root", "/../a", Some("/a")),
            ("relative", "tmp/a", None),
            ("empty", "", None),
        ];
        for (name, input, want) in cases {
            let got = normalize_absolute(input.as_bytes());
            assert_eq!(got.as_deref(), want.map(str::as_bytes), "{name}");
        }
    }

    fn index_with_paths(paths: &[&str]) -> InUse {
        let mut found = Found::default();
        for p in paths {
            found.kernel.push(KernelUse {
                kind: KernelUseKind::MountPoint,
                path: PathBuf::from(p),
                inode: None,
                deleted: false,
                mount_point: Some(PathBuf::from(p)),
                fstype: Some("tmpfs".into()),
                namespace: MountNamespace::Own,
                device: None,
            });
            found.sockets.push(p.as_bytes().to_vec());
        }
        InUse::from_found(found, &BTreeSet::new())
    }

    #[test]
    fn under_matches_components_not_prefixes() {
        let index = index_with_paths(&[
            "/tmp/a",
            "/tmp/a/b",
            "/tmp/a/b/c",
            "/tmp/ab",
            "/tmp/a-1",
            "/tmp/a.x/y",
            "/tmp/b",
            "relative/a",
            "/",
        ]);
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "entry itself and below",
                "/tmp/a",
                &["/tmp/a", "/tmp/a/b", "/tmp/a/b/c"],
            ),
            (
                "trailing slash",
                "/tmp/a/",
                &["/tmp/a", "/tmp/a/b", "/tmp/a/b/c"],
            ),
            ("deeper entry", "/tmp/a/b", &["/tmp/a/b", "/tmp/a/b/c"]),
            ("sibling with suffix", "/tmp/ab", &["/tmp/ab"]),
            ("dash sibling", "/tmp/a-1", &["/tmp/a-1"]),
            ("nothing under", "/tmp/zz", &[]),
            ("prefix of a name", "/tmp/a.", &[]),
        ];
        for (name, entry, want) in cases {
            let got: Vec<&Path> = index
                .kernel_users_under(Path::new(entry))
                .into_iter()
                .map(|k| k.path.as_path())
                .collect();
            let want: Vec<&Path> = want.iter().map(Path::new).collect();
            assert_eq!(got, want, "kernel: {name}");
            assert_eq!(
                index.socket_paths_under(Path::new(entry)),
                want,
                "sockets: {name}"
            );
        }
        // The root contains every absolute path, but no relative one.
        assert_eq!(index.kernel_users_under(Path::new("/")).len(), 8);
        assert_eq!(index.socket_paths().len(), 9);
    }

    #[test]
    fn holders_are_grouped_and_deduplicated() {
        let comm: Arc<str> = Arc::from("sleep");
        let h = |pid, how| Holder {
            pid,
            comm: comm.clone(),
            how,
        };
        let found = Found {
            holds: vec![
                ((1, 10), h(5, HoldKind::Fd(3))),
                ((1, 11), h(5, HoldKind::Cwd)),
                ((1, 10), h(5, HoldKind::Mmap)),
                ((1, 10), h(5, HoldKind::Mmap)),
                ((1, 10), h(7, HoldKind::Fd(0))),
                ((2, 10), h(7, HoldKind::Exe)),
            ],
            ..Found::default()
        };
        let index = InUse::from_found(found, &BTreeSet::new());
        let hows = |dev, ino| -> Vec<(u32, HoldKind)> {
            index
                .holders(dev, ino)
                .iter()
                .map(|h| (h.pid, h.how))
                .collect()
        };
        assert_eq!(
            hows(1, 10),
            vec![
                (5, HoldKind::Fd(3)),
                (5, HoldKind::Mmap),
                (7, HoldKind::Fd(0))
            ]
        );
        assert_eq!(hows(1, 11), vec![(5, HoldKind::Cwd)]);
        assert_eq!(hows(2, 10), vec![(7, HoldKind::Exe)]);
        assert!(hows(2, 11).is_empty());
        assert!(index.is_held(1, 11) && !index.is_held(9, 9));
    }

    #[test]
    fn vouched_pids_move_to_assumed() {
        let mut found = Found::default();
        found.uninspectable(1, Some("init"), InspectStep::FdTable, 13);
        found.uninspectable(42, None, InspectStep::Fd(3), 1);
        let index = InUse::from_found(found, &BTreeSet::from([1, 99]));
        assert!(!index.is_complete());
        assert_eq!(
            index.assumed().iter().map(|u| u.pid).collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(
            index
                .uninspectable()
                .iter()
                .map(|u| u.pid)
                .collect::<Vec<_>>(),
            [42]
        );
        let text = index.uninspectable()[0].to_string();
        assert_eq!(
            text,
            format!(
                "pid 42: cannot inspect its fd 3: {}",
                io::Error::from_raw_os_error(1)
            )
        );

        let mut found = Found::default();
        found.uninspectable(1, Some("init"), InspectStep::FdTable, 13);
        let index = InUse::from_found(found, &BTreeSet::from([1]));
        assert!(index.is_complete());
    }

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
    fn blind_spots_say_what_why_and_what_to_do() {
        let spot = |kind, detail: Option<&str>| BlindSpot {
            kind,
            errno: None,
            detail: detail.map(|d| d.as_bytes().into()),
        };
        let cases: &[(&str, BlindSpot, &[&str])] = &[
            (
                "child pid namespace",
                spot(BlindSpotKind::PidNamespace, None),
                &[
                    "child pid namespace",
                    "host's",
                    "--trust-pid-namespace",
                    "SANDKEEPER_TRUST_PID_NAMESPACE=1",
                ],
            ),
            (
                "ptraceable",
                spot(BlindSpotKind::HiddenUnptraceable, None),
                &["hidepid=ptraceable", "even by root", "ProtectProc=default"],
            ),
            (
                "invisible, with why",
                spot(
                    BlindSpotKind::HiddenProcesses,
                    Some("this process is not in its exempt group (gid=27)"),
                ),
                &[
                    "hidepid=invisible",
                    "(this process is not in its exempt group (gid=27))",
                    "ProtectProc",
                ],
            ),
            (
                "detail is escaped",
                spot(BlindSpotKind::ProcfsOptions, Some("a\x1b[2J")),
                &["a\\u{1b}[2J"],
            ),
        ];
        for (name, b, want) in cases {
            let text = b.to_string();
            for w in *want {
                assert!(text.contains(w), "{name}: {w:?} in {text:?}");
            }
        }
        // The alternate form leaves out what to do: for assumptions.
        let assumed = format!("{:#}", spot(BlindSpotKind::PidNamespace, None));
        assert!(assumed.contains("child pid namespace") && !assumed.contains("trust it"));
        assert!(spot(BlindSpotKind::ForeignProcfs, None).is_pid_namespace());
        assert!(!spot(BlindSpotKind::HiddenProcesses, None).is_pid_namespace());
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

    #[test]
    fn blind_spot_displays() {
        let spot = |kind, errno, detail: Option<&[u8]>| BlindSpot {
            kind,
            errno,
            detail: detail.map(Into::into),
        };
        let eperm = io::Error::from_raw_os_error(1);
        let cases: Vec<(&str, BlindSpot, String)> = vec![
            (
                "sockets of a process's namespace",
                spot(BlindSpotKind::SocketsOf { pid: Some(7) }, Some(1), None),
                format!("bound unix sockets of the network namespace of pid 7 are unknown (cannot enter it): {eperm}"),
            ),
            (
                "sockets of a bound namespace",
                spot(BlindSpotKind::SocketsOf { pid: None }, None, Some(b"/run/netns/a")),
                "bound unix sockets of the network namespace bound at /run/netns/a are unknown (cannot enter it)".into(),
            ),
            (
                "loop device",
                spot(BlindSpotKind::LoopDevice { number: 3 }, None, None),
                "the backing file of loop device loop3 is unknown (cannot query /dev/loop3)".into(),
            ),
            (
                "held mount namespace",
                spot(BlindSpotKind::MountNamespace { pid: Some(5), ns: 42 }, None, None),
                "mounts of mount namespace mnt:[42], which no process lives in (held open by pid 5), are unknown (cannot enter it)".into(),
            ),
            (
                "relative layer, hostile text escaped",
                spot(BlindSpotKind::RelativeOverlayLayer, None, Some(b"lowerdir=l\x1b]0;x of /m")),
                "an overlay names a layer by a relative path (lowerdir=l\\u{1b}]0;x of /m), which cannot be resolved: the layer could be inside any entry".into(),
            ),
            (
                "detached overlay",
                spot(BlindSpotKind::DetachedOverlay { pid: 8 }, None, None),
                "pid 8 works in an overlay that no mount table lists (lazily unmounted): its layers could be inside any entry".into(),
            ),
        ];
        for (name, spot, want) in cases {
            assert_eq!(spot.to_string(), want, "{name}");
        }
    }

    #[test]
    fn sockets_match_by_the_low_32_bits_of_the_inode() {
        let mut found = Found::default();
        found.kernel.push(KernelUse {
            kind: KernelUseKind::UnixSocket {
                network_namespace_of: None,
            },
            path: PathBuf::from("/tmp/e/s"),
            inode: Some((5, 0x2345)),
            deleted: false,
            mount_point: None,
            fstype: None,
            namespace: MountNamespace::Own,
            device: None,
        });
        found.kernel.push(KernelUse {
            kind: KernelUseKind::LoopBackingFile {
                device: "loop0".into(),
            },
            path: PathBuf::from("/tmp/e/img"),
            inode: Some((5, 0x6789)),
            deleted: false,
            mount_point: None,
            fstype: None,
            namespace: MountNamespace::Own,
            device: None,
        });
        let index = InUse::from_found(found, &BTreeSet::new());
        assert_eq!(index.kernel_users_of(5, 0x2345).count(), 1, "exact");
        assert_eq!(
            index.kernel_users_of(5, 0x7_0000_2345).count(),
            1,
            "truncated"
        );
        assert_eq!(index.kernel_users_of(6, 0x2345).count(), 0, "other device");
        assert_eq!(
            index.kernel_users_of(5, 0x1_0000_6789).count(),
            0,
            "only sockets match truncated"
        );
        // Sockets match by path through socket_paths_under only.
        assert!(index.kernel_users_under(Path::new("/tmp/e")).len() == 1);
    }

    #[test]
    fn public_types_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<InUse>();
        check::<InUseOptions>();
        check::<Holder>();
        check::<KernelUse>();
        check::<Uninspectable>();
        check::<BlindSpot>();
    }
}
