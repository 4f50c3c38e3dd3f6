//! `sandkeeper._native`: the Rust engine behind the `sandkeeper` Python
//! package (`python/sandkeeper/`), built by maturin (`pyproject.toml`).
//!
//! Everything here is thin: the Python layer (`__init__.py`) gives the
//! idiom (context managers, `pathlib.Path`, dataclasses, exceptions), this
//! module calls the library and the CLI — there is no second
//! implementation. Errors cross as `sandkeeper._errors` exceptions built
//! from the library's [`sandkeeper_engine::Error`] (its kind, message, path, pid
//! and hint). Calls that touch the file system release the GIL.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use sandkeeper_engine::config::value;
use sandkeeper_engine::leaks::{Record, RecordDir, TestId};
use sandkeeper_engine::reap::{Reaper, Rules};
use sandkeeper_engine::root::{open_roots, Purpose};
use sandkeeper_engine::run::Leftovers;
use sandkeeper_engine::scan::warnings::Face;
use sandkeeper_engine::scan::Scanner;
use sandkeeper_engine::supervise::Exit;
use sandkeeper_engine::watch::ReapOptions;
use sandkeeper_engine::{ErrorKind, KeepPolicy};

/// A Python exception for a library error: `sandkeeper._errors` maps the
/// kind to its class (`InvalidInput` → `sandkeeper.InvalidInput`, a
/// `ValueError`, …).
fn py_err(py: Python<'_>, e: &sandkeeper_engine::Error) -> PyErr {
    let kind = format!("{:?}", e.kind());
    let errno = e.io_error().and_then(std::io::Error::raw_os_error);
    let path = e.path().map(|p| p.as_os_str().to_owned());
    exception(py, &kind, &e.to_string(), path, e.pid(), e.hint(), errno)
}

/// An `InvalidInput` exception for a value the caller gave.
fn invalid(py: Python<'_>, message: &str) -> PyErr {
    exception(py, "InvalidInput", message, None, None, None, None)
}

fn exception(
    py: Python<'_>,
    kind: &str,
    message: &str,
    path: Option<OsString>,
    pid: Option<u32>,
    hint: Option<&str>,
    errno: Option<i32>,
) -> PyErr {
    let made = py.import("sandkeeper._errors").and_then(|m| {
        m.getattr("_from_native")?
            .call1((kind, message, path, pid, hint, errno))
    });
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

/// Seconds (from the Python layer, already checked to be a number) as a
/// duration; `what` names the argument in the error.
fn seconds(py: Python<'_>, what: &str, secs: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        invalid(
            py,
            &format!(
                "{what} = {secs} s is not a duration; use zero or more, such as 90s, 15m, 2h or 7d"
            ),
        )
    })
}

/// The library's [`sandkeeper_engine::Sandbox`], owned by the Python object and
/// finished (torn down and removed) by `close`, `keep`, `persist_for`, or
/// when the object is collected.
#[pyclass(module = "sandkeeper._native", name = "_Sandbox")]
struct PySandbox {
    inner: Mutex<Option<sandkeeper_engine::Sandbox>>,
    path: OsString,
    keep: KeepPolicy,
}

