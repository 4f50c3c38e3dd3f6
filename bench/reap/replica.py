#!/usr/bin/env python3
"""Builds a replica of the incident's /tmp (issue 14) for the reap benchmark.

At --scale 0.1 (the default) it is about the tree the issue measured:
~5,100 top-level entries, ~78k inodes, ~1.8 GiB; scale 1 is ten times that
(~51k entries, ~780k inodes, ~18 GiB; pass --bytes-per-file to build it in
less RAM). The families of the incident report, with counts proportional to
the scale:

  app-235-<pid>          1600  scaffolded projects with a built cargo-like
                               target/ (deps, .fingerprint, build scripts,
                               incremental), the binary and the rlib at the
                               top of target/debug hard-linked to deps/, a
                               .git, a symlink
  cargo-home-<rand>       800  registry-cache trees (cache/*.crate, src/,
                               index/.cache)
  app-<word>-<pid>      12000  small test sandboxes (a dozen words)
  aura-235-<pid>         7600
  .tmp<6 alnum>          7000  Rust tempfile dirs
  tmp<8>                 5000  Python tempfile dirs
  rust_out.<6>           3000  rustdoc leftovers
  rustc<6>               3000
  go-build<digits>       2000
  sk-test-<pid>-<n>      2000
  pymp-<8>               1500
  npm-<pid>-<hex>        1500
  systemd-private-...     600  systemd-private-<hex32>-<svc>-<6>
  vm-run-<pid>             30  each a 1 GiB sparse disk image (truncate)
  top-level files        3500  .tmp<6>, tmp<8>.json, <word>-<pid>.log, ...

Every path gets an old mtime (2 to 30 days, per top-level entry, contents
included, directories set after their contents), so `--older-than` and
`--grace` pass. Deterministic for a given seed (names, sizes, contents).

usage: replica.py DIR [--scale 0.1] [--seed 14] [--bytes-per-file N]
                      [--mount SIZE]
  DIR               made; must not exist (or be an empty directory)
  --bytes-per-file  every regular file gets exactly N bytes (0: empty) in
                    place of the realistic sizes; the images stay 1 GiB sparse
  --mount SIZE      first mount a tmpfs of SIZE (e.g. 4g) on DIR and leave it
                    mounted (root only; `umount DIR` when done)
Prints a one-line summary (entries, inodes, bytes) on stderr.
"""

import argparse
import os
import random
import subprocess
import sys
import time

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
PYCHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
WORDS = ["nodes-list", "config", "fixture", "cache", "server", "upload", "render",
         "parser", "worker", "index", "session", "migrate"]
CRATES = ["serde", "libc", "syn", "quote", "proc-macro2", "tokio", "mio", "bytes",
          "regex", "memchr", "aho-corasick", "log", "cfg-if", "itoa", "ryu", "rand",
          "getrandom", "clap", "anyhow", "thiserror", "once-cell", "bitflags",
          "hashbrown", "indexmap", "smallvec", "parking-lot", "rustix", "tempfile",
          "toml", "winnow", "unicode-ident", "futures", "pin-project", "slab"]
SERVICES = ["chronyd.service", "systemd-logind.service", "colord.service",
            "haveged.service", "upower.service", "ModemManager.service"]


class Builder:
    def __init__(self, root, rng, bytes_per_file):
        self.root = root
        self.rng = rng
        self.fixed = bytes_per_file
        self.blob = rng.randbytes(4 << 20)
        self.files = 0
        self.dirs = 0
        self.links = 0
        self.bytes = 0

    def size(self, lo, hi):
        """A size between lo and hi, log-uniform; or the fixed one."""
        # Draw in any case, so that --bytes-per-file keeps the same tree.
        if hi <= lo:
            n = lo
        else:
            n = int(lo * (hi / max(lo, 1)) ** self.rng.random()) if lo > 0 else self.rng.randint(0, hi)
        return n if self.fixed is None else self.fixed

    def mkdir(self, path):
        os.makedirs(path, exist_ok=True)
        self.dirs += 1

    def write(self, path, n):
        with open(path, "wb") as f:
            off = self.rng.randrange(len(self.blob))
            left = n
            while left > 0:
                chunk = self.blob[off:off + left]
                if not chunk:
                    off = 0
                    continue
                f.write(chunk)
                left -= len(chunk)
                off = 0
        self.files += 1
        self.bytes += n

    def file(self, path, lo, hi):
        self.write(path, self.size(lo, hi))

    def link(self, src, dst):
        os.link(src, dst)
        self.links += 1

    def rand(self, k, chars=ALNUM):
        return "".join(self.rng.choice(chars) for _ in range(k))

    def hexs(self, k):
        return "%0*x" % (k, self.rng.getrandbits(4 * k))


