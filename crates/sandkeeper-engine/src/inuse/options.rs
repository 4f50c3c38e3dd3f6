//! What an in-use pass collects and what it assumes: [`InUseOptions`] and
//! the `SANDKEEPER_TRUST_PID_NAMESPACE` variable.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::InUse;
use crate::error::Result;

/// What to collect and what to assume; see [`InUse::collect`].
///
/// ```
/// use sandkeeper_engine::inuse::InUseOptions;
///
/// let mut options = InUseOptions::new();
/// options.ignore_pid(1).include_self(false);
/// ```
#[derive(Debug, Clone)]
pub struct InUseOptions {
    pub(super) ignore_pids: BTreeSet<u32>,
    pub(super) include_self: bool,
    pub(super) proc_root: PathBuf,
    pub(super) threads: usize,
    pub(super) trust_pid_namespace: Option<bool>,
    pub(super) assume_unseen_free: Option<bool>,
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

/// The environment variable that assumes every process that cannot be
/// inspected holds nothing, when [`InUseOptions::assume_unseen_free`] was
/// not called: `1` assumes it; unset does not; any other value is an
/// error.
pub const ASSUME_UNSEEN_FREE_ENV: &str = "SANDKEEPER_ASSUME_UNSEEN_FREE";

/// The value of [`ASSUME_UNSEEN_FREE_ENV`]: `Ok(false)` when unset.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for any
/// value but `1`, naming the variable and the valid values.
pub fn assume_unseen_free_from_env() -> Result<bool> {
    match std::env::var_os(ASSUME_UNSEEN_FREE_ENV) {
        None => Ok(false),
        Some(v) if v == "1" => Ok(true),
        Some(v) => Err(crate::error::Error::new(
            crate::ErrorKind::InvalidInput,
            format!(
                "{ASSUME_UNSEEN_FREE_ENV}={:?} is not valid: set it to 1 to assume that \
                 the processes this user cannot inspect use nothing under the roots, or unset it",
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
            assume_unseen_free: None,
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

    /// Vouches for *every* process that cannot be inspected, as
    /// [`InUseOptions::ignore_pid`] does for one: each is assumed to hold
    /// nothing and listed in [`InUse::assumed`], and
    /// [`InUse::assumes_unseen_free`] says so. Default: `false`, unless
    /// `SANDKEEPER_ASSUME_UNSEEN_FREE=1` ([`ASSUME_UNSEEN_FREE_ENV`]) is
    /// set; calling this overrides the variable.
    ///
    /// This is the one switch for what a normal user cannot prove: other
    /// users' and root's processes cannot be read, and a descriptor they
    /// opened before a `chmod`, or received over a unix socket, needs no
    /// access to the path. Kernel threads are never uninspectable, and
    /// blind spots (`hidepid`, a child pid namespace) are not affected.
    /// What is seen is still reported, and a regular file the caller owns
    /// can be asked directly ([`open_elsewhere`](super::open_elsewhere)),
    /// which sees every open for reading or writing but not one with
    /// access mode 3 (ioctl only) nor an `O_PATH` descriptor: those, like
    /// working, root and open directories, are what this assumes.
    pub fn assume_unseen_free(&mut self, yes: bool) -> &mut Self {
        self.assume_unseen_free = Some(yes);
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

/// Whether the pid namespace is trusted, by the one rule of every face
/// (the command, `watch`, the Python package): when the caller's flag, the
/// config file or [`TRUST_PID_NAMESPACE_ENV`] says so. The environment is
/// read, and a bad value refused, whatever the others say.
///
/// # Errors
///
/// As [`trust_pid_namespace_from_env`].
pub fn trust_pid_namespace_switch(flag: bool, config: bool) -> Result<bool> {
    let env = trust_pid_namespace_from_env()?;
    Ok(flag || config || env)
}

/// Whether the processes that cannot be inspected are assumed to hold
/// nothing, by the same rule as [`trust_pid_namespace_switch`]: the flag,
/// the config file or [`ASSUME_UNSEEN_FREE_ENV`].
///
/// # Errors
///
/// As [`assume_unseen_free_from_env`].
pub fn assume_unseen_free_switch(flag: bool, config: bool) -> Result<bool> {
    let env = assume_unseen_free_from_env()?;
    Ok(flag || config || env)
}
