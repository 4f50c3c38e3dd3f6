//! The command line, as clap sees it. No logic here.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use sandkeeper_engine::defaults;
use sandkeeper_engine::reap::{FreeInodes, FreeTarget};

use crate::{config, exit_codes};

/// Find, audit and remove leaked scratch directories, safely beside live work.
#[derive(Debug, Parser)]
// A bare `sandkeeper` (no subcommand) prints the help on stderr and exits
// 2, as any other usage error does (clap's `arg_required_else_help`).
#[command(
    name = "sandkeeper",
    version,
    about,
    after_help = exit_codes::HELP,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Print nothing but data and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// Say more about what is done and why.
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Audit roots: leftovers grouped by name family, size, age, and whether
    /// they are live, in use, orphaned or idle.
    #[command(after_help = exit_codes::HELP)]
    Scan(ScanArgs),

    /// Remove orphaned sandboxes, and unmanaged leftovers that a --match rule
    /// selects; never anything live, in use, unknown or younger than the grace.
    #[command(after_help = exit_codes::HELP)]
    Reap(ReapArgs),

    /// List the managed sandboxes: owner (pid, command, user), age, size, state.
    #[command(after_help = exit_codes::HELP)]
    Ls(LsArgs),

    /// Say why an entry is in its state, and what a reap with the given rules
    /// would do to it.
    #[command(after_help = exit_codes::HELP)]
    Explain(ExplainArgs),

    /// Run a command with its own TMPDIR, and remove it afterwards, whatever
    /// the command and its children did. Exits with the command's status
    /// (128+N when it died of signal N; 127 when it does not exist).
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),

    /// Say which tests leaked, worst first, from the records `run
    /// --report-dir DIR` wrote (one per test under cargo-nextest; see
    /// docs/nextest.md).
    #[command(after_help = REPORT_HELP)]
    Report(ReportArgs),

    /// The host backstop: reap by a config file's rules every interval, and
    /// at once, oldest first, when a root crosses its high watermark; log
    /// each removal; write Prometheus metrics. SIGHUP reloads the config,
    /// SIGTERM stops after the current removal.
    #[command(after_help = exit_codes::HELP)]
    Watch(WatchArgs),

    /// Print the completion script for a shell (bash, zsh, fish, ...) on stdout.
    ///
    /// For example: `sandkeeper completions bash >
    /// ~/.local/share/bash-completion/completions/sandkeeper`, `sandkeeper
    /// completions zsh > ~/.zfunc/_sandkeeper` (with ~/.zfunc in $fpath),
    /// `sandkeeper completions fish > ~/.config/fish/completions/sandkeeper.fish`.
    #[command(after_help = exit_codes::HELP)]
    Completions(CompletionsArgs),

    /// Write the man pages (sandkeeper.1, sandkeeper-scan.1, ...) into a directory.
    ///
    /// One page for sandkeeper and one per subcommand, generated from this
    /// help. For example: `sandkeeper man --out-dir ~/.local/share/man/man1`,
    /// then `man sandkeeper-reap`.
    #[command(after_help = exit_codes::HELP)]
    Man(ManArgs),
}

/// What the in-use check may assume of processes it cannot inspect
/// (shared by scan, ls, reap, explain and watch).
#[derive(Debug, Args)]
pub struct InUseArgs {
    /// Vouch for a process that cannot be inspected: assume it uses nothing
    /// under the roots (repeatable). Without it, such processes make entries
    /// `unknown`.
    #[arg(long = "ignore-pid", value_name = "PID", allow_hyphen_values = true, value_parser = config::pid)]
    pub ignore_pids: Vec<u32>,

    /// Trust that every process that can reach the roots is in this pid
    /// namespace (a container that owns its temp directory): without it, a
    /// run in a child pid namespace calls every entry `unknown`. Reported as
    /// an assumption. Same as SANDKEEPER_TRUST_PID_NAMESPACE=1.
    #[arg(long)]
    pub trust_pid_namespace: bool,

    /// Assume that every process this user cannot inspect (root's, other
    /// users') holds nothing under the roots. Regular files you own are
    /// still asked (a write lease): one open for reading or writing in such
    /// a process keeps its entry. What it assumes is their working
    /// directories, roots and open directories, and files they opened with
    /// access mode 3 (ioctl only) or O_PATH, which no user can check.
    /// Reported as an assumption.
    /// Same as SANDKEEPER_ASSUME_UNSEEN_FREE=1.
    #[arg(long)]
    pub assume_unseen_free: bool,
}

/// Options that pick what a reap may remove (shared by reap and explain).
#[derive(Debug, Args)]
pub struct RuleArgs {
    /// Admit unmanaged entries whose name matches GLOB (repeatable), e.g.
    /// 'app-*'. Orphaned sandboxes are always admitted.
    #[arg(long = "match", value_name = "GLOB")]
    pub globs: Vec<String>,

