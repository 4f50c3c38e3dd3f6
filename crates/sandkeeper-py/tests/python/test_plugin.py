"""The pytest plugin on a small suite: a passing, a failing and a killed test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import sandkeeper
from conftest import needs_namespace

SUITE = {
    "pytest.ini": "[pytest]\n",
    "test_suite.py": """
        import os, signal, tempfile

        import pytest

        def test_pass(sandbox):
            (sandbox.path / "out.txt").write_text("ok")

        def test_fail(sandbox):
            (sandbox.path / "evidence.txt").write_text("look here")
            assert False, "fails on purpose"

        def test_killed(sandbox):
            (sandbox.path / "half-done").write_text("x")
            if os.environ.get("SK_KILL") == "1":
                os.kill(os.getpid(), signal.SIGKILL)

        # The first public leak shape: mkdtemp() in setUp, never removed.
        # Fixed by taking the fixture instead.
        class TestLegacySetup:
            @pytest.fixture(autouse=True)
            def _workdir(self, sandbox):
                self.workdir = sandbox.path  # was: tempfile.mkdtemp()

            def test_uses_workdir(self):
                (self.workdir / "cache").mkdir()

        # The second: a tempfs-like helper with auto_clean=False.
        class TempFS:
            def __init__(self, directory):
                self.root = directory  # was: tempfile.mkdtemp(), auto_clean=False
            def write(self, name, text):
                (self.root / name).write_text(text)
                return self.root / name

        def test_tempfs_helper(sandbox):
            fs = TempFS(sandbox.path)
            assert fs.write("a.txt", "hello").read_text() == "hello"

        def test_tmp_path(tmp_path):
            print("TMP_PATH", tmp_path)
    """,
}


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "suite"
    path.mkdir()
    for name, text in SUITE.items():
        (path / name).write_text(textwrap.dedent(text))
    return path


def run(suite, root, *args, kill=False):
    env = dict(os.environ, SK_KILL="1" if kill else "0", PYTHONDONTWRITEBYTECODE="1")
    env.pop("SANDKEEPER_KEEP", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--sandkeeper-root", str(root), *args],
        cwd=suite,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_nothing_left_but_the_failing_tests_kept_dir(suite, root):
    out = run(suite, root, "--sandkeeper-keep=on-failure", "-k", "not killed")
    assert out.returncode == 1, out.stdout
    assert "4 passed" in out.stdout and "1 failed" in out.stdout, out.stdout
    left = os.listdir(root)
    assert len(left) == 1 and "test_fail" in left[0], left
    kept = root / left[0]
    assert f"sandbox kept at {kept}" in out.stdout, out.stdout
    assert (kept / "evidence.txt").read_text() == "look here"
    # Kept managed: a reaper leaves it until its keep_until passes.
    report = sandkeeper.reap(root, grace=0, dry_run=True)
    assert report.removed == []
    if os.environ.get("SK_PY_NAMESPACE") == "1":
        assert report.skipped_at(kept).reason_code == "kept"
    # Without the option the failing test's new sandbox (the next slot:
    # the kept one is not reclaimed before its time) goes too.
    out = run(suite, root, "-k", "not killed")
    assert out.returncode == 1
    assert "sandbox kept at" not in out.stdout
    assert os.listdir(root) == left


def test_a_killed_test_leaves_an_orphan_the_next_run_reclaims(suite, root):
    out = run(suite, root, "-k", "killed", kill=True)
    assert out.returncode == -signal.SIGKILL, out.stdout
    left = os.listdir(root)
    assert len(left) == 1 and "test_killed" in left[0], left
    path = root / left[0]
    assert (path / "half-done").exists()
    # Its lease names the test's own file and line, not the plugin's.
    record = json.loads((path / ".sandkeeper-lease").read_text())
    source = suite / "test_suite.py"
    line = next(
        n for n, text in enumerate(source.read_text().splitlines(), 1) if "def test_killed" in text
    )
    assert record["site"] == f"{source}:{line}", record
    if os.environ.get("SK_PY_NAMESPACE") == "1":
        assert sandkeeper.scan(root, entries=True).find(path).state == "orphaned"
    out = run(suite, root, "-k", "killed")
    assert out.returncode == 0, out.stdout
    assert os.listdir(root) == []


def test_disabled_with_p_no_sandkeeper(suite, root):
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:sandkeeper", "-k", "pass"],
        cwd=suite,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert out.returncode == 1, out.stdout
    assert "fixture 'sandbox' not found" in out.stdout


@needs_namespace
def test_basetemp_in_a_leased_sandbox(suite, root):
    out = run(suite, root, "--sandkeeper-basetemp", "-s", "-k", "tmp_path")
    assert out.returncode == 0, out.stdout
    line = next(l for l in out.stdout.splitlines() if "TMP_PATH" in l)
    assert line.split("TMP_PATH ")[1].startswith(str(root)), line
    assert os.listdir(root) == []
    # A killed pytest leaves its basetemp as an orphan: reclaimable at once.
    killed = run(suite, root, "--sandkeeper-basetemp", "-k", "killed or tmp_path", kill=True)
    assert killed.returncode == -signal.SIGKILL, killed.stdout
    assert len(os.listdir(root)) == 2  # the killed test's sandbox and the basetemp
    report = sandkeeper.reap(root, grace=0)
    assert len(report.removed) == 2, report
    assert os.listdir(root) == []
