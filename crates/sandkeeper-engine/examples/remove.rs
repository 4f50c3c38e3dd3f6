//! Removes the given paths with sandkeeper's confined remover, like
//! `rm -rf`, and says what it did on stderr. Used by `bench/remove/run.sh`.
//!
//! ```text
//! cargo run --release --example remove -- [--threads N] [--bytes] PATH...
//! ```
//!
//! Exits 1 when a path could not be removed completely.

use std::path::Path;
use std::process::ExitCode;

use sandkeeper_engine::remove::{remove_path, RemoveOptions};

fn main() -> ExitCode {
    let mut options = RemoveOptions::new();
    let mut args = std::env::args_os().skip(1).peekable();
    loop {
        match args.peek().and_then(|a| a.to_str()) {
            Some("--threads") => {
                args.next();
                let threads = args
                    .next()
                    .and_then(|n| n.to_str()?.parse().ok())
                    .unwrap_or(0);
                options.threads(threads);
            }
            Some("--bytes") => {
                args.next();
                options.count_bytes(true);
            }
            _ => break,
        }
    }
    let mut ok = true;
    for path in args {
        let path = Path::new(&path);
        match remove_path(path, &options) {
            Ok(report) => {
                let removed = report.removed();
                let bytes = removed
                    .bytes()
                    .map_or_else(String::new, |b| format!(", {b} bytes"));
                eprintln!(
                    "{}: {} files, {} dirs{bytes} removed",
                    path.display(),
                    removed.files(),
                    removed.dirs(),
                );
                for left in report.left() {
                    eprintln!("  left {}", left.path().display());
                    eprintln!("    {}", left.reason());
                    ok = false;
                }
            }
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
