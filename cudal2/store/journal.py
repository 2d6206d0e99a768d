"""The studies journal of a SQLite store (store.journal_path): Optuna's journal file, kept whole
through a torn write.

A write cut short (a full disk, a process killed in the middle of a record) leaves a partial last
line. Optuna's reader skips it, but its next append would land after it and make a line that is
no record, in the middle of the file, where the reader refuses the whole journal. So before
Optuna reads the file and before each append, a partial last line is moved aside into a side file
(<journal>.torn-<UTC time>) and the file is cut back to its last complete record. Both happen
under Optuna's own lock of the file, which every writer holds while it appends, so a record that
another process is still writing is never taken for a torn one.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

log = logging.getLogger("cudal2.store")

_CHUNK = 1 << 16  # bytes read at a time, backwards from the end, to find the last line


def _line_start(f, end: int) -> int:
    """The offset just past the last newline before `end` (0 if there is none)."""
    pos = end
    while pos > 0:
        step = min(_CHUNK, pos)
        pos -= step
        f.seek(pos)
        i = f.read(step).rfind(b"\n")
        if i >= 0:
            return pos + i + 1
    return 0


def torn_tail(path: str | os.PathLike) -> int | None:
    """Where the partial last line of the journal at path starts, or None if its last line is a
    whole record: one that ends with a newline and is valid JSON."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        f.seek(size - 1)
        if f.read(1) != b"\n":
            return _line_start(f, size)
        start = _line_start(f, size - 1)
        f.seek(start)
        try:
            json.loads(f.read(size - start))
        except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
            return start
        return None


def _last_byte(path: str, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1)


class StudiesJournalFile(JournalFileBackend):
    """Optuna's journal file backend that sets a torn last line aside (set_aside_torn_tail) before
    each append, takes back the bytes of an append that fails (a full disk), and writes without
    forcing each record to the disk.

    Optuna writes one record per parameter and attribute of a trial, and its file backend forces
    each to the disk (fsync): about 3,000 a search of 32 measurements. A process killed with
    SIGKILL loses none of them (they are in the operating system's cache); a machine that loses
    power may lose the last ones, and what was measured is still in the kernel table, which is
    written first (the trial's retry is told from it). `warn` gets one line per torn record set
    aside; a write the disk refuses raises the StoreError of `store`, the database's path."""

    def __init__(self, file_path: str, store: str, warn: Callable[[str], None] | None = None,
                 refused: Callable[[OSError, str, str], Exception | None] | None = None):
        # refused: the store's one-line error for a write the disk refused (None: the OSError itself)
        self._path, self._store, self._write_lock = file_path, store, JournalFileSymlinkLock(file_path)
        self._refused = refused or (lambda e, store, path: None)
        self._warn = warn or log.warning
        super().__init__(file_path, lock_obj=self._write_lock)

    def set_aside_torn_tail(self) -> Path | None:
        """Move a partial last line into a side file and cut the journal back to its last complete
        record, holding the journal's lock; the side file's path, or None if there was none."""
        self._write_lock.acquire()
        try:
            return self._set_aside_torn_tail()
        finally:
            self._write_lock.release()

    def _set_aside_torn_tail(self) -> Path | None:
        start = torn_tail(self._path)
        if start is None:
            return None
        with open(self._path, "rb") as f:
            f.seek(start)
            torn = f.read()
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        side = Path(f"{self._path}.torn-{stamp}")
        with open(side, "xb") as f:  # kept on the disk before the journal lets go of the bytes
            f.write(torn)
            f.flush()
            os.fsync(f.fileno())
        os.truncate(self._path, start)
        self._warn(f"studies file {self._path} ended in a torn record ({len(torn)} bytes of a write cut short: a "
                   f"full disk or a killed process); kept it in {side} and resumed from every complete record")
        return side

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode("utf-8")
        self._write_lock.acquire()
        try:
            size = os.path.getsize(self._path)
            if size and _last_byte(self._path, size) != b"\n":  # (a whole last line is checked at open)
                self._set_aside_torn_tail()
                size = os.path.getsize(self._path)
            try:
                with open(self._path, "ab") as f:
                    f.write(text)
            except OSError as e:
                try:  # a partial record would hide every later one from the reader
                    os.truncate(self._path, size)
                except OSError:
                    pass  # set aside at the next open or append
                raise self._refused(e, self._store, self._path) or e from None
        finally:
            self._write_lock.release()
