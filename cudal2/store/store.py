"""The store: the studies (Optuna's storage) and tables of our own in one database: one record per
measured kernel (problem and spec; a repeat measurement of the spec is aggregated on it), one
row per measured baseline, and one per confirmation (a search leader timed again before it is
named the winner). A SQLite store keeps its studies in an Optuna journal file beside the database
(Store.optuna_storage says why); any other database keeps them in its own tables.

SQLite under the user cache directory by default (one file, nothing to start); any SQLAlchemy
URL (PostgreSQL) for many workers. Many processes may write at once: SQLite runs in WAL mode with
a busy timeout, every write is one transaction, and a write that still meets a locked file is
retried (docs/scale_out.md). One store holds the timings of one GPU model (check_gpu_model).

The kernel table is the source of truth for measurements: the search loop writes a measurement
here before it tells Optuna, so a process killed between the two loses nothing, and a spec
already measured for a problem is never measured again.

`optuna-dashboard <store url>` shows the studies of a PostgreSQL store; `optuna-dashboard
<db>.optuna-journal` those of a SQLite store.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
from dataclasses import asdict, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import parse_qsl

from cudal2.settings import settings
from ..bench.results import DEFAULT_MODE, BaselineResult, CandidateResult, Correctness, Environment, Timing
from ..disk_faults import refused_write, the_fix
from ..file_lock import exclusive
from ..redact import Redactor, shown_url
from ..ir import GemmProblem, KernelSpec
from ..paths import cache_dir

ENV_STORE = "CUDAL2_STORE"


def default_dir() -> Path:
    """The folder of the default store: cudal2's cache folder ($CUDAL2_CACHE_DIR or the user cache)."""
    return cache_dir()


def default_url() -> str:
    """$CUDAL2_STORE if set, else sqlite:///<cache dir>/store.db (cache dir: $CUDAL2_CACHE_DIR or the user cache)."""
    env = settings().store
    if env:
        return as_url(env)
    return as_url(default_dir() / "store.db")


RECORDED_STORE_FILE = "recorded.db"


def recorded_url() -> str:
    """The recorded runner's own default store, sqlite:///<cache dir>/recorded.db: its synthetic numbers
    stay out of the default store ($CUDAL2_STORE included), which holds GPU measurements."""
    return as_url(default_dir() / RECORDED_STORE_FILE)


def as_url(target: str | os.PathLike) -> str:
    """A SQLAlchemy URL from a URL or a plain file path (which means SQLite)."""
    text = os.fspath(target)
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def sqlite_path(url: str) -> Path | None:
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


def display_url(url: str) -> str:
    """url as it may be printed: postgresql://user:***@host/db (cudal2.redact.shown_url)."""
    return shown_url(url)


def url_secrets(url: str) -> list[str]:
    """What of a store URL must never be printed: the password SQLAlchemy parses, and, where it holds an
    unencoded '@' or '/', everything between the user name and the host and each piece of it of three
    characters or more (a driver that reads the rest as the host name quotes that back in its error)."""
    found = []
    rest, _, query = url.partition("://")[2].partition("?")
    userinfo = rest.rpartition("@")[0]
    if ":" in userinfo:
        secret = userinfo.split(":", 1)[1]
        found += [secret, *(piece for part in secret.split("@") for piece in part.split("/"))]
    with contextlib.suppress(Exception):
        from sqlalchemy.engine import make_url

        found.append(make_url(url).password or "")
    found += [value for name, value in parse_qsl(query) if any(w in name.lower() for w in ("pass", "secret", "token"))]
    return sorted({s for s in found if len(s) >= 3})  # (a shorter piece would mask letters of every word)


def corrupt_store(path, why: str) -> str:
    """The one line for an SQLite store whose file is damaged, with the fix."""
    return (f"store {path} is corrupt ({' '.join(why.split())[:120]}); move it aside and search again "
            f"(`sqlite3 {path} .recover | sqlite3 recovered.db` saves the rows it can)")


