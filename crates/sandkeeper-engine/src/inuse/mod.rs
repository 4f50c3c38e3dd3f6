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
//! use sandkeeper_engine::inuse::{InUse, InUseOptions};
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
//! triggered. A link to a file on a FUSE mount that refuses the caller
//! (one of another user namespace refuses even root) is read without
//! asking it: opened `O_PATH`, its device from an empty `statx`, its inode
//! from the caller's own `fdinfo`. A loop device whose backing path lies on
//! a mount that may not answer is never asked `LOOP_GET_STATUS64` (which
//! stats the backing file): it is matched by path. A path lookup *through*
//! a hung network or FUSE mount (a mount point below one) can still block,
//! as it would for `lsof`.
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

mod blind_spots;
#[cfg(target_os = "linux")]
mod bounded_calls;
#[cfg(target_os = "linux")]
mod fdinfo;
mod findings;
mod holds;
mod index;
mod mount_users;
mod mountinfo;
#[cfg(target_os = "linux")]
mod namespaces;
mod options;
#[cfg(target_os = "linux")]
mod procs;
#[cfg(target_os = "linux")]
pub(crate) use procs::cwds;
mod open_elsewhere;
mod pid_visibility;
mod sockets;

pub use blind_spots::{BlindSpot, BlindSpotKind, InspectStep, Uninspectable};
pub(crate) use findings::Found;
pub use holds::{HoldKind, Holder, KernelUse, KernelUseKind, MountNamespace, OverlayLayer};
pub use index::InUse;
pub use open_elsewhere::{open_elsewhere, CannotTell, OpenElsewhere};
pub use options::{
    assume_unseen_free_from_env, assume_unseen_free_switch, trust_pid_namespace_from_env,
    trust_pid_namespace_switch, InUseOptions, ASSUME_UNSEEN_FREE_ENV, TRUST_PID_NAMESPACE_ENV,
};

pub(crate) use sandkeeper::__engine::Escaped;

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

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
