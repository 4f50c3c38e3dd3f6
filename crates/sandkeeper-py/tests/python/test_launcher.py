"""The second incident's launcher: an ExitStack that makes a run dir with a
sparse 1 GiB rootfs.ext4 and starts a long-lived child holding it open."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

import sandkeeper
from conftest import needs_namespace, python

# The "VM": holds the disk image open until killed.
VM = "import sys, time; f = open(sys.argv[1], 'rb'); print('ready', flush=True); time.sleep(600)"


def launch(root, order, fail=False):
    """The launcher pattern; `order` records what the teardown saw."""
    with contextlib.ExitStack() as stack:
        sb = stack.enter_context(sandkeeper.Sandbox(tag="vm", root=root))
        run = sb.path / "run" / "bottle-1"
        run.mkdir(parents=True)
        disk = run / "rootfs.ext4"
        with open(disk, "wb") as f:
            f.truncate(1 << 30)  # sparse
        holder = {}
        # Registered first, so it runs after the child is stopped and
        # before the directory goes.
        sb.defer(lambda: order.append((holder["vm"].poll() is not None, disk.exists())))
        vm = sb.spawn([sys.executable, "-c", VM, str(disk)], stdout=subprocess.PIPE)
        holder["vm"] = vm
        assert vm.stdout.readline().strip() == b"ready"
        order.append(("started", sb.path, vm))
        if fail:
            raise RuntimeError("the VM failed to boot")
    return sb.path, vm


def test_clean_exit_removes_the_dir_after_the_child_is_dead(root):
    order = []
    path, vm = launch(root, order)
    assert order[-1] == (True, True), "the child was dead, the disk still there, at teardown"
    assert vm.returncode is not None
    assert not path.exists()
    assert os.listdir(root) == []


def test_exception_inside_removes_the_dir_after_the_child_is_dead(root):
    order = []
    with pytest.raises(RuntimeError, match="failed to boot"):
        launch(root, order, fail=True)
    _, path, vm = order[0]
    assert order[-1] == (True, True)
    assert vm.returncode is not None
    assert not path.exists()
    assert os.listdir(root) == []


LAUNCHER = """
import contextlib, subprocess, sys, time
import sandkeeper
VM = {vm!r}
with contextlib.ExitStack() as stack:
    sb = stack.enter_context(sandkeeper.Sandbox(tag="vm", root=sys.argv[1]))
    disk = sb.path / "rootfs.ext4"
    with open(disk, "wb") as f:
        f.truncate(1 << 30)
    vm = sb.spawn([sys.executable, "-c", VM, str(disk)], stdout=subprocess.PIPE{extra})
    vm.stdout.readline()
    print(sb.path, vm.pid, flush=True)
    time.sleep(600)
"""


def wait_dead(pid, seconds=5.0):
    """Reaps `pid` (our child: we are PID 1 of the namespace) once it is
    dead; its wait status, or None if it still runs after `seconds`."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status
        time.sleep(0.02)
    return None


@needs_namespace
def test_a_killed_launchers_vm_dies_with_it_and_the_next_reap_takes_the_dir(root):
    launcher = python(LAUNCHER.format(vm=VM, extra=""), str(root))
    path, vm_pid = launcher.stdout.readline().split()
    vm_pid = int(vm_pid)
    launcher.kill()
    launcher.wait()
    # No teardown ran; the kernel killed the VM when its launcher died.
    status = wait_dead(vm_pid)
    if status is None:
        os.kill(vm_pid, signal.SIGKILL)
        os.waitpid(vm_pid, 0)
        pytest.fail("the VM outlived its SIGKILLed launcher")
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    # A reap with the default options (a grace of 60 s): a proven orphan
    # goes at once.
    report = sandkeeper.reap(root)
    assert [str(p) for p in report.removed_paths()] == [path]
    assert os.listdir(root) == []


@needs_namespace
def test_a_vm_meant_to_outlive_its_launcher_keeps_the_dir_live_until_it_ends(root):
    launcher = python(LAUNCHER.format(vm=VM, extra=", die_with_launcher=False"), str(root))
    path, vm_pid = launcher.stdout.readline().split()
    vm_pid = int(vm_pid)
    launcher.kill()
    launcher.wait()
    assert launcher.returncode == -signal.SIGKILL
    try:
        # The launcher is gone; the VM still runs (reparented to us, PID 1).
        # `live`: the VM inherited the lease (spawn's share_lease). In a
        # PID namespace the kernel hides, in /proc/locks, a lock whose
        # locker (the dead launcher) is gone, and the scan (which takes no
        # lock) sees the VM's descriptors instead: `in_use`. Never reapable.
        entry = sandkeeper.scan(root, entries=True).find(path)
        assert entry is not None and entry.state in ("live", "in_use"), entry
        report = sandkeeper.reap(root, grace=0)
        assert report.removed == []
        assert report.skipped_at(path).reason_code in ("live", "in_use")
        assert os.path.isdir(path)
    finally:
        os.kill(vm_pid, signal.SIGKILL)
        os.waitpid(vm_pid, 0)
    entry = sandkeeper.scan(root, entries=True).find(path)
    assert entry.state == "orphaned", entry
    report = sandkeeper.reap(root, grace=0)
    assert [str(p) for p in report.removed_paths()] == [path]
    assert not os.path.exists(path)
    assert os.listdir(root) == []


SIGNALLED = """
import contextlib, subprocess, sys, time
import sandkeeper
sandkeeper.teardown_on_signals()
VM = {vm!r}
with contextlib.ExitStack() as stack:
    sb = stack.enter_context(sandkeeper.Sandbox(tag="vm", root=sys.argv[1]))
    disk = sb.path / "rootfs.ext4"
    with open(disk, "wb") as f:
        f.truncate(1 << 30)
    vm = sb.spawn([sys.executable, "-c", VM, str(disk)], stdout=subprocess.PIPE)
    vm.stdout.readline()
    stack.callback(print, "teardown ran", flush=True)
    print(sb.path, vm.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_termination_signal_tears_down_in_order(root, signame):
    launcher = python(SIGNALLED.format(vm=VM), str(root))
    path, vm_pid = launcher.stdout.readline().split()
    vm_pid = int(vm_pid)
    signum = getattr(signal, signame)
    launcher.send_signal(signum)
    rest = launcher.stdout.read()
    launcher.wait(timeout=30)
    assert "teardown ran" in rest, rest
    # SystemExit(128 + n) for SIGTERM and SIGHUP; SIGINT's
    # KeyboardInterrupt ends the interpreter by the signal itself.
    assert launcher.returncode in (128 + signum, -signum), launcher.returncode
    assert not os.path.exists(path)
    assert os.listdir(root) == []
    # The VM was stopped by the teardown (not left to the kernel).
    with pytest.raises(ProcessLookupError):
        os.kill(vm_pid, 0)