def project(b, top):
    """A scaffolded project with a built cargo target/ (about 300 inodes, 10 MiB)."""
    rng = b.rng
    b.mkdir(top)
    name = rng.choice(WORDS).replace("-", "_")
    b.file(f"{top}/Cargo.toml", 200, 800)
    b.file(f"{top}/Cargo.lock", 2000, 40000)
    b.mkdir(f"{top}/src")
    for m in ["main", "lib"] + rng.sample(CRATES, rng.randint(2, 6)):
        b.file(f"{top}/src/{m.replace('-', '_')}.rs", 300, 20000)
    b.mkdir(f"{top}/tests")
    b.file(f"{top}/tests/it.rs", 300, 5000)
    # A .git with loose objects.
    for d in (".git", ".git/refs/heads", ".git/objects/info"):
        b.mkdir(f"{top}/{d}")
    b.file(f"{top}/.git/HEAD", 23, 23)
    b.file(f"{top}/.git/config", 100, 300)
    b.file(f"{top}/.git/refs/heads/main", 41, 41)
    for _ in range(rng.randint(8, 24)):
        h = b.hexs(40)
        d = f"{top}/.git/objects/{h[:2]}"
        if not os.path.isdir(d):
            b.mkdir(d)
        b.file(f"{d}/{h[2:]}", 100, 8000)
    os.symlink("target/debug", f"{top}/latest")
    b.links += 1
    # target/
    t = f"{top}/target"
    dbg = f"{t}/debug"
    for d in (t, dbg, f"{dbg}/deps", f"{dbg}/.fingerprint", f"{dbg}/build",
              f"{dbg}/incremental", f"{dbg}/examples"):
        b.mkdir(d)
    b.file(f"{t}/CACHEDIR.TAG", 177, 177)
    b.file(f"{t}/.rustc_info.json", 800, 1500)
    b.file(f"{dbg}/.cargo-lock", 0, 0)
    deps = rng.sample(CRATES, rng.randint(16, 32))
    for dep in deps:
        c = dep.replace("-", "_")
        h = b.hexs(16)
        b.file(f"{dbg}/deps/lib{c}-{h}.rlib", 10000, 800000)
        b.file(f"{dbg}/deps/lib{c}-{h}.rmeta", 3000, 150000)
        b.file(f"{dbg}/deps/{c}-{h}.d", 200, 3000)
        fp = f"{dbg}/.fingerprint/{dep}-{h}"
        b.mkdir(fp)
        b.file(f"{fp}/dep-lib-{c}", 8, 200)
        b.file(f"{fp}/invoked.timestamp", 48, 48)
        b.file(f"{fp}/lib-{c}", 16, 16)
        b.file(f"{fp}/lib-{c}.json", 300, 900)
        if rng.random() < 0.2:  # a build script: build/<dep>-<hash>/{build-script-build, out/, output}
            bh = b.hexs(16)
            bd = f"{dbg}/build/{dep}-{bh}"
            b.mkdir(bd)
            b.file(f"{bd}/build-script-build", 100000, 800000)
            b.file(f"{bd}/build_script_build-{bh}.d", 200, 1000)
            run = f"{dbg}/build/{dep}-{b.hexs(16)}"
            b.mkdir(f"{run}/out")
            b.file(f"{run}/output", 50, 2000)
            b.file(f"{run}/root-output", 60, 120)
            b.file(f"{run}/stderr", 0, 0)
            b.file(f"{run}/out/generated.rs", 100, 30000)
    # The crate itself: deps/ and the hard links at the top of target/debug.
    h = b.hexs(16)
    b.file(f"{dbg}/deps/{name}-{h}", 200000, 5000000)
    b.link(f"{dbg}/deps/{name}-{h}", f"{dbg}/{name}")
    b.file(f"{dbg}/deps/lib{name}-{h}.rlib", 20000, 1000000)
    b.link(f"{dbg}/deps/lib{name}-{h}.rlib", f"{dbg}/lib{name}.rlib")
    b.file(f"{dbg}/deps/{name}-{h}.d", 200, 2000)
    b.file(f"{dbg}/{name}.d", 200, 2000)
    inc = f"{dbg}/incremental/{name}-{b.rand(13).lower()}"
    sess = f"{inc}/s-{b.rand(10).lower()}-{b.rand(7).lower()}"
    b.mkdir(sess)
    b.file(f"{inc}/s-{b.rand(10).lower()}.lock", 0, 0)
    for i in range(rng.randint(8, 30)):
        b.file(f"{sess}/{b.rand(8).lower()}.o", 2000, 200000)
    for f in ("dep-graph.bin", "query-cache.bin", "work-products.bin"):
        b.file(f"{sess}/{f}", 1000, 400000)


