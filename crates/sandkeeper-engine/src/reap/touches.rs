//! What other processes touched on a root's filesystem since a moment:
//! the fanotify half of the reaper's check when it runs as root.
//!
//! A full `/proc` pass costs about 0.2 ms per process (200 ms beside a
//! thousand), so taken after a group's moves it kept every entry of the
//! group away from its name that long, and a victim's job could find its
//! directory gone and another user's in its place. So root's reaper takes
//! the pass *before* it moves a group, and covers the time since the
//! pass began with this listener: one fanotify group with a filesystem
//! mark on the root's filesystem, reporting every open (`FAN_OPEN`,
//! `FAN_OPEN_EXEC`, directories too) and every name made or moved into a
//! directory (`FAN_CREATE`, `FAN_MOVED_TO`: the directory), by any process
//! but this one, through any mount of the filesystem. An entry any of whose inodes was touched is kept, as
//! if the pass had seen it held. A `chdir` opens nothing: the working
//! directories are re-read after the moves (`inuse::cwds`).
//!
//! Events carry file handles (`FAN_REPORT_FID`), never an open descriptor
//! of the object: fanotify would open what others opened, which for a
//! device node starts its driver. A handle is resolved with
//! `open_by_handle_at(O_PATH)` and `fstat`. One that no longer resolves
//! (`ESTALE`) names an inode that no longer exists, which no entry being
//! checked can contain; any other failure, or a lost event, makes the
//! listener [blind](Touches::blind) until the next pass, and the entries
//! are then checked by a pass taken after their move, as before.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::sys::fanotify;

/// The events asked for: what a process does to start using an inode, or
/// to add a name to a directory (a socket bound there, a directory made).
/// Not removals: the reaper's own workers unlink thousands of names while
/// a group is checked, which would fill the bounded queue, and a name
/// removed leaves its remover holding nothing there.
const MASK: u64 =
    libc::FAN_OPEN | libc::FAN_OPEN_EXEC | libc::FAN_CREATE | libc::FAN_MOVED_TO | libc::FAN_ONDIR;

/// `struct fanotify_event_metadata`: 24 bytes.
const META_LEN: usize = 24;

/// The listener of one root's filesystem (see the [module docs](self)).
pub(super) struct Touches<'d> {
    group: OwnedFd,
    /// The root: handles are resolved on its filesystem.
    mount: BorrowedFd<'d>,
    dev: u64,
    me: i32,
    /// What was read so far (the checks of a group, on two threads, ask
    /// the listener through a shared reference).
    state: Mutex<State>,
}

struct State {
    /// Inodes (of `dev`) others touched since [`Touches::restart`].
    touched: HashSet<u64>,
    /// The same, in the order they came, for [`Touches::since`].
    order: Vec<u64>,
    /// Handles already resolved since the restart: the same files are
    /// opened again and again.
    resolved: HashMap<Box<[u8]>, Option<u64>>,
    blind: Option<String>,
    buf: Vec<u8>,
}

impl<'d> Touches<'d> {
    /// Starts listening on the filesystem of `root` (device `dev`).
    /// `None` where fanotify cannot do that here (not root, an old
    /// kernel, a filesystem without file handles): the reaper then checks
    /// each group by a pass taken after its moves.
    pub(super) fn start(root: BorrowedFd<'d>, dev: u64) -> Option<Touches<'d>> {
        // `ESTALE` is read as "that inode no longer exists" below, which
        // holds only where handles can be turned back into inodes at all:
        // a filesystem that can only make identifying handles (overlayfs
        // without `nfs_export`, some FUSE ones) answers `ESTALE` for
        // every handle, and its events would all be dropped. So the root's
        // own handle must resolve to the root, or nothing is listened to.
        let (kind, handle) = fanotify::file_handle(root).ok()?;
        let back = fanotify::open_by_handle(root, kind, &handle).ok()?;
        let (here, there) = (
            rustix::fs::fstat(root).ok()?,
            rustix::fs::fstat(&back).ok()?,
        );
        if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino) {
            return None;
        }
        let group = fanotify::fanotify_init_fid().ok()?;
        fanotify::mark_filesystem(group.as_fd(), root, MASK).ok()?;
        Some(Touches {
            group,
            mount: root,
            dev,
            me: std::process::id() as i32,
            state: Mutex::new(State {
                touched: HashSet::new(),
                order: Vec::new(),
                resolved: HashMap::new(),
                blind: None,
                buf: vec![0; 64 * 1024],
            }),
        })
    }

    /// Forgets what came before: called right before a pass, which sees
    /// what is held from then on. (What is queued now happened before.)
    pub(super) fn restart(&self) {
        self.read_all(true);
        let mut state = self.lock();
        state.touched.clear();
        state.order.clear();
        state.resolved.clear();
        state.blind = None;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads every event queued so far.
    pub(super) fn drain(&self) {
        self.read_all(false);
    }

    /// Whether another process touched the inode `id` since the restart.
    pub(super) fn touched(&self, id: (u64, u64)) -> bool {
        id.0 == self.dev && self.lock().touched.contains(&id.1)
    }

    /// How many touched inodes are known: [`since`](Self::since) this
    /// mark are those that came later.
    pub(super) fn mark(&self) -> usize {
        self.lock().order.len()
    }

    /// The inodes (of the root's filesystem) touched after `mark`.
    pub(super) fn since(&self, mark: usize) -> Vec<u64> {
        self.lock()
            .order
            .get(mark..)
            .map(<[u64]>::to_vec)
            .unwrap_or_default()
    }

    /// Why the events since the restart cannot vouch for anything (an
    /// event lost, a handle that could not be resolved), if so.
    pub(super) fn blind(&self) -> Option<String> {
        self.lock().blind.clone()
    }

    fn read_all(&self, discard: bool) {
        let mut state = self.lock();
        let state = &mut *state;
        loop {
            let n = match rustix::io::read(&self.group, &mut state.buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(rustix::io::Errno::AGAIN) => return,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    state.blind = Some(format!("cannot read fanotify events: {e}"));
                    return;
                }
            };
            if discard {
                continue;
            }
            let buf = std::mem::take(&mut state.buf);
            self.parse(state, &buf[..n]);
            state.buf = buf;
        }
    }

