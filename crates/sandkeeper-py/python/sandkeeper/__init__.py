"""Scratch directories that cannot leak unnoticed — sandkeeper for Python.

The same Rust engine as the ``sandkeeper`` command (which this package also
installs): leased sandboxes that are removed when closed, collected or at
interpreter exit, a scanner that tells live, in-use, orphaned and idle
leftovers apart, and a reaper that never takes what is live or in use.

>>> import sandkeeper
>>> with sandkeeper.Sandbox(tag="doc") as sb:
...     _ = (sb.path / "data").write_text("scratch")
...     kept = sb.path
>>> kept.exists()
False

See ``docs/python.md`` for the launcher pattern and the pytest plugin.
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import datetime
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import warnings as _warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from . import _native
from ._errors import (
    Held,
    InvalidInput,
    InvalidLease,
    IoError,
    NameConflict,
    Removal,
    SandkeeperError,
    SandkeeperWarning,
    Stopped,
    TimedOut,
    Unsupported,
    UnsafeRoot,
    UnusableRoot,
)

__version__: str = _native.__version__

__all__ = [
    "Sandbox",
    "LeakRecordDir",
    "teardown_on_signals",
    "scan",
    "reap",
    "ScanReport",
    "ScanRoot",
    "Filesystem",
    "Totals",
    "Group",
    "Entry",
    "Process",
    "ReapReport",
    "Removed",
    "Skipped",
    "ReapFailure",
    "ReapRoot",
    "SandkeeperError",
    "SandkeeperWarning",
    "IoError",
    "InvalidInput",
    "UnusableRoot",
    "UnsafeRoot",
    "Held",
    "NameConflict",
    "InvalidLease",
    "TimedOut",
    "Removal",
    "Unsupported",
    "Stopped",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]
Duration = Union[datetime.timedelta, str, int, float]

_KEEP_POLICIES = ("never", "on-failure", "always")


def _seconds(value: Duration, what: str) -> float:
    """A duration argument in seconds: a ``timedelta``, a CLI string
    (``"90s"``, ``"2h"``, ``"7d"``) or a number of seconds."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a timedelta, a string like '90s' or a number of seconds, not {value!r}")
    if isinstance(value, datetime.timedelta):
        secs = value.total_seconds()
    elif isinstance(value, str):
        try:
            return _native.parse_duration(value)
        except InvalidInput as e:
            raise InvalidInput(f"{what}: {e.message}") from None
    elif isinstance(value, (int, float)):
        secs = float(value)
    else:
        raise TypeError(f"{what} must be a timedelta, a string like '90s' or a number of seconds, not {value!r}")
    if not secs >= 0:  # also NaN
        raise InvalidInput(
            f"{what}={value!r} is a negative duration; use zero or more, such as 90s, 15m, 2h or 7d"
        )
    return secs


def _path_arg(value: PathLike, what: str) -> str:
    try:
        return os.fspath(value)
    except TypeError:
        raise TypeError(f"{what} must be a path (str or os.PathLike), not {value!r}") from None


# --- Sandboxes ---------------------------------------------------------------

# Open sandboxes, closed at interpreter exit if still open: the fallback for
# ones nobody closed (process-lifetime ones are held strongly until then).
_open: "weakref.WeakSet[Sandbox]" = weakref.WeakSet()
_lifetime: "set[Sandbox]" = set()
_open_lock = threading.Lock()


def _close_all_at_exit() -> None:
    with _open_lock:
        pending = list(_open) + [s for s in _lifetime if s not in _open]
        _lifetime.clear()
    for sandbox in pending:
        try:
            sandbox.close()
        except Exception as e:  # noqa: BLE001 - at exit, say it and go on
            print(f"sandkeeper: {e}", file=sys.stderr)


atexit.register(_close_all_at_exit)


_TEARDOWN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")


