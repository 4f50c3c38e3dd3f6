#!/usr/bin/env bash
# Benchmark: how well `sandkeeper::pattern::group` names families, and how
# fast, on names made the way real programs make them (Python and Rust
# tempfile, mktemp, Go's testing package, systemd PrivateTmp, pip, gcc,
# Chromium/puppeteer, node, npm, ssh-agent, test helpers, launcher run dirs,
# fixed names: crates/sandkeeper-engine/tests/families/corpus.rs, each generator
# with its family written down by hand).
#
#   bench/families/run.sh [SEEDS]      (default 200 seeds x 3 neighbour mixes)
#
# Prints the share of names in the right family (its pattern is the one
# written down, and no other generator's name shares it) over all corpora
# and the worst corpus, the generators that were ever wrong, the median
# time to group 50,000 names in a release build, and (with /usr/bin/time)
# the peak memory `group` needs per name for 1,000,000 short names. Not a
# test; the same corpus is checked by `cargo test -p sandkeeper-engine --test
# families`.
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=${1:-200}

echo "building the families corpus in release ..." >&2
cargo test --quiet --release --locked -p sandkeeper-engine --test families --no-run >&2
echo "$(nproc) cores; $seeds seeds" >&2
FAMILIES_SEEDS=$seeds cargo test --quiet --release --locked -p sandkeeper-engine --test families \
    -- --ignored --exact report --nocapture --test-threads 1 2>&1 |
    grep -v -E '^(running [0-9]+ tests?|test result:|\s*$)|^test report'

# Peak memory: the maximum resident size with and without the call to
# `group`, over 1,000,000 names.
if [ -x /usr/bin/time ]; then
    bin=$(cargo test --release --locked -p sandkeeper-engine --test families --no-run 2>&1 |
        sed -n 's/.*Executable.*(\(.*\)).*/\1/p' | tail -1)
    peak() {
        FAMILIES_GROUP=$1 /usr/bin/time -f '%M' "$bin" --ignored --exact million_names_memory \
            --test-threads 1 2>&1 >/dev/null | tail -1
    }
    without=$(peak 0)
    with=$(peak 1)
    echo "1000000 names: group needs $(( (with - without) * 1024 / 1000000 )) bytes per name at peak" \
        "(max RSS $((with / 1024)) MiB, input alone $((without / 1024)) MiB)"
fi
