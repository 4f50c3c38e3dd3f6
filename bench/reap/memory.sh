#!/usr/bin/env bash
# Memory benchmark for issue 14: peak RSS of sandkeeper over N top-level
# entries (empty files, then empty directories) on a tmpfs:
#
#   sandkeeper scan --json
#   sandkeeper scan --json --entries
#   sandkeeper scan                     (the table)
#   sandkeeper reap --dry-run --match '*' --older-than 0s --grace 0s
#   sandkeeper reap --match '*' --older-than 0s --grace 0s   (must empty it)
#   sandkeeper watch --once --config C  (C: that root, grace 0s, a rule
#                                        match "*", older_than "0s") inside
#                                        a cgroup with a 512 MiB memory limit,
#                                        as the shipped unit's MemoryMax=512M
#
# each under /usr/bin/time -v ("Maximum resident set size"; for watch also
# the cgroup's own peak and whether it was OOM-killed). Prints a table.
#
# usage: sudo bench/reap/memory.sh [N...]     (default 1000000; several N
#                                              give one table)
# knobs: KINDS="files dirs"   which variants
#        LIMIT=512M           the cgroup's memory limit
#        TIMEOUT=150          seconds a real reap or watch may take before it
#                             is stopped (SIGTERM); the row then says how many
#                             entries it removed meanwhile (the peak RSS is
#                             that of the run so far: the scan and the
#                             decisions come before the first removal)
#        SK=/ABS/PATH         the sandkeeper binary to measure (default: a
#                             release build of this checkout, made first)
#        ONLY="scan --json --entries"   measure only the commands whose
#                             label contains this (default: all)
#        NAME_LEN=250         every name this many bytes long (at most 255,
#                             NAME_MAX): `app-235-<i>-` and a seeded random
#                             hex tail; default: `app-235-<i>` alone (9-14)
#
# The cgroup: `systemd-run --scope -p MemoryMax=LIMIT` when systemd runs;
# else a cgroup made by hand, v2 (memory.max) or v1 (memory.limit_in_bytes),
# as a child of this script's own cgroup, removed at exit. Everything runs
# inside a private PID namespace with SANDKEEPER_TRUST_PID_NAMESPACE=1 (see
# bench/reap/run.sh); the tmpfs goes with it. Needs root. Not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=${LIMIT:-512M}
timeout=${TIMEOUT:-150}
kinds=${KINDS:-files dirs}
name_len=${NAME_LEN:-0}
case $name_len in
    ''|*[!0-9]*) echo "bench/reap/memory: NAME_LEN=$name_len: give a length in bytes, 16 to 255 (or 0: short names)" >&2; exit 2 ;;
esac
if [ "$name_len" != 0 ] && { [ "$name_len" -lt 16 ] || [ "$name_len" -gt 255 ]; }; then
    echo "bench/reap/memory: NAME_LEN=$name_len: give a length in bytes, 16 to 255 (or 0: short names)" >&2
    exit 2