def damage_of(error: BaseException) -> str | None:
    """Why an SQLite error says the file itself is damaged (its pages, or text in them that is not
    the UTF-8 cudal2 wrote), or None for any other error (a lock, a full disk, a permission)."""
    import sqlite3

    if not isinstance(error, sqlite3.DatabaseError):
        return None
    reason = " ".join(str(error).split())
    name = getattr(error, "sqlite_errorname", None)  # Python >= 3.11
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or (name is None and type(error) is sqlite3.DatabaseError):
        return reason
    return reason if reason.startswith("Could not decode to UTF-8") else None


def _refuse_damage(path: Path):
    """A SQLAlchemy handle_error hook: wherever the store is read or written after its check, an
    error that says the file is damaged becomes the StoreError that says so."""

    def hook(context) -> None:
        reason = damage_of(context.original_exception)
        if reason is not None:
            raise StoreError(corrupt_store(path, reason))

    return hook


class StoreError(Exception):
    """A store that cannot be used as given (Store.check), or whose disk refuses a write: the
    message names it and the fix."""


def refused_store_write(e: BaseException, store: str, path: str | os.PathLike | None = None) -> StoreError | None:
    """The StoreError of a write of the store (the file at path, if known) that the disk refused
    (full, read-only, not permitted), or None if e is another error."""
    words = refused_write(e)
    if words is None:
        return None
    where = f" writing {path}" if path is not None and os.fspath(path) != store else ""
    return StoreError(f"store {store}: {words}{where}; {the_fix(words, '--store')} (the default store lives in "
                      "$CUDAL2_CACHE_DIR)")


# Seconds a database server may take to accept a connection (a server that takes the TCP connection and
# never answers would otherwise hold a search, or the op's first call, forever), given to the drivers
# that take it by this name, unless the URL names its own.
CONNECT_TIMEOUT_S = 10
_CONNECT_TIMEOUT_DRIVERS = {("postgresql", "psycopg"), ("postgresql", "psycopg2"), ("mysql", "pymysql"),
                            ("mysql", "mysqldb")}


def _connect_args(url: str) -> dict[str, Any]:
    """The DBAPI connect arguments of a store URL: SQLite's wait for a lock other processes hold, a
    server's connect timeout (CONNECT_TIMEOUT_S)."""
    if sqlite_path(url) is not None:
        return {"timeout": 60}  # several processes may share the file
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
        backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    except Exception:  # noqa: BLE001 - not a URL, or no such dialect: create_engine says so
        return {}
    if (backend, driver) in _CONNECT_TIMEOUT_DRIVERS and "connect_timeout" not in parsed.query:
        return {"connect_timeout": CONNECT_TIMEOUT_S}
    return {}


# The package to install for a database driver that SQLAlchemy could not import.
_DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient"}
_SQLITE_HEADER = b"SQLite format 3\x00"


