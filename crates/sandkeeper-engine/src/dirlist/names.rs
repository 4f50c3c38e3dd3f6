//! The names of a root's entries, stored compactly: one byte buffer and
//! one `u32` end offset per name (a name costs its length plus 4 bytes,
//! not a heap allocation of its own). A million names of 14 bytes take
//! 18 MB, where a `Vec<OsString>` takes about 40 MB.
//!
//! The bytes are held once: names a caller does not want are never
//! pushed ([`read_names_where`](super::read_names_where) filters as it lists), and
//! [`Names::sorted`] sorts an order of `u32` numbers (4 more bytes a name)
//! instead of copying every name into a second buffer. A million names of
//! 250 bytes are 254 MB once, no longer twice that while they are filtered
//! and sorted.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// Names in one buffer, in the order they were pushed (or sorted).
#[derive(Debug, Default, Clone)]
pub(crate) struct Names {
    bytes: Vec<u8>,
    /// Where each name ends in `bytes`; name `i` as pushed starts where
    /// `i - 1` ends.
    ends: Vec<u32>,
    /// Once [sorted](Self::sorted): name `i` is the one pushed as
    /// `order[i]`. Empty before: the order pushed.
    order: Vec<u32>,
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
        debug_assert!(self.order.is_empty(), "Names::push after sorted");
        let Ok(end) = u32::try_from(self.bytes.len() + name.len()) else {
            return false;
        };
        self.bytes.extend_from_slice(name);
        self.ends.push(end);
        true
    }

    /// Keeps the first `len` names pushed (before [sorted](Self::sorted)).
    pub(crate) fn truncate(&mut self, len: usize) {
        debug_assert!(self.order.is_empty(), "Names::truncate after sorted");
        if len < self.ends.len() {
            self.ends.truncate(len);
            self.bytes
                .truncate(self.ends.last().map_or(0, |&e| e as usize));
        }
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
        match self.order.get(i) {
            Some(&pushed) => self.pushed(pushed as usize),
            None => self.pushed(i),
        }
    }

    /// The name pushed as number `i`.
    fn pushed(&self, i: usize) -> &OsStr {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        OsStr::from_bytes(&self.bytes[start..self.ends[i] as usize])
    }

    /// The bytes this holds on the heap (what its buffers were given,
    /// used or not).
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + 4 * (self.ends.capacity() + self.order.capacity())
    }

    /// Every name, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &OsStr> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The same names sorted by their bytes: only their order is sorted
    /// (4 bytes a name), not the bytes copied.
    pub(crate) fn sorted(mut self) -> Names {
        let mut order: Vec<u32> = (0..self.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            self.pushed(a as usize)
                .as_bytes()
                .cmp(self.pushed(b as usize).as_bytes())
        });
        self.order = order;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort() {
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
        assert_eq!(sorted.get(4).as_bytes(), "bad\u{fffd}".as_bytes());
    }

    /// Issue 25, item 8: sorting keeps the names' bytes once; what it
    /// adds is 4 bytes a name, whatever their length.
    #[test]
    fn sorting_adds_four_bytes_a_name_whatever_their_length() {
        for len in [8, 255] {
            let mut names = Names::new();
            for i in 0..1000u32 {
                let mut name = vec![b'x'; len];
                name[..4].copy_from_slice(&(1000 - i).to_be_bytes());
                assert!(names.push(&name));
            }
            let before = names.heap_bytes();
            let sorted = names.sorted();
            assert_eq!(
                sorted.heap_bytes(),
                before + 4 * 1000,
                "names of {len} bytes"
            );
            assert!(sorted.get(0) < sorted.get(999));
        }
    }
}