impl PySandbox {
    fn take(&self) -> Option<sandkeeper_engine::Sandbox> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[pymethods]
impl PySandbox {
    /// Creates the sandbox (see `sandkeeper.Sandbox`).
    #[new]
    #[pyo3(signature = (tag, root, keyed, process_lifetime, keep, keep_for, checkout, mode, site))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        tag: String,
        root: Option<PathBuf>,
        keyed: bool,
        process_lifetime: bool,
        keep: Option<String>,
        keep_for: f64,
        checkout: Option<OsString>,
        mode: u32,
        site: String,
    ) -> PyResult<Self> {
        // The policy: the argument, else SANDKEEPER_KEEP, else never.
        // "on-failure" is decided by the Python layer (an exception in the
        // `with` block), so the library only ever sees never or always.
        let policy = match keep {
            Some(text) => text.parse::<KeepPolicy>().map_err(|e| py_err(py, &e))?,
            None => KeepPolicy::from_env()
                .map_err(|e| py_err(py, &e))?
                .unwrap_or_default(),
        };
        let keep_for = seconds(py, "keep_for", keep_for)?;
        let mut builder = sandkeeper_engine::Sandbox::builder();
        builder
            .tag(tag)
            .keyed(keyed)
            .process_lifetime(process_lifetime)
            .keep_env(false)
            .keep_policy(match policy {
                KeepPolicy::Always => KeepPolicy::Always,
                _ => KeepPolicy::Never,
            })
            .keep_for(keep_for)
            .permissions(mode)
            // The Python caller's file and line (the Python layer finds
            // it), not this file's.
            .site(site);
        if let Some(root) = root {
            builder.root(root);
        }
        if let Some(checkout) = checkout {
            builder.checkout(checkout);
        }
        let sandbox = py.detach(|| builder.create()).map_err(|e| py_err(py, &e))?;
        Ok(PySandbox {
            path: sandbox.path().as_os_str().to_owned(),
            inner: Mutex::new(Some(sandbox)),
            keep: policy,
        })
    }

    /// The absolute path, fixed at creation.
    #[getter]
    fn path(&self) -> OsString {
        self.path.clone()
    }

    /// The keep policy in force: `never`, `on-failure` or `always`.
    #[getter]
    fn keep_policy(&self) -> String {
        self.keep.to_string()
    }

    /// Whether the sandbox was closed, kept or persisted.
    #[getter]
    fn finished(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Registers a callable (no arguments) to run before the directory is
    /// removed, last registered first. The Python layer catches what it
    /// raises; anything left is printed, never lost silently.
    fn defer(&self, action: Py<PyAny>) -> PyResult<()> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sandbox) = guard.as_ref() else {
            return Err(PyRuntimeError::new_err("the sandbox is already finished"));
        };
        sandbox.defer(move || {
            Python::attach(|py| {
                if let Err(e) = action.call0(py) {
                    e.print(py);
                }
            });
        });
        Ok(())
    }

    /// A new descriptor (inheritable, close-on-exec cleared) sharing the
    /// lease lock, for a child to hold the sandbox live (`pass_fds`); the
    /// caller closes it once the child is started.
    fn dup_lease_fd(&self, py: Python<'_>) -> PyResult<i32> {
        use std::os::fd::IntoRawFd;
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sandbox) = guard.as_ref() else {
            return Err(PyRuntimeError::new_err("the sandbox is already finished"));
        };
        let fd = sandbox.try_clone_dir().map_err(|e| py_err(py, &e))?;
        Ok(fd.into_raw_fd())
    }

    /// Runs the teardown and removes the directory; raises what went wrong.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        match self.take() {
            None => Ok(()),
            Some(sandbox) => py.detach(|| sandbox.close()).map_err(|e| py_err(py, &e)),
        }
    }

    /// Runs the teardown and keeps the directory unmanaged; returns its path.
    fn keep(&self, py: Python<'_>) -> OsString {
        match self.take() {
            None => self.path.clone(),
            Some(sandbox) => py.detach(|| sandbox.keep()).into_os_string(),
        }
    }

    /// Runs the teardown and keeps the directory managed for `secs`
    /// (reapers take it after); returns its path.
    fn persist_for(&self, py: Python<'_>, secs: f64) -> PyResult<OsString> {
        let keep_for = seconds(py, "keep_for", secs)?;
        match self.take() {
            None => Ok(self.path.clone()),
            Some(sandbox) => py
                .detach(|| sandbox.persist_for(keep_for))
                .map(PathBuf::into_os_string)
                .map_err(|e| py_err(py, &e)),
        }
    }
}

