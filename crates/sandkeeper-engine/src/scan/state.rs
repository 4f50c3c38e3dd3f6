//! The state of a top-level entry, and why: the audit's vocabulary.

use std::fmt;

use crate::inuse::BlindSpotKind;

/// The state of a top-level entry of a root.
///
/// | state | meaning | reapable |
/// |---|---|---|
/// | `live` | its lease lock is held (by anyone) | never |
/// | `in_use` | a process or the kernel uses something inside | never |
/// | `orphaned` | lease present, lock free, nothing inside in use | yes |
/// | `idle` | no lease (unmanaged), nothing inside in use | only by an explicit rule |
/// | `unknown` | could not tell: fail closed | never |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntryState {
    /// The lease lock is held.
    Live,
    /// Something uses it: a process's fd, cwd, root, exe or mapping, a
    /// bound unix socket, a mount point, or a mount, loop device or overlay
    /// whose source is inside.
    InUse,
    /// A lease whose owner is gone, and nothing inside is in use.
    Orphaned,
    /// No lease, and nothing inside is in use.
    Idle,
    /// Could not tell; never removed.
    Unknown,
}

impl EntryState {
    /// All states, in report order.
    pub const ALL: [EntryState; 5] = [
        EntryState::Live,
        EntryState::InUse,
        EntryState::Orphaned,
        EntryState::Idle,
        EntryState::Unknown,
    ];

    /// The name used in output and JSON: `live`, `in_use`, `orphaned`,
    /// `idle`, `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryState::Live => "live",
            EntryState::InUse => "in_use",
            EntryState::Orphaned => "orphaned",
            EntryState::Idle => "idle",
            EntryState::Unknown => "unknown",
        }
    }

    /// Whether a reap may ever remove an entry in this state (`orphaned`
    /// always, `idle` only when a rule selects it).
    pub fn is_reclaimable(self) -> bool {
        matches!(self, EntryState::Orphaned | EntryState::Idle)
    }
}

