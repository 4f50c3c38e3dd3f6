//! Child processes a test starts, always killed and reaped on drop,
//! waits bounded by a deadline, and external checkers run on a test's
//! output ([`promtool_check`]).
//!
//! A [`Helper`] is the calling test binary re-run with its ignored test
//! `child_main` selected and [`CHILD_ENV`] naming what to do. Each test
//! binary that starts helpers defines the entry point, such as:
//!
//! ```ignore
//! #[test]
//! #[ignore = "helper process entry point, run by other tests"]
//! fn child_main() {
//!     sandkeeper_testkit::child::main()
//! }
//! ```
//!
//! or its own `match` on [`child_mode`].

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Set in a test binary re-run inside a private PID namespace
/// (`namespace::run_in_pid_namespace`); a helper started from there does
/// not inherit it.
pub const IN_NAMESPACE_ENV: &str = "SK_IN_NAMESPACE";

/// The environment variable that tells a helper process what to do.
pub const CHILD_ENV: &str = "SK_CHILD";

/// How long anything a test waits for (a helper's line, its exit, a
/// condition) may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The mode this process was started in as a [`Helper`], if it is one.
pub fn child_mode() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// A helper process, killed (SIGKILL) and reaped when dropped. Its stdout
/// is read line by line (the helper's protocol: `KEY payload`); its stderr
/// is collected for [`Helper::wait`].
pub struct Helper {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

/// How a [`Helper`] ended, from [`Helper::wait`].
#[derive(Debug)]
pub struct Exit {
    /// Whether it exited successfully.
    pub success: bool,
    /// How it ended (a signal's number: `std::os::unix::process::ExitStatusExt`).
    pub status: std::process::ExitStatus,
    /// Its stdout lines not yet taken by [`Helper::expect`].
    pub stdout: Vec<String>,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

impl Helper {
    /// Starts this test binary as a helper doing `mode`, with `env` set.
    pub fn start(mode: &str, env: &[(&str, &str)]) -> Helper {
        Helper::start_via(&[], mode, env)
    }

    /// Starts this test binary as a helper doing `mode`, run through the
    /// command `wrapper` (such as `unshare --mount`), which must `exec` it.
    pub fn start_via(wrapper: &[&str], mode: &str, env: &[(&str, &str)]) -> Helper {
        let mut cmd = test_command(wrapper, "child_main");
        cmd.env(CHILD_ENV, mode)
            .env_remove(IN_NAMESPACE_ENV)
            .env_remove("SANDKEEPER_KEEP");
        for (k, v) in env {
            cmd.env(k, v);
        }
        Helper::spawn(cmd)
    }

    /// Starts any command as a helper.
    pub fn spawn(mut cmd: Command) -> Helper {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn helper process");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (err_tx, err_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            let _ = err_tx.send(text);
        });
        Helper {
            child,
            lines,
            stderr: err_rx,
        }
    }

    /// The helper's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The payload of the next stdout line containing `key ` (the helper's
    /// protocol; libtest may print `test child_main ... ` before it),
    /// waiting up to the [`DEADLINE`].
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

    /// The helper's stdout lines up to the next one containing `token`
    /// (included), each waited for up to the [`DEADLINE`].
    pub fn lines_until(&self, token: &str) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(DEADLINE)
                .unwrap_or_else(|e| panic!("helper {} said no {token:?}: {e}", self.pid()));
            let done = line.contains(token);
            lines.push(line);
            if done {
                return lines;
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

    /// Waits for the helper to exit by itself (failing after the
    /// [`DEADLINE`]), then collects the rest of its output.
    pub fn wait(mut self) -> Exit {
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
        let mut stdout = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(DEADLINE.saturating_sub(start.elapsed()))
        {
            stdout.push(line);
        }
        let stderr = self
            .stderr
            .recv_timeout(DEADLINE.saturating_sub(start.elapsed()))
            .unwrap_or_default();
        Exit {
            success: status.success(),
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.kill();
    }
}

/// This test binary, set to run only its (usually ignored) test `test`
/// with output not captured and no standard input, through `wrapper` (a
/// command that `exec`s its arguments, such as [`SETPRIV_NOBODY`]; empty
/// for none).
///
/// [`SETPRIV_NOBODY`]: crate::privilege::SETPRIV_NOBODY
pub fn test_command(wrapper: &[&str], test: &str) -> Command {
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
        test,
        "--nocapture",
        "--test-threads=1",
    ])
    .stdin(Stdio::null());
    cmd
}

/// A child process, killed and reaped when dropped.
pub struct Spawned(pub Child);

impl Spawned {
    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` and waits for it to print a line containing `ready`.
pub fn spawn_ready(cmd: &mut Command) -> Spawned {
    let mut child = Spawned(cmd.stdout(Stdio::piped()).spawn().expect("spawn holder"));
    let mut line = String::new();
    BufReader::new(child.0.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the holder's first line");
    assert!(line.contains("ready"), "holder said {line:?}");
    child
}

/// Waits for `child` (stdout and stderr piped) and collects its output,
/// killing it after `limit`.
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

/// Polls `check` every 10 ms until it is true, failing after the
/// [`DEADLINE`].
pub fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `f` on another thread and fails the test if it takes longer than
/// `limit` (a remover that opened a FIFO would block forever).
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|e| panic!("did not finish within {limit:?}: {e}"))
}

/// Whether `pid` exists (signal 0).
pub fn pid_exists(pid: u32) -> bool {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::test_kill_process(pid).is_ok()
}

/// Whether `pid` is running and not a zombie (a dead process reparented
/// to a test that is PID 1 of its namespace stays a zombie until reaped).
pub fn alive(pid: u32) -> bool {
    pid_exists(pid)
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
}

/// Open descriptors of this process right now.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// A stop flag for a test's helper threads, raised when dropped: a test
/// that fails half-way stops its attackers too.
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A flag not yet raised.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Stop {
        Stop(Arc::new(AtomicBool::new(false)))
    }

    /// The flag, for a helper thread to poll.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }

    /// Raises the flag.
    pub fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        self.raise();
    }
}
