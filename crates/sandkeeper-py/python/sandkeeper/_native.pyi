"""The Rust extension behind sandkeeper (private: use the package's API)."""

from typing import Callable, List, Optional, Tuple

__version__: str

class _Sandbox:
    def __init__(
        self,
        tag: str,
        root: Optional[str],
        keyed: bool,
        process_lifetime: bool,
        keep: Optional[str],
        keep_for: float,
        checkout: Optional[str],
        mode: int,
        site: str,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def keep_policy(self) -> str: ...
    @property
    def finished(self) -> bool: ...
    def defer(self, action: Callable[[], object]) -> None: ...
    def dup_lease_fd(self) -> int: ...
    def close(self) -> None: ...
    def keep(self) -> str: ...
    def persist_for(self, secs: float) -> str: ...

class _RecordDir:
    def __init__(self, path: str) -> None: ...
    @property
    def path(self) -> str: ...
    def record(
        self,
        sandbox: _Sandbox,
        binary_id: Optional[str],
        test_name: Optional[str],
        command: List[str],
        exit_code: int,
    ) -> str: ...

def scan_json(
    roots: List[str],
    entries: bool,
    ignore_pids: List[int],
    trust_pid_namespace: Optional[bool],
    assume_unseen_free: Optional[bool],
) -> Tuple[str, List[str]]: ...
def reap_json(
    roots: List[str],
    globs: List[str],
    older_than: Optional[float],
    keep_last: Optional[int],
    target_free: Optional[str],
    target_free_inodes: Optional[str],
    owner: Optional[str],
    grace: Optional[float],
    max_keep: Optional[float],
    dry_run: bool,
    ignore_pids: List[int],
    trust_pid_namespace: Optional[bool],
    assume_unseen_free: Optional[bool],
) -> Tuple[str, List[str]]: ...
def parse_duration(text: str) -> float: ...
def cli_main(argv: List[str]) -> int: ...
def error_kinds() -> List[str]: ...
