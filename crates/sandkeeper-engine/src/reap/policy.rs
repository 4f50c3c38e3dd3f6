//! What a reap may remove: the rules.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::error::{Error, ErrorKind, Result};

/// How much free space a reap aims for; it removes oldest entries first and
/// starts no new removal once the filesystem has this much free (the ones
/// under way on other workers finish).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FreeTarget {
    /// Free space as a percentage of the filesystem's size (0–100).
    Percent(f64),
    /// Free space in bytes.
    Bytes(u64),
}

impl FreeTarget {
    /// The free bytes this target asks for on a filesystem of `total` bytes.
    pub fn bytes(self, total: u64) -> u64 {
        match self {
            FreeTarget::Bytes(b) => b,
            FreeTarget::Percent(p) => ((total as f64) * p / 100.0).ceil() as u64,
        }
    }
}

/// How many free inodes a reap aims for, besides (or instead of) free
/// bytes ([`PolicyBuilder::target_free_inodes`]): a filesystem out of
/// inodes cannot make a file, however many bytes it has free.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FreeInodes {
    /// Free inodes as a percentage of the filesystem's inodes (0–100).
    Percent(f64),
    /// A number of free inodes.
    Count(u64),
}

impl FreeInodes {
    /// The free inodes this target asks for on a filesystem of `total`
    /// inodes. A filesystem that reports no inodes (`total` 0: btrfs, a
    /// tmpfs with `nr_inodes=0`) never runs out: every target is 0 there.
    pub fn count(self, total: u64) -> u64 {
        if total == 0 {
            return 0;
        }
        match self {
            FreeInodes::Count(n) => n,
            FreeInodes::Percent(p) => ((total as f64) * p / 100.0).ceil() as u64,
        }
    }
}

/// The filters of one [`rule`](PolicyBuilder::rule): which of the
/// entries its glob selects may go. Each is unset by default (no limit).
///
/// ```
/// use std::time::Duration;
/// use sandkeeper_engine::reap::Filters;
///
/// let mut filters = Filters::new();
/// filters.older_than(Duration::from_secs(7200)).keep_last(3);
/// # let _ = filters;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filters {
    pub(crate) older_than: Option<Duration>,
    pub(crate) keep_last: Option<usize>,
    pub(crate) owner: Option<u32>,
}

impl Filters {
    /// No filters: everything the glob selects may go (past the grace).
    pub fn new() -> Filters {
        Filters::default()
    }

    /// Only entries whose newest mtime inside is older than this (default:
    /// no limit); relaxed under pressure.
    pub fn older_than(&mut self, age: Duration) -> &mut Self {
        self.older_than = Some(age);
        self
    }

    /// Keeps the `n` newest entries of each family (default: none kept);
    /// relaxed under pressure.
    pub fn keep_last(&mut self, n: usize) -> &mut Self {
        self.keep_last = Some(n);
        self
    }

    /// Only entries owned by this uid (default: any owner); never relaxed.
    pub fn owner(&mut self, uid: u32) -> &mut Self {
        self.owner = Some(uid);
        self
    }
}

/// The default cap on how long a lease's `keep_until_ms` is honoured: 7
/// days from the entry's newest change ([`PolicyBuilder::max_keep`]).
pub const DEFAULT_MAX_KEEP: Duration = crate::defaults::MAX_KEEP;

