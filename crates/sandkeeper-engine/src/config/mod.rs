//! The configuration (TOML) that `sandkeeper reap --config` and
//! [`watch`](crate::watch) share: the roots, their rules, watermarks and
//! limits, parsed and then checked into typed data. Every error names the
//! file, the line and what is wrong ([`ConfigError`]); nothing runs on a
//! bad file. The keys are documented in `docs/config.md` and listed in
//! [`reference`](mod@reference) (what `sandkeeper.toml(5)` is rendered from).
//!
//! Behind the cargo feature `config` (on by default), with
//! [`watch`](crate::watch) and [`metrics`](crate::metrics).
//!
//! ```
//! use std::path::Path;
//!
//! let text = r#"
//! [[root]]
//! path = "/tmp"
//! high_watermark = "90%"
//! low_watermark = "75%"
//!
//! [[root.rule]]
//! match = "app-*"
//! older_than = "2h"
//! "#;
//! let config = sandkeeper_engine::config::parse(text, Path::new("example.toml"))?;
//! assert_eq!(config.roots[0].rules[0].glob, "app-*");
//!
//! let err = sandkeeper_engine::config::parse("interval = \"soon\"", Path::new("bad.toml")).unwrap_err();
//! assert_eq!(err.line, Some(1));
//! # Ok::<(), sandkeeper_engine::config::ConfigError>(())
//! ```
//!
//! A full file:
//!
//! ```toml
//! interval = "5m"
//! poll = "5s"
//!
//! [[root]]
//! path = "/tmp"
//! grace = "60s"
//! high_watermark = "90%"
//! low_watermark = "75%"
//! high_watermark_inodes = "95%"
//! low_watermark_inodes = "80%"
//!
//! [[root.rule]]
//! match = "app-*"
//! older_than = "2h"
//! keep_last = 3
//! ```

use std::fmt;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

pub mod reference;
pub mod value;

/// The system-wide config file, used when it exists.
pub const SYSTEM_PATH: &str = "/etc/sandkeeper/config.toml";

/// The default full-cycle interval ([`defaults::INTERVAL`](crate::defaults::INTERVAL)).
pub const DEFAULT_INTERVAL: Duration = crate::defaults::INTERVAL;
/// The default watermark poll ([`defaults::POLL`](crate::defaults::POLL)).
pub const DEFAULT_POLL: Duration = crate::defaults::POLL;
/// The default grace period ([`defaults::GRACE`](crate::defaults::GRACE)).
pub const DEFAULT_GRACE: Duration = crate::defaults::GRACE;

/// A checked configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from; `None` for the built-in defaults.
    pub source: Option<PathBuf>,
    /// Between two full scan-and-reap cycles.
    pub interval: Duration,
    /// Between two watermark polls (`statvfs`).
    pub poll: Duration,
    /// The roots, in file order; never empty, never overlapping.
    pub roots: Vec<RootConfig>,
    /// `trust_pid_namespace = true`: every process that can reach the
    /// roots is in this pid namespace (default `false`).
    pub trust_pid_namespace: bool,
    /// `assume_unseen_free = true`: every process that cannot be inspected
    /// is assumed to hold nothing under the roots; regular files the caller
    /// owns are still asked (default `false`; see
    /// [`InUseOptions::assume_unseen_free`](crate::inuse::InUseOptions::assume_unseen_free)).
    pub assume_unseen_free: bool,
    /// `origin_store = "/path"`: where `watch` keeps the origins of the
    /// entries of tracked roots whose filesystem has no `trusted.*`
    /// attributes (`None`: `SANDKEEPER_ORIGIN_STORE`, else
    /// `/var/lib/sandkeeper/origins`; see `crate::origin::Store`).
    pub origin_store: Option<PathBuf>,
    /// `ignore_pids = [1]`: processes that cannot be inspected but are
    /// vouched for, as with `--ignore-pid` (which adds to these).
    pub ignore_pids: Vec<u32>,
}

/// One `[[root]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RootConfig {
    /// The directory whose top-level entries are reaped (absolute).
    pub path: PathBuf,
    /// Nothing younger than this is removed, under pressure too.
    pub grace: Duration,
    /// Orphaned sandboxes go only once older than this (relaxed under
    /// pressure); `None`: once past the grace.
    pub orphan_age: Option<Duration>,
    /// The longest a lease's `keep_until_ms` is honoured, after the entry's
    /// newest change.
    pub max_keep: Duration,
    /// Whether the per-user sandbox directories `sandkeeper-<uid>` inside
    /// the root are reaped too, with the same rules.
    pub user_dirs: bool,
    /// `user_dir_families = true`: the metrics label the name families of
    /// those per-user directories. By default they show only their totals
    /// (`family="(all)"`): their owners made them 0700 so that others
    /// cannot list them, and the metrics file is world-readable.
    pub user_dir_families: bool,
    /// `track_origins = true`: `watch` records the creator of each new
    /// top-level entry of this root (fanotify; root only; see
    /// `docs/origins.md` and [`crate::origin`]). Default off. Origins never
    /// change what is reaped.
    pub track_origins: bool,
    /// When to reap under pressure, and down to where (bytes).
    pub watermarks: Option<Watermarks>,
    /// The same by inodes: above the high one (fewer free inodes) a reap
    /// under pressure goes on until the low one is reached.
    pub inode_watermarks: Option<InodeWatermarks>,
    /// Which unmanaged families may go.
    pub rules: Vec<Rule>,
}

/// A `[[root.rule]]`: unmanaged entries whose name matches `glob`, with
/// their own filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The glob (`match = "app-*"`) an entry's name must match.
    pub glob: String,
    /// Only entries whose newest change is older than this.
    pub older_than: Option<Duration>,
    /// The newest this many of each family are kept.
    pub keep_last: Option<usize>,
    /// Only entries of this uid.
    pub owner: Option<u32>,
}

