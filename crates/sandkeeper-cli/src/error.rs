//! Errors as the user sees them: a message, its causes, a hint, and the
//! exit status they map to.

use std::error::Error as _;

use crate::exit_codes::{self, ExitStatus};

/// A failure of a subcommand.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub causes: Vec<String>,
    pub hint: Option<String>,
    pub status: ExitStatus,
}

impl CliError {
    /// Bad usage or input: exit status 2, nothing changed.
    #[allow(dead_code)] // used by later subcommands
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            causes: Vec::new(),
            hint: None,
            status: exit_codes::USAGE,
        }
    }
}

impl CliError {
    /// A failed system call outside the library: status 1.
    pub fn io(what: &str, err: &std::io::Error) -> CliError {
        CliError {
            message: format!("{what}: {err}"),
            causes: Vec::new(),
            hint: None,
            status: exit_codes::PARTIAL,
        }
    }
}

impl From<sandkeeper_engine::Error> for CliError {
    fn from(err: sandkeeper_engine::Error) -> CliError {
        use sandkeeper_engine::ErrorKind as K;
        let status = match err.kind() {
            K::InvalidInput | K::UnusableRoot | K::UnsafeRoot | K::NameConflict => {
                exit_codes::USAGE
            }
            _ => exit_codes::PARTIAL,
        };
        let mut causes = Vec::new();
        let mut source = err.source();
        // The library's Display already ends with its direct cause.
        if let Some(s) = source {
            source = s.source();
        }
        while let Some(s) = source {
            causes.push(s.to_string());
            source = s.source();
        }
        CliError {
            message: err.to_string(),
            causes,
            hint: err.hint().map(str::to_owned),
            status,
        }
    }
}
