//! One module per subcommand: turn arguments into library calls, hand the
//! result to a renderer.

pub mod completions;
pub mod explain;
pub mod ls;
pub mod nextest;
pub mod reap;
pub mod report;
pub mod run;
pub mod scan;
pub mod watch;

use std::path::Path;

use std::os::unix::ffi::OsStrExt;

use sandkeeper_engine::config::{self, Config};
use sandkeeper_engine::reap::{Policy, Rules};
use sandkeeper_engine::scan::Scanner;
use sandkeeper_engine::watch::ReapOptions;

use crate::cli::{InUseArgs, RuleArgs};
use crate::error::CliError;
use crate::humanize::sanitize;

impl InUseArgs {
    /// The in-use switches, one rule for every subcommand: a switch is on
    /// when its flag, the config file (`config`, for `reap --config` and
    /// `watch`) or its environment variable (`SANDKEEPER_TRUST_PID_NAMESPACE`,
    /// `SANDKEEPER_ASSUME_UNSEEN_FREE`) says so; the environment is read,
    /// and a bad value refused, whatever the others say. Returns the
    /// options with the pids vouched for.
    pub fn options(&self, config: Option<&Config>) -> Result<ReapOptions, CliError> {
        let opts = ReapOptions::for_caller(
            self.ignore_pids.clone(),
            self.trust_pid_namespace,
            self.assume_unseen_free,
        )?;
        Ok(match config {
            Some(config) => opts.with_config(config),
            None => opts,
        })
    }

    /// Gives `scanner` these options ([`options`](Self::options), no config).
    pub fn apply(&self, scanner: &mut Scanner) -> Result<(), CliError> {
        self.options(None)?.vouch(scanner);
        Ok(())
    }
}

pub use sandkeeper_engine::root::{open_roots, Purpose};

/// The reap policy the rule flags describe.
pub fn policy(rules: &RuleArgs, dry_run: bool, records: bool) -> Result<Policy, CliError> {
    let rules = Rules {
        globs: rules.globs.clone(),
        older_than: rules.older_than,
        keep_last: rules.keep_last,
        target_free: rules.target_free,
        target_free_inodes: rules.target_free_inodes,
        owner: rules.owner,
        grace: rules.grace,
        max_keep: rules.max_keep,
    };
    Ok(rules.policy(dry_run, records)?)
}

/// The config to use: `--config FILE`, else the default file if one
/// exists, else the built-in defaults.
///
/// # Errors
///
/// A bad or unreadable file: exit status 2, with the file and line.
pub fn load_config(explicit: Option<&Path>) -> Result<Config, CliError> {
    if let Some(path) = explicit {
        if let Err(e) = std::fs::symlink_metadata(path) {
            if e.kind() == std::io::ErrorKind::NotFound {
                return Err(missing_config(path));
            }
        }
    }
    match config::locate(explicit) {
        Some(path) => config::load(&path).map_err(config_error),
        None => Ok(Config::defaults()),
    }
}

/// `--config FILE` for a file that does not exist: say so, and how to
/// make one (exit status 2).
fn missing_config(path: &Path) -> CliError {
    let file = sanitize(path.as_os_str().as_bytes());
    let mut e = CliError::usage(format!("the config file {file} does not exist"));
    e.hint = Some(format!(
        "create it, for example from the example in the sources: `install -D -m 0644 contrib/systemd/config.toml {file}` (docs/config.md lists every key); or drop --config. Nothing was changed."
    ));
    e
}

pub fn config_error(err: config::ConfigError) -> CliError {
    // The file's name is shown escaped; the message is the library's own.
    let file = sanitize(err.file.as_os_str().as_bytes());
    let mut e = CliError::usage(match err.line {
        Some(line) => format!("{file}:{line}: {}", err.message),
        None => format!("{file}: {}", err.message),
    });
    e.hint = Some("fix the file; docs/config.md lists every key. Nothing was changed.".into());
    e
}