def teardown_on_signals() -> None:
    """Makes SIGTERM, SIGINT and SIGHUP tear the open sandboxes down in
    order, then exit with the conventional status (128 + the signal).

    Python dies on SIGTERM and SIGHUP without running ``with`` blocks,
    ``ExitStack`` exits or ``atexit``: a CI runner cancelling a job left
    the VM running and its run dir behind. After this call such a signal
    raises ``SystemExit(128 + signal)`` in the main thread: every ``with``
    block unwinds (last entered first: the VM stopped, then unmounted,
    then its sandbox removed), then the sandboxes nobody closed are
    closed at exit. SIGINT keeps Python's ``KeyboardInterrupt`` unless
    the program set a handler of its own.

    It composes: a handler the program had installed is called first,
    and if it returns, the teardown follows (it is never silently
    replaced). Handlers run in the main thread between bytecodes, as
    Python runs every signal handler, so threads are safe; call it from
    the main thread (Python allows no other). Calling it again does
    nothing more.
    """
    for name in _TEARDOWN_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is None:
            continue  # (Windows has no SIGHUP)
        previous = signal.getsignal(signum)
        if getattr(previous, "_sandkeeper_teardown", False):
            continue
        if signum == signal.SIGINT and previous is signal.default_int_handler:
            continue  # KeyboardInterrupt unwinds already

        def handler(sig: int, frame: Any, previous: Any = previous) -> None:
            if callable(previous) and previous not in (signal.SIG_DFL, signal.SIG_IGN):
                previous(sig, frame)
            elif previous == signal.SIG_IGN:
                return
            raise SystemExit(128 + sig)

        handler._sandkeeper_teardown = True  # type: ignore[attr-defined]
        signal.signal(signum, handler)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGKILL when ``parent``
    dies (``prctl(PR_SET_PDEATHSIG)``), and not start at all when
    ``parent`` is already gone (it was reparented before the call: nobody
    would signal it). Everything is looked up before the fork; the child
    only calls."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    kill = int(signal.SIGKILL)
    getppid = os.getppid
    exit_now = os._exit

    def preexec() -> None:
        if prctl(pr_set_pdeathsig, kill, 0, 0, 0) != 0 or getppid() != parent:
            exit_now(127)

    return preexec


_spawner_lock = threading.Lock()
_spawner_jobs: "Optional[queue.SimpleQueue[Any]]" = None