/// The high and low watermarks of a root.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Watermarks {
    /// Above this, reap under pressure.
    pub high: Watermark,
    /// ... until under this.
    pub low: Watermark,
}

/// A level of a filesystem's use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Watermark {
    /// `"90%"`: this percentage of the filesystem used.
    UsedPercent(f64),
    /// `"2GiB free"`: this many bytes left free.
    FreeBytes(u64),
}

impl Watermark {
    /// The free bytes that correspond to this level on a filesystem of
    /// `total` bytes: the filesystem is above the mark when it has less.
    pub fn free_bytes(self, total: u64) -> u64 {
        match self {
            Watermark::FreeBytes(b) => b,
            Watermark::UsedPercent(p) => ((total as f64) * (100.0 - p) / 100.0).ceil() as u64,
        }
    }
}

impl fmt::Display for Watermark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Watermark::UsedPercent(p) => write!(f, "{p}% used"),
            Watermark::FreeBytes(b) => write!(f, "{} free", value::human_size(*b)),
        }
    }
}

impl Watermarks {
    /// Whether a filesystem of `total` bytes with `free` bytes free is
    /// above the high watermark.
    pub fn above_high(&self, total: u64, free: u64) -> bool {
        free < self.high.free_bytes(total)
    }

    /// The free bytes a pressure reap aims for: the low watermark, and
    /// never less than the high one (which a file mixing percentages and
    /// sizes could ask for on a small filesystem).
    pub fn target_free_bytes(&self, total: u64) -> u64 {
        self.low.free_bytes(total).max(self.high.free_bytes(total))
    }
}

/// The high and low inode watermarks of a root (`high_watermark_inodes`,
/// `low_watermark_inodes`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InodeWatermarks {
    /// Above this, reap under pressure.
    pub high: InodeMark,
    /// ... until under this.
    pub low: InodeMark,
}

/// A level of a filesystem's use of inodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InodeMark {
    /// `"90%"`: this percentage of the inodes used.
    UsedPercent(f64),
    /// `"5000 free"`: this many inodes left free.
    Free(u64),
}

impl InodeMark {
    /// The free inodes that correspond to this level on a filesystem of
    /// `total` inodes (0 when it reports none: it never runs out).
    pub fn free_inodes(self, total: u64) -> u64 {
        if total == 0 {
            return 0;
        }
        match self {
            InodeMark::Free(n) => n,
            InodeMark::UsedPercent(p) => ((total as f64) * (100.0 - p) / 100.0).ceil() as u64,
        }
    }
}

impl fmt::Display for InodeMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InodeMark::UsedPercent(p) => write!(f, "{p}% of inodes used"),
            InodeMark::Free(n) => write!(f, "{n} inodes free"),
        }
    }
}

impl InodeWatermarks {
    /// Whether a filesystem of `total` inodes with `free` free is above
    /// the high watermark (never, when it reports no inodes).
    pub fn above_high(&self, total: u64, free: u64) -> bool {
        total > 0 && free < self.high.free_inodes(total)
    }

    /// The free inodes a pressure reap aims for: the low watermark, and
    /// never less than the high one.
    pub fn target_free_inodes(&self, total: u64) -> u64 {
        self.low
            .free_inodes(total)
            .max(self.high.free_inodes(total))
    }
}

/// A bad config file: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based; `None` when the problem is the file as a whole.
    pub line: Option<usize>,
    /// What is wrong, and what would be valid.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match self.line {
            Some(line) => write!(f, "{file}:{line}: {}", self.message),
            None => write!(f, "{file}: {}", self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// The built-in defaults, for a host without a config file: the
    /// system temp directory (and its per-user sandbox directories),
    /// orphaned sandboxes only, no watermarks.
    pub fn defaults() -> Config {
        Config {
            source: None,
            interval: DEFAULT_INTERVAL,
            poll: DEFAULT_POLL,
            trust_pid_namespace: false,
            assume_unseen_free: false,
            origin_store: None,
            ignore_pids: Vec::new(),
            roots: vec![RootConfig {
                path: std::env::temp_dir(),
                grace: DEFAULT_GRACE,
                orphan_age: None,
                max_keep: crate::reap::DEFAULT_MAX_KEEP,
                user_dirs: true,
                user_dir_families: false,
                track_origins: false,
                watermarks: None,
                inode_watermarks: None,
                rules: Vec::new(),
            }],
        }
    }
}

/// The config file to use: `explicit` if given; else the system file if
/// it exists; else `$XDG_CONFIG_HOME/sandkeeper/config.toml` (or
/// `~/.config/…`) if it exists; else none.
pub fn locate(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_owned());
    }
    default_candidates().into_iter().find(|p| p.exists())
}

/// Where a config file is looked for when none is given, in order.
pub fn default_candidates() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from(SYSTEM_PATH)];
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(dir) = xdg {
        out.push(dir.join("sandkeeper").join("config.toml"));
    }
    out
}

/// Reads and checks `file`.
///
/// # Errors
///
/// When it cannot be read, does not parse, or does not check out.
pub fn load(file: &Path) -> Result<Config, ConfigError> {
    let fail = |message: String| ConfigError {
        file: file.to_owned(),
        line: None,
        message,
    };
    let text = read_bounded(file).map_err(fail)?;
    parse(&text, file)
}