def registry(b, top):
    """A CARGO_HOME-like registry cache (about 150 inodes, 2.5 MiB)."""
    rng = b.rng
    idx = f"index-{b.hexs(16)}"
    for d in (f"registry/cache/{idx}", f"registry/src/{idx}", f"registry/index/{idx}/.cache"):
        b.mkdir(f"{top}/{d}")
    b.file(f"{top}/.package-cache", 0, 0)
    for dep in rng.sample(CRATES, rng.randint(6, 14)):
        ver = f"{rng.randint(0, 2)}.{rng.randint(0, 30)}.{rng.randint(0, 20)}"
        b.file(f"{top}/registry/cache/{idx}/{dep}-{ver}.crate", 5000, 400000)
        src = f"{top}/registry/src/{idx}/{dep}-{ver}"
        b.mkdir(f"{src}/src")
        for f in ("Cargo.toml", "Cargo.toml.orig", "README.md", "LICENSE-MIT", ".cargo_vcs_info.json"):
            b.file(f"{src}/{f}", 100, 6000)
        for _ in range(rng.randint(2, 8)):
            b.file(f"{src}/src/{b.rand(6).lower()}.rs", 500, 60000)
        d = f"{top}/registry/index/{idx}/.cache/{dep[:2]}/{dep[2:4] or '_'}"
        if not os.path.isdir(d):
            b.mkdir(d)
        b.file(f"{d}/{dep}", 200, 30000)


def small(b, top, lo_files, hi_files, lo, hi, sub=None):
    """A small sandbox: a few files, perhaps one level down."""
    b.mkdir(top)
    where = top
    if sub and b.rng.random() < 0.5:
        where = f"{top}/{sub}"
        b.mkdir(where)
    for i in range(b.rng.randint(lo_files, hi_files)):
        b.file(f"{where}/{b.rand(5).lower()}{i}.{b.rng.choice(['json', 'txt', 'log', 'dat', 'toml'])}", lo, hi)


