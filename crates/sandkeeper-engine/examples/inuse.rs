//! Lists what holds anything under a directory: the `inuse` index plus a
//! plain walk of the directory, the way `sandkeeper scan` uses them.
//!
//! ```text
//! cargo run --release --example inuse -- [--collect-only] [--repeat N] [--threads N] [--ignore-pid PID]... DIR
//! ```
//!
//! Prints one line per holder (`HOLD <pid> <how> <path>`), per kernel user
//! and per bound socket, then `PIDS` with the holder pids (sorted), and the
//! timings on stderr. Exits 2 when the index is incomplete.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use sandkeeper_engine::inuse::InUseOptions;

fn main() -> ExitCode {
    let mut options = InUseOptions::new();
    let mut collect_only = false;
    let mut repeat = 1usize;
    let mut dir = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--collect-only") => collect_only = true,
            Some("--threads") => {
                let n = args.next().and_then(|n| n.to_str()?.parse().ok());
                options.threads(n.expect("--threads takes a count"));
            }
            Some("--repeat") => {
                let n = args.next().and_then(|n| n.to_str()?.parse().ok());
                repeat = n.expect("--repeat takes a count");
            }
            Some("--ignore-pid") => {
                let pid = args.next().and_then(|p| p.to_str()?.parse().ok());
                options.ignore_pid(pid.expect("--ignore-pid takes a pid"));
            }
            _ => dir = Some(PathBuf::from(arg)),
        }
    }

    // With --repeat, report the median of that many collections.
    let mut times = Vec::new();
    let mut index = None;
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        match options.collect() {
            Ok(i) => index = Some(i),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let index = index.expect("collected at least once");
    eprintln!(
        "collect: {:.3} ms ({} processes, {} kernel users, {} sockets)",
        times[times.len() / 2],
        index.process_count(),
        index.kernel_users().len(),
        index.socket_paths().len(),
    );

    let mut pids = BTreeSet::new();
    if let (Some(dir), false) = (dir, collect_only) {
        let start = Instant::now();
        let mut inodes = 0u64;
        let mut lines = Vec::new();
        let entries = std::fs::read_dir(&dir).expect("read directory");
        for entry in entries.map_while(Result::ok) {
            let entry = entry.path();
            walk(&entry, &mut |path, meta| {
                inodes += 1;
                for holder in index.holders(meta.dev(), meta.ino()) {
                    pids.insert(holder.pid);
                    lines.push(format!("HOLD {holder} {}", path.display()));
                }
                for user in index.kernel_users_of(meta.dev(), meta.ino()) {
                    lines.push(format!("KERNEL {user} {}", path.display()));
                }
            });
            for user in index.kernel_users_under(&entry) {
                lines.push(format!("KERNEL {user} {}", user.path.display()));
            }
            for socket in index.socket_paths_under(&entry) {
                lines.push(format!("SOCKET {}", socket.display()));
            }
        }
        eprintln!(
            "walk: {:.3} ms ({inodes} inodes)",
            start.elapsed().as_secs_f64() * 1e3
        );
        lines.sort();
        lines.dedup();
        for line in lines {
            println!("{line}");
        }
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        println!("PIDS {}", pids.join(" "));
    }
    for p in index.uninspectable() {
        eprintln!("uninspectable: {p}");
    }
    for p in index.assumed() {
        eprintln!("assumed to hold nothing: {p}");
    }
    for b in index.blind_spots() {
        eprintln!("blind spot: {b}");
    }
    if index.is_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

/// Visits `path` and everything under it without following symlinks or
/// crossing into other filesystems.
fn walk(path: &Path, visit: &mut dyn FnMut(&Path, &std::fs::Metadata)) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    visit(path, &meta);
    let mut stack = vec![(path.to_owned(), meta.dev())];
    while let Some((dir, dev)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.map_while(Result::ok) {
            let child = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&child) else {
                continue;
            };
            visit(&child, &meta);
            if meta.is_dir() && meta.dev() == dev {
                stack.push((child, dev));
            }
        }
    }
}