def _popen_from_lasting_thread(args: Any, kwargs: Dict[str, Any]) -> "subprocess.Popen[Any]":
    """``subprocess.Popen(args, **kwargs)`` forked from a thread that lives
    as long as the process: the main thread, or else one spawner thread
    started on first use. ``PR_SET_PDEATHSIG`` fires when the thread that
    forked ends, so a child forked from a short-lived worker thread would
    be killed with the worker, not with the launcher."""
    global _spawner_jobs
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(args, **kwargs)
    with _spawner_lock:
        if _spawner_jobs is None:
            jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()

            def spawner() -> None:
                while True:
                    job_args, job_kwargs, reply = jobs.get()
                    try:
                        reply.put((subprocess.Popen(job_args, **job_kwargs), None))
                    except BaseException as e:  # handed to the caller
                        reply.put((None, e))

            threading.Thread(target=spawner, name="sandkeeper-spawner", daemon=True).start()
            _spawner_jobs = jobs
    reply: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
    _spawner_jobs.put((args, kwargs, reply))
    popen, error = reply.get()
    if error is not None:
        raise error
    return popen


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _caller_site() -> str:
    """``file:line`` of the first frame outside this package: where the
    caller made the sandbox (what ``sandkeeper ls`` and ``explain`` show)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


class Sandbox:
    """A leased scratch directory, removed when closed.

    Use it as a context manager (removed at the end of the ``with``, after
    its teardown: children stopped, deferred callables run) or as an object
    (removed by :meth:`close`, else when garbage-collected, else at
    interpreter exit). While it is open, every reaper that speaks the lease
    protocol (``sandkeeper reap``, :func:`reap`, ``systemd-tmpfiles``) sees
    it as ``live``; if the process dies without closing it, the kernel
    releases the lease and it is ``orphaned``: any reaper, or the next keyed
    sandbox of the same tag, takes it.

    :param tag: the name's prefix (1–200 bytes of a file name, no ``/``).
    :param root: where to create it (default: ``SANDKEEPER_ROOT``, else the
        system temp directory; keyed ones go into its per-user
        ``sandkeeper-<uid>`` directory).
    :param keyed: a fixed name (tag + a hash of ``checkout``) that reclaims
        what a dead predecessor left; concurrent holders take numbered slots.
    :param process_lifetime: keyed, and held until interpreter exit.
    :param keep: ``"never"``, ``"on-failure"`` (kept when the ``with``
        block raises) or ``"always"``; default ``SANDKEEPER_KEEP``, else never.
    :param keep_for: how long a sandbox kept on failure stays managed
        before reapers may take it (default 24 h).
    :param kill_grace: between SIGTERM and SIGKILL for adopted children.
    :param checkout: what a keyed name is derived from (default: the
        interpreter's path).
    :param mode: the directory's permissions (default ``0o700``).
    :param site: where the sandbox was made, recorded in its lease and
        shown by ``sandkeeper ls`` and ``explain`` (default: the caller's
        ``file:line``, the first frame outside this package).
    :raises InvalidInput: a bad tag, keep policy or duration (naming it).
    :raises UnusableRoot: a root that does not exist or is not writable.
    """

    def __init__(
        self,
        tag: str = "sandbox",
        root: Optional[PathLike] = None,
        *,
        keyed: bool = False,
        process_lifetime: bool = False,
        keep: Optional[str] = None,
        keep_for: Duration = datetime.timedelta(hours=24),
        kill_grace: Duration = datetime.timedelta(seconds=5),
        checkout: Optional[PathLike] = None,
        mode: int = 0o700,
        site: Optional[str] = None,
    ) -> None:
        if not isinstance(tag, str):
            raise TypeError(f"tag must be a str, not {tag!r}")
        if keep is not None and keep not in _KEEP_POLICIES:
            raise InvalidInput(
                f"keep={keep!r} is not a keep policy; use 'never', 'on-failure' or 'always'"
            )
        self._keep_for = _seconds(keep_for, "keep_for")
        self._kill_grace = _seconds(kill_grace, "kill_grace")
        self._errors: List[BaseException] = []
        self._native = _native._Sandbox(
            tag,
            None if root is None else _path_arg(root, "root"),
            bool(keyed),
            bool(process_lifetime),
            keep,
            self._keep_for,
            None if checkout is None else _path_arg(checkout, "checkout"),
            int(mode),
            _caller_site() if site is None else str(site),
        )
        self._path = pathlib.Path(self._native.path)
        with _open_lock:
            _open.add(self)
            if process_lifetime:
                _lifetime.add(self)

    @property
    def path(self) -> pathlib.Path:
        """The absolute path, fixed at creation."""
        return self._path

    @property
    def keep_policy(self) -> str:
        """The keep policy in force (``never``, ``on-failure``, ``always``)."""
        return self._native.keep_policy

    @property
    def closed(self) -> bool:
        """Whether the sandbox was closed or kept."""
        return self._native.finished

    def __fspath__(self) -> str:
        return str(self._path)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<sandkeeper.Sandbox {str(self._path)!r} {state}>"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and self.keep_policy == "on-failure" and not self.closed:
            path = self.persist()
            print(
                f"sandkeeper: kept sandbox {path} (keep=on-failure; reapers may remove it "
                f"after {datetime.timedelta(seconds=self._keep_for)})",
                file=sys.stderr,
            )
            return False
        if exc_type is not None:
            # Do not hide the exception that is propagating: say the
            # removal's failure and let it go on.
            try:
                self.close()
            except Exception as e:  # noqa: BLE001
                print(f"sandkeeper: {e}", file=sys.stderr)
            return False
        self.close()
        return False

    def defer(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Registers ``fn()`` to run before the directory is removed (last
        registered first). What it raises is raised again by :meth:`close`
        (after the removal); returns ``fn``, so it works as a decorator."""
        if not callable(fn):
            raise TypeError(f"defer() needs a callable, not {fn!r}")
        errors = self._errors

        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - re-raised by close()
                errors.append(e)

        self._native.defer(run)
        return fn

    def adopt(self, popen: "subprocess.Popen[Any]") -> "subprocess.Popen[Any]":
        """Registers a started child for teardown: before the directory
        goes it gets SIGTERM, up to ``kill_grace`` to exit, then SIGKILL,
        and is waited for. Returns ``popen``."""
        if not isinstance(popen, subprocess.Popen):
            raise TypeError(f"adopt() needs a subprocess.Popen, not {popen!r}")
        grace = self._kill_grace

        def stop() -> None:
            if popen.poll() is not None:
                return
            try:
                popen.terminate()
                popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
            except ProcessLookupError:
                popen.wait()

        self.defer(stop)
        return popen

    def spawn(
        self,
        args: Any,
        *,
        share_lease: bool = True,
        die_with_launcher: bool = True,
        **popen_kwargs: Any,
    ) -> "subprocess.Popen[Any]":
        """Starts ``subprocess.Popen(args, **popen_kwargs)`` and
        :meth:`adopt`\\ s it: it is stopped and waited for before the
        directory is removed.

        With ``share_lease`` (the default) the child inherits a descriptor
        holding the sandbox's lease, so the directory stays ``live`` while
        the child runs even if this process is killed first; reapers take
        it once the child is gone too.

        With ``die_with_launcher`` (the default; Linux) the kernel kills the
        child when this process dies, however it dies (SIGKILL and OOM kills
        included, where no teardown runs), so the lease is released and the
        next reap takes the directory. (The kernel ties that to the
        *thread* that forks, so a ``spawn`` from any thread but the main one
        forks from a thread of this package's that lives as long as the
        process: a child started from a worker thread does not die when
        the worker ends.) The child's own children are not covered (they
        are reparented, not signalled).
        Pass ``die_with_launcher=False`` for a child meant to outlive this
        process (a VM handed over to another supervisor)."""
        if die_with_launcher and sys.platform.startswith("linux"):
            if "preexec_fn" in popen_kwargs:
                raise InvalidInput(
                    "spawn(die_with_launcher=True) sets preexec_fn itself; "
                    "pass die_with_launcher=False to use your own"
                )
            popen_kwargs["preexec_fn"] = _die_with_parent(os.getpid())
        fd = None
        if share_lease:
            fd = self._native.dup_lease_fd()
            popen_kwargs["pass_fds"] = tuple(popen_kwargs.get("pass_fds", ())) + (fd,)
        try:
            if die_with_launcher:
                popen = _popen_from_lasting_thread(args, popen_kwargs)
            else:
                popen = subprocess.Popen(args, **popen_kwargs)
        finally:
            if fd is not None:
                os.close(fd)
        return self.adopt(popen)

    def close(self) -> None:
        """Runs the teardown (children stopped, deferred callables) and
        removes the directory. Closing twice does nothing.

        :raises Removal: when something could not be removed (a mount
            inside, an immutable file); what is left keeps its lease record
            so a reaper takes it once nothing blocks it.
        :raises BaseException: the first exception a deferred callable raised.
        """
        try:
            self._native.close()
        finally:
            self._forget()
        self._raise_deferred()

    def keep(self) -> pathlib.Path:
        """Runs the teardown, then keeps the directory *unmanaged* (its lease
        record is deleted: no reaper takes it without a ``--match`` rule).
        Returns its path."""
        path = pathlib.Path(self._native.keep())
        self._forget()
        self._raise_deferred()
        return path

    def persist(self, keep_for: Optional[Duration] = None) -> pathlib.Path:
        """Runs the teardown, then keeps the directory *managed* for
        ``keep_for`` (default: the sandbox's ``keep_for``): reapers leave it
        alone until then, and take it after. Returns its path."""
        secs = self._keep_for if keep_for is None else _seconds(keep_for, "keep_for")
        try:
            path = pathlib.Path(self._native.persist_for(secs))
        finally:
            self._forget()
        self._raise_deferred()
        return path

    def _forget(self) -> None:
        with _open_lock:
            _open.discard(self)
            _lifetime.discard(self)

    def _raise_deferred(self) -> None:
        if self._errors:
            first = self._errors[0]
            self._errors.clear()
            raise first


# --- Per-test leak records ---------------------------------------------------


class LeakRecordDir:
    """A directory of per-test leak records, as ``sandkeeper run --nextest``
    writes them: ``sandkeeper report DIR`` (and ``--json``) summarizes them,
    whoever wrote them. The pytest plugin's ``--sandkeeper-report-dir``
    writes one per test with it.

    The directory is made (mode 0700) when it does not exist, and opened
    and vetted once, here: it must be a directory (not a symlink) owned by
    you that nobody else may write. Every record is written through that
    descriptor, under a name of its own, atomically.

    :param path: the directory (relative to the working directory).
    :raises UnsafeRoot: a symlink, a file, another user's directory, or
        one others may write (its message names it and says what to do).
    :raises UnusableRoot: its parent cannot be used.
    :raises IoError: it cannot be made or opened.
    """

    def __init__(self, path: PathLike) -> None:
        self._native = _native._RecordDir(_path_arg(path, "path"))
        self._path = pathlib.Path(self._native.path)

    @property
    def path(self) -> pathlib.Path:
        """The directory, as given."""
        return self._path

    def __repr__(self) -> str:
        return f"<sandkeeper.LeakRecordDir {str(self._path)!r}>"

    def record(
        self,
        sandbox: Sandbox,
        *,
        test_name: Optional[str],
        binary_id: Optional[str] = None,
        command: Sequence[str] = (),
        exit_code: int = 0,
    ) -> pathlib.Path:
        """Measures what is in ``sandbox`` now and writes one record of it.

        What is measured is what ``sandkeeper run`` measures in a test's
        ``TMPDIR``: its entries (the lease record not counted), their disk
        usage and name families, through the sandbox's open directory,
        never by its path. The record names the test (``binary_id`` and
        ``test_name``, as nextest's ``NEXTEST_BINARY_ID`` and
        ``NEXTEST_TEST_NAME``), its ``command`` (at most 16 arguments kept)
        and ``exit_code`` (0: passed; anything else counts as a failed run).
        It says no daemons were left: nothing here supervises processes.
        Names longer than 1024 bytes are cut. The sandbox stays open: close,
        keep or persist it afterwards.

        :returns: the new record's path.
        :raises RuntimeError: the sandbox is already closed.
        :raises IoError: the record cannot be written (a full disk).
        """
        if not isinstance(sandbox, Sandbox):
            raise TypeError(f"record() needs a sandkeeper.Sandbox, not {sandbox!r}")
        if isinstance(exit_code, bool) or not isinstance(exit_code, int):
            raise TypeError(f"exit_code must be an int, not {exit_code!r}")
        name = self._native.record(
            sandbox._native,
            None if binary_id is None else str(binary_id),
            None if test_name is None else str(test_name),
            [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in command],
            exit_code,
        )
        return self._path / name


# --- Typed results -------------------------------------------------------------


def _exact_path(d: Dict[str, Any], key: str = "path") -> Optional[pathlib.Path]:
    exact = d.get(f"{key}_base64")
    if exact is not None:
        return pathlib.Path(os.fsdecode(base64.b64decode(exact)))
    value = d.get(key)
    return None if value is None else pathlib.Path(value)


def _build(cls, d: Dict[str, Any], **converted: Any):
    """``cls`` from a JSON object: declared fields from ``d`` (or
    ``converted``), whatever the schema added later in ``extra``."""
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in d.items() if k in names}
    kwargs.update(converted)
    kwargs["extra"] = {k: v for k, v in d.items() if k not in names}
    return cls(**kwargs)


