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

use std::time::Duration;

use crate::scan::RootReport;

/// Steps smaller than this are noise: `btime` has one-second resolution,
/// and NTP slewing over weeks of uptime moves it by seconds to minutes.
const TOLERANCE: Duration = Duration::from_secs(300);

/// How far the wall clock was stepped forward since the lease records of
/// this boot in `report` were written, if it was (beyond the tolerance).
pub(crate) fn forward_step(report: &RootReport) -> Option<Duration> {
    let btime_ms = boot_time_ms()?;
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    let step = report
        .entries
        .iter()
        .filter_map(|e| e.lease.as_ref())
        .filter(|r| r.boot_id == boot_id.trim() && r.start_ticks > 0)
        .filter_map(|r| {
            let started_ms = btime_ms.checked_add(r.start_ticks.checked_mul(1000)? / hz)?;
            started_ms.checked_sub(r.created_ms)
        })
        .max()
        .map(Duration::from_millis)?;
    (step > TOLERANCE).then_some(step)
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
