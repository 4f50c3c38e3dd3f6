//! A root's names within a memory budget: held whole while they fit it,
//! else listed again, window by window.
//!
//! Whoever creates entries chooses their names, up to 255 bytes each: a
//! million such names are 255 MB, more than the whole of a scan or a
//! reap is allowed (issue 25, item 8: under 128 MiB at a million
//! entries whatever the names' length). So a scan holds the names
//! ([`Names`], sorted) only while their bytes stay under the budget
//! ([`Scanner::name_memory`](super::Scanner::name_memory), 48 MiB by
//! default). Past it the first listing keeps a keyed 64-bit fingerprint
//! per name (8 bytes) instead, and the root is listed again:
//!
//! - once per **window** of the sorted names ([`Listing::windows`]): the
//!   smallest names above the last window's, as many as fit half the
//!   budget. Each window is grouped into families on its own and the
//!   families are merged by pattern, so a family that spans windows is
//!   one family as long as every window reads it alike (a heuristic that
//!   counts members, such as "a tag that takes few values", may read a
//!   window's share of a family differently: that is the price of the
//!   bound, and only roots past the budget pay it);
//! - for a reaper, once per **batch of names it needs back**
//!   ([`ScanNames::load`]): the entries it will claim or record, found by
//!   fingerprint, a batch's names at most a quarter of the budget.
//!
//! What the scan is made of is the first listing: a name made since is
//! no part of it (its fingerprint is not among the first listing's); one
//! gone by a later listing is a vanished entry, as if it had gone during
//! the walk; a rename is both. The fingerprints are std's SipHash with a
//! key drawn per listing, so names cannot be chosen to collide; two names
//! that collide by chance (about one pair in 2^44 roots of a million
//! names) are told apart where it matters, by the inode a reaper checks
//! before it moves anything ([`RemoveOptions::expect`](crate::remove::RemoveOptions::expect)).

use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap};
use std::ffi::OsStr;
use std::hash::BuildHasher;
use std::ops::ControlFlow;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::dirlist::{each_name, too_many, Names};
use crate::error::{Error, Result};

/// The default of [`Scanner::name_memory`](super::Scanner::name_memory):
/// the bytes of names a scan holds at once.
pub const NAME_MEMORY_DEFAULT: usize = 48 << 20;

/// The least [`Scanner::name_memory`](super::Scanner::name_memory) there
/// is: a window must hold a few of the longest names.
pub const NAME_MEMORY_MIN: usize = 16 << 10;

/// The environment variable that sets
/// [`Scanner::name_memory`](super::Scanner::name_memory) when it was not
/// called: bytes, or a number with `K`, `M` or `G` (binary multiples);
/// at least [`NAME_MEMORY_MIN`].
pub const NAME_MEMORY_ENV: &str = "SANDKEEPER_NAME_MEMORY";

/// The value of [`NAME_MEMORY_ENV`], [`NAME_MEMORY_DEFAULT`] when unset.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
/// value that is no size or is under [`NAME_MEMORY_MIN`], naming the
/// variable and what is valid.
pub fn name_memory_from_env() -> Result<usize> {
    let Some(value) = std::env::var_os(NAME_MEMORY_ENV) else {
        return Ok(NAME_MEMORY_DEFAULT);
    };
    parse_name_memory(&value.to_string_lossy())
}

