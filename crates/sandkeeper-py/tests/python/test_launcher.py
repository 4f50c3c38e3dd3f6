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
from conftest import cli, needs_namespace, python

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


def default_termination_signals() -> None:
    """preexec_fn: the termination signals at their default action, so a
    suite run under `nohup` (SIGHUP ignored, and inherited) does not make
    the launcher ignore the SIGHUP a test sends (teardown_on_signals keeps
    an ignored signal ignored, on purpose)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


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
    launcher = python(SIGNALLED.format(vm=VM), str(root), preexec_fn=default_termination_signals)
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


# --- Every ending, end to end (issue 27's "done when") -----------------------

# The recipe of docs/launchers.md, for real: a sparse 1 GiB ext4 image
# mounted on an autoclear loop device (`mount -o loop`) in the launcher's
# own mount namespace, and a stand-in VM holding a file inside the mount.
RECIPE = """
import contextlib, subprocess, sys, time
import sandkeeper

sandkeeper.teardown_on_signals()
root, ending = sys.argv[1], sys.argv[2]
with contextlib.ExitStack() as stack:
    sb = stack.enter_context(sandkeeper.Sandbox(tag="vm", root=root))
    sb.defer(lambda: print("TEARDOWN done", flush=True))  # runs last
    image = sb.path / "rootfs.img"
    with open(image, "wb") as f:
        f.truncate(1 << 30)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mnt = sb.path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    sb.defer(lambda: subprocess.run(["umount", str(mnt)], check=True))
    (mnt / "state").write_text("booted")
    with open(mnt / "state") as state:
        vm = sb.spawn(["sleep", "600"], stdin=state)
    print("READY", sb.path, vm.pid, flush=True)
    if ending == "error":
        raise RuntimeError("the VM failed to boot")
    if ending == "exit":  # no unwinding: no `with` exit, no teardown
        import os
        os._exit(3)
    if ending == "abort":
        import os, resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file here
        os.abort()
    if ending == "hog":
        taken = []
        while True:
            taken.append(bytearray(1 << 20))
    if ending == "wait":
        time.sleep(600)
"""


class MemoryBox:
    """A memory cgroup (v2 or v1) of `limit` bytes, removed by `remove`."""

    def __init__(self, limit: int):
        own = open("/proc/self/cgroup").read().splitlines()
        name = f"sandkeeper-pytest-{os.getpid()}"
        controllers = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(controllers) and "memory" in open(controllers).read().split():
            at = next((l[3:] for l in own if l.startswith("0::")), "/")
            self.path = os.path.join("/sys/fs/cgroup", at.lstrip("/"), name)
            os.mkdir(self.path)
            self._write("memory.max", limit)
            self._write("memory.swap.max", 0, optional=True)
        elif os.path.isdir("/sys/fs/cgroup/memory"):
            at = next((l.split(":memory:", 1)[1] for l in own if ":memory:" in l), "/")
            self.path = os.path.join("/sys/fs/cgroup/memory", at.lstrip("/"), name)
            os.mkdir(self.path)
            self._write("memory.limit_in_bytes", limit)
            self._write("memory.memsw.limit_in_bytes", limit, optional=True)
        else:
            raise OSError("no memory cgroup controller (neither v2 nor v1) is mounted")

    def _write(self, name: str, value: int, optional: bool = False) -> None:
        try:
            with open(os.path.join(self.path, name), "w") as f:
                f.write(str(value))
        except OSError:
            if not optional:
                raise

    def oom_kills(self) -> int:
        total = 0
        for name in ("memory.events", "memory.oom_control"):
            try:
                text = open(os.path.join(self.path, name)).read()
            except OSError:
                continue
            total += sum(int(l.split()[1]) for l in text.splitlines() if l.startswith("oom_kill "))
        return total

    def wrapper(self) -> list:
        return ["sh", "-c", f"echo $$ > '{self.path}/cgroup.procs' && exec \"$@\"", "sh"]

    def remove(self) -> None:
        import time

        deadline = time.monotonic() + 10
        while True:
            try:
                os.rmdir(self.path)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def start_recipe(root, ending, wrapper=()):
    """The recipe in a launcher process of its own mount namespace; its
    Popen, run dir and VM pid."""
    cmd = [*wrapper, "unshare", "--mount", "--propagation", "private"]
    cmd += [sys.executable, "-c", RECIPE, str(root), ending]
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=default_termination_signals)
    line = launcher.stdout.readline().split()
    assert line and line[0] == "READY", line
    return launcher, line[1], int(line[2])


def alive(pid: int) -> bool:
    """Running and not a zombie (reaping the zombies reparented to us:
    we are PID 1 of the namespace)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def loop_backed_in(path: str) -> bool:
    for dev in os.listdir("/sys/block"):
        try:
            backing = open(f"/sys/block/{dev}/loop/backing_file").read().strip()
        except OSError:
            continue
        if backing.startswith(path.rstrip("/") + "/"):
            return True
    return False


