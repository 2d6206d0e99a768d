"""The store: Optuna's storage (the studies) plus tables of our own in the same database: one row
per measured kernel, one per measured baseline, and one per confirmation (a search leader timed
again before it is named the winner).

SQLite under the user cache directory by default (one file, nothing to start); any SQLAlchemy
URL (PostgreSQL) for many workers. The kernel table is the source of truth for measurements:
the search loop writes a measurement here before it tells Optuna, so a process killed between
the two loses nothing, and a spec already measured for a problem is never measured again.

`optuna-dashboard <store url>` shows the studies of a store.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import asdict, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

from ..bench.results import BaselineResult, CandidateResult, Correctness, Environment, Timing
from ..ir import GemmProblem, KernelSpec

ENV_STORE = "CUDAL2_STORE"


def default_dir() -> Path:
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("cudal2"))
    except ImportError:  # platformdirs is a dependency, but keep `cudal2 show` working without it
        return Path.home() / ".cache" / "cudal2"


def default_url() -> str:
    """$CUDAL2_STORE if set, else sqlite:///<user cache dir>/cudal2/store.db."""
    env = os.environ.get(ENV_STORE)
    if env:
        return as_url(env)
    return as_url(default_dir() / "store.db")


def as_url(target: str | os.PathLike) -> str:
    """A SQLAlchemy URL from a URL or a plain file path (which means SQLite)."""
    text = os.fspath(target)
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def sqlite_path(url: str) -> Path | None:
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


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
        except DBAPIError:
            if i == attempts - 1:
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


