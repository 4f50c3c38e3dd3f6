"""The exceptions of :mod:`sandkeeper`, one class per kind of the Rust
library's ``sandkeeper::Error``.

Every exception carries ``kind`` (the Rust kind's name), ``path`` and
``pid`` (where the error concerns one) and ``hint`` (what to do about it),
and its message names the value or path at fault.
"""

from __future__ import annotations

import os
from typing import Optional


class SandkeeperError(Exception):
    """Base class of every error sandkeeper raises."""

    kind: str = "Io"

    def __init__(
        self,
        message: str,
        *,
        path: Optional[str] = None,
        pid: Optional[int] = None,
        hint: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.pid = pid
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (hint: {self.hint})"
        return self.message


class IoError(SandkeeperError, OSError):
    """A system call failed; ``errno`` has its number (also an :class:`OSError`)."""

    kind = "Io"

    def __init__(self, message: str, *, errno: Optional[int] = None, **kw) -> None:
        SandkeeperError.__init__(self, message, **kw)
        self.errno = errno
        self.strerror = os.strerror(errno) if errno is not None else None
        self.filename = kw.get("path")

    def __str__(self) -> str:
        return SandkeeperError.__str__(self)


class InvalidInput(SandkeeperError, ValueError):
    """A value given by the caller or the environment is not acceptable
    (a tag containing ``/``, a negative duration, an unknown keep policy)."""

    kind = "InvalidInput"


class UnusableRoot(SandkeeperError, ValueError):
    """The directory meant to hold sandboxes (or to scan) cannot be used:
    it does not exist, is not a directory, or is not writable."""

    kind = "UnusableRoot"


class UnsafeRoot(SandkeeperError, PermissionError):
    """A directory that must belong to the current user is a symlink,
    belongs to someone else, or is open to other users."""

    kind = "UnsafeRoot"


class Held(SandkeeperError):
    """A keyed sandbox name is held by a live process (``pid`` names it)."""

    kind = "Held"


class NameConflict(SandkeeperError):
    """Two different call sites claimed the same keyed name in one process."""

    kind = "NameConflict"


class InvalidLease(SandkeeperError):
    """A lease record could not be parsed."""

    kind = "InvalidLease"


class TimedOut(SandkeeperError, TimeoutError):
    """Waiting for a keyed name to become free took too long."""

    kind = "TimedOut"


class Removal(SandkeeperError):
    """A directory could not be removed completely; the message says what
    was left and why, the hint what becomes of it."""

    kind = "Removal"


class Unsupported(SandkeeperError):
    """The platform does not support the operation (sandkeeper needs Linux)."""

    kind = "Unsupported"


class Stopped(SandkeeperError):
    """A stop was asked for before the work was done."""

    kind = "Stopped"


_BY_KIND = {
    cls.kind: cls
    for cls in (
        IoError,
        InvalidInput,
        UnusableRoot,
        UnsafeRoot,
        Held,
        NameConflict,
        InvalidLease,
        TimedOut,
        Removal,
        Unsupported,
        Stopped,
    )
}


def _from_native(
    kind: str,
    message: str,
    path: Optional[str],
    pid: Optional[int],
    hint: Optional[str],
    errno: Optional[int],
) -> SandkeeperError:
    """Builds the exception for a Rust error (called by ``_native``)."""
    cls = _BY_KIND.get(kind, SandkeeperError)
    if cls is IoError:
        return IoError(message, errno=errno, path=path, pid=pid, hint=hint)
    err = cls(message, path=path, pid=pid, hint=hint)
    if cls is SandkeeperError:
        err.kind = kind
    return err


class SandkeeperWarning(UserWarning):
    """What a scan or a reap could not see, or assumed: the lines the
    command prints as ``warning:`` (a process hidden even from root, a blind
    spot, processes vouched for), in the Python package's words
    (``ignore_pids=[1]`` where the command says ``--ignore-pid 1``). Also on
    the report: ``ScanReport.warnings``, ``ReapReport.warnings``."""
