"""The ``sandkeeper`` console script: the Rust CLI, in the same wheel."""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    """Runs the ``sandkeeper`` command on ``sys.argv`` and exits with its status."""
    from . import _native

    # Behave as the Rust binary does: SIGINT ends the command (Python's own
    # handler would only set a flag nobody reads while Rust runs).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    argv = [os.fsencode(a).decode("utf-8", "surrogateescape") for a in sys.argv]
    argv[0] = "sandkeeper"
    status = _native.cli_main(argv)
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
