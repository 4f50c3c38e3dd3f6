//! Platform code. The only place in the crate allowed to use `unsafe`.
//!
//! Everything that rustix or std wraps safely is called directly where it
//! is used; what remains here is what they do not offer.

#[cfg(target_os = "linux")]
pub(crate) mod fanotify;
#[cfg(target_os = "linux")]
pub(crate) mod loopdev;
#[cfg(target_os = "linux")]
pub(crate) mod namespace;
#[cfg(unix)]
pub(crate) mod sigmask;
#[cfg(unix)]
mod unix;

#[cfg(unix)]
pub(crate) use unix::with_sigttou_ignored;
#[cfg(target_os = "linux")]
pub(crate) use unix::{kcmp_files, ns_owner, unshare_mounts, write_lease_granted};