@dataclass(frozen=True)
class Filesystem:
    """A root's filesystem: ``type`` (``tmpfs``, ``ext4``, …), sizes in bytes."""

    type: str = ""
    total_bytes: int = 0
    free_bytes: int = 0
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Totals:
    """Sums over a root's top-level entries."""

    entries: int = 0
    disk_bytes: int = 0
    apparent_bytes: int = 0
    files: int = 0
    dirs: int = 0
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Group:
    """A name family (``pattern``: what varies is ``*``)."""

    pattern: str = ""
    count: int = 0
    disk_bytes: int = 0
    apparent_bytes: int = 0
    files: int = 0
    dirs: int = 0
    oldest_ms: Optional[int] = None
    newest_ms: Optional[int] = None
    states: Dict[str, int] = field(default_factory=dict)
    reclaimable_bytes: int = 0
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Entry:
    """One top-level entry: ``state`` is ``live``, ``in_use``,
    ``orphaned``, ``idle`` or ``unknown``; ``path`` is the root joined with
    the exact name."""

    name: str = ""
    pattern: str = ""
    state: str = "unknown"
    reason: str = ""
    disk_bytes: int = 0
    apparent_bytes: int = 0
    files: int = 0
    dirs: int = 0
    newest_mtime_ms: Optional[int] = None
    uid: Optional[int] = None
    holders: List[Dict[str, Any]] = field(default_factory=list)
    lease: Optional[Dict[str, Any]] = None
    path: Optional[pathlib.Path] = None
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ScanRoot:
    """One scanned root."""

    path: pathlib.Path
    filesystem: Filesystem = field(default_factory=Filesystem)
    totals: Totals = field(default_factory=Totals)
    groups: List[Group] = field(default_factory=list)
    entries: List[Entry] = field(default_factory=list)
    warnings: List[Any] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def entry(self, name: str) -> Optional[Entry]:
        """The entry called ``name``, if listed (``scan(entries=True)``)."""
        return next((e for e in self.entries if e.name == name), None)


