//! `sandkeeper completions` and `sandkeeper man`: shell completion scripts
//! and man pages, generated from the clap definitions in [`crate::cli`], so
//! they say what `--help` says and cannot drift from it.
//!
//! What they write is our own text, not anything read from the system, so
//! it does not go through [`Printer::data`]'s escaping: a completion script
//! must reach the shell byte for byte (tabs included).

use std::io::{self, Write as _};

use clap::CommandFactory;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;
use sandkeeper_engine::output::OutputFile;

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::printer::Printer;

/// The name the scripts complete.
const BIN: &str = "sandkeeper";

/// Permission bits of a written man page.
const PAGE_MODE: u32 = 0o644;

/// Prints the completion script for `args.shell` on stdout.
///
/// # Errors
///
/// Stdout cannot be written (status 1). A closed pipe is not an error.
pub fn completions(args: &CompletionsArgs) -> Result<ExitStatus, CliError> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), BIN, &mut script);
    let mut out = io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(CliError::io(
            "cannot write the completion script to stdout",
            &e,
        )),
        _ => Ok(exit_codes::SUCCESS),
    }
}

/// Writes `sandkeeper.1` and one page per visible subcommand
/// (`sandkeeper-scan.1`, …) into `args.out_dir`, each with
/// [`OutputFile`] (mode 0644, atomically, never through a symlink). The
/// directory is vetted for every page before the first one is written.
///
/// # Errors
///
/// A missing or unsafe directory, or a page name held by something
/// other than a regular file (status 2, nothing written); a page that
/// cannot be written (status 1).
pub fn man(args: &ManArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    let pages = pages().map_err(|e| CliError::io("cannot render the man pages", &e))?;
    let files = pages
        .iter()
        .map(|(name, _)| OutputFile::open(&args.out_dir.join(name)))
        .collect::<Result<Vec<_>, _>>()?;
    for (file, (_, text)) in files.iter().zip(&pages) {
        file.write(text, PAGE_MODE)?;
        if printer.verbose() {
            printer.note(&format!("wrote {}", file.path().display()));
        }
    }
    printer.note(&format!(
        "wrote {} man pages in {}",
        pages.len(),
        args.out_dir.display()
    ));
    Ok(exit_codes::SUCCESS)
}

/// Every page as (file name, roff), the top-level one first.
fn pages() -> io::Result<Vec<(String, Vec<u8>)>> {
    // As clap_mangen::generate_to: no page for clap's `help` subcommand.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    collect(&cmd, &mut pages)?;
    Ok(pages)
}

fn collect(cmd: &clap::Command, pages: &mut Vec<(String, Vec<u8>)>) -> io::Result<()> {
    // Every page's footer names the program and its version (a
    // subcommand has no version of its own).
    let man = Man::new(cmd.clone()).source(format!("{BIN} {}", env!("CARGO_PKG_VERSION")));
    pages.push((man.get_filename(), page(&man, cmd)?));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, pages)?;
    }
    Ok(())
}

/// The page `Man::render` gives, except that an `after_help` listing exit
/// statuses (as all of ours do) becomes an EXIT STATUS section, one entry
/// per status, instead of clap_mangen's generic EXTRA.
fn page(man: &Man, cmd: &clap::Command) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    if let Some(after) = cmd.get_after_long_help().or_else(|| cmd.get_after_help()) {
        match after.to_string().strip_prefix("Exit status: ") {
            Some(list) => exit_status_section(list).to_writer(&mut out)?,
            None => man.render_extra_section(&mut out)?,
        }
    }
    if cmd.get_version().is_some() || cmd.get_long_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// `0 success; 1 something …; 2 …` as tagged paragraphs; an entry that
/// does not start with a number (`the command's`) as a plain one.
fn exit_status_section(list: &str) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for entry in list.trim_end_matches('.').split("; ") {
        match entry.split_once(' ') {
            Some((status, meaning)) if status.bytes().all(|b| b.is_ascii_digit()) => {
                roff.control("TP", []);
                roff.text([bold(status)]);
                roff.text([roman(meaning)]);
            }
            _ => {
                let mut text = entry.to_owned();
                if let Some(first) = text.get_mut(..1) {
                    first.make_ascii_uppercase();
                }
                roff.control("PP", []);
                roff.text([roman(text)]);
            }
        }
    }
    roff
}