/// A size as [`NAME_MEMORY_ENV`] takes it.
fn parse_name_memory(text: &str) -> Result<usize> {
    let (digits, unit) = match text.as_bytes().last() {
        Some(b'K' | b'k') => (&text[..text.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&text[..text.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    match digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
    {
        Some(bytes) if bytes >= NAME_MEMORY_MIN => Ok(bytes),
        _ => Err(Error::new(
            crate::ErrorKind::InvalidInput,
            format!(
                "{NAME_MEMORY_ENV}={text:?} is not valid: give the bytes of names a scan may hold \
                 at once, at least {NAME_MEMORY_MIN} (16K), e.g. 48M; or unset it for the default"
            ),
        )),
    }
}

/// What a held name costs against the budget: its bytes, where it ends
/// and its place in the sorted order (see [`Names`]).
fn held_cost(name: &[u8]) -> usize {
    name.len() + 8
}

/// What a name of `len` bytes costs in a window's heap: its bytes and its
/// box, with the allocator's rounding.
fn window_cost(len: usize) -> usize {
    len.next_multiple_of(16) + 32
}

/// Keyed fingerprints of names.
#[derive(Debug, Clone)]
struct Fingerprint(RandomState);

impl Fingerprint {
    fn of(&self, name: &[u8]) -> u64 {
        self.0.hash_one(name)
    }
}

/// A root's first listing: its names held, or their fingerprints.
pub(crate) enum Listing {
    /// Every name, sorted.
    Held(Names),
    /// Past the budget.
    Windowed(Windowed),
}

/// The first listing of a root past the budget.
pub(crate) struct Windowed {
    fingerprint: Fingerprint,
    /// The fingerprints of the first listing, sorted.
    listed: Vec<u64>,
    /// How many names it listed.
    count: usize,
    /// The bytes a window may take.
    window_bytes: usize,
    /// The bytes a batch of names loaded back may take.
    batch_bytes: usize,
}

/// Lists `dir`, keeping the names for which `keep` is true: held while
/// they cost at most `budget` bytes, else their fingerprints.
pub(crate) fn list_where(
    dir: BorrowedFd<'_>,
    path: &Path,
    budget: usize,
    mut keep: impl FnMut(&[u8]) -> bool,
) -> Result<Listing> {
    let mut names = Names::new();
    let mut held = 0usize;
    let mut windowed: Option<Windowed> = None;
    each_name(dir, path, |name| {
        if !keep(name) {
            return Ok(ControlFlow::Continue(()));
        }
        if let Some(w) = &mut windowed {
            w.listed.push(w.fingerprint.of(name));
            w.count += 1;
            return Ok(ControlFlow::Continue(()));
        }
        held += held_cost(name);
        if held <= budget {
            return match names.push(name) {
                true => Ok(ControlFlow::Continue(())),
                false => Err(too_many(path)),
            };
        }
        // Past the budget: the names held so far become fingerprints.
        let fingerprint = Fingerprint(RandomState::new());
        let mut listed = Vec::with_capacity(names.len() * 2);
        listed.extend(names.iter().map(|n| fingerprint.of(n.as_bytes())));
        listed.push(fingerprint.of(name));
        names = Names::new();
        windowed = Some(Windowed {
            count: listed.len(),
            fingerprint,
            listed,
            window_bytes: (budget / 2).max(NAME_MEMORY_MIN / 2),
            batch_bytes: (budget / 4).max(NAME_MEMORY_MIN / 4),
        });
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(match windowed {
        None => Listing::Held(names.sorted()),
        Some(mut w) => {
            w.listed.shrink_to_fit();
            w.listed.sort_unstable();
            Listing::Windowed(w)
        }
    })
}

impl Listing {
    /// How many names the first listing kept.
    pub(crate) fn len(&self) -> usize {
        match self {
            Listing::Held(names) => names.len(),
            Listing::Windowed(w) => w.count,
        }
    }

    /// Calls `each` with every window of the names in sorted order: the
    /// number of its first name among all and its names, sorted. Held
    /// names are one window. Then hands back what finds the names again
    /// by number ([`ScanNames`]).
    ///
    /// # Errors
    ///
    /// What `each` returns, or when the root cannot be listed again.
    pub(crate) fn windows(
        self,
        dir: BorrowedFd<'_>,
        path: &Path,
        mut each: impl FnMut(usize, &Names) -> Result<()>,
    ) -> Result<ScanNames> {
        let w = match self {
            Listing::Held(names) => {
                each(0, &names)?;
                return Ok(ScanNames::Held(names));
            }
            Listing::Windowed(w) => w,
        };
        let mut by_index = vec![0u64; w.count];
        let mut lens = vec![0u8; w.count];
        let mut first = 0usize;
        let mut after: Option<Box<[u8]>> = None;
        while first < w.count {
            let window = w.next_window(dir, path, after.as_deref())?;
            if window.len() == 0 {
                break;
            }
            // Never more than the first listing had: each name of a window
            // is one of its fingerprints, and no name is in two windows.
            let mut window = window;
            window.truncate(w.count - first);
            let take = window.len();
            for i in 0..take {
                let name = window.get(i).as_bytes();
                by_index[first + i] = w.fingerprint.of(name);
                lens[first + i] = u8::try_from(name.len()).unwrap_or(u8::MAX);
            }
            each(first, &window)?;
            after = Some(window.get(window.len() - 1).as_bytes().into());
            first += take;
        }
        Ok(ScanNames::Relisted(Relisted {
            fingerprint: w.fingerprint,
            by_index,
            lens,
            batch_bytes: w.batch_bytes,
            loaded: Names::new(),
            at: HashMap::new(),
        }))
    }
}

impl Windowed {
    /// The smallest names of the first listing above `after`, as many as
    /// fit a window (at least one), sorted.
    fn next_window(&self, dir: BorrowedFd<'_>, path: &Path, after: Option<&[u8]>) -> Result<Names> {
        // A max-heap of the window so far; past the budget its largest
        // goes, and nothing at or above what went can come in again.
        let mut heap: BinaryHeap<Box<[u8]>> = BinaryHeap::new();
        let mut bytes = 0usize;
        let mut ceiling: Option<Box<[u8]>> = None;
        each_name(dir, path, |name| {
            if after.is_some_and(|a| name <= a) || ceiling.as_deref().is_some_and(|c| name >= c) {
                return Ok(ControlFlow::Continue(()));
            }
            if self
                .listed
                .binary_search(&self.fingerprint.of(name))
                .is_err()
            {
                return Ok(ControlFlow::Continue(()));
            }
            bytes += window_cost(name.len());
            heap.push(name.into());
            while bytes > self.window_bytes && heap.len() > 1 {
                let top = heap.pop().expect("more than one");
                bytes -= window_cost(top.len());
                ceiling = Some(top);
            }
            Ok(ControlFlow::Continue(()))
        })?;
        let mut names = Names::new();
        for name in heap.into_sorted_vec() {
            if !names.push(&name) {
                return Err(too_many(path));
            }
        }
        Ok(names)
    }
}

/// What a scan hands a reaper to find its names by number: the names
/// themselves, or their fingerprints and a batch loaded back.
pub(crate) enum ScanNames {
    /// Every name, sorted.
    Held(Names),
    /// Past the budget.
    Relisted(Relisted),
}

/// Names found again by fingerprint, a batch at a time.
pub(crate) struct Relisted {
    fingerprint: Fingerprint,
    /// Per number, the name's fingerprint (0 where no name had it).
    by_index: Vec<u64>,
    /// Per number, the name's length (for the batches' sizes).
    lens: Vec<u8>,
    batch_bytes: usize,
    /// The batch loaded: names, and where each number's name is.
    loaded: Names,
    at: HashMap<u32, u32>,
}

impl ScanNames {
    /// No names.
    pub(crate) fn new() -> ScanNames {
        ScanNames::Held(Names::new())
    }

    /// How many numbers (names listed, vanished ones included).
    pub(crate) fn len(&self) -> usize {
        match self {
            ScanNames::Held(names) => names.len(),
            ScanNames::Relisted(r) => r.by_index.len(),
        }
    }

    /// Name number `i`: `None` when it is not loaded (or was not found
    /// again: gone, or renamed).
    pub(crate) fn get(&self, i: usize) -> Option<&OsStr> {
        match self {
            ScanNames::Held(names) => (i < names.len()).then(|| names.get(i)),
            ScanNames::Relisted(r) => {
                let &at = r.at.get(&u32::try_from(i).ok()?)?;
                Some(r.loaded.get(at as usize))
            }
        }
    }

    /// Cuts `numbers` into batches whose names can be loaded at once
    /// (held names: one batch).
    pub(crate) fn batches<'n>(&self, numbers: &'n [u32]) -> Vec<&'n [u32]> {
        let ScanNames::Relisted(r) = self else {
            return vec![numbers];
        };
        let mut out = Vec::new();
        let (mut start, mut bytes) = (0, 0usize);
        for (k, &i) in numbers.iter().enumerate() {
            // Its bytes as loaded, where it ends, and its entries in the
            // maps of fingerprints and numbers.
            let cost = usize::from(r.lens[i as usize]) + 48;
            if bytes + cost > r.batch_bytes && k > start {
                out.push(&numbers[start..k]);
                (start, bytes) = (k, 0);
            }
            bytes += cost;
        }
        if start < numbers.len() {
            out.push(&numbers[start..]);
        }
        out
    }

    /// Loads the names of `numbers` (one of [`batches`](Self::batches)),
    /// dropping the batch before: one listing of the root, which stops
    /// once all are found. Held names: nothing to do.
    ///
    /// # Errors
    ///
    /// When the root cannot be listed.
    pub(crate) fn load(&mut self, dir: BorrowedFd<'_>, path: &Path, numbers: &[u32]) -> Result<()> {
        let ScanNames::Relisted(r) = self else {
            return Ok(());
        };
        r.loaded = Names::new();
        r.at.clear();
        r.at.shrink_to_fit();
        let mut wanted: HashMap<u64, u32> = numbers
            .iter()
            .map(|&i| (r.by_index[i as usize], i))
            .collect();
        let Relisted {
            fingerprint,
            loaded,
            at,
            ..
        } = r;
        each_name(dir, path, |name| {
            if let Some(i) = wanted.remove(&fingerprint.of(name)) {
                at.insert(i, loaded.len() as u32);
                if !loaded.push(name) {
                    return Err(too_many(path));
                }
            }
            Ok(match wanted.is_empty() {
                true => ControlFlow::Break(()),
                false => ControlFlow::Continue(()),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A directory of `names` (in a sandbox of its own: the sandbox's
    /// lease record is beside it, not in it).
    struct Tree {
        _sandbox: crate::Sandbox,
        path: std::path::PathBuf,
    }

    impl Tree {
        fn path(&self) -> &Path {
            &self.path
        }
    }

    fn tree(names: &[String]) -> Tree {
        let sandbox = crate::Sandbox::new().unwrap();
        let path = sandbox.path().join("t");
        std::fs::create_dir(&path).unwrap();
        for n in names {
            std::fs::write(path.join(n), b"").unwrap();
        }
        Tree {
            _sandbox: sandbox,
            path,
        }
    }

    fn open(dir: &Path) -> std::fs::File {
        std::fs::File::open(dir).unwrap()
    }

    /// Names of 200 bytes, 300 of them: 60 KB, past a budget of 16 KiB.
    fn long_names() -> Vec<String> {
        (0..300)
            .map(|i| format!("app-235-{i:05}-{}", "x".repeat(190)))
            .collect()
    }

    #[test]
    fn names_under_the_budget_are_held_and_one_window() {
        let names: Vec<String> = (0..50).map(|i| format!("n{i:03}")).collect();
        let dir = tree(&names);
        let fd = open(dir.path());
        let listing = list_where(fd.as_fd(), dir.path(), NAME_MEMORY_DEFAULT, |_| true).unwrap();
        assert!(matches!(listing, Listing::Held(_)));
        let mut windows = 0;
        let all = listing
            .windows(fd.as_fd(), dir.path(), |first, w| {
                assert_eq!(first, 0);
                assert_eq!(w.len(), 50);
                windows += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(windows, 1);
        assert_eq!(all.get(7), Some(OsStr::new("n007")));
    }

    #[test]
    fn names_past_the_budget_come_in_sorted_windows_each_once() {
        let names = long_names();
        let dir = tree(&names);
        let fd = open(dir.path());
        let listing = list_where(fd.as_fd(), dir.path(), NAME_MEMORY_MIN, |_| true).unwrap();
        assert!(matches!(listing, Listing::Windowed(_)));
        assert_eq!(listing.len(), 300);
        let mut seen: Vec<String> = Vec::new();
        let mut windows = 0;
        let mut all = listing
            .windows(fd.as_fd(), dir.path(), |first, w| {
                assert_eq!(first, seen.len());
                assert!(
                    w.len() * 200 <= NAME_MEMORY_MIN,
                    "a window fits half the budget"
                );
                seen.extend(w.iter().map(|n| n.to_str().unwrap().to_owned()));
                windows += 1;
                Ok(())
            })
            .unwrap();
        assert!(windows > 3, "{windows} windows");
        let mut want = names.clone();
        want.sort();
        assert_eq!(seen, want);
        // Loaded back by number, in any order, batch by batch.
        let numbers: Vec<u32> = (0..300u32).rev().collect();
        let batches: Vec<Vec<u32>> = all.batches(&numbers).iter().map(|b| b.to_vec()).collect();
        assert!(batches.len() > 1);
        for batch in &batches {
            all.load(fd.as_fd(), dir.path(), batch).unwrap();
            for &i in batch {
                assert_eq!(
                    all.get(i as usize).unwrap().to_str().unwrap(),
                    want[i as usize]
                );
            }
            assert!(all.get(batch[0] as usize + 1).is_none() || batch.len() > 1);
        }
    }

    #[test]
    fn later_listings_leave_out_what_came_and_miss_what_went() {
        let names = long_names();
        let dir = tree(&names);
        let fd = open(dir.path());
        let listing = list_where(fd.as_fd(), dir.path(), NAME_MEMORY_MIN, |_| true).unwrap();
        // Made after the first listing: no part of the scan. Gone: a gap.
        std::fs::write(
            dir.path()
                .join(format!("app-235-00000-{}", "a".repeat(190))),
            b"",
        )
        .unwrap();
        rustix::fs::unlinkat(fd.as_fd(), names[10].as_str(), rustix::fs::AtFlags::empty()).unwrap();
        let mut seen = Vec::new();
        let mut all = listing
            .windows(fd.as_fd(), dir.path(), |_, w| {
                seen.extend(w.iter().map(|n| n.to_owned()));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen.len(), 299);
        assert!(!seen.iter().any(|n| n.to_string_lossy().contains("aaaa")));
        // Renamed away after the windows: not found again.
        let mut want = names.clone();
        want.sort();
        want.retain(|n| *n != names[10]);
        std::fs::rename(dir.path().join(&want[5]), dir.path().join("elsewhere")).unwrap();
        all.load(fd.as_fd(), dir.path(), &[4, 5, 6]).unwrap();
        assert_eq!(all.get(4).unwrap().to_str().unwrap(), want[4]);
        assert_eq!(all.get(5), None);
        assert_eq!(all.get(6).unwrap().to_str().unwrap(), want[6]);
    }

    #[test]
    fn a_budget_is_a_size_of_at_least_the_least() {
        assert_eq!(parse_name_memory("48M").unwrap(), 48 << 20);
        assert_eq!(parse_name_memory("16k").unwrap(), 16 << 10);
        assert_eq!(parse_name_memory("1G").unwrap(), 1 << 30);
        assert_eq!(parse_name_memory("65536").unwrap(), 65536);
        for bad in [
            "",
            "M",
            "12",
            "-5M",
            "1.5M",
            "lots",
            "99999999999999999999G",
        ] {
            let e = parse_name_memory(bad).unwrap_err().to_string();
            assert!(
                e.contains(NAME_MEMORY_ENV) && e.contains("16K"),
                "{bad}: {e}"
            );
        }
    }
}
