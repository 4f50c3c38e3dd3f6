"""The pytest plugin on a small suite: a passing, a failing and a killed test;
and its per-test leak report (--sandkeeper-report-dir) on a suite that leaks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import sandkeeper
from conftest import cli, needs_namespace

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


def write_suite(tmp_path, files):
    """A pytest suite in `tmp_path/suite`: each file of `files` (name to
    text), dedented."""
    path = tmp_path / "suite"
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def suite(tmp_path):
    return write_suite(tmp_path, SUITE)


def run(suite, root, *args, kill=False, tmpdir=None):
    env = dict(os.environ, SK_KILL="1" if kill else "0", PYTHONDONTWRITEBYTECODE="1")
    env.pop("SANDKEEPER_KEEP", None)
    if tmpdir is not None:
        for var in ("TMPDIR", "TMP", "TEMP", "TEMPDIR"):
            env[var] = str(tmpdir)
    # (`--opt=value`: pytest counts an existing path given as an argument
    # of its own when it picks the rootdir.)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--sandkeeper-root={root}", *args],
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


# --- Per-test leak records -----------------------------------------------------

LEAK_SUITE = {
    "pytest.ini": "[pytest]\n",
    "test_leaks.py": """
        import os, tempfile

        import pytest

        @pytest.fixture(scope="module")
        def shared():
            # Wider than a test: made in the session's TMPDIR, not charged
            # to the test that happened to set it up first.
            path = tempfile.mkdtemp(prefix="shared-")
            yield path
            os.rmdir(path)

        def test_leaks_a_file_and_a_dir(shared):
            tmp = tempfile.gettempdir()
            assert tmp == os.environ["TMPDIR"] == os.environ["TMP"] == os.environ["TEMP"]
            with open(os.path.join(tmp, "leak.log"), "wb") as f:
                f.write(b"x" * 10000)
            os.mkdir(os.path.join(tempfile.gettempdir(), "cache"))

        def test_leaks_nothing(tmp_path, sandbox):
            print("TEST_TMPDIR", os.environ.get("TMPDIR"), tempfile.gettempdir())
            (tmp_path / "a.txt").write_text("in pytest's basetemp: not the test's leak")
            (sandbox.path / "b.txt").write_text("removed with the fixture")
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "f"), "w").close()

        def test_fails_and_leaks(shared):
            os.mkdir(os.path.join(tempfile.gettempdir(), "evidence"))
            assert False, "fails on purpose"
    """,
}


@pytest.fixture
def leak_suite(tmp_path):
    return write_suite(tmp_path, LEAK_SUITE)


@pytest.fixture
def real_tmp(tmp_path):
    """The TMPDIR the inner pytest runs with (empty)."""
    path = tmp_path / "real-tmp"
    path.mkdir()
    return path


def printed_tmpdir(stdout):
    """What test_leaks_nothing printed (-s): TEST_TMPDIR $TMPDIR gettempdir()."""
    line = next(l for l in stdout.splitlines() if "TEST_TMPDIR " in l)
    return line[line.index("TEST_TMPDIR "):]


def report_json(records):
    out = subprocess.run(cli() + ["report", "--json", str(records)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def test_report_dir_records_each_test_and_report_names_the_leakers(leak_suite, root, real_tmp, tmp_path):
    records = tmp_path / "leaks"
    out = run(leak_suite, root, f"--sandkeeper-report-dir={records}", "--sandkeeper-basetemp", tmpdir=real_tmp)
    assert out.returncode == 1, out.stdout
    assert "2 passed" in out.stdout and "1 failed" in out.stdout, out.stdout
    # One record per test, in a directory made for them (0700).
    assert len(list(records.glob("*.json"))) == 3
    assert records.stat().st_mode & 0o777 == 0o700
    status, doc = report_json(records)
    assert status == 1, doc
    assert (doc["runs"], doc["tests"], doc["leaking_tests"]) == (3, 3, 2), doc
    leaks = {leak["test_name"]: leak for leak in doc["leaks"]}
    assert set(leaks) == {"test_leaks.py::test_leaks_a_file_and_a_dir", "test_leaks.py::test_fails_and_leaks"}
    both = leaks["test_leaks.py::test_leaks_a_file_and_a_dir"]
    failed = leaks["test_leaks.py::test_fails_and_leaks"]
    # (2: the module fixture's directory is not the test's.)
    assert (both["entries"], both["failed_runs"], both["runs"]) == (2, 0, 1), both
    assert {f["pattern"]: f["count"] for f in both["families"]} == {"leak.log": 1, "cache": 1}
    assert both["disk_bytes"] >= 10000
    assert (failed["entries"], failed["failed_runs"]) == (1, 1), failed
    assert [(f["pattern"], f["count"]) for f in failed["families"]] == [("evidence", 1)]
    assert doc["leaks"][0]["test_name"] == both["test_name"]  # worst first: most bytes
    for leak in (both, failed):
        assert leak["binary_id"] == "pytest:suite"
        assert (leak["daemons"], leak["daemons_killed"]) == (0, 0)
        assert leak["command"][0] == "pytest" and f"--sandkeeper-report-dir={records}" in leak["command"]
    # The text report says the same.
    text = subprocess.run(cli() + ["report", str(records)], stdout=subprocess.PIPE, text=True)
    assert text.returncode == 1
    assert "pytest:suite test_leaks.py::test_leaks_a_file_and_a_dir: 2 entries" in text.stdout, text.stdout
    assert "2 of 3 tests leaked: 3 entries" in text.stdout, text.stdout
    # Every test's TMPDIR is gone, and nothing reached the real one.
    assert os.listdir(root) == []
    assert os.listdir(real_tmp) == []


def test_report_dir_under_xdist_records_each_test_once(leak_suite, root, real_tmp, tmp_path):
    """pytest-xdist: every worker writes its tests' records into the one
    directory, each test once, and the report reads as a serial run's."""
    import xdist  # noqa: F401 - tests/wheel.rs installs pytest-xdist

    records = tmp_path / "leaks"
    out = run(
        leak_suite, root, "-n", "2", f"--sandkeeper-report-dir={records}", "--sandkeeper-basetemp", tmpdir=real_tmp
    )
    assert out.returncode == 1, out.stdout
    assert "2 passed" in out.stdout and "1 failed" in out.stdout, out.stdout
    assert "created: 2/2 workers" in out.stdout, out.stdout
    assert len(list(records.glob("*.json"))) == 3
    assert records.stat().st_mode & 0o777 == 0o700
    status, doc = report_json(records)
    assert status == 1, doc
    assert (doc["runs"], doc["tests"], doc["leaking_tests"]) == (3, 3, 2), doc
    assert {l["test_name"]: (l["entries"], l["failed_runs"]) for l in doc["leaks"]} == {
        "test_leaks.py::test_leaks_a_file_and_a_dir": (2, 0),
        "test_leaks.py::test_fails_and_leaks": (1, 1),
    }
    # The workers' TMPDIRs and the shared basetemp are gone; nothing
    # reached the real TMPDIR.
    assert os.listdir(root) == []
    assert os.listdir(real_tmp) == []