/// The largest config file read: far above any real one, small enough that
/// `/dev/zero` or a runaway generator cannot grow memory without bound.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a config file that must be a regular file of at most
/// [`MAX_CONFIG_BYTES`]. Opened non-blocking, so a FIFO in its place is
/// refused instead of waited on.
fn read_bounded(file: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_nonblock())
        .open(file)
        .map_err(|e| format!("cannot read the config file: {e}"))?;
    let meta = handle
        .metadata()
        .map_err(|e| format!("cannot read the config file: {e}"))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(format!(
            "the config file is {what}; give a regular file (TOML)"
        ));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "the config file is {} bytes, more than the {MAX_CONFIG_BYTES} a config may have",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    handle
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the config file: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "the config file grew past the {MAX_CONFIG_BYTES} bytes a config may have while it was read"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "the config file is not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// `O_NONBLOCK`, as `OpenOptionsExt::custom_flags` takes it.
fn libc_nonblock() -> i32 {
    rustix::fs::OFlags::NONBLOCK.bits() as i32
}

/// Parses and checks the text of `file`.
///
/// # Errors
///
/// As [`load`].
pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    let at = |span: Option<Range<usize>>, message: String| ConfigError {
        file: file.to_owned(),
        line: span.map(|s| line_of(text, s.start)),
        message,
    };
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| at(e.span(), e.message().trim().to_owned()))?;
    let duration = |value: &Spanned<toml::Value>, key: &str| -> Result<Duration, ConfigError> {
        let text = string(value, key, "a duration such as \"90s\", \"5m\" or \"2h\"")
            .map_err(|m| at(Some(value.span()), m))?;
        value::duration(text).map_err(|e| at(Some(value.span()), format!("{key}: {e}")))
    };
    let positive = |value: &Spanned<toml::Value>, key: &str| -> Result<Duration, ConfigError> {
        let d = duration(value, key)?;
        if d.is_zero() {
            return Err(at(
                Some(value.span()),
                format!("{key} must be more than zero"),
            ));
        }
        Ok(d)
    };
    let ignore_pids = match &raw.ignore_pids {
        None => Vec::new(),
        Some(v) => pids(v).map_err(|m| at(Some(v.span()), m))?,
    };
    let interval = match &raw.interval {
        Some(v) => positive(v, "interval")?,
        None => DEFAULT_INTERVAL,
    };
    let poll = match &raw.poll {
        Some(v) => positive(v, "poll")?,
        None => DEFAULT_POLL,
    };
    if raw.root.is_empty() {
        return Err(at(
            None,
            "no [[root]] table: name at least one directory to keep, such as\n\n[[root]]\npath = \"/tmp\"".to_owned(),
        ));
    }
    let origin_store = raw
        .origin_store
        .as_ref()
        .map(|v| {
            string(
                v,
                "origin_store",
                "a directory such as \"/var/lib/sandkeeper/origins\"",
            )
            .and_then(check_store_path)
            .map_err(|m| at(Some(v.span()), m))
        })
        .transpose()?;
    let mut roots: Vec<RootConfig> = Vec::with_capacity(raw.root.len());
    let mut root_spans: Vec<Range<usize>> = Vec::new();
    for r in &raw.root {
        let path = string(&r.path, "path", "a directory such as \"/tmp\"")
            .and_then(check_root_path)
            .map_err(|m| at(Some(r.path.span()), m))?;
        let grace = match &r.grace {
            Some(v) => duration(v, "grace")?,
            None => DEFAULT_GRACE,
        };
        let orphan_age = r
            .orphan_age
            .as_ref()
            .map(|v| duration(v, "orphan_age"))
            .transpose()?;
        let max_keep = match &r.max_keep {
            Some(v) => duration(v, "max_keep")?,
            None => crate::reap::DEFAULT_MAX_KEEP,
        };
        let watermarks = match (&r.high_watermark, &r.low_watermark) {
            (None, None) => None,
            (Some(high), None) => {
                return Err(at(
                    Some(high.span()),
                    "high_watermark needs a low_watermark: how far to reap down once above it"
                        .to_owned(),
                ))
            }
            (None, Some(low)) => {
                return Err(at(
                    Some(low.span()),
                    "low_watermark needs a high_watermark: the level that starts a reap".to_owned(),
                ))
            }
            (Some(high), Some(low)) => {
                let parse = |v: &Spanned<toml::Value>, key: &str| {
                    string(v, key, "\"90%\" (used) or \"2GiB free\"")
                        .and_then(watermark)
                        .map_err(|m| at(Some(v.span()), m))
                };
                let h = parse(high, "high_watermark")?;
                let l = parse(low, "low_watermark")?;
                check_order(h, l, &path).map_err(|m| at(Some(low.span()), m))?;
                Some(Watermarks { high: h, low: l })
            }
        };
        let inode_watermarks = match (&r.high_watermark_inodes, &r.low_watermark_inodes) {
            (None, None) => None,
            (Some(high), None) => {
                return Err(at(
                    Some(high.span()),
                    "high_watermark_inodes needs a low_watermark_inodes: how far to reap down once above it"
                        .to_owned(),
                ))
            }
            (None, Some(low)) => {
                return Err(at(
                    Some(low.span()),
                    "low_watermark_inodes needs a high_watermark_inodes: the level that starts a reap"
                        .to_owned(),
                ))
            }
            (Some(high), Some(low)) => {
                let parse = |v: &Spanned<toml::Value>, key: &str| {
                    string(v, key, "\"90%\" (of inodes used) or \"5000 free\"")
                        .and_then(inode_mark)
                        .map_err(|m| at(Some(v.span()), m))
                };
                let h = parse(high, "high_watermark_inodes")?;
                let l = parse(low, "low_watermark_inodes")?;
                check_inode_order(h, l, &path).map_err(|m| at(Some(low.span()), m))?;
                Some(InodeWatermarks { high: h, low: l })
            }
        };
        let mut rules = Vec::with_capacity(r.rule.len());
        for rule in &r.rule {
            rules.push(check_rule(rule, &at, &duration)?);
        }
        root_spans.push(r.path.span());
        roots.push(RootConfig {
            path,
            grace,
            orphan_age,
            max_keep,
            user_dirs: r.user_dirs.unwrap_or(true),
            user_dir_families: r.user_dir_families.unwrap_or(false),
            track_origins: r.track_origins.unwrap_or(false),
            watermarks,
            inode_watermarks,
            rules,
        });
    }
    if let Some((later, earlier, how)) = first_overlap(&roots) {
        return Err(at(
            Some(root_spans[later].clone()),
            format!(
                "root {} {how} root {} (line {}): an entry may belong to one root only",
                roots[later].path.display(),
                roots[earlier].path.display(),
                line_of(text, root_spans[earlier].start)
            ),
        ));
    }
    Ok(Config {
        source: Some(file.to_owned()),
        interval,
        poll,
        roots,
        trust_pid_namespace: raw.trust_pid_namespace.unwrap_or(false),
        assume_unseen_free: raw.assume_unseen_free.unwrap_or(false),
        origin_store,
        ignore_pids,
    })
}

