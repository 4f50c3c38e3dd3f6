#!/usr/bin/env bash
# Measurement: what `sandkeeper::inuse::open_elsewhere` (the write-lease
# check a normal user can make on their own files) costs per file, against
# one fstatat per file (the walk's own cost), median of 5 runs.
#
# Usage:  bench/lease/run.sh          Knobs: FILES=5000
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
CARGO_PROFILE_DEV_DEBUG=0 FILES=${FILES:-5000} cargo test --quiet --release -p sandkeeper-engine --test inuse \
    lease_probe_cost -- --ignored --exact --nocapture 2>&1 | grep 'files:'
