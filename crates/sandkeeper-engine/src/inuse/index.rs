//! The index one pass builds ([`InUse`]) and its queries: holders by
//! inode, kernel users by inode and by path, bound sockets by path.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasherDefault, Hasher};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
use super::trust_pid_namespace_from_env;
use super::{
    BlindSpot, Found, Holder, InUseOptions, KernelUse, KernelUseKind, MountNamespace, Uninspectable,
};
use crate::error::Result;

/// The index: who holds which inode, which paths the kernel uses, which
/// socket paths are bound, and what could not be inspected.
///
/// Built once per scan by [`InUse::collect`]; queries are cheap and never
/// touch the system. It is a snapshot: a process that opens a file after
/// the collection is not in it (the reaper re-collects before removing).
#[derive(Debug, Clone)]
pub struct InUse {
    holders: Vec<Holder>,
    index: HashMap<(u64, u64), (u32, u32), BuildHasherDefault<InodeHasher>>,
    kernel: Vec<KernelUse>,
    kernel_inodes: Vec<((u64, u64), u32)>,
    kernel_paths: Vec<(Vec<u8>, u32)>,
    sockets: Vec<PathBuf>,
    socket_keys: Vec<(Vec<u8>, u32)>,
    uninspectable: Vec<Uninspectable>,
    assumed: Vec<Uninspectable>,
    blind_spots: Vec<BlindSpot>,
    assumed_blind_spots: Vec<BlindSpot>,
    assumes_unseen_free: bool,
    processes: usize,
}

