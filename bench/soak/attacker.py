#!/usr/bin/env python3
"""The soak's attacker and its checker (see run.sh).

  attacker.py attack ROOT SECONDS SEED   (run as uid 65534)
  attacker.py check ROOT MANIFEST GRACE   (run as root, after the soak)

`attack` makes, squats and fills in ROOT for SECONDS, seeded by SEED, and
prints one JSON line per thing it does (the manifest); it then keeps what
it holds open until it gets SIGTERM. `check` reads that manifest and says
whether every reclaimable entry went and nothing held did.
"""

import fcntl, json, os, random, secrets, signal, socket, sys, time

# Bounds: never more than this many entries at once (in the root and in
# our own sandkeeper-<uid>, counted before each step), never more than this
# share of the filesystem filled by us, at most this many squatted
# `.sandkeeper-new-*` names.
MAX_ENTRIES = 300
MAX_FILL_SHARE = 0.92
MAX_NEW_SQUATS = 20


def emit(**kw):
    kw["t"] = time.time()
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def record(fd_tag):
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    start_ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    return {
        "v": 1, "pid": os.getpid(), "start_ticks": start_ticks,
        "boot_id": boot_id, "uid": os.getuid(), "host": socket.gethostname(),
        "created_ms": int(time.time() * 1000), "tag": fd_tag, "cmd": ["soak"],
    }


def sandbox(parent, name, size, rng):
    """A leased sandbox parent/name holding `size` bytes; the locked fd."""
    tmp = os.path.join(parent, ".sandkeeper-new-" + secrets.token_hex(6))
    os.mkdir(tmp, 0o700)
    fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        rec = os.open(".sandkeeper-lease", flags, 0o644, dir_fd=fd)
        os.write(rec, (json.dumps(record("soak")) + "\n").encode())
        os.close(rec)
        data = os.open("data", flags, 0o644, dir_fd=fd)
        os.write(data, rng.randbytes(size))
        os.close(data)
        os.rename(tmp, os.path.join(parent, name))
    except OSError:
        os.close(fd)
        raise
    return fd


def leftover(parent, name, size, rng, age=3600):
    """An unmanaged directory, its newest change `age` seconds ago."""
    path = os.path.join(parent, name)
    os.mkdir(path, 0o755)
    with open(os.path.join(path, "data"), "wb") as f:
        f.write(rng.randbytes(size))
    with open(os.path.join(path, "mark"), "w") as f:
        f.write(name)
    when = time.time() - age
    for p in (os.path.join(path, "data"), os.path.join(path, "mark"), path):
        os.utime(p, (when, when), follow_symlinks=False)
    return path


def squat(root, rng):
    """Takes the tool's names and names like them (each at most once, a
    few `.sandkeeper-new-*` at most)."""
    plants = [
        (".sandkeeper-trash", "dir"),
        (".sandkeeper-trash-0", "symlink"),
        ("sandkeeper-0", "symlink"),
        ("sandkeeper-1000", "dir"),
        (".sandkeeper-lease", "file"),
        (".sandkeeper-restored-x", "file"),
    ]
    news = sum(1 for n in os.listdir(root) if n.startswith(".sandkeeper-new-"))
    if news < MAX_NEW_SQUATS:
        plants.append((".sandkeeper-new-squat-" + secrets.token_hex(6), "dir"))
    if os.environ.get("SOAK_SQUAT_QUARANTINE", "1") != "1":
        plants = [p for p in plants if not p[0].startswith(".sandkeeper-trash")]
    for name, kind in plants:
        path = os.path.join(root, name)
        try:
            if kind == "dir":
                os.mkdir(path, 0o700)
            elif kind == "symlink":
                os.symlink("/etc", path)
            else:
                with open(path, "x") as f:
                    f.write("squatted\n")
            emit(op="squat", path=path, kind=kind)
        except OSError as e:
            emit(op="squat-failed", path=path, error=str(e))


def fs_used_share(root):
    st = os.statvfs(root)
    return 1 - st.f_bavail / st.f_blocks


