#!/usr/bin/env bash
# What a test suite pays to add `sandkeeper` against `tempfile` (issue 26):
#
#   - the crates in the normal dependency tree (`cargo tree -e normal`),
#     the crate itself included;
#   - the clean build time of a one-file crate that uses `Sandbox`
#     against the same crate using `tempfile::TempDir` (both in debug, the
#     way `cargo test` builds dev-dependencies), N runs each, alternating,
#     each from an empty target directory; medians and their ratio.
#
# usage: bench/deps/run.sh [N]      (default 3)
# The two crates are made in a temporary directory outside the checkout
# and removed at exit; the registry's sources must be reachable (or in
# cargo's cache). Not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
runs=${1:-3}
case $runs in ''|*[!0-9]*|0) echo "bench/deps: N=$runs: give a number of runs, 1 or more" >&2; exit 2 ;; esac
work=$(mktemp -d "${TMPDIR:-/tmp}/sandkeeper-bench-deps.XXXXXX")
trap 'rm -rf "$work"' EXIT

make_crate() { # name dependency-line main-body
    mkdir -p "$work/$1/src"
    cat >"$work/$1/Cargo.toml" <<TOML
[package]
name = "$1"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$2

[workspace]
TOML
    printf '%s\n' "$3" >"$work/$1/src/main.rs"
}
make_crate uses-tempfile 'tempfile = "3"' 'fn main() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("x"), "1").unwrap();
}'
make_crate uses-sandkeeper "sandkeeper = { path = \"$repo/crates/sandkeeper\" }" 'fn main() {
    let dir = sandkeeper::Sandbox::new().unwrap();
    std::fs::write(dir.path().join("x"), "1").unwrap();
}'

count() { # crate dir: the distinct packages of its normal dependency tree
    (cd "$work/$1" && cargo tree -q -e normal --prefix none --no-dedupe | sed 's/ (.*//' | sort -u | grep -c .)
}
# Resolve and fetch first, so that no build is timed with a download.
for c in uses-tempfile uses-sandkeeper; do
    (cd "$work/$c" && cargo fetch -q)
done
# Each crate counts itself: subtract it.
t_deps=$(( $(count uses-tempfile) - 1 ))
s_deps=$(( $(count uses-sandkeeper) - 1 ))

build() { # crate dir: seconds of a clean debug build
    local target="$work/target-$1"
    rm -rf "$target"
    local start end
    start=$(date +%s.%N)
    (cd "$work/$1" && CARGO_TARGET_DIR="$target" cargo build -q --offline)
    end=$(date +%s.%N)
    rm -rf "$target"
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }'
}
declare -a tt st
for i in $(seq "$runs"); do
    tt+=("$(build uses-tempfile)")
    st+=("$(build uses-sandkeeper)")
    echo "bench/deps: run $i/$runs: tempfile ${tt[-1]} s, sandkeeper ${st[-1]} s" >&2
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
tm=$(median "${tt[@]}")
sm=$(median "${st[@]}")
echo
echo "a crate that adds one dependency and makes one temporary directory; $(nproc) cores; $runs clean debug builds each, alternating"
printf '%-12s %14s %18s   %s\n' dependency "crates (tree)" "clean build (s)" "all runs (s)"
printf '%-12s %14s %18s   %s\n' tempfile "$t_deps" "$tm" "${tt[*]}"
printf '%-12s %14s %18s   %s\n' sandkeeper "$s_deps" "$sm" "${st[*]}"
echo "sandkeeper / tempfile: $(awk -v a="$sm" -v b="$tm" 'BEGIN { printf "%.2fx", a / b }') the build (goal <= 2.5x); $s_deps crates in its tree (goal <= 11, itself included)"
(cd "$work/uses-sandkeeper" && cargo tree -q -e normal -p sandkeeper --prefix depth) | sed 's/^/  /'
