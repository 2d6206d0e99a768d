"""A disk that refuses a write (full, read-only, not permitted, failing) is the user's environment,
not a bug in cudal2: refused_write tells such an error, an OSError or SQLite's own, in a few words,
for a one-line error that names the path and the fix (free space, or a writable place)."""

from __future__ import annotations

import errno

NO_SPACE = "no space left on device"

_OS_ERRORS = {errno.ENOSPC: NO_SPACE, errno.EDQUOT: NO_SPACE,
              errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
              errno.EPERM: "operation not permitted", errno.EIO: "disk I/O error"}
# SQLite's result codes (the prefix of its extended codes) of a write the disk refused
_SQLITE_ERRORS = {"SQLITE_FULL": NO_SPACE, "SQLITE_READONLY": "read-only database or file system",
                  "SQLITE_CANTOPEN": "unable to open the database file for writing",
                  "SQLITE_PERM": "permission denied", "SQLITE_IOERR": "disk I/O error"}


def refused_write(e: BaseException) -> str | None:
    """The disk's refusal in a few words if e is one (see _OS_ERRORS, _SQLITE_ERRORS), else None."""
    orig = getattr(e, "orig", None)  # SQLAlchemy's wrapper of the driver's error
    if isinstance(orig, BaseException):
        e = orig
    if isinstance(e, OSError) and e.errno in _OS_ERRORS:
        return _OS_ERRORS[e.errno]
    name = getattr(e, "sqlite_errorname", None) or ""
    return next((words for code, words in _SQLITE_ERRORS.items() if name.startswith(code)), None)


def the_fix(words: str, option: str) -> str:
    """How the user gets past a refused write of the file an option names."""
    return f"free space or give {option} elsewhere" if words == NO_SPACE else f"give {option} a writable path"