class Store:
    """Studies and measurements in one database. Cheap to construct; connects on first use."""

    def __init__(self, url: str | os.PathLike | None = None):
        self.url = as_url(url) if url is not None else default_url()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    # ---- connections -----------------------------------------------------------------------------
    @cached_property
    def engine(self):
        import sqlalchemy as sa

        path = sqlite_path(self.url)
        kwargs: dict[str, Any] = {}
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            kwargs["connect_args"] = {"timeout": 60}  # several processes may share the file
        engine = sa.create_engine(self.url, **kwargs)
        if path is not None:
            _tune_sqlite(engine)
        _retry(lambda: self._tables(sa).create_all(engine))
        return engine

    @cached_property
    def optuna_storage(self):
        """Optuna's RDBStorage on the same database (the studies live here)."""
        import optuna

        # Heartbeats let a worker on another host find trials whose process died and re-queue them
        # (the local case is settled at once by Refiner.recover()).
        import warnings

        retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)  # optuna >= 4.9
        key = "heartbeat_stale_trial_callback" if retry is not None else "failed_trial_callback"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # experimental-feature notices
            retry = (retry or optuna.storages.RetryFailedTrialCallback)(max_retry=2)
        kwargs: dict[str, Any] = {"heartbeat_interval": 60, "grace_period": 600, key: retry}
        if sqlite_path(self.url) is not None:
            sqlite_path(self.url).parent.mkdir(parents=True, exist_ok=True)
            kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
        if sqlite_path(self.url) is not None:
            self.engine  # noqa: B018 - creates the file in WAL mode before Optuna opens it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            storage = _retry(lambda: optuna.storages.RDBStorage(self.url, **kwargs))
        if sqlite_path(self.url) is not None and hasattr(storage, "engine"):
            _tune_sqlite(storage.engine)
            storage.engine.dispose()  # later connections get the pragmas
        return storage

    def exists(self) -> bool:
        """False for a SQLite store whose file was never created (reading it would create it)."""
        path = sqlite_path(self.url)
        return path is None or path.exists()

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
                sa.Column("kernel_ms", sa.Float, nullable=True),  # objective mode, for sorting in SQL
                sa.Column("source", sa.Text, nullable=False, default=""),
                sa.Column("measurements", sa.Text, nullable=False),
                # the baselines timed in the same evaluator call (interleaved with this kernel)
                sa.Column("baselines", sa.Text, nullable=False, default="{}"),
                sa.Column("environment", sa.Text, nullable=False, default="null"),
                sa.Column("created", sa.DateTime, nullable=False),
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
            # Re-timings of a search's leaders (cudal2.search.confirm), apart from the kernel table: a
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
                      environment: Environment | None = None, mode: str = "offline",
                      baselines: dict[str, BaselineResult] | None = None) -> None:
        t = self._table("cudal2_kernels")
        with self.engine.begin() as conn:
            conn.execute(t.insert().values(
                problem_key=problem.key(), problem=problem.to_json(), spec_key=result.spec.key(),
                spec=result.spec.to_json(), backend=result.spec.backend, status=result.status,
                kernel_ms=result.kernel_ms(mode) if result.ok else None, source=source or "",
                measurements=result_to_json(result),
                baselines=json.dumps({k: baseline_to_dict(b) for k, b in (baselines or {}).items()}, sort_keys=True),
                environment=json.dumps(asdict(environment) if environment else None),
                created=_dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)))

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

    def kernels(self, problem: GemmProblem | None = None) -> list[dict[str, Any]]:
        """Kernel rows (dicts with parsed problem, result, environment), oldest first."""
        t = self._table("cudal2_kernels")
        q = t.select().order_by(t.c.id)
        if problem is not None:
            q = q.where(t.c.problem_key == problem.key())
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return [self._kernel_row(r) for r in rows]

    @staticmethod
    def _kernel_row(r) -> dict[str, Any]:
        return {
            "problem": GemmProblem.from_json(r["problem"]),
            "result": result_from_dict(json.loads(r["measurements"])),
            "backend": r["backend"], "status": r["status"], "kernel_ms": r["kernel_ms"],
            "source": r["source"], "environment": json.loads(r["environment"] or "null"),
            "baselines": {k: baseline_from_dict(v) for k, v in json.loads(r["baselines"] or "{}").items()},
            "created": r["created"],
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
        """The fastest correct kernel stored for problem (objective-mode kernel time)."""
        t = self._table("cudal2_kernels")
        with self.engine.connect() as conn:
            row = conn.execute(t.select().where(t.c.problem_key == problem.key(), t.c.status == "ok",
                                                t.c.kernel_ms.is_not(None))
                               .order_by(t.c.kernel_ms, t.c.id).limit(1)).mappings().first()
        return self._kernel_row(row) if row else None

    # ---- confirmations ------------------------------------------------------------------------------
    def record_confirmation(self, problem: GemmProblem, result: CandidateResult,
                            baselines: dict[str, BaselineResult], environment: Environment | None = None) -> None:
        t = self._table("cudal2_confirmations")
        with self.engine.begin() as conn:
            conn.execute(t.insert().values(
                problem_key=problem.key(), spec_key=result.spec.key(), status=result.status,
                measurements=result_to_json(result),
                baselines=json.dumps({k: baseline_to_dict(b) for k, b in baselines.items()}, sort_keys=True),
                environment=json.dumps(asdict(environment) if environment else None),
                created=_dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)))

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
        with self.engine.begin() as conn:
            for name, b in baselines.items():
                conn.execute(t.insert().values(problem_key=problem.key(), problem=problem.to_json(), name=name,
                                               measurements=json.dumps(baseline_to_dict(b), sort_keys=True),
                                               environment=env, created=now))

    def baselines(self, problem: GemmProblem) -> dict[str, BaselineResult]:
        """The latest stored measurement of each baseline for problem."""
        t = self._table("cudal2_baselines")
        with self.engine.connect() as conn:
            rows = conn.execute(t.select().where(t.c.problem_key == problem.key()).order_by(t.c.id)).mappings().all()
        return {r["name"]: baseline_from_dict(json.loads(r["measurements"])) for r in rows}

    # ---- studies --------------------------------------------------------------------------------------
    def study_names(self) -> list[str]:
        import optuna

        return [s.study_name for s in optuna.get_all_study_summaries(self.optuna_storage)]

    def iter_best(self) -> Iterator[tuple[GemmProblem, dict[str, Any], dict[str, BaselineResult]]]:
        for p in self.problems():
            b = self.best(p)
            if b is not None:
                yield p, b, self.baselines(p)
