//! The names of a root's entries, stored compactly: one byte buffer and
//! one `u32` end offset per name (a name costs its length plus 4 bytes,
//! not a heap allocation of its own). A million names of 14 bytes take
//! 18 MB, where a `Vec<OsString>` takes about 40 MB.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// Names in one buffer, in the order they were pushed (or sorted).
#[derive(Debug, Default, Clone)]
pub(crate) struct Names {
    bytes: Vec<u8>,
    /// Where each name ends in `bytes`; name `i` starts where `i - 1` ends.
    ends: Vec<u32>,
}

impl Names {
    /// No names.
    pub(crate) fn new() -> Names {
        Names::default()
    }

    /// Adds `name`; false (and nothing added) when the buffer would pass
    /// 4 GiB, which no directory comes near (at 255 bytes a name, that is
    /// over 16 million entries).
    pub(crate) fn push(&mut self, name: &[u8]) -> bool {
        let Ok(end) = u32::try_from(self.bytes.len() + name.len()) else {
            return false;
        };
        self.bytes.extend_from_slice(name);
        self.ends.push(end);
        true
    }

    /// How many names.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Name `i`.
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub(crate) fn get(&self, i: usize) -> &OsStr {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        OsStr::from_bytes(&self.bytes[start..self.ends[i] as usize])
    }

    /// Every name, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &OsStr> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The names for which `keep` is true, in the same order.
    pub(crate) fn retain(self, mut keep: impl FnMut(&OsStr) -> bool) -> Names {
        let mut kept = Names::new();
        kept.bytes.reserve(self.bytes.len());
        kept.ends.reserve(self.len());
        for name in self.iter().filter(|n| keep(n)) {
            kept.push(name.as_bytes());
        }
        kept
    }

    /// The same names sorted by their bytes.
    pub(crate) fn sorted(self) -> Names {
        let mut order: Vec<u32> = (0..self.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            self.get(a as usize)
                .as_bytes()
                .cmp(self.get(b as usize).as_bytes())
        });
        let mut sorted = Names::new();
        sorted.bytes.reserve_exact(self.bytes.len());
        sorted.ends.reserve_exact(self.len());
        for i in order {
            sorted.push(self.get(i as usize).as_bytes());
        }
        sorted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_sorted_and_filtered() {
        let mut names = Names::new();
        for n in ["b", "", "a-1", "bad\u{fffd}", "a"] {
            assert!(names.push(n.as_bytes()));
        }
        names.push(b"\xff");
        assert_eq!(names.len(), 6);
        assert_eq!(names.get(1), OsStr::new(""));
        assert_eq!(names.get(5).as_bytes(), b"\xff");
        let sorted = names.sorted();
        let got: Vec<&[u8]> = sorted.iter().map(OsStr::as_bytes).collect();
        let want: [&[u8]; 6] = [b"", b"a", b"a-1", b"b", "bad\u{fffd}".as_bytes(), b"\xff"];
        assert_eq!(got, want);
        let kept = sorted.retain(|n| n.len() == 1);
        let got: Vec<&[u8]> = kept.iter().map(OsStr::as_bytes).collect();
        assert_eq!(got, [b"a", b"b", b"\xff"]);
    }
}