def test_report_dir_keeps_a_failing_tests_tmpdir_and_adds_up_runs(leak_suite, root, real_tmp, tmp_path):
    records = tmp_path / "leaks"
    first = run(leak_suite, root, f"--sandkeeper-report-dir={records}", "-s", tmpdir=real_tmp)
    assert first.returncode == 1, first.stdout
    # The test ran in a TMPDIR of its own, for os.environ and tempfile alike.
    line = printed_tmpdir(first.stdout)
    env_tmp, tempfile_tmp = line.split()[1:3]
    assert env_tmp == tempfile_tmp and env_tmp.startswith(str(root) + "/pytest-tmp-"), line
    # pytest's own basetemp stays where pytest puts it (the real TMPDIR).
    assert [p for p in os.listdir(real_tmp) if not p.startswith("pytest-of-")] == []
    out = run(leak_suite, root, f"--sandkeeper-report-dir={records}", "--sandkeeper-keep=on-failure", tmpdir=real_tmp)
    assert out.returncode == 1, out.stdout
    left = os.listdir(root)
    assert len(left) == 1 and "test_fails_and_leaks" in left[0], left
    kept = root / left[0]
    assert f"TMPDIR kept at {kept}" in out.stdout, out.stdout
    assert sorted(p.name for p in kept.iterdir()) == [".sandkeeper-lease", "evidence"]
    _, doc = report_json(records)
    assert (doc["runs"], doc["tests"], doc["leaking_tests"]) == (6, 3, 2), doc
    assert {l["test_name"]: (l["runs"], l["entries"]) for l in doc["leaks"]} == {
        "test_leaks.py::test_leaks_a_file_and_a_dir": (2, 4),
        "test_leaks.py::test_fails_and_leaks": (2, 2),
    }


