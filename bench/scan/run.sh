#!/usr/bin/env bash
# Benchmark: the whole `sandkeeper scan --json` (sizes + in-use detection +
# leases + grouping) against the tools people use today, in one run:
#   sizes:   du -x --max-depth=1, diskus, dust
#   in use:  lsof +D (the same holder pids must come out of both)
#   memory:  peak RSS of the scan on two tree sizes (it must not grow)
#
#   sudo bench/scan/run.sh [RUNS]      (default 5 timed runs per tool)
#
# The tree, on a private tmpfs: DIRS top-level entries in several name
# families (app-235-<pid> with cargo-target-like trees and hard links,
# app-nodes-list-<pid>, .tmpXXXXXX files, rust_out.<random>,
# systemd-private-<hex>-<svc>-<random>), a sparse 1 GB disk image, and a few
# holder processes (cwd, open fd, mmap). Everything runs inside a private PID
# namespace, so every process can be inspected (on some machines even root
# cannot inspect PID 1). Prints medians and ratios. Not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
dirs=${DIRS:-5000}

if [ "$(id -u)" != 0 ]; then
    echo "bench/scan: needs root (tmpfs, PID namespace)" >&2
    exit 1
fi
if [ -z "${SANDKEEPER_BENCH_INNER:-}" ]; then
    tools=bench/.tools
    if ! PATH="$PWD/$tools/bin:$PATH" command -v diskus >/dev/null || ! PATH="$PWD/$tools/bin:$PATH" command -v dust >/dev/null; then
        echo "installing diskus and du-dust into $tools ..." >&2
        cargo install --quiet --root "$tools" diskus du-dust >&2 || echo "note: diskus/dust unavailable" >&2
    fi
    cargo build --quiet --release -p sandkeeper-cli
    # The namespace is the benchmark's own: trust it (docs/security.md).
    exec env SANDKEEPER_BENCH_INNER=1 SANDKEEPER_TRUST_PID_NAMESPACE=1 PATH="$PWD/$tools/bin:$PATH" unshare --pid --fork --mount-proc "$0" "$@"
fi

sk=$PWD/target/release/sandkeeper
scratch=$(mktemp -d "${TMPDIR:-/tmp}/sandkeeper-bench-scan.XXXXXX")
holders=()
cleanup() {
    for p in "${holders[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    umount "$scratch" 2>/dev/null || umount -l "$scratch" 2>/dev/null || true
    rmdir "$scratch" 2>/dev/null || true
}
trap cleanup EXIT
mount -t tmpfs -o size=6g sandkeeper-bench "$scratch"

generate() { # generate TREE DIRS FILES_PER_APP_DIR
    python3 - "$1" "$2" "${3:-10}" <<'EOF'
import os, random, sys
tree, n, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(42)
os.mkdir(tree)
alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
rand = lambda k: "".join(rng.choice(alnum) for _ in range(k))
files = 0
for i in range(n):
    kind = i % 10
    if kind < 6:
        top = os.path.join(tree, f"app-235-{100000 + i}")
        for sub in ("src", "target/debug/deps", "target/debug/build"):
            os.makedirs(os.path.join(top, sub))
        for j in range(per):
            sub = ("src", "target/debug/deps", "target/debug/build")[j % 3]
            with open(os.path.join(top, sub, f"f{j}.rs"), "wb") as f:
                f.write(b"x" * (200 + (i * 37 + j * 1009) % 30000))
            files += 1
        if i % 30 == 29:  # hard links between runs, as cargo's hard-linked outputs
            prev = os.path.join(tree, f"app-235-{100000 + i - 1}")
            if os.path.isdir(prev):
                os.link(os.path.join(prev, "src/f0.rs"), os.path.join(top, "linked"))
    elif kind < 8:
        top = os.path.join(tree, f"app-nodes-list-{200000 + i}")
        os.mkdir(top)
        for j in range(6):
            with open(os.path.join(top, f"n{j}.json"), "wb") as f:
                f.write(b"{}" * (50 + j * 40))
            files += 1
    elif kind == 8:
        with open(os.path.join(tree, ".tmp" + rand(6)), "wb") as f:
            f.write(b"t" * 512)
        files += 1
    else:
        name = rng.choice([f"rust_out.{rand(6)}", f"systemd-private-{rng.getrandbits(128):032x}-chronyd.service-{rand(6)}"])
        os.mkdir(os.path.join(tree, name))
with open(os.path.join(tree, "app-235-100000", "rootfs.ext4"), "wb") as f:
    f.truncate(1 << 30)
    f.seek(1 << 29)
    f.write(b"\1" * 65536)
print(f"{n} entries, {files} files", file=sys.stderr)
EOF
}