/// The rules a caller gives one reap by hand: the command line's rule
/// flags, the Python package's arguments. The one place they become a
/// [`Policy`] ([`policy`](Self::policy)); the config file's rules, per
/// root and per glob, are `watch::policy`'s.
///
/// ```
/// use sandkeeper_engine::reap::Rules;
///
/// let rules = Rules { globs: vec!["app-*".into()], keep_last: Some(3), ..Rules::default() };
/// let policy = rules.policy(true, true)?;
/// assert!(policy.is_dry_run());
/// # Ok::<(), sandkeeper_engine::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// Unmanaged entries whose name matches one of these globs may go.
    pub globs: Vec<String>,
    /// Only entries whose newest change inside is older than this.
    pub older_than: Option<Duration>,
    /// Keep the newest this many of each family.
    pub keep_last: Option<usize>,
    /// Remove oldest first, only until this much is free.
    pub target_free: Option<FreeTarget>,
    /// Remove oldest first, only until this many inodes are free.
    pub target_free_inodes: Option<FreeInodes>,
    /// Only entries owned by this uid.
    pub owner: Option<u32>,
    /// Nothing younger than this ([`defaults::GRACE`](crate::defaults::GRACE)).
    pub grace: Duration,
    /// How long a keep is honoured ([`defaults::MAX_KEEP`](crate::defaults::MAX_KEEP)).
    pub max_keep: Duration,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            globs: Vec::new(),
            older_than: None,
            keep_last: None,
            target_free: None,
            target_free_inodes: None,
            owner: None,
            grace: crate::defaults::GRACE,
            max_keep: crate::defaults::MAX_KEEP,
        }
    }
}

impl Rules {
    /// The policy these rules describe, for a dry run or not, keeping a
    /// record per entry or not ([`PolicyBuilder::records`]).
    ///
    /// # Errors
    ///
    /// As [`PolicyBuilder::build`]: a glob that does not parse.
    pub fn policy(&self, dry_run: bool, records: bool) -> Result<Policy> {
        let mut b = Policy::builder();
        b.grace(self.grace)
            .max_keep(self.max_keep)
            .dry_run(dry_run)
            .records(records);
        for glob in &self.globs {
            b.matching(glob.clone());
        }
        if let Some(age) = self.older_than {
            b.older_than(age);
        }
        if let Some(n) = self.keep_last {
            b.keep_last(n);
        }
        if let Some(t) = self.target_free {
            b.target_free(t);
        }
        if let Some(t) = self.target_free_inodes {
            b.target_free_inodes(t);
        }
        if let Some(uid) = self.owner {
            b.owner(uid);
        }
        b.build()
    }
}

/// The rules of a reap. Build one with [`Policy::builder`].
///
/// Orphaned sandboxes are always candidates; unmanaged (`idle`) entries only
/// when a `--match` glob selects them. The filters (`older_than`,
/// `keep_last`, `owner`, `target_free`) apply to every candidate, except
/// that an entry selected by a [`rule`](PolicyBuilder::rule) gets that
/// rule's own `older_than`, `keep_last` and `owner`. Nothing `live`,
/// `in_use` or `unknown` and nothing younger than the grace period is ever
/// removed.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) grace: Duration,
    pub(crate) globs: Vec<String>,
    /// Per glob: its rule's own filters, or `None` for the policy's.
    pub(crate) rule_filters: Vec<Option<Filters>>,
    pub(crate) matcher: GlobSet,
    /// The policy-wide filters (orphans, and globs without a rule).
    pub(crate) filters: Filters,
    pub(crate) target_free: Option<FreeTarget>,
    pub(crate) target_free_inodes: Option<FreeInodes>,
    pub(crate) dry_run: bool,
    pub(crate) pressure: bool,
    pub(crate) take_kept: bool,
    pub(crate) max_keep: Duration,
    pub(crate) stop: Option<Arc<AtomicBool>>,
    /// Whether the report keeps one record per entry (`records(false)`
    /// clears it).
    pub(crate) records: bool,
}

impl Policy {
    /// A builder with the defaults.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// Whether this is a dry run.
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// The globs that admit unmanaged entries.
    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    /// The first glob matching `name`, if any.
    #[cfg(test)]
    pub(crate) fn matching_glob(&self, name: &std::ffi::OsStr) -> Option<&str> {
        self.matching_rule(name).map(|(glob, _)| glob)
    }