def test_an_unusable_report_dir_is_a_usage_error(leak_suite, root, real_tmp, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    for bad, said in [(a_file, "not a directory"), (shared, "others may write")]:
        out = run(leak_suite, root, f"--sandkeeper-report-dir={bad}", tmpdir=real_tmp)
        assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout
        error = next(l for l in out.stdout.splitlines() if l.startswith("ERROR: "))
        assert f"--sandkeeper-report-dir: cannot write leak records into {bad}" in error, error
        assert said in error and "only you may write" in error, error
        assert "passed" not in out.stdout and "failed" not in out.stdout
    assert os.listdir(shared) == [] and a_file.read_text() == ""
    # The ini option, relative to the ini file, by the same rule.
    (leak_suite / "pytest.ini").write_text("[pytest]\nsandkeeper_report_dir = ../shared\n")
    out = run(leak_suite, root, tmpdir=real_tmp)
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout
    assert f"sandkeeper_report_dir in {leak_suite / 'pytest.ini'}: cannot write leak records into" in out.stdout
    (leak_suite / "pytest.ini").write_text("[pytest]\nsandkeeper_report_dir = ../from-ini\n")
    out = run(leak_suite, root, tmpdir=real_tmp)
    assert out.returncode == 1 and "2 passed" in out.stdout, out.stdout
    assert len(list((tmp_path / "from-ini").glob("*.json"))) == 3


def test_a_record_that_cannot_be_written_warns_and_fails_no_test(tmp_path, root, real_tmp, monkeypatch):
    suite = write_suite(tmp_path, {
        "pytest.ini": "[pytest]\n",
        "test_gone.py": """
            import os, shutil, tempfile

            def test_removes_the_report_dir():
                tempfile.mkdtemp(prefix="app-")
                shutil.rmtree(os.environ["SK_RECORDS"])

            def test_after():
                pass
        """,
    })
    records = tmp_path / "leaks"
    monkeypatch.setenv("SK_RECORDS", str(records))
    # Even where warnings are errors: then it is said on stderr.
    for strict in ([], ["-W", "error"]):
        out = run(suite, root, f"--sandkeeper-report-dir={records}", *strict, tmpdir=real_tmp)
        assert out.returncode == 0, out.stdout
        assert "2 passed" in out.stdout, out.stdout
        assert out.stdout.count("no leak record for this test: cannot write a record into the report directory") == 2, out.stdout
        if not strict:
            assert "SandkeeperReportWarning" in out.stdout, out.stdout
        # The TMPDIRs went all the same.
        assert os.listdir(root) == []


def test_without_the_option_nothing_changes(leak_suite, root, real_tmp):
    out = run(leak_suite, root, "-s", tmpdir=real_tmp)
    assert out.returncode == 1, out.stdout
    line = printed_tmpdir(out.stdout)
    assert line.split()[1:3] == [str(real_tmp), str(real_tmp)], line
    # The leaks land in the real TMPDIR, as without the plugin.
    left = sorted(os.listdir(real_tmp))
    assert {"leak.log", "cache", "evidence"} <= set(left), left
    assert "TMPDIR kept at" not in out.stdout


def test_leak_record_dir_measures_a_sandbox(root, tmp_path):
    records = sandkeeper.LeakRecordDir(tmp_path / "leaks")
    assert records.path == tmp_path / "leaks"
    with sandkeeper.Sandbox(root=root) as sb:
        (sb.path / "app-1").mkdir()
        (sb.path / "app-2").write_text("x")
        path = records.record(sb, test_name="t.py::test_x", binary_id="pytest:demo", command=["pytest", "-x"], exit_code=1)
        clean = sandkeeper.Sandbox(root=root)
        records.record(clean, test_name="t.py::test_clean")
        clean.close()
        with pytest.raises(RuntimeError, match="finished"):
            records.record(clean, test_name="t.py::test_clean")
        with pytest.raises(TypeError):
            records.record(str(sb.path), test_name="t.py::test_x")
    assert path.parent == records.path and path.suffix == ".json"
    record = json.loads(path.read_text())
    assert record["schema"] == "sandkeeper.test-leak/v1"
    assert (record["binary_id"], record["test_name"], record["command"]) == ("pytest:demo", "t.py::test_x", ["pytest", "-x"])
    assert (record["exit_code"], record["signal"], record["entries"]) == (1, None, 2)
    assert [(f["pattern"], f["count"]) for f in record["families"]] == [("app-*", 2)]
    assert (record["daemons_stopped"], record["daemons_killed"]) == (0, 0)
    status, doc = report_json(records.path)
    assert status == 1 and [l["test_name"] for l in doc["leaks"]] == ["t.py::test_x"], doc
    with pytest.raises(sandkeeper.UnsafeRoot, match="not a directory"):
        sandkeeper.LeakRecordDir(path)
