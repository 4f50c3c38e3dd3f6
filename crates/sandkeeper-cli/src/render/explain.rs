//! `explain` output.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

use sandkeeper::inuse::InUse;
use sandkeeper::reap::Verdict;
use sandkeeper::scan::RootReport;

use crate::config::user_name;
use crate::humanize::{age, sanitize, size};

/// Why entry `index` of `report` is in its state, and what a reap with the
/// given rules would do.
pub fn text(
    report: &RootReport,
    index: usize,
    verdict: &Verdict,
    inuse: &InUse,
    now: i64,
) -> String {
    let e = &report.entries[index];
    let path = report.path.join(&e.name);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {}",
        sanitize(path.as_os_str().as_bytes()),
        e.state
    );
    let _ = writeln!(out, "  why: {}", e.reason);
    for h in &e.holders {
        let _ = writeln!(out, "  held by: {h}");
    }
    for k in &e.kernel {
        let _ = writeln!(out, "  held by: {k}");
    }
    for s in &e.sockets {
        let _ = writeln!(
            out,
            "  held by: unix socket {}",
            sanitize(s.as_os_str().as_bytes())
        );
    }
    for u in inuse.uninspectable() {
        let _ = writeln!(out, "  could not inspect: {u}");
    }
    match (&e.lease, e.lease_invalid) {
        (Some(l), _) => {
            let _ = writeln!(
                out,
                "  lease: made by pid {} ({}) as {} on {}, {} ago{}",
                l.pid,
                sanitize(l.cmd.join(" ").as_bytes()),
                user_name(l.uid),
                sanitize(l.host.as_bytes()),
                age(now - l.created_ms as i64),
                l.site
                    .as_deref()
                    .map(|s| format!(", at {s}"))
                    .unwrap_or_default()
            );
            if let Some(until) = l.keep_until_ms {
                let _ = writeln!(out, "  kept on purpose until {until} ms since the epoch");
            }
        }
        (None, true) => {
            let _ = writeln!(out, "  lease: present but unreadable");
        }
        (None, false) => {
            let _ = writeln!(out, "  lease: none (an unmanaged entry)");
        }
    }
    let _ = writeln!(
        out,
        "  size: {} in {} files and {} dirs; newest change {} ago; owner {}",
        size(e.disk_bytes),
        e.files,
        e.dirs,
        e.newest_mtime_ms.map_or("-".into(), |m| age(now - m)),
        user_name(e.uid)
    );
    let _ = writeln!(out, "  family: {}", sanitize(e.pattern.as_bytes()));
    let _ = match verdict {
        Verdict::Reap(reason) => writeln!(out, "  reap with these rules: remove ({reason})"),
        Verdict::Keep(reason) => writeln!(out, "  reap with these rules: keep ({reason})"),
    };
    out
}
