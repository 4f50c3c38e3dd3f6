//! How a group's moved entries are checked before any is deleted (see
//! [`execute`](super::execute)): the guard that decides which pass the
//! checks stand on (a pass before the moves and what fanotify saw since,
//! as root; else a pass after them), and the checks of each entry.

use super::fate::{Checked, Doomed, SMALL};
use super::touches::Touches;
use super::Reaper;
use crate::error::{Error, Result};
use crate::inuse::{cwds, InUse};
use crate::lease::Locks;
use crate::remove::{self, Quarantined};
use crate::scan::Entry;
use crate::walk::{self, FileKind, WalkState};
use rustix::fs::FileType;
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a group's moved entries are known untouched since they left their
/// names: as root, by a pass taken **before** the moves and what fanotify
/// and a re-read of the working directories say of the time since (so the
/// entries are away from their names for the moves and their checks, not
/// for a pass); otherwise by a pass taken after the moves.
pub(super) struct Guard<'d> {
    pub(super) touches: Option<Touches<'d>>,
    /// The pass the touches count from, when it was begun, what it cost.
    pub(super) pass: Option<(Arc<InUse>, Instant, Duration)>,
    pub(super) proc: Option<OwnedFd>,
    pub(super) dev: u64,
}

/// Why an entry is kept whose inodes another process touched while its
/// group was checked ([`Check::late_touches`]).
pub(super) const TOUCHED_DURING_CHECK: &str =
    "another process opened something in it, or changed its names, during its check";

/// The least time between a group's moves and the last reading of the
/// events its verdicts stand on (see [`Reaper::give_verdicts`]).
pub(super) const SETTLE: Duration = Duration::from_millis(2);

/// A pass before the moves serves groups until it is this old, or four
/// times as old as it took to take, whichever is later: the events since
/// it began are what the checks stand on, and fewer passes are what
/// keeps a reap beside a thousand processes from being mostly passes.
pub(super) const PASS_FRESH: Duration = Duration::from_millis(250);

impl<'d> Guard<'d> {
    pub(super) fn new(dir: BorrowedFd<'d>) -> Guard<'d> {
        let dev = rustix::fs::fstat(dir).map(|st| st.st_dev).unwrap_or(0);
        let proc = rustix::fs::open(
            "/proc",
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok();
        let touches = match proc {
            Some(_) => Touches::start(dir, dev),
            None => None,
        };
        Guard {
            touches,
            pass: None,
            proc,
            dev,
        }
    }

    pub(super) fn ahead(&self) -> bool {
        self.touches.is_some()
    }

    /// Before a group's moves: a fresh pass when the one in use is stale
    /// (or the events since it began cannot vouch for anything).
    pub(super) fn before_moves(&mut self, reaper: &Reaper) -> Result<()> {
        let Some(touches) = &self.touches else {
            return Ok(());
        };
        let stale = match &self.pass {
            None => true,
            Some((_, at, cost)) => {
                touches.blind().is_some() || at.elapsed() > PASS_FRESH.max(*cost * 4)
            }
        };
        if stale {
            self.pass = None;
            // Whatever is queued now happened before this pass began.
            touches.restart();
            let begun = Instant::now();
            let pass = reaper.scanner.in_use()?;
            self.pass = Some((Arc::new(pass), begun, begun.elapsed()));
        }
        Ok(())
    }

    /// After a group's moves: the check its entries get.
    pub(super) fn check(&self, reaper: &Reaper) -> Result<Check<'_>> {
        if let (Some(touches), Some((pass, _, _)), Some(proc)) =
            (&self.touches, &self.pass, &self.proc)
        {
            touches.drain();
            if touches.blind().is_none() {
                let skip = |pid: u32| {
                    pass.uninspectable()
                        .iter()
                        .chain(pass.assumed())
                        .any(|u| u.pid == pid)
                };
                let cwds = cwds::working_dirs(proc.as_fd(), self.dev, &skip)
                    .map_err(|e| Error::io("cannot list /proc", e.into()).at("/proc"))?;
                let mark = touches.mark();
                return Ok(Check::new(
                    Arc::clone(pass),
                    Some(Ahead {
                        cwds,
                        touches,
                        mark,
                    }),
                ));
            }
        }
        // No events to stand on: a pass taken after the moves.
        Ok(Check::new(Arc::new(reaper.scanner.in_use()?), None))
    }
}

/// What a group's checks share: the in-use index (taken after the group's
/// moves; or, as root, before them, with [`Ahead`] for the time since)
/// and, when some processes' holdings were not read, one reading of
/// `/proc/locks` taken after the moves (for
/// [`open_elsewhere`](crate::inuse::open_elsewhere), which answers "open"
/// for a file that has a lock or lease without opening it).
pub(super) struct Check<'t> {
    pub(super) inuse: Arc<InUse>,
    /// `None` when every process was read (no file is asked).
    pub(super) locks: Option<std::result::Result<Locks, String>>,
    pub(super) ahead: Option<Ahead<'t>>,
}

