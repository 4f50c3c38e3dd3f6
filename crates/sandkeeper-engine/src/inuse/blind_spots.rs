//! What could not be seen: processes that could not be inspected
//! ([`Uninspectable`], at an [`InspectStep`]) and what hides every
//! process's holders ([`BlindSpot`], of a [`BlindSpotKind`]).

use std::fmt;
use std::io;

use super::Escaped;

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
    pub(super) errno: i32,
    /// The error came from the filesystem of a file it holds, not from
    /// `/proc`.
    pub(super) filesystem: bool,
}

impl Uninspectable {
    /// Why it could not be read (usually `PermissionDenied`).
    pub fn error(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno)
    }

    /// Whether the process's `/proc` entries could be read, but a file it
    /// holds is on a filesystem that refuses the caller's `statx` (and is
    /// not FUSE, whose inode is found without asking it): the refusal is
    /// that filesystem's (or a security module's rule on that file), not
    /// `/proc`'s.
    pub fn refused_by_filesystem(&self) -> bool {
        self.filesystem
    }
}

impl fmt::Display for Uninspectable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if let Some(comm) = &self.comm {
            write!(f, " ({})", Escaped(comm.as_bytes()))?;
        }
        write!(f, ": cannot inspect {}", self.step)?;
        if self.filesystem {
            f.write_str(": the filesystem it is on refuses to stat it")?;
        }
        write!(f, ": {}", self.error())
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
    /// ([`InUseOptions::trust_pid_namespace`](super::InUseOptions::trust_pid_namespace)) assumes this away.
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
    pub(super) errno: Option<i32>,
    /// What it concerns, for the message (a mount point, a layer).
    pub(super) detail: Option<Box<[u8]>>,
}

impl BlindSpot {
    /// The error that caused it, if it came from a failed read.
    pub fn error(&self) -> Option<io::Error> {
        self.errno.map(io::Error::from_raw_os_error)
    }

    /// Whether it is about the pid namespace boundary, which
    /// [`InUseOptions::trust_pid_namespace`](super::InUseOptions::trust_pid_namespace) may assume away.
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

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

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
}
