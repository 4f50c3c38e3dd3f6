//! `explain` output.
//!
//! What the scan verified comes first, as fact: the state and why, the
//! directory's real owner, the lease lock's holders as `/proc` shows them.
//! The lease record follows in its own section, "as written by its creator,
//! unverified": every field in full, escaped ([`Untrusted`]), the pid with
//! what could be verified about it, and a plain line where the record's uid
//! is not the directory's owner.

use std::fmt::Write as _;

use crate::inuse::InUse;
use crate::lease::LeaseRecord;
use crate::reap::{KeepReason, Verdict};
use crate::scan::{Entry, RootReport};

use super::claims;
use crate::escape::{self, Untrusted};
use crate::human::{age, size};

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
    // Kept on purpose: by these rules' cap when the reap gets that far,
    // else as `scan` and `ls` tell it (the default cap).
    let kept = match verdict {
        Verdict::Keep(KeepReason::KeptUntil(until)) => Some(*until),
        _ => e.kept_by_default(now),
    };
    match kept {
        Some(until) => {
            let _ = writeln!(
                out,
                "{}: kept (an orphaned sandbox kept on purpose)",
                Untrusted::path(&path)
            );
            let _ = writeln!(
                out,
                "  {}: no reap takes it before then, except under pressure",
                super::kept_until(until, now)
            );
        }
        None => {
            let _ = writeln!(out, "{}: {}", Untrusted::path(&path), e.state);
        }
    }
    let _ = writeln!(out, "  why: {}", escape::line(&e.reason.to_string()));
    let _ = writeln!(out, "  owner: {}", claims::user(e.uid));
    for &pid in e.lock_holders() {
        let comm = e.holder_comm(pid).map_or_else(
            || "command not seen".to_owned(),
            |c| Untrusted::text(c).bare().to_string(),
        );
        let _ = writeln!(out, "  lease lock held by: pid {pid} ({comm})");
    }
    for h in &e.holders {
        let _ = writeln!(out, "  held by: {}", escape::line(&h.to_string()));
    }
    for k in &e.kernel {
        let _ = writeln!(out, "  held by: {}", escape::line(&k.to_string()));
    }
    for s in &e.sockets {
        let _ = writeln!(out, "  held by: unix socket {}", Untrusted::path(s));
    }
    for u in inuse.uninspectable() {
        let _ = writeln!(out, "  could not inspect: {}", escape::line(&u.to_string()));
    }
    if inuse.assumes_unseen_free() && !inuse.assumed().is_empty() {
        let line = super::scan::assumed_unseen(inuse.assumed().len());
        let _ = writeln!(out, "  {}", escape::line(&line));
    }
    for b in inuse.blind_spots() {
        let _ = writeln!(out, "  blind spot: {}", escape::line(&b.to_string()));
    }
    for b in inuse.assumed_blind_spots() {
        let _ = writeln!(
            out,
            "  assumed to use nothing (--trust-pid-namespace): {}",
            escape::line(&format!("{b:#}"))
        );
    }
    match (&e.lease, e.lease_invalid) {
        (Some(l), _) => record(&mut out, e, l, now),
        (None, true) => {
            let _ = writeln!(out, "  lease: present but unreadable");
        }
        (None, false) => {
            let _ = writeln!(out, "  lease: none (an unmanaged entry)");
        }
    }
    if let Some(o) = &e.origin {
        super::origin::detail(&mut out, o);
    }
    let _ = writeln!(
        out,
        "  size: {} in {} files and {} dirs; newest change {} ago",
        size(e.disk_bytes),
        e.files,
        e.dirs,
        e.newest_mtime_ms
            .map_or("-".into(), |m| age(now.saturating_sub(m))),
    );
    let _ = writeln!(out, "  family: {}", escape::line(&e.pattern));
    let _ = match verdict {
        Verdict::Reap(reason) => writeln!(
            out,
            "  reap with these rules: remove ({})",
            escape::line(&reason.to_string())
        ),
        Verdict::Keep(reason) => writeln!(
            out,
            "  reap with these rules: keep ({})",
            escape::line(&reason.to_string())
        ),
    };
    out
}

/// The record's section: every field labelled as the creator's claim.
fn record(out: &mut String, e: &Entry, l: &LeaseRecord, now: i64) {
    let _ = writeln!(
        out,
        "  lease record (as written by its creator, unverified):"
    );
    let _ = writeln!(
        out,
        "    pid: {} ({})",
        l.pid,
        e.check_record_pid(l).describe()
    );
    let _ = writeln!(out, "    uid: {}", claims::user(l.uid));
    if let Some(mismatch) = claims::uid_mismatch(e, l) {
        let _ = writeln!(out, "    {mismatch}");
    }
    let _ = writeln!(out, "    host: {}", Untrusted::text(&l.host));
    let created = i64::try_from(l.created_ms).unwrap_or(i64::MAX);
    let _ = writeln!(
        out,
        "    created: {} ago ({})",
        age(now.saturating_sub(created)),
        crate::human::instant(l.created_ms)
    );
    let _ = writeln!(out, "    tag: {}", Untrusted::text(&l.tag));
    if let Some(site) = &l.site {
        let _ = writeln!(out, "    site: {}", Untrusted::text(site));
    }
    let args: Vec<String> = l
        .cmd
        .iter()
        .map(|a| Untrusted::text(a).to_string())
        .collect();
    let _ = writeln!(out, "    command: {}", args.join(" "));
    if let Some(checkout) = &l.checkout {
        let _ = writeln!(out, "    checkout: {}", Untrusted::text(checkout));
    }
    if let Some(until) = l.keep_until_ms {
        // What the record asks for; what a reap honours is the state line
        // above (capped by --max-keep).
        let _ = writeln!(out, "    asks to be {}", super::kept_until(until, now));
    }
}
