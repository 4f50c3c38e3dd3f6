//! `sandkeeper.scan/v1` written as the scan goes ([`write_scan`]): each
//! entry is serialized when the scan hands it over and dropped, so memory
//! stays flat in the number of entries.

use std::cell::{Cell, RefCell};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::scan::{path, summary, Document, EntryJson, RootJson, Wide};
use super::SafeFormatter;
use crate::error::{Error, Result};
use crate::inuse::InUse;
use crate::root::Root;
use crate::scan::{Report, RootReport, Scanner};

/// Bytes gathered before they are handed to the writer.
const CHUNK: usize = 64 * 1024;

/// Scans `roots` with `scanner` and writes their `sandkeeper.scan/v1`
/// document to `out` as the scan goes: the document [`scan`](super::scan)
/// gives for a report of the same scan, pretty and safe to print
/// ([`pretty`](super::pretty)), ending in a newline. `entries` adds every
/// entry of every root, each written as the scan hands it over and then
/// dropped: memory stays flat in the number of entries (the scan's names,
/// stored compactly, are the only per-entry cost), however many there are.
///
/// With `entries`, each root's `entries` come before its `filesystem`,
/// `totals`, `groups` and `warnings` (only known once its walk is done);
/// otherwise the members are in [`scan`](super::scan)'s order. JSON does
/// not order an object's members: a parsed document is the same.
///
/// Nothing reaches `out` before the first entry is written (without
/// `entries`: before the document is complete), so a scan that fails
/// before then writes nothing. Roots are scanned one after another
/// against one pass over `/proc`, as [`Scanner::scan_roots`] does; the
/// scanner's [`keep_entries`](Scanner::keep_entries) does not matter. When
/// `out` fails, the scan is stopped at its next inode (unless the caller
/// gave the scanner a [stop flag](Scanner::stop_flag) of its own: then it
/// runs to its end, writing nothing more).
///
/// Returns the report of the scan without its entries: the totals,
/// families and warnings of each root, and what the in-use pass could not
/// see (for the caller's warnings).
///
/// ```
/// use sandkeeper_engine::{json, root::Root, scan::Scanner};
/// # let dir = sandkeeper_engine::Sandbox::new()?;
/// # std::fs::create_dir(dir.path().join("app-235-101"))?;
/// let roots = [Root::open(dir.path())?];
/// let mut out = Vec::new();
/// let report = json::write_scan(&Scanner::new(), &roots, true, &mut out)?;
/// let doc: serde_json::Value = serde_json::from_slice(&out)?;
/// assert_eq!(doc["schema"], json::SCAN_SCHEMA);
/// assert_eq!(doc["roots"][0]["entries"].as_array().map(Vec::len), Some(2)); // and the sandbox's lease
/// assert_eq!(report.roots[0].totals.entries, 2);
/// assert!(report.roots[0].entries.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`Scanner::scan_roots`]; and [`ErrorKind::Io`](crate::ErrorKind::Io)
/// when `out` fails ([`Error::io_error`] has its error: a closed pipe is
/// `BrokenPipe`). A root that cannot be scanned after entries were
/// written leaves the document unfinished (not valid JSON: the caller
/// must not present it as a result).
pub fn write_scan(
    scanner: &Scanner,
    roots: &[Root],
    entries: bool,
    out: &mut dyn io::Write,
) -> Result<Report> {
    let mut own = scanner.clone();
    // A failed write stops the walk, through a flag of our own when the
    // caller did not give one (theirs may stop more than this scan).
    let stop = match scanner.stop {
        Some(_) => None,
        None => {
            let flag = Arc::new(AtomicBool::new(false));
            own.stop_flag(Arc::clone(&flag));
            Some(flag)
        }
    };
    let started_ms = crate::clock::now_ms() as i64;
    if let Some(first) = roots.first() {
        scanner.check_stop(first.path())?;
    }
    let inuse = own.in_use()?;
    let committed = Cell::new(false);
    let stream = Stream {
        scanner: &own,
        inuse: &inuse,
        started_ms,
        committed: &committed,
        stop: stop.as_deref(),
        reports: RefCell::new(Vec::with_capacity(roots.len())),
        failed: RefCell::new(None),
    };
    let doc = Document {
        started_ms,
        roots: Roots {
            stream: &stream,
            roots,
            entries,
        },
        wide: Wide {
            uninspectable: inuse.uninspectable(),
            assumed: inuse.assumed(),
            blind_spots: inuse.blind_spots(),
            assumed_blind_spots: inuse.assumed_blind_spots(),
            assumes_unseen_free: inuse.assumes_unseen_free(),
        },
    };
    let mut held = Held {
        out,
        buf: Vec::with_capacity(CHUNK),
        committed: &committed,
    };
    let written = doc.serialize(&mut serde_json::Serializer::with_formatter(
        &mut held,
        SafeFormatter::default(),
    ));
    if let Some(e) = stream.failed.take() {
        return Err(e);
    }
    let cannot = |e: io::Error| Error::io("cannot write the scan document", e);
    written.map_err(|e| cannot(e.into()))?;
    io::Write::write_all(&mut held, b"\n").map_err(cannot)?;
    committed.set(true);
    io::Write::flush(&mut held).map_err(cannot)?;
    Ok(Report::of(stream.reports.into_inner(), &inuse, started_ms))
}

/// What the serialization of a document under way shares with the scan
/// it writes.
struct Stream<'a> {
    scanner: &'a Scanner,
    inuse: &'a InUse,
    started_ms: i64,
    /// Raised with the first entry: from then on, what is written goes out.
    committed: &'a Cell<bool>,
    /// Ours to raise when `out` fails.
    stop: Option<&'a AtomicBool>,
    /// Each root's report, as its scan ends.
    reports: RefCell<Vec<RootReport>>,
    /// Why a root's scan failed (the serializer only carries text).
    failed: RefCell<Option<Error>>,
}

