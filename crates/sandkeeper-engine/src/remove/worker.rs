//! One worker's depth-first removal of a subtree, iterative and with a
//! bounded number of open descriptors.
//!
//! The walk holds a stack of frames, one per directory being emptied. A
//! directory is listed once, start to end: entries that are not directories
//! are unlinked as they are listed (by name, never opened), subdirectories
//! are remembered and entered one at a time afterwards. Only the deepest
//! `max_open` frames keep their descriptor; a frame whose descriptor was
//! closed is reopened through `..` of its child and must then be the very
//! directory it was (same device and inode), otherwise the walk reopens it
//! from the base by names, checking every step, or gives that subtree up.
//!
//! Names of pending subdirectories live in one byte arena used as a stack
//! (a frame's pending names are always above its parent's), so listing a
//! directory allocates nothing per entry.

use std::ffi::{CStr, OsStr};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use rustix::fs::{FileType, RawDir};
use rustix::io::Errno;

use super::node::Node;
use super::plan::Plan;
use super::report::{LeftReason, Op, Tally};
use super::{ATIME, NO_STATX};
use crate::fs_at::{self, Fence, Meta, Opened};

/// Size of the `getdents64` buffer: a few hundred entries per call.
const BUF_SIZE: usize = 32 * 1024;
/// The largest `linux_dirent64` record: a 255-byte name.
const MAX_RECLEN: usize = 280;

/// The size of the `linux_dirent64` record of a name, as the kernel lays it
/// out: 19 header bytes, the name and its NUL, rounded up to 8.
fn reclen(name_len: usize) -> usize {
    (19 + name_len + 1).next_multiple_of(8)
}

/// How often an entry may flip between directory and non-directory under
/// us before it is reported as [`LeftReason::Replaced`].
const MAX_TRIES: u8 = 4;
/// How often a directory that is still not empty after being emptied (a
/// concurrent writer) is listed again before it is reported.
const MAX_RESCANS: u8 = 3;

/// A name waiting in the arena: `off..off + len` holds it with its NUL.
#[derive(Debug, Clone, Copy)]
struct Pending {
    off: usize,
    len: usize,
    tries: u8,
}

/// Per-directory state a listing updates.
#[derive(Debug, Clone, Copy)]
struct DirState {
    perm: u32,
    /// `fchmod` was tried already (it is tried once per directory).
    fixed: bool,
    /// Something inside was left, so the directory cannot go either.
    left: bool,
}

impl DirState {
    fn new(st: &Meta) -> Self {
        DirState {
            perm: st.perm,
            fixed: false,
            left: false,
        }
    }

    /// The state of a base directory, shared between workers.
    fn of_node(node: &Node) -> Self {
        DirState {
            perm: node.st.perm,
            fixed: node.fixed.load(Ordering::Acquire),
            left: false,
        }
    }

    fn store_into(&self, node: &Node) {
        if self.fixed {
            node.fixed.store(true, Ordering::Release);
        }
        if self.left {
            node.left_inside.store(true, Ordering::Release);
        }
    }
}

/// A directory being emptied.
struct Frame {
    fd: Option<OwnedFd>,
    st: Meta,
    name: Pending,
    /// Pending entries below this index belong to ancestors.
    pending_base: usize,
    state: DirState,
    rescans: u8,
}

/// Where a run started, so nested bookkeeping can be unwound to it.
#[derive(Clone, Copy)]
struct Mark {
    pending: usize,
    frames: usize,
}

/// What reopening a frame's parent found.
enum Parent {
    /// The parent is open again.
    Open,
    /// The parent is open again, but the frame is no longer in it.
    ChildMoved,
    /// The parent cannot be reached: given up (and reported).
    Lost,
}

/// What [`Walker::open_child`] found.
pub(crate) enum Child {
    /// A directory of the same mount, open and ready to be listed.
    Dir(OwnedFd, Meta),
    /// Dealt with (removed, vanished or left); `true` if something was left.
    Done(bool),
}