fi
[ $# -eq 0 ] && set -- 1000000

if [ -z "${SANDKEEPER_BENCH_INNER:-}" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "bench/reap/memory: needs root (tmpfs, PID namespace, cgroup)" >&2
        exit 1
    fi
    if [ ! -x /usr/bin/time ]; then
        echo "bench/reap/memory: installing time (GNU time)" >&2
        apt-get install -y -qq time >&2
    fi
    if [ -z "${SK:-}" ]; then
        cargo build --quiet --release -p sandkeeper-cli
    fi
    work=$(mktemp -d "${TMPDIR:-/tmp}/sandkeeper-bench-memory.XXXXXX")
    cg=
    cleanup() {
        if [ -n "$cg" ]; then
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                rmdir "$cg" 2>/dev/null && break
                sleep 0.5
            done
            [ -d "$cg" ] && echo "bench/reap/memory: could not remove the cgroup $cg" >&2
        fi
        rmdir "$work" 2>/dev/null || true
    }
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    bytes=$(numfmt --from=iec "$limit")
    # The 512 MiB box: systemd, else a cgroup by hand.
    state=$(systemctl is-system-running 2>/dev/null || true)
    if [ "$state" = running ] || [ "$state" = degraded ]; then
        box=systemd
    elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        box=v2
        cg=/sys/fs/cgroup$(awk -F: '$1 == 0 { print $3 }' /proc/self/cgroup)
        cg=${cg%/}/sandkeeper-bench-$$
        mkdir "$cg"
        echo "$bytes" >"$cg/memory.max"
        echo 0 >"$cg/memory.swap.max" 2>/dev/null || true
    elif [ -d /sys/fs/cgroup/memory ]; then
        box=v1
        cg=/sys/fs/cgroup/memory$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
        cg=${cg%/}/sandkeeper-bench-$$
        mkdir "$cg"
        echo "$bytes" >"$cg/memory.limit_in_bytes"
        echo "$bytes" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
    else
        box=none
        echo "bench/reap/memory: no way to make a memory cgroup here; watch runs without one" >&2
    fi
    # The namespace is the benchmark's own: trust it (docs/security.md).
    env SANDKEEPER_BENCH_INNER="$work" SANDKEEPER_BENCH_BOX="$box" SANDKEEPER_BENCH_CG="$cg" \
        SANDKEEPER_TRUST_PID_NAMESPACE=1 \
        unshare --pid --fork --mount-proc --kill-child --propagation private "$0" "$@"
    exit $?
fi

# --- Inside the private PID and mount namespace, as PID 1. ---
work=$SANDKEEPER_BENCH_INNER
box=$SANDKEEPER_BENCH_BOX
cg=$SANDKEEPER_BENCH_CG
sk=${SK:-$PWD/target/release/sandkeeper}
root=$work/root
cleanup() { umount "$work" 2>/dev/null || umount -l "$work" 2>/dev/null || true; }
trap cleanup EXIT
# PID 1 of the namespace gets only the signals it handles.
trap 'exit 130' INT
trap 'exit 143' TERM

# build_tree KIND N: a fresh tmpfs with N empty files or directories in $root.
build_tree() {
    umount "$work" 2>/dev/null || true
    mount -t tmpfs -o size=4g,nr_inodes=0,mode=0700 sandkeeper-bench-memory "$work"
    python3 - "$root" "$1" "$2" "$name_len" <<'EOF'
import os, random, sys
root, kind, n, name_len = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.mkdir(root)
os.chdir(root)
rng = random.Random(14)
def name(i):
    if name_len == 0:
        return f"app-235-{i}"
    head = f"app-235-{i}-"
    tail = name_len - len(head)
    return head + rng.randbytes((tail + 1) // 2).hex()[:tail]
if kind == "files":
    for i in range(n):
        os.close(os.open(name(i), os.O_CREAT | os.O_WRONLY, 0o644))
else:
    for i in range(n):
        os.mkdir(name(i))
EOF
}
count() { find "$root" -mindepth 1 -maxdepth 1 ! -name .sandkeeper-trash | wc -l; }

config=$work/config.toml
reap_args=(--match '*' --older-than 0s --grace 0s)

declare -a rows=()
# selected LABEL: whether ONLY lets that command be measured.
selected() { case $1 in *"${ONLY:-}"*) return 0 ;; esac; return 1; }
# measure N KIND LABEL [in-box] CMD...: one row of the table. What a
# command writes to stderr (a watch or reap logs a line per removal) goes
# through a pipe and only its last lines are kept: a file of every line on
# the tmpfs would be shmem charged to the box (130 MB of lines for a
# million short names, more than 250 MB for long ones).
measure() {
    local n=$1 kind=$2 label=$3 inbox=0 rc=0 rss wall note=
    shift 3
    selected "$label" || return 0
    if [ "$1" = in-box ]; then inbox=1; shift; fi
    if [ "$1" = limited ]; then shift; set -- timeout --kill-after=10 "$timeout" "$@"; fi
    local tv=$work/time
    if [ "$inbox" = 1 ] && [ "$box" != none ]; then
        case $box in
            systemd) systemd-run --quiet --scope -p MemoryMax="$limit" -p MemorySwapMax=0 \
                /usr/bin/time -v -o "$tv" "$@" 2>&1 >/dev/null | tail -n 5 >"$work/err" || rc=$? ;;
            v1|v2)
                if [ "$box" = v1 ]; then
                    echo 0 >"$cg/memory.max_usage_in_bytes"
                    echo 0 >"$cg/memory.kmem.max_usage_in_bytes" 2>/dev/null || true
                fi
                sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' _ "$cg" \
                    /usr/bin/time -v -o "$tv" "$@" 2>&1 >/dev/null | tail -n 5 >"$work/err" || rc=$?
                local peak events kmem=
                if [ "$box" = v1 ]; then
                    peak=$(cat "$cg/memory.max_usage_in_bytes")
                    events=$(awk '$1 == "oom_kill" { print $2 }' "$cg/memory.oom_control")
                    # Kernel memory charged to the box (dentries of the
                    # names the quarantine gives, among others).
                    if [ -r "$cg/memory.kmem.max_usage_in_bytes" ]; then
                        kmem=$(cat "$cg/memory.kmem.max_usage_in_bytes")
                        kmem=", kernel memory peak $((kmem / 1048576)) MiB"
                    fi
                else
                    peak=$(cat "$cg/memory.peak" 2>/dev/null || echo 0)
                    events=$(awk '$1 == "oom_kill" { print $2 }' "$cg/memory.events")
                fi
                note="cgroup $box limit $limit: peak $((peak / 1048576)) MiB (page cache included${kmem}), oom_kill total ${events:-?}"
                ;;
        esac
    else
        /usr/bin/time -v -o "$tv" "$@" 2>&1 >/dev/null | tail -n 5 >"$work/err" || rc=$?
    fi
    rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$tv")
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { print $2 }' "$tv")
    if grep -q "terminated by signal" "$tv"; then
        note="${note:+$note; }$(grep -o 'terminated by signal [0-9]*' "$tv")"
    fi
    if [ "$rc" = 124 ]; then
        note="${note:+$note; }stopped after ${timeout} s (TIMEOUT), removed $((n - $(count))) of $n"
        rc=0
    fi
    [ "$rc" != 0 ] && note="${note:+$note; }exit $rc: $(tail -1 "$work/err" | cut -c1-80)"
    rm -f "$tv" "$work/err"
    rows+=("$(printf '%-9s %-5s %-42s %9.1f %8.0f %9s  %s' "$n" "$kind" "$label" \
        "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" \
        "$(awk -v k="$rss" -v n="$n" 'BEGIN { print k * 1024 / n }')" "$wall" "$note")")
    echo "bench/reap/memory: ${rows[-1]}" >&2
    # Issue 25, item 8: under 128 MiB at a million entries (or fewer),
    # whatever the names' length.
    if [ "$n" -le 1000000 ] && [ "${rss:-0}" -ge $((128 * 1024)) ]; then
        over+=("$n $kind $label")
    fi
}
over=()