@dataclass(frozen=True)
class Process:
    """A process the in-use check could not inspect (or was told to assume)."""

    pid: int = 0
    comm: str = ""
    reason: str = ""
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ScanReport:
    """The ``sandkeeper.scan/v1`` document as objects (docs/scan-json.md)."""

    schema: str
    started_ms: int
    roots: List[ScanRoot]
    uninspectable: List[Process] = field(default_factory=list)
    assumed: List[Process] = field(default_factory=list)
    blind_spots: List[str] = field(default_factory=list)
    assumed_blind_spots: List[str] = field(default_factory=list)
    assumes_unseen_free: bool = False
    #: What could not be seen or was assumed, in the words the command
    #: prints (each also given to :func:`warnings.warn` as a
    #: :class:`SandkeeperWarning`).
    warnings: List[str] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def entries(self) -> List[Entry]:
        """Every listed entry of every root."""
        return [e for r in self.roots for e in r.entries]

    def find(self, path: PathLike) -> Optional[Entry]:
        """The entry at ``path``, if listed."""
        target = pathlib.Path(os.fspath(path))
        return next((e for e in self.entries() if e.path == target), None)


def _scan_root(d: Dict[str, Any]) -> ScanRoot:
    root = _exact_path(d)
    entries = []
    for e in d.get("entries", []):
        name = e.get("name", "")
        exact = e.get("name_base64")
        exact_name = os.fsdecode(base64.b64decode(exact)) if exact is not None else name
        entries.append(_build(Entry, e, path=root / exact_name))
    return _build(
        ScanRoot,
        d,
        path=root,
        filesystem=_build(Filesystem, d.get("filesystem", {})),
        totals=_build(Totals, d.get("totals", {})),
        groups=[_build(Group, g) for g in d.get("groups", [])],
        entries=entries,
    )


