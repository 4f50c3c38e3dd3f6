//! What one pass found ([`Found`]), before it is indexed: the raw holds,
//! kernel users, socket paths, failures and blind spots, merged from every
//! scanning thread.

use super::{
    pid_visibility, BlindSpot, BlindSpotKind, Holder, InspectStep, KernelUse, Uninspectable,
};

/// What one pass found, before indexing.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub(crate) holds: Vec<((u64, u64), Holder)>,
    pub(crate) kernel: Vec<KernelUse>,
    pub(crate) sockets: Vec<Vec<u8>>,
    pub(crate) uninspectable: Vec<Uninspectable>,
    pub(crate) blind_spots: Vec<BlindSpot>,
    pub(crate) processes: usize,
    /// Kernel threads (`PF_KTHREAD`): they live in the initial namespaces
    /// and hold no user file, so not being able to read them hides nothing.
    pub(crate) kernel_threads: Vec<u32>,
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
            filesystem: false,
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
        self.kernel_threads.extend(other.kernel_threads);
    }

    pub(crate) fn blind_spot(&mut self, kind: BlindSpotKind, errno: Option<i32>) {
        self.blind_spots.push(BlindSpot {
            kind,
            errno,
            detail: None,
        });
    }

    /// Records what [`pid_visibility::decide`] found.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) fn visibility(&mut self, spots: Vec<pid_visibility::Spot>) {
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
