//! Creators tallied per family as a scan streams its entries: bounded
//! whatever the number of entries.
//!
//! A family keeps at most [`SLOTS`] creators (a weighted *space-saving*
//! sketch, by disk usage: a creator that holds more than a
//! [`SLOTS`]th of a family's bytes is always among them, however many
//! other creators there are and in whatever order their entries come); a
//! creator pushed out, and what its slot held, is counted under
//! [`Creators::other`]. The creators' keys are interned per root, at most
//! [`MAX_KEYS`] of them and at most [`MAX_SLOTS`] slots in all, so the
//! tally of a root of a million entries is a few MiB at most; past those
//! bounds new creators count as `other`. Nothing per entry is kept.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::origin::{Creator, Origin};

/// The most creators a family keeps (and a report lists).
pub const SLOTS: usize = 32;
/// The most distinct creators one root's tally keeps (all families).
pub const MAX_KEYS: usize = 1024;
/// The most creator slots one root's tally keeps (all families).
pub const MAX_SLOTS: usize = 65_536;
/// The most argv elements of a creator's key.
pub const KEY_ARGS: usize = 4;
/// The longest text field of a creator's key, in bytes (cut at a
/// character boundary, ending in `…`).
pub const KEY_FIELD: usize = 128;

/// What groups entries under one creator: its name, command (only
/// `sandkeeper run` records one), unit (or cgroup) and working directory —
/// not its pid, which differs per run. Every text field is what the
/// creator's process showed, bounded ([`KEY_ARGS`], [`KEY_FIELD`]), not
/// escaped: escape it to show it. Where others may read it (the metrics),
/// only the name and the unit (or cgroup) are shown.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CreatorKey {
    /// A process that was read while it ran.
    Process {
        /// Its name: `comm`, else its executable's file name
        /// (`origin::Process::name`); empty when neither was recorded.
        name: String,
        /// Its first [`KEY_ARGS`] argv elements: the command of a
        /// `sandkeeper run` (`watch` records none).
        command: Vec<String>,
        /// Whether it had more.
        more_args: bool,
        /// The systemd unit or scope its cgroup names
        /// (`origin::Process::unit`).
        unit: Option<String>,
        /// Its cgroup, when it names no unit.
        cgroup: Option<String>,
        /// Its working directory.
        cwd: Option<String>,
    },
    /// A process that exited before it could be read.
    Exited,
    /// A creator that could not be read for another reason.
    Unknown,
}

impl CreatorKey {
    /// The key of `origin`'s creator: its name, its first argv elements
    /// (a `sandkeeper run`'s command), its unit (or cgroup) and cwd, each
    /// bounded.
    pub fn of(origin: &Origin) -> CreatorKey {
        match &origin.creator {
            Creator::Process(p) => {
                let unit = p.unit().map(cut);
                CreatorKey::Process {
                    name: p.name().map(cut).unwrap_or_default(),
                    command: p.argv.iter().take(KEY_ARGS).map(|a| cut(a)).collect(),
                    more_args: p.argv.len() > KEY_ARGS || p.argv_truncated,
                    cgroup: match unit {
                        Some(_) => None,
                        None => p.cgroup.as_deref().map(cut),
                    },
                    unit,
                    cwd: p.cwd.as_deref().map(cut),
                }
            }
            Creator::Exited { .. } => CreatorKey::Exited,
            _ => CreatorKey::Unknown,
        }
    }
}

/// `s`, at most [`KEY_FIELD`] bytes.
pub(crate) fn cut(s: &str) -> String {
    if s.len() <= KEY_FIELD {
        return s.to_owned();
    }
    let mut end = KEY_FIELD - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl CreatorKey {
    /// The same key without the working directory (what `watch`'s
    /// metrics label: other users cannot read a process's cwd).
    pub fn without_cwd(&self) -> CreatorKey {
        let mut key = self.clone();
        if let CreatorKey::Process { cwd, .. } = &mut key {
            *cwd = None;
        }
        key
    }
}

/// Entries and their disk usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntryCount {
    /// Top-level entries.
    pub entries: u64,
    /// Their disk usage in bytes.
    pub disk_bytes: u64,
}