impl fmt::Display for EntryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an entry is in its state, for `--verbose` output and `explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateReason {
    /// The lease lock is held; the pids are the holders from `/proc/locks`.
    LockHeld {
        /// Holders named by `/proc/locks` (may be empty).
        pids: Vec<u32>,
    },
    /// The entry could not be opened, and its record names a running
    /// owner.
    RecordOwnerAlive,
    /// Processes or the kernel use something inside (see the entry's
    /// holders).
    Held,
    /// The lease is free and nothing inside is in use.
    LeaseFree,
    /// No lease and nothing inside in use.
    NoLease,
    /// Some processes could not be inspected, so something inside may be
    /// in use unseen.
    UninspectableProcesses {
        /// How many processes could not be inspected.
        count: usize,
    },
    /// Something hides processes or kernel users from the whole scan (a
    /// child pid namespace, `hidepid`, an unreadable socket table), so
    /// something inside may be in use unseen. Carries the first blind spot;
    /// the report lists them all.
    BlindSpot {
        /// What is not visible.
        kind: BlindSpotKind,
    },
    /// Regular files inside are open in a process that could not be
    /// inspected: the kernel refused a write lease on them
    /// ([`open_elsewhere`](crate::inuse::open_elsewhere)).
    OpenElsewhere {
        /// How many files.
        files: usize,
    },
    /// Processes that could not be inspected were assumed to hold nothing
    /// ([`InUseOptions::assume_unseen_free`](crate::inuse::InUseOptions::assume_unseen_free)),
    /// but regular files inside could not be asked whether they are open
    /// (another user's, unreadable by their owner, a filesystem without
    /// leases): the assumption covers only what no one can prove.
    UnaskedFiles {
        /// How many files.
        files: usize,
    },
    /// Part of the entry could not be read, so something inside may be in
    /// use unseen.
    UnreadableInside {
        /// How many places inside could not be read.
        errors: usize,
    },
    /// The entry could not be opened and the record did not settle
    /// whether its owner lives.
    UnopenableOwnerUnknown,
}

impl fmt::Display for StateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateReason::LockHeld { pids } if pids.is_empty() => {
                f.write_str("its lease lock is held")
            }
            StateReason::LockHeld { pids } => {
                let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
                write!(f, "its lease lock is held by pid {}", pids.join(", "))
            }
            StateReason::RecordOwnerAlive => {
                f.write_str("it cannot be opened, and its lease record names a running process")
            }
            StateReason::Held => f.write_str("something inside is in use"),
            StateReason::LeaseFree => {
                f.write_str("its lease is free (the owner is gone) and nothing inside is in use")
            }
            StateReason::NoLease => f.write_str("it has no lease and nothing inside is in use"),
            StateReason::UninspectableProcesses { count } => write!(
                f,
                "{} could not be inspected, so it may be in use unseen",
                crate::human::plural(*count as u64, "process", "processes")
            ),
            StateReason::BlindSpot { kind } => write!(
                f,
                "{}, so it may be in use unseen",
                match kind {
                    BlindSpotKind::PidNamespace | BlindSpotKind::ForeignProcfs =>
                        "processes outside the pid namespace of the procfs read are not visible",
                    BlindSpotKind::HiddenProcesses | BlindSpotKind::HiddenUnptraceable =>
                        "procfs hides processes (hidepid)",
                    BlindSpotKind::ProcfsOptions =>
                        "procfs may hide processes (its hidepid option is unknown)",
                    BlindSpotKind::Sockets | BlindSpotKind::SocketsOf { .. } =>
                        "bound unix sockets are unknown",
                    BlindSpotKind::LoopDevices | BlindSpotKind::LoopDevice { .. } =>
                        "loop devices are unknown",
                    BlindSpotKind::MountNamespace { .. } =>
                        "the mounts of a mount namespace are unknown",
                    BlindSpotKind::RelativeOverlayLayer
                    | BlindSpotKind::UnresolvedOverlayLayer
                    | BlindSpotKind::DetachedOverlay { .. } => "an overlay's layers are unknown",
                    BlindSpotKind::UnlistedFilesystem { .. } =>
                        "a filesystem a process uses is unknown",
                    BlindSpotKind::UnansweredLookup =>
                        "a mount's source is on a filesystem that does not answer",
                }
            ),
            StateReason::OpenElsewhere { files } => write!(
                f,
                "{files} file(s) inside are open in a process that could not be inspected (the kernel refused a write lease)"
            ),
            StateReason::UnaskedFiles { files } => write!(
                f,
                "{files} file(s) inside could not be asked whether they are open (not yours, unreadable, or no leases there), so it may be in use unseen"
            ),
            StateReason::UnreadableInside { errors } => write!(
                f,
                "{} inside could not be read, so it may be in use unseen",
                crate::human::plural(*errors as u64, "place", "places")
            ),
            StateReason::UnopenableOwnerUnknown => f.write_str(
                "it cannot be opened and its lease record does not tell whether the owner lives",
            ),
        }
    }
}

/// What is known about one entry, gathered by the scan.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// `Some(pids)` when the lease lock is held.
    pub(crate) lock_held: Option<Vec<u32>>,
    /// The entry could not be opened; `Some(alive)` is the record's verdict
    /// (`None`: undecided).
    pub(crate) unopenable: Option<Option<bool>>,
    /// A lease record file is present (valid or not).
    pub(crate) has_lease: bool,
    /// Processes, sockets or kernel objects use something inside.
    pub(crate) held: bool,
    /// Processes that could not be inspected (and were not vouched for).
    pub(crate) uninspectable: usize,
    /// The first of the scan's blind spots, if any.
    pub(crate) blind_spot: Option<BlindSpotKind>,
    /// Places inside that could not be read.
    pub(crate) unreadable: usize,
    /// Regular files inside that the kernel says are open elsewhere (a
    /// write lease refused); asked only when some process could not be
    /// inspected.
    pub(crate) open_elsewhere: usize,
    /// Regular files inside that could not be asked (not the caller's,
    /// unreadable), when some process could not be inspected.
    pub(crate) unasked: usize,
}

/// Decides the state. Precedence: a held lock, then anything seen in use,
/// then anything that prevents telling (fail closed), then the lease.
pub(crate) fn classify(facts: &Facts) -> (EntryState, StateReason) {
    if let Some(pids) = &facts.lock_held {
        return (
            EntryState::Live,
            StateReason::LockHeld { pids: pids.clone() },
        );
    }
    match facts.unopenable {
        Some(Some(true)) => return (EntryState::Live, StateReason::RecordOwnerAlive),
        Some(None) => return (EntryState::Unknown, StateReason::UnopenableOwnerUnknown),
        Some(Some(false)) | None => {}
    }
    if facts.held {
        return (EntryState::InUse, StateReason::Held);
    }
    if facts.open_elsewhere > 0 {
        return (
            EntryState::InUse,
            StateReason::OpenElsewhere {
                files: facts.open_elsewhere,
            },
        );
    }
    if let Some(kind) = facts.blind_spot {
        return (EntryState::Unknown, StateReason::BlindSpot { kind });
    }
    if facts.uninspectable > 0 {
        return (
            EntryState::Unknown,
            StateReason::UninspectableProcesses {
                count: facts.uninspectable,
            },
        );
    }
    if facts.unasked > 0 {
        return (
            EntryState::Unknown,
            StateReason::UnaskedFiles {
                files: facts.unasked,
            },
        );
    }
    if facts.unreadable > 0 {
        return (
            EntryState::Unknown,
            StateReason::UnreadableInside {
                errors: facts.unreadable,
            },
        );
    }
    if facts.has_lease {
        (EntryState::Orphaned, StateReason::LeaseFree)
    } else {
        (EntryState::Idle, StateReason::NoLease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        let base = Facts::default();
        let cases: Vec<(&str, Facts, EntryState)> = vec![
            ("bare dir", base.clone(), EntryState::Idle),
            (
                "free lease",
                Facts {
                    has_lease: true,
                    ..base.clone()
                },
                EntryState::Orphaned,
            ),
            (
                "held lock beats everything",
                Facts {
                    lock_held: Some(vec![7]),
                    held: true,
                    uninspectable: 3,
                    has_lease: true,
                    ..base.clone()
                },
                EntryState::Live,
            ),
            (
                "in use, even when some processes are hidden",
                Facts {
                    held: true,
                    uninspectable: 1,
                    ..base.clone()
                },
                EntryState::InUse,
            ),
            (
                "hidden processes: fail closed",
                Facts {
                    has_lease: true,
                    uninspectable: 1,
                    ..base.clone()
                },
                EntryState::Unknown,
            ),
            (
                "blind spot: fail closed",
                Facts {
                    has_lease: true,
                    blind_spot: Some(BlindSpotKind::PidNamespace),
                    ..base.clone()
                },
                EntryState::Unknown,
            ),
            (
                "in use beats a blind spot",
                Facts {
                    held: true,
                    blind_spot: Some(BlindSpotKind::HiddenUnptraceable),
                    ..base.clone()
                },
                EntryState::InUse,
            ),
            (
                "unreadable inside: fail closed",
                Facts {
                    unreadable: 2,
                    ..base.clone()
                },
                EntryState::Unknown,
            ),
            (
                "unopenable, record says alive",
                Facts {
                    unopenable: Some(Some(true)),
                    has_lease: true,
                    ..base.clone()
                },
                EntryState::Live,
            ),
            (
                "unopenable, record undecided",
                Facts {
                    unopenable: Some(None),
                    ..base.clone()
                },
                EntryState::Unknown,
            ),
            (
                "a file open elsewhere is in use, even with processes hidden",
                Facts {
                    open_elsewhere: 1,
                    uninspectable: 3,
                    has_lease: true,
                    ..base.clone()
                },
                EntryState::InUse,
            ),
            (
                "a file open elsewhere under a blind spot is still in use",
                Facts {
                    open_elsewhere: 2,
                    blind_spot: Some(BlindSpotKind::PidNamespace),
                    ..base.clone()
                },
                EntryState::InUse,
            ),
            (
                "assumed processes, but a file that could not be asked",
                Facts {
                    unasked: 1,
                    has_lease: true,
                    ..base.clone()
                },
                EntryState::Unknown,
            ),
            (
                "unopenable, record says dead",
                Facts {
                    unopenable: Some(Some(false)),
                    has_lease: true,
                    ..base.clone()
                },
                EntryState::Orphaned,
            ),
        ];
        for (name, facts, want) in cases {
            assert_eq!(classify(&facts).0, want, "{name}");
        }
    }

    #[test]
    fn reasons_read_well() {
        let text = StateReason::LockHeld { pids: vec![12, 34] }.to_string();
        assert_eq!(text, "its lease lock is held by pid 12, 34");
        assert!(StateReason::UninspectableProcesses { count: 1 }
            .to_string()
            .contains("1 process"));
    }
}
