#!/usr/bin/env bash
# Benchmark: how well `sandkeeper::pattern::group` names families, and how
# fast, on names made the way real programs make them (Python and Rust
# tempfile, mktemp, Go's testing package, systemd PrivateTmp, pip, gcc,
# Chromium/puppeteer, node, npm, ssh-agent, test helpers, launcher run dirs,
# fixed names: crates/sandkeeper/tests/families/corpus.rs, each generator
# with its family written down by hand).
#
#   bench/families/run.sh [SEEDS]      (default 200 seeds x 3 neighbour mixes)
#
# Prints the share of names in the right family (its pattern is the one
# written down, and no other generator's name shares it) over all corpora
# and the worst corpus, the generators that were ever wrong, and the median
# time to group 50,000 names in a release build. Not a test; the same
# corpus is checked by `cargo test -p sandkeeper --test families`.
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=${1:-200}

echo "building the families corpus in release ..." >&2
cargo test --quiet --release --locked -p sandkeeper --test families --no-run >&2
echo "$(nproc) cores; $seeds seeds" >&2
FAMILIES_SEEDS=$seeds cargo test --quiet --release --locked -p sandkeeper --test families \
    -- --ignored --exact report --nocapture --test-threads 1 2>&1 |
    grep -v -E '^(running [0-9]+ tests?|test result:|\s*$)|^test report'
