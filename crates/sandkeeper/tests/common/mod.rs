//! Shared test support: helper processes and privilege checks.
//!
//! A helper process is this same test binary re-run with the ignored test
//! `child_main` selected and `SK_CHILD` naming what to do. Each test binary
//! that uses helpers defines:
//!
//! ```ignore
//! #[test]
//! #[ignore = "helper process entry point, run by other tests"]
//! fn child_main() { common::child_main() }
//! ```
#![allow(dead_code)] // each test binary uses a different part

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

use sandkeeper::{Builder, Sandbox, WhenHeld};

#[allow(unused_imports)] // each test binary uses a different part
pub use sandkeeper_testkit::{
    in_namespace, require_root, run_in_pid_namespace, spawn_ready, Spawned,
};

/// A helper process, killed (SIGKILL) and reaped when dropped.
pub struct Helper {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Helper {
    /// Starts this test binary as a helper doing `mode`, with `env` set.
    pub fn start(mode: &str, env: &[(&str, &str)]) -> Helper {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new(exe);
        cmd.args([
            "--ignored",
            "--exact",
            "child_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SK_CHILD", mode)
        .env_remove("SANDKEEPER_KEEP")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn helper process");
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Helper { child, lines }
    }

    /// The helper's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The payload of the next stdout line that starts with `key ` (the
    /// helper's protocol), waiting up to 30 s.
    pub fn expect(&self, key: &str) -> String {
        let prefix = format!("{key} ");
        loop {
            match self.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    // libtest prints `test child_main ... ` before our line.
                    if let Some(at) = line.find(&prefix) {
                        return line[at + prefix.len()..].to_owned();
                    }
                }
                Err(e) => panic!("helper {} said no {key:?} line: {e}", self.pid()),
            }
        }
    }

    /// The path from the helper's `READY <path>` line.
    pub fn ready_path(&self) -> PathBuf {
        PathBuf::from(self.expect("READY"))
    }

    /// SIGKILLs the helper and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the helper to exit by itself; returns whether it exited
    /// successfully and its stderr.
    pub fn wait(mut self) -> (bool, String) {
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut stderr);
        }
        let status = self.child.wait().expect("wait for helper");
        (status.success(), stderr)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The helper side: does what `SK_CHILD` says, printing protocol lines.
pub fn child_main() {
    let Ok(mode) = std::env::var("SK_CHILD") else {
        return;
    };
    let var = |name: &str| std::env::var(name).ok();
    let builder = || {
        let mut b = Builder::new();
        if let Some(root) = var("SK_ROOT") {
            b.root(root);
        }
        if let Some(tag) = var("SK_TAG") {
            b.tag(tag);
        }
        if let Some(checkout) = var("SK_CHECKOUT") {
            b.keyed(true)
                .checkout(checkout)
                .when_held(WhenHeld::NextSlot);
        }
        b
    };
    match mode.as_str() {
        // Create a sandbox, say where, and live until killed.
        "create" => match builder().create() {
            Ok(sandbox) => {
                println!("READY {}", sandbox.path().display());
                std::thread::sleep(Duration::from_secs(600));
                drop(sandbox);
            }
            Err(e) => println!("ERR {:?} {e}", e.kind()),
        },
        // A process-lifetime sandbox in a static; then exit normally, or
        // (with SK_SLEEP) live until killed.
        "static" => {
            static SHARED: OnceLock<Sandbox> = OnceLock::new();
            let sandbox = SHARED.get_or_init(|| {
                builder()
                    .process_lifetime(true)
                    .create()
                    .expect("create static sandbox")
            });
            std::fs::write(sandbox.path().join("state"), b"x").unwrap();
            println!("READY {}", sandbox.path().display());
            if var("SK_SLEEP").is_some() {
                std::thread::sleep(Duration::from_secs(600));
            }
        }
        // Take a shared hold on someone else's sandbox and live.
        "hold" => {
            let path = PathBuf::from(var("SK_PATH").unwrap());
            let hold = sandkeeper::lease::hold(&path).expect("hold");
            println!("READY {}", path.display());
            std::thread::sleep(Duration::from_secs(600));
            drop(hold);
        }
        // Probe a path and say what was found, holding a claim for a while.
        "probe" => {
            let path = PathBuf::from(var("SK_PATH").unwrap());
            let word = match sandkeeper::lease::probe(&path) {
                Ok(sandkeeper::lease::Probe::Live { .. }) => "live".to_owned(),
                Ok(sandkeeper::lease::Probe::Free(claim)) => {
                    println!("PROBE free");
                    std::thread::sleep(Duration::from_secs(600));
                    drop(claim);
                    return;
                }
                Ok(other) => format!("other {other:?}"),
                Err(e) => format!("error {e}"),
            };
            println!("PROBE {word}");
        }
        // A test that panics with a sandbox!() alive.
        "panic" => {
            let sandbox = sandkeeper::sandbox!().expect("sandbox");
            std::fs::write(sandbox.path().join("evidence"), b"x").unwrap();
            println!("READY {}", sandbox.path().display());
            panic!("test failure with a sandbox alive");
        }
        // Create with a relative root, then change directory before drop.
        "relative" => {
            let base = PathBuf::from(var("SK_ROOT").unwrap());
            std::env::set_current_dir(&base).unwrap();
            let sandbox = Builder::new().root(".").create().unwrap();
            println!("READY {}", sandbox.path().display());
            std::env::set_current_dir("/").unwrap();
            drop(sandbox);
            println!("DONE ok");
        }
        // Chaos creator: make sandboxes (managed) and `app-*` directories
        // (unmanaged, held open while used), fill them, check they stay
        // intact while in use, drop them; exit 3 on a violation.
        "chaos" => chaos_creator(
            PathBuf::from(var("SK_ROOT").unwrap()),
            var("SK_SEED").unwrap().parse().unwrap(),
            var("SK_ROUNDS").unwrap().parse().unwrap(),
        ),
        other => panic!("unknown SK_CHILD mode {other:?}"),
    }
}

