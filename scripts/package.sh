#!/usr/bin/env bash
# Builds every artifact of a release into target/dist/ (docs/releasing.md):
#
#   crates/   sandkeeper, sandkeeper-engine, sandkeeper-cli (.crate), packaged
#             and verified as `cargo publish --workspace --dry-run` does:
#             each built alone from its packaged sources
#   python/   the abi3 wheel for CPython 3.9+ on every x86_64 glibc Linux
#             (manylinux2014: glibc 2.17, linked by zig), and the sdist
#   sandkeeper_<version>_amd64.deb
#             the command, its man pages, bash/zsh/fish completions, the
#             systemd units and /etc/sandkeeper/config.toml (a conffile)
#
# usage: scripts/package.sh
#   ALLOW_DIRTY=1   package a working tree with uncommitted changes
#
# Tools, installed when missing, outside the checkout: cargo-deb (`cargo
# install --locked`); maturin and ziglang (from PyPI, into a venv under
# $SANDKEEPER_PACKAGE_CACHE, default ~/.cache/sandkeeper-package, where the
# wheel's build is kept too).
# The artifacts are proven by crates/sandkeeper-cli/tests/artifacts.rs
# (run by .ci/run after this script).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "package: $*" >&2; }

meta=$(cargo metadata --format-version 1 --no-deps --locked)
field() { python3 -c "import json, sys; d = json.load(sys.stdin); print($1)" <<<"$meta"; }
target=$(field 'd["target_directory"]')
version=$(field 'next(p["version"] for p in d["packages"] if p["name"] == "sandkeeper-cli")')
dist=$target/dist
rm -rf "$dist"
mkdir -p "$dist/crates" "$dist/python"

cache=${SANDKEEPER_PACKAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandkeeper-package}
if ! cargo deb --version >/dev/null 2>&1; then
    say "installing cargo-deb"
    cargo install cargo-deb --locked
fi
venv=$cache/venv
if ! "$venv/bin/maturin" --version >/dev/null 2>&1 || ! "$venv/bin/python" -m ziglang version >/dev/null 2>&1; then
    say "installing maturin and ziglang into $venv"
    rm -rf "$venv"
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "maturin>=1.5,<2" ziglang
fi

dirty=()
[ -n "${ALLOW_DIRTY:-}" ] && dirty=(--allow-dirty)

# (What `cargo publish --workspace --dry-run` does short of the upload;
# the publishable members only: the test kit and the Python crate are
# `publish = false`.)
say "crates: packaged and verified (cargo package)"
rm -f "$target"/package/*.crate
# cargo verifies each crate against the others' packaged sources, served
# from a local registry under target/package and unpacked once into
# $CARGO_HOME/registry/src/-<hash of that registry's path>/. It never
# unpacks a name and version again, so a second run from the same checkout
# path would build this run's engine against an earlier run's small crate.
# Those unnamed ("-<hash>") registries are cargo package's alone: forget
# our crates' unpacked copies there.
for crate in sandkeeper sandkeeper-engine sandkeeper-cli; do
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/"$crate-$version"
done
cargo package --locked "${dirty[@]}" -p sandkeeper -p sandkeeper-engine -p sandkeeper-cli
for crate in sandkeeper sandkeeper-engine sandkeeper-cli; do
    cp "$target/package/$crate-$version.crate" "$dist/crates/"
done

say "debian: the command, its pages, completions and units"
cargo build --release --locked -p sandkeeper-cli
sk=$target/release/sandkeeper
assets=$target/release/deb-assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions" "$assets/systemd"
"$sk" man --out-dir "$assets/man"
gzip -9n "$assets"/man/*
"$sk" completions bash >"$assets/completions/sandkeeper.bash"
"$sk" completions zsh >"$assets/completions/_sandkeeper"
"$sk" completions fish >"$assets/completions/sandkeeper.fish"
# The units as contrib/systemd has them, for the package's /usr/bin.
for unit in contrib/systemd/*.service contrib/systemd/*.timer; do
    sed '/^#/!s|/usr/local/bin/sandkeeper|/usr/bin/sandkeeper|g' "$unit" >"$assets/systemd/${unit##*/}"
done
cargo deb -p sandkeeper-cli --no-build --no-strip --output "$dist/sandkeeper_${version}_amd64.deb"

say "python: the manylinux2014 abi3 wheel and the sdist"
# (Its own target directory, in the cache: a build linked by zig for glibc
# 2.17 is kept apart from the workspace's, and reused by the next run.)
CARGO_TARGET_DIR="$cache/wheel-target" PATH="$venv/bin:$PATH" maturin build --release --locked --zig --compatibility manylinux2014 \
    -m crates/sandkeeper-py/Cargo.toml -o "$dist/python"
PATH="$venv/bin:$PATH" maturin sdist -m crates/sandkeeper-py/Cargo.toml -o "$dist/python"

say "done: $dist"
(cd "$dist" && find . -type f -printf '%10s  %p\n' | sort -k2) >&2