    /// The first glob matching `name`, if any, with the filters that apply
    /// to what it selects (its rule's own, or the policy's).
    pub(crate) fn matching_rule(&self, name: &std::ffi::OsStr) -> Option<(&str, Filters)> {
        use std::os::unix::ffi::OsStrExt;
        let candidate = globset::Candidate::from_bytes(name.as_bytes());
        self.matcher
            .matches_candidate(&candidate)
            .first()
            .map(|&i| {
                let filters = self.rule_filters[i].unwrap_or_else(|| self.filters());
                (self.globs[i].as_str(), filters)
            })
    }

    /// The policy-wide filters (orphans, and globs given with
    /// [`matching`](PolicyBuilder::matching)).
    pub(crate) fn filters(&self) -> Filters {
        self.filters
    }

    /// Whether any filter set keeps the newest N of a family.
    pub(crate) fn uses_keep_last(&self) -> bool {
        self.filters.keep_last.is_some()
            || self
                .rule_filters
                .iter()
                .flatten()
                .any(|f| f.keep_last.is_some())
    }

    /// Whether the [`stop_flag`](PolicyBuilder::stop_flag) is raised.
    pub fn stop_requested(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// Builds a [`Policy`].
///
/// ```
/// use std::time::Duration;
/// use sandkeeper_engine::reap::{FreeTarget, Policy};
///
/// let policy = Policy::builder()
///     .matching("app-*")
///     .older_than(Duration::from_secs(2 * 3600))
///     .keep_last(3)
///     .target_free(FreeTarget::Percent(25.0))
///     .build()?;
/// assert!(!policy.is_dry_run());
/// # Ok::<(), sandkeeper_engine::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct PolicyBuilder {
    grace: Duration,
    globs: Vec<String>,
    rule_filters: Vec<Option<Filters>>,
    filters: Filters,
    target_free: Option<FreeTarget>,
    target_free_inodes: Option<FreeInodes>,
    dry_run: bool,
    pressure: bool,
    take_kept: bool,
    max_keep: Duration,
    stop: Option<Arc<AtomicBool>>,
    records: bool,
}

impl Default for PolicyBuilder {
    fn default() -> Self {
        PolicyBuilder {
            grace: crate::defaults::GRACE,
            globs: Vec::new(),
            rule_filters: Vec::new(),
            filters: Filters::new(),
            target_free: None,
            target_free_inodes: None,
            dry_run: false,
            pressure: false,
            take_kept: true,
            max_keep: DEFAULT_MAX_KEEP,
            stop: None,
            records: true,
        }
    }
}

impl PolicyBuilder {
    /// Nothing younger than this is removed (default 60 s), so a directory
    /// that was just made and has no lease yet is safe.
    pub fn grace(&mut self, grace: Duration) -> &mut Self {
        self.grace = grace;
        self
    }

    /// Admits unmanaged entries whose name matches `glob` (repeatable;
    /// default none). Glob syntax: `*`, `?`, `[...]`, `{a,b}`.
    pub fn matching(&mut self, glob: impl Into<String>) -> &mut Self {
        self.globs.push(glob.into());
        self.rule_filters.push(None);
        self
    }

    /// Admits unmanaged entries whose name matches `glob`, judged by
    /// `filters` instead of the policy-wide `older_than`, `keep_last` and
    /// `owner` (which still apply to orphans). Where several globs match a
    /// name, the first one given decides. Grace, liveness, in-use and the
    /// free-space target apply as to every candidate.
    pub fn rule(&mut self, glob: impl Into<String>, filters: &Filters) -> &mut Self {
        self.globs.push(glob.into());
        self.rule_filters.push(Some(*filters));
        self
    }

    /// Only entries whose newest mtime inside is older than this (default:
    /// no limit). An entry dated in the future counts as new.
    pub fn older_than(&mut self, age: Duration) -> &mut Self {
        self.filters.older_than(age);
        self
    }

    /// Keeps the `n` newest entries of each family (default: none kept).
    pub fn keep_last(&mut self, n: usize) -> &mut Self {
        self.filters.keep_last(n);
        self
    }

    /// Removes oldest first, only until the filesystem has this much free
    /// (default: no target; every candidate goes).
    pub fn target_free(&mut self, target: FreeTarget) -> &mut Self {
        self.target_free = Some(target);
        self
    }