/// A worker's reusable state: listing buffer, frame stack, name arena and
/// its tally of what it removed and left.
pub(crate) struct Walker {
    buf: Vec<MaybeUninit<u8>>,
    frames: Vec<Frame>,
    names: Vec<u8>,
    pending: Vec<Pending>,
    /// Frames holding a descriptor: always `frames[lowest_open..]`.
    open: usize,
    lowest_open: usize,
    max_open: usize,
    count_bytes: bool,
    pub(crate) tally: Tally,
}

impl Walker {
    /// A walker that keeps at most `plan.max_open` directories open (at
    /// least 2).
    pub(crate) fn new(plan: &Plan) -> Self {
        Walker {
            buf: vec![MaybeUninit::uninit(); BUF_SIZE],
            frames: Vec::new(),
            names: Vec::new(),
            pending: Vec::new(),
            open: 0,
            lowest_open: 0,
            max_open: plan.max_open.max(2),
            count_bytes: plan.count_bytes,
            tally: Tally::default(),
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            pending: self.pending.len(),
            frames: self.frames.len(),
        }
    }

    /// Removes the directory `name` of `base` and everything below it.
    /// Returns whether something was left (then `name` stays too).
    pub(crate) fn remove_child(&mut self, base: &Node, name: &CStr, fence: &Fence) -> bool {
        let mark = self.mark();
        let names_mark = self.names.len();
        self.push_pending(name.to_bytes_with_nul(), 0);
        let mut state = DirState::of_node(base);
        self.run(base, fence, mark, &mut state);
        self.names.truncate(names_mark);
        state.store_into(base);
        state.left
    }

    /// Removes everything inside `base`, listing it again from the start
    /// (`thorough`ly when it was emptied before). Returns whether something
    /// was left.
    pub(crate) fn empty(&mut self, base: &Node, fence: &Fence, thorough: bool) -> bool {
        let mark = self.mark();
        let names_mark = self.names.len();
        let mut state = DirState::of_node(base);
        self.scan_base(base, &mut state, thorough);
        self.run(base, fence, mark, &mut state);
        self.names.truncate(names_mark);
        state.store_into(base);
        state.left
    }

    /// Opens the directory `name` of `base` the way the walk would enter it;
    /// a name that turns out not to be a directory is unlinked, a mount
    /// point or error is recorded.
    pub(crate) fn open_child(&mut self, base: &Node, name: &CStr, fence: &Fence) -> Child {
        let mark = self.mark();
        let names_mark = self.names.len();
        self.push_pending(name.to_bytes_with_nul(), 0);
        let mut state = DirState::of_node(base);
        let mut child = Child::Done(false);
        while self.pending.len() > mark.pending {
            let Some(p) = self.pending.pop() else { break };
            if let Some((fd, st)) = self.open_entry(base, fence, p, &mut state) {
                child = Child::Dir(fd, st);
                break;
            }
        }
        self.pending.truncate(mark.pending);
        self.names.truncate(names_mark);
        state.store_into(base);
        match child {
            Child::Done(_) => Child::Done(state.left),
            dir => dir,
        }
    }

    /// Lists `base` (from the start), unlinking what is not a directory;
    /// returns the names of its subdirectories for the caller to hand out.
    pub(crate) fn list_subdirs(&mut self, base: &Node, thorough: bool) -> Vec<Box<CStr>> {
        let mark = self.mark();
        let names_mark = self.names.len();
        let mut state = DirState::of_node(base);
        self.scan_base(base, &mut state, thorough);
        let subdirs = self.pending[mark.pending..]
            .iter()
            .filter_map(|p| CStr::from_bytes_with_nul(&self.names[p.off..p.off + p.len]).ok())
            .map(Box::from)
            .collect();
        self.pending.truncate(mark.pending);
        self.names.truncate(names_mark);
        state.store_into(base);
        subdirs
    }

    fn scan_base(&mut self, base: &Node, state: &mut DirState, thorough: bool) {
        if let Err(errno) = fs_at::rewind(base.fd.as_fd()) {
            self.leave(
                base,
                0,
                None,
                LeftReason::Errno {
                    op: Op::ReadDir,
                    errno,
                },
            );
            state.left = true;
            return;
        }
        self.scan(base, base.fd.as_fd(), 0, state, thorough);
    }