    /// Only entries whose newest change inside is older than this (90s, 2h, 7d).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = config::duration)]
    pub older_than: Option<Duration>,

    /// Keep the N newest entries of each family.
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = config::count)]
    pub keep_last: Option<usize>,

    /// Remove oldest first, only until this much is free: a percentage of the
    /// filesystem (25%) or a size (2GiB).
    #[arg(long, value_name = "PERCENT|SIZE", allow_hyphen_values = true, value_parser = config::free_target)]
    pub target_free: Option<FreeTarget>,

    /// Remove oldest first, only until this many inodes are free: a
    /// percentage of the filesystem's inodes (10%) or a number (5000). With
    /// --target-free, until both are met.
    #[arg(long, value_name = "PERCENT|COUNT", value_parser = config::free_inodes)]
    pub target_free_inodes: Option<FreeInodes>,

    /// Only entries owned by this user (name or uid).
    #[arg(long, value_name = "USER", value_parser = config::user)]
    pub owner: Option<u32>,

    /// Honour a sandbox's "keep until" (SANDKEEPER_KEEP) for at most this
    /// long after its newest change: its lease record says how long, and
    /// whoever made it wrote that.
    #[arg(long, value_name = "DURATION", default_value = defaults::MAX_KEEP_TEXT, allow_hyphen_values = true, value_parser = config::duration)]
    pub max_keep: Duration,

    /// Never remove anything younger than this.
    #[arg(long, value_name = "DURATION", default_value = defaults::GRACE_TEXT, allow_hyphen_values = true, value_parser = config::duration)]
    pub grace: Duration,

    #[command(flatten)]
    pub inuse: InUseArgs,

    /// The rule options given on the command line (`--grace`, `--match`,
    /// …), as clap saw them: a default is not "given", even when it is
    /// written out (`--grace 60s` is given). Filled by [`parse`].
    #[arg(skip)]
    pub given: Vec<&'static str>,
}

/// The rule options that a config file replaces (`reap --config` refuses
/// them), by clap id, with the flag users write.
pub const RULE_FLAGS: [(&str, &str); 8] = [
    ("globs", "--match"),
    ("older_than", "--older-than"),
    ("keep_last", "--keep-last"),
    ("target_free", "--target-free"),
    ("target_free_inodes", "--target-free-inodes"),
    ("owner", "--owner"),
    ("grace", "--grace"),
    ("max_keep", "--max-keep"),
];

/// Parses the command line, with where each rule option of `reap` came
/// from (clap's `value_source`: a default is not a given option).
///
/// # Errors
///
/// clap's: a usage error, `--help`, `--version`.
pub fn parse(args: &[std::ffi::OsString]) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let matches = Cli::command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (Some(Command::Reap(reap)), Some(given)) =
        (&mut cli.command, matches.subcommand_matches("reap"))
    {
        reap.rules.given = RULE_FLAGS
            .iter()
            .filter(|(id, _)| {
                given.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
            })
            .map(|&(_, flag)| flag)
            .collect();
    }
    Ok(cli)
}

/// `sandkeeper reap`.
#[derive(Debug, Args)]
pub struct ReapArgs {
    /// Directories to reap (default: the system temp directory).
    #[arg(value_name = "ROOT")]
    pub roots: Vec<PathBuf>,

    #[command(flatten)]
    pub rules: RuleArgs,

    /// Print what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Print one JSON document (schema sandkeeper.reap/v1, see docs/reap-json.md).
    #[arg(long)]
    pub json: bool,

    /// Take the roots and rules from this config file (see docs/config.md),
    /// watermarks included. Without ROOT and rule flags, the default config
    /// file is used if it exists (/etc/sandkeeper/config.toml, then
    /// $XDG_CONFIG_HOME/sandkeeper/config.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `sandkeeper ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Directories to look in (default: the system temp directory and its
    /// per-user sandbox directory).
    #[arg(value_name = "ROOT")]
    pub roots: Vec<PathBuf>,

    /// Print one JSON document (schema sandkeeper.ls/v1, see
    /// docs/ls-json.md): an object whose `sandboxes` array lists them.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub inuse: InUseArgs,
}

/// `sandkeeper explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The entry to explain. Without --root, its parent directory is its
    /// root (resolved once; PATH's last name is never followed, so a
    /// symlink is explained as itself).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,

    /// The roots PATH may be in (repeatable); PATH is then the top-level
    /// entry of the deepest one that holds it, or a path inside that entry.
    #[arg(long = "root", value_name = "ROOT")]
    pub roots: Vec<PathBuf>,

    #[command(flatten)]
    pub rules: RuleArgs,
}

/// `sandkeeper scan`.
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Directories to scan (default: the system temp directory, honouring
    /// TMPDIR).
    #[arg(value_name = "ROOT")]
    pub roots: Vec<PathBuf>,

    /// List every entry too, not only the families.
    #[arg(long)]
    pub entries: bool,

    /// Print one JSON document (schema sandkeeper.scan/v1, see docs/scan-json.md).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub inuse: InUseArgs,

    /// Walking threads (default: one per core).
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
}

