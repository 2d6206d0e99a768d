"""The tuned table: for each problem (and GPU), the fastest correct kernel the store holds and
the baselines it was measured against. What cudal2.matmul/linear look up at run time.

Built from a store (`TunedTable.from_store`), or exported to a JSON file (`cudal2 export`) and
loaded from it (`TunedTable.load`; the environment variable CUDAL2_TABLE names such a file).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterator

from cudal2.settings import settings
from ..bench.results import DEFAULT_MODE, is_synthetic
from ..ir import GemmProblem, KernelSpec
from .rounds import gpu_of, kept_twins, rounds_in_mode, summarize
from .store import Store, StoreError, display_url, sqlite_path

ENV_TABLE = "CUDAL2_TABLE"
ENV_STORE_TIMEOUT = "CUDAL2_STORE_TIMEOUT"
# Seconds the op waits for the default store's table: a store that answers slower than this (a server
# that took the connection and never answers) leaves the op to torch, with a warning, rather than
# holding the model's first GEMM.
STORE_TIMEOUT_S = 5.0
FORMAT = "cudal2.tuned_table"
VERSION = 1
# The modes cudal2.matmul serves from, in order of preference (TunedTable.for_serving).
# the search's objective (chain: a GEMM timed between two others, docs/evaluation.md) first; then mlp_chain, for
# a store searched in it; then layer, for a store searched while it was the objective; then what problems
# measured before them have
SERVING_MODES = tuple(dict.fromkeys((DEFAULT_MODE, "chain", "mlp_chain", "layer", "sustained", "offline")))


@dataclass(frozen=True)
class TunedEntry:
    problem: GemmProblem
    spec: KernelSpec
    kernel_ms: float  # kernel time of the tuned kernel, in `mode`
    baselines_ms: dict[str, float] = field(default_factory=dict)  # baseline -> kernel ms, in `mode`
    gpu: str = ""  # GPU name it was measured on ("" = unknown, matches any)
    created: str = ""
    mode: str = "offline"  # the timing mode of both figures (tables written before modes were kept: offline)

    def speedup(self, baseline: str = "torch") -> float | None:
        b = self.baselines_ms.get(baseline)
        return b / self.kernel_ms if b and self.kernel_ms > 0 else None

    @property
    def synthetic(self) -> bool:
        """Whether the figures are the recorded runner's synthetic numbers, not measurements."""
        return is_synthetic(self.gpu)

    def to_dict(self) -> dict[str, Any]:
        d = {"problem": self.problem.to_dict(), "spec": self.spec.to_dict(), "kernel_ms": self.kernel_ms,
             "baselines_ms": dict(self.baselines_ms), "gpu": self.gpu, "created": self.created,
             "mode": self.mode, "speedup": {b: self.speedup(b) for b in self.baselines_ms}}
        return {**d, "synthetic": True} if self.synthetic else d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TunedEntry":
        return cls(problem=GemmProblem.from_dict(d["problem"]), spec=KernelSpec.from_dict(d["spec"]),
                   kernel_ms=float(d["kernel_ms"]), baselines_ms={k: float(v) for k, v in d.get("baselines_ms", {}).items()},
                   gpu=d.get("gpu", ""), created=d.get("created", ""), mode=str(d.get("mode", "offline")))