    /// The main loop: enter pending subdirectories depth first, and remove
    /// each directory once everything below it is done.
    fn run(&mut self, base: &Node, fence: &Fence, mark: Mark, base_state: &mut DirState) {
        loop {
            let floor = self.frames.last().map_or(mark.pending, |f| f.pending_base);
            if self.pending.len() > floor {
                let Some(p) = self.pending.pop() else { break };
                let opened = match self.frames.last_mut() {
                    Some(top) => {
                        let mut state = top.state;
                        let opened = self.open_entry(base, fence, p, &mut state);
                        if let Some(top) = self.frames.last_mut() {
                            top.state = state;
                        }
                        opened
                    }
                    None => self.open_entry(base, fence, p, base_state),
                };
                if let Some((fd, st)) = opened {
                    self.enter(base, fd, st, p);
                }
            } else if self.frames.len() > mark.frames {
                self.finish_top(base, fence, base_state);
            } else {
                break;
            }
        }
    }

    /// The descriptor of the innermost directory (the base when no frame
    /// is pushed). The top frame always holds its descriptor.
    fn top_fd<'a>(&'a self, base: &'a Node) -> Option<BorrowedFd<'a>> {
        match self.frames.last() {
            Some(top) => top.fd.as_ref().map(|fd| fd.as_fd()),
            None => Some(base.fd.as_fd()),
        }
    }

    fn name(&self, p: Pending) -> &CStr {
        // The arena only ever receives names copied from a `CStr` with its
        // NUL, so this cannot fail; an empty name would fail every syscall
        // harmlessly.
        CStr::from_bytes_with_nul(&self.names[p.off..p.off + p.len]).unwrap_or(c"")
    }

    fn push_pending(&mut self, name_with_nul: &[u8], tries: u8) {
        let off = self.names.len();
        self.names.extend_from_slice(name_with_nul);
        self.pending.push(Pending {
            off,
            len: name_with_nul.len(),
            tries,
        });
    }

    /// Opens a pending entry that the listing said is a directory. Returns
    /// the descriptor to enter it, or `None` when it was dealt with here
    /// (then its name has been dropped from the arena, or pushed back to
    /// be tried again).
    fn open_entry(
        &mut self,
        base: &Node,
        fence: &Fence,
        p: Pending,
        state: &mut DirState,
    ) -> Option<(OwnedFd, Meta)> {
        let result = match self.top_fd(base) {
            Some(parent) => fs_at::open_dir_stat(parent, self.name(p), ATIME, fence, NO_STATX),
            None => Err(Errno::BADF),
        };
        let result = match result {
            Err(Errno::ACCESS) if !state.fixed => {
                self.fix_top(base, state);
                self.pending.push(p);
                return None;
            }
            Err(Errno::ACCESS) => match self.top_fd(base) {
                Some(parent) => {
                    fs_at::open_unreadable_dir(parent, self.name(p), fence, None, NO_STATX)
                }
                None => Err(Errno::BADF),
            },
            other => other,
        };
        match result {
            Ok(Opened::Dir(fd, st)) => return Some((fd, st)),
            Ok(Opened::Fenced) => {
                self.leave_pending(base, p, LeftReason::MountPoint);
                state.left = true;
            }
            Err(Errno::NOTDIR | Errno::LOOP) => self.unlink_pending(base, p, state),
            Err(Errno::NOENT) => {}
            Err(Errno::MFILE | Errno::NFILE) if self.shrink() => {
                self.pending.push(p);
                return None;
            }
            Err(errno) => {
                self.leave_pending(
                    base,
                    p,
                    LeftReason::Errno {
                        op: Op::Open,
                        errno,
                    },
                );
                state.left = true;
            }
        }
        self.drop_name(p);
        None
    }

