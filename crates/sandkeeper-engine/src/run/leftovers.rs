//! What a command left in its run's directory, measured through the
//! directory's descriptor.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use crate::walk::{self, WalkState};

/// What was left in a run's directory, by name family.
///
/// ```
/// use sandkeeper_engine::run::Leftovers;
///
/// let dir = sandkeeper_engine::Sandbox::new()?;
/// for name in ["app-1", "app-2", "notes.txt"] {
///     std::fs::write(dir.path().join(name), vec![0u8; 8192])?;
/// }
/// let left = Leftovers::of(dir.try_clone_dir()?);
/// assert_eq!(left.entries, 3);
/// assert_eq!(left.families[0].pattern, "app-*");
/// assert_eq!(left.families[0].count, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leftovers {
    /// Entries directly in the directory (the lease record not counted).
    pub entries: u64,
    /// Their disk usage, in bytes (allocated blocks; each hard-linked
    /// inode counted once per entry's tree).
    pub disk_bytes: u64,
    /// The entries grouped by [name family](crate::pattern::group),
    /// biggest first (by disk usage, then by pattern).
    pub families: Vec<LeftoverFamily>,
}

/// One name family of [`Leftovers`]: `app-*`, 2 entries, 16 KiB.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeftoverFamily {
    /// The family's pattern (`app-235-*`), or the name of a lone entry.
    pub pattern: String,
    /// How many entries it has.
    pub count: u64,
    /// Their disk usage, in bytes.
    pub disk_bytes: u64,
}

impl Leftovers {
    /// Measures what is in `dir` (but the lease record), through the
    /// descriptor only: listed and walked relative to it, never following
    /// a symlink, so whatever was put at the directory's *name* is never
    /// looked at.
    ///
    /// A directory that cannot be listed (deleted meanwhile) has no
    /// leftovers; an entry that cannot be measured counts with 0 bytes.
    pub fn of(dir: impl AsFd) -> Leftovers {
        let dir = dir.as_fd();
        let Ok(list) = rustix::fs::Dir::read_from(dir) else {
            return Leftovers::default();
        };
        let names: Vec<OsString> = list
            .filter_map(|e| {
                let name = OsStr::from_bytes(e.ok()?.file_name().to_bytes()).to_owned();
                (name != "." && name != ".." && name != OsStr::new(crate::lease::LEASE_FILE))
                    .then_some(name)
            })
            .collect();
        let usages = walk::usage_many(dir, &names, 0, &|_, _| WalkState::Continue);
        let sizes: Vec<u64> = usages
            .iter()
            .map(|u| u.as_ref().map_or(0, |u| u.disk_bytes))
            .collect();
        let mut families: Vec<LeftoverFamily> = crate::pattern::group(&names)
            .into_iter()
            .map(|f| LeftoverFamily {
                disk_bytes: f.members.iter().map(|&i| sizes[i]).sum(),
                count: f.members.len() as u64,
                pattern: f.pattern,
            })
            .collect();
        families.sort_by(|a, b| {
            b.disk_bytes
                .cmp(&a.disk_bytes)
                .then_with(|| a.pattern.cmp(&b.pattern))
        });
        Leftovers {
            entries: names.len() as u64,
            disk_bytes: sizes.iter().sum(),
            families,
        }
    }
}