for n in "$@"; do
    for kind in $kinds; do
        echo "bench/reap/memory: $n empty $kind ..." >&2
        build_tree "$kind" "$n"
        measure "$n" "$kind" "scan --json" "$sk" scan --json "$root"
        measure "$n" "$kind" "scan --json --entries" "$sk" scan --json --entries "$root"
        measure "$n" "$kind" "scan (table)" "$sk" scan "$root"
        measure "$n" "$kind" "reap --dry-run" "$sk" reap --dry-run "${reap_args[@]}" "$root"
        measure "$n" "$kind" "reap" limited "$sk" reap "${reap_args[@]}" "$root"
        left=$(count)
        if selected reap && [ "$left" = "$n" ]; then
            echo "bench/reap/memory: FAIL: reap removed nothing of $n entries" >&2
            exit 1
        fi
        selected "watch --once (reaps all; ${limit} cgroup)" || continue
        build_tree "$kind" "$n"
        cat >"$config" <<EOF
[[root]]
path = "$root"
grace = "0s"
[[root.rule]]
match = "*"
older_than = "0s"
EOF
        measure "$n" "$kind" "watch --once (reaps all; ${limit} cgroup)" in-box limited "$sk" watch --once --config "$config"
        rm -f "$config"
    done
done
umount "$work"

echo
names="names app-235-<i> (9-14 bytes)"
[ "$name_len" != 0 ] && names="names of $name_len bytes (app-235-<i>- and random hex)"
echo "peak RSS (GNU time, Maximum resident set size); $names; $(nproc) cores; in a private PID namespace; tmpfs"
printf '%-9s %-5s %-42s %9s %8s %9s  %s\n' entries kind command "RSS MiB" "B/entry" "wall" notes
printf '%s\n' "${rows[@]}"
if [ ${#over[@]} = 0 ]; then
    echo "goal (issue 25, item 8): every peak under 128 MiB at up to 1,000,000 entries: met"
else
    echo "goal (issue 25, item 8): every peak under 128 MiB at up to 1,000,000 entries: NOT met by: $(printf '%s; ' "${over[@]}")"
fi
