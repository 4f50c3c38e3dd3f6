//! How a removal runs: the threads, descriptors and counting it may use,
//! decided once from the caller's [`RemoveOptions`](super::RemoveOptions) and read by the
//! engine, the workers and the quarantine.

/// How a removal runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Worker threads, the calling one included (at least 1).
    pub(crate) threads: usize,
    /// Directory descriptors each worker keeps open.
    pub(crate) max_open: usize,
    /// Whether to `statx` every file to count the bytes freed.
    pub(crate) count_bytes: bool,
    /// Whether opening a quarantine looks for earlier runs' ones (and
    /// finishes what they left) when the one used last is gone.
    pub(crate) find_leftovers: bool,
}