impl Stream<'_> {
    /// `err` for the serializer, `e` kept for the caller.
    fn fail<E: serde::ser::Error>(&self, e: Error) -> E {
        let err = E::custom(&e);
        *self.failed.borrow_mut() = Some(e);
        err
    }
}

/// `roots`: each root scanned as it is written.
struct Roots<'a> {
    stream: &'a Stream<'a>,
    roots: &'a [Root],
    entries: bool,
}

impl Serialize for Roots<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let stream = self.stream;
        let mut seq = s.serialize_seq(Some(self.roots.len()))?;
        for root in self.roots {
            if self.entries {
                seq.serialize_element(&Streamed { stream, root })?;
                continue;
            }
            let report = stream
                .scanner
                .scan_root_with(root, stream.inuse, &mut |_| {})
                .map_err(|e| stream.fail::<S::Error>(e))?;
            seq.serialize_element(&RootJson {
                root: &report,
                entries: false,
                now_ms: stream.started_ms,
            })?;
            stream.reports.borrow_mut().push(report);
        }
        seq.end()
    }
}

/// A root with its entries: `path`, `entries` as the scan gives them, then
/// what the walk sums up and the warnings.
struct Streamed<'a> {
    stream: &'a Stream<'a>,
    root: &'a Root,
}

impl Serialize for Streamed<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        path(&mut m, self.root.path())?;
        m.serialize_entry("entries", &Entries(self))?;
        let reports = self.stream.reports.borrow();
        let Some(report) = reports.last() else {
            return Err(serde::ser::Error::custom("a root's scan gave no report"));
        };
        summary(&mut m, report)?;
        m.serialize_entry("warnings", &report.warnings)?;
        m.end()
    }
}

/// A root's `entries`: the scan runs as they are written; its report goes
/// to [`Stream::reports`].
struct Entries<'a>(&'a Streamed<'a>);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let Streamed { stream, root } = *self.0;
        // Origins (optional, `docs/origins.md`): as the scan reads them
        // (with `origins(true)`, as root: `RootReport::origins_read`); else
        // read per entry through the root's descriptor.
        #[cfg(target_os = "linux")]
        let fd = match stream.scanner.origins && rustix::process::geteuid().is_root() {
            true => None,
            false => Some(root.fd()),
        };
        #[cfg(not(target_os = "linux"))]
        let fd = None;
        let mut seq = s.serialize_seq(None)?;
        let mut failed = None;
        let scanned = stream
            .scanner
            .scan_root_with(root, stream.inuse, &mut |entry| {
                if failed.is_some() {
                    return;
                }
                stream.committed.set(true);
                if let Err(e) = seq.serialize_element(&EntryJson(&entry, stream.started_ms, fd)) {
                    failed = Some(e);
                    if let Some(stop) = stream.stop {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            });
        // A failed write first: the scan may have stopped because of it.
        if let Some(e) = failed {
            return Err(e);
        }
        let report = scanned.map_err(|e| stream.fail::<S::Error>(e))?;
        stream.reports.borrow_mut().push(report);
        seq.end()
    }
}

/// Gathers what is written into chunks of [`CHUNK`] bytes for `out`, and
/// holds all of it until `committed` is raised.
struct Held<'a> {
    out: &'a mut dyn io::Write,
    buf: Vec<u8>,
    committed: &'a Cell<bool>,
}

impl Held<'_> {
    fn drain(&mut self) -> io::Result<()> {
        let written = self.out.write_all(&self.buf);
        self.buf.clear();
        written
    }
}

impl io::Write for Held<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.committed.get() && self.buf.len() >= CHUNK {
            self.drain()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.committed.get() {
            self.drain()?;
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A root of `n` empty files.
    fn root_of(n: usize) -> (crate::Sandbox, Root) {
        let dir = crate::Sandbox::new().unwrap();
        for i in 0..n {
            std::fs::write(dir.path().join(format!("app-235-{i}")), b"").unwrap();
        }
        let root = Root::open(dir.path()).unwrap();
        (dir, root)
    }

    /// Fails every write as a closed pipe does.
    struct Closed(usize);

    impl io::Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            self.0 += 1;
            Err(io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn nothing_is_written_when_the_scan_fails_before_the_first_entry() {
        let (_dir, root) = root_of(3);
        for entries in [true, false] {
            // Raised as the walk starts: the scan fails before any entry.
            let stop = Arc::new(AtomicBool::new(false));
            let mut scanner = Scanner::new();
            scanner.stop_flag(Arc::clone(&stop));
            scanner.progress(Arc::new(move |_, _| stop.store(true, Ordering::Relaxed)));
            let mut out = Vec::new();
            let err =
                write_scan(&scanner, std::slice::from_ref(&root), entries, &mut out).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Stopped);
            assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        }
    }

    #[test]
    fn a_failed_write_stops_the_scan() {
        // More than one chunk of the walk (4,096 entries).
        let n = 9_000;
        let (_dir, root) = root_of(n);
        let started = Arc::new(AtomicUsize::new(0));
        let mut scanner = Scanner::new();
        let seen = Arc::clone(&started);
        scanner.progress(Arc::new(move |done, _| {
            seen.fetch_max(done, Ordering::Relaxed);
        }));
        let mut out = Closed(0);
        let err = write_scan(&scanner, &[root], true, &mut out).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Io);
        let io = err.io_error().map(io::Error::kind);
        assert_eq!(io, Some(io::ErrorKind::BrokenPipe), "{err}");
        assert_eq!(out.0, 1, "one write tried");
        // The second chunk of the walk was never started.
        assert!(started.load(Ordering::Relaxed) < n, "{started:?}");
    }
}