/// A directory of per-test leak records (`sandkeeper.LeakRecordDir`):
/// the library's [`RecordDir`], opened and vetted once, written through
/// its descriptor. The records are those `sandkeeper run --nextest`
/// writes, so `sandkeeper report DIR` reads them unchanged.
#[pyclass(module = "sandkeeper._native", name = "_RecordDir", frozen)]
struct PyRecordDir {
    inner: RecordDir,
}

#[pymethods]
impl PyRecordDir {
    /// Opens `path` for writing records, making it (mode 0700) when it
    /// does not exist; refuses a symlink, a file, another user's
    /// directory, or one others may write (`UnsafeRoot`).
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        py.detach(|| RecordDir::open(&path))
            .map(|inner| PyRecordDir { inner })
            .map_err(|e| py_err(py, &e))
    }

    /// The path as given.
    #[getter]
    fn path(&self) -> OsString {
        self.inner.path().as_os_str().to_owned()
    }

    /// Measures what is in `sandbox` now (through its directory
    /// descriptor, never its path; the lease record not counted) and
    /// writes one record of it: the test `binary_id`/`test_name`, run as
    /// `command`, that ended with `exit_code`, and left no daemons (none
    /// were supervised). Returns the new record's file name.
    #[pyo3(signature = (sandbox, binary_id, test_name, command, exit_code))]
    fn record(
        &self,
        py: Python<'_>,
        sandbox: PyRef<'_, PySandbox>,
        binary_id: Option<String>,
        test_name: Option<String>,
        command: Vec<OsString>,
        exit_code: i32,
    ) -> PyResult<OsString> {
        let dir = {
            let guard = sandbox.inner.lock().unwrap_or_else(|e| e.into_inner());
            let Some(open) = guard.as_ref() else {
                return Err(PyRuntimeError::new_err("the sandbox is already finished"));
            };
            open.try_clone_dir().map_err(|e| py_err(py, &e))?
        };
        drop(sandbox);
        let test = TestId {
            binary_id,
            test_name,
        };
        py.detach(|| {
            let left = Leftovers::of(&dir);
            drop(dir);
            let record = Record::of_leftovers(test, &command, Exit::Code(exit_code), &left);
            self.inner.write(&record)
        })
        .map_err(|e| py_err(py, &e))
    }
}

/// The pids vouched for and the in-use switches, by the rule every face
/// shares ([`ReapOptions::for_caller`]: `False` and `None` alike leave a
/// switch to the environment).
fn assume(
    scanner: &mut Scanner,
    ignore_pids: Vec<u32>,
    trust_pid_namespace: Option<bool>,
    assume_unseen_free: Option<bool>,
) -> sandkeeper_engine::Result<()> {
    ReapOptions::for_caller(
        ignore_pids,
        trust_pid_namespace.unwrap_or(false),
        assume_unseen_free.unwrap_or(false),
    )?
    .vouch(scanner);
    Ok(())
}

/// `scan`: the `sandkeeper.scan/v1` document (the Python layer turns it
/// into dataclasses).
#[pyfunction]
#[pyo3(signature = (roots, entries, ignore_pids, trust_pid_namespace, assume_unseen_free))]
fn scan_json(
    py: Python<'_>,
    roots: Vec<PathBuf>,
    entries: bool,
    ignore_pids: Vec<u32>,
    trust_pid_namespace: Option<bool>,
    assume_unseen_free: Option<bool>,
) -> PyResult<(String, Vec<String>)> {
    py.detach(|| {
        let roots = open_roots(&roots, true, Purpose::Read)?;
        let mut scanner = Scanner::new();
        assume(
            &mut scanner,
            ignore_pids,
            trust_pid_namespace,
            assume_unseen_free,
        )?;
        let report = scanner.scan_roots(&roots)?;
        let told = report.warnings(Face::Python);
        Ok((sandkeeper_engine::json::scan(&report, entries), told))
    })
    .map_err(|e: sandkeeper_engine::Error| py_err(py, &e))
}

