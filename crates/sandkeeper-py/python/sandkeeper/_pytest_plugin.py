"""sandkeeper's pytest plugin (entry point ``pytest11``; ``-p no:sandkeeper``
turns it off).

- The ``sandbox`` fixture: a leased, keyed :class:`sandkeeper.Sandbox` per
  test node id. Removed after the test; a test killed mid-run leaves an
  ``orphaned`` sandbox that the next run of that test reclaims at once (and
  any ``sandkeeper reap`` takes). With ``--sandkeeper-keep=on-failure`` a
  failing test's sandbox is kept (managed, for ``--sandkeeper-keep-for``)
  and its path is printed in the failure report.
- ``--sandkeeper-basetemp``: pytest's own base temporary directory (what
  ``tmp_path`` lives in) is made inside a leased sandbox, removed at the end
  of the session; a killed pytest's one is reclaimable at once rather than
  after three later sessions.
- ``--sandkeeper-report-dir DIR`` (or the ini option
  ``sandkeeper_report_dir``): a per-test leak report like ``sandkeeper run
  --nextest``'s. Each test runs with its own ``TMPDIR`` (``TMP``, ``TEMP``,
  ``TEMPDIR`` and ``tempfile.tempdir`` too), a leased keyed sandbox; after
  its teardown what it left there is measured, one record is written into
  DIR (``sandkeeper report DIR`` reads them), and the sandbox is removed
  (kept for a failing test with ``--sandkeeper-keep=on-failure``). Fixtures
  of a wider scope than the function are set up with the session's own
  ``TMPDIR``: what they make outlives the test, and is not its leak.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import re
import sys
import tempfile
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

import sandkeeper

_REPORTS = pytest.StashKey[dict]()
_SESSION_SANDBOX = pytest.StashKey[Optional[sandkeeper.Sandbox]]()
_LEAKS = pytest.StashKey[Optional["_LeakReport"]]()
_TEST_TMP = pytest.StashKey[sandkeeper.Sandbox]()

# What `sandkeeper run` points at a command's own directory.
_TMP_VARS = ("TMPDIR", "TMP", "TEMP", "TEMPDIR")


class SandkeeperReportWarning(pytest.PytestWarning):
    """A test's leak record could not be made or written (the test's own
    outcome is not affected)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sandkeeper", "leased scratch directories (sandkeeper)")
    group.addoption(
        "--sandkeeper-keep",
        choices=("never", "on-failure", "always"),
        default=None,
        help="keep the `sandbox` fixture's directory: never (default; "
        "SANDKEEPER_KEEP if set), on-failure (its path is in the failure report), always",
    )
    group.addoption(
        "--sandkeeper-keep-for",
        default="24h",
        metavar="DURATION",
        help="how long a kept sandbox stays managed before reapers may take it (default 24h)",
    )
    group.addoption(
        "--sandkeeper-root",
        default=None,
        metavar="DIR",
        help="where the `sandbox` fixture's sandboxes (and the per-test TMPDIRs of "
        "--sandkeeper-report-dir) go (default: the per-user sandkeeper-<uid> "
        "directory in the system temp directory)",
    )
    group.addoption(
        "--sandkeeper-basetemp",
        action="store_true",
        default=False,
        help="make pytest's basetemp (tmp_path's parent) a leased sandbox, "
        "removed at the end of the session and reclaimable at once if pytest is killed",
    )
    group.addoption(
        "--sandkeeper-report-dir",
        default=None,
        metavar="DIR",
        help="give each test its own TMPDIR (a leased sandbox) and write what it left "
        "there into DIR, one record per test, as `sandkeeper run --nextest` does; "
        "`sandkeeper report DIR` says which tests leaked (default: the ini option "
        "sandkeeper_report_dir)",
    )
    parser.addini(
        "sandkeeper_report_dir",
        type="string",
        default="",
        help="as --sandkeeper-report-dir (relative to the ini file's directory)",
    )


def _keep_policy(config: pytest.Config) -> str:
    policy = config.getoption("--sandkeeper-keep")
    if policy is None:
        policy = os.environ.get("SANDKEEPER_KEEP") or "never"
    return policy


class _LeakReport:
    """The session's report directory, what names its records, and the
    running test's TMPDIR (while one runs)."""

    def __init__(self, records: sandkeeper.LeakRecordDir, binary_id: str, command: List[str]) -> None:
        self.records = records
        self.binary_id = binary_id
        self.command = command
        self.active: Optional[_TestTmp] = None