impl InUse {
    /// Scans `/proc` (and `mountinfo`, `/proc/net/unix`, `/sys/block`) once.
    ///
    /// Per-process failures do not fail the collection: they make the index
    /// incomplete ([`InUse::uninspectable`]).
    ///
    /// # Errors
    ///
    /// Only when procfs itself is unusable: the proc root cannot be opened
    /// or listed, is not a procfs, or the caller's own `mountinfo` cannot be
    /// read; and [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// when [`InUseOptions::trust_pid_namespace`] was not called and
    /// `SANDKEEPER_TRUST_PID_NAMESPACE` has a value other than `1`.
    ///
    /// # Platform behavior
    ///
    /// Linux only; elsewhere [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    pub fn collect(opts: &InUseOptions) -> Result<InUse> {
        #[cfg(target_os = "linux")]
        {
            let threads = match opts.threads {
                0 => super::procs::auto_threads(),
                n => n,
            };
            let trust = match opts.trust_pid_namespace {
                Some(yes) => yes,
                None => trust_pid_namespace_from_env()?,
            };
            let mut found = super::procs::collect(&opts.proc_root, opts.include_self, threads)?;
            super::namespaces::collect(&opts.proc_root, &mut found);
            // Trusting the pid namespace turns its blind spots into
            // assumptions, which the output reports.
            let (assumed, blind): (Vec<_>, Vec<_>) = std::mem::take(&mut found.blind_spots)
                .into_iter()
                .partition(|b| trust && b.is_pid_namespace());
            found.blind_spots = blind;
            let assume_unseen = match opts.assume_unseen_free {
                Some(yes) => yes,
                None => super::options::assume_unseen_free_from_env()?,
            };
            let mut index = InUse::from_found(found, &opts.ignore_pids, assume_unseen);
            index.assumed_blind_spots = assumed;
            Ok(index)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err(crate::error::Error::new(
                crate::ErrorKind::Unsupported,
                "finding what processes hold needs Linux /proc",
            )
            .at(&opts.proc_root))
        }
    }

    /// The processes holding the inode `(dev, ino)`: by descriptor,
    /// working or root directory, executable or mapping. Empty if none.
    ///
    /// A process appears once per way it holds the inode (once per
    /// descriptor; mappings once in all), ordered by pid, then as found.
    /// A hash lookup.
    pub fn holders(&self, dev: u64, ino: u64) -> &[Holder] {
        match self.index.get(&(dev, ino)) {
            Some(&(start, len)) => &self.holders[start as usize..(start + len) as usize],
            None => &[],
        }
    }

    /// The kernel users whose path resolved to the inode `(dev, ino)` when
    /// collected: a mount point or bind mount source (the root of what is
    /// mounted), an overlay layer, a loop backing file.
    ///
    /// A bound unix socket is matched by the low 32 bits of the inode
    /// number, all that the kernel reports for it: on a filesystem with
    /// larger inode numbers another file may match too (which can only
    /// make an entry look in use).
    pub fn kernel_users_of(&self, dev: u64, ino: u64) -> impl Iterator<Item = &KernelUse> + '_ {
        let exact = self.kernel_inodes_at((dev, ino));
        // Only the sockets among the uses of the truncated number.
        let truncated = if ino > u64::from(u32::MAX) {
            self.kernel_inodes_at((dev, ino & u64::from(u32::MAX)))
        } else {
            &[]
        };
        exact.iter().map(|&(_, i)| &self.kernel[i as usize]).chain(
            truncated
                .iter()
                .map(|&(_, i)| &self.kernel[i as usize])
                .filter(|k| matches!(k.kind, KernelUseKind::UnixSocket { .. })),
        )
    }

    /// The entries of `kernel_inodes` for `key`.
    fn kernel_inodes_at(&self, key: (u64, u64)) -> &[((u64, u64), u32)] {
        let start = self.kernel_inodes.partition_point(|(k, _)| *k < key);
        let len = self.kernel_inodes[start..]
            .iter()
            .take_while(|(k, _)| *k == key)
            .count();
        &self.kernel_inodes[start..start + len]
    }

    /// Whether any process or kernel user holds the inode `(dev, ino)`.
    pub fn is_held(&self, dev: u64, ino: u64) -> bool {
        !self.holders(dev, ino).is_empty() || self.kernel_users_of(dev, ino).next().is_some()
    }

    /// The kernel users whose path is `entry` or lies under it, by path
    /// components (`/tmp/a` does not contain `/tmp/ab`), in path order.
    ///
    /// Paths are compared after collapsing `//` and `.` and resolving `..`
    /// lexically; a relative `entry` is made absolute against the current
    /// directory. Relative kernel paths never match.
    pub fn kernel_users_under(&self, entry: &Path) -> Vec<&KernelUse> {
        under(&self.kernel_paths, entry)
            .into_iter()
            .map(|i| &self.kernel[i as usize])
            .collect()
    }

    /// The kernel users and bound sockets that lie under the directory
    /// `dir`, for asking about each of its entries by name (as
    /// [`InUse::kernel_users_under`] and [`InUse::socket_paths_under`] of
    /// `dir/name`): the directory's path is made absolute once, and an
    /// entry costs no lookup at all when nothing lies under `dir`, as under
    /// most roots.
    pub(crate) fn paths_within(&self, dir: &Path) -> PathsWithin<'_> {
        let prefix = std::path::absolute(dir)
            .ok()
            .and_then(|abs| normalize_absolute(abs.as_os_str().as_bytes()))
            .map(|mut key| {
                if key != b"/" {
                    key.push(b'/');
                }
                key
            });
        let within = |keys: &'_ [(Vec<u8>, u32)]| -> std::ops::Range<usize> {
            let Some(prefix) = &prefix else {
                return 0..0;
            };
            // Sorted, so the keys that start with `prefix` are one run.
            let start = keys.partition_point(|(x, _)| x.as_slice() < prefix.as_slice());
            let len = keys[start..].partition_point(|(x, _)| x.starts_with(prefix));
            start..start + len
        };
        PathsWithin {
            kernel: &self.kernel,
            kernel_paths: &self.kernel_paths[within(&self.kernel_paths)],
            sockets: &self.sockets,
            socket_keys: &self.socket_keys[within(&self.socket_keys)],
            prefix: prefix.unwrap_or_default(),
        }
    }

    /// Every kernel user found, in path order.
    pub fn kernel_users(&self) -> &[KernelUse] {
        &self.kernel
    }

    /// The bound unix socket paths that are `entry` or lie under it
    /// (compared as for [`InUse::kernel_users_under`]), in path order.
    pub fn socket_paths_under(&self, entry: &Path) -> Vec<&Path> {
        under(&self.socket_keys, entry)
            .into_iter()
            .map(|i| self.sockets[i as usize].as_path())
            .collect()
    }

    /// Every bound pathname socket in the reader's network namespace,
    /// relative ones included; abstract sockets are left out.
    pub fn socket_paths(&self) -> &[PathBuf] {
        &self.sockets
    }

    /// The processes that could not be (fully) inspected and were not
    /// vouched for, by pid.
    pub fn uninspectable(&self) -> &[Uninspectable] {
        &self.uninspectable
    }

    /// The uninspectable processes that were vouched for
    /// ([`InUseOptions::ignore_pid`]) and are assumed to hold nothing.
    pub fn assumed(&self) -> &[Uninspectable] {
        &self.assumed
    }

    /// Whether every process that could not be inspected was assumed to
    /// hold nothing ([`InUseOptions::assume_unseen_free`],
    /// `SANDKEEPER_ASSUME_UNSEEN_FREE=1`): then [`InUse::assumed`] lists
    /// them all, and the output should say so.
    pub fn assumes_unseen_free(&self) -> bool {
        self.assumes_unseen_free
    }

    /// Whether some process's holdings were not read — it could not be
    /// inspected, or it was vouched for — so that a regular file the
    /// caller owns is worth asking the kernel about
    /// ([`open_elsewhere`](super::open_elsewhere)): a refused lease then
    /// shows it open in a process nobody could read.
    pub fn has_unread_processes(&self) -> bool {
        !self.uninspectable.is_empty() || !self.assumed.is_empty()
    }

    /// What hides the holders of every process; see [`BlindSpotKind`](super::BlindSpotKind).
    pub fn blind_spots(&self) -> &[BlindSpot] {
        &self.blind_spots
    }

    /// The blind spots that were assumed away because the pid namespace
    /// was trusted ([`InUseOptions::trust_pid_namespace`]): what is not
    /// seen, and assumed to use nothing.
    pub fn assumed_blind_spots(&self) -> &[BlindSpot] {
        &self.assumed_blind_spots
    }

    /// Whether every process could be inspected (or was vouched for) and
    /// nothing was hidden: only then does "no holder" mean "not in use".
    pub fn is_complete(&self) -> bool {
        self.uninspectable.is_empty() && self.blind_spots.is_empty()
    }

    /// How many processes were looked at (the caller and processes that
    /// exited during the scan not counted).
    pub fn process_count(&self) -> usize {
        self.processes
    }

    /// Builds the index from the raw findings.
    fn from_found(found: Found, ignore_pids: &BTreeSet<u32>, assume_unseen: bool) -> InUse {
        let Found {
            mut holds,
            mut kernel,
            sockets,
            uninspectable: failed,
            blind_spots,
            processes,
            kernel_threads: _,
        } = found;

        // Group holds by inode, then pid. The sort is stable, so each
        // process's holds stay in scan order; drop exact repeats (same pid,
        // same way).
        holds.sort_by_key(|(key, holder)| (*key, holder.pid));
        holds.dedup_by(|b, a| a.0 == b.0 && a.1.pid == b.1.pid && a.1.how == b.1.how);
        let mut index = HashMap::with_capacity_and_hasher(holds.len(), Default::default());
        let mut holders = Vec::with_capacity(holds.len());
        for (key, holder) in holds {
            let at = holders.len() as u32;
            index
                .entry(key)
                .and_modify(|range: &mut (u32, u32)| range.1 += 1)
                .or_insert((at, 1));
            holders.push(holder);
        }

        kernel.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        kernel.dedup();
        let mut kernel_inodes: Vec<((u64, u64), u32)> = kernel
            .iter()
            .enumerate()
            .filter_map(|(i, k)| Some((k.inode?, i as u32)))
            .collect();
        kernel_inodes.sort_unstable();
        // Sockets are matched by path through `sockets` (below), not twice.
        let kernel_paths: Vec<(Vec<u8>, u32)> = path_keys(kernel.iter().map(|k| match k.kind {
            KernelUseKind::UnixSocket { .. } => &b""[..],
            _ => k.path.as_os_str().as_bytes(),
        }));

        let mut sockets: Vec<PathBuf> = sockets
            .into_iter()
            .map(|b| PathBuf::from(OsString::from_vec(b)))
            .collect();
        sockets.sort();
        sockets.dedup();
        let socket_keys = path_keys(sockets.iter().map(|p| p.as_os_str().as_bytes()));

        let mut failed = failed;
        failed.sort_by_key(|u| u.pid);
        let (assumed, uninspectable) = failed
            .into_iter()
            .partition(|u: &Uninspectable| assume_unseen || ignore_pids.contains(&u.pid));

        InUse {
            holders,
            index,
            kernel,
            kernel_inodes,
            kernel_paths,
            sockets,
            socket_keys,
            uninspectable,
            assumed,
            blind_spots,
            assumed_blind_spots: Vec::new(),
            assumes_unseen_free: assume_unseen,
            processes,
        }
    }
}

