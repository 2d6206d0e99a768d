"""Compilation ahead of timing: a pool of CPU processes renders each spec and calls the
backend's precompile(), which fills the toolchain's disk cache, while the GPU worker checks
and times the candidates before it. The GPU worker's compile() then finds the binary cached.

How much this overlaps depends on the backend: a backend whose precompile() is a no-op (the
Triton backend may be one: Triton compiles on the first launch, for the GPU it runs on) gets
only rendering overlapped, and its compile happens in the GPU worker, under the compile
timeout there.

A compile that hangs past its timeout cannot be cancelled inside a ProcessPoolExecutor, so
the pool is torn down (its processes killed) and rebuilt. A compile that kills its process (a
segfault or abort inside a compiler, the OOM killer) breaks the whole pool: every task it held
fails with BrokenProcessPool, and which one did it cannot be told. Either way, every future of
the old pool, in whichever list it was handed out (the evaluator keeps one for the candidates and
one for their long-K probes), is resubmitted to the new pool when it is next asked for; a spec
whose own result was the broken one gets a second try, and only a second break records it as a
compile failure. So one bad spec costs its own result and never a sibling's.

A pool process whose parent died (a sweep's Dask worker killed with SIGKILL never shuts its pool
down) ends itself within a second, rather than lingering as an orphan that holds the parent's
output pipes open.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..ir import GemmProblem, KernelSpec
from ..codegen import get_backend


@dataclass
class Prepared:
    """The outcome for one spec: a Source to compile, or the failure."""

    source: Any = None  # codegen.base.Source
    status: str = "ok"  # ok | unsupported | compile_error
    reason: str = ""
    seconds: float = 0.0


def render_and_precompile(problem: GemmProblem, spec: KernelSpec) -> Prepared:
    """Runs in a pool process."""
    t0 = time.perf_counter()
    backend = get_backend(spec.backend)
    ok = backend.supports(problem, spec)
    if not ok:
        return Prepared(status="unsupported", reason=ok.reason)
    try:
        source = backend.render(problem, spec)
    except Exception as e:  # noqa: BLE001
        return Prepared(status="compile_error", reason=f"render failed: {type(e).__name__}: {e}",
                        seconds=time.perf_counter() - t0)
    try:
        backend.precompile(source)
    except Exception as e:  # noqa: BLE001
        return Prepared(source, "compile_error", f"precompile failed: {type(e).__name__}: {e}",
                        time.perf_counter() - t0)
    return Prepared(source, seconds=time.perf_counter() - t0)


def exit_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """Pool initializer: watch the parent, and end this process once it is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(0)

    threading.Thread(target=watch, name="cudal2-parent-watch", daemon=True).start()


# Compiles ahead are background work: the GPU worker's checks and the search's own steps are what a
# search waits on, so pool processes run this much nicer than them (a compile that the search does
# wait on has the CPU to itself anyway).
NICENESS = 5


def start_pool_process(parent: int) -> None:
    """Pool initializer: lower this process's CPU priority (NICENESS) and end it with its parent."""
    try:
        os.nice(NICENESS)
    except (OSError, AttributeError):  # a platform without nice, or a limit on it: run as is
        pass
    exit_with_parent(parent)


# A search with look-ahead has up to four batches of 4 compiling (the one in hand and three asked
# ahead, cudal2.tuner.loop.LOOKAHEAD_BATCHES) and its leader's static twin: on a 16-core host, 14.
MAX_WORKERS = 16


class CompilePool:
    def __init__(self, workers: int | None = None, timeout_s: float = 300.0,
                 task: Callable[[GemmProblem, KernelSpec], Prepared] = render_and_precompile):
        # One process a core, less the caller's and the GPU worker's, up to MAX_WORKERS
        self.workers = workers or max(1, min(MAX_WORKERS, (os.cpu_count() or 2) - 2))
        self.timeout_s = timeout_s
        self.task = task  # a module-level function (it is pickled by reference); tests inject one
        self._pool: cf.ProcessPoolExecutor | None = None
        self.generation = 0  # +1 each time the processes are killed: older futures are lost
        # submissions may come from two threads (a search hands its next batches over while the
        # evaluator waits on this one's): a submission and a teardown do not interleave
        self._lock = threading.RLock()

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                                initializer=start_pool_process, initargs=(os.getpid(),))
        return self._pool

    def submit_all(self, problem: GemmProblem, specs: list[KernelSpec]) -> list[cf.Future]:
        return [self._submit(problem, s) for s in specs]

    def _submit(self, problem: GemmProblem, spec: KernelSpec) -> cf.Future:
        with self._lock:
            future = self._executor().submit(self.task, problem, spec)
            future.generation = self.generation  # type: ignore[attr-defined]  (which pool it went to)
            return future

    def _lost(self, future: cf.Future) -> bool:
        """Submitted to a pool that has since been torn down, without a result of its own: it was
        cancelled, broken with the pool, or would never finish."""
        if getattr(future, "generation", self.generation) == self.generation:
            return False
        return not future.done() or future.cancelled() or future.exception() is not None

    def _resubmit_lost(self, futures: list[cf.Future], start: int, problem: GemmProblem,
                       specs: list[KernelSpec]) -> None:
        for j in range(start, len(futures)):
            if self._lost(futures[j]):
                futures[j] = self._submit(problem, specs[j])

    def result(self, futures: list[cf.Future], i: int, problem: GemmProblem, specs: list[KernelSpec]) -> Prepared:
        """Wait for spec i (at most timeout_s from now). Futures from i on that an earlier teardown
        lost are resubmitted in place in `futures` first; on a timeout or a broken pool the pool is
        rebuilt (see the module's docstring)."""
        self._resubmit_lost(futures, i, problem, specs)
        try:
            return self._wait(futures, i, problem, specs)
        finally:
            self._resubmit_lost(futures, i + 1, problem, specs)  # (after a teardown: the rest, again)

    def _wait(self, futures: list[cf.Future], i: int, problem: GemmProblem, specs: list[KernelSpec],
              retry_broken: bool = True) -> Prepared:
        try:
            return futures[i].result(timeout=self.timeout_s)
        except cf.TimeoutError:
            self._kill()
            return Prepared(status="compile_error", reason=f"render+precompile did not finish within "
                                                           f"{self.timeout_s:g} s (compile pool rebuilt)")
        except cf.process.BrokenProcessPool as e:
            self._kill()
            if retry_broken:
                # it may only have shared the pool with the spec that broke it: a second try, alone in
                # the new pool (the others are resubmitted after it), tells the two apart
                futures[i] = self._submit(problem, specs[i])
                return self._wait(futures, i, problem, specs, retry_broken=False)
            return Prepared(status="compile_error",
                            reason=f"the compile process died on this spec twice, the second time alone (a crash "
                                   f"or a kill inside the compiler; compile pool rebuilt): {e}")
        except Exception as e:  # noqa: BLE001 - e.g. the spec or its result could not be pickled
            return Prepared(status="compile_error", reason=f"compile worker failed: {type(e).__name__}: {e}")

    def _kill(self) -> None:
        with self._lock:
            self.generation += 1
            pool, self._pool = self._pool, None
        if pool is None:
            return
        # ProcessPoolExecutor cannot cancel a running task; end its processes (ours) by pid.
        for p in list(getattr(pool, "_processes", {}).values()):
            try:
                p.kill()
            except Exception:  # noqa: BLE001
                pass
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self, grace_s: float = 5.0) -> None:
        """Cancel what has not started; give running compiles grace_s, then end them."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + grace_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1)