/// The long help, for a bare `sandkeeper`.
pub fn help_text() -> String {
    Cli::command().render_long_help().to_string()
}

/// Exit statuses of `run`.
const RUN_HELP: &str = "Exit status: the command's (128+N if it died of signal N); 127 command not found; 126 not executable; 2 bad usage or the run directory could not be made (the command did not run; with --nextest it runs all the same, with its own status).";

/// When `run` keeps the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeepWhen {
    /// Always remove it.
    Never,
    /// Keep it when the command fails (non-zero exit or a signal).
    OnFailure,
    /// Always keep it.
    Always,
}

/// `sandkeeper run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where to make the run's directory (default: the system temp directory).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// When to keep the directory; a kept one is named on stderr and reapers
    /// take it after --keep-for.
    #[arg(long, value_enum, default_value = "never")]
    pub keep: KeepWhen,

    /// How long a kept directory is protected from reapers.
    #[arg(long, value_name = "DURATION", default_value = "24h", allow_hyphen_values = true, value_parser = config::duration)]
    pub keep_for: Duration,

    /// Between SIGTERM and SIGKILL for descendants left when the command exits.
    #[arg(long, value_name = "DURATION", default_value = "5s", allow_hyphen_values = true, value_parser = config::duration)]
    pub kill_grace: Duration,

    /// Write what the command left behind as JSON (schema sandkeeper.run/v1,
    /// see docs/run-json.md).
    #[arg(long, value_name = "FILE")]
    pub report_json: Option<PathBuf>,

    /// Write one record of this run (the nextest test's binary id and name,
    /// exit status, leftovers by family, daemons killed) as a new file into
    /// DIR, made if missing (it must be yours and writable only by you);
    /// the leftover line is not printed. `sandkeeper report DIR` sums them up.
    #[arg(long, value_name = "DIR")]
    pub report_dir: Option<PathBuf>,

    /// Run as cargo-nextest's wrapper script (docs/nextest.md): write the
    /// run's record as --report-dir does, into --report-dir DIR if given,
    /// else into `sandkeeper-leaks` in the cargo target directory
    /// ($CARGO_TARGET_DIR when absolute, else the one the test binary CMD
    /// was built in); and never fail the test for a problem of
    /// sandkeeper's own (a record that cannot be written, a TMPDIR that
    /// cannot be made, a bad option): the test runs, its exit status is
    /// kept, and one warning on stderr says what was missed.
    #[arg(long)]
    pub nextest: bool,

    /// Give the command a private tmpfs as TMPDIR, in its own mount namespace:
    /// the kernel frees it when the run's last process exits, and it cannot
    /// fill the host's temp filesystem. Fails if the kernel does not allow it.
    #[arg(long, conflicts_with = "keep")]
    pub isolate: bool,

    /// Size cap of the --isolate tmpfs: a size (10M, 2G) or a percentage of RAM.
    #[arg(long, value_name = "SIZE", default_value = "50%", requires = "isolate", allow_hyphen_values = true, value_parser = config::tmpfs_size)]
    pub size: String,

    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<std::ffi::OsString>,
}

/// Exit statuses of `report`.
const REPORT_HELP: &str = "Exit status: 0 no test leaked; 1 a test left entries or daemons, a record could not be read, or reading stopped at a limit (100,000 records, 64 MiB); 2 DIR cannot be used (missing, a symlink, not a directory, another user's, or writable by others: DIR must be yours and writable by nobody else, the rule of run --report-dir).";

/// `sandkeeper report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The directory `sandkeeper run --report-dir` wrote its records into.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Print one JSON document (schema sandkeeper.report/v1, see docs/report-json.md).
    #[arg(long)]
    pub json: bool,
}

/// `sandkeeper watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The config file (see docs/config.md). Default: /etc/sandkeeper/config.toml
    /// if it exists, then $XDG_CONFIG_HOME/sandkeeper/config.toml; without
    /// one, orphaned sandboxes in the system temp directory, no watermarks.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Run one cycle (scan and reap every root) and exit.
    #[arg(long)]
    pub once: bool,

    /// Check the config file, print what it says, and exit.
    #[arg(long, conflicts_with = "once")]
    pub check: bool,

    /// After each cycle, write Prometheus metrics here, atomically, for
    /// node_exporter's textfile collector (see docs/metrics.md).
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    /// Decide and log what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub inuse: InUseArgs,
}

/// `sandkeeper completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell whose completion script to print.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `sandkeeper man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory to write the pages into. It must exist, and is refused
    /// when other users may write it (unless it is sticky and owned by root
    /// or you); existing pages of the same names are replaced atomically.
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
}
