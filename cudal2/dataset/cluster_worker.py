"""What runs on a Dask worker: the one runner it keeps, and the two tasks it is sent, a batch of a
sweep (`measure_batch`) and a whole search (`search_task`).

Imported only where a cluster is used (it imports distributed). A worker keeps one runner per
client that registered it (`RunnerPlugin`), so an evaluator and its compile cache serve every
task that client sends; the worker's GPU is the first of its CUDA_VISIBLE_DEVICES, which
dask-cuda sets to a different GPU for each worker. Results go back to the client, which writes a
sweep's pairs into the store: data flows one way, and a worker that dies holds nothing the store
needs. A search writes its own trials (its study lives in the store), so its store must be one
the worker reaches.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable

from distributed import WorkerPlugin, get_worker

from ..bench.results import DEFAULT_MODE, BaselineResult, CandidateResult, Environment
from ..ir import GemmProblem, KernelSpec, SpecError
from cudal2.store.store import Store
from cudal2.tuner.resolve import check_problem_fits, default_arch, resolve_proposer
from cudal2.tuner.resolve import default_runner


class WorkerSetupError(RuntimeError):
    """A worker that cannot run cudal2's tasks as it was started: the message names the fix."""


@dataclass(frozen=True)
class Batch:
    """The unit of work of a sweep: specs on one shape, in one or more evaluator calls."""

    problem: GemmProblem
    calls: tuple[tuple[KernelSpec, ...], ...]  # the specs of each evaluator call, in order
    modes: tuple[str, ...] = (DEFAULT_MODE,)
    # The next batch's first call on the same shape: the worker's compile pool starts on it while
    # this batch's last call is checked and timed (a spec compiled once serves every shape of its class).
    then: tuple[KernelSpec, ...] = ()

    @property
    def label(self) -> str:
        return self.problem.label()

    @property
    def specs(self) -> tuple[KernelSpec, ...]:
        return tuple(s for call in self.calls for s in call)


@dataclass(frozen=True)
class Measured:
    """A batch's results as a worker sends them back, with the baselines timed on the same GPU."""

    batch: Batch
    results: list[CandidateResult]
    baselines: dict[str, BaselineResult]
    baselines_timed: bool  # timed with this batch (the client stores them); else timed earlier here
    environment: Environment | None
    worker: str  # the Dask worker's address
    # Why the GPU refused the shape (it does not fit the free memory): an answer, not a failure of
    # the worker, so it comes back as data and no pair of the batch is measured.
    refused: SpecError | None = None


class RunnerPlugin(WorkerPlugin):
    """One runner on a worker, made by make_runner on first use: in the task's thread, so a GPU
    evaluator starting its processes never blocks the worker's event loop. Closed with the worker
    or when the client unregisters it."""

    def __init__(self, make_runner: Callable[[], Any]):
        self.make_runner = make_runner

    def setup(self, worker) -> None:
        self._lock = threading.Lock()
        self._runner: Any = None
        self.baselines_timed: set[tuple[str, tuple[str, ...]]] = set()  # (problem key, modes) timed here

    def runner(self) -> Any:
        with self._lock:
            if self._runner is None:
                self._runner = self.make_runner()
            return self._runner

    def teardown(self, worker) -> None:
        runner, self._runner = self._runner, None
        if runner is not None and hasattr(runner, "close"):
            runner.close()


def _plugin(name: str) -> RunnerPlugin:
    worker = get_worker()
    plugin = worker.plugins.get(name)
    if plugin is None:  # registered by a client that has since closed
        raise WorkerSetupError(f"worker {worker.address} has no cudal2 runner {name!r}; its client has gone")
    return plugin


def measure_batch(runner_name: str, batch: Batch) -> Measured:
    """Check and time a batch on this worker's GPU. The shape's baselines are timed with the first
    batch of it this worker measures, so every pair it returns is set against baselines timed on
    its own GPU (two cards of one model differ a little)."""
    plugin = _plugin(runner_name)
    runner = plugin.runner()
    problem, modes = batch.problem, batch.modes
    fresh = (problem.key(), modes) not in plugin.baselines_timed
    prefetch = getattr(runner, "prefetch", None)
    results: list[CandidateResult] = []
    try:
        for i, call in enumerate(batch.calls):
            ahead = batch.calls[i + 1] if i + 1 < len(batch.calls) else batch.then
            if ahead and prefetch is not None:
                prefetch(problem, list(call))  # this call first in the pool's queue, then the next one
                prefetch(problem, list(ahead))
            results += runner.evaluate(problem, list(call), modes, with_baselines=fresh and i == 0)
        baselines = runner.baselines(problem, modes)
    except SpecError as e:  # the shape does not fit this GPU
        return Measured(batch, [], {}, False, runner.environment(), get_worker().address, refused=e)
    plugin.baselines_timed.add((problem.key(), modes))
    return Measured(batch, results, baselines, fresh, runner.environment(), get_worker().address)


@dataclass(frozen=True)
class Searched:
    """A search as a worker sends it back: the SearchResult without its study (which holds a
    database connection; the client opens it again from the store by name), or why the GPU
    refused the problem (MemoryFitError, raised again in the caller)."""

    result: Any = None
    study_name: str = ""
    refused: SpecError | None = None


def search_task(runner_name: str, problem: GemmProblem, store_url: str, options: dict[str, Any]) -> Searched:
    """One search run on this worker's GPU, its trials written into the store at store_url."""
    from cudal2.tuner.loop import run_search

    runner = _plugin(runner_name).runner()
    options = dict(options)
    arch = options.pop("arch", None) or default_arch()  # this worker's GPU
    backends = tuple(options.pop("backends", ("triton",)))
    proposer = resolve_proposer(options.pop("proposer", "auto"), backends, arch)
    try:
        check_problem_fits(problem, arch, runner)
    except SpecError as e:
        return Searched(refused=e)
    result = run_search(problem, backends=backends, arch=arch, proposer=proposer, runner=runner,
                        store=Store(store_url), progress=False, **options)
    return Searched(replace(result, study=None), result.study.study_name)


def given_runner(runner: Any) -> Any:
    """make_runner for a runner object the caller built (each worker unpickles its own copy)."""
    return runner


def gpu_runner(**config) -> Any:
    """The evaluator of a GPU worker: cuda:0 of its CUDA_VISIBLE_DEVICES, and a compile pool sized
    to its share of the host's cores (dask-cuda lists every GPU of the host in each worker's
    CUDA_VISIBLE_DEVICES, its own first), so that the GPUs of a host do not wait on each other's
    compiles. config: EvalConfig fields."""
    import multiprocessing as mp

    if mp.current_process().daemon:
        raise WorkerSetupError(f"Dask worker {get_worker().address} runs as a daemon process, which may not start "
                               "the evaluator's GPU worker and compile pool; start the workers with "
                               "DASK_DISTRIBUTED__WORKER__DAEMON=False (docs/scale_out.md)")
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    share = (os.cpu_count() or 2) // max(1, len(visible))
    return default_runner(**{"compile_workers": max(1, min(8, share - 1)), **config})