impl KernelUse {
    /// Path order first; the rest only makes equal uses adjacent.
    #[allow(clippy::type_complexity)]
    fn sort_key(
        &self,
    ) -> (
        &[u8],
        MountNamespace,
        &KernelUseKind,
        &Option<PathBuf>,
        Option<(u64, u64)>,
        bool,
        &Option<String>,
    ) {
        (
            self.path.as_os_str().as_bytes(),
            self.namespace,
            &self.kind,
            &self.mount_point,
            self.inode,
            self.deleted,
            &self.fstype,
        )
    }
}

/// Sorted `(normalized absolute path, index)` pairs for prefix queries;
/// relative paths are left out.
fn path_keys<'a>(paths: impl Iterator<Item = &'a [u8]>) -> Vec<(Vec<u8>, u32)> {
    let mut keys: Vec<(Vec<u8>, u32)> = paths
        .enumerate()
        .filter_map(|(i, p)| Some((normalize_absolute(p)?, i as u32)))
        .collect();
    keys.sort_unstable();
    keys
}

/// The indices of `keys` (sorted normalized paths) at or under `entry`, in
/// path order.
fn under(keys: &[(Vec<u8>, u32)], entry: &Path) -> Vec<u32> {
    let entry = std::path::absolute(entry)
        .ok()
        .and_then(|abs| normalize_absolute(abs.as_os_str().as_bytes()));
    match entry {
        Some(key) => under_key(keys, key),
        None => Vec::new(),
    }
}

