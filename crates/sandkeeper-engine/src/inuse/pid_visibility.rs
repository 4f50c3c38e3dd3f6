//! Whether the procfs read shows every process that can reach the roots.
//!
//! Decided from what can be proven, failing closed:
//!
//! - **Our pid namespace is the initial one.** A procfs lists the processes
//!   of *its* pid namespace and those below it; a process above (the host,
//!   when we run in a container that shares `/tmp` with it) is never listed.
//!   The initial pid namespace has a fixed inode number on nsfs
//!   (`PROC_PID_INIT_INO`); every other namespace gets a dynamic one. So
//!   `/proc/self/ns/pid` on nsfs with that inode number proves that nothing
//!   is above us. `NSpid:` in `/proc/self/status` cannot prove it: it only
//!   lists the levels from the procfs's own namespace down, so a container's
//!   own `/proc` shows one level.
//! - **The procfs read is of our pid namespace.** It must list ourselves
//!   (`self` resolves to our pid): a procfs of a namespace below ours does
//!   not.
//! - Or, in place of both: **the procfs read is of the initial pid
//!   namespace**, whatever ours is (a container given the host's `/proc`):
//!   it lists a process (pid 1 or 2, `kthreadd`) whose `ns/pid` is the
//!   initial namespace. A procfs lists only processes of its own namespace
//!   and those below, so no procfs of another namespace can list one.
//! - **`hidepid` hides nothing from us.** The procfs's options are read
//!   from the `mountinfo` line with the mount id of the opened procfs
//!   (`statx` `STATX_MNT_ID`), not from a path. Spellings: `0`/`off`,
//!   `1`/`noaccess` (listed, but unreadable: such processes are reported
//!   one by one as uninspectable), `2`/`invisible` (unlisted unless we are
//!   in the exempt group, `gid=`, which the kernel omits from the options
//!   when it is 0 — so by default root is exempt), `4`/`ptraceable`
//!   (unlisted unless we may ptrace them, no exemption: what root may not
//!   ptrace is invisible, and that cannot be counted). An unknown value, or
//!   no `mountinfo` line for the mount, is a blind spot too. The `gid=`
//!   value is in the user namespace that owns the procfs's pid namespace;
//!   it is compared with our groups only when the procfs is of our own pid
//!   namespace, that namespace is owned by the initial user namespace
//!   (`NS_GET_USERNS`, fixed inode `PROC_USER_INIT_INO`), and so are we: then
//!   both are the same numbers.
//!
//! The first two are about the pid namespace boundary, and an operator who
//! knows better (a container that owns its `/tmp`, a test in its own pid
//! namespace over its own tmpfs) may trust it: those blind spots are then
//! [assumed](super::InUse::assumed_blind_spots), not blind.

use super::mountinfo::{self, parse_dec};
use super::BlindSpotKind;

/// `PROC_PID_INIT_INO`: the nsfs inode number of the initial pid namespace.
pub(super) const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
/// `PROC_USER_INIT_INO`: the nsfs inode number of the initial user
/// namespace.
pub(super) const PROC_USER_INIT_INO: u64 = 0xEFFF_FFFD;

/// A procfs's `hidepid=` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HidePid {
    /// `0`, `off`: every process is listed and readable as ptrace allows.
    Off,
    /// `1`, `noaccess`: listed, but unreadable unless ptraceable or exempt.
    NoAccess,
    /// `2`, `invisible`: unlisted unless ptraceable or exempt.
    Invisible,
    /// `4`, `ptraceable`: unlisted unless ptraceable; no exemption.
    Ptraceable,
    /// A value this code does not know.
    Unknown,
}

/// The options of one procfs mount that decide what it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcOptions {
    pub(super) hidepid: HidePid,
    /// The exempt group (`gid=`); 0 when the kernel shows none.
    pub(super) gid: Option<u32>,
}

