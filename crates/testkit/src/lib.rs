//! Test support shared by sandkeeper's test suites: privilege checks,
//! private PID namespaces, helper processes and mounts that are always
//! undone. Not published; only the workspace's tests use it.
#![deny(missing_docs)]

pub mod fuzz;

use std::ffi::CString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

/// Set in a test binary re-run inside a private PID namespace.
pub const IN_NAMESPACE_ENV: &str = "SK_IN_NAMESPACE";

/// sandkeeper's switch that trusts the PID namespace it runs in
/// (`SANDKEEPER_TRUST_PID_NAMESPACE=1`), set for the inner half of
/// [`run_in_pid_namespace`]: without it, a scan in a child PID namespace
/// cannot see the host and calls every entry `unknown`.
pub const TRUST_PID_NAMESPACE_ENV: &str = "SANDKEEPER_TRUST_PID_NAMESPACE";

/// Whether privileged tests can run. Without root they skip, printing why,
/// unless `CI` is set: there they must run, so the test fails instead.
pub fn require_root(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root, and CI is set: privileged tests must run in CI"
    );
    eprintln!("skipping {test}: needs root (run as root or in CI)");
    false
}

/// Runs the ignored test `inner` of the calling test binary as PID 1 of a
/// new PID and mount namespace (`unshare --pid --fork --mount-proc`), where
/// every process can be inspected (on some machines even root cannot
/// inspect the host's PID 1), and fails if it fails. Everything the inner
/// test starts dies with the namespace (`--kill-child`), its mounts with its
/// private mount namespace. The inner run trusts its PID namespace
/// ([`TRUST_PID_NAMESPACE_ENV`]). Returns false when skipped (not root, no
/// CI).
pub fn run_in_pid_namespace(outer: &str, inner: &str) -> bool {
    if !require_root(outer) {
        return false;
    }
    let out = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "--propagation",
            "private",
        ])
        .arg(std::env::current_exe().expect("test binary path"))
        .args([
            "--ignored",
            "--exact",
            inner,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(IN_NAMESPACE_ENV, "1")
        // The namespace is the test's own: nothing outside it uses what the
        // test scans (issue 10, finding 5(a)).
        .env(TRUST_PID_NAMESPACE_ENV, "1")
        .stdin(Stdio::null())
        .output()
        .expect("run unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{inner} failed in the namespace:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "{inner} did not run:\n{stdout}"
    );
    true
}

/// Whether this process is the inner half of [`run_in_pid_namespace`].
pub fn in_namespace() -> bool {
    std::env::var_os(IN_NAMESPACE_ENV).is_some()
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

/// A tmpfs mounted by the test (mode 0755), unmounted lazily on drop, even
/// when the test fails.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`8m`, `1g`) at `at`, creating it.
    pub fn mount(at: &Path, size: &str) -> Tmpfs {
        Tmpfs::mount_with(at, &format!("size={size}"))
    }

    /// Mounts a tmpfs with these mount options (`size=8m,nr_inodes=64`)
    /// at `at`, creating it; `mode=0755` unless the options say otherwise.
    pub fn mount_with(at: &Path, options: &str) -> Tmpfs {
        fs::create_dir_all(at).unwrap_or_else(|e| panic!("mkdir {}: {e}", at.display()));
        let data = CString::new(format!("mode=0755,{options}")).expect("no NUL in options");
        rustix::mount::mount(
            "sandkeeper-test",
            at,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            Some(data.as_c_str()),
        )
        .unwrap_or_else(|e| panic!("mount tmpfs at {}: {e}", at.display()));
        Tmpfs(at.to_owned())
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

/// Sets the mtime (and atime) of `dir` and of the files directly in it to
/// `age` ago.
pub fn age_tree(dir: &Path, age: Duration) {
    let when = SystemTime::now() - age;
    let times = fs::FileTimes::new().set_modified(when).set_accessed(when);
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())) {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            fs::File::options()
                .write(true)
                .open(entry.path())
                .unwrap()
                .set_times(times)
                .unwrap();
        }
    }
    fs::File::open(dir).unwrap().set_times(times).unwrap();
}

/// A directory that another user (`nobody`) can reach, for tests that act
/// as one: the temp directory if every component of its path is searchable
/// by others, else `/tmp`. (A checkout, and so `target/tmp`, may sit under a
/// private directory; CI makes its watched `TMPDIR` searchable.)
///
/// # Panics
///
/// When neither is reachable by others: the test cannot run as written.
pub fn reachable_by_others() -> PathBuf {
    let candidates = [std::env::temp_dir(), PathBuf::from("/tmp")];
    candidates
        .iter()
        .find(|dir| searchable_by_others(dir))
        .cloned()
        .unwrap_or_else(|| panic!("none of {candidates:?} can be searched by other users"))
}

fn searchable_by_others(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.ancestors().all(|p| {
        p.as_os_str().is_empty()
            || fs::metadata(p).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0)
    })
}
