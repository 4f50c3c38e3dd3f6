//! Who holds which lease lock, from `/proc/locks`: a snapshot for looks
//! that never lock ([`Locks`]), and the holders of one inode
//! ([`lock_holders`]).

use std::io;

/// A snapshot of the locks the kernel lists in `/proc/locks`, indexed by
/// device and inode, so that many directories can be told live or free
/// from one read and without taking a lock.
///
/// Every lock counts, not only `FLOCK`: a `POSIX`, `OFDLCK` or `LEASE`
/// lock on a directory is not part of the protocol, but someone uses the
/// directory, so it is taken as live (fail closed). Waiters (`->` lines)
/// are not holders.
///
/// # Platform behavior
///
/// Linux only. Inside a child PID namespace, `/proc/locks` leaves out the
/// locks whose locker that namespace cannot see (a process outside it, or
/// one that exited while a child still holds the descriptor); such a
/// directory then looks free. A look is only a report: removal always
/// claims the lock first ([`probe_at`](super::probe_at)), which the kernel refuses while
/// anyone holds it. The device matched is the superblock's as
/// `/proc/locks` prints it; where `stat` reports another device
/// (btrfs subvolumes), a look says free and the claim decides.
#[derive(Debug, Clone, Default)]
pub struct Locks {
    held: std::collections::HashMap<(u32, u32, u64), Vec<u32>>,
}

impl Locks {
    /// Reads `/proc/locks` once.
    ///
    /// # Errors
    ///
    /// When `/proc/locks` cannot be read.
    pub fn read() -> io::Result<Locks> {
        Ok(Locks::parse(&std::fs::read_to_string("/proc/locks")?))
    }

    /// Indexes the text of `/proc/locks`; malformed lines are ignored.
    fn parse(text: &str) -> Locks {
        let mut held: std::collections::HashMap<(u32, u32, u64), Vec<u32>> =
            std::collections::HashMap::new();
        for lock in text.lines().filter_map(parse_any_lock) {
            let pids = held.entry((lock.major, lock.minor, lock.ino)).or_default();
            if let Some(pid) = lock.pid {
                if !pids.contains(&pid) {
                    pids.push(pid);
                }
            }
        }
        for pids in held.values_mut() {
            pids.sort_unstable();
        }
        Locks { held }
    }

    /// The pids holding a lock on `(dev, ino)` (`stat`'s numbers), or
    /// `None` when the snapshot lists no lock on it. `Some(&[])` means
    /// locked by holders `/proc/locks` does not name.
    pub fn holders(&self, dev: u64, ino: u64) -> Option<&[u32]> {
        let key = (
            rustix::fs::major(dev as rustix::fs::Dev),
            rustix::fs::minor(dev as rustix::fs::Dev),
            ino,
        );
        self.held.get(&key).map(Vec::as_slice)
    }
}

/// A reading of `/proc/locks` going on on a thread of its own
/// ([`LocksReading::start`]), for the caller to do other work meanwhile.
///
/// Why a thread: the kernel lists the locks under the write side of its
/// file-lock semaphore (`percpu_down_write`), and taking it waits for an
/// RCU grace period, 5 to 15 ms here, most of it asleep. A scan lists and
/// groups a root's names during that wait instead of after it.
#[derive(Debug)]
#[doc(hidden)]
pub struct LocksReading(Option<std::thread::JoinHandle<io::Result<Locks>>>);

impl LocksReading {
    /// Starts reading; when no thread can be started, [`finish`] reads
    /// instead.
    ///
    /// [`finish`]: LocksReading::finish
    #[doc(hidden)]
    pub fn start() -> LocksReading {
        LocksReading(
            std::thread::Builder::new()
                .name("sandkeeper-locks".into())
                .spawn(Locks::read)
                .ok(),
        )
    }

    /// The snapshot, once read.
    ///
    /// # Errors
    ///
    /// When `/proc/locks` cannot be read.
    #[doc(hidden)]
    pub fn finish(self) -> io::Result<Locks> {
        match self.0 {
            Some(reading) => reading
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the reading of /proc/locks panicked"))),
            None => Locks::read(),
        }
    }
}

/// A [`LocksReading`] that its users finish when they first need the
/// snapshot, whichever thread that is: the others wait for that one.
#[derive(Debug)]
#[doc(hidden)]
pub struct PendingLocks {
    reading: std::sync::Mutex<Option<LocksReading>>,
    read: std::sync::OnceLock<Result<Locks, String>>,
}

impl PendingLocks {
    #[doc(hidden)]
    pub fn new(reading: LocksReading) -> PendingLocks {
        PendingLocks {
            reading: std::sync::Mutex::new(Some(reading)),
            read: std::sync::OnceLock::new(),
        }
    }

