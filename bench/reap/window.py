#!/usr/bin/env python3
"""How long a reap keeps entries away from their names (issue 25, item 3).

Run by bench/reap/run.sh (WINDOW=1, the default) inside its private PID
namespace, or alone as root:

    sudo unshare --pid --fork --mount-proc \
        env SANDKEEPER_TRUST_PID_NAMESPACE=1 \
        python3 bench/reap/window.py SANDKEEPER ROOT [ENTRIES] [FILES] [PROCESSES] [HELD]

Makes ENTRIES (5000) old directories of FILES (100) small files each in
ROOT (which must be empty), starts PROCESSES (1000) sleeping processes,
HELD (100) of which work in one of the entries each, and runs

    sandkeeper reap --match 'old-*' --older-than 0s --grace 0s ROOT

while an inotify watcher (as root it can watch the reaper's 0700
quarantine) stamps every name leaving ROOT, coming back to it, and every
pending entry renamed to its condemned name in the quarantine. An entry is
away from its name from its move into the quarantine until it is back
(held) or condemned (nothing held it: from then on it is being deleted,
and the reaper's verdict is given). Prints the distribution of that time
for the held and the removed entries, and checks that every held entry is
intact and every other one gone. Not a test: no timed assertions.
"""

import ctypes
import os
import statistics
import struct
import subprocess
import sys
import threading
import time

IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_ISDIR = 0x40000000
IN_Q_OVERFLOW = 0x4000

libc = ctypes.CDLL(None, use_errno=True)


class Watcher(threading.Thread):
    def __init__(self, root):
        super().__init__(daemon=True)
        self.root = root
        self.fd = libc.inotify_init1(os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.wds = {}
        self.add(root, IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE)
        self.out = {}  # name -> time it left its name
        self.back = {}  # name -> time it came back
        self.condemned = {}  # name -> time it was condemned
        self.overflow = False
        self.stop = False
        # Called once, at the first move: entries start being used after
        # the reap's scan.
        self.late = None

    def add(self, path, mask):
        wd = libc.inotify_add_watch(self.fd, path.encode(), mask)
        if wd >= 0:
            self.wds[wd] = path

    def run(self):
        # Stamps taken as the events come, not when a busy machine gets
        # round to this thread.
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        except OSError:
            pass
        while not self.stop:
            try:
                data = os.read(self.fd, 1 << 20)
            except OSError:
                return
            now = time.monotonic()
            at = 0
            while at + 16 <= len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, at)
                name = data[at + 16 : at + 16 + length].rstrip(b"\0")
                at += 16 + length
                if mask & IN_Q_OVERFLOW:
                    self.overflow = True
                    continue
                where = self.wds.get(wd)
                if where == self.root:
                    if mask & IN_CREATE and mask & IN_ISDIR and name.startswith(b".sandkeeper-trash-"):
                        self.add(os.path.join(self.root, name.decode()), IN_MOVED_FROM)
                    elif mask & IN_MOVED_FROM and name.startswith(b"old-"):
                        self.out.setdefault(name, now)
                        if self.late is not None:
                            self.late()
                            self.late = None
                    elif mask & IN_MOVED_TO and name.startswith(b"old-"):
                        self.back.setdefault(name, now)
                elif where is not None and mask & IN_MOVED_FROM and name.startswith(b"pending-"):
                    # pending-<unique>.<hex of the original name>
                    original = bytes.fromhex(name.rsplit(b".", 1)[-1].decode())
                    self.condemned.setdefault(original, now)


def spread(values):
    if not values:
        return "none"
    values = sorted(values)
    ms = [v * 1000 for v in values]
    return "n=%d median %.1f ms, p99 %.1f ms, max %.1f ms" % (
        len(ms),
        statistics.median(ms),
        ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        ms[-1],
    )


def main():
    sk, root = sys.argv[1], sys.argv[2]
    given = [int(a) for a in sys.argv[3:7]]
    entries, files, processes, held = given + [5000, 100, 1000, 100][len(given) :]
    if os.listdir(root):
        sys.exit(f"window: {root} is not empty")
    try:
        with open("/proc/sys/fs/inotify/max_queued_events", "w") as f:
            f.write("1048576")
    except OSError:
        pass
    old = time.time() - 86400
    for i in range(entries):
        d = os.path.join(root, "old-%05d" % i)
        os.mkdir(d)
        for j in range(files):
            with open(os.path.join(d, "f%03d" % j), "wb") as f:
                f.write(b"x" * 64)
        os.utime(d, (old, old))
    # The held entries are spread over the order the reap takes them in.
    step = max(1, entries // max(1, held))
    held_names = ["old-%05d" % i for i in range(0, entries, step)][:held]
    procs = []
    for i in range(processes):
        cwd = os.path.join(root, held_names[i]) if i < len(held_names) else "/"
        procs.append(subprocess.Popen(["sleep", "3600"], cwd=cwd))
    # Entries later in the reap's order that start being used once the
    # reap has begun to move (after its scan): they are moved, found held
    # and put back, and their time away is the held figure.
    late_names = ["old-%05d" % i for i in range(entries - 1, 0, -step)][: max(1, held // 5)]
    late_names = [n for n in late_names if n not in held_names]
    late_fds = []

    def start_using():
        for n in late_names:
            try:
                late_fds.append(os.open(os.path.join(root, n, "f000"), os.O_RDONLY))
            except OSError:
                pass

    watcher = Watcher(root)
    watcher.late = start_using
    watcher.start()
    begun = time.monotonic()
    reap = subprocess.run(
        [sk, "reap", "--match", "old-*", "--older-than", "0s", "--grace", "0s", root],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    took = time.monotonic() - begun
    time.sleep(0.2)
    watcher.stop = True
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()
    for fd in late_fds:
        os.close(fd)
    late_held = [n for n in late_names if os.path.isdir(os.path.join(root, n))]
    held_names = held_names + late_held
    left = sorted(n for n in os.listdir(root) if n.startswith("old-"))
    intact = all(len(os.listdir(os.path.join(root, n))) == files for n in held_names if n in left)
    away_held = [watcher.back[n] - watcher.out[n] for n in watcher.back if n in watcher.out]
    away_removed = [
        watcher.condemned[n] - watcher.out[n]
        for n in watcher.condemned
        if n in watcher.out and n not in watcher.back
    ]
    print(
        f"window: {entries} entries of {files} files, {processes} processes ({held} holding an entry): "
        f"reap {took:.2f} s (exit {reap.returncode})"
    )
    print(f"window: held entries, away from their names: {spread(away_held)}")
    print(f"window: removed entries, moved to condemned: {spread(away_removed)}")
    every = away_held + away_removed
    print(f"window: WORST {max(every) * 1000 if every else 0:.1f} ms")
    ok = set(left) == set(held_names) and intact
    print(
        f"window: {len(left)} left (held: {len(held_names)}, of which {len(late_held)} of the "
        f"{len(late_names)} first used during the reap ({len(late_fds)} opened in time)), held intact: {intact}"
        + ("" if ok else "  <-- MISMATCH")
        + ("; inotify overflowed, figures incomplete" if watcher.overflow else "")
    )
    if reap.returncode != 0:
        print(reap.stderr[-2000:], file=sys.stderr)
    for n in os.listdir(root):
        subprocess.run(["rm", "-rf", os.path.join(root, n)], check=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