/// Parses a procfs's superblock options (`rw,gid=27,hidepid=invisible`).
/// A `gid=` that is not a number is `None` (no exemption is proven).
pub(super) fn parse_proc_options(super_options: &[u8]) -> ProcOptions {
    let mut hidepid = HidePid::Off;
    let mut gid = Some(0);
    for option in super_options.split(|&b| b == b',') {
        if let Some(v) = option.strip_prefix(b"hidepid=") {
            hidepid = match v {
                b"0" | b"off" => HidePid::Off,
                b"1" | b"noaccess" => HidePid::NoAccess,
                b"2" | b"invisible" => HidePid::Invisible,
                b"4" | b"ptraceable" => HidePid::Ptraceable,
                _ => HidePid::Unknown,
            };
        } else if let Some(v) = option.strip_prefix(b"gid=") {
            gid = parse_dec(v);
        }
    }
    ProcOptions { hidepid, gid }
}

/// The filesystem type and superblock options of the mount with id
/// `mount_id` in a `mountinfo` text; `None` when no line has that id.
pub(super) fn mount_by_id(mountinfo: &[u8], mount_id: u64) -> Option<(Vec<u8>, Vec<u8>)> {
    mountinfo
        .split(|&b| b == b'\n')
        .filter(|line| {
            let id = line.split(|&b| b == b' ').next().unwrap_or_default();
            parse_dec::<u64>(id) == Some(mount_id)
        })
        .find_map(mountinfo::parse_mountinfo_line)
        .map(|m| (m.fstype, m.super_options))
}

/// What was found out about the procfs and ourselves.
#[derive(Debug, Clone)]
pub(super) struct Facts {
    /// `Some(true)` when our pid namespace is proven to be the initial one.
    pub(super) init_pid_ns: Option<bool>,
    /// `Some(true)` when our user namespace is proven to be the initial one.
    pub(super) init_user_ns: Option<bool>,
    /// `Some(true)` when our pid namespace is proven to be owned by the
    /// initial user namespace.
    pub(super) pid_ns_owned_by_init_user: Option<bool>,
    /// The procfs lists us under our own pid.
    pub(super) shows_self: bool,
    /// The procfs lists a process of the initial pid namespace, so it is
    /// that namespace's.
    pub(super) lists_init_process: bool,
    /// The options of the procfs's mount, if its `mountinfo` line was found.
    pub(super) options: Option<ProcOptions>,
}

/// One reason why processes may be missing, with what to say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spot {
    pub(super) kind: BlindSpotKind,
    pub(super) detail: Option<String>,
}

impl Spot {
    fn new(kind: BlindSpotKind, detail: Option<String>) -> Spot {
        Spot { kind, detail }
    }
}

