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
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Iterator, Optional

import pytest

import sandkeeper

_REPORTS = pytest.StashKey[dict]()
_SESSION_SANDBOX = pytest.StashKey[Optional[sandkeeper.Sandbox]]()


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
        help="where the `sandbox` fixture's sandboxes go (default: the per-user "
        "sandkeeper-<uid> directory in the system temp directory)",
    )
    group.addoption(
        "--sandkeeper-basetemp",
        action="store_true",
        default=False,
        help="make pytest's basetemp (tmp_path's parent) a leased sandbox, "
        "removed at the end of the session and reclaimable at once if pytest is killed",
    )


def _keep_policy(config: pytest.Config) -> str:
    policy = config.getoption("--sandkeeper-keep")
    if policy is None:
        policy = os.environ.get("SANDKEEPER_KEEP") or "never"
    return policy


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SESSION_SANDBOX] = None
    if not config.getoption("--sandkeeper-basetemp"):
        return
    if config.option.basetemp:
        raise pytest.UsageError("--sandkeeper-basetemp and --basetemp exclude each other")
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker: the controller's basetemp is passed down.
        return
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
    session = config.stash.get(_SESSION_SANDBOX, None)
    if session is not None:
        config.stash[_SESSION_SANDBOX] = None
        session.close()


def _test_site(node: pytest.Item) -> str:
    """The test's own ``file:line`` (pytest's locations count lines from 0)."""
    path, line, _ = node.location
    full = node.config.rootpath / path
    return str(full) if line is None else f"{full}:{line + 1}"


def _tag(nodeid: str) -> str:
    """A sandbox tag for a node id: readable, a file name, unique."""
    digest = hashlib.sha256(nodeid.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", nodeid).strip("-.")[:80] or "test"
    return f"pytest-{readable}-{digest}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    sandbox = getattr(item, "_sandkeeper_sandbox", None)
    if (
        sandbox is not None
        and report.failed
        and _keep_policy(item.config) in ("on-failure", "always")
    ):
        report.sections.append(("sandkeeper", f"sandbox kept at {sandbox.path}"))


@pytest.fixture
def sandbox(request: pytest.FixtureRequest) -> Iterator[sandkeeper.Sandbox]:
    """A leased, keyed sandbox for this test (see the module docstring)."""
    config = request.config
    policy = _keep_policy(config)
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
