#!/usr/bin/env bash
# Benchmark for issue 14: reap and scan of a replica of the incident's /tmp
# (bench/reap/replica.py) against the tools people use, interleaved in one
# run, in rotating order:
#
#   removal: sandkeeper reap --match '*' --older-than 0s --grace 0s ROOT
#            rm -rf ROOT/*          rmz ROOT/*
#            (each on a fresh `cp -a` of the replica, hard links kept;
#            the copy is not timed; after each the root must be empty)
#   sizing:  sandkeeper scan --json --entries ROOT
#            du -x --max-depth=1 ROOT     diskus -j2 ROOT
#            lsof +D ROOT (in use only; scale <= 0.1, it is slow)
#   phases:  sandkeeper reap --dry-run (same rules) = the scan and the
#            decisions; reap minus that = claim, quarantine, re-check, delete
#
# then the syscall counts of one reap and one scan (strace -f -c, top 10 by
# calls, and per inode / per directory), and prints medians and ratios.
#
# usage: sudo bench/reap/run.sh [RUNS] [SCALE]
#   RUNS   timed runs per tool (default 3)
#   SCALE  replica scale (default 0.1: ~5,100 entries, ~80k inodes, ~1.8 GiB;
#          1: ~51k entries, ~800k inodes, ~18 GiB)
# knobs:   BYTES_PER_FILE=N  every file N bytes (build scale 1 in less RAM)
#          SEED=14           the replica's seed
#          TMPFS_SIZE=6g     the tmpfs (default: 40 GiB x SCALE + 2 GiB;
#                            the template and one copy live on it)
#          LSOF=0|1          run lsof +D (default: only when SCALE <= 0.1)
#          STRACE=0          skip the syscall counts
#          PERF=DIR          also record one reap (of a fresh copy) with
#                            `perf record -g` into DIR/reap.perf.data and
#                            write `perf report` (children, callers) to
#                            DIR/reap.perf.txt; needs perf
#          SK=PATH           the sandkeeper binary to measure (default
#                            target/release/sandkeeper, built here)
#          SK_BEFORE=PATH    also time (and, unless STRACE=0, strace) this binary's reap in the same
#                            rotation (an older build: before/after)
#          BUSY=N            N more processes in the namespace while timing
#                            (sleeping shells and Python interpreters, as on
#                            a CI runner), which every /proc pass inspects
#          WINDOW=0          skip the window: how long entries are away from
#                            their names during a reap (bench/reap/window.py:
#                            WINDOW_ENTRIES=5000 of WINDOW_FILES=100 files
#                            beside WINDOW_PROCESSES=1000 processes,
#                            WINDOW_HELD=100 of them working in an entry)
# RUNS=0 skips the timings (only the syscall counts and PERF).
#
# Needs root (tmpfs, PID namespace), cargo, python3, strace, lsof. rmz and
# diskus are installed into bench/.tools on first use. The reap and the scan
# run inside a private PID namespace with SANDKEEPER_TRUST_PID_NAMESPACE=1:
# where even root cannot inspect the host's PID 1, every entry outside one
# is `unknown` and nothing is reaped. Everything it makes (tmpfs, copies)
# is gone at exit. Not a test: no timed assertions.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
scale=${2:-0.1}
tools=bench/.tools

