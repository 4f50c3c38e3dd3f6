//! Keyed sandboxes: a fixed name per tag and checkout, so that each run
//! reclaims what a dead predecessor left, and never touches a live one.

use std::ffi::{OsStr, OsString};
use std::io;
#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

#[cfg(unix)]
use rustix::fs::{FileType, Mode};
#[cfg(unix)]
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, IoResultExt, Result};
use crate::lease::{self, Claim, Created, Lease, LeaseRecord, Probe, RootRef};
use crate::remove_tree::remove_in;

/// What a keyed sandbox does when its name is held by a live process.
///
/// ```
/// use std::time::Duration;
/// use sandkeeper::WhenHeld;
/// let policy = WhenHeld::Wait(Duration::from_secs(30));
/// # let _ = policy;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WhenHeld {
    /// Take the next free numbered slot (`<name>-2`, `<name>-3`, …), each
    /// reclaimable the same way, so leftovers stay bounded by peak
    /// concurrency. The default.
    #[default]
    NextSlot,
    /// Wait up to this long for the holder to go, then fail with
    /// [`ErrorKind::TimedOut`].
    Wait(Duration),
    /// Fail at once with [`ErrorKind::Held`], naming the holder.
    Fail,
}

/// How many numbered slots a key may use before creation gives up: far
/// above any real concurrency, low enough to stop a runaway.
const MAX_SLOTS: u32 = 4096;

/// The name of the per-user root for keyed and process-lifetime sandboxes.
#[cfg(unix)]
pub(crate) fn user_root_name() -> String {
    format!("sandkeeper-{}", rustix::process::getuid().as_raw())
}

/// The name of the per-user root: on Windows, after the user's name (the
/// temp directory is the user's own already).
#[cfg(windows)]
pub(crate) fn user_root_name() -> String {
    let user = std::env::var("USERNAME").unwrap_or_default();
    let user: String = user
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    format!("sandkeeper-{user}")
}

/// Creates (if needed) and opens the per-user root `base/sandkeeper-<user>`.
/// On Windows there is nothing to vet: `%TEMP%` is the user's own.
#[cfg(windows)]
pub(crate) fn open_user_root(base: &Path) -> Result<(PathBuf, lease::RootDir)> {
    let path = base.join(user_root_name());
    match std::fs::create_dir(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_path("cannot create per-user sandbox root", || path.clone()),
    }
    let dir = lease::open_root_dir(&path)?;
    Ok((path, dir))
}

/// Creates (if needed), opens and vets the per-user root `base/sandkeeper-<uid>`:
/// a real directory (not a symlink), owned by us, closed to others.
///
/// Predictable names in a shared `/tmp` invite another user to pre-create
/// them (and read or plant files) or to swap in a symlink; so the root is
/// checked through the descriptor we then use.
#[cfg(unix)]
pub(crate) fn open_user_root(base: &Path) -> Result<(PathBuf, OwnedFd)> {
    let path = base.join(user_root_name());
    match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(lease::unusable_root(e, base)),
    }
    let dir = match lease::open_dir(&path) {
        Ok(dir) => dir,
        Err(Errno::LOOP | Errno::NOTDIR) => return Err(squatted(base, &path, None)),
        Err(e) => return Err(e).with_path("cannot open per-user sandbox root", || path.clone()),
    };
    let st = rustix::fs::fstat(&dir)
        .with_path("cannot inspect per-user sandbox root", || path.clone())?;
    let uid = rustix::process::getuid().as_raw();
    if st.st_uid != uid {
        return Err(squatted(base, &path, Some(st.st_uid)));
    }
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(Error::new(
            ErrorKind::UnsafeRoot,
            "per-user sandbox root is not a directory",
        )
        .at(&path));
    }
    if st.st_mode & 0o077 != 0 {
        // Ours, so we may close it; others cannot have planted anything we
        // would trust, since only names we probe and lock are ever used.
        rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o700))
            .with_path("cannot restrict per-user sandbox root to mode 0700", || {
                path.clone()
            })?;
    }
    Ok((path, dir))
}

