"""The Sandbox object, bad input, and the CLI from the venv."""

from __future__ import annotations

import datetime
import gc
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import sandkeeper
from conftest import cli, needs_namespace, python


def test_path_is_a_pathlib_path_and_the_dir_goes_on_close(root):
    sb = sandkeeper.Sandbox(tag="app", root=root)
    assert isinstance(sb.path, pathlib.Path) and sb.path.is_dir()
    assert sb.path.parent == root and sb.path.name.startswith("app-")
    assert os.fspath(sb) == str(sb.path)
    sb.close()
    sb.close()  # twice: nothing
    assert sb.closed and not sb.path.exists()


def _recorded_site(sb):
    record = json.loads((sb.path / ".sandkeeper-lease").read_text())
    return record.get("site")


def test_the_recorded_site_is_the_callers_not_the_packages(root):
    sb = sandkeeper.Sandbox(tag="site", root=root); line = sys._getframe().f_lineno
    try:
        assert _recorded_site(sb) == f"{__file__}:{line}"
    finally:
        sb.close()

    def helper():
        return sandkeeper.Sandbox(tag="site", root=root, site="my launcher, job 7")

    sb = helper()
    try:
        assert _recorded_site(sb) == "my launcher, job 7"
    finally:
        sb.close()


def test_defer_runs_last_first_and_close_raises_what_it_raised(root):
    sb = sandkeeper.Sandbox(root=root)
    seen = []
    sb.defer(lambda: seen.append("first"))

    @sb.defer
    def boom():
        seen.append("second")
        raise KeyError("from a deferred callable")

    with pytest.raises(KeyError, match="from a deferred"):
        sb.close()
    assert seen == ["second", "first"]
    assert not sb.path.exists()


def test_keep_and_persist(root):
    sb = sandkeeper.Sandbox(root=root)
    kept = sb.keep()
    assert kept.is_dir() and not (kept / ".sandkeeper-lease").exists()
    kept.rmdir()
    sb = sandkeeper.Sandbox(root=root)
    kept = sb.persist(datetime.timedelta(hours=1))
    assert kept.is_dir()
    report = sandkeeper.reap(root, grace=0, dry_run=True)
    assert report.removed == []
    shutil.rmtree(kept)


def test_on_failure_keeps_when_the_block_raises(root, capfd):
    with pytest.raises(RuntimeError):
        with sandkeeper.Sandbox(root=root, keep="on-failure") as sb:
            raise RuntimeError("x")
    assert sb.path.is_dir()
    assert f"kept sandbox {sb.path}" in capfd.readouterr().err
    with sandkeeper.Sandbox(root=root, keep="on-failure") as ok:
        pass
    assert not ok.path.exists()
    shutil.rmtree(sb.path)


def test_garbage_collection_removes_it(root):
    sb = sandkeeper.Sandbox(root=root)
    path = sb.path
    del sb
    gc.collect()
    assert not path.exists()


@pytest.mark.parametrize("lifetime", [False, True])
def test_interpreter_exit_removes_it(root, lifetime):
    child = python(
        """
        import subprocess, sys
        import sandkeeper
        sb = sandkeeper.Sandbox(root=sys.argv[1], process_lifetime=sys.argv[2] == "1")
        vm = sb.spawn(["sleep", "600"])
        print(sb.path, vm.pid, flush=True)
        sys.exit(0)   # never closed: the atexit fallback
        """,
        str(root),
        "1" if lifetime else "0",
    )
    out, _ = child.communicate()
    assert child.returncode == 0
    path, pid = out.split()
    assert not os.path.exists(path)
    assert not os.path.exists(f"/proc/{pid}"), "the child was stopped and waited for"
    assert os.listdir(root) == []


# --- Bad input: an exception naming the value, never a crash -----------------


def test_bad_tag_names_it(root):
    with pytest.raises(sandkeeper.InvalidInput, match=r'"a/b"') as info:
        sandkeeper.Sandbox(tag="a/b", root=root)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, sandkeeper.SandkeeperError)
    assert info.value.kind == "InvalidInput"