    /// A pending name that is not a directory (any more): unlink it.
    /// Called from `open_entry`, which drops the name afterwards unless it
    /// was pushed back here.
    fn unlink_pending(&mut self, base: &Node, p: Pending, state: &mut DirState) {
        let Some(parent) = self.top_fd(base) else {
            return;
        };
        let name = self.name(p);
        let stat = || fs_at::stat(parent, name, NO_STATX);
        let freed = match self.count_bytes.then(stat) {
            Some(Ok(st)) if st.nlink <= 1 => st.disk,
            _ => 0,
        };
        let mut result = fs_at::unlink(parent, name);
        if result == Err(Errno::ACCESS) && !state.fixed {
            self.fix_top(base, state);
            result = self.top_fd(base).map_or(Err(Errno::BADF), |parent| {
                fs_at::unlink(parent, self.name(p))
            });
        }
        match result {
            Ok(()) => {
                self.tally.counts.files += 1;
                self.tally.counts.bytes += freed;
            }
            Err(Errno::NOENT) => {}
            Err(Errno::ISDIR) if p.tries < MAX_TRIES => {
                // Swapped back to a directory: try it as one again.
                self.pending.push(Pending {
                    tries: p.tries + 1,
                    ..p
                });
            }
            Err(Errno::ISDIR) => {
                self.leave_pending(base, p, LeftReason::Replaced);
                state.left = true;
            }
            Err(errno) => {
                self.leave_pending(
                    base,
                    p,
                    LeftReason::Errno {
                        op: Op::Unlink,
                        errno,
                    },
                );
                state.left = true;
            }
        }
    }

    /// Forgets a pending name, unless it was pushed back for another try
    /// (then it is the last pending entry and still needed).
    fn drop_name(&mut self, p: Pending) {
        if self.pending.last().is_some_and(|q| q.off == p.off) {
            return;
        }
        self.names.truncate(p.off);
    }

    fn enter(&mut self, base: &Node, fd: OwnedFd, st: Meta, p: Pending) {
        self.frames.push(Frame {
            fd: Some(fd),
            st,
            name: p,
            pending_base: self.pending.len(),
            state: DirState::new(&st),
            rescans: 0,
        });
        self.open += 1;
        while self.open > self.max_open && self.close_shallowest() {}
        self.scan_top(base, false);
    }

    /// Closes the descriptor of the outermost frame that has one, never the
    /// innermost. Returns whether one was closed.
    fn close_shallowest(&mut self) -> bool {
        if self.open <= 1 {
            return false;
        }
        let Some(frame) = self.frames.get_mut(self.lowest_open) else {
            return false;
        };
        if frame.fd.take().is_some() {
            self.open -= 1;
        }
        self.lowest_open += 1;
        true
    }

    /// Out of descriptors: keep fewer from now on. Returns whether one was
    /// freed.
    fn shrink(&mut self) -> bool {
        let closed = self.close_shallowest();
        self.max_open = self.open.max(2);
        closed
    }

    fn scan_top(&mut self, base: &Node, thorough: bool) {
        let Some(top) = self.frames.last_mut() else {
            return;
        };
        let Some(fd) = top.fd.take() else { return };
        let mut state = top.state;
        let depth = self.frames.len();
        self.scan(base, fd.as_fd(), depth, &mut state, thorough);
        if let Some(top) = self.frames.last_mut() {
            top.fd = Some(fd);
            top.state = state;
        }
    }