    fn parse(&self, state: &mut State, mut events: &[u8]) {
        while events.len() >= META_LEN {
            let len = u32::from_ne_bytes(events[0..4].try_into().unwrap_or_default()) as usize;
            let meta_len = u16::from_ne_bytes(events[6..8].try_into().unwrap_or_default()) as usize;
            if len < META_LEN || len > events.len() || meta_len < META_LEN || meta_len > len {
                state.blind = Some("a malformed fanotify event".into());
                return;
            }
            let mask = u64::from_ne_bytes(events[8..16].try_into().unwrap_or_default());
            let pid = i32::from_ne_bytes(events[20..24].try_into().unwrap_or_default());
            let (event, rest) = events.split_at(len);
            events = rest;
            if mask & libc::FAN_Q_OVERFLOW != 0 {
                state.blind = Some("fanotify lost events".into());
                continue;
            }
            if pid == self.me {
                continue;
            }
            self.record(state, &event[meta_len..]);
        }
    }

    /// Resolves the fid records of one event.
    fn record(&self, state: &mut State, mut infos: &[u8]) {
        let mut any = false;
        while infos.len() >= 4 {
            let kind = infos[0];
            let len = u16::from_ne_bytes([infos[2], infos[3]]) as usize;
            if len < 4 || len > infos.len() {
                break;
            }
            let (info, rest) = infos.split_at(len);
            infos = rest;
            // FAN_EVENT_INFO_TYPE_FID and _DFID: header (4), fsid (8),
            // then struct file_handle (handle_bytes, handle_type, bytes).
            if !matches!(
                kind,
                libc::FAN_EVENT_INFO_TYPE_FID | libc::FAN_EVENT_INFO_TYPE_DFID
            ) || info.len() < 20
            {
                continue;
            }
            let bytes = u32::from_ne_bytes(info[12..16].try_into().unwrap_or_default()) as usize;
            let handle_type = i32::from_ne_bytes(info[16..20].try_into().unwrap_or_default());
            let Some(handle) = info.get(20..20 + bytes) else {
                continue;
            };
            any = true;
            self.resolve(state, handle_type, handle);
        }
        if !any {
            state.blind = Some("a fanotify event without a file handle".into());
        }
    }

    fn resolve(&self, state: &mut State, handle_type: i32, handle: &[u8]) {
        let mut key = Vec::with_capacity(handle.len() + 4);
        key.extend_from_slice(&handle_type.to_ne_bytes());
        key.extend_from_slice(handle);
        if state.resolved.contains_key(key.as_slice()) {
            // Counted when it was resolved.
            return;
        }
        let ino = match fanotify::open_by_handle(self.mount, handle_type, handle) {
            Ok(fd) => match rustix::fs::fstat(&fd) {
                Ok(st) if st.st_dev == self.dev => Some(st.st_ino),
                Ok(_) => None,
                Err(e) => {
                    state.blind = Some(format!("cannot inspect what an event names: {e}"));
                    None
                }
            },
            // Gone: no entry being checked holds it.
            Err(e) if e.raw_os_error() == Some(libc::ESTALE) => None,
            Err(e) => {
                state.blind = Some(format!("cannot resolve what an event names: {e}"));
                None
            }
        };
        if let Some(ino) = ino {
            if state.touched.insert(ino) {
                state.order.push(ino);
            }
        }
        state.resolved.insert(key.into_boxed_slice(), ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[allow(clippy::print_stderr)] // the skip message
    fn listener_or_skip(dir: &std::fs::File) -> Option<Touches<'_>> {
        let dev = dir.metadata().unwrap().dev();
        if !rustix::process::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "needs root, and CI is set"
            );
            eprintln!("skipping: fanotify filesystem marks need root");
            return None;
        }
        Some(Touches::start(dir.as_fd(), dev).expect("fanotify on the sandbox's filesystem"))
    }

    #[test]
    fn opens_and_creates_by_others_are_seen_and_our_own_are_not() {
        let sb = crate::Sandbox::new().unwrap();
        let dir = std::fs::File::open(sb.path()).unwrap();
        let Some(t) = listener_or_skip(&dir) else {
            return;
        };
        let file = sb.path().join("f");
        let sub = sb.path().join("sub");
        std::fs::write(&file, "x").unwrap();
        std::fs::create_dir(&sub).unwrap();
        t.restart();
        // Our own open is not another process's.
        drop(std::fs::File::open(&file).unwrap());
        t.drain();
        let ino = |p: &std::path::Path| {
            (
                std::fs::metadata(p).unwrap().dev(),
                std::fs::metadata(p).unwrap().ino(),
            )
        };
        assert!(!t.touched(ino(&file)));
        let mark = t.mark();
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg("cat \"$1\" >/dev/null && mkdir \"$2/new\"")
            .arg("sh")
            .arg(&file)
            .arg(&sub)
            .status()
            .unwrap();
        assert!(status.success());
        t.drain();
        assert!(t.blind().is_none(), "{:?}", t.blind());
        assert!(t.touched(ino(&file)), "the open of a file");
        assert!(t.touched(ino(&sub)), "a name made in a directory");
        assert!(t.since(mark).len() >= 2);
        t.restart();
        assert!(!t.touched(ino(&file)), "forgotten at a restart");
    }
}
