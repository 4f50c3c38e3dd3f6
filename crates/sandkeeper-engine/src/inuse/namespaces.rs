//! Kernel users that the pass over processes cannot see by itself: loop
//! devices, the bound unix sockets of every network namespace, and mount
//! namespaces that no process lives in.
//!
//! Runs after [`super::procs::collect`], on what it found:
//!
//! - every process's network and mount namespace (`/proc/PID/ns/*`, one
//!   `statx` each, deduplicated by the namespace's inode);
//! - descriptors that processes hold on `nsfs` (links reading `mnt:[N]` or
//!   `net:[N]`) and `nsfs` bind mounts in our `mountinfo`: they keep a
//!   namespace alive with no process in it, and its mounts and sockets
//!   with it.
//!
//! A network namespace is entered by a helper thread (`setns`), which makes
//! the netlink socket there; a mount namespace by a helper thread that
//! first unshares its filesystem information, then reads its own
//! `mountinfo` through the procfs descriptor opened before. Each thread
//! ends afterwards; no other thread changes namespace. Whatever cannot be
//! entered is a [blind spot](super::BlindSpotKind), never silence.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, StatxFlags, CWD};
use rustix::io::Errno;
use rustix::thread::LinkNameSpaceType;

use super::bounded_calls;
use super::mount_users;
use super::mountinfo::{self, makedev, parse_dec};
use super::sockets::{self, BoundSocket};
use super::{BlindSpotKind, Found, HoldKind, KernelUse, KernelUseKind, MountNamespace};

/// Where loop devices are listed.
const SYS_BLOCK: &str = "/sys/block";

/// Where loop device nodes are opened (only `loopN`).
const DEV: &str = "/dev";

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOFOLLOW);

/// A `(device, inode)` pair.
type Key = (u64, u64);

/// How to get a descriptor of a namespace.
#[derive(Debug, Clone)]
enum Source {
    /// `/proc/PID/ns/{net,mnt}` of a process living in it.
    Process(u32),
    /// `/proc/PID/fd/N`, an `nsfs` descriptor the process holds.
    Fd(u32, u32),
    /// A bind mount of the `nsfs` file, at this path of our namespace.
    Bound(Vec<u8>),
}

impl Source {
    fn pid(&self) -> Option<u32> {
        match self {
            Source::Process(pid) | Source::Fd(pid, _) => Some(*pid),
            Source::Bound(_) => None,
        }
    }
}

/// Adds loop devices, sockets and process-less mount namespaces to `found`.
pub(super) fn collect(proc_root: &Path, found: &mut Found) {
    let Ok(proc) = rustix::fs::open(proc_root, DIR_FLAGS, Mode::empty()) else {
        // The process pass opened it a moment ago; without it nothing can
        // be told about other namespaces.
        loop_devices(found);
        found.blind_spot(BlindSpotKind::Sockets, Some(libc::EIO));
        return;
    };
    let survey = Survey::take(proc.as_fd(), found);
    survey.sockets(proc.as_fd(), found);
    survey.mounts(proc.as_fd(), found);
    // After every mount table is read: which backing paths lie on a mount
    // that may not answer is decided from all of them.
    loop_devices(found);
    resolve_layers(proc.as_fd(), found);
    unresolved_layers(found);
    unlisted_filesystems(proc.as_fd(), found);
}

/// Gives each overlay layer of our namespace and of the namespaces that
/// processes live in the `(device, inode)` of its path, resolved under
/// that namespace's root (`/proc/PID/root`) with `RESOLVE_IN_ROOT` and
/// without following any symlink: the path is text the mounter chose, and
/// a link in it may point elsewhere by now. (Layers of namespaces that no
/// process lives in are resolved by the thread that reads them.)
fn resolve_layers(proc: BorrowedFd<'_>, found: &mut Found) {
    let mut roots: BTreeMap<Option<u32>, Option<OwnedFd>> = BTreeMap::new();
    let root_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    for k in &mut found.kernel {
        if !matches!(k.kind, KernelUseKind::OverlayLayer(_)) || k.inode.is_some() {
            continue;
        }
        let pid = match k.namespace {
            MountNamespace::Own => None,
            MountNamespace::Of { pid } => Some(pid),
            MountNamespace::Held { .. } => continue,
        };
        let root = roots.entry(pid).or_insert_with(|| match pid {
            None => rustix::fs::open("/", root_flags, Mode::empty()).ok(),
            Some(pid) => rustix::fs::openat(
                proc,
                format!("{pid}/root").as_str(),
                root_flags,
                Mode::empty(),
            )
            .ok(),
        });
        if let Some(root) = root {
            k.inode = timed_resolve_in_root(root.as_fd(), k.path.as_os_str().as_bytes());
        }
    }
}

