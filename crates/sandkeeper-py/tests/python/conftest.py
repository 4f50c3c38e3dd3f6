"""Helpers for sandkeeper's Python tests.

Run by `crates/sandkeeper-py/tests/wheel.rs` (part of `cargo test`): the
wheel is built by maturin into a fresh venv and pytest runs there, as PID 1
of a private PID namespace when root (`SK_PY_NAMESPACE=1`): in-use checks
need every process to be inspectable, and on some machines even root cannot
inspect the host's PID 1.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

IN_NAMESPACE = os.environ.get("SK_PY_NAMESPACE") == "1"

needs_namespace = pytest.mark.skipif(
    not IN_NAMESPACE,
    reason="in-use checks need a private PID namespace (run as root by tests/wheel.rs)",
)


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    """A fresh, empty root for sandboxes (inside the run's TMPDIR)."""
    path = tmp_path / "root"
    path.mkdir()
    return path


def python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    """A Python child running `code` (dedented) with this venv's interpreter."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def cli() -> list:
    """The Rust `sandkeeper` binary (when cargo built it), else the wheel's
    console script: the same code either way."""
    rust = os.environ.get("SANDKEEPER_RUST_CLI")
    if rust and os.path.exists(rust):
        return [rust]
    return [shutil.which("sandkeeper") or os.path.join(os.path.dirname(sys.executable), "sandkeeper")]


def cli_states(root: pathlib.Path) -> dict:
    """`sandkeeper scan --json --entries root`: name -> state."""
    out = subprocess.run(
        cli() + ["scan", "--json", "--entries", str(root)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    doc = json.loads(out)
    return {e["name"]: e["state"] for e in doc["roots"][0]["entries"]}


def pytest_configure(config):
    # Scans in the suite's trusted PID namespace warn that what is outside
    # it was assumed (SandkeeperWarning, as the command's `warning:`
    # lines): expected here; tests that check it use pytest.warns.
    config.addinivalue_line("filterwarnings", "ignore::sandkeeper.SandkeeperWarning")
