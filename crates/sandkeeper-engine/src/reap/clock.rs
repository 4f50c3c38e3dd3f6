//! Telling whether the wall clock was stepped forward since boot, so that a
//! jump cannot make everything look old at once.
//!
//! The kernel keeps no record of the wall-clock time at boot: `btime` in
//! `/proc/stat` is *now* minus the time since boot, and moves when the
//! clock is stepped. But every lease record from this boot carries two
//! clocks: `start_ticks`, when its creator started (ticks since boot, which
//! never jump), and `created_ms`, the wall clock when it made the sandbox,
//! which came after. If the current wall clock puts the creator's start
//! *after* the creation it witnessed, the clock has since been stepped
//! forward by at least the difference.
//!
//! A record is written by whoever made its directory, so it is a witness
//! only for what its writer could have changed anyway: a record in a
//! directory that only root or the caller can write (owned by one of them,
//! not writable by group or others) speaks for the whole root; a record in
//! another user's closed directory speaks only for that user's entries;
//! one in a directory others may write speaks for nobody. A forged record
//! can thus keep its forger's own entries, never anyone else's.

use std::collections::HashMap;
use std::time::Duration;

use crate::scan::{Entry, RootReport};
use crate::walk::FileKind;

/// Steps smaller than this are noise: `btime` has one-second resolution,
/// and NTP slewing over weeks of uptime moves it by seconds to minutes.
const TOLERANCE: Duration = Duration::from_secs(300);

/// The forward clock steps the records of a root betray.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Steps {
    /// Betrayed by records others cannot forge: applies to every entry.
    pub(crate) everyone: Option<Duration>,
    /// Betrayed by records of directories owned by this uid: applies to
    /// that uid's entries only.
    pub(crate) by_owner: HashMap<u32, Duration>,
}

impl Steps {
    /// The step that makes `entry`'s age untrustworthy, if any.
    pub(crate) fn for_entry(&self, entry: &Entry) -> Option<Duration> {
        self.for_uid(entry.uid)
    }

    /// The step that makes the age of an entry owned by `uid` untrustworthy.
    pub(crate) fn for_uid(&self, uid: u32) -> Option<Duration> {
        let own = self.by_owner.get(&uid).copied();
        match (self.everyone, own) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    fn is_empty(&self) -> bool {
        self.everyone.is_none() && self.by_owner.is_empty()
    }
}

/// The forward clock steps since the lease records of this boot in
/// `report` were written (beyond the tolerance), if any.
pub(crate) fn forward_steps(report: &RootReport) -> Option<Steps> {
    let mut finder = StepFinder::new()?;
    for entry in &report.entries {
        finder.add(entry);
    }
    finder.finish()
}

/// [`forward_steps`] over entries given one at a time (a streaming scan):
/// each entry's record is read as it comes, nothing of it is kept.
pub(crate) struct StepFinder {
    btime_ms: u64,
    boot_id: String,
    me: u32,
    hz: u64,
    steps: Steps,
}

impl StepFinder {
    /// `None` when the boot time or id cannot be read: no step is told.
    pub(crate) fn new() -> Option<StepFinder> {
        let btime_ms = boot_time_ms()?;
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(StepFinder {
            btime_ms,
            boot_id: boot_id.trim().to_owned(),
            me: rustix::process::geteuid().as_raw(),
            hz: rustix::param::clock_ticks_per_second().max(1),
            steps: Steps::default(),
        })
    }

    /// Takes in what `entry`'s record betrays, if anything.
    pub(crate) fn add(&mut self, entry: &Entry) {
        let Some(step) = entry
            .lease
            .as_ref()
            .filter(|r| r.boot_id == self.boot_id)
            .and_then(|r| step_betrayed(self.btime_ms, r.start_ticks, r.created_ms, self.hz))
        else {
            return;
        };
        match witness_scope(entry, self.me) {
            Some(Scope::Everyone) => self.steps.everyone = self.steps.everyone.max(Some(step)),
            Some(Scope::Owner) => {
                let owner = self.steps.by_owner.entry(entry.uid).or_default();
                *owner = (*owner).max(step);
            }
            None => {}
        }
    }

    /// The steps found, if any.
    pub(crate) fn finish(self) -> Option<Steps> {
        (!self.steps.is_empty()).then_some(self.steps)
    }
}

/// The step one record betrays: its creator's start, by the current wall
/// clock, after the creation it witnessed (checked arithmetic: the fields
/// are whatever the writer put there).
fn step_betrayed(btime_ms: u64, start_ticks: u64, created_ms: u64, hz: u64) -> Option<Duration> {
    if start_ticks == 0 {
        return None;
    }
    let started_ms = btime_ms.checked_add(start_ticks.checked_mul(1000)? / hz)?;
    let step = Duration::from_millis(started_ms.checked_sub(created_ms)?);
    (step > TOLERANCE).then_some(step)
}

/// Whom a record may speak for.
enum Scope {
    /// Only root or the caller could have written it.
    Everyone,
    /// Only its directory's owner (or root) could have written it.
    Owner,
}

/// Whom `entry`'s record may speak for: a directory that group or others
/// can write (or a non-directory) is no witness at all; one only root or
/// the caller can write speaks for everyone; any other, for its owner.
fn witness_scope(entry: &Entry, me: u32) -> Option<Scope> {
    if entry.kind != FileKind::Dir || entry.mode & 0o022 != 0 {
        return None;
    }
    Some(if entry.uid == 0 || entry.uid == me {
        Scope::Everyone
    } else {
        Scope::Owner
    })
}

/// `btime` from `/proc/stat`, in ms since the epoch.
fn boot_time_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_btime(&stat).map(|s| s * 1000)
}

fn parse_btime(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_from_hostile_numbers_never_overflow() {
        let hz = 100;
        let cases: [(u64, u64, u64, bool); 6] = [
            // btime, start_ticks, created_ms, step betrayed
            (1_000_000, 100, 1_000_000 + 2_000, false), // created after start
            (1_000_000, 100, 0, true),                  // created "before boot"
            (1_000_000, 0, 0, false),                   // no start time known
            (1_000_000, u64::MAX, 0, false),            // overflows: no witness
            (u64::MAX, 100, 0, false),
            (1_000_000, 100, u64::MAX, false),
        ];
        for (btime, ticks, created, want) in cases {
            assert_eq!(
                step_betrayed(btime, ticks, created, hz).is_some(),
                want,
                "{btime} {ticks} {created}"
            );
        }
    }

    #[test]
    fn btime_lines() {
        let cases = [
            (
                "cpu  1 2 3\nbtime 1764460800\nprocesses 5\n",
                Some(1_764_460_800),
            ),
            ("btime x\n", None),
            ("cpu 1\n", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_btime(text), want, "{text:?}");
        }
    }
}
