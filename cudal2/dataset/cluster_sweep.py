"""The sweep over every worker of a Dask cluster (`cudal2 sweep --workers ...`): the pairs of
sweep.run_sweep, measured by many GPUs at once.

    per shape, the specs the store lacks, in evaluator calls, up to TASK_CALLS of them a batch
      -> every batch submitted at once; the scheduler hands them out in order, one per worker
      -> as each batch finishes (distributed.as_completed), its pairs go into the store
      -> a batch whose worker died is run again elsewhere

A batch holds several of one shape's calls so that a shape stays on one worker: its baselines
are timed once, its inputs are made once, and the worker's compile pool starts on the next call's
specs while one is timed. Scattered over the workers, every batch of a 100-spec shape paid those
again on another GPU.

This process is the store's one writer: workers only measure and send back, so a worker killed
mid-batch loses that batch alone, which the scheduler gives to another worker (and this module
resubmits, should every worker that tried it die); a finished pair is in the store before the
next result is read, so killing this process loses only the batches in flight, and the same
command resumes. Each worker times a shape's baselines on its own GPU with its first batch of that
shape, and its pairs are stored with those: a pair is never set against another card's torch time.
One sweep measures one GPU model: a batch timed on a second model stops it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..bench.results import DEFAULT_MODE
from ..ir import GemmProblem, KernelSpec, SpecError
from cudal2.store.store import Store
from .cluster import ClusterError, ctrl_c_deferred, finished, lost_worker, runner_on_workers, stop_if_interrupted
from .cluster_worker import Batch, Measured, WorkerSetupError, measure_batch
from .sweep import CHUNK, SweepSummary, chunked

RESUBMITS = 2  # times a batch is submitted again after its workers died (Dask retries it first)
TASK_CALLS = 4  # evaluator calls of one shape a batch holds: a worker killed mid-batch loses at most these


def plan_batches(problems: Sequence[GemmProblem], specs: Sequence[KernelSpec], store: Store,
                 modes: tuple[str, ...], chunk: int, summary: SweepSummary,
                 on_pairs: Callable[[int, str], None]) -> list[Batch]:
    """The batches of the pairs the store lacks, shape by shape, each up to TASK_CALLS evaluator
    calls of at most chunk specs; the pairs the store holds are counted in summary.already and told
    to on_pairs."""
    batches = []
    for problem in problems:
        done = store.measured_spec_keys(problem)
        todo = [s for s in specs if s.key() not in done]
        summary.already += len(specs) - len(todo)
        on_pairs(len(specs) - len(todo), problem.label())
        calls = [tuple(c) for c in chunked(todo, chunk)]
        groups = [tuple(calls[i:i + TASK_CALLS]) for i in range(0, len(calls), TASK_CALLS)]
        batches += [Batch(problem, group, modes, then=groups[i + 1][0] if i + 1 < len(groups) else ())
                    for i, group in enumerate(groups)]
    return batches


class _Writer:
    """Puts each measured batch into the store, and keeps the sweep to one GPU model."""

    def __init__(self, store: Store, summary: SweepSummary, on_pairs: Callable[[int, str], None], mode: str):
        self.store, self.summary, self.on_pairs, self.mode = store, summary, on_pairs, mode
        self.gpu_model: str | None = None
        self.skipped: set[str] = set()

    def write(self, m: Measured) -> None:
        if m.refused is not None:
            self.skip(m.batch, m.refused)
            return
        problem, env = m.batch.problem, m.environment
        if env is not None:
            self.check_model(env.gpu_name, m.worker)
        if m.baselines_timed:
            self.store.record_baselines(problem, m.baselines, env)
        for result in m.results:
            self.store.record_kernel(problem, result, environment=env, mode=self.mode, baselines=m.baselines)
            self.summary.measured += 1
            self.summary.correct += bool(result.ok)
        self.on_pairs(len(m.batch.specs), m.batch.label)

    def check_model(self, gpu_name: str, worker: str) -> None:
        if self.gpu_model is None:
            self.store.check_gpu_model(gpu_name)  # StoreError if the store holds another model's timings
            self.gpu_model = gpu_name
        elif gpu_name != self.gpu_model:
            raise ClusterError(f"worker {worker} has a {gpu_name} and an earlier one a {self.gpu_model}: one sweep "
                               "measures one GPU model; give it workers of one model (and each model its own --store)")

    def skip(self, batch: Batch, e: SpecError) -> None:
        """A shape the GPU cannot hold: every batch of it says so; the first one is reported."""
        key = batch.problem.key()
        if key not in self.skipped:
            self.skipped.add(key)
            self.summary.skipped.append(f"{batch.label}: {' | '.join(str(v) for v in e.violations)}")
        self.on_pairs(len(batch.specs), batch.label)


def run_sweep_on_cluster(problems: Sequence[GemmProblem], specs: Sequence[KernelSpec], client,
                         runner: Callable[[], Any] | str, store: Store, modes: tuple[str, ...] = (DEFAULT_MODE,),
                         chunk: int = CHUNK,
                         on_pairs: Callable[[int, str], None] = lambda n, label: None) -> SweepSummary:
    """Measure every spec on every problem that the store does not hold yet, on the workers of
    client (a distributed.Client). runner: what makes each worker's runner, a picklable callable
    run on the worker (its runners are closed after this call), or the name that
    cluster.runner_on_workers gave (runners, warm, kept across calls). on_pairs as in run_sweep.
    Raises ClusterError (the cluster failed us), StoreError (the store holds another GPU model's
    timings), or what a runner raises."""
    summary = SweepSummary(shapes=len(problems))
    with ctrl_c_deferred():  # Ctrl-C from here on stops the sweep where it is safe (cluster.ctrl_c_deferred)
        batches = plan_batches(problems, specs, store, tuple(modes), chunk, summary, on_pairs)
        if not batches:
            return summary
        stop_if_interrupted()
        writer = _Writer(store, summary, on_pairs, modes[0])
        if isinstance(runner, str):
            _measure_all(client, runner, batches, writer)
        else:
            with runner_on_workers(client, runner) as name:
                _measure_all(client, name, batches, writer)
    return summary


def _measure_all(client, name: str, batches: list[Batch], writer: _Writer) -> None:
    """Submit every batch, write each as it finishes, resubmit one lost with its workers."""
    from distributed import as_completed

    pending: dict = {}
    resubmitted: dict[int, int] = {}
    try:
        for i, b in enumerate(batches):
            stop_if_interrupted()  # thousands of submissions take seconds: Ctrl-C stops them too
            pending[client.submit(measure_batch, name, b, pure=False)] = (i, b)
        flow = as_completed(pending)
        for future in finished(flow):
            i, batch = pending.pop(future)
            try:
                writer.write(_result_of(future))
            except _Lost:
                resubmitted[i] = resubmitted.get(i, 0) + 1
                if resubmitted[i] > RESUBMITS:
                    raise ClusterError(f"a batch of {len(batch.specs)} specs on {batch.label} was lost with "
                                       f"{RESUBMITS + 1} rounds of workers; see the workers' logs") from None
                again = client.submit(measure_batch, name, batch, pure=False)
                pending[again] = (i, batch)
                flow.add(again)
    finally:
        client.cancel(list(pending))  # interrupted: the batches in flight are measured by the next run


class _Lost(Exception):
    """Every worker that ran the batch died (Dask's allowed failures are spent)."""


def _result_of(future) -> Measured:
    """A finished batch's Measured; the cluster's failures become ClusterError, and a batch lost
    with its workers _Lost."""
    from concurrent.futures import CancelledError

    try:
        return future.result()
    except CancelledError:
        raise ClusterError("the cluster went away mid-sweep (its scheduler stopped or cannot be reached); the pairs "
                           "measured so far are in the store, and the same command resumes") from None
    except WorkerSetupError as e:
        raise ClusterError(str(e)) from None
    except Exception as e:
        if lost_worker(e):
            raise _Lost() from None
        raise
