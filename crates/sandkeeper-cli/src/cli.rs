//! The command line, as clap sees it. No logic here.

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::exit_codes;

/// Find, audit and remove leaked scratch directories, safely beside live work.
#[derive(Debug, Parser)]
#[command(name = "sandkeeper", version, about, after_help = exit_codes::HELP)]
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

/// The subcommands (scan, reap, run and watch land with their issues).
#[derive(Debug, Subcommand)]
pub enum Command {}

/// The long help, for a bare `sandkeeper`.
pub fn help_text() -> String {
    Cli::command().render_long_help().to_string()
}