class TunedTable:
    def __init__(self, entries: list[TunedEntry] | None = None):
        # one entry per (problem, GPU, backend): a caller that cannot launch one backend's kernel (the op
        # launches only those whose launch is cheap) still finds the best of the others
        self._entries: dict[tuple[str, str, str], TunedEntry] = {}
        for e in entries or []:
            self.add(e)

    def add(self, entry: TunedEntry) -> None:
        """Keep the faster entry when one for the same problem, GPU and backend exists: the one with the
        higher speedup over torch.matmul timed with it (raw times of different evaluator calls do
        not compare: the GPU's clock drifts between them), or the lower time where one lacks it."""
        key = (entry.problem.key(), entry.gpu, entry.spec.backend)
        old = self._entries.get(key)
        if old is None:
            self._entries[key] = entry
            return
        new_s, old_s = entry.speedup("torch"), old.speedup("torch")
        if new_s is not None and old_s is not None:
            if new_s > old_s:
                self._entries[key] = entry
        elif entry.kernel_ms < old.kernel_ms:
            self._entries[key] = entry

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[TunedEntry]:
        return iter(sorted(self._entries.values(), key=lambda e: (e.problem.label(), e.gpu, e.spec.backend)))

    def lookup(self, problem: GemmProblem, gpu: str | None = None, baseline: str = "torch",
               min_speedup: float = 1.0, backends: Collection[str] | None = None) -> TunedEntry | None:
        """The fastest entry for problem whose measured speedup over `baseline` exceeds min_speedup,
        or None (then the caller runs the baseline: never slower). gpu=None matches any GPU; a name
        matches entries of that GPU and entries of unknown GPU. backends: only entries of these (the
        ones a caller can launch), so that a faster kernel it cannot launch never hides one it can."""
        best, best_s = None, 0.0
        for (pkey, egpu, _backend), e in self._entries.items():
            if pkey != problem.key() or (gpu is not None and egpu not in (gpu, "")):
                continue
            if backends is not None and e.spec.backend not in backends:
                continue
            s = e.speedup(baseline)
            if s is None or s <= min_speedup:
                continue
            if best is None or s > best_s:
                best, best_s = e, s
        return best

    # ---- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "entries": [e.to_dict() for e in self]}

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TunedTable":
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"tuned table {path} does not exist; write one with `cudal2 export --out {path}`")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"tuned table {path} is not valid JSON ({e}); write it again with `cudal2 export`") from None
        except RecursionError:
            raise ValueError(f"tuned table {path} is nested too deeply to be a tuned table; write it again with "
                             "`cudal2 export`") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path} is not a cudal2 tuned table (expected \"format\": \"{FORMAT}\"); "
                             "write one with `cudal2 export`")
        if data.get("version") != VERSION:
            raise ValueError(f"{path} has tuned-table version {data.get('version')}, this cudal2 reads {VERSION}; "
                             "export it again with this version")
        try:
            return cls([TunedEntry.from_dict(d) for d in data["entries"]])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"tuned table {path} has a malformed entry ({type(e).__name__}: {e}); "
                             "write it again with `cudal2 export`") from None

    @classmethod
    def from_store(cls, store=None, mode: str = DEFAULT_MODE) -> "TunedTable":
        """Best correct kernel per (problem, GPU) in the store, with the baselines timed together
        with it (interleaved in the same evaluator call), else the problem's stored baselines.
        Where a search confirmed its leaders on that GPU (confirm.py), only they compete, each with
        its median round: a single lucky trial must not route cudal2.matmul away from torch, and a
        kernel that failed a confirmation round is never used."""
        return cls._from_store(store, (mode,))[mode]

    @classmethod
    def for_serving(cls, store=None) -> "TunedTable":
        """What cudal2.matmul/linear serve: per problem and GPU, the ranking in the first of
        SERVING_MODES that has measurements there: the search's objective (chain mode, as the model
        calls the GEMM); layer mode, for a store searched when it was the objective; for problems
        measured before those existed, sustained, then offline. A
        leader that lost to torch in a mode leaves the problem to torch, whatever a later mode in
        the list said; each entry keeps its mode, and kernel and baselines are always of one mode."""
        tables = cls._from_store(store, SERVING_MODES)
        table, served = cls(), set()
        for mode in SERVING_MODES:
            for e in tables[mode]:
                if (e.problem.key(), e.gpu) not in served:
                    table.add(e)
            served |= {(pkey, gpu) for pkey, gpu, _backend in tables[mode]._entries}
        return table

    @classmethod
    def _from_store(cls, store, modes: tuple[str, ...]) -> dict[str, "TunedTable"]:
        """from_store's table in each of modes, from one read of the store."""
        store = store if isinstance(store, Store) else Store(store)
        tables = {mode: cls() for mode in modes}
        if not store.exists():
            return tables
        for problem in store.problems():
            stored, confirmations, kernels = store.baselines(problem), store.confirmations(problem), store.kernels(problem)
            for mode, table in tables.items():
                baselines = _times_in(stored, mode)
                confirmed: dict[str, list] = {}  # GPU -> confirmation rows
                for row in rounds_in_mode(confirmations, mode):
                    confirmed.setdefault(gpu_of(row), []).append(row)
                rows = [r for gpu_rows in confirmed.values() for r in _leader_rounds(gpu_rows, mode)]
                rows += [r for r in kernels if gpu_of(r) not in confirmed]
                for row in rows:
                    entry = _entry_of(problem, row, mode, baselines)
                    if entry is not None:
                        table.add(entry)
        return tables

    @classmethod
    def leaders(cls, store, problem: GemmProblem, gpu: str, mode: str = DEFAULT_MODE) -> list[TunedEntry]:
        """Every leader a search confirmed for problem on gpu in mode that passed all its rounds, each as the
        table would hold it (its median round), fastest over torch.matmul first: the kernel the table serves and
        its runners-up, which the table itself does not keep (one entry per backend)."""
        store = store if isinstance(store, Store) else Store(store)
        if not store.exists():
            return []
        baselines = _times_in(store.baselines(problem), mode)
        rows = [r for r in rounds_in_mode(store.confirmations(problem), mode) if gpu_of(r) == gpu]
        entries = [_entry_of(problem, r, mode, baselines) for r in _leader_rounds(rows, mode)]
        return sorted((e for e in entries if e is not None), key=lambda e: -(e.speedup("torch") or 0.0))

    @classmethod
    def default(cls) -> "TunedTable":
        """$CUDAL2_TABLE if set, else the default store's table for serving (empty if it does not
        exist yet), read within $CUDAL2_STORE_TIMEOUT seconds (STORE_TIMEOUT_S). Raises StoreError,
        one line with the fix, for a database server that cannot be reached, lacks its driver or does
        not answer in time."""
        path = settings().table
        if path:
            return cls.load(path)
        store = Store(None)
        if sqlite_path(store.url) is not None:
            return _within(store_timeout_s(), lambda: cls.for_serving(store), store)
        # a server's own line (refused, no driver) at once, not after the engine's retries
        return _within(store_timeout_s(), lambda: cls.for_serving(store.check()), store)