impl EntryCount {
    fn add(&mut self, other: EntryCount) {
        self.entries += other.entries;
        self.disk_bytes += other.disk_bytes;
    }
}

/// One creator of a family and what of it is its.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreatorCount {
    /// Who.
    pub creator: Arc<CreatorKey>,
    /// Its entries in the family (exact: counted since it took its slot;
    /// what it made before a slot was free for it is in
    /// [`Creators::other`]).
    pub count: EntryCount,
}

/// A family's members grouped by creator: only members with a recorded
/// origin count here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Creators {
    /// At most [`SLOTS`] creators, most disk usage first (then most
    /// entries, then by key).
    pub top: Vec<CreatorCount>,
    /// Members with an origin counted under no creator of `top` (the
    /// bounds of the tally).
    pub other: EntryCount,
}

/// One slot of a family's sketch.
#[derive(Debug)]
struct Slot {
    key: Arc<CreatorKey>,
    /// What it counted itself (exact).
    own: EntryCount,
    /// Its weight in the sketch: its own bytes plus those of the slot it
    /// took over (an upper bound of the creator's bytes).
    weight: u64,
}

#[derive(Debug, Default)]
struct Family {
    slots: Vec<Slot>,
    other: EntryCount,
}

/// The tally of one root's families, fed entry by entry (keyed by the
/// family's pattern, shared by its entries).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    families: HashMap<Arc<str>, Family>,
    keys: HashSet<Arc<CreatorKey>>,
    slots: usize,
}

impl Tally {
    /// Counts one member of the family `pattern` made by `key`, of
    /// `disk_bytes`.
    pub(crate) fn add(&mut self, pattern: &Arc<str>, key: CreatorKey, disk_bytes: u64) {
        let one = EntryCount {
            entries: 1,
            disk_bytes,
        };
        let key = match self.keys.get(&key) {
            Some(k) => Some(Arc::clone(k)),
            None if self.keys.len() < MAX_KEYS => {
                let k = Arc::new(key);
                self.keys.insert(Arc::clone(&k));
                Some(k)
            }
            None => None,
        };
        let family = self.families.entry(Arc::clone(pattern)).or_default();
        let Some(key) = key else {
            family.other.add(one);
            return;
        };
        if let Some(slot) = family.slots.iter_mut().find(|s| s.key == key) {
            slot.own.add(one);
            slot.weight += disk_bytes;
            return;
        }
        if family.slots.len() < SLOTS && self.slots < MAX_SLOTS {
            self.slots += 1;
            family.slots.push(Slot {
                key,
                own: one,
                weight: disk_bytes,
            });
            return;
        }
        // Space-saving: the lightest slot is taken over; what it counted
        // goes to `other`, its weight stays (so a big creator is not
        // pushed out by many small ones).
        let Some(light) = family.slots.iter_mut().min_by_key(|s| s.weight) else {
            family.other.add(one);
            return;
        };
        family.other.add(light.own);
        light.key = key;
        light.own = one;
        light.weight += disk_bytes;
    }