    /// The snapshot, or why `/proc/locks` could not be read.
    #[doc(hidden)]
    pub fn get(&self) -> Result<&Locks, &str> {
        self.read
            .get_or_init(|| {
                let reading = self
                    .reading
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                match reading {
                    Some(reading) => reading.finish().map_err(|e| e.to_string()),
                    // Taken by a thread that panicked while finishing it.
                    None => Err("its reading was interrupted".into()),
                }
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// The pids holding a `flock` on the inode `(dev, ino)`, from `/proc/locks`.
///
/// Waiters (lines marked `->`) are not holders and are left out.
///
/// # Errors
///
/// When `/proc/locks` cannot be read.
///
/// # Platform behavior
///
/// Linux only; elsewhere an `Unsupported` io error.
pub fn lock_holders(dev: u64, ino: u64) -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/proc/locks")?;
    let (major, minor) = (
        rustix::fs::major(dev as rustix::fs::Dev),
        rustix::fs::minor(dev as rustix::fs::Dev),
    );
    let mut pids: Vec<u32> = text
        .lines()
        .filter_map(parse_locks_line)
        .filter(|l| l.major == major && l.minor == minor && l.ino == ino)
        .map(|l| l.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// One granted `FLOCK` lock with a visible owner from `/proc/locks`.
#[derive(Debug, PartialEq, Eq)]
struct LockLine {
    pid: u32,
    major: u32,
    minor: u32,
    ino: u64,
}

/// Parses a line such as `1: FLOCK  ADVISORY  READ 1234 00:2e:5678 0 EOF`.
/// Returns `None` for waiters (`->`), non-flock locks (POSIX and OFD locks
/// are not leases), locks without a visible pid and malformed lines.
fn parse_locks_line(line: &str) -> Option<LockLine> {
    let lock = parse_any_lock(line).filter(|l| l.flock)?;
    Some(LockLine {
        pid: lock.pid?,
        major: lock.major,
        minor: lock.minor,
        ino: lock.ino,
    })
}

/// One granted lock of any kind from `/proc/locks`.
#[derive(Debug, PartialEq, Eq)]
struct AnyLock {
    /// Whether it is an `FLOCK` lock (the lease protocol's kind).
    flock: bool,
    /// `None` for locks without a visible owner pid (`OFDLCK`: `-1`).
    pid: Option<u32>,
    major: u32,
    minor: u32,
    ino: u64,
}

/// Parses a line of `/proc/locks` of any lock kind (`FLOCK`, `POSIX`,
/// `OFDLCK`, `LEASE`, …). `None` for waiters (`->`) and malformed lines.
fn parse_any_lock(line: &str) -> Option<AnyLock> {
    let mut fields = line.split_whitespace();
    fields.next()?; // "N:"
    let kind = fields.next()?;
    if kind == "->" {
        return None;
    }
    let _class = fields.next()?;
    let _access = fields.next()?;
    let pid: i64 = fields.next()?.parse().ok()?;
    let mut id = fields.next()?.splitn(3, ':');
    let major = u32::from_str_radix(id.next()?, 16).ok()?;
    let minor = u32::from_str_radix(id.next()?, 16).ok()?;
    let ino = id.next()?.parse().ok()?;
    Some(AnyLock {
        flock: kind == "FLOCK",
        pid: u32::try_from(pid).ok().filter(|&p| p > 0),
        major,
        minor,
        ino,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_locks_lines() {
        let cases: &[(&str, Option<LockLine>)] = &[
            (
                "1: FLOCK  ADVISORY  READ  1234 00:2e:5678 0 EOF",
                Some(LockLine {
                    pid: 1234,
                    major: 0,
                    minor: 0x2e,
                    ino: 5678,
                }),
            ),
            (
                "12: FLOCK  ADVISORY  WRITE 99 fd:01:42 0 EOF",
                Some(LockLine {
                    pid: 99,
                    major: 0xfd,
                    minor: 1,
                    ino: 42,
                }),
            ),
            ("3: -> FLOCK  ADVISORY  WRITE 1000 08:01:1 0 EOF", None),
            ("4: POSIX  ADVISORY  WRITE 678 fd:01:5678 0 EOF", None),
            ("5: OFDLCK ADVISORY  READ  -1 00:05:9 0 EOF", None),
            ("6: FLOCK  ADVISORY  READ  0 00:2e:5678 0 EOF", None),
            ("garbage", None),
            ("", None),
        ];
        for (line, want) in cases {
            assert_eq!(&parse_locks_line(line), want, "line {line:?}");
        }
    }

    #[test]
    fn locks_index_counts_every_kind_but_waiters() {
        let text = "1: FLOCK  ADVISORY  READ  1234 00:2e:5678 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 1000 00:2e:5678 0 EOF\n\
                    2: FLOCK  ADVISORY  READ  1235 00:2e:5678 0 EOF\n\
                    3: POSIX  ADVISORY  WRITE 678 fd:01:42 0 EOF\n\
                    4: OFDLCK ADVISORY  READ  -1 00:05:9 0 EOF\n\
                    5: LEASE  ACTIVE    READ  77 00:05:10 0 EOF\n\
                    6: -> FLOCK  ADVISORY  WRITE 1000 08:01:1 0 EOF\n\
                    garbage\n";
        let locks = Locks::parse(text);
        let dev = |major, minor| rustix::fs::makedev(major, minor) as u64;
        assert_eq!(locks.holders(dev(0, 0x2e), 5678), Some(&[1234, 1235][..]));
        assert_eq!(locks.holders(dev(0xfd, 1), 42), Some(&[678][..]));
        assert_eq!(locks.holders(dev(0, 5), 9), Some(&[][..]), "OFD: no pid");
        assert_eq!(locks.holders(dev(0, 5), 10), Some(&[77][..]));
        assert_eq!(locks.holders(dev(8, 1), 1), None, "a waiter holds nothing");
        assert_eq!(locks.holders(dev(0, 0x2e), 5679), None);
        assert_eq!(locks.holders(dev(1, 0x2e), 5678), None, "other device");
    }
}
