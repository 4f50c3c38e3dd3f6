//! `sandkeeper reap`.
//!
//! With a config file (`--config`, or a default one when no root or rule
//! is given), each configured root is reaped as one cycle of `watch`
//! would: by the library's engine ([`sandkeeper_engine::watch::reap_root`]).

use std::os::unix::ffi::OsStrExt;

use sandkeeper_engine::config::{self, Config};
use sandkeeper_engine::reap::{ReapReport, Reaper};
use sandkeeper_engine::watch::{self, Mode, WatchEvent};

use super::{config_error, load_config, open_roots, policy, Purpose};
use crate::cli::ReapArgs;
use crate::error::CliError;
use crate::exit_codes::{self, ExitStatus};
use crate::humanize::sanitize;
use crate::printer::Printer;
use crate::render;

pub fn run(args: &ReapArgs, printer: &Printer) -> Result<ExitStatus, CliError> {
    // A record per entry only where the output lists every entry; the
    // summary is told from the counts.
    let records = args.json || printer.verbose();
    let report = match config_for_reap(args)? {
        Some(config) => reap_configured(&config, args, records, printer)?,
        None => {
            let roots = open_roots(&args.roots, true, Purpose::Remove)?;
            let mut reaper = Reaper::new(policy(&args.rules, args.dry_run, records)?);
            args.rules.inuse.apply(reaper.scanner())?;
            reaper.reap_roots(&roots)?
        }
    };
    let text = if args.json {
        sandkeeper_engine::json::reap(&report)
    } else {
        render::reap::summary(&report, printer.verbose())
    };
    // Why entries are `unknown` first: that is where the reader looks.
    for warning in render::scan::warnings(&report.scan) {
        printer.warning(&warning);
    }
    if printer.data(&text).is_err() {
        return Ok(exit_codes::SUCCESS);
    }
    Ok(if report.has_errors() {
        exit_codes::PARTIAL
    } else {
        exit_codes::SUCCESS
    })
}

/// `reap` with a config file: each root as one cycle of `watch` would
/// reap it (under pressure when above its high watermark), merged into
/// one report.
///
/// # Errors
///
/// A configured root that does not exist (checked before anything is
/// removed): exit status 2.
///
/// `records`: whether the reports keep a record per entry (see
/// [`ReapOptions::records`]).
pub fn reap_configured(
    config: &Config,
    args: &ReapArgs,
    records: bool,
    printer: &Printer,
) -> Result<ReapReport, CliError> {
    let source = config
        .source
        .as_ref()
        .map_or_else(|| "the defaults".to_owned(), |p| p.display().to_string());
    // Every configured root is opened before anything is removed; the
    // reaps then use these descriptors, never the paths again.
    let opened = watch::open_roots(config).map_err(|(i, e)| {
        let mut err = CliError::usage(format!(
            "root {} (from {source}) cannot be used: {e}",
            sanitize(config.roots[i].path.as_os_str().as_bytes())
        ));
        err.hint = Some(
            e.hint()
                .unwrap_or("create it, or remove it from the config file")
                .to_owned(),
        );
        err
    })?;
    let mut opts = args.rules.inuse.options(Some(config))?;
    opts.dry_run = args.dry_run;
    opts.records = records;
    let mut merged: Option<ReapReport> = None;
    for (root, open) in config.roots.iter().zip(opened) {
        let outcome = watch::reap_root(root, open, &opts, Mode::Cycle, &mut |event| {
            if let WatchEvent::PressureStarted {
                root,
                level,
                pressure,
            } = event
            {
                printer.note(&render::watch::pressure_started(root, &level, &pressure));
            }
        });
        if let Some((_, e)) = outcome.failures.into_iter().next() {
            let mut err = CliError::from(e);
            let removed_any = merged
                .iter()
                .chain(&outcome.reports)
                .any(|r| r.roots.iter().any(|root| root.counts.removed > 0));
            if removed_any && !args.dry_run {
                // Something was changed: never claim otherwise.
                err.status = exit_codes::PARTIAL;
            }
            return Err(err);
        }
        for report in outcome.reports {
            match &mut merged {
                None => merged = Some(report),
                Some(m) => m.merge(report),
            }
        }
    }
    merged.ok_or_else(|| CliError::usage("the config names no root"))
}

/// The config `reap` uses: `--config FILE`; or, when no root or rule is
/// given on the command line, a default config file if one exists.
///
/// # Errors
///
/// `--config` together with roots or rules; a bad config file.
pub fn config_for_reap(args: &ReapArgs) -> Result<Option<Config>, CliError> {
    let mut given = Vec::new();
    if !args.roots.is_empty() {
        given.push("ROOT");
    }
    given.extend(args.rules.given.iter().copied());
    match (&args.config, given.is_empty()) {
        (Some(_), false) => {
            let mut err = CliError::usage(format!(
                "--config cannot be combined with {}: the config file gives the roots and rules",
                given.join(", ")
            ));
            err.hint = Some("drop --config to reap by the command line's rules".into());
            Err(err)
        }
        (Some(path), true) => load_config(Some(path)).map(Some),
        (None, false) => Ok(None),
        (None, true) => match config::locate(None) {
            Some(path) => config::load(&path).map(Some).map_err(config_error),
            None => Ok(None),
        },
    }
}