def test_missing_root_names_it(tmp_path):
    missing = tmp_path / "no-such-root"
    with pytest.raises(sandkeeper.UnusableRoot, match="no-such-root") as info:
        sandkeeper.Sandbox(root=missing)
    assert isinstance(info.value, ValueError)
    assert info.value.hint
    with pytest.raises(sandkeeper.SandkeeperError, match="no-such-root"):
        sandkeeper.scan(missing)
    with pytest.raises(sandkeeper.SandkeeperError, match="no-such-root"):
        sandkeeper.reap(missing)


@pytest.mark.parametrize(
    "value, shown",
    [("-1s", "-1s"), (datetime.timedelta(seconds=-5), "timedelta"), (-3, "-3"), ("soon", "soon")],
)
def test_bad_durations_name_the_value(root, value, shown):
    with pytest.raises(ValueError, match=shown):
        sandkeeper.reap(root, older_than=value)
    with pytest.raises(ValueError, match=shown):
        sandkeeper.Sandbox(root=root, keep_for=value)


def test_other_bad_values(root):
    with pytest.raises(ValueError, match="sometimes"):
        sandkeeper.Sandbox(root=root, keep="sometimes")
    with pytest.raises(ValueError, match=r"\["):
        sandkeeper.reap(root, match="[")
    with pytest.raises(ValueError, match="150"):
        sandkeeper.reap(root, target_free="150%")
    with pytest.raises(ValueError, match="-1"):
        sandkeeper.reap(root, keep_last=-1)
    with pytest.raises(ValueError, match="0"):
        sandkeeper.scan(root, ignore_pids=[0])
    with pytest.raises(TypeError):
        sandkeeper.Sandbox(tag=5, root=root)
    with pytest.raises(TypeError):
        sandkeeper.reap(root, older_than=object())
    assert os.listdir(root) == []


def test_every_rust_error_kind_has_its_exception():
    from sandkeeper import _errors, _native

    for kind in _native.error_kinds():
        cls = _errors._BY_KIND[kind]
        assert issubclass(cls, sandkeeper.SandkeeperError) and cls.kind == kind
        assert getattr(sandkeeper, cls.__name__) is cls


# --- The CLI in the same wheel ------------------------------------------------


def test_console_script_version():
    script = os.path.join(os.path.dirname(sys.executable), "sandkeeper")
    out = subprocess.run([script, "--version"], check=True, stdout=subprocess.PIPE, text=True)
    assert out.stdout.strip() == f"sandkeeper {sandkeeper.__version__}"


