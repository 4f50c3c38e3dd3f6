//! Disk usage of each entry of a directory, like `du -xB1 --max-depth=1`.
//!
//! ```text
//! cargo run --release --example usage -- [--threads N] [--apparent] [--quiet] DIR
//! ```
//!
//! Measures every entry of `DIR` with `walk::usage_many` (two threads by
//! default), in directory order so that hard links are attributed as `du`
//! attributes them, and prints one `BYTES<TAB>PATH` line per directory
//! entry and a last line for `DIR` itself, as `du` does. `--quiet` prints
//! only the total (for benchmarks).

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

use sandkeeper_engine::walk::{self, WalkState};

fn main() -> ExitCode {
    let mut threads = 2;
    let mut apparent = false;
    let mut quiet = false;
    let mut dir = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--threads") => match args.next().and_then(|n| n.to_str()?.parse().ok()) {
                Some(n) => threads = n,
                None => return usage_error("--threads needs a number"),
            },
            Some("--apparent") => apparent = true,
            Some("--quiet") => quiet = true,
            Some(flag) if flag.starts_with("--") => {
                return usage_error(&format!("unknown flag {flag:?}"))
            }
            _ => dir = Some(PathBuf::from(arg)),
        }
    }
    let Some(dir) = dir else {
        return usage_error("which directory?");
    };

    let names: Vec<OsString> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.filter_map(|e| Some(e.ok()?.file_name())).collect(),
        Err(e) => {
            eprintln!("error: cannot list {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    let parent = match std::fs::File::open(&dir) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: cannot open {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    // The directory itself: its own blocks, like du's last line.
    let own = match walk::usage_at(
        parent.as_fd(),
        ".".as_ref(),
        &mut walk::HardLinks::new(),
        &mut |_| WalkState::Skip,
    ) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let results = walk::usage_many(parent.as_fd(), &names, threads, &|_, _| WalkState::Continue);

    let bytes = |u: &walk::Usage| {
        if apparent {
            u.apparent_bytes
        } else {
            u.disk_bytes
        }
    };
    let mut total = bytes(&own);
    let mut failed = false;
    for (name, result) in names.iter().zip(&results) {
        match result {
            Ok(u) => {
                total += bytes(u);
                for e in &u.errors {
                    eprintln!("warning: {}: {e}", dir.join(name).display());
                }
                // Like du without -a: directories only.
                if !quiet && u.dirs > 0 {
                    println!("{}\t{}", bytes(u), dir.join(name).display());
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                failed = true;
            }
        }
    }
    println!("{total}\t{}", dir.display());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    eprintln!("usage: usage [--threads N] [--apparent] [--quiet] DIR");
    ExitCode::from(2)
}