if [ -z "${SANDKEEPER_BENCH_INNER:-}" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "bench/reap: needs root (tmpfs, PID namespace)" >&2
        exit 1
    fi
    for t in strace unshare python3; do
        command -v "$t" >/dev/null || { echo "bench/reap: $t not found" >&2; exit 1; }
    done
    for t in rmz diskus; do
        if [ ! -x "$tools/bin/$t" ]; then
            echo "bench/reap: installing $t into $tools" >&2
            cargo install --quiet --locked --root "$tools" "$t" >&2
        fi
    done
    [ -n "${SK:-}" ] || cargo build --quiet --release -p sandkeeper-cli
    [ -z "${PERF:-}" ] || { mkdir -p "$PERF"; PERF=$(cd "$PERF" && pwd); export PERF; }
    work=$(mktemp -d "${TMPDIR:-/tmp}/sandkeeper-bench-reap.XXXXXX")
    # The tmpfs is mounted inside the namespace (private mounts): it goes
    # with the namespace whatever happens; the directory goes here.
    trap 'rmdir "$work" 2>/dev/null || true' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    # The namespace is the benchmark's own: trust it (docs/security.md).
    env SANDKEEPER_BENCH_INNER="$work" SANDKEEPER_TRUST_PID_NAMESPACE=1 PATH="$PWD/$tools/bin:$PATH" \
        unshare --pid --fork --mount-proc --kill-child --propagation private "$0" "$@"
    exit $?
fi

# --- Inside the private PID and mount namespace, as PID 1. ---
work=$SANDKEEPER_BENCH_INNER
sk=${SK:-$PWD/target/release/sandkeeper}
cleanup() {
    umount "$work" 2>/dev/null || umount -l "$work" 2>/dev/null || true
}
trap cleanup EXIT
# PID 1 of the namespace gets only the signals it handles.
trap 'exit 130' INT
trap 'exit 143' TERM
size=${TMPFS_SIZE:-$(awk -v s="$scale" 'BEGIN { printf "%dg", s * 40 + 2 }')}
mount -t tmpfs -o "size=$size,nr_inodes=0,mode=0700" sandkeeper-bench-reap "$work"

replica_args=(--scale "$scale" --seed "${SEED:-14}")
[ -n "${BYTES_PER_FILE:-}" ] && replica_args+=(--bytes-per-file "$BYTES_PER_FILE")
echo "bench/reap: building the replica (scale $scale) ..." >&2
python3 bench/reap/replica.py "$work/template" "${replica_args[@]}"
tpl=$work/template
# BUSY=N: a host of N more processes, a tenth of them Python interpreters
# (more mappings and descriptors), the rest sleeping shells. They end with
# the namespace.
busy=${BUSY:-0}
if [ "$busy" -gt 0 ]; then
    for ((k = 0; k < busy; k++)); do
        if ((k % 10 == 0)); then
            python3 -c 'import json, email, http.client, time; time.sleep(86400)' &
        else
            sh -c 'exec sleep 86400' &
        fi
    done
    sleep 2
fi
entries=$(find "$tpl" -mindepth 1 -maxdepth 1 | wc -l)
ndirs=$(find "$tpl" -type d | wc -l)
ninodes=$(find "$tpl" -printf '%i\n' | sort -u | wc -l)
echo "bench/reap: $entries entries, $ninodes inodes ($ndirs dirs), $(du -sh "$tpl" | cut -f1) on disk; $(nproc) cores; $runs runs" >&2

# The same answer first: in the namespace every entry is idle (not unknown),
# and the sizes are du's.
"$sk" scan --json --entries "$tpl" >"$work/scan.json"
python3 - "$work/scan.json" "$tpl" <<'EOF'
import collections, json, subprocess, sys
doc = json.load(open(sys.argv[1])); tree = sys.argv[2]
entries = doc["roots"][0]["entries"]
states = collections.Counter(e["state"] for e in entries)
if set(states) != {"idle"}:
    sys.exit(f"bench/reap: expected every entry idle, got {dict(states)} (PID namespace not trusted?)")
du = {}
for line in subprocess.run(["du", "-axB1", "--max-depth=1", tree], capture_output=True, text=True).stdout.splitlines():
    size, path = line.split("\t", 1)
    if path != tree:
        du[path[len(tree) + 1:]] = int(size)
bad = [e["name"] for e in entries if e["disk_bytes"] != du.get(e["name"])]
if bad:
    sys.exit(f"bench/reap: sizes differ from du for {len(bad)} entries, e.g. {bad[:3]}")
print(f"bench/reap: same answer: {len(entries)} entries, all idle; sizes equal du's", file=sys.stderr)
EOF

reap_args=(--match '*' --older-than 0s --grace 0s)
victim=$work/victim
now() { date +%s%N; }

# What is left in ROOT apart from the reaper's own (empty) quarantine.
leftovers() {
    {
        find "$1" -mindepth 1 -maxdepth 1 ! -name .sandkeeper-trash
        [ ! -d "$1/.sandkeeper-trash" ] || find "$1/.sandkeeper-trash" -mindepth 1 -maxdepth 1
    } | wc -l
}
fresh() {
    rm -rf "$victim"
    cp -a "$tpl" "$victim"
    sync
}
check_empty() { # check_empty TOOL
    local left
    left=$(leftovers "$victim")
    if [ "$left" != 0 ]; then
        echo "bench/reap: FAIL: $1 left $left entries in the root, e.g.:" >&2
        find "$victim" -mindepth 1 -maxdepth 2 | head -5 >&2
        [ -s "$work/out" ] && { echo "--- its output (tail):" >&2; tail -20 "$work/out" >&2; }
        exit 1
    fi
}
# The CPU time (user + system, all threads and children) of the last
# command timed, in microseconds: bash's own `time`, into $work/cpu.
TIMEFORMAT='%3U %3S'
cpu_us() { awk '{ printf "%d", ($1 + $2) * 1e6 }' "$work/cpu"; }
# One removal: a fresh copy, then "$@" timed, then the root must be empty.
# Prints the wall time and the CPU time, in microseconds.
removal() { # removal TOOL CMD...
    local tool=$1 start end rc=0
    shift
    fresh
    start=$(now)
    { time "$@" >"$work/out" 2>&1 || rc=$?; } 2>"$work/cpu"
    end=$(now)
    if [ "$rc" != 0 ]; then
        echo "bench/reap: FAIL: $tool exited $rc" >&2
        tail -20 "$work/out" >&2
        exit 1
    fi
    check_empty "$tool"
    echo "$(((end - start) / 1000)) $(cpu_us)"
}
# One look: "$@" timed on the template (it must not change it).
look() { # look CMD...
    local start end
    start=$(now)
    { time "$@" >/dev/null 2>&1 || true; } 2>"$work/cpu" # lsof +D exits 1 when it finds nothing
    end=$(now)
    echo "$(((end - start) / 1000)) $(cpu_us)"
}
in_victim() { (cd "$victim" && shopt -s dotglob && exec "$@" -- *); }
rm_all() { in_victim rm -rf; }
rmz_all() { (cd "$victim" && shopt -s dotglob && exec rmz *); }

lsof_on=${LSOF:-$(awk -v s="$scale" 'BEGIN { print (s <= 0.1) ? 1 : 0 }')}
order=(reap rm-rf rmz scan du diskus dry-run)
[ "$lsof_on" = 1 ] && command -v lsof >/dev/null && order+=(lsof)
[ -n "${SK_BEFORE:-}" ] && order+=(reap-before)
# Warm up (binaries, dentries of the template) once, untimed.
"$sk" scan --json --entries "$tpl" >/dev/null
du -x --max-depth=1 "$tpl" >/dev/null
diskus -j2 "$tpl" >/dev/null

declare -A times cpus
profile() {
    [ -n "${PERF:-}" ] || return 0
    fresh
    perf record -q -g -o "$PERF/reap.perf.data" "$sk" reap "${reap_args[@]}" "$victim" >"$work/out" 2>&1
    check_empty "reap under perf"
    perf report -q -i "$PERF/reap.perf.data" --children --stdio --percent-limit 2 >"$PERF/reap.perf.txt" 2>/dev/null || true
    echo "bench/reap: perf profile of one reap in $PERF/reap.perf.txt" >&2
}
if [ "$runs" = 0 ]; then
    profile
    [ "${STRACE:-1}" = 0 ] && exit 0
fi
for ((i = 0; i < runs; i++)); do
    for ((j = 0; j < ${#order[@]}; j++)); do
        tool=${order[$(((i + j) % ${#order[@]}))]}
        case $tool in
            reap) us=$(removal reap "$sk" reap "${reap_args[@]}" "$victim") ;;
            reap-before) us=$(removal reap-before "$SK_BEFORE" reap "${reap_args[@]}" "$victim") ;;
            rm-rf) us=$(removal rm-rf rm_all) ;;
            rmz) us=$(removal rmz rmz_all) ;;
            scan) us=$(look "$sk" scan --json --entries "$tpl") ;;
            du) us=$(look du -x --max-depth=1 "$tpl") ;;
            diskus) us=$(look diskus -j2 "$tpl") ;;
            dry-run) us=$(look "$sk" reap --dry-run "${reap_args[@]}" "$tpl") ;;
            lsof) us=$(look lsof +D "$tpl") ;;
        esac
        read -r us cpu <<<"$us"
        times[$tool]="${times[$tool]:-} $us"
        cpus[$tool]="${cpus[$tool]:-} $cpu"
        echo "bench/reap: run $((i + 1))/$runs $tool $(awk -v t="$us" -v c="$cpu" 'BEGIN { printf "%.3f s (CPU %.3f s)", t / 1e6, c / 1e6 }')" >&2
    done