    /// Lists the directory `fd` (at `depth` frames below `base`): unlinks
    /// every entry that is not a directory, queues the subdirectories.
    ///
    /// Unless `thorough`, the listing stops when a `getdents64` call came
    /// back with room to spare for the longest possible entry: the
    /// filesystem had nothing more, and the call that would return 0 is
    /// saved. A filesystem that returns short reads before the end only
    /// makes the `rmdir` fail with `ENOTEMPTY`, and the directory is then
    /// listed again, thoroughly.
    fn scan(
        &mut self,
        base: &Node,
        fd: BorrowedFd<'_>,
        depth: usize,
        state: &mut DirState,
        thorough: bool,
    ) {
        let mut buf = std::mem::take(&mut self.buf);
        let mut dir = RawDir::new(fd, &mut buf);
        // Bytes the last `getdents64` returned, once there was one.
        let mut filled = None;
        loop {
            if dir.is_buffer_empty() {
                let short = filled.is_some_and(|bytes| bytes + MAX_RECLEN <= BUF_SIZE - 8);
                if short && !thorough {
                    break;
                }
                filled = Some(0);
            }
            let Some(entry) = dir.next() else { break };
            let entry = match entry {
                Ok(entry) => entry,
                // Removed by someone else while open: nothing left to list.
                Err(Errno::NOENT) => break,
                Err(errno) => {
                    self.leave(
                        base,
                        depth,
                        None,
                        LeftReason::Errno {
                            op: Op::ReadDir,
                            errno,
                        },
                    );
                    state.left = true;
                    break;
                }
            };
            let name = entry.file_name();
            filled = filled.map(|bytes| bytes + reclen(name.to_bytes().len()));
            if fs_at::is_dot(name.to_bytes()) {
                continue;
            }
            match entry.file_type() {
                FileType::Directory => self.push_pending(name.to_bytes_with_nul(), 0),
                FileType::Unknown => match fs_at::stat(fd, name, NO_STATX) {
                    Ok(st) if st.is_dir() => self.push_pending(name.to_bytes_with_nul(), 0),
                    Ok(st) => self.unlink_listed(base, fd, name, depth, st.nlink, st.disk, state),
                    Err(Errno::NOENT) => {}
                    Err(errno) => {
                        let reason = LeftReason::Errno {
                            op: Op::Stat,
                            errno,
                        };
                        self.leave(base, depth, Some(name.to_bytes()), reason);
                        state.left = true;
                    }
                },
                // Not a directory: unlinked by name, never opened. A stat
                // only to count bytes.
                _ if !self.count_bytes => self.unlink_listed(base, fd, name, depth, 2, 0, state),
                _ => match fs_at::stat(fd, name, NO_STATX) {
                    Ok(st) if st.is_dir() => self.push_pending(name.to_bytes_with_nul(), 0),
                    Ok(st) => self.unlink_listed(base, fd, name, depth, st.nlink, st.disk, state),
                    // Gone already, or cannot even be inspected: unlink
                    // decides (and reports), the size is just not counted.
                    Err(_) => self.unlink_listed(base, fd, name, depth, 2, 0, state),
                },
            }
        }
        self.buf = buf;
    }

    /// Unlinks a listed entry that is not a directory.
    #[allow(clippy::too_many_arguments)]
    fn unlink_listed(
        &mut self,
        base: &Node,
        fd: BorrowedFd<'_>,
        name: &CStr,
        depth: usize,
        nlink: u64,
        bytes: u64,
        state: &mut DirState,
    ) {
        let mut result = fs_at::unlink(fd, name);
        if result == Err(Errno::ACCESS) && !state.fixed {
            state.fixed = true;
            if fs_at::make_writable(fd, state.perm).is_ok() {
                result = fs_at::unlink(fd, name);
            }
        }
        match result {
            Ok(()) => {
                self.tally.counts.files += 1;
                if nlink <= 1 {
                    self.tally.counts.bytes += bytes;
                }
            }
            Err(Errno::NOENT) => {}
            // It became a directory since the listing: treat it as one.
            Err(Errno::ISDIR) => self.push_pending(name.to_bytes_with_nul(), 1),
            Err(errno) => {
                let reason = LeftReason::Errno {
                    op: Op::Unlink,
                    errno,
                };
                self.leave(base, depth, Some(name.to_bytes()), reason);
                state.left = true;
            }
        }
    }

    /// `fchmod` the innermost directory so its entries can be removed; tried
    /// once per directory.
    fn fix_top(&mut self, base: &Node, state: &mut DirState) {
        state.fixed = true;
        if let Some(fd) = self.top_fd(base) {
            // A failure (not the owner, read-only filesystem) shows up as the
            // EACCES of the operation that needed it.
            let _ = fs_at::make_writable(fd, state.perm);
        }
    }