    /// Removes oldest first, only until the filesystem has this many free
    /// inodes (default: no inode target). With a
    /// [`target_free`](Self::target_free) too, a reap goes on until both
    /// are met; alone, bytes do not count.
    pub fn target_free_inodes(&mut self, target: FreeInodes) -> &mut Self {
        self.target_free_inodes = Some(target);
        self
    }

    /// Only entries owned by this uid (default: any owner).
    pub fn owner(&mut self, uid: u32) -> &mut Self {
        self.filters.owner(uid);
        self
    }

    /// Decides and reports, removes nothing (default off). Probes are the
    /// same as a real run's.
    pub fn dry_run(&mut self, yes: bool) -> &mut Self {
        self.dry_run = yes;
        self
    }

    /// Whether the report keeps one record per entry (default `true`):
    /// with `false`, [`RootReap::removed`](super::RootReap::removed) and
    /// [`RootReap::skipped`](super::RootReap::skipped) stay empty, and
    /// memory stays flat in the number of entries; every decision, removal
    /// and event is the same, and [`RootReap::counts`](super::RootReap::counts)
    /// sums them either way (what a summary prints).
    pub fn records(&mut self, yes: bool) -> &mut Self {
        self.records = yes;
        self
    }

    /// Under disk pressure the age limits relax: `older_than` and
    /// `keep_last` are ignored, and sandboxes kept on purpose are taken
    /// last (see [`take_kept`](Self::take_kept)) (default off; `watch`
    /// sets it above the high watermark). Grace, liveness, in-use, `owner`
    /// and `matching` never relax.
    pub fn under_pressure(&mut self, yes: bool) -> &mut Self {
        self.pressure = yes;
        self
    }

    /// Under pressure, whether sandboxes kept on purpose (their lease's
    /// `keep_until_ms`, within [`max_keep`](Self::max_keep)) are
    /// candidates (default `true`): then they go after every other
    /// candidate of the root, oldest first, each only while the free-space
    /// target is still not met
    /// ([`ReapReason::KeptUnderPressure`](super::ReapReason::KeptUnderPressure)).
    /// With `false` they are kept under pressure too: `watch` reaps a root
    /// and its per-user directories so first, and takes kept sandboxes in
    /// a second pass only when that left the target unmet. Without
    /// pressure they are always kept.
    pub fn take_kept(&mut self, yes: bool) -> &mut Self {
        self.take_kept = yes;
        self
    }

    /// The longest a lease's `keep_until_ms` is honoured, counted from the
    /// entry's newest change inside (default [`DEFAULT_MAX_KEEP`], 7 days).
    /// The record is written by whoever made the directory: without a cap,
    /// `keep_until_ms = 2^64-1` would keep it forever.
    pub fn max_keep(&mut self, cap: Duration) -> &mut Self {
        self.max_keep = cap;
        self
    }

    /// A flag another thread (or a signal handler) raises to stop a reap
    /// early (default: none). It is checked before each removal starts:
    /// after a stop no new removal starts, and the ones under way (at most
    /// one per worker of the reap's pool) finish; the entries not reached
    /// are reported as kept
    /// ([`KeepReason::Stopped`](super::KeepReason::Stopped)).
    pub fn stop_flag(&mut self, stop: Arc<AtomicBool>) -> &mut Self {
        self.stop = Some(stop);
        self
    }