    /// Each family's creators.
    pub(crate) fn into_families(self) -> HashMap<Arc<str>, Creators> {
        self.families
            .into_iter()
            .map(|(pattern, f)| {
                let mut top: Vec<CreatorCount> = f
                    .slots
                    .into_iter()
                    .map(|s| CreatorCount {
                        creator: s.key,
                        count: s.own,
                    })
                    .collect();
                top.sort_by(|a, b| {
                    b.count
                        .disk_bytes
                        .cmp(&a.count.disk_bytes)
                        .then(b.count.entries.cmp(&a.count.entries))
                        .then_with(|| a.creator.cmp(&b.creator))
                });
                (
                    pattern,
                    Creators {
                        top,
                        other: f.other,
                    },
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize) -> CreatorKey {
        CreatorKey::Process {
            name: format!("cmd-{n}"),
            command: Vec::new(),
            more_args: false,
            unit: None,
            cgroup: None,
            cwd: None,
        }
    }

    fn totals(c: &Creators) -> EntryCount {
        let mut t = c.other;
        for x in &c.top {
            t.add(x.count);
        }
        t
    }

    #[test]
    fn sums_are_exact_and_bounded() {
        let fam: Arc<str> = Arc::from("app-*");
        // (case, creators, entries each, bytes each)
        let cases: &[(&str, usize, u64, u64)] = &[
            ("one creator", 1, 100, 10),
            ("exactly the slots", SLOTS, 3, 7),
            ("many more creators", 500, 2, 5),
        ];
        for (name, creators, each, bytes) in cases {
            let mut t = Tally::default();
            for i in 0..*each {
                for c in 0..*creators {
                    let _ = i;
                    t.add(&fam, key(c), *bytes);
                }
            }
            let got = t.into_families().remove(&fam).unwrap();
            assert!(got.top.len() <= SLOTS, "{name}");
            let total = totals(&got);
            assert_eq!(total.entries, *creators as u64 * each, "{name}");
            assert_eq!(total.disk_bytes, *creators as u64 * each * bytes, "{name}");
            if *creators <= SLOTS {
                assert_eq!(
                    got.other,
                    EntryCount::default(),
                    "{name}: nothing pushed out"
                );
            }
        }
    }

    /// Many small creators first, then a big one, then more small ones:
    /// the big one keeps a slot and all of its bytes.
    #[test]
    fn a_big_creator_is_not_pushed_out_by_many_small_ones() {
        let fam: Arc<str> = Arc::from("aura-235-*");
        let mut t = Tally::default();
        for c in 0..1000 {
            t.add(&fam, key(c), 1);
        }
        for _ in 0..159 {
            t.add(&fam, key(5000), 67_000_000);
        }
        for c in 1000..3000 {
            t.add(&fam, key(c), 1);
        }
        let got = t.into_families().remove(&fam).unwrap();
        assert_eq!(*got.top[0].creator, key(5000));
        assert_eq!(got.top[0].count.entries, 159);
        assert_eq!(got.top[0].count.disk_bytes, 159 * 67_000_000);
    }

    #[test]
    fn keys_are_bounded_per_root() {
        let mut t = Tally::default();
        for c in 0..(MAX_KEYS + 100) {
            let fam: Arc<str> = Arc::from(format!("f{c}").as_str());
            t.add(&fam, key(c), 1);
        }
        assert!(t.keys.len() <= MAX_KEYS);
        let fams = t.into_families();
        let other: u64 = fams.values().map(|c| c.other.entries).sum();
        assert_eq!(other, 100, "past the bound: counted as other");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn keys_are_bounded_in_size() {
        let o = crate::origin::Origin {
            v: 1,
            ino: 1,
            recorded_ms: 0,
            by: crate::origin::Recorder::Watch,
            creator: crate::origin::Creator::Process(crate::origin::Process {
                argv: (0..10).map(|_| "é".repeat(500)).collect(),
                comm: Some("é".repeat(500)),
                cwd: Some("/".repeat(1000)),
                cgroup: Some("/x.slice/y.service".into()),
                ..Default::default()
            }),
        };
        let CreatorKey::Process {
            name,
            command,
            more_args,
            unit,
            cgroup,
            cwd,
        } = CreatorKey::of(&o)
        else {
            panic!()
        };
        assert!(name.len() <= KEY_FIELD);
        assert_eq!(command.len(), KEY_ARGS);
        assert!(more_args);
        assert!(command.iter().all(|a| a.len() <= KEY_FIELD));
        assert!(cwd.unwrap().len() <= KEY_FIELD);
        assert_eq!(unit.as_deref(), Some("y.service"));
        assert_eq!(cgroup, None);
    }
}