/// [`resolve_in_root`] on the [`deadline`] worker: a layer may lie on a
/// filesystem that does not answer (an overlay over NFS or sshfs). `None`
/// when it could not be resolved in time, which makes it an unresolved
/// layer (a blind spot).
fn timed_resolve_in_root(root: BorrowedFd<'_>, path: &[u8]) -> Option<Key> {
    let root = rustix::io::fcntl_dupfd_cloexec(root, 0).ok()?;
    let owned = path.to_vec();
    let call = move || resolve_in_root(root.as_fd(), &owned).ok();
    bounded_calls::run(vec![(path.to_vec(), Box::new(call))], bounded_calls::LIMIT)
        .into_iter()
        .next()
        .flatten()
        .flatten()
}

/// The `(device, inode)` of the absolute `path` under `root`, resolved
/// with `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`
/// and opened `O_PATH` (nothing is opened for real).
fn resolve_in_root(root: BorrowedFd<'_>, path: &[u8]) -> Result<Key, Errno> {
    if path.first() != Some(&b'/') {
        return Err(Errno::INVAL);
    }
    let fd = rustix::fs::openat2(
        root,
        OsStr::from_bytes(path),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    stat_at(fd.as_fd(), c"", true)
}

/// Overlay layers that cannot be matched by inode: named by a relative
/// path, or by a path that no longer resolves. Either could be inside any
/// entry, so each is a blind spot.
fn unresolved_layers(found: &mut Found) {
    let mut spots = Vec::new();
    for k in &found.kernel {
        let KernelUseKind::OverlayLayer(layer) = k.kind else {
            continue;
        };
        let path = k.path.as_os_str().as_bytes();
        let kind = if path.first() != Some(&b'/') {
            BlindSpotKind::RelativeOverlayLayer
        } else if k.inode.is_none() {
            BlindSpotKind::UnresolvedOverlayLayer
        } else {
            continue;
        };
        let mut detail = format!("{}=", layer.option_name()).into_bytes();
        detail.extend_from_slice(path);
        if let Some(m) = &k.mount_point {
            detail.extend_from_slice(b" of ");
            detail.extend_from_slice(m.as_os_str().as_bytes());
        }
        if let MountNamespace::Of { pid } = k.namespace {
            detail.extend_from_slice(format!(" in the mount namespace of pid {pid}").as_bytes());
        }
        spots.push((kind, detail));
    }
    spots.sort_by(|a, b| a.1.cmp(&b.1));
    spots.dedup();
    for (kind, detail) in spots {
        found.blind_spot_about(kind, None, &detail);
    }
}

/// `OVERLAYFS_SUPER_MAGIC`.
const OVERLAYFS_MAGIC: i64 = 0x794c_7630;

/// Processes that work in (or hold files of) a filesystem that no mount
/// table lists: lazily unmounted (`umount -l`) while in use. For an
/// overlay that hides its layers; so each such filesystem with an
/// anonymous device (major 0: overlays, tmpfs, FUSE, pseudo filesystems) is
/// identified with one `fstatfs` of an `O_PATH` descriptor of what the
/// process holds, on the [`deadline`](super::deadline) worker, abandoned
/// after [`bounded_calls::LIMIT`](super::bounded_calls::LIMIT) (a detached network
/// or FUSE filesystem may not answer).
fn unlisted_filesystems(proc: BorrowedFd<'_>, found: &mut Found) {
    let listed: HashSet<u64> = found.kernel.iter().filter_map(|k| k.device).collect();
    let nsfs = own_ns(proc, c"mnt").map(|k| k.0);
    // One holder per unlisted device.
    let mut candidates: BTreeMap<u64, (u32, String)> = BTreeMap::new();
    for (key, holder) in &found.holds {
        let dev = key.0;
        if mountinfo::major(dev) != 0 || listed.contains(&dev) || Some(dev) == nsfs {
            continue;
        }
        let link = match holder.how {
            HoldKind::Fd(n) => format!("{}/fd/{n}", holder.pid),
            HoldKind::Cwd => format!("{}/cwd", holder.pid),
            HoldKind::Root => format!("{}/root", holder.pid),
            HoldKind::Exe => format!("{}/exe", holder.pid),
            HoldKind::ThreadCwd(tid) => format!("{}/task/{tid}/cwd", holder.pid),
            HoldKind::ThreadRoot(tid) => format!("{}/task/{tid}/root", holder.pid),
            _ => continue, // mappings show the underlying file's device
        };
        candidates.entry(dev).or_insert((holder.pid, link));
    }
    if candidates.is_empty() {
        return;
    }
    // O_PATH through the magic link: no lookup in, nor open of, the
    // filesystem; only `fstatfs` may have to ask it, in the worker.
    let mut devs = Vec::new();
    let mut calls: Vec<bounded_calls::Call<_>> = Vec::new();
    for (&dev, (_, link)) in &candidates {
        if let Ok(fd) = rustix::fs::openat(
            proc,
            link.as_str(),
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            devs.push(dev);
            #[allow(clippy::unnecessary_cast)] // the field type varies by target
            let call = move || rustix::fs::fstatfs(&fd).map(|st| st.f_type as i64);
            calls.push((
                format!("statfs of device {dev}").into_bytes(),
                Box::new(call),
            ));
        } // else the holder went away, or let go
    }
    let answers: HashMap<u64, Result<i64, Errno>> = devs
        .into_iter()
        .zip(bounded_calls::run(calls, bounded_calls::LIMIT))
        .filter_map(|(dev, answer)| Some((dev, answer?)))
        .collect();
    for (dev, (pid, _)) in &candidates {
        match answers.get(dev) {
            Some(Ok(fs_type)) if *fs_type == OVERLAYFS_MAGIC => {
                found.blind_spot(BlindSpotKind::DetachedOverlay { pid: *pid }, None)
            }
            Some(_) => {}
            None => found.blind_spot(BlindSpotKind::UnlistedFilesystem { pid: *pid }, None),
        }
    }
}

/// The loop devices, asked about their backing inode only where the
/// backing path lies on no mount that may not answer, in any mount table
/// read (ours, every process's namespace's, those no process lives in):
/// the text `sysfs` gives is a path of whichever namespace the file was
/// reached in.
fn loop_devices(found: &mut Found) {
    let silent_mounts: Vec<Vec<u8>> = found
        .kernel
        .iter()
        .filter(|k| k.kind == KernelUseKind::MountPoint)
        .filter(|k| {
            k.fstype
                .as_deref()
                .is_some_and(|t| mount_users::may_not_answer(t.as_bytes()))
        })
        .map(|k| k.path.as_os_str().as_bytes().to_vec())
        .collect();
    let silent = |path: &[u8]| {
        silent_mounts
            .iter()
            .any(|m| mountinfo::strip_dir_prefix(path, m).is_some())
    };
    let mut unknown = Vec::new();
    if let Err(e) = mount_users::loop_devices(
        Path::new(SYS_BLOCK),
        Path::new(DEV),
        &silent,
        &mut found.kernel,
        &mut unknown,
    ) {
        found.blind_spot(BlindSpotKind::LoopDevices, e.raw_os_error());
    }
    for (number, errno) in unknown {
        found.blind_spot(BlindSpotKind::LoopDevice { number }, Some(errno));
    }
}

/// Which namespaces exist, and how to reach each.
#[derive(Debug, Default)]
struct Survey {
    own_net: Option<Key>,
    /// Network namespaces other than ours.
    net: BTreeMap<Key, Source>,
    /// Mount namespaces that no process lives in.
    held_mnt: BTreeMap<Key, Source>,
}

impl Survey {
    fn take(proc: BorrowedFd<'_>, found: &mut Found) -> Survey {
        let mut survey = Survey {
            own_net: own_ns(proc, c"net"),
            ..Survey::default()
        };
        let own_mnt = own_ns(proc, c"mnt");
        let mut lived_mnt: HashSet<Key> = own_mnt.into_iter().collect();
        // Which mount namespaces processes live in matters only when some
        // process holds an nsfs descriptor of another namespace.
        let nsfs_held = own_mnt.is_some_and(|own| {
            found.holds.iter().any(|(key, h)| {
                key.0 == own.0
                    && Some(*key) != survey.own_net
                    && *key != own
                    && matches!(h.how, HoldKind::Fd(_))
            })
        });
        // The namespaces of one process; `Err` when its `ns/net` cannot be
        // read (a process that is gone is `Ok`: it lives in none).
        let mut survey_one = |pid: u32, survey: &mut Survey| -> Result<(), Errno> {
            let mut name = format!("{pid}/ns/net").into_bytes();
            match ns_key(proc, &name) {
                Ok(key) if Some(key) != survey.own_net => {
                    survey.net.entry(key).or_insert(Source::Process(pid));
                }
                Ok(_) => {}
                Err(e) if gone(e) => return Ok(()),
                Err(e) => return Err(e),
            }
            if nsfs_held {
                name.truncate(name.len() - 3);
                name.extend_from_slice(b"mnt");
                if let Ok(key) = ns_key(proc, &name) {
                    lived_mnt.insert(key);
                }
            }
            Ok(())
        };
        let mut failures: Vec<(u32, Errno)> = pids(proc)
            .into_iter()
            .filter_map(|pid| survey_one(pid, &mut survey).err().map(|e| (pid, e)))
            .collect();
        // A process caught mid-`exec` refuses a moment (`EACCES`): looked
        // at again after the same pauses as a failed inspection; only one
        // that keeps failing counts.
        for pause in super::procs::RECHECK_PAUSES {
            if failures.is_empty() {
                break;
            }
            std::thread::sleep(pause);
            failures.retain_mut(|(pid, e)| match survey_one(*pid, &mut survey) {
                Ok(()) => false,
                Err(again) => {
                    *e = again;
                    true
                }
            });
        }
        // A process whose namespaces cannot be read is one whose
        // descriptors cannot be read either (the same ptrace check): it is
        // reported (or vouched for) as uninspectable already. A kernel
        // thread (which a normal user may not read either) lives in the
        // initial namespaces and binds no socket.
        let first_failure = failures.into_iter().find(|(pid, _)| {
            !found.uninspectable.iter().any(|u| u.pid == *pid)
                && !found.kernel_threads.contains(pid)
        });
        if let Some((pid, e)) = first_failure {
            found.blind_spot(
                BlindSpotKind::SocketsOf { pid: Some(pid) },
                Some(e.raw_os_error()),
            );
        }
        // Namespaces kept by descriptors: the holds on nsfs inodes.
        let Some(nsfs) = own_mnt.map(|k| k.0) else {
            return survey;
        };
        let known = |survey: &Survey, key: &Key| {
            lived_mnt.contains(key) || Some(*key) == survey.own_net || survey.net.contains_key(key)
        };
        for (key, holder) in &found.holds {
            let HoldKind::Fd(fd) = holder.how else {
                continue;
            };
            if key.0 != nsfs || known(&survey, key) || survey.held_mnt.contains_key(key) {
                continue;
            }
            let link = format!("{}/fd/{fd}", holder.pid);
            let Ok(target) = rustix::fs::readlinkat(proc, link.as_str(), Vec::new()) else {
                continue; // closed meanwhile
            };
            match nsfs_name(target.as_bytes()) {
                Some(("mnt", ino)) if ino == key.1 => {
                    survey.held_mnt.insert(*key, Source::Fd(holder.pid, fd));
                }
                Some(("net", ino)) if ino == key.1 => {
                    survey.net.insert(*key, Source::Fd(holder.pid, fd));
                }
                _ => {}
            }
        }
        // Namespaces kept by bind mounts of their nsfs files.
        let mut text = Vec::new();
        if read_at(proc, c"thread-self/mountinfo", &mut text).is_ok() {
            for (kind, ino, mount_point) in nsfs_mounts(&text) {
                let key = (nsfs, ino);
                if known(&survey, &key) || survey.held_mnt.contains_key(&key) {
                    continue;
                }
                let source = Source::Bound(mount_point);
                match kind {
                    "mnt" => survey.held_mnt.insert(key, source),
                    _ => survey.net.insert(key, source),
                };
            }
        }
        survey
    }

    /// The bound sockets of every network namespace.
    fn sockets(&self, proc: BorrowedFd<'_>, found: &mut Found) {
        let mut bound = Vec::new();
        if self.own_net.is_none() {
            found.blind_spot(BlindSpotKind::Sockets, Some(libc::ENOENT));
        }
        match sockets::bound_sockets(&mut bound) {
            Ok(()) => add_sockets(found, &bound, None),
            Err(e) => found.blind_spot(BlindSpotKind::Sockets, Some(e.raw_os_error())),
        }
        if self.net.is_empty() {
            return;
        }
        // One helper thread visits the other namespaces in turn: setns of a
        // network namespace needs no unshare, and the thread ends after.
        let results = std::thread::scope(|scope| {
            let helper = std::thread::Builder::new()
                .name("sandkeeper-netns".into())
                .spawn_scoped(scope, || {
                    self.net
                        .iter()
                        .map(|(key, source)| {
                            let mut bound = Vec::new();
                            let result = open_ns(proc, source, *key, "net")
                                .and_then(|fd| {
                                    rustix::thread::move_into_link_name_space(
                                        fd.as_fd(),
                                        Some(LinkNameSpaceType::Network),
                                    )
                                })
                                .and_then(|()| sockets::bound_sockets(&mut bound));
                            (source.clone(), *key, result.map(|()| bound))
                        })
                        .collect::<Vec<_>>()
                });
            match helper {
                Ok(helper) => helper.join().ok(),
                Err(_) => None,
            }
        });
        let Some(results) = results else {
            found.blind_spot(BlindSpotKind::SocketsOf { pid: None }, Some(libc::EAGAIN));
            return;
        };
        for (source, key, result) in results {
            match result {
                Ok(bound) => add_sockets(found, &bound, Some(source.pid().unwrap_or(0))),
                Err(_) if no_bound_sockets(proc, &source, key) => {}
                Err(e) => blind_ns(found, &source, key, e, |pid| BlindSpotKind::SocketsOf {
                    pid,
                }),
            }
        }
    }

    /// The mounts of every mount namespace that no process lives in.
    fn mounts(&self, proc: BorrowedFd<'_>, found: &mut Found) {
        for (key, source) in &self.held_mnt {
            let namespace = MountNamespace::Held { ns: key.1 };
            let read = std::thread::scope(|scope| {
                let helper = std::thread::Builder::new()
                    .name("sandkeeper-mntns".into())
                    .spawn_scoped(scope, || -> Result<Vec<KernelUse>, Errno> {
                        let fd = open_ns(proc, source, *key, "mnt")?;
                        crate::sys::namespace::enter_mount_namespace(fd.as_fd())?;
                        let mut text = Vec::new();
                        read_at(proc, c"thread-self/mountinfo", &mut text)?;
                        let lines = mountinfo::parse_mountinfo(&text);
                        // This thread's root is that namespace's root now.
                        let mut stat_there = |path: &[u8], follow: bool| {
                            if path.first() != Some(&b'/') {
                                return None;
                            }
                            stat_at(CWD, &CString::new(path).ok()?, follow).ok()
                        };
                        let mut uses = Vec::new();
                        mount_users::kernel_uses(&lines, namespace, &mut stat_there, &mut uses);
                        let root = rustix::fs::open(
                            "/",
                            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                            Mode::empty(),
                        )?;
                        for k in &mut uses {
                            if matches!(k.kind, KernelUseKind::OverlayLayer(_)) {
                                k.inode =
                                    resolve_in_root(root.as_fd(), k.path.as_os_str().as_bytes())
                                        .ok();
                            }
                        }
                        Ok(uses)
                    });
                match helper {
                    Ok(helper) => helper.join().unwrap_or(Err(Errno::IO)),
                    Err(_) => Err(Errno::AGAIN),
                }
            });
            match read {
                Ok(uses) => found.kernel.extend(uses),
                Err(e) => blind_ns(found, source, *key, e, |pid| {
                    BlindSpotKind::MountNamespace { pid, ns: key.1 }
                }),
            }
        }
    }
}

/// Whether the network namespace `key`, which could not be entered, is
/// known to have no unix socket bound to a file: the `/proc/PID/net/unix`
/// of a process living in it lists none (and the process was in `key`
/// before and after the read). Then nothing there can hold an entry; any
/// listed path (or any doubt) leaves it a blind spot, as the text cannot
/// say where the file is.
fn no_bound_sockets(proc: BorrowedFd<'_>, source: &Source, key: Key) -> bool {
    let Source::Process(pid) = source else {
        return false; // /proc/PID/net shows the holder's own namespace
    };
    let in_ns = || ns_key(proc, format!("{pid}/ns/net").as_bytes()) == Ok(key);
    let mut text = Vec::new();
    let Ok(name) = CString::new(format!("{pid}/net/unix")) else {
        return false;
    };
    if !in_ns() || read_at(proc, &name, &mut text).is_err() || !in_ns() {
        return false;
    }
    let mut paths = Vec::new();
    sockets::parse_net_unix(&text, &mut paths);
    // A header and nothing unparsable: every line was understood.
    let lines = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let understood = text
        .split(|&b| b == b'\n')
        .skip(1)
        .filter(|l| !l.is_empty())
        .all(|l| sockets::parse_unix_line(l).is_some());
    lines >= 1 && understood && paths.is_empty()
}

/// Records that the namespace `key` reached through `source` could not be
/// read.
fn blind_ns(
    found: &mut Found,
    source: &Source,
    _key: Key,
    e: Errno,
    kind: impl FnOnce(Option<u32>) -> BlindSpotKind,
) {
    match source {
        Source::Bound(path) => found.blind_spot_about(kind(None), Some(e.raw_os_error()), path),
        _ => found.blind_spot(kind(source.pid()), Some(e.raw_os_error())),
    }
}

/// The sockets of one network namespace as kernel users (by inode) and as
/// paths (the text given to `bind`).
fn add_sockets(found: &mut Found, bound: &[BoundSocket], of: Option<u32>) {
    for socket in bound {
        found.kernel.push(KernelUse {
            kind: KernelUseKind::UnixSocket {
                network_namespace_of: of,
            },
            path: OsStr::from_bytes(&socket.name).into(),
            inode: Some((socket.file.0, u64::from(socket.file.1))),
            deleted: false,
            mount_point: None,
            fstype: None,
            namespace: MountNamespace::Own,
            device: None,
        });
        if !socket.name.is_empty() {
            found.sockets.push(socket.name.clone());
        }
    }
}

/// Opens the namespace `key` (of type `kind`, `net` or `mnt`) through
/// `source`, and checks that it is that namespace: a pid or descriptor
/// number may have been reused, a descriptor replaced, a bind mount
/// covered.
///
/// First `O_PATH` (which opens nothing: were it a FIFO or a device now,
/// nothing would block or happen), checked by `fstat` to be that nsfs
/// inode, and only then reopened for `setns` through our own
/// `/proc/self/fd` link of that very file.
fn open_ns(proc: BorrowedFd<'_>, source: &Source, key: Key, kind: &str) -> Result<OwnedFd, Errno> {
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    let path_fd = match source {
        Source::Process(pid) => rustix::fs::openat(
            proc,
            format!("{pid}/ns/{kind}").as_str(),
            flags,
            Mode::empty(),
        )?,
        // The magic link of a descriptor is what it is for: the nsfs file
        // the process holds.
        Source::Fd(pid, fd) => rustix::fs::openat(
            proc,
            format!("{pid}/fd/{fd}").as_str(),
            flags,
            Mode::empty(),
        )?,
        // A path of our namespace: never through a symlink.
        Source::Bound(path) => rustix::fs::openat2(
            CWD,
            OsStr::from_bytes(path),
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?,
    };
    if stat_at(path_fd.as_fd(), c"", true)? != key {
        return Err(Errno::STALE);
    }
    reopen(proc, &path_fd)
}

/// Reopens the file of an `O_PATH` descriptor for reading, through our own
/// `/proc/thread-self/fd/N` (the same file: it cannot be swapped).
fn reopen(proc: BorrowedFd<'_>, path_fd: &OwnedFd) -> Result<OwnedFd, Errno> {
    use std::os::fd::AsRawFd;
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY;
    let raw = path_fd.as_raw_fd();
    match rustix::fs::openat(
        proc,
        format!("thread-self/fd/{raw}").as_str(),
        flags,
        Mode::empty(),
    ) {
        Err(Errno::NOENT) => {
            rustix::fs::open(format!("/proc/thread-self/fd/{raw}"), flags, Mode::empty())
        }
        other => other,
    }
}

/// The key of our own namespace of type `kind` (`net`, `mnt`).
fn own_ns(proc: BorrowedFd<'_>, kind: &CStr) -> Option<Key> {
    let mut name = b"thread-self/ns/".to_vec();
    name.extend_from_slice(kind.to_bytes());
    ns_key(proc, &name).ok().or_else(|| {
        let mut abs = b"/proc/thread-self/ns/".to_vec();
        abs.extend_from_slice(kind.to_bytes());
        stat_at(CWD, &CString::new(abs).ok()?, true).ok()
    })
}

fn ns_key(proc: BorrowedFd<'_>, name: &[u8]) -> Result<Key, Errno> {
    let name = CString::new(name).map_err(|_| Errno::INVAL)?;
    stat_at(proc, &name, true)
}

/// The numeric entries of the procfs at hand.
fn pids(proc: BorrowedFd<'_>) -> Vec<u32> {
    let Ok(dir) = rustix::fs::openat(proc, c".", DIR_FLAGS, Mode::empty()) else {
        return Vec::new();
    };
    let Ok(mut dir) = rustix::fs::Dir::new(dir) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    while let Some(Ok(entry)) = dir.read() {
        if let Some(pid) = parse_dec(entry.file_name().to_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// `mnt:[4026531841]` → `("mnt", 4026531841)`, for the types that matter.
fn nsfs_name(link: &[u8]) -> Option<(&'static str, u64)> {
    let (kind, rest) = if let Some(rest) = link.strip_prefix(b"mnt:[") {
        ("mnt", rest)
    } else {
        ("net", link.strip_prefix(b"net:[")?)
    };
    Some((kind, parse_dec(rest.strip_suffix(b"]")?)?))
}

/// The `nsfs` bind mounts of network and mount namespaces in a
/// `mountinfo` text: `(type, namespace inode, mount point)`. Their root
/// field is the namespace's name (`mnt:[N]`), not a path.
fn nsfs_mounts(text: &[u8]) -> Vec<(&'static str, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        if fields.get(sep + 1) != Some(&&b"nsfs"[..]) || fields.len() < 5 {
            continue;
        }
        if let Some((kind, ino)) = nsfs_name(fields[3]) {
            out.push((kind, ino, mountinfo::unescape_octal(fields[4])));
        }
    }
    out
}

fn gone(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::SRCH)
}

/// `statx` with `AT_STATX_DONT_SYNC | AT_NO_AUTOMOUNT`, as the process pass.
fn stat_at(dir: BorrowedFd<'_>, name: &CStr, follow: bool) -> Result<Key, Errno> {
    let mut flags = AtFlags::STATX_DONT_SYNC | AtFlags::NO_AUTOMOUNT;
    if !follow {
        flags |= AtFlags::SYMLINK_NOFOLLOW;
    }
    if name.is_empty() {
        flags |= AtFlags::EMPTY_PATH;
    }
    let st = rustix::fs::statx(dir, name, flags, StatxFlags::INO)?;
    Ok((makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino))
}

/// Reads `name` under `dir` whole into `buf`.
fn read_at(dir: BorrowedFd<'_>, name: &CStr, buf: &mut Vec<u8>) -> Result<(), Errno> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    buf.clear();
    loop {
        buf.reserve(16 * 1024);
        match rustix::io::read(&fd, rustix::buffer::spare_capacity(buf)) {
            Ok(0) => return Ok(()),
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

    #[test]
    fn nsfs_names() {
        let cases: &[(&str, &[u8], Option<(&str, u64)>)] = &[
            ("mount", b"mnt:[4026531841]", Some(("mnt", 4026531841))),
            ("network", b"net:[4026531840]", Some(("net", 4026531840))),
            ("other type", b"pid:[4026531836]", None),
            ("a file", b"/tmp/mnt:[1]", None),
            ("no bracket", b"mnt:[12", None),
            ("not a number", b"mnt:[x]", None),
        ];
        for (name, link, want) in cases {
            assert_eq!(nsfs_name(link), *want, "{name}");
        }
    }

    #[test]
    fn nsfs_mounts_in_mountinfo() {
        let text = b"27 1 254:0 / / rw - ext4 /dev/vda rw\n\
            80 27 0:4 mnt:[4026532300] /run/keep\\040ns rw - nsfs nsfs rw\n\
            81 27 0:4 net:[4026532301] /run/netns/a rw shared:5 - nsfs nsfs rw\n\
            82 27 0:4 uts:[4026532302] /run/uts rw - nsfs nsfs rw\n\
            83 27 0:50 mnt:[1] /fake rw - tmpfs tmpfs rw\n\
            garbage\n";
        assert_eq!(
            nsfs_mounts(text),
            vec![
                ("mnt", 4026532300, b"/run/keep ns".to_vec()),
                ("net", 4026532301, b"/run/netns/a".to_vec()),
            ]
        );
    }
}
