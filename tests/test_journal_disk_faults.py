"""The studies journal and the disk (CPU only, through CliRunner and --runner recorded): a torn last
record is set aside and the study resumes; a corrupt or unknown record, a full disk, a read-only
store and an output file that cannot be written are each one `error:` line and exit 2, and what
was written before stays readable."""

import builtins
import errno
import json
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2 import GemmProblem
from cudal2.store.store import Store, StoreError, journal_path

runner = CliRunner()
SEARCH = ["search", "256x256x256", "--runner", "recorded", "--proposer", "rules", "--confirm", "0"]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")  # narrower than every error line: none may wrap
    monkeypatch.delenv("CUDAL2_DEBUG", raising=False)


def _search(db, budget: int):
    return runner.invoke(app, [*SEARCH, "--budget", str(budget), "--store", str(db)])


def _one_error_line(result, exit_code: int = 2) -> str:
    lines = result.output.splitlines()
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def _torn_warnings(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("warning: ") and "torn record" in line]


def _records(db) -> list[dict]:
    """Every line of the store's journal as JSON (fails on a line that is not)."""
    data = journal_path(db).read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.splitlines()]


def _measured(db) -> set[str]:
    return {r["result"].spec.key() for r in Store(db).kernels()}


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The folder of a store after a finished search of 4 measurements."""
    folder = tmp_path_factory.mktemp("searched")
    assert _search(folder / "s.db", 4).exit_code == 0
    return folder


@pytest.fixture
def store(tmp_path, searched):
    """A copy of that store (the database, its WAL and its journal)."""
    shutil.copytree(searched, tmp_path / "store")
    return tmp_path / "store" / "s.db"


# ---- a torn last record ---------------------------------------------------------------------------
TEARS = {
    "cut 10 bytes short": lambda data: data[:-10],
    "a partial record appended": lambda data: data + b'{"op_code":4,"worker_id":"w","study_id":0,"da',
    "a partial record and a newline": lambda data: data + b'{"op_code":4,"worker_id":"w","study_id":0,"da\n',
}


@pytest.mark.parametrize("tear", list(TEARS))
def test_a_torn_last_record_is_set_aside_and_the_study_resumes(tear, store):
    whole = journal_path(store).read_bytes()
    torn = TEARS[tear](whole)
    journal_path(store).write_bytes(torn)
    cut = whole.rindex(b"\n", 0, len(whole) - 1) + 1 if tear == "cut 10 bytes short" else len(whole)

    shown = runner.invoke(app, ["show", "--store", str(store)])
    assert shown.exit_code == 0 and "tuned shapes in" in shown.output, shown.output
    (warning,) = _torn_warnings(shown)
    (side,) = store.parent.glob("s.db.optuna-journal.torn-*")
    assert str(journal_path(store)) in warning and str(side) in warning
    assert side.read_bytes() == torn[cut:]  # the torn bytes are kept, the complete records stay
    assert journal_path(store).read_bytes() == whole[:cut]
    again = runner.invoke(app, ["show", "--store", str(store)])
    assert again.exit_code == 0 and not _torn_warnings(again)  # reported once

    resumed = _search(store, 8)
    assert resumed.exit_code == 0, resumed.output
    assert len(_measured(store)) == 8  # the 4 measured before, and 4 more
    _records(store)  # every line is a record
    assert runner.invoke(app, ["show", "--store", str(store)]).exit_code == 0


def test_an_append_after_a_torn_record_sets_it_aside_under_the_journals_lock(tmp_path):
    """Another process's write cut short is set aside before the next append, and only while the
    journal's lock is held (a writer holds it while it writes: its record is never taken as torn)."""
    from optuna.storages.journal import JournalFileSymlinkLock

    from cudal2.store.journal import StudiesJournalFile

    path = tmp_path / "s.db.optuna-journal"
    path.write_bytes(b'{"op_code":0,"worker_id":"w","study_name":"a","directions":[1]}\n{"op_code":0,"wor')
    warnings: list[str] = []
    journal = StudiesJournalFile(str(path), store=str(tmp_path / "s.db"), warn=warnings.append)
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    writer = threading.Thread(target=journal.append_logs, args=([{"op_code": 1, "worker_id": "w", "study_id": 0}],))
    writer.start()
    time.sleep(0.3)
    assert path.read_bytes().endswith(b'"wor') and not warnings  # waits for the lock
    lock.release()
    writer.join(5)
    assert [json.loads(line)["op_code"] for line in path.read_bytes().splitlines()] == [0, 1]
    assert len(warnings) == 1 and "torn record" in warnings[0]
    (side,) = tmp_path.glob("*.torn-*")
    assert side.read_bytes() == b'{"op_code":0,"wor'