def _told(warned: List[str]) -> List[str]:
    """Gives each of the engine's warnings to :func:`warnings.warn` (to the
    caller of :func:`scan` or :func:`reap`), and returns them."""
    for text in warned:
        _warnings.warn(text, SandkeeperWarning, stacklevel=3)
    return list(warned)


def _scan_report(d: Dict[str, Any], warned: Sequence[str] = ()) -> ScanReport:
    return _build(
        ScanReport,
        d,
        warnings=list(warned),
        roots=[_scan_root(r) for r in d.get("roots", [])],
        uninspectable=[_build(Process, p) for p in d.get("uninspectable", [])],
        assumed=[_build(Process, p) for p in d.get("assumed", [])],
    )


@dataclass(frozen=True)
class Removed:
    """An entry a reap removed (or, on a dry run, would remove)."""

    path: pathlib.Path
    pattern: str = ""
    state: str = ""
    reason: str = ""
    disk_bytes: int = 0
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Skipped:
    """An entry a reap left in place; ``reason_code`` says why (``live``,
    ``in_use``, ``unknown``, ``grace``, ``kept``, ``not_selected``, …)."""

    path: pathlib.Path
    state: str = ""
    reason: str = ""
    reason_code: str = ""
    disk_bytes: int = 0
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ReapFailure:
    """An entry that should have gone but could not be removed completely."""

    path: pathlib.Path
    error: str = ""
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ReapRoot:
    """Per root: bytes freed, quarantine items a killed reaper had left, and
    items of entries an earlier reap kept there on purpose, now removed."""

    path: pathlib.Path
    freed_bytes: int = 0
    quarantine_finished: int = 0
    quarantine_rechecked: int = 0
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class ReapReport:
    """The ``sandkeeper.reap/v1`` document as objects (docs/reap-json.md)."""

    schema: str
    dry_run: bool
    removed: List[Removed] = field(default_factory=list)
    skipped: List[Skipped] = field(default_factory=list)
    errors: List[ReapFailure] = field(default_factory=list)
    freed_bytes: int = 0
    roots: List[ReapRoot] = field(default_factory=list)
    assumed_blind_spots: List[str] = field(default_factory=list)
    assumes_unseen_free: bool = False
    #: As :attr:`ScanReport.warnings`, for the reap's scan.
    warnings: List[str] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def skipped_at(self, path: PathLike) -> Optional[Skipped]:
        """Why the entry at ``path`` was left, if it was."""
        target = pathlib.Path(os.fspath(path))
        return next((s for s in self.skipped if s.path == target), None)

    def removed_paths(self) -> List[pathlib.Path]:
        """The paths removed (or that a dry run would remove)."""
        return [r.path for r in self.removed]