    /// Checks and builds the policy.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a glob that does not parse or a
    /// percentage (of bytes or inodes) outside 0–100, naming the value.
    pub fn build(&self) -> Result<Policy> {
        let mut set = GlobSetBuilder::new();
        for glob in &self.globs {
            let parsed = Glob::new(glob).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("invalid glob {glob:?}: {}", e.kind()),
                )
            })?;
            set.add(parsed);
        }
        let matcher = set
            .build()
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("invalid globs: {e}")))?;
        if let Some(FreeTarget::Percent(p)) = self.target_free {
            if !(0.0..=100.0).contains(&p) || p.is_nan() {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("free-space target {p}% is not a percentage from 0 to 100"),
                ));
            }
        }
        if let Some(FreeInodes::Percent(p)) = self.target_free_inodes {
            if !(0.0..=100.0).contains(&p) || p.is_nan() {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("free-inode target {p}% is not a percentage from 0 to 100"),
                ));
            }
        }
        Ok(Policy {
            grace: self.grace,
            globs: self.globs.clone(),
            rule_filters: self.rule_filters.clone(),
            matcher,
            filters: self.filters,
            target_free: self.target_free,
            target_free_inodes: self.target_free_inodes,
            dry_run: self.dry_run,
            pressure: self.pressure,
            take_kept: self.take_kept,
            max_keep: self.max_keep,
            stop: self.stop.clone(),
            records: self.records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(FreeTarget::Percent(25.0).bytes(1000), 250);
        assert_eq!(FreeTarget::Percent(0.1).bytes(1000), 1);
        assert_eq!(FreeTarget::Bytes(7).bytes(1000), 7);
        let inodes = [
            (FreeInodes::Percent(10.0), 64, 7),
            (FreeInodes::Percent(0.0), 64, 0),
            (FreeInodes::Count(5), 64, 5),
            (FreeInodes::Count(5), 0, 0),
            (FreeInodes::Percent(50.0), 0, 0),
        ];
        for (target, total, want) in inodes {
            assert_eq!(target.count(total), want, "{target:?} of {total}");
        }
        let err = Policy::builder()
            .target_free_inodes(FreeInodes::Percent(-5.0))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("-5"), "{err}");
    }

    #[test]
    fn bad_input_is_rejected_with_the_value() {
        let err = Policy::builder().matching("app-[").build().unwrap_err();
        assert!(err.to_string().contains("app-["), "{err}");
        let err = Policy::builder()
            .target_free(FreeTarget::Percent(120.0))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("120"), "{err}");
    }

    #[test]
    fn rules_bring_their_own_filters() {
        let mut app = Filters::new();
        app.older_than(Duration::from_secs(7200)).keep_last(3);
        let mut tmp = Filters::new();
        tmp.owner(1000);
        let policy = Policy::builder()
            .older_than(Duration::from_secs(60))
            .rule("app-*", &app)
            .matching("build-*")
            .rule("tmp*", &tmp)
            .rule("app-1*", &tmp)
            .build()
            .unwrap();
        let cases = [
            ("app-235-1", Some(("app-*", app))),
            ("app-1", Some(("app-*", app))),
            ("build-7", Some(("build-*", policy.filters()))),
            ("tmp.x", Some(("tmp*", tmp))),
            ("vm-1", None),
        ];
        for (name, want) in cases {
            assert_eq!(policy.matching_rule(name.as_ref()), want, "{name}");
        }
        assert_eq!(policy.filters().older_than, Some(Duration::from_secs(60)));
        assert!(policy.uses_keep_last(), "a rule's keep_last counts");
        assert!(!Policy::builder().build().unwrap().uses_keep_last());
    }

    #[test]
    fn the_stop_flag_is_shared() {
        let stop = Arc::new(AtomicBool::new(false));
        let policy = Policy::builder().stop_flag(stop.clone()).build().unwrap();
        assert!(!policy.stop_requested());
        stop.store(true, Ordering::Relaxed);
        assert!(policy.stop_requested());
        assert!(!Policy::builder().build().unwrap().stop_requested());
    }

    #[test]
    fn globs_match_names() {
        let policy = Policy::builder()
            .matching("app-*")
            .matching("rust_out.*")
            .build()
            .unwrap();
        let cases = [
            ("app-235-1", Some("app-*")),
            ("rust_out.x1", Some("rust_out.*")),
            ("vm-1", None),
        ];
        for (name, want) in cases {
            assert_eq!(policy.matching_glob(name.as_ref()), want, "{name}");
        }
    }
}
