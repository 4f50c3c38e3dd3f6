#!/usr/bin/env bash
# Benchmark: the cost of recording origins (issue 17, docs/origins.md).
#
#   sudo bench/origins/run.sh [COUNT] [RATE]    (default 10000 at 10000/s)
#   PROFILE=dev sudo bench/origins/run.sh 5000  (skip the release build)
#
# A fanotify tracker on a private tmpfs root while another process makes
# COUNT directories at RATE per second: the tracker's CPU time (it is all
# the measuring process does) and the events lost (kernel queue overflows,
# entries left without a record); then `scan` of that root against `scan`
# plus reading every entry's origin, medians of 5. Run by the ignored test
# `bench_origins` of crates/sandkeeper-engine/tests/origin.rs. Not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-10000}
rate=${2:-10000}
profile=${PROFILE:-release}
if [ "$(id -u)" != 0 ]; then
    echo "bench/origins: needs root (fanotify, trusted.* attributes, tmpfs)" >&2
    exit 1
fi
flags=()
[ "$profile" = release ] && flags=(--release)
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_RELEASE_DEBUG=0
SK_COUNT=$count SK_RATE=$rate cargo test --quiet "${flags[@]}" -p sandkeeper-engine --test origin -- \
    --ignored --exact bench_origins --nocapture --test-threads=1 2>&1 |
    grep -E '^(creates|tracker|events|scan)'