/// `ignore_pids`: a list of process ids, each from 1 up.
fn pids(value: &Spanned<toml::Value>) -> Result<Vec<u32>, String> {
    let want = "a list of process ids such as [1, 4242]";
    let toml::Value::Array(items) = value.get_ref() else {
        let other = value.get_ref();
        return Err(format!(
            "ignore_pids: expected {want}, found {} {other}",
            other.type_str()
        ));
    };
    items
        .iter()
        .map(|item| match item {
            toml::Value::Integer(n) => u32::try_from(*n)
                .ok()
                .filter(|&p| p > 0 && p < 1 << 31)
                .ok_or_else(|| {
                    format!("ignore_pids: {n} is not a process id; use a number from 1 up")
                }),
            other => Err(format!(
                "ignore_pids: expected {want}, found {} {other} in it",
                other.type_str()
            )),
        })
        .collect()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    interval: Option<Spanned<toml::Value>>,
    poll: Option<Spanned<toml::Value>>,
    trust_pid_namespace: Option<bool>,
    assume_unseen_free: Option<bool>,
    origin_store: Option<Spanned<toml::Value>>,
    ignore_pids: Option<Spanned<toml::Value>>,
    #[serde(default)]
    root: Vec<RawRoot>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoot {
    path: Spanned<toml::Value>,
    grace: Option<Spanned<toml::Value>>,
    orphan_age: Option<Spanned<toml::Value>>,
    max_keep: Option<Spanned<toml::Value>>,
    user_dirs: Option<bool>,
    user_dir_families: Option<bool>,
    track_origins: Option<bool>,
    high_watermark: Option<Spanned<toml::Value>>,
    low_watermark: Option<Spanned<toml::Value>>,
    high_watermark_inodes: Option<Spanned<toml::Value>>,
    low_watermark_inodes: Option<Spanned<toml::Value>>,
    #[serde(default)]
    rule: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(rename = "match")]
    glob: Spanned<toml::Value>,
    older_than: Option<Spanned<toml::Value>>,
    keep_last: Option<Spanned<toml::Value>>,
    owner: Option<Spanned<toml::Value>>,
}

/// The string a key holds, or an error naming the key and what it wants.
fn string<'a>(value: &'a Spanned<toml::Value>, key: &str, want: &str) -> Result<&'a str, String> {
    match value.get_ref() {
        toml::Value::String(s) => Ok(s),
        other => Err(format!(
            "{key}: expected {want} (in quotes), found {} {other}",
            other.type_str()
        )),
    }
}

fn check_rule(
    rule: &RawRule,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
    duration: &impl Fn(&Spanned<toml::Value>, &str) -> Result<Duration, ConfigError>,
) -> Result<Rule, ConfigError> {
    let glob = string(&rule.glob, "match", "a glob such as \"app-*\"")
        .map_err(|m| at(Some(rule.glob.span()), m))?
        .to_owned();
    if glob.is_empty() {
        return Err(at(
            Some(rule.glob.span()),
            "match: the glob is empty".to_owned(),
        ));
    }
    crate::reap::Policy::builder()
        .matching(glob.clone())
        .build()
        .map_err(|e| at(Some(rule.glob.span()), format!("match: {e}")))?;
    let older_than = rule
        .older_than
        .as_ref()
        .map(|v| duration(v, "older_than"))
        .transpose()?;
    let keep_last = match &rule.keep_last {
        Some(n) => Some(
            match n.get_ref() {
                toml::Value::Integer(i) => usize::try_from(*i)
                    .map_err(|_| format!("keep_last: {i} is not a count; use 0 or more")),
                other => Err(format!(
                    "keep_last: expected a count such as 3, found {} {other}",
                    other.type_str()
                )),
            }
            .map_err(|m| at(Some(n.span()), m))?,
        ),
        None => None,
    };
    let owner = match &rule.owner {
        None => None,
        Some(v) => Some(
            match v.get_ref() {
                toml::Value::String(name) => value::user(name),
                toml::Value::Integer(uid) => {
                    u32::try_from(*uid).map_err(|_| format!("{uid} is not a uid"))
                }
                other => Err(format!(
                    "expected a user name or a uid, found {}",
                    other.type_str()
                )),
            }
            .map_err(|m| at(Some(v.span()), format!("owner: {m}")))?,
        ),
    };
    Ok(Rule {
        glob,
        older_than,
        keep_last,
        owner,
    })
}