/// Whether `pid` exists (signal 0).
pub fn pid_exists(pid: u32) -> bool {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::test_kill_process(pid).is_ok()
}

/// Lists a directory's entry names, sorted, without the lease record (the
/// test's own sandbox carries one).
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != sandkeeper::lease::LEASE_FILE)
        .collect();
    names.sort();
    names
}

/// The chaos creator's loop (see the `chaos` mode).
fn chaos_creator(root: PathBuf, seed: u64, rounds: u32) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let pid = std::process::id();
    println!("\nREADY {}", root.display());
    for round in 0..rounds {
        let files: Vec<(String, Vec<u8>)> = (0..rng.usize(1..6))
            .map(|i| (format!("f{i}"), vec![rng.u8(..); rng.usize(1..4096)]))
            .collect();
        let managed = rng.bool();
        // Unmanaged: a plain directory kept in use through an open file.
        let (dir, guard): (PathBuf, Box<dyn std::any::Any>) = if managed {
            let sandbox = Builder::new()
                .root(&root)
                .tag("chaos")
                .create()
                .expect("create sandbox");
            (sandbox.path().to_owned(), Box::new(sandbox))
        } else {
            let dir = root.join(format!("app-{pid}-{round}"));
            std::fs::create_dir(&dir).expect("mkdir");
            std::fs::write(dir.join("held"), b"held").unwrap();
            let held = std::fs::File::open(dir.join("held")).unwrap();
            (dir, Box::new(held))
        };
        for (name, data) in &files {
            std::fs::write(dir.join(name), data).unwrap();
        }
        for _ in 0..rng.u32(1..4) {
            std::thread::sleep(Duration::from_millis(rng.u64(1..30)));
            for (name, data) in &files {
                match std::fs::read(dir.join(name)) {
                    Ok(got) if &got == data => {}
                    other => {
                        println!(
                            "\nVIOLATION {} {name}: {:?}",
                            dir.display(),
                            other.map(|g| g.len())
                        );
                        std::process::exit(3);
                    }
                }
            }
        }
        drop(guard);
        if !managed {
            // Once no longer held it is fair game: a reaper may beat us to it.
            match sandkeeper::remove::remove_path(&dir, &sandkeeper::remove::RemoveOptions::new()) {
                Ok(_) => {}
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) => {}
                Err(e) => panic!("remove own directory {}: {e}", dir.display()),
            }
        }
    }
    println!("\nDONE {rounds}");
}