/// The kernel users and sockets under one directory
/// ([`InUse::paths_within`]).
pub(crate) struct PathsWithin<'a> {
    kernel: &'a [KernelUse],
    /// The keys of `kernel` that lie under the directory.
    kernel_paths: &'a [(Vec<u8>, u32)],
    sockets: &'a [PathBuf],
    /// The keys of `sockets` that lie under the directory.
    socket_keys: &'a [(Vec<u8>, u32)],
    /// The directory's normalized absolute path and a `/`.
    prefix: Vec<u8>,
}

impl PathsWithin<'_> {
    /// As [`InUse::kernel_users_under`] of the directory's entry `name`.
    pub(crate) fn kernel_users_under(&self, name: &OsStr) -> Vec<&KernelUse> {
        self.under(self.kernel_paths, name)
            .into_iter()
            .map(|i| &self.kernel[i as usize])
            .collect()
    }

    /// As [`InUse::socket_paths_under`] of the directory's entry `name`.
    pub(crate) fn socket_paths_under(&self, name: &OsStr) -> Vec<&Path> {
        self.under(self.socket_keys, name)
            .into_iter()
            .map(|i| self.sockets[i as usize].as_path())
            .collect()
    }

    fn under(&self, keys: &[(Vec<u8>, u32)], name: &OsStr) -> Vec<u32> {
        if keys.is_empty() {
            return Vec::new();
        }
        // A name is one component (never `.` or `..`): the entry's key is
        // the prefix and the name, already normal.
        let mut key = Vec::with_capacity(self.prefix.len() + name.len());
        key.extend_from_slice(&self.prefix);
        key.extend_from_slice(name.as_bytes());
        under_key(keys, key)
    }
}