/// The error for a per-user root name that someone else took: what is
/// there and whose it is (`owner`: of the directory we opened; else the
/// name is looked at without following it, for the message only), and
/// what the victim can do. In a sticky `/tmp` they cannot remove another
/// user's file, so the hint says who can, and the way around it meanwhile.
#[cfg(unix)]
fn squatted(base: &Path, path: &Path, owner: Option<u32>) -> Error {
    let me = rustix::process::getuid().as_raw();
    let found = rustix::fs::lstat(path).ok();
    let owner = owner.or(found.as_ref().map(|st| st.st_uid));
    let what = match found.map(|st| FileType::from_raw_mode(st.st_mode)) {
        Some(FileType::Directory) => "a directory",
        Some(FileType::Symlink) => "a symlink, not a directory",
        Some(FileType::RegularFile) => "a file, not a directory",
        Some(_) => "not a directory",
        None => "not a directory (it changed while being looked at)",
    };
    let whose = match owner {
        Some(o) if o == me => format!("owned by you (uid {me})"),
        Some(o) => format!("owned by {}, not by you (uid {me})", user_label(o)),
        None => "of unknown owner".to_owned(),
    };
    let message = format!("per-user sandbox root is {what}, {whose}");
    let base_st = rustix::fs::stat(base).ok();
    let sticky = base_st.as_ref().is_some_and(|st| st.st_mode & 0o1000 != 0);
    let may_remove = owner == Some(me)
        || me == 0
        || base_st.as_ref().is_some_and(|st| st.st_uid == me)
        || (owner.is_some() && !sticky);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let hint = if may_remove {
        format!(
            "remove it (`rm {}`), or set SANDKEEPER_ROOT to a directory only you can write",
            path.display()
        )
    } else {
        format!(
            "someone may be trying to hijack your sandboxes. You cannot remove it{}: \
             ask an administrator to, or to run `sandkeeper reap --match '{name}' --grace 0s {}` \
             as root (there it is an ordinary entry, never followed). Meanwhile set \
             SANDKEEPER_ROOT to a directory only you can write (e.g. ~/.cache/sandkeeper)",
            if sticky {
                " (the directory it is in is sticky: only its owner, that directory's owner or root may)"
            } else {
                ""
            },
            base.display()
        )
    };
    Error::new(ErrorKind::UnsafeRoot, message)
        .at(path)
        .with_hint(hint)
}

/// `uid 65534 (nobody)`, with the name from `/etc/passwd` when it has one.
#[cfg(unix)]
fn user_label(uid: u32) -> String {
    let name = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let id = fields.nth(1)?.parse::<u32>().ok()?;
                (id == uid && !name.is_empty()).then(|| name.to_owned())
            })
        });
    match name {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

/// A stable, short hash of a checkout (a path): FNV-1a, 64 bits, as 10 hex
/// digits. It must not change between Rust versions or runs, which rules
/// out `std`'s hasher.
pub(crate) fn checkout_hash(checkout: &OsStr) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in checkout.as_encoded_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:010x}", hash >> 24)
}

/// The slot name: `base` for slot 1, `base-N` after.
fn slot_name(base: &str, slot: u32) -> OsString {
    if slot == 1 {
        base.into()
    } else {
        format!("{base}-{slot}").into()
    }
}

/// What one slot turned out to be.
enum Slot {
    Ours(Lease),
    /// A live process holds it.
    Held {
        holders: Vec<u32>,
        record: Option<LeaseRecord>,
    },
    /// Something we must leave alone: kept for debugging, not a directory,
    /// or not inspectable.
    Unavailable,
}

/// Claims the keyed name `base` (or a numbered slot of it) in `root`.
pub(crate) fn claim(
    root: RootRef<'_>,
    root_path: &Path,
    base: &str,
    record: &LeaseRecord,
    mode: u32,
    when_held: WhenHeld,
) -> Result<Lease> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        let mut must_wait = false;
        for slot in 1..=MAX_SLOTS {
            let name = slot_name(base, slot);
            match try_slot(root, root_path, &name, record, mode)? {
                Slot::Ours(lease) => return Ok(lease),
                Slot::Unavailable => {}
                Slot::Held {
                    holders,
                    record: held,
                } => match when_held {
                    WhenHeld::NextSlot => {}
                    WhenHeld::Wait(limit) if started.elapsed() < limit => {
                        must_wait = true;
                        break;
                    }
                    WhenHeld::Wait(limit) => {
                        return Err(held_error(
                            ErrorKind::TimedOut,
                            root_path,
                            &name,
                            &holders,
                            held,
                        )
                        .with_hint(format!("waited {limit:?} for it to be released")))
                    }
                    WhenHeld::Fail => {
                        return Err(held_error(
                            ErrorKind::Held,
                            root_path,
                            &name,
                            &holders,
                            held,
                        ))
                    }
                },
            }
        }
        if !must_wait {
            return Err(Error::new(
                ErrorKind::Held,
                format!("all {MAX_SLOTS} slots of keyed sandbox {base:?} are taken"),
            )
            .at(root_path));
        }
        sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Creates `name` if free; reclaims it if its owner is dead; reports it