small=$scratch/tree
generate "$small" "$dirs"

# Holders: a cwd, an open file, a mapping, in three app-235 dirs.
(cd "$small/app-235-100000/src" && exec sleep 600) & holders+=($!)
(exec 3<"$small/app-235-100001/src/f0.rs"; exec sleep 600) & holders+=($!)
python3 -c 'import mmap,sys,time
f=open(sys.argv[1],"rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); f.close(); time.sleep(600)' \
    "$small/app-235-100002/src/f0.rs" & holders+=($!)
sleep 1

# The same answer first: sizes equal du's, holder pids equal lsof's.
"$sk" scan --json --entries "$small" >"$scratch/scan.json"
python3 - "$scratch/scan.json" "$small" <<'EOF'
import json, subprocess, sys
doc = json.load(open(sys.argv[1])); tree = sys.argv[2]
entries = {e["name"]: e for e in doc["roots"][0]["entries"]}
du = {}
for line in subprocess.run(["du", "-axB1", "--max-depth=1", tree], capture_output=True, text=True).stdout.splitlines():
    size, path = line.split("\t", 1)
    if path != tree:
        du[path[len(tree) + 1:]] = int(size)
bad = [n for n, e in entries.items() if e["disk_bytes"] != du.get(n)]
if bad:
    sys.exit(f"sizes differ from du for {len(bad)} entries, e.g. {bad[:3]}")
ours = sorted({h["pid"] for e in entries.values() for h in e["holders"] if "pid" in h})
lsof = subprocess.run(["lsof", "-t", "+D", tree], capture_output=True, text=True).stdout.split()
theirs = sorted({int(p) for p in lsof})
if ours != theirs:
    sys.exit(f"holders differ: sandkeeper {ours}, lsof {theirs}")
print(f"same answer: sizes equal du for {len(entries)} entries; holders {ours} equal lsof's", file=sys.stderr)
EOF

# shellcheck source=bench/lib.sh
source bench/lib.sh
bench "du -x --max-depth=1" du -xB1 --max-depth=1 "$small"
bench "sandkeeper scan --json" "$sk" scan --json --entries "$small"
command -v diskus >/dev/null && bench "diskus -j 2 (sizes only)" diskus -j 2 "$small"
command -v dust >/dev/null && bench "dust -d 1 -x" dust -d 1 -x "$small"
bench "lsof +D (in use only)" lsof +D "$small"

echo
echo "tree: $(find "$small" -type f | wc -l) files, $(find "$small" -type d | wc -l) dirs in $dirs entries; $(nproc) cores; median of $runs runs"
printf '%-28s %10s %8s %14s\n' tool "median ms" "vs du" "vs sandkeeper"
for i in "${!names[@]}"; do
    printf '%-28s %10s %8s %14s\n' "${names[$i]}" "${medians[$i]}" \
        "$(awk -v a="${medians[$i]}" -v b="${medians[0]}" 'BEGIN { printf "%.2fx", a / b }')" \
        "$(awk -v a="${medians[$i]}" -v b="${medians[1]}" 'BEGIN { printf "%.2fx", a / b }')"
done

# Peak memory on this tree and on one with the same entries but ten times
# the files: it must not grow with the tree.
rss() { /usr/bin/time -f %M "$sk" scan --json --entries "$1" 2>&1 >/dev/null | tail -1; }
echo
echo "peak RSS, $(find "$small" -type f | wc -l) files: $(rss "$small") KiB"
big=$scratch/big
generate "$big" "$dirs" 100
echo "peak RSS, $(find "$big" -type f | wc -l) files: $(rss "$big") KiB"
