#!/usr/bin/env bash
# Type-checks the `sandkeeper` crate (the one test suites add) for the
# other systems its users are on, from this Linux machine, without their
# SDKs: Debian's rustc (rustc-web) builds each target's standard library
# from its own source (rust-web-src) with `-Zbuild-std`, which
# RUSTC_BOOTSTRAP=1 unlocks. Nothing is linked or run: what is checked is
# that every item, cfg and call the crate makes exists there.
#
# usage: scripts/check-targets.sh [-t TARGET]... [CARGO CHECK ARGS...]
#        (default targets: x86_64-apple-darwin x86_64-unknown-freebsd
#        x86_64-pc-windows-gnu; default args: -p sandkeeper --all-targets)
# env:   XTARGET_DIR  where the targets' standard libraries and the checks
#                     are built (default: a cache outside the checkout,
#                     ${XDG_CACHE_HOME:-~/.cache}/sandkeeper-xtarget; the
#                     first build takes 2-3 minutes per target, later ones
#                     seconds)
# Installs the Debian packages it needs when missing (as root).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
while [ "${1:-}" = -t ]; do
    [ -n "${2:-}" ] || { echo "check-targets: -t needs a target triple" >&2; exit 2; }
    targets+=("$2"); shift 2
done
[ ${#targets[@]} -gt 0 ] || targets=(x86_64-apple-darwin x86_64-unknown-freebsd x86_64-pc-windows-gnu)
[ $# -gt 0 ] || set -- -p sandkeeper --all-targets
need=()
[ -x /usr/bin/rustc ] || need+=(rustc-web cargo-web)
[ -f /usr/lib/rustlib/src/rust/library/Cargo.lock ] || need+=(rust-web-src)
command -v x86_64-w64-mingw32-dlltool >/dev/null || need+=(binutils-mingw-w64-x86-64)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "check-targets: needs the Debian packages ${need[*]}; install them as root" >&2
        exit 1
    fi
    echo "check-targets: installing ${need[*]} (Debian packages)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo_bin=/usr/bin/cargo
[ -x "$cargo_bin" ] || cargo_bin=cargo
dir=${XTARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sandkeeper-xtarget}
rc=0
for t in "${targets[@]}"; do
    build_std=std,panic_abort
    case " $* " in *" --all-targets "*|*" --tests "*) build_std=std,panic_abort,test ;; esac
    if RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$dir" \
        "$cargo_bin" check -q -Zbuild-std="$build_std" --target "$t" "$@"; then
        echo "check-targets: $t ok"
    else
        echo "check-targets: $t FAILED" >&2
        rc=1
    fi
done
exit $rc