/// held otherwise.
fn try_slot(
    root: RootRef<'_>,
    root_path: &Path,
    name: &OsStr,
    record: &LeaseRecord,
    mode: u32,
) -> Result<Slot> {
    // Each round either creates the name, or finds it held, or removes a
    // dead predecessor; a few rounds settle any race with another creator.
    for _ in 0..16 {
        if let Created::New(lease) = lease::create_at(root, root_path, name, record, mode)? {
            return Ok(Slot::Ours(lease));
        }
        match lease::probe_at(root, root_path, name) {
            Ok(Probe::Free(claim)) => {
                if claim
                    .record()
                    .record()
                    .is_some_and(|r| r.is_kept_at(crate::clock::now_ms()))
                {
                    return Ok(Slot::Unavailable);
                }
                // In a shared root given by the caller, another user's
                // leftover is not ours to remove.
                #[cfg(unix)]
                {
                    let owner = rustix::fs::fstat(claim.dir()).map(|st| st.st_uid);
                    if owner.map_or(true, |uid| uid != rustix::process::geteuid().as_raw()) {
                        return Ok(Slot::Unavailable);
                    }
                }
                reclaim(root, name, claim)?;
            }
            Ok(Probe::Live { holders, record }) => return Ok(Slot::Held { holders, record }),
            // (Unix: a mount point, or not openable. Windows has no other.)
            #[cfg_attr(windows, allow(unreachable_patterns))]
            Ok(_) => return Ok(Slot::Unavailable),
            Err(e)
                if e.io_error()
                    .is_some_and(|e| e.kind() == io::ErrorKind::NotFound) => {}
            Err(e) if matches!(e.kind(), ErrorKind::InvalidInput) => return Ok(Slot::Unavailable),
            #[cfg(unix)]
            Err(e)
                if e.io_error().and_then(io::Error::raw_os_error)
                    == Some(Errno::NOTDIR.raw_os_error()) =>
            {
                return Ok(Slot::Unavailable)
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Slot::Unavailable)
}

/// Removes a dead predecessor while holding its exclusive lock, so no one
/// else can reclaim or re-lease it meanwhile.
fn reclaim(root: RootRef<'_>, name: &OsStr, mut claim: Claim) -> Result<()> {
    claim.release_record();
    let left = remove_in(root, name, claim.identity(), claim.path())
        .map_err(|e| Error::io("cannot remove the previous run's sandbox", e).at(claim.path()))?;
    if !left.is_empty() {
        return Err(Error::new(
            ErrorKind::Removal,
            "cannot completely remove the previous run's sandbox",
        )
        .at(claim.path()));
    }
    Ok(())
}

fn held_error(
    kind: ErrorKind,
    root_path: &Path,
    name: &OsStr,
    holders: &[u32],
    record: Option<LeaseRecord>,
) -> Error {
    let holder = holders.first().copied().or(record.as_ref().map(|r| r.pid));
    let command = holder
        .and_then(command_of)
        .or_else(|| record.as_ref().map(|r| r.cmd.join(" ")))
        .unwrap_or_else(|| "an unknown command".into());
    let who = holder.map_or_else(|| "an unknown process".to_owned(), |p| format!("pid {p}"));
    let err = Error::new(kind, format!("keyed sandbox is held by {who} ({command})"))
        .at(root_path.join(name));
    match holder {
        Some(pid) => err.with_pid(pid),
        None => err,
    }
}

/// The command line of `pid`, from `/proc/PID/cmdline`.
fn command_of(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!text.is_empty()).then(|| text.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkout_hash_is_stable() {
        // Pinned values: a change would orphan every user's keyed sandboxes.
        let cases = [("", "cbf29ce484"), ("/home/u/project", "478c5b223e")];
        for (checkout, want) in cases {
            assert_eq!(checkout_hash(checkout.as_ref()), want, "{checkout:?}");
        }
        assert_ne!(checkout_hash("/a".as_ref()), checkout_hash("/b".as_ref()));
    }

    #[test]
    fn slot_names() {
        let cases = [(1, "k"), (2, "k-2"), (10, "k-10")];
        for (slot, want) in cases {
            assert_eq!(slot_name("k", slot), OsString::from(want));
        }
    }
}