def _reap_report(d: Dict[str, Any], warned: Sequence[str] = ()) -> ReapReport:
    def items(cls, key):
        return [_build(cls, x, path=_exact_path(x)) for x in d.get(key, [])]

    return _build(
        ReapReport,
        d,
        warnings=list(warned),
        removed=items(Removed, "removed"),
        skipped=items(Skipped, "skipped"),
        errors=items(ReapFailure, "errors"),
        roots=items(ReapRoot, "roots"),
    )


# --- scan and reap -------------------------------------------------------------


def _roots_arg(roots: Union[None, PathLike, Iterable[PathLike]]) -> List[str]:
    if roots is None:
        return []
    if isinstance(roots, (str, bytes, os.PathLike)):
        return [_path_arg(roots, "roots")]
    return [_path_arg(r, "roots") for r in roots]


def _pids_arg(pids: Iterable[int]) -> List[int]:
    out = []
    for pid in pids:
        if isinstance(pid, bool) or not isinstance(pid, int):
            raise TypeError(f"ignore_pids must hold ints, not {pid!r}")
        if not 0 < pid < 2**31:
            raise InvalidInput(f"ignore_pids: {pid} is not a process id; use a number from 1 up")
        out.append(pid)
    return out


def _flag(value: Optional[bool], what: str) -> Optional[bool]:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{what} must be True, False or None, not {value!r}")
    return value


