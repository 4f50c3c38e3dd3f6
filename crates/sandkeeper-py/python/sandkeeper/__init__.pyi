"""Type stubs for sandkeeper (the implementation is __init__.py over the Rust _native)."""

import datetime
import os
import pathlib
import subprocess
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, TypeVar, Union

from ._errors import (
    Held as Held,
    InvalidInput as InvalidInput,
    InvalidLease as InvalidLease,
    IoError as IoError,
    NameConflict as NameConflict,
    Removal as Removal,
    SandkeeperError as SandkeeperError,
    SandkeeperWarning as SandkeeperWarning,
    Stopped as Stopped,
    TimedOut as TimedOut,
    Unsupported as Unsupported,
    UnsafeRoot as UnsafeRoot,
    UnusableRoot as UnusableRoot,
)

__version__: str

PathLike = Union[str, os.PathLike[str]]
Duration = Union[datetime.timedelta, str, int, float]
_F = TypeVar("_F", bound=Callable[[], Any])

def teardown_on_signals() -> None: ...

class Sandbox:
    def __init__(
        self,
        tag: str = "sandbox",
        root: Optional[PathLike] = None,
        *,
        keyed: bool = False,
        process_lifetime: bool = False,
        keep: Optional[str] = None,
        keep_for: Duration = ...,
        kill_grace: Duration = ...,
        checkout: Optional[PathLike] = None,
        mode: int = 0o700,
        site: Optional[str] = None,
    ) -> None: ...
    @property
    def path(self) -> pathlib.Path: ...
    @property
    def keep_policy(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def __fspath__(self) -> str: ...
    def __enter__(self) -> Sandbox: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...
    def defer(self, fn: _F) -> _F: ...
    def adopt(self, popen: subprocess.Popen[Any]) -> subprocess.Popen[Any]: ...
    def spawn(
        self,
        args: Any,
        *,
        share_lease: bool = True,
        die_with_launcher: bool = True,
        **popen_kwargs: Any,
    ) -> subprocess.Popen[Any]: ...
    def close(self) -> None: ...
    def keep(self) -> pathlib.Path: ...
    def persist(self, keep_for: Optional[Duration] = None) -> pathlib.Path: ...

class LeakRecordDir:
    def __init__(self, path: PathLike) -> None: ...
    @property
    def path(self) -> pathlib.Path: ...
    def record(
        self,
        sandbox: Sandbox,
        *,
        test_name: Optional[str],
        binary_id: Optional[str] = None,
        command: Sequence[str] = (),
        exit_code: int = 0,
    ) -> pathlib.Path: ...

class Filesystem:
    type: str
    total_bytes: int
    free_bytes: int
    extra: Dict[str, Any]

class Totals:
    entries: int
    disk_bytes: int
    apparent_bytes: int
    files: int
    dirs: int
    extra: Dict[str, Any]

class Group:
    pattern: str
    count: int
    disk_bytes: int
    apparent_bytes: int
    files: int
    dirs: int
    oldest_ms: Optional[int]
    newest_ms: Optional[int]
    states: Dict[str, int]
    reclaimable_bytes: int
    extra: Dict[str, Any]

class Entry:
    name: str
    pattern: str
    state: str
    reason: str
    disk_bytes: int
    apparent_bytes: int
    files: int
    dirs: int
    newest_mtime_ms: Optional[int]
    uid: Optional[int]
    holders: List[Dict[str, Any]]
    lease: Optional[Dict[str, Any]]
    path: Optional[pathlib.Path]
    extra: Dict[str, Any]

class ScanRoot:
    path: pathlib.Path
    filesystem: Filesystem
    totals: Totals
    groups: List[Group]
    entries: List[Entry]
    warnings: List[Any]
    extra: Dict[str, Any]
    def entry(self, name: str) -> Optional[Entry]: ...

class Process:
    pid: int
    comm: str
    reason: str
    extra: Dict[str, Any]

class ScanReport:
    schema: str
    started_ms: int
    roots: List[ScanRoot]
    uninspectable: List[Process]
    assumed: List[Process]
    blind_spots: List[str]
    assumed_blind_spots: List[str]
    assumes_unseen_free: bool
    warnings: List[str]
    extra: Dict[str, Any]
    def entries(self) -> List[Entry]: ...
    def find(self, path: PathLike) -> Optional[Entry]: ...

class Removed:
    path: pathlib.Path
    pattern: str
    state: str
    reason: str
    disk_bytes: int
    extra: Dict[str, Any]

class Skipped:
    path: pathlib.Path
    state: str
    reason: str
    reason_code: str
    disk_bytes: int
    extra: Dict[str, Any]

class ReapFailure:
    path: pathlib.Path
    error: str
    extra: Dict[str, Any]

class ReapRoot:
    path: pathlib.Path
    freed_bytes: int
    quarantine_finished: int
    quarantine_rechecked: int
    extra: Dict[str, Any]

class ReapReport:
    schema: str
    dry_run: bool
    removed: List[Removed]
    skipped: List[Skipped]
    errors: List[ReapFailure]
    freed_bytes: int
    roots: List[ReapRoot]
    assumed_blind_spots: List[str]
    assumes_unseen_free: bool
    warnings: List[str]
    extra: Dict[str, Any]
    def skipped_at(self, path: PathLike) -> Optional[Skipped]: ...
    def removed_paths(self) -> List[pathlib.Path]: ...

def scan(
    roots: Union[None, PathLike, Iterable[PathLike]] = None,
    *,
    entries: bool = False,
    ignore_pids: Iterable[int] = (),
    trust_pid_namespace: Optional[bool] = None,
) -> ScanReport: ...
def reap(
    roots: Union[None, PathLike, Iterable[PathLike]] = None,
    *,
    match: Union[str, Sequence[str]] = (),
    older_than: Optional[Duration] = None,
    keep_last: Optional[int] = None,
    target_free: Union[None, str, int] = None,
    target_free_inodes: Union[None, str, int] = None,
    owner: Union[None, str, int] = None,
    grace: Optional[Duration] = None,
    max_keep: Optional[Duration] = None,
    dry_run: bool = False,
    ignore_pids: Iterable[int] = (),
    trust_pid_namespace: Optional[bool] = None,
) -> ReapReport: ...