/// `reap`: the `sandkeeper.reap/v1` document.
#[pyfunction]
#[pyo3(signature = (roots, globs, older_than, keep_last, target_free, target_free_inodes, owner, grace, max_keep, dry_run, ignore_pids, trust_pid_namespace, assume_unseen_free))]
#[allow(clippy::too_many_arguments)]
fn reap_json(
    py: Python<'_>,
    roots: Vec<PathBuf>,
    globs: Vec<String>,
    older_than: Option<f64>,
    keep_last: Option<usize>,
    target_free: Option<String>,
    target_free_inodes: Option<String>,
    owner: Option<String>,
    grace: Option<f64>,
    max_keep: Option<f64>,
    dry_run: bool,
    ignore_pids: Vec<u32>,
    trust_pid_namespace: Option<bool>,
    assume_unseen_free: Option<bool>,
) -> PyResult<(String, Vec<String>)> {
    let defaults = Rules::default();
    let rules = Rules {
        globs,
        older_than: older_than
            .map(|age| seconds(py, "older_than", age))
            .transpose()?,
        keep_last,
        target_free: target_free
            .map(|t| value::free_target(&t).map_err(|e| invalid(py, &e)))
            .transpose()?,
        target_free_inodes: target_free_inodes
            .map(|t| value::free_inodes(&t).map_err(|e| invalid(py, &e)))
            .transpose()?,
        owner: owner
            .map(|user| value::user(&user).map_err(|e| invalid(py, &e)))
            .transpose()?,
        // (None: the engine's defaults, as the command's.)
        grace: grace
            .map(|secs| seconds(py, "grace", secs))
            .transpose()?
            .unwrap_or(defaults.grace),
        max_keep: max_keep
            .map(|secs| seconds(py, "max_keep", secs))
            .transpose()?
            .unwrap_or(defaults.max_keep),
    };
    let policy = rules.policy(dry_run, true).map_err(|e| py_err(py, &e))?;
    py.detach(|| {
        let roots = open_roots(&roots, true, Purpose::Remove)?;
        let mut reaper = Reaper::new(policy);
        assume(
            reaper.scanner(),
            ignore_pids,
            trust_pid_namespace,
            assume_unseen_free,
        )?;
        let report = reaper.reap_roots(&roots)?;
        let told = report.scan.warnings(Face::Python);
        Ok((sandkeeper_engine::json::reap(&report), told))
    })
    .map_err(|e: sandkeeper_engine::Error| py_err(py, &e))
}

/// A duration as the CLI writes it (`90s`, `2h`, `7d`), in seconds.
#[pyfunction]
fn parse_duration(py: Python<'_>, text: &str) -> PyResult<f64> {
    value::duration(text)
        .map(|d| d.as_secs_f64())
        .map_err(|e| invalid(py, &e))
}

/// The `sandkeeper` command (the same code as the Rust binary): `argv`
/// with the program name first; returns the exit status.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    py.detach(|| sandkeeper_cli::main_from(argv))
}

/// The kinds of `sandkeeper.Error`, as `_errors` names its classes.
#[pyfunction]
fn error_kinds() -> Vec<String> {
    [
        ErrorKind::Io,
        ErrorKind::InvalidInput,
        ErrorKind::UnusableRoot,
        ErrorKind::UnsafeRoot,
        ErrorKind::Held,
        ErrorKind::NameConflict,
        ErrorKind::InvalidLease,
        ErrorKind::TimedOut,
        ErrorKind::Removal,
        ErrorKind::Unsupported,
        ErrorKind::Stopped,
    ]
    .iter()
    .map(|k| format!("{k:?}"))
    .collect()
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<PySandbox>()?;
    m.add_class::<PyRecordDir>()?;
    m.add_function(wrap_pyfunction!(scan_json, m)?)?;
    m.add_function(wrap_pyfunction!(reap_json, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(error_kinds, m)?)?;
    Ok(())
}