def attack(root, seconds, seed):
    rng = random.Random(seed)
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    mine = os.path.join(root, "sandkeeper-%d" % os.getuid())
    os.mkdir(mine, 0o700)
    emit(op="userroot", path=mine)
    squat(root, rng)
    held = []  # (kind, path, fd, release_at or None)
    # Permanent holds: entries that a rule would take, but are in use or live.
    for i in range(4):
        path = leftover(root, "leftover-held-%d" % i, 64 << 10, rng)
        fd = os.open(os.path.join(path, "data"), os.O_RDONLY)
        held.append(("held", path, fd, None))
        emit(op="create", kind="held", path=path)
        name = "live-%d" % i
        fd = sandbox(root, name, 64 << 10, rng)
        held.append(("live", os.path.join(root, name), fd, None))
        emit(op="create", kind="live", path=os.path.join(root, name))
    print("READY", file=sys.stderr, flush=True)
    emit(op="ready")
    end = time.time() + seconds
    n = 0
    fills = []
    while time.time() < end and not stopping:
        n += 1
        now = time.time()
        entries = len(os.listdir(root)) + len(os.listdir(mine))
        # Transient holds that end.
        for h in [h for h in held if h[3] is not None and h[3] <= now]:
            os.close(h[2])
            held.remove(h)
            emit(op="release", kind=h[0], path=h[1])
        op = rng.random()
        try:
            if entries >= MAX_ENTRIES:
                pass
            elif op < 0.30:
                # An orphan: a sandbox whose owner let go of it.
                parent = mine if rng.random() < 0.3 else root
                name = "orphan-%d" % n
                fd = sandbox(parent, name, rng.randint(4, 256) << 10, rng)
                os.close(fd)
                emit(op="create", kind="orphan", path=os.path.join(parent, name))
            elif op < 0.55:
                path = leftover(root, "leftover-%d" % n, rng.randint(4, 1024) << 10, rng)
                emit(op="create", kind="leftover", path=path)
            elif op < 0.65:
                # Held for a while, then let go: reclaimable after that.
                path = leftover(root, "leftover-%d" % n, rng.randint(4, 256) << 10, rng)
                fd = os.open(os.path.join(path, "data"), os.O_RDONLY)
                release = now + rng.uniform(1, 30)
                held.append(("transient", path, fd, release))
                emit(op="create", kind="transient", path=path, release_at=release)
            elif op < 0.80:
                # Fill towards (and past) the high watermark with what no
                # rule takes; delete old fills now and then.
                if fs_used_share(root) < MAX_FILL_SHARE and len(fills) < 40:
                    path = os.path.join(root, "fill-%d" % n)
                    with open(path, "wb") as f:
                        f.write(rng.randbytes(rng.randint(256, 2048) << 10))
                    fills.append(path)
                    emit(op="create", kind="fill", path=path)
                elif fills:
                    path = fills.pop(rng.randrange(len(fills)))
                    os.unlink(path)
                    emit(op="delete", kind="fill", path=path)
            elif op < 0.85 and fills:
                path = fills.pop(0)
                os.unlink(path)
                emit(op="delete", kind="fill", path=path)
            elif op < 0.90:
                squat(root, rng)
        except OSError as e:
            emit(op="error", error=str(e))
        time.sleep(rng.uniform(0.02, 0.12))
    emit(op="stopped", steps=n)
    # Keep the holds until told to stop (the check runs meanwhile).
    while not stopping:
        now = time.time()
        for h in [h for h in held if h[3] is not None and h[3] <= now]:
            os.close(h[2])
            held.remove(h)
            emit(op="release", kind=h[0], path=h[1])
        time.sleep(0.2)


def check(root, manifest, grace):
    created, released, deleted, stopped_at = {}, {}, set(), None
    with open(manifest) as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev["op"] == "create":
                created[ev["path"]] = ev
            elif ev["op"] == "release":
                released[ev["path"]] = ev["t"]
            elif ev["op"] == "delete":
                deleted.add(ev["path"])
            elif ev["op"] == "stopped":
                stopped_at = ev["t"]
    if stopped_at is None:
        print("check: the attacker never stopped (no 'stopped' line)")
        return 1
    left, lost, counts = [], [], {}
    for path, ev in created.items():
        kind = ev["kind"]
        counts[kind] = counts.get(kind, 0) + 1
        exists = os.path.lexists(path)
        if kind in ("held", "live"):
            mark = os.path.join(path, "mark" if kind == "held" else "data")
            if not os.path.exists(mark):
                lost.append(path)
        elif kind in ("orphan", "leftover"):
            ready = ev["t"] + (grace if kind == "orphan" else 0)
            if ready <= stopped_at and exists:
                left.append(path)
        elif kind == "transient":
            rel = released.get(path)
            if rel is not None and rel + 0 <= stopped_at and exists:
                left.append(path)
    print("check: created %s" % json.dumps(counts, sort_keys=True))
    print("check: reclaimable entries left: %d" % len(left))
    for p in left[:10]:
        print("  left: %s" % p)
    print("check: held or live entries removed: %d" % len(lost))
    for p in lost[:10]:
        print("  lost: %s" % p)
    return 1 if left or lost else 0


if __name__ == "__main__":
    if sys.argv[1] == "attack":
        attack(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], float(sys.argv[4])))
    else:
        sys.exit("usage: attacker.py attack ROOT SECONDS SEED | check ROOT MANIFEST GRACE")