/// The indexes of `keys` (sorted) that are the normalized absolute path
/// `key` or lie under it.
fn under_key(keys: &[(Vec<u8>, u32)], mut key: Vec<u8>) -> Vec<u32> {
    if key == b"/" {
        return keys.iter().map(|&(_, i)| i).collect();
    }
    let first = |k: &[u8]| keys.partition_point(|(x, _)| x.as_slice() < k);
    // Sorted: `e`, then siblings such as `e-1` and `e.x` ('-' and '.' sort
    // before '/'), then everything under `e/`, which ends before `e0`.
    let exact = first(&key)..keys.partition_point(|(x, _)| x.as_slice() <= key.as_slice());
    key.push(b'/');
    let below_start = first(&key);
    key.pop();
    key.push(b'0');
    let below = below_start..first(&key);
    keys[exact]
        .iter()
        .chain(&keys[below])
        .map(|&(_, i)| i)
        .collect()
}

/// An absolute path with `//` and `.` collapsed, `..` resolved lexically and
/// no trailing `/`; `None` for relative paths.
fn normalize_absolute(path: &[u8]) -> Option<Vec<u8>> {
    if path.first() != Some(&b'/') {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(path.len());
    for part in path.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                let cut = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(cut);
            }
            _ => {
                out.push(b'/');
                out.extend_from_slice(part);
            }
        }
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Some(out)
}

/// A cheap hash for `(device, inode)` keys (the multiply-rotate of
/// rustc's FxHash). Inode numbers are handed out by the kernel, not chosen
/// by users, so hash flooding is not a concern; the walker looks up every
/// inode of large trees.
#[derive(Default)]
struct InodeHasher(u64);

impl Hasher for InodeHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        const K: u64 = 0xf135_7aea_2e62_a9c5;
        self.0 = self.0.wrapping_add(n).wrapping_mul(K);
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)] // table rows are tuples
mod tests {
    use super::*;
    use crate::inuse::*;
    use std::io;
    use std::sync::Arc;

