//! Hard links counted once: across the entries of one walker, and across
//! threads by merging after the walks.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use super::Usage;
use crate::error::Result;
use crate::fs_at::Meta;

/// The hard-linked inodes already counted, so that each is counted once.
///
/// Pass one set to every [`usage_at`](super::usage_at) call whose results
/// should add up like `du -x --max-depth=1`: an inode with several links
/// is counted in the first entry measured with the set that holds it, and
/// in none after. Only inodes with more than one link are kept, with the
/// entry that counted them and their sizes (about 40 bytes each).
///
/// The default value is an empty set.
#[derive(Debug, Clone, Default)]
pub struct HardLinks {
    seen: HashMap<(u64, u64), Claim>,
    next_seq: u32,
}

/// Who counted a hard-linked inode, and how much.
#[derive(Debug, Clone, Copy)]
struct Claim {
    /// The entry's number: call order for `usage_at`, index for
    /// `usage_many`.
    seq: u32,
    disk: u64,
    apparent: u64,
}

impl HardLinks {
    /// An empty set.
    pub fn new() -> HardLinks {
        HardLinks::default()
    }

    /// How many hard-linked inodes have been counted.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no hard-linked inode has been counted yet.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The number of the next entry measured with this set (call order).
    pub(super) fn next_seq(&mut self) -> u32 {
        let seq = self.next_seq;
        self.next_seq = seq.saturating_add(1);
        seq
    }

    /// Takes in the sets the threads of one batch counted (claims by entry
    /// index), each inode staying with the lowest entry, and takes the
    /// sizes of the claims that lost off their entries in `results`
    /// (sorted by index). What this set counted before (earlier batches)
    /// wins over any claim of this one: its claims hold the lowest number.
    pub(super) fn absorb(&mut self, sets: Vec<HardLinks>, results: &mut [(usize, Result<Usage>)]) {
        let mut owners = std::mem::take(&mut self.seen);
        let mut losers = Vec::new();
        for links in sets {
            for (inode, claim) in links.seen {
                match owners.entry(inode) {
                    Entry::Vacant(slot) => {
                        slot.insert(claim);
                    }
                    Entry::Occupied(mut owner) => {
                        losers.push(if claim.seq < owner.get().seq {
                            std::mem::replace(owner.get_mut(), claim)
                        } else {
                            claim
                        });
                    }
                }
            }
        }
        self.seen = owners;
        for claim in self.seen.values_mut() {
            claim.seq = 0;
        }
        for loser in losers {
            if let Some((_, Ok(usage))) = results.get_mut(loser.seq as usize) {
                usage.disk_bytes = usage.disk_bytes.saturating_sub(loser.disk);
                usage.apparent_bytes = usage.apparent_bytes.saturating_sub(loser.apparent);
                usage.files = usage.files.saturating_sub(1);
            }
        }
    }

    /// Records that entry `seq` counts this hard-linked inode; false when it
    /// was counted before (by this or an earlier entry).
    pub(super) fn claim(&mut self, meta: &Meta, seq: u32) -> bool {
        match self.seen.entry((meta.id.dev, meta.id.ino)) {
            Entry::Occupied(_) => false,
            Entry::Vacant(slot) => {
                slot.insert(Claim {
                    seq,
                    disk: meta.disk,
                    apparent: meta.size,
                });
                true
            }
        }
    }
}