# ---- (de)serialization of evaluator results ---------------------------------------------------
def _known(cls, d: dict) -> dict:
    """The keys of d that the dataclass has (rows written by older or newer versions still load)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _timings(d: dict) -> dict[str, Timing]:
    return {mode: Timing(**_known(Timing, t)) for mode, t in (d or {}).items()}


def _correctness(d: dict | None) -> Correctness | None:
    if not d:
        return None
    return Correctness(**{**_known(Correctness, d), "checks": tuple(d.get("checks", ()))})


def result_to_json(r: CandidateResult) -> str:
    return json.dumps(r.to_dict(), sort_keys=True)


def result_from_dict(d: dict) -> CandidateResult:
    return CandidateResult(**{**_known(CandidateResult, d), "spec": KernelSpec.from_dict(d["spec"]),
                              "correctness": _correctness(d.get("correctness")),
                              "timing": _timings(d.get("timing"))})


def baseline_to_dict(b: BaselineResult) -> dict:
    return asdict(b)


def baseline_from_dict(d: dict) -> BaselineResult:
    return BaselineResult(**{**_known(BaselineResult, d), "timing": _timings(d.get("timing")),
                             "correctness": _correctness(d.get("correctness"))})


def environment_from_dict(d: dict | None) -> Environment | None:
    return Environment(**_known(Environment, d)) if d else None


def _retry(make, attempts: int = 6):
    """Run make(), retrying when several processes create the same schema at once ("table
    already exists", "database is locked"): the loser finds the winner's tables next time."""
    import time

    from sqlalchemy.exc import DBAPIError

    for i in range(attempts):
        try:
            return make()
        except DBAPIError as e:
            if i == attempts - 1 or refused_write(e):  # a full or read-only disk stays so
                raise
            time.sleep(0.2 * (i + 1))


def _tune_sqlite(engine) -> None:
    """WAL journal (readers never block the writer; several processes share the file) and
    synchronous=NORMAL: durable against a killed process (SIGKILL), which is what resumption
    needs; only a power cut may lose the last transactions. One fsync per commit otherwise
    dominates the cost of a trial."""
    from sqlalchemy import event

    def on_connect(dbapi_connection, _record) -> None:
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    event.listen(engine, "connect", on_connect)


# How often a trial whose worker died is queued again before it is left failed.
STALE_RETRIES = 2


def journal_path(db: Path) -> Path:
    """The journal file of a SQLite store's studies: <db>.optuna-journal, beside the database."""
    return db.with_name(db.name + ".optuna-journal")


def journal_storage(db: Path, warn: Callable[[str], None] | None = None):
    """Optuna's JournalStorage on the journal file of the SQLite store at db (several processes may
    append at once: each write holds the file's lock). A torn last record is set aside first, in
    one line to warn (journal.StudiesJournalFile). A journal that cannot be read back, and a disk
    that refuses its writes, raise StoreError."""
    import optuna

    from .journal import StudiesJournalFile

    path = journal_path(db)
    aside = f"move it aside: the measurements stay in {db.name}, and each search starts its study anew"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        backend = StudiesJournalFile(str(path), store=str(db), warn=warn, refused=refused_store_write)
        backend.set_aside_torn_tail()
        return optuna.storages.JournalStorage(backend)
    except (ValueError, KeyError, TypeError) as e:  # a line that is not one of Optuna's records
        raise StoreError(f"studies file {path} cannot be read ({type(e).__name__}: {str(e)[:120]}); {aside}") from None
    except AssertionError:  # Optuna's replay meets an operation it does not know
        raise StoreError(f"studies file {path} holds a record of a kind this Optuna {optuna.__version__} does not "
                         f"know ({_unknown_record(path)}); {aside}") from None
    except OSError as e:
        raise refused_store_write(e, str(db), e.filename or path) or e from None


def _unknown_record(path: Path) -> str:
    """Which line of the journal at path names an operation Optuna does not know, in words."""
    try:
        from optuna.storages.journal._storage import JournalOperation  # (a private module of Optuna)
    except ImportError:
        return "an unknown op_code"
    known = {op.value for op in JournalOperation}
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("op_code") not in known:
                return f"line {number}: op_code {str(record.get('op_code'))[:20]}"
    return "an unknown op_code"


def retry_callback(max_retry: int | None):
    """Optuna's callback that queues a copy of a failed trial (renamed in Optuna 4.9)."""
    import warnings

    import optuna

    cls = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "experimental feature" / deprecation notices
        return cls(max_retry=max_retry)


def rdb_storage(url: str):
    """Optuna's RDBStorage on the database at url. Heartbeats let a worker on another host find the
    trials of one whose process died and queue them again."""
    import warnings

    import optuna

    renamed = hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback")  # optuna >= 4.9
    key = "heartbeat_stale_trial_callback" if renamed else "failed_trial_callback"
    retry = retry_callback(max_retry=STALE_RETRIES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental-feature notices
        return _retry(lambda: optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=600,
                                                         **{key: retry}))


def _measurement_of(row) -> dict[str, Any]:
    """One stored measurement of a kernel row as JSON data: result, baselines, environment, created."""
    doc = json.loads(row["measurements"])
    doc.pop("repeats", None)
    created = row["created"]
    return {"result": doc, "baselines": json.loads(row["baselines"] or "{}"),
            "environment": json.loads(row["environment"] or "null"),
            "created": created.isoformat() if isinstance(created, _dt.datetime) else created}


def _datetime(text: str | None) -> _dt.datetime | None:
    return _dt.datetime.fromisoformat(text) if text else None


def _measurements_of(row) -> list[dict[str, Any]]:
    """The earlier measurements a kernel row keeps (its repeats, oldest first; not its own figures)."""
    return list(json.loads(row["measurements"]).get("repeats") or [])


class Store:
    """Studies and measurements in one database. Cheap to construct; connects on first use. `warn`
    gets a line for what the store repaired on opening (default: the "cudal2.store" logger)."""

    def __init__(self, url: str | os.PathLike | None = None, *, warn: Callable[[str], None] | None = None):
        self.url = as_url(url) if url is not None else default_url()
        self.warn = warn

    def __repr__(self) -> str:
        return f"Store({display_url(self.url)!r})"

    # ---- connections -----------------------------------------------------------------------------
    @cached_property
    def engine(self):
        import sqlalchemy as sa

        path = sqlite_path(self.url)
        if path is not None:
            self._writing(lambda: path.parent.mkdir(parents=True, exist_ok=True))
        engine = sa.create_engine(self.url, connect_args=_connect_args(self.url))
        if path is not None:
            _tune_sqlite(engine)
            sa.event.listen(engine, "handle_error", _refuse_damage(path))
        self._writing(lambda: _retry(lambda: self._tables(sa).create_all(engine)))
        return engine

    def _writing(self, write):
        """write(), with a write the disk refuses (full, read-only) raised as a StoreError."""
        try:
            return write()
        except Exception as e:
            fault = refused_store_write(e, str(sqlite_path(self.url) or display_url(self.url)),
                                        getattr(e, "filename", None))
            if fault is None:
                raise
            raise fault from None

    @cached_property
    def optuna_storage(self):
        """Where the studies live. A SQLite store keeps them in Optuna's journal file beside the
        database (journal_path): one line appended per change and read back incrementally, where
        Optuna's RDBStorage spends a transaction on each parameter and attribute of a trial, about
        two thirds of a search's host time (docs/search.md). Its workers share one host, where
        Refiner.recover settles a dead worker's trials by its process id at once. Any other URL
        (PostgreSQL, workers on many hosts): RDBStorage on that database, with heartbeats."""
        path = sqlite_path(self.url)
        return journal_storage(path, self.warn) if path is not None else rdb_storage(self.url)

    @contextlib.contextmanager
    def budget_lock(self):
        """Held while a search counts what its study measured and claims its next trials, so that
        concurrent searches of one problem keep its budget: an exclusive lock on <db>.lock for a
        SQLite store (every process on the host). Other databases have no such lock: there, each
        search counts the others' claimed trials, and two that ask at the same moment may both
        take the last places (docs/faults.md)."""
        path = sqlite_path(self.url)
        if path is None:
            yield
            return
        with exclusive(path.with_name(path.name + ".lock")):
            yield

    def studies_at(self) -> str:
        """Where the studies are, as optuna-dashboard takes it: a SQLite store's journal file, else
        the URL with any password masked."""
        path = sqlite_path(self.url)
        return str(journal_path(path)) if path is not None else display_url(self.url)

    def exists(self) -> bool:
        """False for a SQLite store whose file was never created (reading it would create it)."""
        path = sqlite_path(self.url)
        return path is None or path.exists()

    def check(self) -> Store:
        """Raise StoreError, one sentence with the fix, unless the store can be opened: a SQLite
        path that is a directory or a file of another kind, a missing database driver, a URL
        SQLAlchemy cannot parse, a server that refuses the connection. Checked before any work,
        because the engine itself retries such failures for seconds and then raises a page of
        SQLAlchemy internals. A SQLite file that does not exist yet passes (it is created on first
        write). Returns self."""
        import sqlalchemy as sa
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

        shown = display_url(self.url)
        path = sqlite_path(self.url)
        if path is not None:
            if path.is_dir():
                raise StoreError(f"store {path} is a directory; give a database file, e.g. {path / 'store.db'}")
            parent = next((p for p in path.parents if p.exists()), None)
            if parent is not None and not parent.is_dir():
                raise StoreError(f"store {path}: {parent} is a file, not a directory; give a path in a directory")
            if not path.exists():
                return self
            try:
                with path.open("rb") as f:
                    head = f.read(len(_SQLITE_HEADER))
            except OSError as e:
                raise StoreError(f"store {path} cannot be read ({e.strerror}); check its permissions") from None
            if head and head != _SQLITE_HEADER:
                raise StoreError(f"store {path} is not an SQLite database; give a new file name or an existing "
                                 "cudal2 store")
            if journal_path(path).exists():  # its studies read back once (kept for the search), or one line
                self.optuna_storage = journal_storage(path, self.warn)
        try:
            engine = sa.create_engine(self.url, connect_args=_connect_args(self.url))
        except ValueError:  # a port that is not a number, say
            raise StoreError(f"store {shown} is not a database URL; give a SQLite file path or a URL such as "
                             "postgresql://user@host:5432/db") from None
        except ModuleNotFoundError as e:
            package = _DRIVER_PACKAGES.get(e.name or "", e.name)
            raise StoreError(f"store {shown}: its database driver {e.name!r} is not installed; pip install "
                             f"{package!r}, or give a SQLite file path") from None
        except NoSuchModuleError:
            raise StoreError(f"store {shown}: SQLAlchemy knows no database {self.url.split('://')[0]!r}; give a "
                             "SQLite file path or a URL such as postgresql://user@host/db") from None
        except ArgumentError:
            raise StoreError(f"store {shown} is not a database URL; give a SQLite file path or a URL such as "
                             "postgresql://user@host/db") from None
        try:
            with engine.connect() as conn:
                sa.inspect(conn).get_table_names()
                if path is not None:  # a damaged page is found here, before a search writes more rows
                    verdict = conn.exec_driver_sql("PRAGMA quick_check(1)").scalar()
                    if verdict != "ok":
                        raise StoreError(corrupt_store(path, str(verdict)))
        except SQLAlchemyError as e:
            if path is not None and damage_of(getattr(e, "orig", None) or e) is not None:
                raise StoreError(corrupt_store(path, str(getattr(e, "orig", e)))) from None
            reason = Redactor(url_secrets(self.url))(str(getattr(e, "orig", None) or e).strip().splitlines()[0])
            raise StoreError(f"store {shown} cannot be opened ({reason}); check the path or URL, the "
                             "server and your permissions") from None
        finally:
            engine.dispose()
        return self

    _metadata = None

    @classmethod
    def _tables(cls, sa):
        if cls._metadata is None:
            md = sa.MetaData()
            sa.Table(
                "cudal2_kernels", md,
                sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                sa.Column("problem_key", sa.String(32), nullable=False, index=True),
                sa.Column("problem", sa.Text, nullable=False),
                sa.Column("spec_key", sa.String(32), nullable=False, index=True),
                sa.Column("spec", sa.Text, nullable=False),
                sa.Column("backend", sa.String(64), nullable=False),
                sa.Column("status", sa.String(32), nullable=False),
                sa.Column("kernel_ms", sa.Float, nullable=True),  # objective mode
                sa.Column("source", sa.Text, nullable=False, default=""),
                sa.Column("measurements", sa.Text, nullable=False),
                # the baselines timed in the same evaluator call (interleaved with this kernel)
                sa.Column("baselines", sa.Text, nullable=False, default="{}"),
                sa.Column("environment", sa.Text, nullable=False, default="null"),
                sa.Column("created", sa.DateTime, nullable=False),
                # One record per spec and problem. Stores written before it may hold several rows of
                # one spec: Store.kernels reads them as one record.
                sa.Index("ux_cudal2_kernels_problem_spec", "problem_key", "spec_key", unique=True),
            )
            sa.Table(
                "cudal2_baselines", md,
                sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                sa.Column("problem_key", sa.String(32), nullable=False, index=True),
                sa.Column("problem", sa.Text, nullable=False),
                sa.Column("name", sa.String(64), nullable=False),
                sa.Column("measurements", sa.Text, nullable=False),
                sa.Column("environment", sa.Text, nullable=False, default="null"),
                sa.Column("created", sa.DateTime, nullable=False),
            )
            # Re-timings of a search's leaders (cudal2.tuner.confirm), apart from the kernel table: a
            # leader was picked for measuring fast once, so its search trial is not its figure.
            sa.Table(
                "cudal2_confirmations", md,
                sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                sa.Column("problem_key", sa.String(32), nullable=False, index=True),
                sa.Column("spec_key", sa.String(32), nullable=False, index=True),
                sa.Column("status", sa.String(32), nullable=False),
                sa.Column("measurements", sa.Text, nullable=False),
                sa.Column("baselines", sa.Text, nullable=False, default="{}"),  # timed in the same call
                sa.Column("environment", sa.Text, nullable=False, default="null"),
                sa.Column("created", sa.DateTime, nullable=False),
            )
            cls._metadata = md
        return cls._metadata

    def _table(self, name: str):
        import sqlalchemy as sa

        return self._tables(sa).tables[name]

    # ---- kernels ------------------------------------------------------------------------------------
    def record_kernel(self, problem: GemmProblem, result: CandidateResult, source: str = "",
                      environment: Environment | None = None, mode: str = DEFAULT_MODE,
                      baselines: dict[str, BaselineResult] | None = None) -> None:
        """Store a measurement of result.spec on problem. A spec has one record per problem: measured
        again, its record takes the new figures and keeps the earlier ones in its repeats (one
        transaction, so a kill leaves either the old record or the new one)."""
        t = self._table("cudal2_kernels")
        values = dict(
            problem_key=problem.key(), problem=problem.to_json(), spec_key=result.spec.key(),
            spec=result.spec.to_json(), backend=result.spec.backend, status=result.status,
            kernel_ms=result.kernel_ms(mode) if result.ok else None, source=source or "",
            measurements=result_to_json(result),
            baselines=json.dumps({k: baseline_to_dict(b) for k, b in (baselines or {}).items()}, sort_keys=True),
            environment=json.dumps(asdict(environment) if environment else None),
            created=_dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None))

        def write() -> None:
            with self.engine.begin() as conn:
                old = conn.execute(t.select().where(t.c.problem_key == values["problem_key"],
                                                    t.c.spec_key == values["spec_key"])
                                   .order_by(t.c.id.desc()).limit(1)).mappings().first()
                if old is None:
                    conn.execute(t.insert().values(**values))
                    return
                doc = {**result.to_dict(), "repeats": [*_measurements_of(old), _measurement_of(old)]}
                conn.execute(t.update().where(t.c.id == old["id"])
                             .values(**{**values, "measurements": json.dumps(doc, sort_keys=True)}))

        # retried: a concurrent writer of the same spec (the unique index) or a locked SQLite file
        self._writing(lambda: _retry(write))

    def measurement(self, problem: GemmProblem, spec: KernelSpec) -> CandidateResult | None:
        """The latest stored measurement of spec on problem, or None."""
        t = self._table("cudal2_kernels")
        with self.engine.connect() as conn:
            row = conn.execute(t.select().where(t.c.problem_key == problem.key(), t.c.spec_key == spec.key())
                               .order_by(t.c.id.desc()).limit(1)).mappings().first()
        return result_from_dict(json.loads(row["measurements"])) if row else None

    def kernel_baselines(self, problem: GemmProblem, spec: KernelSpec) -> dict[str, BaselineResult]:
        """The baselines timed together with the latest measurement of spec ({} if none)."""
        t = self._table("cudal2_kernels")
        with self.engine.connect() as conn:
            text = conn.execute(t.select().with_only_columns(t.c.baselines)
                                .where(t.c.problem_key == problem.key(), t.c.spec_key == spec.key())
                                .order_by(t.c.id.desc()).limit(1)).scalar()
        return {k: baseline_from_dict(v) for k, v in json.loads(text or "{}").items()}

    def measured_spec_keys(self, problem: GemmProblem) -> set[str]:
        """The keys of the specs measured on problem (each once, however often it was measured)."""
        t = self._table("cudal2_kernels")
        with self.engine.connect() as conn:
            return set(conn.execute(t.select().with_only_columns(t.c.spec_key).distinct()
                                    .where(t.c.problem_key == problem.key())).scalars())

    def kernels(self, problem: GemmProblem | None = None) -> list[dict[str, Any]]:
        """One record per measured (problem, spec), in the order they were first measured: dicts of
        the parsed problem, the latest result, its baselines and environment, and "repeats", the
        earlier measurements of the spec, oldest first (each a dict of result, baselines,
        environment, created). Rows of one spec in a store written before records were unique are
        read as one record."""
        t = self._table("cudal2_kernels")
        q = t.select().order_by(t.c.id)
        if problem is not None:
            q = q.where(t.c.problem_key == problem.key())
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        by_spec: dict[tuple[str, str], list] = {}
        for r in rows:
            by_spec.setdefault((r["problem_key"], r["spec_key"]), []).append(r)
        return [self._kernel_record(same) for same in by_spec.values()]

    @staticmethod
    def _kernel_record(rows) -> dict[str, Any]:
        """The record of one spec from its rows (one, or several in an older store), oldest first."""
        r = rows[-1]
        repeats = [m for old in rows[:-1] for m in (*_measurements_of(old), _measurement_of(old))]
        repeats += _measurements_of(r)
        return {
            "problem": GemmProblem.from_json(r["problem"]),
            "result": result_from_dict(json.loads(r["measurements"])),
            "backend": r["backend"], "status": r["status"], "kernel_ms": r["kernel_ms"],
            "source": r["source"], "environment": json.loads(r["environment"] or "null"),
            "baselines": {k: baseline_from_dict(v) for k, v in json.loads(r["baselines"] or "{}").items()},
            "created": r["created"],
            "repeats": [{"result": result_from_dict(m["result"]),
                         "baselines": {k: baseline_from_dict(v) for k, v in (m.get("baselines") or {}).items()},
                         "environment": m.get("environment"), "created": _datetime(m.get("created"))}
                        for m in repeats],
        }

    def problems(self) -> list[GemmProblem]:
        t = self._table("cudal2_kernels")
        with self.engine.connect() as conn:
            rows = conn.execute(t.select().with_only_columns(t.c.problem_key, t.c.problem)
                                .distinct().order_by(t.c.problem_key)).all()
        seen, out = set(), []
        for key, text in rows:
            if key not in seen:
                seen.add(key)
                out.append(GemmProblem.from_json(text))
        return out

    def best(self, problem: GemmProblem) -> dict[str, Any] | None:
        """The fastest correct kernel record stored for problem (by its latest objective-mode time)."""
        ok = [r for r in self.kernels(problem) if r["status"] == "ok" and r["kernel_ms"] is not None]
        return min(ok, key=lambda r: r["kernel_ms"]) if ok else None  # (min keeps the first of equals)

    # ---- confirmations ------------------------------------------------------------------------------
    def record_confirmation(self, problem: GemmProblem, result: CandidateResult,
                            baselines: dict[str, BaselineResult], environment: Environment | None = None) -> None:
        t = self._table("cudal2_confirmations")
        values = dict(problem_key=problem.key(), spec_key=result.spec.key(), status=result.status,
                      measurements=result_to_json(result),
                      baselines=json.dumps({k: baseline_to_dict(b) for k, b in baselines.items()}, sort_keys=True),
                      environment=json.dumps(asdict(environment) if environment else None),
                      created=_dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None))

        def write() -> None:
            with self.engine.begin() as conn:
                conn.execute(t.insert().values(**values))

        self._writing(lambda: _retry(write))  # retried: a SQLite file another writer holds past the busy timeout

    def confirmations(self, problem: GemmProblem) -> list[dict[str, Any]]:
        """Confirmation rows of problem (result and the baselines timed with it), oldest first."""
        t = self._table("cudal2_confirmations")
        with self.engine.connect() as conn:
            rows = conn.execute(t.select().where(t.c.problem_key == problem.key()).order_by(t.c.id)).mappings().all()
        return [{"spec_key": r["spec_key"], "result": result_from_dict(json.loads(r["measurements"])),
                 "baselines": {k: baseline_from_dict(v) for k, v in json.loads(r["baselines"] or "{}").items()},
                 "environment": json.loads(r["environment"] or "null"), "created": r["created"]}
                for r in rows]

    # ---- baselines ----------------------------------------------------------------------------------
    def record_baselines(self, problem: GemmProblem, baselines: dict[str, BaselineResult],
                         environment: Environment | None = None) -> None:
        t = self._table("cudal2_baselines")
        now = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)
        env = json.dumps(asdict(environment) if environment else None)

        def write() -> None:  # one transaction: all of them or none
            with self.engine.begin() as conn:
                for name, b in baselines.items():
                    conn.execute(t.insert().values(problem_key=problem.key(), problem=problem.to_json(), name=name,
                                                   measurements=json.dumps(baseline_to_dict(b), sort_keys=True),
                                                   environment=env, created=now))

        self._writing(lambda: _retry(write))  # retried: a SQLite file another writer holds past the busy timeout

    def baselines(self, problem: GemmProblem) -> dict[str, BaselineResult]:
        """The latest stored measurement of each baseline for problem."""
        t = self._table("cudal2_baselines")
        with self.engine.connect() as conn:
            rows = conn.execute(t.select().where(t.c.problem_key == problem.key()).order_by(t.c.id)).mappings().all()
        return {r["name"]: baseline_from_dict(json.loads(r["measurements"])) for r in rows}

    # ---- GPU models ---------------------------------------------------------------------------------
    def gpu_models(self) -> dict[str, int]:
        """GPU model -> kernel records measured on it, from the environment each record keeps
        (records that name no GPU are left out). One run writes one environment on all its
        records, so this groups few distinct texts, however many records there are."""
        import sqlalchemy as sa

        t = self._table("cudal2_kernels")
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.environment, sa.func.count()).group_by(t.c.environment)).all()
        out: dict[str, int] = {}
        for text, n in rows:
            name = (json.loads(text or "null") or {}).get("gpu_name")
            if name:
                out[name] = out.get(name, 0) + n
        return out

    def check_gpu_model(self, gpu_name: str) -> None:
        """Raise StoreError unless the store holds timings of gpu_name alone (or none): a spec
        measured on one model would be skipped as measured on another, and a table or a model
        trained on both would mix two GPUs' speeds."""
        others = {m: n for m, n in self.gpu_models().items() if m != gpu_name}
        if others:
            held = ", ".join(f"{m} ({n} pairs)" for m, n in sorted(others.items()))
            raise StoreError(f"store {display_url(self.url)} holds timings of {held}, and this run measures on "
                             f"{gpu_name}; one store keeps one GPU model's timings: give another --store")

    # ---- studies --------------------------------------------------------------------------------------
    def study_names(self) -> list[str]:
        import optuna

        return [s.study_name for s in optuna.get_all_study_summaries(self.optuna_storage)]

    def iter_best(self) -> Iterator[tuple[GemmProblem, dict[str, Any], dict[str, BaselineResult]]]:
        for p in self.problems():
            b = self.best(p)
            if b is not None:
                yield p, b, self.baselines(p)
