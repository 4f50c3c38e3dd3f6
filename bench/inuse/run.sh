#!/usr/bin/env bash
# Benchmark: the in-use index (crates/sandkeeper-engine/examples/inuse: one /proc
# pass + one walk of the tree) against `lsof +D DIR`, on a generated tree of
# DIRS top-level directories with FILES files each (default 5000 x 12 = 60k
# files) on a private tmpfs, with a few holder processes.
#
# Both run inside `unshare --pid --fork --mount-proc`, so only this
# benchmark's processes are visible (on some machines even root cannot
# inspect the host's pid 1, which would make the index incomplete). The
# script checks that both tools name the same holder pids, then prints the
# median wall time of each over RUNS runs and their ratio.
#
# Usage (as root):  bench/inuse/run.sh
# Knobs:            RUNS=5 DIRS=5000 FILES=12 EXTRA=200 bench/inuse/run.sh
#                   (EXTRA: idle processes outside the tree, so that the
#                   /proc pass sees a few hundred processes, as on a host)
set -euo pipefail

RUNS=${RUNS:-5}
DIRS=${DIRS:-5000}
FILES=${FILES:-12}
EXTRA=${EXTRA:-200}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
example="$repo/target/release/examples/inuse"

if [[ "${1:-}" != "--inner" ]]; then
    if [[ $EUID -ne 0 ]]; then
        echo "error: needs root (mounts a tmpfs, makes a pid namespace)" >&2
        exit 1
    fi
    for tool in lsof unshare; do
        command -v "$tool" >/dev/null || { echo "error: $tool not found" >&2; exit 1; }
    done
    cargo build --quiet --release -p sandkeeper-engine --example inuse --manifest-path "$repo/Cargo.toml"
    # The namespace is the benchmark's own: trust it (docs/security.md).
    exec env SANDKEEPER_TRUST_PID_NAMESPACE=1 unshare --pid --fork --mount-proc --kill-child --propagation private "$0" --inner
fi

# --- Inside the private pid and mount namespace, as pid 1. ---
work=$(mktemp -d /tmp/sk-bench-inuse.XXXXXX)
tree="$work/tree"
mkdir "$tree"
holders=()
idle=()
cleanup() {
    for pid in "${holders[@]}" "${idle[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    umount -l "$tree" 2>/dev/null || true
    rmdir "$tree" "$work" 2>/dev/null || true
}
trap cleanup EXIT
mount -t tmpfs -o size=1g,mode=0755 tmpfs "$tree"

now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "generating $DIRS dirs x $FILES files on tmpfs at $tree ..."
start=$(now_ns)
(
    cd "$tree"
    names=()
    for ((d = 0; d < DIRS; d++)); do names+=("app-$d-$RANDOM"); done
    mkdir "${names[@]}"
    mkdir "${names[@]/%//target}"
    for dir in */; do
        for ((f = 0; f < FILES / 2; f++)); do
            : >"$dir/f$f"
            : >"$dir/target/o$f"
        done
    done
)
files=$(find "$tree" -type f | wc -l)
dirs=$(find "$tree" -mindepth 1 -maxdepth 1 -type d | wc -l)
echo "  $dirs top-level dirs, $files files in $(( ($(now_ns) - start) / 1000000 )) ms"

# Holders: a working directory, an open descriptor, a mapping (python3, if
# present), a held directory; and one process holding nothing in the tree.
pick() { find "$tree" -mindepth 1 -maxdepth 1 -type d | sed -n "${1}p"; }
(cd "$(pick 17)" && exec sleep 600) &
holders+=($!)
exec 3<"$(pick 42)/f1"
sleep 600 &
holders+=($!)
exec 3<&-
if command -v python3 >/dev/null; then
    python3 -c '
import mmap, sys, time
f = open(sys.argv[1], "r+b"); f.write(b"x" * 4096); f.flush()
m = mmap.mmap(f.fileno(), 4096); f.close()
time.sleep(600)' "$(pick 99)/target/o1" &
    holders+=($!)
fi
exec 3<"$(pick 4000)/target"
sleep 600 &
holders+=($!)
exec 3<&-
idle=()
for ((i = 0; i < EXTRA; i++)); do
    (cd / && exec sleep 600) &
    idle+=($!)
done
(cd / && exec sleep 600) &
holders+=($!)
sleep 0.5 # let python map its file

expected=$(printf '%s\n' "${holders[@]:0:${#holders[@]}-1}" | sort -n | tr '\n' ' ')
echo "holder pids: $expected(and ${holders[-1]} holding nothing in the tree)"

lsof_pids() { lsof -t +D "$tree" 2>/dev/null | sort -n | uniq | tr '\n' ' ' || true; }
inuse_pids() { "$example" "$tree" 2>/dev/null | sed -n 's/^PIDS //p' | tr ' ' '\n' | sed '/^$/d' | sort -n | tr '\n' ' '; }

got_lsof=$(lsof_pids)
got_inuse=$(inuse_pids)
echo "lsof +D finds:      $got_lsof"
echo "inuse index finds:  $got_inuse"
status=0
if [[ "$got_lsof" != "$got_inuse" ]]; then
    echo "MISMATCH: lsof and the index name different holders" >&2
    status=1
fi
if [[ "$got_inuse" != "$expected" ]]; then
    echo "MISMATCH: the index does not name exactly the holders started" >&2
    status=1
fi

echo "timing $RUNS runs each (wall time of the whole command) ..."
lsof_ms=()
inuse_ms=()
collect_ms=()
for ((i = 0; i < RUNS; i++)); do
    t=$(now_ns); lsof -t +D "$tree" >/dev/null 2>&1 || true
    lsof_ms+=($(( ($(now_ns) - t) / 1000 )))
    t=$(now_ns); err=$("$example" "$tree" 2>&1 >/dev/null || true)
    inuse_ms+=($(( ($(now_ns) - t) / 1000 )))
    collect_ms+=("$(sed -n 's/^collect: \([0-9.]*\) ms.*/\1/p' <<<"$err")")
done
lsof_med=$(printf '%s\n' "${lsof_ms[@]}" | median)
inuse_med=$(printf '%s\n' "${inuse_ms[@]}" | median)
collect_med=$(printf '%s\n' "${collect_ms[@]}" | median)
walk_line=$(sed -n 's/^walk: //p' <<<"$err")
processes=$(sed -n 's/^collect: [0-9.]* ms (\([0-9]*\) processes.*/\1/p' <<<"$err")

printf 'lsof +D DIR:            median %8.1f ms\n' "$(bc -l <<<"$lsof_med/1000")"
printf 'inuse (collect + walk): median %8.1f ms  (collect %s ms over %s processes; walk %s)\n' \
    "$(bc -l <<<"$inuse_med/1000")" "$collect_med" "$processes" "$walk_line"
printf 'ratio lsof / inuse:     %8.1fx  (lsof / collect alone: %.0fx)\n' \
    "$(bc -l <<<"$lsof_med/$inuse_med")" "$(bc -l <<<"$lsof_med/1000/$collect_med")"
exit $status