class _TestTmp:
    """A test's TMPDIR: the variables and ``tempfile.tempdir`` pointing into
    its sandbox between :meth:`enter` and :meth:`leave`, and what they were
    outside (put back by :meth:`leave`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._outside: Optional[Tuple[Dict[str, Optional[str]], Optional[str]]] = None

    def enter(self) -> None:
        self._outside = ({k: os.environ.get(k) for k in _TMP_VARS}, tempfile.tempdir)
        for k in _TMP_VARS:
            os.environ[k] = self.path
        tempfile.tempdir = self.path

    def leave(self) -> None:
        if self._outside is None:
            return
        env, tempdir = self._outside
        self._outside = None
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        tempfile.tempdir = tempdir


@contextlib.contextmanager
def _outside_test_tmp(config: pytest.Config) -> Iterator[None]:
    """The session's own TMPDIR for a moment, inside a test's."""
    report = config.stash.get(_LEAKS, None)
    active = report.active if report is not None else None
    if active is not None:
        active.leave()
    try:
        yield
    finally:
        if active is not None:
            active.enter()


def _report_dir(config: pytest.Config) -> Optional[Tuple[pathlib.Path, str]]:
    """The report directory asked for (absolute), and where it was asked."""
    given = config.getoption("--sandkeeper-report-dir")
    if given is not None:
        if not given:
            raise pytest.UsageError(
                "--sandkeeper-report-dir is empty: give the directory the per-test leak "
                "records go into (made if missing), or leave the option out"
            )
        return config.invocation_params.dir / given, "--sandkeeper-report-dir"
    ini = config.getini("sandkeeper_report_dir")
    if ini:
        base = config.inipath.parent if config.inipath is not None else config.rootpath
        return base / ini, f"sandkeeper_report_dir in {config.inipath or 'the configuration'}"
    return None


def _open_leak_report(config: pytest.Config) -> None:
    asked = _report_dir(config)
    if asked is None:
        return
    path, source = asked
    try:
        records = sandkeeper.LeakRecordDir(path)
    except sandkeeper.SandkeeperError as e:
        todo = (
            ""
            if e.hint
            else " (give a directory of your own that only you may write, or a path "
            "that does not exist yet in such a directory)"
        )
        raise pytest.UsageError(
            f"{source}: cannot write leak records into {path}: {e}{todo}"
        ) from None
    name = config.rootpath.name
    config.stash[_LEAKS] = _LeakReport(
        records,
        binary_id=f"pytest:{name}" if name else "pytest",
        command=["pytest", *(str(a) for a in config.invocation_params.args)],
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SESSION_SANDBOX] = None
    config.stash[_LEAKS] = None
    _open_leak_report(config)
    if not config.getoption("--sandkeeper-basetemp"):
        return
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker: the controller's basetemp (in its sandbox)
        # is passed down as the worker's --basetemp.
        return
    if config.option.basetemp:
        raise pytest.UsageError("--sandkeeper-basetemp and --basetemp exclude each other")
    session = sandkeeper.Sandbox(
        tag="pytest-basetemp",
        root=config.getoption("--sandkeeper-root"),
        keyed=True,
        keep="never",
        checkout=str(config.rootpath),
        site=f"pytest --sandkeeper-basetemp in {config.rootpath}",
    )
    config.stash[_SESSION_SANDBOX] = session
    # pytest empties and recreates the basetemp it is given: a directory
    # inside the sandbox, so the sandbox (and its lease) stays.
    config.option.basetemp = str(session.path / "basetemp")


def pytest_unconfigure(config: pytest.Config) -> None:
    config.stash[_LEAKS] = None
    session = config.stash.get(_SESSION_SANDBOX, None)
    if session is not None:
        config.stash[_SESSION_SANDBOX] = None
        session.close()


def _test_site(node: pytest.Item) -> str:
    """The test's own ``file:line`` (pytest's locations count lines from 0)."""
    path, line, _ = node.location
    full = node.config.rootpath / path
    return str(full) if line is None else f"{full}:{line + 1}"


def _tag(nodeid: str, prefix: str = "pytest") -> str:
    """A sandbox tag for a node id: readable, a file name, unique."""
    digest = hashlib.sha256(nodeid.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", nodeid).strip("-.")[:80] or "test"
    return f"{prefix}-{readable}-{digest}"


def _warn(item: pytest.Item, message: str) -> None:
    """A warning on the test (in pytest's warnings summary); never raised,
    even where warnings are errors: the records observe the tests, they are
    not part of them."""
    try:
        item.warn(SandkeeperReportWarning(f"sandkeeper: {message}"))
    except Exception:  # noqa: BLE001 - turned into an error by a filter
        print(f"sandkeeper: warning: {item.nodeid}: {message}", file=sys.stderr)


def _raised(outcome) -> bool:
    try:
        outcome.get_result()
    except BaseException:  # noqa: BLE001 - only asked whether it raised
        return True
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item):
    """With a report directory: the test's own TMPDIR around its setup,
    call and teardown; then its record, then the sandbox removed."""
    report = item.config.stash.get(_LEAKS, None)
    if report is None:
        yield
        return
    config = item.config
    policy = _keep_policy(config)
    try:
        sb = sandkeeper.Sandbox(
            tag=_tag(item.nodeid, "pytest-tmp"),
            root=config.getoption("--sandkeeper-root"),
            keyed=True,
            keep="never" if policy != "always" else "always",
            keep_for=config.getoption("--sandkeeper-keep-for"),
            checkout=str(config.rootpath),
            site=_test_site(item),
        )
    except Exception as e:  # noqa: BLE001 - the test runs all the same
        _warn(item, f"no leak record for this test: its own TMPDIR cannot be made ({e}); it runs with the session's")
        yield
        return
    item.stash[_TEST_TMP] = sb
    tmp = _TestTmp(str(sb.path))
    tmp.enter()
    report.active = tmp
    try:
        outcome = yield
    finally:
        report.active = None
        tmp.leave()
        del item.stash[_TEST_TMP]
    reports = item.stash.get(_REPORTS, {})
    failed = any(r.failed for r in reports.values())
    if not _raised(outcome):  # (interrupted: no record of a half-run test)
        try:
            report.records.record(
                sb,
                test_name=item.nodeid,
                binary_id=report.binary_id,
                command=report.command,
                exit_code=1 if failed else 0,
            )
        except Exception as e:  # noqa: BLE001 - never fails the test
            _warn(item, f"no leak record for this test: {e}")
    try:
        if failed and policy == "on-failure":
            sb.persist()
        else:
            sb.close()
    except Exception as e:  # noqa: BLE001 - the test is over; say it
        _warn(item, f"the test's TMPDIR {sb.path} was not removed: {e}")


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
    """Fixtures of a wider scope than the test's are set up with the
    session's TMPDIR: what they make outlives the test's sandbox."""
    report = request.config.stash.get(_LEAKS, None)
    if report is None or report.active is None or fixturedef.scope == "function":
        yield
        return
    with _outside_test_tmp(request.config):
        outcome = yield
        if fixturedef.argname == "tmp_path_factory" and not _raised(outcome):
            # pytest picks its basetemp in the temp directory on first use,
            # maybe in a test's body: pick it now, outside every test.
            factory = outcome.get_result()
            if isinstance(factory, pytest.TempPathFactory):
                factory.getbasetemp()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    if not report.failed or _keep_policy(item.config) not in ("on-failure", "always"):
        return
    sandbox = getattr(item, "_sandkeeper_sandbox", None)
    if sandbox is not None:
        report.sections.append(("sandkeeper", f"sandbox kept at {sandbox.path}"))
    tmp = item.stash.get(_TEST_TMP, None)
    if tmp is not None:
        report.sections.append(("sandkeeper", f"TMPDIR kept at {tmp.path}"))


@pytest.fixture
def sandbox(request: pytest.FixtureRequest) -> Iterator[sandkeeper.Sandbox]:
    """A leased, keyed sandbox for this test (see the module docstring)."""
    config = request.config
    policy = _keep_policy(config)
    # Where it goes is the session's temp directory, not the test's own.
    with _outside_test_tmp(config):
        sb = sandkeeper.Sandbox(
            tag=_tag(request.node.nodeid),
            root=config.getoption("--sandkeeper-root"),
            keyed=True,
            keep="never" if policy != "always" else "always",
            keep_for=config.getoption("--sandkeeper-keep-for"),
            checkout=str(config.rootpath),
            site=_test_site(request.node),
        )
    request.node._sandkeeper_sandbox = sb
    try:
        yield sb
    finally:
        request.node._sandkeeper_sandbox = None
        reports = request.node.stash.get(_REPORTS, {})
        failed = any(r.failed for r in reports.values())
        if failed and policy == "on-failure":
            sb.persist()
        else:
            sb.close()
