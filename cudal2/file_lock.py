"""An exclusive lock on a file beside what it guards, across processes and threads (POSIX flock)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive flock on lock_file (created if missing) for the block. Where flock does not
    exist (not POSIX), nothing is locked: the callers stay correct without it, only slower or less
    exact (see each caller)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
