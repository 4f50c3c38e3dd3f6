//! `sandkeeper run --nextest`: `run` as cargo-nextest's wrapper script
//! (docs/nextest.md).
//!
//! Two things differ from a plain `run --report-dir DIR`:
//!
//! - **Where the records go.** nextest starts each test in its package's
//!   directory and tells a wrapper nothing of the target directory, so a
//!   relative `DIR` (`target/sandkeeper-leaks`) only worked for a single
//!   crate with its target directory in place. Here the directory is
//!   `--report-dir DIR` when given, else `sandkeeper-leaks` in the target
//!   directory: `$CARGO_TARGET_DIR` when it is absolute, else the one the
//!   test binary was built in ([`target_dir_of`]).
//! - **What a problem of sandkeeper's own does.** nextest counts whatever
//!   status its wrapper exits with as the test's. A record directory that
//!   cannot be found, made or trusted, a record that cannot be written, a
//!   run directory that cannot be made, even a bad option: each is said in
//!   one warning on stderr, and the test runs (or has run) and keeps its own
//!   status. A wrapper problem is never a failed test, and never hides one.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::error::CliError;
use crate::exit_codes::ExitStatus;
use crate::printer::Printer;
use crate::render::escape::Untrusted;

/// The directory's name in the target directory.
pub const RECORD_DIR_NAME: &str = "sandkeeper-leaks";

/// The first line of a cache directory tag (<https://bford.info/cachedir/>),
/// which cargo writes at the top of every target directory.
const CACHEDIR_SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";

/// Where `run --nextest` writes records when no `--report-dir` is given:
/// `$CARGO_TARGET_DIR/sandkeeper-leaks` when that variable is an absolute
/// path (cargo resolves a relative one against the directory it was
/// started in, which a wrapper does not know), else `sandkeeper-leaks` in
/// the target directory the test binary `program` was built in.
///
/// # Errors
///
/// Why neither says a directory, for the warning.
pub fn record_dir(program: &OsStr) -> Result<PathBuf, String> {
    let from_env = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from);
    if let Some(dir) = from_env.filter(|d| d.is_absolute()) {
        return Ok(dir.join(RECORD_DIR_NAME));
    }
    let program = Path::new(program);
    let absolute = std::path::absolute(program).unwrap_or_else(|_| program.to_owned());
    target_dir_of(&absolute)
        .map(|dir| dir.join(RECORD_DIR_NAME))
        .ok_or_else(|| {
            format!(
                "cannot tell the cargo target directory of {} (no cargo CACHEDIR.TAG in a directory above it) and CARGO_TARGET_DIR is not an absolute path; give --report-dir DIR",
                Untrusted::path(program)
            )
        })
}

/// The cargo target directory a binary was built in: the nearest directory
/// above it holding cargo's `CACHEDIR.TAG`, or that directory's parent when
/// it holds one too (cargo tags both `target/` and `target/<triple>/`, where
/// a `--target` build puts its tests). `None` when no directory above it is
/// tagged (a binary outside any target directory, a target directory
/// unpacked from an archive).
///
/// A tag counts only when it is a regular file of the caller's, starting
/// with the tag's signature, opened without following a link or blocking:
/// a file another user left in `/tmp` says nothing of where this user's
/// records go.
pub fn target_dir_of(binary: &Path) -> Option<PathBuf> {
    let tagged = binary.ancestors().skip(1).find(|dir| is_tagged(dir))?;
    match tagged.parent() {
        Some(parent) if is_tagged(parent) => Some(parent.to_owned()),
        _ => Some(tagged.to_owned()),
    }
}