    #[test]
    fn normalize_absolute_cases() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("root", "/", Some("/")),
            ("plain", "/tmp/a", Some("/tmp/a")),
            ("trailing slash", "/tmp/a/", Some("/tmp/a")),
            ("double slash", "//tmp//a", Some("/tmp/a")),
            ("dot", "/tmp/./a/.", Some("/tmp/a")),
            ("dotdot", "/tmp/x/../a", Some("/tmp/a")),
            ("dotdot above root", "/../a", Some("/a")),
            ("relative", "tmp/a", None),
            ("empty", "", None),
        ];
        for (name, input, want) in cases {
            let got = normalize_absolute(input.as_bytes());
            assert_eq!(got.as_deref(), want.map(str::as_bytes), "{name}");
        }
    }

    fn index_with_paths(paths: &[&str]) -> InUse {
        let mut found = Found::default();
        for p in paths {
            found.kernel.push(KernelUse {
                kind: KernelUseKind::MountPoint,
                path: PathBuf::from(p),
                inode: None,
                deleted: false,
                mount_point: Some(PathBuf::from(p)),
                fstype: Some("tmpfs".into()),
                namespace: MountNamespace::Own,
                device: None,
            });
            found.sockets.push(p.as_bytes().to_vec());
        }
        InUse::from_found(found, &BTreeSet::new(), false)
    }

    #[test]
    fn under_matches_components_not_prefixes() {
        let index = index_with_paths(&[
            "/tmp/a",
            "/tmp/a/b",
            "/tmp/a/b/c",
            "/tmp/ab",
            "/tmp/a-1",
            "/tmp/a.x/y",
            "/tmp/b",
            "relative/a",
            "/",
        ]);
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "entry itself and below",
                "/tmp/a",
                &["/tmp/a", "/tmp/a/b", "/tmp/a/b/c"],
            ),
            (
                "trailing slash",
                "/tmp/a/",
                &["/tmp/a", "/tmp/a/b", "/tmp/a/b/c"],
            ),
            ("deeper entry", "/tmp/a/b", &["/tmp/a/b", "/tmp/a/b/c"]),
            ("sibling with suffix", "/tmp/ab", &["/tmp/ab"]),
            ("dash sibling", "/tmp/a-1", &["/tmp/a-1"]),
            ("nothing under", "/tmp/zz", &[]),
            ("prefix of a name", "/tmp/a.", &[]),
        ];
        for (name, entry, want) in cases {
            let got: Vec<&Path> = index
                .kernel_users_under(Path::new(entry))
                .into_iter()
                .map(|k| k.path.as_path())
                .collect();
            let want: Vec<&Path> = want.iter().map(Path::new).collect();
            assert_eq!(got, want, "kernel: {name}");
            assert_eq!(
                index.socket_paths_under(Path::new(entry)),
                want,
                "sockets: {name}"
            );
        }
        // The root contains every absolute path, but no relative one.
        assert_eq!(index.kernel_users_under(Path::new("/")).len(), 8);
        assert_eq!(index.socket_paths().len(), 9);
    }

    #[test]
    fn paths_within_a_directory_answer_as_the_full_paths_do() {
        let index = index_with_paths(&[
            "/tmp/a",
            "/tmp/a/b",
            "/tmp/a/b/c",
            "/tmp/ab",
            "/tmp/a-1",
            "/tmp/a.x/y",
            "/tmp/b",
            "/tmpx/a",
            "/tm",
            "relative/a",
            "/",
        ]);
        let names = ["a", "ab", "a-1", "a.x", "b", "zz", "a.", "tmp", "tmpx"];
        for dir in [
            "/tmp",
            "/tmp/",
            "//tmp/.",
            "/tmp/a",
            "/",
            "/nowhere",
            "/tmp/x/..",
        ] {
            let within = index.paths_within(Path::new(dir));
            for name in names {
                let full = Path::new(dir).join(name);
                let want: Vec<&Path> = index
                    .kernel_users_under(&full)
                    .into_iter()
                    .map(|k| k.path.as_path())
                    .collect();
                let got: Vec<&Path> = within
                    .kernel_users_under(OsStr::new(name))
                    .into_iter()
                    .map(|k| k.path.as_path())
                    .collect();
                assert_eq!(got, want, "kernel users of {dir} + {name}");
                assert_eq!(
                    within.socket_paths_under(OsStr::new(name)),
                    index.socket_paths_under(&full),
                    "sockets of {dir} + {name}"
                );
            }
        }
        // Nothing lies under an empty directory's path: no lookups.
        assert!(index
            .paths_within(Path::new("/nowhere"))
            .kernel_paths
            .is_empty());
    }

    #[test]
    fn holders_are_grouped_and_deduplicated() {
        let comm: Arc<str> = Arc::from("sleep");
        let h = |pid, how| Holder {
            pid,
            comm: comm.clone(),
            how,
        };
        let found = Found {
            holds: vec![
                ((1, 10), h(5, HoldKind::Fd(3))),
                ((1, 11), h(5, HoldKind::Cwd)),
                ((1, 10), h(5, HoldKind::Mmap)),
                ((1, 10), h(5, HoldKind::Mmap)),
                ((1, 10), h(7, HoldKind::Fd(0))),
                ((2, 10), h(7, HoldKind::Exe)),
            ],
            ..Found::default()
        };
        let index = InUse::from_found(found, &BTreeSet::new(), false);
        let hows = |dev, ino| -> Vec<(u32, HoldKind)> {
            index
                .holders(dev, ino)
                .iter()
                .map(|h| (h.pid, h.how))
                .collect()
        };
        assert_eq!(
            hows(1, 10),
            vec![
                (5, HoldKind::Fd(3)),
                (5, HoldKind::Mmap),
                (7, HoldKind::Fd(0))
            ]
        );
        assert_eq!(hows(1, 11), vec![(5, HoldKind::Cwd)]);
        assert_eq!(hows(2, 10), vec![(7, HoldKind::Exe)]);
        assert!(hows(2, 11).is_empty());
        assert!(index.is_held(1, 11) && !index.is_held(9, 9));
    }

    #[test]
    fn vouched_pids_move_to_assumed() {
        let mut found = Found::default();
        found.uninspectable(1, Some("init"), InspectStep::FdTable, 13);
        found.uninspectable(42, None, InspectStep::Fd(3), 1);
        let index = InUse::from_found(found, &BTreeSet::from([1, 99]), false);
        assert!(!index.is_complete());
        assert_eq!(
            index.assumed().iter().map(|u| u.pid).collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(
            index
                .uninspectable()
                .iter()
                .map(|u| u.pid)
                .collect::<Vec<_>>(),
            [42]
        );
        let text = index.uninspectable()[0].to_string();
        assert_eq!(
            text,
            format!(
                "pid 42: cannot inspect its fd 3: {}",
                io::Error::from_raw_os_error(1)
            )
        );

        let mut found = Found::default();
        found.uninspectable(1, Some("init"), InspectStep::FdTable, 13);
        let index = InUse::from_found(found, &BTreeSet::from([1]), false);
        assert!(index.is_complete());
        assert!(!index.assumes_unseen_free());

        // Assuming the unseen free vouches for every one of them, and says so.
        let mut found = Found::default();
        found.uninspectable(1, Some("init"), InspectStep::FdTable, 13);
        found.uninspectable(42, None, InspectStep::Fd(3), 1);
        let index = InUse::from_found(found, &BTreeSet::new(), true);
        assert!(index.is_complete() && index.assumes_unseen_free());
        let assumed: Vec<u32> = index.assumed().iter().map(|u| u.pid).collect();
        assert_eq!(assumed, [1, 42]);
    }

    #[test]
    fn sockets_match_by_the_low_32_bits_of_the_inode() {
        let mut found = Found::default();
        found.kernel.push(KernelUse {
            kind: KernelUseKind::UnixSocket {
                network_namespace_of: None,
            },
            path: PathBuf::from("/tmp/e/s"),
            inode: Some((5, 0x2345)),
            deleted: false,
            mount_point: None,
            fstype: None,
            namespace: MountNamespace::Own,
            device: None,
        });
        found.kernel.push(KernelUse {
            kind: KernelUseKind::LoopBackingFile {
                device: "loop0".into(),
            },
            path: PathBuf::from("/tmp/e/img"),
            inode: Some((5, 0x6789)),
            deleted: false,
            mount_point: None,
            fstype: None,
            namespace: MountNamespace::Own,
            device: None,
        });
        let index = InUse::from_found(found, &BTreeSet::new(), false);
        assert_eq!(index.kernel_users_of(5, 0x2345).count(), 1, "exact");
        assert_eq!(
            index.kernel_users_of(5, 0x7_0000_2345).count(),
            1,
            "truncated"
        );
        assert_eq!(index.kernel_users_of(6, 0x2345).count(), 0, "other device");
        assert_eq!(
            index.kernel_users_of(5, 0x1_0000_6789).count(),
            0,
            "only sockets match truncated"
        );
        // Sockets match by path through socket_paths_under only.
        assert!(index.kernel_users_under(Path::new("/tmp/e")).len() == 1);
    }
}