done
rm -rf "$victim"
if [ "$(find "$tpl" -mindepth 1 -maxdepth 1 | wc -l)" != "$entries" ]; then
    echo "bench/reap: FAIL: the template changed under scan/dry-run" >&2
    exit 1
fi

[ "$runs" = 0 ] || {
median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
minimum() { tr ' ' '\n' | grep . | sort -n | head -1; }
declare -A med low cpu
echo
echo "replica scale $scale: $entries top-level entries, $ninodes inodes ($ndirs dirs), $(du -sh "$tpl" | cut -f1) on tmpfs; $(nproc) cores; in a private PID namespace$([ "$busy" -gt 0 ] && echo " of $(find /proc -maxdepth 1 -name '[0-9]*' | wc -l) processes (BUSY=$busy)"); $runs interleaved runs"
printf '%-56s %9s %9s %9s   %s\n' tool "median s" "min s" "CPU s" "all runs (s)"
for tool in "${order[@]}"; do
    med[$tool]=$(echo "${times[$tool]}" | median)
    low[$tool]=$(echo "${times[$tool]}" | minimum)
    cpu[$tool]=$(echo "${cpus[$tool]}" | median)
    case $tool in
        reap) label="sandkeeper reap --match '*' --older-than 0s --grace 0s" ;;
        rm-rf) label="rm -rf ROOT/*" ;;
        rmz) label="rmz ROOT/*" ;;
        scan) label="sandkeeper scan --json --entries" ;;
        du) label="du -x --max-depth=1" ;;
        diskus) label="diskus -j2" ;;
        dry-run) label="sandkeeper reap --dry-run (same rules)" ;;
        lsof) label="lsof +D" ;;
        reap-before) label="the same reap, SK_BEFORE" ;;
    esac
    all=$(for t in ${times[$tool]}; do awk -v t="$t" 'BEGIN { printf "%.3f ", t / 1e6 }'; done)
    awk -v n="$label" -v m="${med[$tool]}" -v l="${low[$tool]}" -v c="${cpu[$tool]}" -v all="$all" \
        'BEGIN { printf "%-56s %9.3f %9.3f %9.3f   %s\n", n, m / 1e6, l / 1e6, c / 1e6, all }'
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
echo
echo "ratios of medians (of minimums in brackets):"
echo "reap / rm -rf            $(ratio "${med[reap]}" "${med[rm-rf]}")  ($(ratio "${low[reap]}" "${low[rm-rf]}"))   goal <= 0.6x"
echo "reap / rmz               $(ratio "${med[reap]}" "${med[rmz]}")  ($(ratio "${low[reap]}" "${low[rmz]}"))"
echo "reap / (scan + rmz)      $(ratio "${med[reap]}" "$((med[scan] + med[rmz]))")  ($(ratio "${low[reap]}" "$((low[scan] + low[rmz]))"))"
echo "scan / du                $(ratio "${med[scan]}" "${med[du]}")  ($(ratio "${low[scan]}" "${low[du]}"))"
echo "scan / diskus -j2        $(ratio "${med[scan]}" "${med[diskus]}")  ($(ratio "${low[scan]}" "${low[diskus]}"))   goal <= 0.9x"
[ -n "${med[reap-before]:-}" ] && echo "reap / reap SK_BEFORE     $(ratio "${med[reap]}" "${med[reap-before]}")  ($(ratio "${low[reap]}" "${low[reap-before]}"));" \
    "SK_BEFORE: reap / rm -rf $(ratio "${med[reap-before]}" "${med[rm-rf]}"), reap / rmz $(ratio "${med[reap-before]}" "${med[rmz]}")"
