//! Exit statuses of `sandkeeper`, the same for every subcommand.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | success (also: output closed early, a broken pipe) |
//! | 1 | done, but something could not be done (an entry not removed) |
//! | 2 | bad usage or bad input: nothing was changed |
//! | 130 | interrupted by SIGINT |
//! | 143 | `watch`: stopped by a second SIGTERM, or not done stopping 5 s after the first (a system call that does not return) |

/// A process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus(pub u8);

/// Everything worked.
pub const SUCCESS: ExitStatus = ExitStatus(0);
/// The command ran but something could not be done.
pub const PARTIAL: ExitStatus = ExitStatus(1);
/// Bad usage or input; nothing was changed. clap uses it for parse errors.
pub const USAGE: ExitStatus = ExitStatus(2);
/// Interrupted by SIGINT.
#[allow(dead_code)] // used by run and watch
pub const INTERRUPTED: ExitStatus = ExitStatus(130);

/// The table for `--help`. (143: the engine's stop watchdog ends the
/// process itself, [`sandkeeper_engine::watch::Signals`].)
pub const HELP: &str = "Exit status: 0 success; 1 something could not be done; 2 bad usage or input (nothing changed); 130 interrupted; 143 watch ended by SIGTERM before it finished stopping.";

impl From<ExitStatus> for std::process::ExitCode {
    fn from(status: ExitStatus) -> Self {
        std::process::ExitCode::from(status.0)
    }
}