def test_a_corrupt_record_in_the_middle_stays_a_one_line_error(store):
    """Only the last line can be a write cut short: a bad line before it is a corrupt journal."""
    lines = journal_path(store).read_bytes().splitlines(keepends=True)
    lines[3] = lines[3][:20] + b"\n"
    journal_path(store).write_bytes(b"".join(lines))
    for args in (SEARCH + ["--budget", "8"], ["show"]):
        line = _one_error_line(runner.invoke(app, [*args, "--store", str(store)]))
        assert f"{journal_path(store)} cannot be read" in line and "move it aside" in line, line
    assert not list(store.parent.glob("*.torn-*"))


def test_a_record_of_an_unknown_kind_is_one_error_line(store):
    with journal_path(store).open("ab") as f:
        f.write(b'{"op_code":99,"worker_id":"w","study_id":0}\n')
    n = len(journal_path(store).read_bytes().splitlines())
    for args in (SEARCH + ["--budget", "8"], ["show"]):
        line = _one_error_line(runner.invoke(app, [*args, "--store", str(store)]))
        assert str(journal_path(store)) in line and f"line {n}: op_code 99" in line, line
        assert "move it aside" in line and "measurements stay in s.db" in line


# ---- a full disk ------------------------------------------------------------------------------------
def _journal_fills_the_disk(monkeypatch, db, after: int):
    """Appends to db's journal succeed `after` times, then write half their bytes and fail with ENOSPC."""
    real_open, appends = builtins.open, []

    class HalfWritten:
        def __init__(self, f):
            self._f = f

        def write(self, data):
            self._f.write(data[: len(data) // 2])
            self._f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

        def __getattr__(self, name):
            return getattr(self._f, name)

    def fake_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if "a" in mode and os.fspath(file) == str(journal_path(db)):
            appends.append(1)
            if len(appends) > after:
                return HalfWritten(f)
        return f

    monkeypatch.setattr(builtins, "open", fake_open)


def test_a_full_disk_during_a_search_is_one_line_and_loses_nothing(store, monkeypatch):
    before = _measured(store)
    _journal_fills_the_disk(monkeypatch, store, after=40)
    line = _one_error_line(_search(store, 12))
    monkeypatch.undo()
    assert "no space left on device" in line and "free space or give --store elsewhere" in line, line
    assert str(store) in line
    _records(store)  # no torn line left behind
    assert before <= _measured(store)
    resumed = _search(store, 12)
    assert resumed.exit_code == 0 and not _torn_warnings(resumed), resumed.output
    assert len(_measured(store)) == 12


def test_a_full_disk_under_the_kernel_table_is_one_line(store, monkeypatch):
    """SQLite's own "database or disk is full" while the search writes a measurement."""
    import sqlalchemy as sa

    def full(conn, cursor, statement, *_args):
        if statement.lstrip().upper().startswith(("INSERT INTO CUDAL2_KERNELS", "UPDATE CUDAL2_KERNELS")):
            e = sqlite3.OperationalError("database or disk is full")
            e.sqlite_errorcode, e.sqlite_errorname = 13, "SQLITE_FULL"
            raise e

    before = _measured(store)
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", full)
    try:
        line = _one_error_line(_search(store, 8))
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", full)
    assert str(store) in line and "no space left on device" in line and "give --store elsewhere" in line, line
    assert _measured(store) == before
    _records(store)


# ---- a store the disk will not let us write ------------------------------------------------------
def _read_only(monkeypatch, folder: Path, code: int):
    """Writes under folder fail as on a read-only file system (EROFS) or a folder not ours (EACCES):
    creating a folder, opening a file to write, and SQLite creating its database (the tests run as
    root, where a chmod stops no write)."""
    real_open, real_mkdir, real_connect = builtins.open, os.mkdir, sqlite3.dbapi2.connect
    under = str(folder) + os.sep

    def refused(path):
        return OSError(code, os.strerror(code), os.fspath(path))

    def fake_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.fspath(file).startswith(under) and set(mode) & set("wax+"):
            raise refused(file)
        return real_open(file, mode, *args, **kwargs)

    def fake_mkdir(path, *args, **kwargs):
        if os.fspath(path).startswith(under):
            raise refused(path)
        return real_mkdir(path, *args, **kwargs)

    def fake_connect(database, *args, **kwargs):
        if str(database).startswith(under):
            e = sqlite3.OperationalError("unable to open database file")
            e.sqlite_errorcode, e.sqlite_errorname = 14, "SQLITE_CANTOPEN"
            raise e
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(os, "mkdir", fake_mkdir)
    monkeypatch.setattr(sqlite3.dbapi2, "connect", fake_connect)  # what SQLAlchemy calls


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
@pytest.mark.parametrize("where", ["a new file in it", "a new folder in it", "the default cache folder in it"])
def test_a_store_on_a_read_only_folder_is_one_error_line(where, code, tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    args = list(SEARCH) + ["--budget", "4"]
    if where == "a new file in it":
        args += ["--store", str(folder / "s.db")]
    elif where == "a new folder in it":
        args += ["--store", str(folder / "new" / "s.db")]
    else:
        monkeypatch.setenv("CUDAL2_CACHE_DIR", str(folder / "cache"))
        monkeypatch.delenv("CUDAL2_STORE", raising=False)
    _read_only(monkeypatch, folder, code)
    line = _one_error_line(runner.invoke(app, args))
    if where == "a new file in it":  # the search opens the journal first; SQLite refuses its file too
        with pytest.raises(StoreError, match=f"store {folder / 's.db'}: unable to open the database file for writing; "
                                             "give --store a writable path"):
            Store(folder / "s.db").measured_spec_keys(GemmProblem(m=256, n=256, k=256))
    monkeypatch.undo()
    assert str(folder) in line and ("read-only" in line or "permission denied" in line), line
    assert "give --store a writable path" in line and "CUDAL2_CACHE_DIR" in line, line


def test_another_write_the_disk_refuses_is_one_error_line(monkeypatch, tmp_path):
    """A full disk under a kernel cache (not the store) is the environment too."""
    import cudal2.tuner.loop

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/cache/triton/kernel.py")

    monkeypatch.setattr(cudal2.tuner.loop, "run_search", full)
    line = _one_error_line(_search(tmp_path / "s.db", 4))
    assert line == ("error: cannot write /cache/triton/kernel.py: no space left on device; free space, or give "
                    "--store, --out or $CUDAL2_CACHE_DIR a writable place")


# ---- output files ----------------------------------------------------------------------------------
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_output_on_a_full_disk_is_one_error_line(store, tmp_path):
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("256x256x256\n")
    for args in (["export", "--store", str(store), "--out", "/dev/full"],
                 ["tune", str(shapes), "--runner", "recorded", "--proposer", "rules", "--confirm", "0", "--budget", "4",
                  "--store", str(store), "--out", "/dev/full"]):
        line = _one_error_line(runner.invoke(app, args))
        assert line == "error: --out /dev/full: no space left on device; free space or give --out elsewhere", line
