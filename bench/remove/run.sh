#!/usr/bin/env bash
# Remover benchmark: `rm -rf`, `rmz` (a Rust crate, from the fuc project) and
# sandkeeper's confined remover (every safety check on), each removing a
# fresh copy of the same generated tree on a tmpfs, several times, in
# rotating order. Prints each tool's median and the ratios.
#
# sandkeeper runs with its defaults (all cores, no byte counting), and for
# reference with `--bytes` (one statx per file to count the space freed)
# and on one thread.
#
# usage: sudo bench/remove/run.sh [RUNS] [DIRS] [FILES]
#   RUNS   runs per tool (default 9)
#   DIRS   top-level directories of the tree (default 5000)
#   FILES  files in the tree (default 60000)
#
# Needs root (it mounts a tmpfs), cargo and python3. rmz is installed into
# bench/.tools on first use.
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=${1:-9}
dirs=${2:-5000}
files=${3:-60000}

if [ "$(id -u)" != 0 ]; then
    echo "bench: needs root to mount a tmpfs" >&2
    exit 2
fi

rmz=bench/.tools/bin/rmz
if [ ! -x "$rmz" ]; then
    echo "bench: installing rmz into bench/.tools" >&2
    cargo install --quiet --locked --root bench/.tools rmz
fi
cargo build --quiet --release -p sandkeeper-engine --example remove
sk=target/release/examples/remove

work=$(mktemp -d "${TMPDIR:-/tmp}/sandkeeper-bench.XXXXXX")
cleanup() {
    umount -l "$work" 2>/dev/null || true
    rmdir "$work"
}
trap cleanup EXIT
mount -t tmpfs -o size=6g,mode=0700 sandkeeper-bench "$work"

echo "bench: generating $files files in $dirs top-level dirs (tmpfs)" >&2
python3 bench/remove/gen_tree.py "$work/template" --dirs "$dirs" --files "$files"
echo "bench: $(find "$work/template" -type d | wc -l) dirs, $(find "$work/template" ! -type d | wc -l) non-dirs, $(du -sh "$work/template" | cut -f1)" >&2

now() { date +%s%N; }

# One timed run: copy the template, then remove the copy with "$@".
timed() {
    cp -a "$work/template" "$work/victim"
    sync
    local start end
    start=$(now)
    "$@" "$work/victim"
    end=$(now)
    if [ -e "$work/victim" ]; then
        echo "bench: $1 left $work/victim behind" >&2
        exit 1
    fi
    echo $(((end - start) / 1000))
}

declare -A times
tools=(rm rmz sandkeeper sandkeeper-bytes sandkeeper-1thread)
for ((i = 0; i < runs; i++)); do
    # Rotate the order so no tool always runs right after the copy of another.
    for ((j = 0; j < ${#tools[@]}; j++)); do
        tool=${tools[$(((i + j) % ${#tools[@]}))]}
        case $tool in
            rm) us=$(timed rm -rf) ;;
            rmz) us=$(timed "$rmz") ;;
            sandkeeper) us=$(timed "$sk" 2>/dev/null) ;;
            sandkeeper-bytes) us=$(timed "$sk" --bytes 2>/dev/null) ;;
            sandkeeper-1thread) us=$(timed "$sk" --threads 1 2>/dev/null) ;;
        esac
        times[$tool]="${times[$tool]:-} $us"
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
minimum() { tr ' ' '\n' | grep . | sort -n | head -1; }
declare -A med low
for tool in "${tools[@]}"; do
    med[$tool]=$(echo "${times[$tool]}" | median)
    low[$tool]=$(echo "${times[$tool]}" | minimum)
done

printf '\n%-20s %9s %9s   %s\n' tool "median s" "min s" "all runs (s)"
for tool in "${tools[@]}"; do
    all=$(for t in ${times[$tool]}; do awk -v t="$t" 'BEGIN {printf "%.3f ", t / 1e6}'; done)
    awk -v n="$tool" -v m="${med[$tool]}" -v l="${low[$tool]}" -v all="$all" \
        'BEGIN {printf "%-20s %9.3f %9.3f   %s\n", n, m / 1e6, l / 1e6, all}'
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo
echo "ratios of medians (of minimums in brackets):"
echo "sandkeeper/rm   $(ratio "${med[sandkeeper]}" "${med[rm]}")  ($(ratio "${low[sandkeeper]}" "${low[rm]}"))"
echo "sandkeeper/rmz  $(ratio "${med[sandkeeper]}" "${med[rmz]}")  ($(ratio "${low[sandkeeper]}" "${low[rmz]}"))"
echo "(counting bytes: sandkeeper/rm $(ratio "${med[sandkeeper-bytes]}" "${med[rm]}"), sandkeeper/rmz $(ratio "${med[sandkeeper-bytes]}" "${med[rmz]}"))"
echo "(one thread:     sandkeeper/rm $(ratio "${med[sandkeeper-1thread]}" "${med[rm]}"), sandkeeper/rmz $(ratio "${med[sandkeeper-1thread]}" "${med[rmz]}"))"