/// Decides what the procfs may hide; `in_group(gid)` says whether we are
/// in a group (as the kernel's `in_group_p`).
pub(super) fn decide(facts: &Facts, in_group: impl Fn(u32) -> bool) -> Vec<Spot> {
    let mut spots = Vec::new();
    let procfs_is_initial =
        facts.lists_init_process || (facts.init_pid_ns == Some(true) && facts.shows_self);
    if !procfs_is_initial {
        match facts.init_pid_ns {
            Some(true) => {}
            Some(false) => spots.push(Spot::new(BlindSpotKind::PidNamespace, None)),
            None => spots.push(Spot::new(
                BlindSpotKind::PidNamespace,
                Some("cannot tell which pid namespace this process is in".into()),
            )),
        }
        if !facts.shows_self {
            spots.push(Spot::new(BlindSpotKind::ForeignProcfs, None));
        }
    }
    let Some(options) = facts.options else {
        spots.push(Spot::new(
            BlindSpotKind::ProcfsOptions,
            Some("its mount is not in this process's mountinfo".into()),
        ));
        return spots;
    };
    match options.hidepid {
        HidePid::Off | HidePid::NoAccess => {}
        HidePid::Invisible => {
            // The exempt group is comparable with ours only when both are
            // numbers of the initial user namespace.
            let comparable = facts.init_user_ns == Some(true)
                && (procfs_is_initial
                    || (facts.shows_self && facts.pid_ns_owned_by_init_user == Some(true)));
            let exempt = comparable && options.gid.is_some_and(&in_group);
            if !exempt {
                let why = match options.gid {
                    _ if !comparable => {
                        "its gid= exemption cannot be checked from this namespace".to_owned()
                    }
                    Some(gid) => format!("this process is not in its exempt group (gid={gid})"),
                    None => "its gid= option is not a number".to_owned(),
                };
                spots.push(Spot::new(BlindSpotKind::HiddenProcesses, Some(why)));
            }
        }
        HidePid::Ptraceable => spots.push(Spot::new(BlindSpotKind::HiddenUnptraceable, None)),
        HidePid::Unknown => spots.push(Spot::new(
            BlindSpotKind::ProcfsOptions,
            Some("its hidepid= value is unknown".into()),
        )),
    }
    spots
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;

    #[test]
    fn proc_options_cases() {
        let o = |hidepid, gid| ProcOptions { hidepid, gid };
        let cases: &[(&str, &[u8], ProcOptions)] = &[
            ("plain", b"rw", o(HidePid::Off, Some(0))),
            ("off", b"rw,hidepid=off", o(HidePid::Off, Some(0))),
            ("numeric off", b"rw,hidepid=0", o(HidePid::Off, Some(0))),
            (
                "noaccess",
                b"rw,hidepid=noaccess",
                o(HidePid::NoAccess, Some(0)),
            ),
            (
                "numeric noaccess",
                b"rw,hidepid=1",
                o(HidePid::NoAccess, Some(0)),
            ),
            (
                "invisible",
                b"rw,hidepid=invisible",
                o(HidePid::Invisible, Some(0)),
            ),
            (
                "numeric invisible",
                b"rw,hidepid=2",
                o(HidePid::Invisible, Some(0)),
            ),
            (
                "ptraceable",
                b"rw,hidepid=ptraceable",
                o(HidePid::Ptraceable, Some(0)),
            ),
            (
                "numeric ptraceable",
                b"rw,hidepid=4",
                o(HidePid::Ptraceable, Some(0)),
            ),
            (
                "unknown value",
                b"rw,hidepid=7",
                o(HidePid::Unknown, Some(0)),
            ),
            (
                "gid before",
                b"rw,gid=27,hidepid=invisible",
                o(HidePid::Invisible, Some(27)),
            ),
            (
                "gid after, subset",
                b"rw,hidepid=2,subset=pid,gid=4",
                o(HidePid::Invisible, Some(4)),
            ),
            (
                "bad gid",
                b"rw,gid=x,hidepid=2",
                o(HidePid::Invisible, None),
            ),
            (
                "last wins",
                b"hidepid=2,hidepid=0",
                o(HidePid::Off, Some(0)),
            ),
        ];
        for (name, text, want) in cases {
            assert_eq!(parse_proc_options(text), *want, "{name}");
        }
    }

    #[test]
    fn mount_by_id_cases() {
        let text = b"22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                     220 22 0:99 / /proc rw,relatime - proc proc rw,hidepid=ptraceable\n\
                     2 1 0:5 / /x rw - tmpfs tmpfs rw\n";
        let (fstype, options) = mount_by_id(text, 220).unwrap();
        assert_eq!(
            (&fstype[..], &options[..]),
            (&b"proc"[..], &b"rw,hidepid=ptraceable"[..])
        );
        assert_eq!(mount_by_id(text, 22).unwrap().1, b"rw");
        assert_eq!(mount_by_id(text, 2).unwrap().0, b"tmpfs");
        assert!(mount_by_id(text, 27).is_none(), "a parent id is not an id");
        assert!(mount_by_id(text, 99).is_none());
    }

    #[test]
    fn decide_cases() {
        use BlindSpotKind::*;
        let seen = Facts {
            init_pid_ns: Some(true),
            init_user_ns: Some(true),
            pid_ns_owned_by_init_user: Some(true),
            shows_self: true,
            lists_init_process: false,
            options: Some(ProcOptions {
                hidepid: HidePid::Off,
                gid: Some(0),
            }),
        };
        let with = |hidepid, gid| Facts {
            options: Some(ProcOptions { hidepid, gid }),
            ..seen.clone()
        };
        let root = |gid: u32| gid == 0; // root's groups: 0 only
        let staff = |gid: u32| gid == 50;
        let cases: Vec<(&str, Facts, &dyn Fn(u32) -> bool, &[BlindSpotKind])> = vec![
            ("host, plain procfs", seen.clone(), &root, &[]),
            (
                "noaccess lists everyone",
                with(HidePid::NoAccess, Some(0)),
                &root,
                &[],
            ),
            (
                "invisible, root exempt by default gid",
                with(HidePid::Invisible, Some(0)),
                &root,
                &[],
            ),
            (
                "invisible, exempt by a supplementary group",
                with(HidePid::Invisible, Some(50)),
                &staff,
                &[],
            ),
            (
                "invisible, not in the group",
                with(HidePid::Invisible, Some(50)),
                &root,
                &[HiddenProcesses],
            ),
            (
                "invisible, gid unreadable",
                with(HidePid::Invisible, None),
                &root,
                &[HiddenProcesses],
            ),
            (
                "ptraceable: no exemption",
                with(HidePid::Ptraceable, Some(0)),
                &root,
                &[HiddenUnptraceable],
            ),
            (
                "unknown hidepid",
                with(HidePid::Unknown, Some(0)),
                &root,
                &[ProcfsOptions],
            ),
            (
                "child pid namespace",
                Facts {
                    init_pid_ns: Some(false),
                    ..seen.clone()
                },
                &root,
                &[PidNamespace],
            ),
            (
                "cannot tell the namespace",
                Facts {
                    init_pid_ns: None,
                    ..seen.clone()
                },
                &root,
                &[PidNamespace],
            ),
            (
                "procfs of another namespace",
                Facts {
                    shows_self: false,
                    ..seen.clone()
                },
                &root,
                &[ForeignProcfs],
            ),
            (
                "child namespace reading the host's procfs",
                Facts {
                    init_pid_ns: Some(false),
                    shows_self: false,
                    lists_init_process: true,
                    ..seen.clone()
                },
                &root,
                &[],
            ),
            (
                "the host's procfs, invisible, root exempt",
                Facts {
                    init_pid_ns: Some(false),
                    pid_ns_owned_by_init_user: None,
                    shows_self: false,
                    lists_init_process: true,
                    ..with(HidePid::Invisible, Some(0))
                },
                &root,
                &[],
            ),
            (
                "no mountinfo line",
                Facts {
                    options: None,
                    ..seen.clone()
                },
                &root,
                &[ProcfsOptions],
            ),
            (
                "child user namespace: gid not comparable",
                Facts {
                    init_user_ns: Some(false),
                    ..with(HidePid::Invisible, Some(0))
                },
                &root,
                &[HiddenProcesses],
            ),
            (
                "private pid namespace, exempt",
                Facts {
                    init_pid_ns: Some(false),
                    ..with(HidePid::Invisible, Some(0))
                },
                &root,
                &[PidNamespace],
            ),
            (
                "pid namespace of a user namespace: gid not comparable",
                Facts {
                    init_pid_ns: Some(false),
                    pid_ns_owned_by_init_user: Some(false),
                    ..with(HidePid::Invisible, Some(0))
                },
                &root,
                &[PidNamespace, HiddenProcesses],
            ),
            (
                "procfs of another namespace: gid not comparable",
                Facts {
                    shows_self: false,
                    ..with(HidePid::Invisible, Some(0))
                },
                &root,
                &[ForeignProcfs, HiddenProcesses],
            ),
        ];
        for (name, facts, in_group, want) in cases {
            let got: Vec<BlindSpotKind> = decide(&facts, in_group).iter().map(|s| s.kind).collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