def scan(
    roots: Union[None, PathLike, Iterable[PathLike]] = None,
    *,
    entries: bool = False,
    ignore_pids: Iterable[int] = (),
    trust_pid_namespace: Optional[bool] = None,
    assume_unseen_free: Optional[bool] = None,
) -> ScanReport:
    """Audits ``roots`` (default: the system temp directory and the
    per-user sandbox directories in it), as ``sandkeeper scan --json``.

    Read-only: takes no lock, removes nothing. Releases the GIL.

    :param entries: list every top-level entry (``ScanRoot.entries``).
    :param ignore_pids: processes that cannot be inspected but are vouched for.
    :param trust_pid_namespace: trust that every process that can reach the
        roots is in this pid namespace; trusted too when
        ``SANDKEEPER_TRUST_PID_NAMESPACE=1``, whatever this says (the CLI's
        rule: ``False`` is no veto).
    :param assume_unseen_free: assume that the processes this user cannot
        inspect use nothing under the roots, except regular files the
        caller owns, which are still asked; assumed too when
        ``SANDKEEPER_ASSUME_UNSEEN_FREE=1``, whatever this says
        (``ScanReport.assumes_unseen_free`` says whether it was assumed).
        See docs/security.md.
    :raises UnusableRoot: a root that does not exist (naming it).
    :raises InvalidInput: the filesystem root ``/`` or roots that overlap
        (as the CLI refuses them); ``SANDKEEPER_ASSUME_UNSEEN_FREE`` or
        ``SANDKEEPER_TRUST_PID_NAMESPACE`` set to something other than ``1``.
    """
    doc, warned = _native.scan_json(
        _roots_arg(roots),
        bool(entries),
        _pids_arg(ignore_pids),
        _flag(trust_pid_namespace, "trust_pid_namespace"),
        _flag(assume_unseen_free, "assume_unseen_free"),
    )
    return _scan_report(json.loads(doc), _told(warned))


def reap(
    roots: Union[None, PathLike, Iterable[PathLike]] = None,
    *,
    match: Union[str, Sequence[str]] = (),
    older_than: Optional[Duration] = None,
    keep_last: Optional[int] = None,
    target_free: Union[None, str, int] = None,
    target_free_inodes: Union[None, str, int] = None,
    owner: Union[None, str, int] = None,
    grace: Optional[Duration] = None,
    max_keep: Optional[Duration] = None,
    dry_run: bool = False,
    ignore_pids: Iterable[int] = (),
    trust_pid_namespace: Optional[bool] = None,
    assume_unseen_free: Optional[bool] = None,
) -> ReapReport:
    """Removes what is safe to remove from ``roots``, as ``sandkeeper reap
    --json``: orphaned sandboxes always, unmanaged entries only when a
    ``match`` glob selects them; never anything ``live``, ``in_use`` or
    ``unknown``. Releases the GIL.

    :param match: globs admitting unmanaged entries (``"app-*"``).
    :param older_than: only entries older than this (timedelta or ``"2h"``).
    :param keep_last: keep the N newest of each family.
    :param target_free: stop once this much is free (``"25%"``, ``"2GiB"``, bytes).
    :param target_free_inodes: stop once this many inodes are free.
    :param owner: only entries of this user (name or uid).
    :param grace: never remove anything younger than this (default: the
        engine's, as ``sandkeeper reap --grace``: 60 s).
    :param max_keep: honour a kept sandbox's "keep until" for at most this
        (default: the engine's, as ``--max-keep``: 7 days).
    :param dry_run: remove nothing; ``removed`` lists what would go.
    :param assume_unseen_free: as for :func:`scan`; regular files the
        caller owns are asked again on the moved entry before removal.
    :raises InvalidInput: a bad glob, duration, percentage or count (naming it).
    :raises UnusableRoot: a root that does not exist or is a symlink.
    """
    globs = [match] if isinstance(match, str) else list(match)
    for g in globs:
        if not isinstance(g, str):
            raise TypeError(f"match must hold glob strings, not {g!r}")
    if keep_last is not None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int):
            raise TypeError(f"keep_last must be an int, not {keep_last!r}")
        if keep_last < 0:
            raise InvalidInput(f"keep_last={keep_last} is negative; use a count of zero or more")

    def text(value, what):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise TypeError(f"{what} must be a str or an int, not {value!r}")
        return str(value)

    doc, warned = _native.reap_json(
        _roots_arg(roots),
        globs,
        None if older_than is None else _seconds(older_than, "older_than"),
        keep_last,
        text(target_free, "target_free"),
        text(target_free_inodes, "target_free_inodes"),
        text(owner, "owner"),
        None if grace is None else _seconds(grace, "grace"),
        None if max_keep is None else _seconds(max_keep, "max_keep"),
        bool(dry_run),
        _pids_arg(ignore_pids),
        _flag(trust_pid_namespace, "trust_pid_namespace"),
        _flag(assume_unseen_free, "assume_unseen_free"),
    )
    return _reap_report(json.loads(doc), _told(warned))
