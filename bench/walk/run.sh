#!/usr/bin/env bash
# Micro-benchmark: sandkeeper's size walker against du (and diskus / dust
# where they can be installed), on a generated tree in a private tmpfs.
#
#   sudo bench/walk/run.sh [RUNS]        (default 7 timed runs per tool)
#
# The tree: 5,000 top-level directories, ~60,000 files in two levels below
# them, some hard links across top-level directories, one 1 GiB sparse file.
# Each tool measures every top-level entry (`du -x --max-depth=1`); the
# walker runs as the example `crates/sandkeeper-engine/examples/usage.rs` does it:
# `walk::usage_many` with two threads. Prints the median wall time of RUNS
# warm-cache runs per tool and its ratio to du's. Not a test: numbers depend
# on the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-7}

if [ "$(id -u)" != 0 ]; then
    echo "bench/walk: needs root (it mounts a tmpfs)" >&2
    exit 1
fi

# Optional competitors, installed into bench/.tools (not on PATH otherwise).
tools=bench/.tools
export PATH="$PWD/$tools/bin:$PATH"
if ! command -v diskus >/dev/null || ! command -v dust >/dev/null; then
    echo "installing diskus and du-dust into $tools ..." >&2
    cargo install --quiet --root "$tools" diskus du-dust >&2 ||
        echo "note: cargo install diskus du-dust failed; comparing with du only" >&2
fi

cargo build --quiet --release -p sandkeeper-engine --example usage
usage_bin=target/release/examples/usage

scratch=$(mktemp -d "${TMPDIR:-/tmp}/sandkeeper-bench-walk.XXXXXX")
cleanup() {
    umount "$scratch" 2>/dev/null || umount -l "$scratch" 2>/dev/null || true
    rmdir "$scratch" 2>/dev/null || true
}
trap cleanup EXIT
mount -t tmpfs -o size=2g sandkeeper-bench "$scratch"
tree="$scratch/tree"

echo "generating the tree in $tree ..." >&2
python3 - "$tree" <<'EOF'
import os, sys
tree = sys.argv[1]
os.mkdir(tree)
files = 0
for i in range(5000):
    top = os.path.join(tree, f"app-{235 + i % 7}-{10000 + i}")
    for sub in ("src", "target/debug"):
        os.makedirs(os.path.join(top, sub))
    for j in range(12):
        sub = "src" if j < 6 else "target/debug"
        with open(os.path.join(top, sub, f"f{j}"), "wb") as f:
            f.write(b"x" * (100 + (i * 37 + j * 1009) % 20000))
        files += 1
    # Every 25th directory hard-links a file of the one before it.
    if i % 25 == 24:
        prev = os.path.join(tree, f"app-{235 + (i - 1) % 7}-{10000 + i - 1}")
        os.link(os.path.join(prev, "src/f0"), os.path.join(top, "linked"))
with open(os.path.join(tree, "app-235-10000", "rootfs.ext4"), "wb") as f:
    f.truncate(1 << 30)
    f.seek(1 << 29)
    f.write(b"\1" * 65536)
print(f"{files} files", file=sys.stderr)
EOF

# The walker must agree with du before it is timed.
if ! diff <(du -xB1 --max-depth=1 "$tree" | sort) <("$usage_bin" "$tree" | sort) >/dev/null; then
    echo "bench/walk: the walker's output differs from du's" >&2
    exit 1
fi

# shellcheck source=bench/lib.sh
source bench/lib.sh
bench "du -x --max-depth=1" du -xB1 --max-depth=1 "$tree"
bench "walker, 2 threads" "$usage_bin" --quiet --threads 2 "$tree"
bench "walker, 1 thread" "$usage_bin" --quiet --threads 1 "$tree"
if command -v diskus >/dev/null; then
    bench "diskus -j 2 (total only)" diskus -j 2 "$tree"
fi
if command -v dust >/dev/null; then
    bench "dust -d 1 -x" dust -d 1 -x -b "$tree"
fi

nproc=$(nproc)
echo
echo "tree: $(find "$tree" -type f | wc -l) files, $(find "$tree" -type d | wc -l) directories; $nproc cores; median of $runs runs"
printf '%-28s %10s %8s\n' tool "median ms" "vs du"
for i in "${!names[@]}"; do
    printf '%-28s %10s %8s\n' "${names[$i]}" "${medians[$i]}" \
        "$(awk -v a="${medians[$i]}" -v b="${medians[0]}" 'BEGIN { printf "%.2fx", a / b }')"
done
