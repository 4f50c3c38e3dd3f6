//! Test support for `tests/inuse.rs`: helper processes, private pid
//! namespaces, and guards for mounts and loop devices.
//!
//! Copied in spirit from `tests/common/mod.rs` (helpers are this same test
//! binary re-run with the ignored test `child_main` and `SK_INUSE_CHILD`
//! naming what to do), plus what only the in-use tests need.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The environment variable that tells a helper process what to do.
pub const CHILD_ENV: &str = "SK_INUSE_CHILD";

/// Set for tests re-run inside a private pid namespace.
pub const IN_NS_ENV: &str = "SK_INUSE_IN_NS";

/// How long anything a test waits for may take.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub use sandkeeper_testkit::require_root;

/// Whether this process is the re-run of `test` inside its private pid
/// namespace. Elsewhere (a plain `cargo test -- --ignored`) says so and
/// returns `false`.
pub fn in_private_namespace(test: &str) -> bool {
    if std::env::var_os(IN_NS_ENV).is_none() {
        eprintln!("skipping {test}: runs only inside the pid namespace its outer test sets up");
        return false;
    }
    assert_eq!(
        std::process::id(),
        1,
        "{test}: expected to be pid 1 of a new pid namespace"
    );
    true
}

/// Runs the ignored test `inner` of this test binary as pid 1 of a new pid
/// and mount namespace (`unshare --pid --fork --mount-proc`), where no
/// process outside the test is visible, and fails if it fails.
///
/// The inner run trusts its pid namespace (`SANDKEEPER_TRUST_PID_NAMESPACE=1`).
/// Everything the inner test starts dies with the namespace
/// (`--kill-child` kills it should this process die first); its mounts die
/// with its private mount namespace.
pub fn run_in_private_namespace(inner: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    let mut child = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "--propagation",
            "private",
        ])
        .arg(exe)
        .args([
            "--ignored",
            "--exact",
            inner,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(IN_NS_ENV, "1")
        // The namespace is the test's own: trust it (issue 10, 5(a)).
        .env(sandkeeper_testkit::TRUST_PID_NAMESPACE_ENV, "1")
        .env_remove(CHILD_ENV)
        .env_remove("SANDKEEPER_KEEP")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run unshare (util-linux)");
    let output = wait_with_deadline(&mut child, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{inner} in a private pid namespace: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    print!("{stdout}");
    eprint!("{stderr}");
}

/// Waits for `child` and collects its output, killing it after `limit`.
pub fn wait_with_deadline(child: &mut Child, limit: Duration) -> Output {
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let status = child.wait().expect("wait for killed child");
            eprintln!("killed pid {} after {limit:?}", child.id());
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// A helper process, killed (SIGKILL) and reaped when dropped.
pub struct Helper {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Helper {
    /// Starts this test binary as a helper doing `mode`, with `env` set.
    pub fn start(mode: &str, env: &[(&str, &str)]) -> Helper {
        Helper::start_via(&[], mode, env)
    }

    /// Starts this test binary as a helper doing `mode`, run through the
    /// command `wrapper` (such as `unshare --mount`), which must `exec` it.
    pub fn start_via(wrapper: &[&str], mode: &str, env: &[(&str, &str)]) -> Helper {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(exe);
                cmd
            }
            None => Command::new(exe),
        };
        cmd.args([
            "--ignored",
            "--exact",
            "child_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .env_remove(IN_NS_ENV);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Helper::spawn(cmd)
    }

    /// Starts any command as a helper.
    pub fn spawn(mut cmd: Command) -> Helper {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn helper process");
        let stdout = child.stdout.take().expect("piped stdout");
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

    /// The payload of the next stdout line containing `key ` (the helper's
    /// protocol; libtest may print `test child_main ... ` before it).
    pub fn expect(&self, key: &str) -> String {
        let prefix = format!("{key} ");
        let start = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(start.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(&prefix) {
                        return line[at + prefix.len()..].to_owned();
                    }
                }
                Err(e) => panic!("helper {} said no {key:?} line: {e}", self.pid()),
            }
        }
    }

    /// SIGKILLs the helper and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the helper to exit by itself (up to the deadline) and
    /// returns whether it succeeded and its stdout lines.
    pub fn wait(mut self) -> (bool, Vec<String>) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for helper") {
                break status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "helper {} did not exit",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let lines = self.lines.try_iter().collect();
        (status.success(), lines)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `check` every 10 ms until it is true, failing after the deadline.
pub fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A mount, detached when dropped.
pub struct Mounted(pub PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH) {
            eprintln!("cannot unmount {}: {e}", self.0.display());
        }
    }
}

/// A loop device, detached when dropped.
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub device: PathBuf,
}

impl LoopDevice {
    /// `losetup --find --show file`; `Err` with the reason when no loop
    /// device can be set up here.
    pub fn attach(file: &Path) -> Result<LoopDevice, String> {
        let output = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run losetup: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let device = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        Ok(LoopDevice {
            device: PathBuf::from(device),
        })
    }

    /// `loop0` for `/dev/loop0`.
    pub fn name(&self) -> String {
        self.device
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let status = Command::new("losetup")
            .arg("--detach")
            .arg(&self.device)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("cannot detach {}: {status:?}", self.device.display());
        }
    }
}

/// `(st_dev, st_ino)` of `path`, not following a final symlink.
pub fn inode(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let meta =
        std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    (meta.dev(), meta.ino())
}