/// What stands in for a pass after the moves when the pass was taken
/// before them: every working and root directory re-read after the moves,
/// and what other processes opened or changed names in since the pass
/// began (`mark`: how many touched inodes the checks were given).
pub(super) struct Ahead<'t> {
    pub(super) cwds: cwds::WorkingDirs,
    pub(super) touches: &'t Touches<'t>,
    pub(super) mark: usize,
}

impl<'t> Check<'t> {
    pub(super) fn new(inuse: Arc<InUse>, ahead: Option<Ahead<'t>>) -> Check<'t> {
        let locks = inuse
            .has_unread_processes()
            .then(|| Locks::read().map_err(|e| e.to_string()));
        Check {
            inuse,
            locks,
            ahead,
        }
    }

    /// The entries (numbers in the group, sorted) one of whose inodes
    /// (`inodes`: as the checks saw them, with their entry's number)
    /// another process touched after the checks were given the events:
    /// read now, just before the verdicts. Sorts `inodes`.
    pub(super) fn late_touches(&self, inodes: &mut [(u64, u32)]) -> Vec<usize> {
        let Some(ahead) = &self.ahead else {
            return Vec::new();
        };
        // What came during the checks.
        ahead.touches.drain();
        let late = ahead.touches.since(ahead.mark);
        if late.is_empty() {
            return Vec::new();
        }
        inodes.sort_unstable();
        let mut found: Vec<usize> = late
            .iter()
            .flat_map(|&ino| {
                let from = inodes.partition_point(|&(i, _)| i < ino);
                inodes[from..]
                    .iter()
                    .take_while(move |&&(i, _)| i == ino)
                    .map(|&(_, at)| at as usize)
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// What holds the entry by path (mounts, loop devices, overlays, bound
    /// unix sockets, asked about its old path, when known, and its path in
    /// the quarantine: mounts of other mount namespaces move with it), or
    /// why it cannot be told; before any walk.
    pub(super) fn by_path(
        &self,
        root: &Path,
        original: Option<&OsStr>,
        q: &Quarantined<'_>,
    ) -> Option<String> {
        if !self.inuse.is_complete() {
            return Some("some processes cannot be inspected".into());
        }
        if let Some(Err(e)) = &self.locks {
            return Some(format!("cannot read /proc/locks ({e})"));
        }
        if let Some((pid, e)) = self.ahead.as_ref().and_then(|a| a.cwds.unread()) {
            return Some(format!(
                "the working or root directory of pid {pid} cannot be read ({e})"
            ));
        }
        let paths = original
            .map(|name| root.join(name))
            .into_iter()
            .chain([root.join(q.path_in_parent())]);
        for path in paths {
            if let Some(k) = self.inuse.kernel_users_under(&path).first() {
                return Some(k.to_string());
            }
            if let Some(s) = self.inuse.socket_paths_under(&path).first() {
                return Some(format!("unix socket {}", s.display()));
            }
        }
        None
    }

    /// What holds the inode `id` (of type `kind`, the name `name` in the
    /// open directory `dir`, shown as `shown`): a process, a kernel user,
    /// a process that works there or touched it since the pass (as root),
    /// or — when some processes were not read — a regular file open
    /// elsewhere or that cannot be asked.
    pub(super) fn inode(
        &self,
        id: (u64, u64),
        is_file: bool,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        shown: &dyn Fn() -> PathBuf,
    ) -> Option<String> {
        if let Some(h) = self.inuse.holders(id.0, id.1).first() {
            return Some(h.to_string());
        }
        if let Some(k) = self.inuse.kernel_users_of(id.0, id.1).next() {
            return Some(k.to_string());
        }
        if let Some(ahead) = &self.ahead {
            if ahead.cwds.holds(id) {
                return Some(format!(
                    "a process works in {} (or is rooted there)",
                    shown().display()
                ));
            }
            if ahead.touches.touched(id) {
                return Some(format!(
                    "another process opened {} (or changed names in it) during the reap",
                    shown().display()
                ));
            }
        }
        let (Some(Ok(locks)), true) = (&self.locks, is_file) else {
            return None;
        };
        match crate::inuse::open_elsewhere(dir, name, id, locks) {
            crate::inuse::OpenElsewhere::No => None,
            crate::inuse::OpenElsewhere::Yes => Some(format!(
                "{} is open in a process that could not be inspected",
                shown().display()
            )),
            crate::inuse::OpenElsewhere::CannotTell(why) => Some(format!(
                "{} cannot be asked whether it is open: {why}",
                shown().display()
            )),
        }
    }
}

/// Checks a quarantined entry against its group's check (`seen` is told
/// every inode number it looks at): a small one ([`SMALL`]) in one walk
/// that lists it and checks every inode, any other (or one that could not
/// be listed exactly) by the check walk. [`Checked::Held`] when anything
/// holds it, or the check cannot tell; nothing is removed either way.
pub(super) fn check_entry<'d>(
    root: &Path,
    entry: &Entry,
    q: Quarantined<'d>,
    check: &Check<'_>,
    small_dirs: u64,
    walker: &mut walk::Walker,
    seen: &mut dyn FnMut(u64),
) -> Checked<'d> {
    if let Some(what) = check.by_path(root, Some(&entry.name), &q) {
        return Checked::Held(what, q);
    }
    let q = match entry.files.saturating_add(entry.dirs) < SMALL && entry.dirs <= small_dirs {
        false => q,
        true => {
            let limits = remove::Limits {
                inodes: 2 * SMALL as usize,
                dirs: small_dirs as usize,
            };
            let qname = PathBuf::from(q.name_in_quarantine());
            let listed = q.list(limits, &mut |s: &remove::Seen<'_>| {
                seen(s.id.1);
                let name = OsStr::from_bytes(s.name.to_bytes());
                let shown = || qname.join(s.path());
                check.inode(
                    s.id,
                    s.kind == FileType::RegularFile,
                    s.parent,
                    name,
                    &shown,
                )
            });
            match listed {
                // Every inode listed and checked, nothing found: it may be
                // deleted from the listing.
                remove::Listed::Clear(listing) => return Checked::Clear(Doomed::Listed(listing)),
                remove::Listed::Kept(what, q) => return Checked::Held(what, q),
                remove::Listed::Unlisted(q) => q,
            }
        }
    };
    match walk_check(&q, check, walker, seen) {
        Some(what) => Checked::Held(what, q),
        // The check walked all of it and found nothing.
        None => Checked::Clear(Doomed::Walked(q)),
    }
}

/// The check of a quarantined entry (`original`: its old name, when
/// known): by path ([`Check::by_path`]), then every inode found by walking
/// it in the quarantine through descriptors. `Some(what)` if anything
/// holds it, or the index cannot tell.
pub(super) fn check_quarantined(
    root: &Path,
    original: Option<&OsStr>,
    q: &Quarantined<'_>,
    check: &Check<'_>,
    walker: &mut walk::Walker,
) -> Option<String> {
    check
        .by_path(root, original, q)
        .or_else(|| walk_check(q, check, walker, &mut |_| {}))
}

/// The walk of [`check_quarantined`]; `seen` is told every inode number.
pub(super) fn walk_check(
    q: &Quarantined<'_>,
    check: &Check<'_>,
    walker: &mut walk::Walker,
    seen: &mut dyn FnMut(u64),
) -> Option<String> {
    let mut found: Option<String> = None;
    let mut links = walk::HardLinks::new();
    let walked = walker.usage_at(q.dir(), q.name_in_quarantine(), &mut links, &mut |v| {
        if v.is_mount_point() {
            // Something is mounted on it: in use by definition.
            found = Some("a filesystem is mounted on it".into());
            return WalkState::Quit;
        }
        seen(v.ino());
        // Regular files are asked through the quarantine by their path
        // below it (`openat2` beneath it, through no link and no mount).
        let below = || match v.depth() {
            0 => PathBuf::from(q.name_in_quarantine()),
            _ => Path::new(q.name_in_quarantine()).join(v.path()),
        };
        let is_file = v.kind() == FileKind::File;
        let name = match is_file {
            true => below().into_os_string(),
            false => std::ffi::OsString::new(),
        };
        match check.inode((v.dev(), v.ino()), is_file, q.dir(), &name, &below) {
            Some(what) => {
                found = Some(what);
                WalkState::Quit
            }
            None => WalkState::Continue,
        }
    });
    match walked {
        Ok(_) if found.is_some() => found,
        Ok(usage) if usage.error_count > 0 => Some(format!(
            "{} inside cannot be read",
            crate::human::plural(usage.error_count, "place", "places")
        )),
        Ok(usage) if !usage.mount_points.is_empty() => Some(format!(
            "a mount point inside ({})",
            usage.mount_points[0].display()
        )),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}