/// `"90%"` (used) or `"2GiB free"`.
fn watermark(text: &str) -> Result<Watermark, String> {
    let t = text.trim();
    let hint = "use a percentage used, such as \"90%\", or a size left free, such as \"2GiB free\"";
    if let Some(size) = t.strip_suffix("free") {
        let size = size.trim();
        if size.ends_with('%') {
            return Err(format!(
                "invalid watermark {text:?}: a percentage means used space; {hint}"
            ));
        }
        return value::size(size)
            .map(Watermark::FreeBytes)
            .map_err(|_| format!("invalid watermark {text:?}; {hint}"));
    }
    if let Some(number) = t.strip_suffix('%') {
        let p: f64 = number
            .trim()
            .parse()
            .map_err(|_| format!("invalid watermark {text:?}; {hint}"))?;
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("watermark {text:?} is outside 0% to 100%"));
        }
        return Ok(Watermark::UsedPercent(p));
    }
    Err(format!(
        "invalid watermark {text:?}: say whether it is used space (\"90%\") or free space (\"2GiB free\"); {hint}"
    ))
}

/// `"90%"` (of inodes used) or `"5000 free"` (inodes left free).
fn inode_mark(text: &str) -> Result<InodeMark, String> {
    let t = text.trim();
    let hint = "use a percentage of inodes used, such as \"90%\", or a number of inodes left free, such as \"5000 free\"";
    if let Some(count) = t.strip_suffix("free") {
        return count
            .trim()
            .parse::<u64>()
            .map(InodeMark::Free)
            .map_err(|_| format!("invalid inode watermark {text:?}; {hint}"));
    }
    if let Some(number) = t.strip_suffix('%') {
        let p: f64 = number
            .trim()
            .parse()
            .map_err(|_| format!("invalid inode watermark {text:?}; {hint}"))?;
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("inode watermark {text:?} is outside 0% to 100%"));
        }
        return Ok(InodeMark::UsedPercent(p));
    }
    Err(format!(
        "invalid inode watermark {text:?}: say whether it is inodes used (\"90%\") or left free (\"5000 free\"); {hint}"
    ))
}

/// As [`check_order`], for inodes.
fn check_inode_order(high: InodeMark, low: InodeMark, root: &Path) -> Result<(), String> {
    let fits = match (high, low) {
        (InodeMark::UsedPercent(h), InodeMark::UsedPercent(l)) => l < h,
        (InodeMark::Free(h), InodeMark::Free(l)) => l > h,
        _ => match rustix::fs::statvfs(root) {
            Ok(st) if st.f_files > 0 => low.free_inodes(st.f_files) > high.free_inodes(st.f_files),
            _ => true,
        },
    };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "low_watermark_inodes ({low}) must be below high_watermark_inodes ({high}): a reap above the high mark goes down to the low one"
        ))
    }
}

/// The low watermark must be below the high one. Percentages and sizes
/// are compared on the root's filesystem when it can be measured now (and
/// clamped at run time otherwise).
fn check_order(high: Watermark, low: Watermark, root: &Path) -> Result<(), String> {
    let fits = match (high, low) {
        (Watermark::UsedPercent(h), Watermark::UsedPercent(l)) => l < h,
        (Watermark::FreeBytes(h), Watermark::FreeBytes(l)) => l > h,
        _ => match rustix::fs::statvfs(root) {
            Ok(st) => {
                let total = st.f_blocks.saturating_mul(st.f_frsize);
                low.free_bytes(total) > high.free_bytes(total)
            }
            Err(_) => true,
        },
    };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "low_watermark ({low}) must be below high_watermark ({high}): a reap above the high mark goes down to the low one"
        ))
    }
}

/// The origin store's directory: absolute, without `..`, not `/`.
fn check_store_path(text: &str) -> Result<PathBuf, String> {
    let p = Path::new(text);
    let dotdot = p.components().any(|c| matches!(c, Component::ParentDir));
    if !p.is_absolute() || dotdot || p.parent().is_none() {
        return Err(format!(
            "origin_store {text:?} must be an absolute directory below / without \"..\", such as \"/var/lib/sandkeeper/origins\""
        ));
    }
    Ok(p.to_owned())
}

/// An absolute, normalized root path that is not `/`.
fn check_root_path(text: &str) -> Result<PathBuf, String> {
    let p = Path::new(text);
    if !p.is_absolute() {
        return Err(format!(
            "root path {text:?} is not absolute; give the full path, such as \"/tmp\""
        ));
    }
    let mut normal = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(name) => normal.push(name),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!(
                    "root path {text:?} contains \"..\"; give the directory itself"
                ))
            }
        }
    }
    let resolved = std::fs::canonicalize(&normal).unwrap_or_else(|_| normal.clone());
    if normal == Path::new("/") || resolved == Path::new("/") {
        return Err(format!(
            "refusing the root {text:?}: it is the filesystem root `/`; give the directory that holds the leftovers, such as \"/tmp\""
        ));
    }
    Ok(normal)
}