def eventually(what, check, seconds=30.0):
    import time

    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


@needs_namespace
@pytest.mark.parametrize(
    "ending", ["clean", "error", "exit", "abort", "SIGTERM", "SIGINT", "SIGHUP", "SIGKILL", "OOM"]
)
def test_every_ending_leaves_nothing_after_one_reap(root, ending):
    live, live_run, live_vm = start_recipe(root, "wait")
    memory = None
    try:
        if ending == "OOM":
            try:
                memory = MemoryBox(160 << 20)
            except OSError as e:
                if os.environ.get("CI"):
                    raise
                pytest.skip(f"cannot make a memory cgroup: {e}")
            launcher, run, vm = start_recipe(root, "hog", memory.wrapper())
        elif ending in ("clean", "error", "exit", "abort"):
            launcher, run, vm = start_recipe(root, ending)
        else:
            launcher, run, vm = start_recipe(root, "wait")
            launcher.send_signal(getattr(signal, ending))
        rest = launcher.stdout.read()
        launcher.wait(timeout=60)
        said = f"{ending}: exit {launcher.returncode}, said {rest!r}"
        tore_down = "TEARDOWN done" in rest
        if ending == "clean":
            assert launcher.returncode == 0 and tore_down, said
        elif ending == "error":
            assert launcher.returncode == 1 and tore_down, said
        elif ending in ("SIGTERM", "SIGHUP"):
            assert launcher.returncode == 128 + getattr(signal, ending) and tore_down, said
        elif ending == "SIGINT":
            # KeyboardInterrupt unwinds, then the interpreter ends by SIGINT.
            assert launcher.returncode == -signal.SIGINT and tore_down, said
        elif ending == "exit":
            assert launcher.returncode == 3 and not tore_down, said
        elif ending == "abort":
            assert launcher.returncode == -signal.SIGABRT and not tore_down, said
        else:
            assert launcher.returncode == -signal.SIGKILL and not tore_down, said
        if ending == "OOM":
            assert memory.oom_kills() > 0, f"{said}: the cgroup counted no OOM kill"
        if tore_down:
            assert not os.path.exists(run), f"{said}: the teardown left the run dir"
        # No process of its own is left, however it ended.
        eventually(f"{ending}: the VM to be gone", lambda: not alive(vm))
        # The kernel undid the mount with the launcher's namespace and
        # detached the autoclear loop device.
        eventually(f"{ending}: the loop device to go", lambda: not loop_backed_in(run))
        # One reap, default options (the CLI, as an operator's timer runs it).
        out = subprocess.run(cli() + ["reap", str(root)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert out.returncode == 0, out.stdout
        assert not os.path.exists(run), f"{said}\nreap: {out.stdout}"
        # The live launcher beside lost nothing: its dir, its VM, its mount.
        assert os.listdir(root) == [os.path.basename(live_run)], out.stdout
        assert alive(live_vm)
        assert os.path.exists(f"/proc/{live.pid}/root{live_run}/mnt/state")
    finally:
        live.send_signal(signal.SIGTERM)
        rest = live.stdout.read()
        live.wait(timeout=60)
        if memory is not None:
            memory.remove()
    assert "TEARDOWN done" in rest
    assert os.listdir(root) == []


@needs_namespace
def test_a_child_spawned_from_a_worker_thread_outlives_the_thread_not_the_launcher(root):
    code = """
    import subprocess, sys, threading, time
    import sandkeeper
    sb = sandkeeper.Sandbox(tag="vm", root=sys.argv[1])
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("vm", sb.spawn(["sleep", "600"])))
    worker.start()
    worker.join()
    time.sleep(0.3)  # the worker thread is gone
    print(sb.path, out["vm"].pid, out["vm"].poll(), flush=True)
    time.sleep(600)
    """
    launcher = python(code, str(root))
    path, vm, status = launcher.stdout.readline().split()
    vm = int(vm)
    assert status == "None", "the child died with the thread that spawned it"
    assert alive(vm)
    launcher.kill()
    launcher.wait()
    eventually("the VM to die with its launcher", lambda: not alive(vm))
    out = subprocess.run(cli() + ["reap", str(root)], stdout=subprocess.PIPE, text=True)
    assert out.returncode == 0 and not os.path.exists(path), out.stdout