[ -n "${med[lsof]:-}" ] && echo "scan / lsof +D           $(ratio "${med[scan]}" "${med[lsof]}")  ($(ratio "${low[scan]}" "${low[lsof]}"))"
echo
echo "phases of the reap (medians): scan + decisions (reap --dry-run) $(awk -v t="${med[dry-run]}" 'BEGIN { printf "%.3f s", t / 1e6 }');" \
    "the rest (claim, quarantine, re-check, delete) $(awk -v a="${med[reap]}" -v b="${med[dry-run]}" 'BEGIN { printf "%.3f s", (a - b) / 1e6 }')" \
    "= $(ratio "$((med[reap] - med[dry-run]))" "${med[rmz]}") rmz, $(ratio "$((med[reap] - med[dry-run]))" "${med[rm-rf]}") rm -rf"

# The best any reaper could do that scans before it deletes (as the
# reap must: its decisions need every entry's age and size) and then
# deletes no cheaper than rmz: both CPU times spread over every core with
# nothing else, no claim, quarantine, check or /proc pass.
cores=$(nproc)
echo "CPU (medians): reap $(awk -v t="${cpu[reap]}" 'BEGIN { printf "%.3f s", t / 1e6 }')," \
    "scan $(awk -v t="${cpu[scan]}" 'BEGIN { printf "%.3f s", t / 1e6 }')," \
    "rmz $(awk -v t="${cpu[rmz]}" 'BEGIN { printf "%.3f s", t / 1e6 }')," \
    "rm -rf $(awk -v t="${cpu[rm-rf]}" 'BEGIN { printf "%.3f s", t / 1e6 }');" \
    "the reap kept $(awk -v c="${cpu[reap]}" -v w="${med[reap]}" 'BEGIN { printf "%.2f", c / w }') of $cores cores busy"