/// The first pair of roots that overlap (the same directory, or one inside
/// the other), compared as written and, where they exist, with symlinks
/// resolved (each once): `(later, earlier, how the later relates to the
/// earlier)`, by [`root::first_overlap`](crate::root::first_overlap).
fn first_overlap(roots: &[RootConfig]) -> Option<(usize, usize, &'static str)> {
    let written: Vec<PathBuf> = roots.iter().map(|r| r.path.clone()).collect();
    let resolved: Vec<PathBuf> = roots
        .iter()
        .map(|r| std::fs::canonicalize(&r.path).unwrap_or_else(|_| r.path.clone()))
        .collect();
    [written, resolved]
        .iter()
        .filter_map(|paths| crate::root::first_overlap(paths))
        .min_by_key(|&(later, _, _)| later)
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {

    mod fuzz {
        //! Any text, and TOML shaped like a config with values of any type,
        //! is parsed or refused with a message: never a panic (debug builds
        //! check every overflow). See `docs/security.md`, "Fuzzing".
        use super::super::*;
        use proptest::prelude::*;

        const KEYS: [&str; 21] = [
            "interval",
            "poll",
            "path",
            "grace",
            "orphan_age",
            "max_keep",
            "user_dirs",
            "user_dir_families",
            "high_watermark",
            "low_watermark",
            "high_watermark_inodes",
            "low_watermark_inodes",
            "match",
            "older_than",
            "keep_last",
            "owner",
            "trust_pid_namespace",
            "assume_unseen_free",
            "track_origins",
            "origin_store",
            "ignore_pids",
        ];

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                Just("18446744073709551615".to_owned()),
                Just("-9223372036854775808".to_owned()),
                Just("1e400".to_owned()),
                Just("nan".to_owned()),
                any::<bool>().prop_map(|b| b.to_string()),
                "[0-9]{0,25}(ms|s|m|h|d|w|y|%| %| GiB free|GiB| EiB free)?"
                    .prop_map(|v| format!("{v:?}")),
                "[ -~]{0,30}".prop_map(|v| format!("{v:?}")),
                Just("\"/\"".to_owned()),
                Just("\"/tmp/../tmp\"".to_owned()),
                Just("[1, 2]".to_owned()),
                Just("{ a = 1 }".to_owned()),
            ]
        }

        fn config_text() -> impl Strategy<Value = String> {
            let line = (0..KEYS.len(), value()).prop_map(|(k, v)| format!("{} = {v}\n", KEYS[k]));
            let block = prop_oneof![
                1 => Just("[[root]]\n".to_owned()),
                1 => Just("[[root.rule]]\n".to_owned()),
                1 => Just("[root]\n".to_owned()),
                4 => line,
            ];
            prop::collection::vec(block, 0..24).prop_map(|b| b.concat())
        }

        proptest! {
            #[test]
            fn fuzz_config_parser_takes_any_text(text in "\\PC{0,400}") {
                let _ = parse(&text, Path::new("fuzz.toml"));
            }

            #[test]
            fn fuzz_config_parser_takes_any_config_shaped_toml(text in config_text()) {
                if let Err(e) = parse(&text, Path::new("fuzz.toml")) {
                    prop_assert!(!e.message.is_empty());
                }
            }
        }
    }
    use super::*;

    fn parse_str(text: &str) -> Result<Config, ConfigError> {
        parse(text, Path::new("/etc/sandkeeper/config.toml"))
    }

    #[test]
    fn the_issue_example_parses() {
        let text = r#"
interval = "5m"          # full scan + reap cycle
poll = "5s"              # statvfs watermark poll

[[root]]
path = "/tmp"
grace = "60s"
high_watermark = "90%"   # used; or e.g. "2GiB free"
low_watermark = "75%"

[[root.rule]]            # unmanaged families this root may reap
match = "app-*"
older_than = "2h"
keep_last = 3
"#;
        let config = parse_str(text).unwrap();
        assert_eq!(config.interval, Duration::from_secs(300));
        assert_eq!(config.poll, Duration::from_secs(5));
        let root = &config.roots[0];
        assert_eq!(root.path, Path::new("/tmp"));
        assert_eq!(root.grace, Duration::from_secs(60));
        assert!(root.user_dirs);
        assert_eq!(
            root.watermarks,
            Some(Watermarks {
                high: Watermark::UsedPercent(90.0),
                low: Watermark::UsedPercent(75.0)
            })
        );
        assert_eq!(
            root.rules,
            vec![Rule {
                glob: "app-*".into(),
                older_than: Some(Duration::from_secs(7200)),
                keep_last: Some(3),
                owner: None,
            }]
        );
    }

    #[test]
    fn defaults_and_owners() {
        let text = "[[root]]\npath = \"/var/tmp/ci/\"\norphan_age = \"1d\"\nuser_dirs = false\nhigh_watermark = \"1GiB free\"\nlow_watermark = \"4GiB free\"\n[[root.rule]]\nmatch = \"a*\"\nowner = \"root\"\n[[root.rule]]\nmatch = \"b*\"\nowner = 1000\n";
        let config = parse_str(text).unwrap();
        assert_eq!(config.interval, DEFAULT_INTERVAL);
        let root = &config.roots[0];
        assert_eq!(root.path, Path::new("/var/tmp/ci"));
        assert_eq!(root.orphan_age, Some(Duration::from_secs(86_400)));
        assert!(!root.user_dirs);
        assert_eq!(root.rules[0].owner, Some(0));
        assert_eq!(root.rules[1].owner, Some(1000));
        assert_eq!(root.rules[1].keep_last, None);
    }

    /// Issue 29: the config carries the pids vouched for, as the flag does.
    #[test]
    fn ignore_pids_key() {
        let root = "[[root]]\npath = \"/tmp\"\n";
        assert!(parse_str(root).unwrap().ignore_pids.is_empty());
        let on = format!("ignore_pids = [1, 4242]\n{root}");
        assert_eq!(parse_str(&on).unwrap().ignore_pids, vec![1, 4242]);
        for (bad, says) in [
            ("1", "expected a list of process ids"),
            ("[0]", "0 is not a process id"),
            ("[-3]", "-3 is not a process id"),
            ("[4294967296]", "is not a process id"),
            ("[\"1\"]", "found string"),
        ] {
            let text = format!("ignore_pids = {bad}\n{root}");
            let err = parse_str(&text).unwrap_err();
            assert!(
                err.message.contains(says) && err.line == Some(1),
                "{bad}: {err}"
            );
        }
    }

    /// Issue 10, finding 5(a): trusting the pid namespace is one explicit
    /// top-level key, off by default.
    #[test]
    fn origin_store_key() {
        let root = "[[root]]\npath = \"/tmp\"\n";
        assert_eq!(parse_str(root).unwrap().origin_store, None);
        let on = format!("origin_store = \"/srv/origins\"\n{root}");
        assert_eq!(
            parse_str(&on).unwrap().origin_store.as_deref(),
            Some(Path::new("/srv/origins"))
        );
        for bad in ["\"relative\"", "\"/\"", "\"/a/../b\"", "1"] {
            let text = format!("origin_store = {bad}\n{root}");
            let err = parse_str(&text).unwrap_err();
            assert!(err.message.contains("origin_store"), "{bad}: {err}");
        }
    }

    #[test]
    fn assume_unseen_free_key() {
        let root = "[[root]]\npath = \"/tmp\"\n";
        assert!(!parse_str(root).unwrap().assume_unseen_free);
        assert!(!Config::defaults().assume_unseen_free);
        let on = format!("assume_unseen_free = true\n{root}");
        assert!(parse_str(&on).unwrap().assume_unseen_free);
        let bad = format!("assume_unseen_free = 1\n{root}");
        let err = parse_str(&bad).unwrap_err().to_string();
        assert!(err.contains("expected a boolean"), "{err}");
    }

    #[test]
    fn trust_pid_namespace_key() {
        let root = "[[root]]\npath = \"/tmp\"\n";
        assert!(!parse_str(root).unwrap().trust_pid_namespace);
        assert!(!Config::defaults().trust_pid_namespace);
        let on = format!("trust_pid_namespace = true\n{root}");
        assert!(parse_str(&on).unwrap().trust_pid_namespace);
        let off = format!("trust_pid_namespace = false\n{root}");
        assert!(!parse_str(&off).unwrap().trust_pid_namespace);
    }

    /// Each bad file: the line and words of its error.
    #[test]
    fn bad_files_name_the_line_and_the_reason() {
        let cases: &[(&str, &str, Option<usize>, &str)] = &[
            ("unknown top-level key", "interval = \"5m\"\nintervall = \"1m\"\n", Some(2), "unknown field `intervall`"),
            ("unknown root key", "[[root]]\npath = \"/tmp\"\ngrase = \"1m\"\n", Some(3), "unknown field `grase`"),
            ("unknown rule key", "[[root]]\npath = \"/tmp\"\n[[root.rule]]\nmatch = \"a*\"\nolder = \"1h\"\n", Some(5), "unknown field `older`"),
            ("bad duration", "[[root]]\npath = \"/tmp\"\ngrace = \"soon\"\n", Some(3), "grace: invalid duration \"soon\""),
            ("zero interval", "interval = \"0s\"\n[[root]]\npath = \"/tmp\"\n", Some(1), "interval must be more than zero"),
            ("duration as a number", "[[root]]\npath = \"/tmp\"\ngrace = 60\n", Some(3), "grace: expected a duration such as \"90s\", \"5m\" or \"2h\" (in quotes), found integer 60"),
            ("keep_last as a float", "[[root]]\npath = \"/tmp\"\n[[root.rule]]\nmatch = \"a*\"\nkeep_last = 1.5\n", Some(5), "keep_last: expected a count such as 3, found float 1.5"),
            ("path as an array", "[[root]]\npath = [\"/tmp\"]\n", Some(2), "path: expected a directory such as \"/tmp\" (in quotes), found array"),
            ("root /", "[[root]]\npath = \"/\"\n", Some(2), "filesystem root"),
            ("root /./", "[[root]]\npath = \"/./\"\n", Some(2), "filesystem root"),
            ("relative root", "[[root]]\npath = \"tmp\"\n", Some(2), "not absolute"),
            ("dot-dot root", "[[root]]\npath = \"/tmp/../etc\"\n", Some(2), "contains \"..\""),
            ("overlapping roots", "[[root]]\npath = \"/tmp\"\n\n[[root]]\npath = \"/tmp/ci\"\n", Some(5), "root /tmp/ci is inside root /tmp (line 2)"),
            ("the same root twice", "[[root]]\npath = \"/tmp\"\n[[root]]\npath = \"/tmp/\"\n", Some(4), "is the same directory as root /tmp"),
            ("a root containing another", "[[root]]\npath = \"/tmp/ci\"\n[[root]]\npath = \"/tmp\"\n", Some(4), "contains root /tmp/ci"),
            ("missing path", "[[root]]\ngrace = \"1m\"\n", Some(1), "missing field `path`"),
            ("no roots", "interval = \"5m\"\n", None, "no [[root]] table"),
            ("high without low", "[[root]]\npath = \"/tmp\"\nhigh_watermark = \"90%\"\n", Some(3), "needs a low_watermark"),
            ("low above high", "[[root]]\npath = \"/tmp\"\nhigh_watermark = \"80%\"\nlow_watermark = \"85%\"\n", Some(4), "must be below high_watermark"),
            ("free sizes the wrong way round", "[[root]]\npath = \"/tmp\"\nhigh_watermark = \"4GiB free\"\nlow_watermark = \"1GiB free\"\n", Some(4), "must be below"),
            ("a bare size", "[[root]]\npath = \"/tmp\"\nhigh_watermark = \"2GiB\"\nlow_watermark = \"75%\"\n", Some(3), "say whether it is used space"),
            ("percent free", "[[root]]\npath = \"/tmp\"\nhigh_watermark = \"10% free\"\nlow_watermark = \"75%\"\n", Some(3), "a percentage means used space"),
            ("percent over 100", "[[root]]\npath = \"/tmp\"\nhigh_watermark = \"190%\"\nlow_watermark = \"75%\"\n", Some(3), "outside 0% to 100%"),
            ("bad glob", "[[root]]\npath = \"/tmp\"\n[[root.rule]]\nmatch = \"app-[\"\n", Some(4), "invalid glob \"app-[\""),
            ("missing match", "[[root]]\npath = \"/tmp\"\n[[root.rule]]\nolder_than = \"1h\"\n", Some(3), "missing field `match`"),
            ("negative keep_last", "[[root]]\npath = \"/tmp\"\n[[root.rule]]\nmatch = \"a*\"\nkeep_last = -1\n", Some(5), "keep_last: -1 is not a count"),
            ("unknown owner", "[[root]]\npath = \"/tmp\"\n[[root.rule]]\nmatch = \"a*\"\nowner = \"no-such-user-xyz\"\n", Some(5), "owner: unknown user \"no-such-user-xyz\""),
            ("owner of the wrong type", "[[root]]\npath = \"/tmp\"\n[[root.rule]]\nmatch = \"a*\"\nowner = true\n", Some(5), "expected a user name or a uid"),
            ("syntax error", "[[root]]\npath = \"/tmp\n", Some(2), ""),
            ("trust as a string", "trust_pid_namespace = \"yes\"\n[[root]]\npath = \"/tmp\"\n", Some(1), "expected a boolean"),
            ("rule outside a root", "[[rule]]\nmatch = \"a*\"\n", Some(1), "unknown field `rule`"),
        ];
        for (name, text, line, words) in cases {
            let err = parse_str(text).expect_err(name);
            assert_eq!(err.line, *line, "{name}: {err}");
            assert!(err.message.contains(words), "{name}: {err}");
            let shown = err.to_string();
            let want = match line {
                Some(l) => format!("/etc/sandkeeper/config.toml:{l}: "),
                None => "/etc/sandkeeper/config.toml: ".to_owned(),
            };
            assert!(shown.starts_with(&want), "{name}: {shown}");
        }
    }

    #[test]
    fn inode_watermarks() {
        let cases: &[(&str, Option<InodeMark>)] = &[
            ("90%", Some(InodeMark::UsedPercent(90.0))),
            ("5000 free", Some(InodeMark::Free(5000))),
            (" 0 free ", Some(InodeMark::Free(0))),
            ("5000", None),
            ("10% free", None),
            ("5k free", None),
            ("190%", None),
        ];
        for (text, want) in cases {
            assert_eq!(inode_mark(text).ok(), *want, "{text}");
        }
        let marks = InodeWatermarks {
            high: InodeMark::UsedPercent(90.0),
            low: InodeMark::UsedPercent(75.0),
        };
        assert!(!marks.above_high(1000, 100));
        assert!(marks.above_high(1000, 99));
        assert!(!marks.above_high(0, 0), "no inodes reported: never above");
        assert_eq!(marks.target_free_inodes(1000), 250);
        let text = "[[root]]\npath = \"/tmp\"\nhigh_watermark_inodes = \"100 free\"\nlow_watermark_inodes = \"1000 free\"\n";
        let config = parse_str(text).unwrap();
        assert_eq!(
            config.roots[0].inode_watermarks,
            Some(InodeWatermarks {
                high: InodeMark::Free(100),
                low: InodeMark::Free(1000)
            })
        );
        assert_eq!(config.roots[0].watermarks, None);
        for (text, line, want) in [
            ("[[root]]\npath = \"/tmp\"\nhigh_watermark_inodes = \"95%\"\n", 3, "needs a low_watermark_inodes"),
            ("[[root]]\npath = \"/tmp\"\nhigh_watermark_inodes = \"80%\"\nlow_watermark_inodes = \"85%\"\n", 4, "must be below high_watermark_inodes"),
            ("[[root]]\npath = \"/tmp\"\nhigh_watermark_inodes = \"lots\"\nlow_watermark_inodes = \"85%\"\n", 3, "invalid inode watermark"),
        ] {
            let err = parse_str(text).unwrap_err();
            assert_eq!(err.line, Some(line), "{err}");
            assert!(err.message.contains(want), "{err}");
        }
    }

    #[test]
    fn watermarks() {
        let cases: &[(&str, Option<Watermark>)] = &[
            ("90%", Some(Watermark::UsedPercent(90.0))),
            (" 99.5 % ", Some(Watermark::UsedPercent(99.5))),
            ("2GiB free", Some(Watermark::FreeBytes(2 << 30))),
            ("500M  free", Some(Watermark::FreeBytes(500_000_000))),
            ("0%", Some(Watermark::UsedPercent(0.0))),
            ("2GiB", None),
            ("free", None),
            ("lots%", None),
            ("-1%", None),
        ];
        for (text, want) in cases {
            assert_eq!(watermark(text).ok(), *want, "{text}");
        }
        let marks = Watermarks {
            high: Watermark::UsedPercent(90.0),
            low: Watermark::UsedPercent(75.0),
        };
        assert!(!marks.above_high(1000, 100));
        assert!(marks.above_high(1000, 99));
        assert_eq!(marks.target_free_bytes(1000), 250);
        let mixed = Watermarks {
            high: Watermark::FreeBytes(300),
            low: Watermark::UsedPercent(75.0),
        };
        assert_eq!(
            mixed.target_free_bytes(1000),
            300,
            "never below the high mark"
        );
    }

    #[test]
    fn lines() {
        let cases = [
            ("", 0, 1),
            ("a\nb\nc", 2, 2),
            ("a\nb\nc", 4, 3),
            ("a\n", 99, 2),
        ];
        for (text, offset, want) in cases {
            assert_eq!(line_of(text, offset), want, "{text:?} {offset}");
        }
    }
}