    /// Everything below the top frame is done: remove its directory.
    fn finish_top(&mut self, base: &Node, fence: &Fence, base_state: &mut DirState) {
        let depth = self.frames.len();
        let Some(i) = depth.checked_sub(1) else {
            return;
        };
        let mut moved = false;
        if i > 0 && self.frames[i - 1].fd.is_none() {
            match self.reopen_parent(base, fence, i, base_state) {
                Parent::Open => {}
                Parent::ChildMoved => moved = true,
                Parent::Lost => return,
            }
        }
        let mut result = if self.frames[i].state.left || moved {
            None
        } else {
            Some(self.rmdir_top(base))
        };
        if result == Some(Err(Errno::NOENT)) && self.top_moved(base, i) {
            moved = true;
        }
        if result == Some(Err(Errno::ACCESS)) {
            let mut state = *self.parent_state(i, base_state);
            if !state.fixed {
                state.fixed = true;
                if let Some(parent) = self.parent_fd(base, i) {
                    let _ = fs_at::make_writable(parent, state.perm);
                }
                *self.parent_state(i, base_state) = state;
                result = Some(self.rmdir_top(base));
            }
        }
        if result == Some(Err(Errno::NOTEMPTY)) && self.frames[i].rescans < MAX_RESCANS {
            // Something was added since it was listed: list it again.
            self.frames[i].rescans += 1;
            let rewound = self.frames[i]
                .fd
                .as_ref()
                .map_or(Err(Errno::BADF), |fd| fs_at::rewind(fd.as_fd()));
            if rewound.is_ok() {
                self.scan_top(base, true);
                return;
            }
        }
        let Some(frame) = self.pop_frame() else {
            return;
        };
        if moved {
            // It is somewhere else now, emptied; its old parent can go.
            let path = self.path_to(base, depth - 1, Some(self.name(frame.name).to_bytes()));
            self.tally.leave(path, LeftReason::Moved);
            self.names.truncate(frame.name.off);
            return;
        }
        let reason = match result {
            // Something below was left; it is reported, this one is implied.
            None => {
                self.top_state(base_state).left = true;
                None
            }
            Some(Ok(())) => {
                self.tally.counts.dirs += 1;
                self.tally.counts.bytes += frame.st.disk;
                None
            }
            Some(Err(Errno::NOENT)) => None,
            Some(Err(Errno::NOTDIR)) if frame.name.tries < MAX_TRIES => {
                // Our directory was renamed away and something else took its
                // name: deal with that name afresh (the name stays).
                self.pending.push(Pending {
                    tries: frame.name.tries + 1,
                    ..frame.name
                });
                return;
            }
            Some(Err(Errno::NOTDIR)) => Some(LeftReason::Replaced),
            Some(Err(errno)) => Some(LeftReason::Errno {
                op: Op::Rmdir,
                errno,
            }),
        };
        if let Some(reason) = reason {
            let path = self.path_to(base, depth - 1, Some(self.name(frame.name).to_bytes()));
            self.tally.leave(path, reason);
            self.top_state(base_state).left = true;
        }
        self.names.truncate(frame.name.off);
    }

    /// `rmdir` of the top frame's name in its parent.
    fn rmdir_top(&self, base: &Node) -> Result<(), Errno> {
        let i = self.frames.len().checked_sub(1).ok_or(Errno::BADF)?;
        let parent = self.parent_fd(base, i).ok_or(Errno::BADF)?;
        fs_at::rmdir(parent, self.name(self.frames[i].name))
    }

    /// The descriptor of the parent of frame `i`.
    fn parent_fd<'a>(&'a self, base: &'a Node, i: usize) -> Option<BorrowedFd<'a>> {
        match i.checked_sub(1) {
            Some(j) => self.frames[j].fd.as_ref().map(|fd| fd.as_fd()),
            None => Some(base.fd.as_fd()),
        }
    }

    fn parent_state<'a>(&'a mut self, i: usize, base_state: &'a mut DirState) -> &'a mut DirState {
        match i.checked_sub(1) {
            Some(j) => &mut self.frames[j].state,
            None => base_state,
        }
    }

    fn top_state<'a>(&'a mut self, base_state: &'a mut DirState) -> &'a mut DirState {
        match self.frames.last_mut() {
            Some(top) => &mut top.state,
            None => base_state,
        }
    }

    /// Pops the top frame, keeping the descriptor bookkeeping right.
    fn pop_frame(&mut self) -> Option<Frame> {
        let frame = self.frames.pop()?;
        if frame.fd.is_some() {
            self.open -= 1;
        }
        self.lowest_open = self.lowest_open.min(self.frames.len());
        Some(frame)
    }

