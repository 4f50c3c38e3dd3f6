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

/// Every page as (file name, roff), the top-level one first, the config
/// file's `sandkeeper.toml(5)` last.
fn pages() -> io::Result<Vec<(String, Vec<u8>)>> {
    // As clap_mangen::generate_to: no page for clap's `help` subcommand.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    collect(&cmd, &mut pages)?;
    pages.push(("sandkeeper.toml.5".to_owned(), config_page()?));
    Ok(pages)
}

/// `sandkeeper.toml(5)`, rendered from the engine's list of config keys
/// (`config::reference`, which its tests hold against the parser).
fn config_page() -> io::Result<Vec<u8>> {
    use sandkeeper_engine::config::reference::{KEYS, SECTIONS};
    let mut roff = Roff::new();
    let version = format!("{BIN} {}", env!("CARGO_PKG_VERSION"));
    roff.control("TH", ["sandkeeper.toml", "5", "", version.as_str()]);
    roff.control("SH", ["NAME"]);
    roff.text([roman(
        "sandkeeper.toml - the config file of sandkeeper watch and sandkeeper reap",
    )]);
    roff.control("SH", ["SYNOPSIS"]);
    roff.text([
        bold("/etc/sandkeeper/config.toml"),
        roman(", else "),
        bold("$XDG_CONFIG_HOME/sandkeeper/config.toml"),
        roman(", or the file given to "),
        bold("--config"),
        roman("."),
    ]);
    roff.control("SH", ["DESCRIPTION"]);
    roff.text([roman(
        "A TOML file that says which directories (roots) to keep clean, what may be removed \
         from them, and when to reap under disk pressure. A file is checked completely before \
         anything runs: an unknown key, a bad duration or size, a glob that does not parse, an \
         unknown user, a root that is / or not absolute, overlapping roots and watermarks the \
         wrong way round are errors naming the line, with exit status 2. \
         sandkeeper watch --check checks a file; a running watch reloads it on SIGHUP and keeps \
         the previous one if the new one is bad. Durations are written as \"90s\", \"15m\", \
         \"2h\" or \"7d\"; sizes as \"2GiB\".",
    )]);
    for section in SECTIONS {
        let title = match section {
            "" => "TOP LEVEL".to_owned(),
            s => s.to_owned(),
        };
        roff.control("SH", [title.as_str()]);
        for key in KEYS.iter().filter(|k| k.section == section) {
            roff.control("TP", []);
            roff.text([
                bold(key.name),
                roman(format!(" (default: {})", key.default)),
            ]);
            roff.text([roman(key.text)]);
        }
    }
    roff.control("SH", ["EXAMPLE"]);
    roff.control("nf", []);
    roff.text([roman(
        "interval = \"5m\"\n\n[[root]]\npath = \"/tmp\"\nhigh_watermark = \"90%\"\n\
         low_watermark = \"75%\"\n\n[[root.rule]]\nmatch = \"app-*\"\nolder_than = \"2h\"",
    )]);
    roff.control("fi", []);
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("sandkeeper-watch"),
        roman("(1), "),
        bold("sandkeeper-reap"),
        roman("(1), "),
        bold("systemd.timer"),
        roman("(5)"),
    ]);
    let mut out = Vec::new();
    roff.to_writer(&mut out)?;
    Ok(out)
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
