//! Kernel users that the pass over processes cannot see by itself: loop
//! devices, the bound unix sockets of every network namespace, and mount
//! namespaces that no process lives in.
//!
//! Runs after [`super::procs::collect`], on what it found: the descriptors
//! that processes hold on `nsfs` (`mnt:[…]`, `net:[…]`) name namespaces
//! that may have no process at all.

use std::path::Path;

use super::{mounts, BlindSpotKind, Found};

/// Where loop devices are listed.
const SYS_BLOCK: &str = "/sys/block";

/// Where loop device nodes are opened (only `loopN`).
const DEV: &str = "/dev";

/// Adds loop devices, sockets and process-less mount namespaces to `found`.
pub(super) fn collect(_proc_root: &Path, found: &mut Found) {
    let mut unknown = Vec::new();
    match mounts::loop_devices(
        Path::new(SYS_BLOCK),
        Path::new(DEV),
        &mut found.kernel,
        &mut unknown,
    ) {
        Ok(()) => {}
        Err(e) => found.blind_spot(BlindSpotKind::LoopDevices, e.raw_os_error()),
    }
    for (number, errno) in unknown {
        found.blind_spot(BlindSpotKind::LoopDevice { number }, Some(errno));
    }
}