echo "floor for a scan then a deletion on $cores cores, (scan CPU + rmz CPU) / $cores:" \
    "$(awk -v a="${cpu[scan]}" -v b="${cpu[rmz]}" -v n="$cores" 'BEGIN { printf "%.3f s", (a + b) / n / 1e6 }')" \
    "= $(ratio "$(((cpu[scan] + cpu[rmz]) / cores))" "${med[rm-rf]}") rm -rf"

[ "$runs" = 0 ] || profile
}
# How long a reap keeps entries away from their names (issue 25, item 3):
# 5,000 old entries of 100 files beside 1,000 processes, 100 of them
# working in an entry, 20 entries first used once the reap has begun.
if [ "${WINDOW:-1}" = 1 ]; then
    win=$work/window
    mkdir -p "$win"
    echo
    for bin in "$sk" ${SK_BEFORE:+"$SK_BEFORE"}; do
        [ "$bin" = "$sk" ] || echo "SK_BEFORE:"
        python3 bench/reap/window.py "$bin" "$win" "${WINDOW_ENTRIES:-5000}" "${WINDOW_FILES:-100}" \
            "${WINDOW_PROCESSES:-1000}" "${WINDOW_HELD:-100}" || echo "bench/reap: window: FAIL" >&2
    done
    rm -rf "$win"
fi
[ "${STRACE:-1}" = 0 ] && exit 0
# Syscall counts: one reap (of a fresh copy) and one scan.
top_syscalls() { # top_syscalls FILE
    # strace -c: header (2 lines), rows, a dashed line, the total.
    awk 'NR <= 2 || (NR > 2 && NR <= 12 && !/^-/)' "$1"
    grep -E '^-+|total' "$1" | tail -1
}
per() { # per FILE SYSCALL DENOMINATOR NAME
    awk -v s="$2" -v d="$3" -v n="$4" '$NF == s { c = $4; printf "  %-12s %8d calls = %.2f per %s\n", s, c, c / d, n }' "$1"
}
fresh
strace -f -c -S calls -o "$work/reap.strace" "$sk" reap "${reap_args[@]}" "$victim" >"$work/out" 2>&1
check_empty "reap under strace"
strace -f -c -S calls -o "$work/scan.strace" "$sk" scan --json --entries "$tpl" >/dev/null 2>&1
whats="reap scan"
if [ -n "${SK_BEFORE:-}" ]; then
    # The same counts for the binary before, on a fresh copy of its own.
    fresh
    strace -f -c -S calls -o "$work/reap-before.strace" "$SK_BEFORE" reap "${reap_args[@]}" "$victim" >"$work/out" 2>&1
    check_empty "SK_BEFORE's reap under strace"
    whats="reap reap-before scan"
fi
for what in $whats; do
    echo
    echo "syscalls of one $what (strace -f -c -S calls; $ninodes inodes, $ndirs dirs, $entries entries), top 10:"
    top_syscalls "$work/$what.strace"
    echo "  by time in the call (summed over threads, blocking waits included), top 5:"
    awk 'NR > 2 && !/^-/ && $NF != "total"' "$work/$what.strace" | sort -k2 -g -r | head -5 |
        awk '{ printf "    %-16s %10.3f s %9d calls\n", $NF, $2, $4 }'
    for s in statx newfstatat fstat openat openat2 getdents64 unlinkat renameat2 close flock; do
        per "$work/$what.strace" "$s" "$ninodes" inode
    done | sed 's/^/ /'
    per "$work/$what.strace" getdents64 "$ndirs" dir
    for s in renameat2 statx flock getpid geteuid openat2 close; do
        per "$work/$what.strace" "$s" "$entries" entry
    done
done