def test_console_script_is_the_rust_cli(root):
    script = os.path.join(os.path.dirname(sys.executable), "sandkeeper")
    out = subprocess.run([script, "scan", "--json", str(root)], stdout=subprocess.PIPE, text=True)
    assert out.returncode == 0
    assert '"schema": "sandkeeper.scan/v1"' in out.stdout
    bad = subprocess.run(
        [script, "reap", "--older-than", "-1s", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert bad.returncode == 2
    assert "-1s" in bad.stderr


def test_scan_fields_match_the_schema(root):
    with sandkeeper.Sandbox(tag="app", root=root) as sb:
        report = sandkeeper.scan(root, entries=True)
        assert report.schema == "sandkeeper.scan/v1"
        (r,) = report.roots
        assert r.path == root
        entry = r.entry(sb.path.name)
        assert entry.path == sb.path
        assert entry.lease is not None and entry.lease["tag"] == "app"
        assert r.totals.entries == 1
        assert r.groups[0].count == 1
        reap = sandkeeper.reap(root, dry_run=True)
        assert reap.schema == "sandkeeper.reap/v1" and reap.dry_run
        assert reap.skipped[0].path == sb.path


def test_assume_unseen_free_is_asked_for_and_told(root, monkeypatch):
    monkeypatch.delenv("SANDKEEPER_ASSUME_UNSEEN_FREE", raising=False)
    assert sandkeeper.scan(root).assumes_unseen_free is False
    assert sandkeeper.scan(root, assume_unseen_free=True).assumes_unseen_free is True
    assert sandkeeper.reap(root, dry_run=True, assume_unseen_free=True).assumes_unseen_free
    monkeypatch.setenv("SANDKEEPER_ASSUME_UNSEEN_FREE", "1")
    assert sandkeeper.scan(root).assumes_unseen_free is True
    # One rule with the CLI (issue 29): False is no veto on the environment.
    assert sandkeeper.scan(root, assume_unseen_free=False).assumes_unseen_free is True
    monkeypatch.setenv("SANDKEEPER_ASSUME_UNSEEN_FREE", "yes")
    with pytest.raises(sandkeeper.InvalidInput, match="yes"):
        sandkeeper.scan(root)
    with pytest.raises(sandkeeper.InvalidInput, match="yes"):
        sandkeeper.reap(root, dry_run=True)
    with pytest.raises(TypeError):
        sandkeeper.scan(root, assume_unseen_free="no")


def test_the_module_docstring_example_runs():
    import doctest

    result = doctest.testmod(sandkeeper)
    assert result.attempted > 0 and result.failed == 0


# --- One rule, both faces (issue 29) -------------------------------------------


def _cli_refusal(args, env=None):
    """`sandkeeper ARGS`: its exit status and its error line (without
    `error: `)."""
    out = subprocess.run(cli() + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = next((l for l in out.stderr.splitlines() if l.startswith("error: ")), "")
    return out.returncode, first[len("error: "):]


@pytest.mark.parametrize("how", ["filesystem root", "same twice", "nested", "nested by a link"])
def test_bad_roots_are_refused_alike_by_python_and_the_cli(root, how):
    inner = root / "inner"
    inner.mkdir()
    (root / "link").symlink_to(inner)
    roots = {
        "filesystem root": ["/"],
        "same twice": [str(root), str(root)],
        "nested": [str(root), str(inner)],
        "nested by a link": [str(inner), str(root / "link")],
    }[how]
    # (Python's scan once opened roots by its own code: none of these was
    # refused.)
    with pytest.raises(sandkeeper.InvalidInput) as raised:
        sandkeeper.scan(roots)
    assert _cli_refusal(["scan", *roots]) == (2, raised.value.message)
    # A reap refuses a root that is a link before anything else, alike.
    with pytest.raises(sandkeeper.SandkeeperError) as raised:
        sandkeeper.reap(roots, dry_run=True)
    assert _cli_refusal(["reap", "--dry-run", *roots]) == (2, raised.value.message)


def test_the_in_use_switches_combine_alike_in_python_and_the_cli(root, monkeypatch):
    env = dict(os.environ, SANDKEEPER_ASSUME_UNSEEN_FREE="1")
    monkeypatch.setenv("SANDKEEPER_ASSUME_UNSEEN_FREE", "1")
    # The environment turns it on whatever the argument says: False is not
    # a veto (the CLI has no flag to say no either).
    for given in (None, False, True):
        assert sandkeeper.scan(root, assume_unseen_free=given).assumes_unseen_free is True
    doc = json.loads(subprocess.run(cli() + ["scan", "--json", str(root)], stdout=subprocess.PIPE, text=True, env=env, check=True).stdout)
    assert doc["assumes_unseen_free"] is True
    # A bad value is refused alike, even when the argument says yes.
    monkeypatch.setenv("SANDKEEPER_ASSUME_UNSEEN_FREE", "yes")
    env["SANDKEEPER_ASSUME_UNSEEN_FREE"] = "yes"
    with pytest.raises(sandkeeper.InvalidInput) as raised:
        sandkeeper.scan(root, assume_unseen_free=True)
    status, said = _cli_refusal(["scan", "--assume-unseen-free", str(root)], env=env)
    assert (status, said) == (2, raised.value.message)


@needs_namespace
def test_what_could_not_be_seen_is_warned_in_the_commands_words(root):
    # In the suite's PID namespace, trusted (SANDKEEPER_TRUST_PID_NAMESPACE=1):
    # the processes outside it are assumed to use nothing, and every face
    # says so before anything else.
    with pytest.warns(sandkeeper.SandkeeperWarning) as recorded:
        report = sandkeeper.scan(root)
    said = [str(w.message) for w in recorded]
    assert said and report.warnings == said
    assert any("assumed to use nothing (trust_pid_namespace=True)" in w for w in said), said
    with pytest.warns(sandkeeper.SandkeeperWarning):
        assert sandkeeper.reap(root, dry_run=True).warnings == said
    out = subprocess.run(cli() + ["scan", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    told = [l[len("warning: "):] for l in out.stderr.splitlines() if l.startswith("warning: ")]
    # The same lines; only the switch is named the command's way.
    assert told == [w.replace("trust_pid_namespace=True", "--trust-pid-namespace") for w in said], out.stderr