    /// Reopens frame `i - 1`, whose descriptor was closed, from frame `i`
    /// through `..`, or else from the base by names.
    fn reopen_parent(
        &mut self,
        base: &Node,
        fence: &Fence,
        i: usize,
        base_state: &mut DirState,
    ) -> Parent {
        let j = i - 1;
        let want = self.frames[j].st.id;
        let reopened = self.frames[i].fd.as_ref().map_or(Err(Errno::BADF), |fd| {
            fs_at::reopen_parent(fd.as_fd(), want, NO_STATX)
        });
        let (fd, parent) = match reopened {
            Ok((fd, _)) => (fd, Parent::Open),
            Err(errno) => match self.reopen_from_base(base, fence, j) {
                // `..` is another directory: frame `i` was moved away.
                Ok(fd) if errno == Errno::STALE => (fd, Parent::ChildMoved),
                Ok(fd) => (fd, Parent::Open),
                Err(lost) => {
                    self.give_up(base, fence, lost, base_state);
                    return Parent::Lost;
                }
            },
        };
        self.frames[j].fd = Some(fd);
        self.open += 1;
        self.lowest_open = j;
        parent
    }

    /// Whether the top frame `i` is no longer in the directory it was
    /// entered from (its `..` is another directory).
    fn top_moved(&self, base: &Node, i: usize) -> bool {
        let want = match i.checked_sub(1) {
            Some(j) => self.frames[j].st.id,
            None => base.st.id,
        };
        self.frames[i]
            .fd
            .as_ref()
            .and_then(|fd| fs_at::stat(fd.as_fd(), c"..", NO_STATX).ok())
            .is_some_and(|st| st.id != want)
    }

    /// Walks from the base down to frame `j` by names, checking each step is
    /// the directory that was entered. `Err(k)`: frame `k` cannot be reached.
    fn reopen_from_base(&self, base: &Node, fence: &Fence, j: usize) -> Result<OwnedFd, usize> {
        let mut current: Option<OwnedFd> = None;
        for k in 0..=j {
            let parent = current.as_ref().map_or(base.fd.as_fd(), |fd| fd.as_fd());
            let frame = &self.frames[k];
            match fs_at::open_dir_stat(parent, self.name(frame.name), ATIME, fence, NO_STATX) {
                Ok(Opened::Dir(fd, st)) if st.id == frame.st.id => current = Some(fd),
                _ => return Err(k),
            }
        }
        current.ok_or(0)
    }

    /// Frames `k..` cannot be reached any more: report frame `k` as moved
    /// and drop them with everything they had pending. The frame that is
    /// then on top gets its descriptor back from the base by names (or is
    /// given up in turn).
    fn give_up(&mut self, base: &Node, fence: &Fence, k: usize, base_state: &mut DirState) {
        let mut k = k;
        loop {
            let name = self.frames[k].name;
            let path = self.path_to(base, k, Some(self.name(name).to_bytes()));
            self.tally.leave(path, LeftReason::Moved);
            let pending_base = self.frames[k].pending_base;
            while self.frames.len() > k {
                self.pop_frame();
            }
            self.pending.truncate(pending_base);
            self.names.truncate(name.off);
            self.top_state(base_state).left = true;
            let Some(top) = self.frames.len().checked_sub(1) else {
                return;
            };
            if self.frames[top].fd.is_some() {
                return;
            }
            match self.reopen_from_base(base, fence, top) {
                Ok(fd) => {
                    self.frames[top].fd = Some(fd);
                    self.open += 1;
                    self.lowest_open = top;
                    return;
                }
                Err(lost) => k = lost,
            }
        }
    }

    fn leave_pending(&mut self, base: &Node, p: Pending, reason: LeftReason) {
        let depth = self.frames.len();
        let path = self.path_to(base, depth, Some(self.name(p).to_bytes()));
        self.tally.leave(path, reason);
    }

    fn leave(&mut self, base: &Node, depth: usize, leaf: Option<&[u8]>, reason: LeftReason) {
        let path = self.path_to(base, depth, leaf);
        self.tally.leave(path, reason);
    }

    /// The report path of `leaf` inside the directory `depth` frames below
    /// `base` (the directory itself when `leaf` is `None`).
    fn path_to(&self, base: &Node, depth: usize, leaf: Option<&[u8]>) -> PathBuf {
        let mut path = base.path();
        for frame in &self.frames[..depth.min(self.frames.len())] {
            path.push(OsStr::from_bytes(self.name(frame.name).to_bytes()));
        }
        if let Some(leaf) = leaf {
            path.push(OsStr::from_bytes(leaf));
        }
        path
    }
}