def vm(b, top):
    b.mkdir(top)
    with open(f"{top}/rootfs.img", "wb") as f:
        f.truncate(1 << 30)
    b.files += 1
    b.file(f"{top}/console.log", 1000, 100000)
    b.file(f"{top}/qemu.pid", 6, 6)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--bytes-per-file", type=int, default=None)
    p.add_argument("--mount", metavar="SIZE")
    args = p.parse_args()

    if args.mount:
        os.makedirs(args.dir, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.mount},nr_inodes=0,mode=0755",
                        "sandkeeper-replica", args.dir], check=True)
    else:
        os.makedirs(args.dir, exist_ok=True)
    if os.listdir(args.dir):
        sys.exit(f"replica: {args.dir} is not empty")

    rng = random.Random(args.seed)
    b = Builder(args.dir, rng, args.bytes_per_file)
    n = lambda base: max(1, round(base * args.scale))
    pids = rng.sample(range(1000, 4194304), n(60000))
    pid = iter(pids).__next__

    # (count at scale 1, how to name one, how to build one)
    families = [
        (1600, lambda: f"app-235-{pid()}", project),
        (800, lambda: f"cargo-home-{b.rand(6)}", registry),
        (12000, lambda: f"app-{rng.choice(WORDS)}-{pid()}", lambda b, t: small(b, t, 1, 6, 50, 60000, "data")),
        (7600, lambda: f"aura-235-{pid()}", lambda b, t: small(b, t, 2, 5, 100, 20000, "state")),
        (7000, lambda: f".tmp{b.rand(6)}", lambda b, t: small(b, t, 0, 4, 0, 40000)),
        (5000, lambda: f"tmp{b.rand(8, PYCHARS)}", lambda b, t: small(b, t, 0, 3, 10, 10000)),
        (3000, lambda: f"rust_out.{b.rand(6)}", lambda b, t: small(b, t, 0, 2, 1000, 200000)),
        (3000, lambda: f"rustc{b.rand(6)}", lambda b, t: small(b, t, 1, 3, 1000, 100000)),
        (2000, lambda: f"go-build{rng.randint(10**8, 10**10)}", lambda b, t: small(b, t, 1, 6, 100, 30000, b.hexs(2))),
        (2000, lambda: f"sk-test-{pid()}-{rng.randint(0, 99)}", lambda b, t: small(b, t, 1, 5, 10, 5000, "work")),
        (1500, lambda: f"pymp-{b.rand(8, PYCHARS)}", lambda b, t: small(b, t, 0, 1, 10, 100)),
        (1500, lambda: f"npm-{pid()}-{b.hexs(8)}", lambda b, t: small(b, t, 1, 4, 100, 50000, "node_modules")),
        (600, lambda: f"systemd-private-{b.hexs(32)}-{rng.choice(SERVICES)}-{b.rand(6)}",
         lambda b, t: small(b, t, 0, 0, 0, 0, "tmp")),
        (30, lambda: f"vm-run-{pid()}", vm),
    ]
    tops_files = 3500
    plan = []
    for count, name, build in families:
        plan += [(name, build)] * n(count)
    plan += [(None, None)] * n(tops_files)
    rng.shuffle(plan)

    now = time.time()
    entries = 0
    seen = set()
    for name, build in plan:
        if name is None:  # a top-level file
            fname = rng.choice([lambda: f".tmp{b.rand(6)}", lambda: f"tmp{b.rand(8, PYCHARS)}.json",
                                lambda: f"{rng.choice(WORDS)}-{pid()}.log", lambda: f"cc{b.rand(6)}.o"])()
            top = os.path.join(args.dir, fname)
            if fname in seen:
                continue
            seen.add(fname)
            b.file(top, 0, 50000)
            paths = [top]
        else:
            nm = name()
            if nm in seen:
                continue
            seen.add(nm)
            top = os.path.join(args.dir, nm)
            build(b, top)
            paths = []
            for d, dirnames, filenames in os.walk(top, topdown=False):
                paths += [os.path.join(d, f) for f in filenames] + [os.path.join(d, x) for x in dirnames]
            paths.append(top)
        entries += 1
        # Old: 2 to 30 days, contents first, the directories after.
        t = now - rng.uniform(2, 30) * 86400
        for path in paths:
            os.utime(path, (t, t), follow_symlinks=False)

    # Count what is there, as du would: inodes once, disk blocks.
    seen_ino, dirs, disk, apparent = set(), 0, 0, 0
    for d, dirnames, filenames in os.walk(args.dir):
        dirs += 1
        disk += os.lstat(d).st_blocks * 512
        for f in filenames + [x for x in dirnames if os.path.islink(os.path.join(d, x))]:
            st = os.lstat(os.path.join(d, f))
            if st.st_ino not in seen_ino:
                seen_ino.add(st.st_ino)
                disk += st.st_blocks * 512
                apparent += st.st_size
    print(f"replica: {entries} top-level entries, {dirs + len(seen_ino)} inodes ({dirs} dirs), "
          f"{disk / 2**30:.2f} GiB on disk ({apparent / 2**30:.1f} GiB apparent, sparse images included), "
          f"scale {args.scale}, seed {args.seed}", file=sys.stderr)

if __name__ == "__main__":
    main()