def _times_in(baselines: dict, mode: str) -> dict[str, float]:
    """name -> ms in mode of the baselines (stored results) that ran and have a time there."""
    return {name: b.kernel_ms(mode) for name, b in baselines.items() if b.available and b.kernel_ms(mode) is not None}


def _leader_rounds(rows: list[dict], mode: str) -> list[dict]:
    """The median round of each leader that one GPU's confirmation rows in mode kept and that passed all its
    rounds (one per twin: kept_twins)."""
    return [c.median_round for c in kept_twins(summarize(rows, "torch", mode)).values() if not c.failed]


def _entry_of(problem: GemmProblem, row: dict, mode: str, baselines: dict[str, float]) -> "TunedEntry | None":
    """The entry a stored kernel record (or a confirmation round) makes in mode: its newest passing figure there,
    with the baselines timed beside it (else the problem's stored ones); None where it has none in mode."""
    measured = _newest_in_mode(row, mode)
    if measured is None:
        return None
    res = measured["result"]
    own = _times_in(measured["baselines"], mode)
    created = (measured["created"].isoformat() if isinstance(measured["created"], _dt.datetime)
               else str(measured["created"]))
    return TunedEntry(problem=problem, spec=res.spec, kernel_ms=res.kernel_ms(mode), baselines_ms=own or baselines,
                      gpu=gpu_of(measured), created=created, mode=mode)


def _newest_in_mode(record: dict, mode: str) -> dict | None:
    """The newest measurement of a stored kernel record (its latest result, then its repeats, newest
    first) that passed and has a time in mode, or None. A spec measured again in another mode keeps its
    earlier figures as repeats: the table of the earlier mode still reads them, never the other mode's."""
    for measured in (record, *reversed(record.get("repeats", ()))):
        res = measured["result"]
        if res.ok and res.kernel_ms(mode) is not None:
            return measured
    return None


def store_timeout_s() -> float:
    """$CUDAL2_STORE_TIMEOUT (seconds, more than 0), else STORE_TIMEOUT_S."""
    text = settings().store_timeout
    if not text:
        return STORE_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:
        raise StoreError(f"${ENV_STORE_TIMEOUT} is {text!r}, not a number of seconds above 0; set it to one, "
                         f"or unset it for {STORE_TIMEOUT_S:g}")
    return seconds


def _within(seconds: float, read, store: Store):
    """read() in a worker thread, waited for at most seconds: a driver blocked on a socket cannot be
    interrupted, so a store that never answers is left to its thread (a daemon: it never holds the
    process at exit) and its caller goes on without it."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = read()
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            done["error"] = e

    worker = threading.Thread(target=run, name="cudal2-store-read", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise StoreError(f"store {display_url(store.url)} did not answer within {seconds:g} s; check the server, "
                         f"or set ${ENV_STORE_TIMEOUT} to wait longer")
    if "error" in done:
        raise done["error"]
    return done["value"]