/// Whether `dir` holds a cache directory tag of the caller's.
fn is_tagged(dir: &Path) -> bool {
    if dir.as_os_str().is_empty() {
        return false;
    }
    let Ok(fd) = rustix::fs::open(
        dir.join("CACHEDIR.TAG"),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(&fd) else {
        return false;
    };
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile
        || stat.st_uid != rustix::process::geteuid().as_raw()
    {
        return false;
    }
    let mut head = [0u8; CACHEDIR_SIGNATURE.len()];
    let mut read = 0;
    while read < head.len() {
        match rustix::io::read(&fd, &mut head[read..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    head[..read] == *CACHEDIR_SIGNATURE
}

/// A problem of sandkeeper's own under `--nextest`, as one warning line:
/// what was missed, the error, its causes and hint.
pub fn warn(printer: &Printer, missed: &str, err: &CliError) {
    let mut line = format!("sandkeeper run --nextest: {missed}: {}", err.message);
    for cause in &err.causes {
        line.push_str(": ");
        line.push_str(cause);
    }
    if let Some(hint) = &err.hint {
        line.push_str(" (");
        line.push_str(hint);
        line.push(')');
    }
    printer.warning(&line);
}

/// Runs `command` as it is, in place of sandkeeper (`exec`): the test, when
/// sandkeeper cannot wrap it. Returns only when it cannot be started: 127
/// when it does not exist, 126 when it cannot be executed, 2 otherwise.
pub fn exec_plainly(command: &[OsString], printer: &Printer) -> ExitStatus {
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    let status = match err.kind() {
        std::io::ErrorKind::NotFound => 127,
        std::io::ErrorKind::PermissionDenied => 126,
        _ => 2,
    };
    printer.error(&CliError {
        message: format!("cannot run {}: {err}", Untrusted::os(&command[0])),
        causes: Vec::new(),
        hint: None,
        status: ExitStatus(status),
    });
    ExitStatus(status)
}

/// For a command line clap refused: when it is `sandkeeper … run …
/// --nextest … -- CMD…`, the command after the first `--` (run as it is,
/// with a warning, rather than failing the test with a usage error).
pub fn command_after_usage_error(args: &[OsString]) -> Option<&[OsString]> {
    let dash = args.iter().position(|a| a == "--")?;
    let before = args.get(1..dash)?;
    let command = &args[dash + 1..];
    (before.iter().any(|a| a == "run")
        && before.iter().any(|a| a == "--nextest")
        && !command.is_empty())
    .then_some(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("CACHEDIR.TAG"),
            b"Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by cargo.\n",
        )
        .unwrap();
    }

    #[test]
    fn the_target_directory_of_a_test_binary() {
        let scratch = sandkeeper_engine::Sandbox::new().unwrap();
        let target = scratch.path().join("proj/target");
        tag(&target);
        let bin = target.join("debug/deps/proj-0123");
        assert_eq!(target_dir_of(&bin), Some(target.clone()));
        // A --target build: target/<triple>/ is tagged too.
        tag(&target.join("x86_64-unknown-linux-gnu"));
        let bin = target.join("x86_64-unknown-linux-gnu/debug/deps/proj-0123");
        assert_eq!(target_dir_of(&bin), Some(target.clone()));
        // No tag above it: nothing is guessed.
        let elsewhere = scratch.path().join("elsewhere/debug/deps/proj-0123");
        assert_eq!(target_dir_of(&elsewhere), None);
        // A tag that is not one (wrong signature, a symlink, a FIFO) is none.
        let fake = scratch.path().join("fake");
        std::fs::create_dir(&fake).unwrap();
        std::fs::write(fake.join("CACHEDIR.TAG"), b"Signature: nope").unwrap();
        assert_eq!(target_dir_of(&fake.join("debug/deps/x")), None);
        let linked = scratch.path().join("linked");
        std::fs::create_dir(&linked).unwrap();
        std::os::unix::fs::symlink(target.join("CACHEDIR.TAG"), linked.join("CACHEDIR.TAG"))
            .unwrap();
        assert_eq!(target_dir_of(&linked.join("debug/deps/x")), None);
        let fifo = scratch.path().join("fifo");
        std::fs::create_dir(&fifo).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            fifo.join("CACHEDIR.TAG"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(target_dir_of(&fifo.join("debug/deps/x")), None);
    }

    #[test]
    fn usage_errors_under_nextest_still_name_the_command() {
        let args = |s: &[&str]| s.iter().map(OsString::from).collect::<Vec<_>>();
        let line = args(&[
            "sandkeeper",
            "run",
            "--nextest",
            "--bogus",
            "--",
            "/t/bin",
            "--exact",
        ]);
        assert_eq!(
            command_after_usage_error(&line),
            Some(&args(&["/t/bin", "--exact"])[..])
        );
        for no in [
            &["sandkeeper", "run", "--bogus", "--", "/t/bin"][..],
            &["sandkeeper", "run", "--nextest", "--"],
            &["sandkeeper", "run", "--nextest", "/t/bin"],
            &["sandkeeper", "report", "--nextest", "--", "x"],
        ] {
            assert_eq!(command_after_usage_error(&args(no)), None, "{no:?}");
        }
    }
}
