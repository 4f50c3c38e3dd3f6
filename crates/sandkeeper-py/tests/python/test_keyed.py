"""Keyed sandboxes across processes, and one implementation of states."""

from __future__ import annotations

import os
import signal
import subprocess

import sandkeeper
from conftest import cli_states, needs_namespace, python

HOLDER = """
import sys, time
import sandkeeper
sb = sandkeeper.Sandbox(tag="bottle", root=sys.argv[1], keyed=True)
(sb.path / "marker").write_text("from the first process")
print(sb.path, flush=True)
time.sleep(600)
"""


def test_keyed_reclaim_after_sigkill_across_two_processes(root):
    first = python(HOLDER, str(root))
    path = first.stdout.readline().strip()
    first.kill()
    first.wait()
    assert os.path.exists(os.path.join(path, "marker"))
    second = python(
        """
        import sys
        import sandkeeper
        with sandkeeper.Sandbox(tag="bottle", root=sys.argv[1], keyed=True) as sb:
            print(sb.path, sorted(p.name for p in sb.path.iterdir() if p.name != ".sandkeeper-lease"), flush=True)
        """,
        str(root),
    )
    out, _ = second.communicate()
    assert second.returncode == 0
    assert out.split(None, 1) == [path, "[]\n"], "the same name, reclaimed empty"
    assert os.listdir(root) == []


def test_a_live_keyed_name_gives_the_next_slot(root):
    with sandkeeper.Sandbox(tag="k", root=root, keyed=True) as a:
        with sandkeeper.Sandbox(tag="k", root=root, keyed=True) as b:
            assert a.path != b.path
            assert b.path.name == a.path.name + "-2"
    assert os.listdir(root) == []


@needs_namespace
def test_python_sandbox_and_rust_cli_agree_on_every_state(root):
    live = sandkeeper.Sandbox(tag="live", root=root)
    first = python(HOLDER, str(root))
    orphaned = first.stdout.readline().strip()
    first.kill()
    first.wait()
    (root / "idle").mkdir()
    (root / "busy").mkdir()
    busy = subprocess.Popen(["sleep", "600"], cwd=root / "busy")
    try:
        report = sandkeeper.scan(root, entries=True)
        ours = {e.name: e.state for e in report.roots[0].entries}
        assert ours == {
            live.path.name: "live",
            os.path.basename(orphaned): "orphaned",
            "idle": "idle",
            "busy": "in_use",
        }
        assert cli_states(root) == ours
    finally:
        busy.kill()
        busy.wait()
        live.close()
    # And the reap of either takes the same: the orphan (unmanaged ones
    # only by a rule).
    report = sandkeeper.reap(root, grace=0, match="idle")
    assert sorted(p.name for p in report.removed_paths()) == sorted(
        [os.path.basename(orphaned), "idle"]
    )
    assert report.skipped_at(root / "busy").reason_code == "not_selected"
    os.rmdir(root / "busy")
