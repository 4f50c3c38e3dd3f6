# Shared by the bench scripts (source it; needs $runs).

# median_ms CMD... : runs CMD once to warm up, then $runs times; prints the
# median wall time in milliseconds. A non-zero exit is not a failure
# (`lsof +D` exits 1 when some file cannot be read).
median_ms() {
    "$@" >/dev/null 2>&1 || true
    local times=() start end
    for ((r = 0; r < runs; r++)); do
        start=$(date +%s%N)
        "$@" >/dev/null 2>&1 || true
        end=$(date +%s%N)
        times+=($(((end - start) / 1000)))
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{ t[NR] = $1 } END { m = t[int((NR + 1) / 2)]; printf "%.1f\n", m / 1000 }'
}

# bench NAME CMD... : records NAME and the median of CMD in names[]/medians[].
declare -a names=() medians=()
bench() {
    local name=$1
    shift
    names+=("$name")
    medians+=("$(median_ms "$@")")
}
