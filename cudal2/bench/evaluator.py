"""The evaluator: compile ahead on CPU processes, check each candidate in an isolated GPU
worker, then time the survivors interleaved with the baselines in one worker process.

    with Evaluator(device="cuda:0") as ev:
        results = ev.evaluate(problem, specs, modes=("offline", "server"))
        base = ev.baselines(problem, modes=("offline", "server"))

    report = cudal2.bench.evaluate("4096x4096x4096", specs, mode="offline")
    report = cudal2.bench.evaluate_kernels(problem, {"mine": my_kernel})

The flow per problem:
1. specs go to the compile pool (render + precompile on CPU processes), all at once;
2. for each candidate in turn, the GPU worker compiles it (compile timeout) and runs the
   correctness checks (run timeout); meanwhile the pool compiles the next ones. A crash or
   hang kills only the worker; it is replaced and the next candidate goes on;
3. the candidates that passed are timed in one worker job together with the baselines,
   interleaved, through the same call path, then their timed outputs are checked again and
   impossible times rejected. If that job dies, every candidate is re-timed alone so that
   the one that kills the worker is found and recorded, and the others still get times.

Why this module runs past 600 lines: the Evaluator is one object over one worker process, one
compile pool and one cache of compiled kernels, and compiling, checking and timing each reach all
three; the checks themselves live in correctness.py, the timing loop in timing.py and the worker
side in worker.py.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from ..ir import GemmProblem, KernelSpec, SpecError
from ..ir.footprint import check_fits, fit_violation, problem_bytes
from .compile_pool import CompilePool, Prepared
from .correctness import AccuracyPolicy
from .memory import DeviceMemory
from .results import DEFAULT_MODE, MODES, BaselineResult, CandidateResult, Correctness, Environment, EvalReport, Mode
from .timing import TimingConfig
from .worker import CheckBatch, KernelRef, TimeRequest, Worker, WorkerDied
from . import memory
from ..codegen import get_backend
from .baselines import CUBLASLT
from .correctness import SCRATCH_MIN

DEFAULT_BASELINES = ("torch", "cublaslt_heuristic", "cublaslt_autotune", "quack_heuristic", "quack_autotune")
# Where the fp32 reference may not fit on the GPU (more than this share of the free memory last
# reported, which the compile pool's and the worker's CUDA contexts then reduce), the checks get
# time for its trips to the host at this rate (pageable copies, counted low).
HOST_CHECK_SHARE = 0.8
HOST_BYTES_PER_S = 2e9


@dataclass(frozen=True)
class EvalConfig:
    device: str = "cuda:0"
    compile_workers: int | None = None
    compile_timeout_s: float = 300.0  # render + precompile in the pool; compile() in the worker
    run_timeout_s: float = 120.0  # the correctness checks of one candidate (the cap)
    # Once torch.matmul has been timed on the problem, a candidate's checks get
    # check_floor_s + check_per_torch_ms * (torch kernel ms) seconds, within run_timeout_s:
    # a hung kernel then costs ~30 s of GPU time instead of 120 (a cute_dsl search on the H100
    # spent 600 of its ~1250 s in five hangs). The checks run a few calls and fp32 references,
    # far below this even on a 16384x12288x12288 problem.
    check_floor_s: float = 30.0
    check_per_torch_ms: float = 2.0
    time_timeout_s: float = 120.0  # the timing job: this plus 30 s per contender and mode
    policy: AccuracyPolicy = field(default_factory=AccuracyPolicy)
    timing: TimingConfig = field(default_factory=TimingConfig)
    # The timing of evaluate() calls outside full_timing(): a search's trials, which only rank
    # candidates, may take the shorter TimingConfig.sweep(); its confirmation rounds, whose figures
    # are reported, run inside full_timing() with `timing`. None: `timing` everywhere.
    trial_timing: TimingConfig | None = None
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    # The baselines timed with those same calls (None: `baselines`). A trial only needs the one its
    # speedup is taken against; the peers' autotune (quack's: 6-8 s on each new shape, 42 s with its
    # kernels uncompiled, on the H100) then runs once, in the confirmation rounds that are reported.
    trial_baselines: tuple[str, ...] | None = None
    worker_env: dict[str, str] = field(default_factory=dict)
    # Over a short K, fp16 accumulation is as accurate as fp32 accumulation, so the error bound
    # cannot see it. A spec whose problem has K below this is also rendered for the same M, N
    # with this K and checked there: the same code generator and spec, a K where it shows.
    # 0 disables. Prebuilt kernels are probed only with probe_prebuilt (they must accept any K).
    accumulator_probe_k: int = 4096
    probe_prebuilt: bool = False


@dataclass
class EvalStats:
    """Where the evaluator's wall time went, summed over its life (seconds). Shown by long
    runs so that a slow phase is visible; nothing here is a measurement of a kernel."""

    candidates: int = 0
    waiting_for_compile_s: float = 0.0  # blocked on the CPU compile pool
    checking_s: float = 0.0  # GPU worker: load/compile, correctness checks, long-K probes, stream order
    timing_s: float = 0.0  # interleaved timing jobs (candidates + baselines)
    baseline_setup_s: float = 0.0  # of which: preparing the baselines (cuBLASLt plans and autotune)
    peer_setup_s: float = 0.0  # of which: preparing the peers' (quack's autotune)

    def line(self) -> str:
        per = 1.0 / max(1, self.candidates)
        total = self.waiting_for_compile_s + self.checking_s + self.timing_s
        return (f"{self.candidates} candidates, {total * per:.2f} s each: "
                f"compile wait {self.waiting_for_compile_s * per:.2f}, checks {self.checking_s * per:.2f}, "
                f"timing {self.timing_s * per:.2f} (baseline setup {self.baseline_setup_s * per:.2f})")


def prebuilt_spec() -> KernelSpec:
    """The spec recorded for a prebuilt kernel (it was not generated from a spec)."""
    return KernelSpec.model_construct(backend="prebuilt")


class Evaluator:
    """Holds one GPU worker and a compile pool; implements the search's Runner protocol."""

    def __init__(self, config: EvalConfig | None = None, **overrides):
        self.config = replace(config or EvalConfig(), **overrides)
        self._worker: Worker | None = None
        self._pool: CompilePool | None = None
        self._env: Environment | None = None
        self._baselines: dict[tuple, dict[str, BaselineResult]] = {}
        # (problem key, spec key) -> (pool, its generation, compile future, probe future) of specs
        # whose compilation prefetch() started for a later evaluate()
        self._prefetched: dict[tuple[str, str], tuple] = {}
        self._memory: DeviceMemory | None = None  # the worker's last report of its GPU's memory
        # (spec key, class key, variant key) -> Prepared of a shape-generic kernel, for every other
        # shape of its class whose compiled variant is the same
        self._compiled: dict[tuple[str, str], Prepared] = {}
        # prefetch() may be called from another thread while evaluate() runs (prefetch_concurrent):
        # the two share the prefetched futures, the compiled kernels and the pool
        self._compile_lock = threading.RLock()
        self.stats = EvalStats()
        self._full_timing = False  # inside full_timing()
        self._planned: set[str] = set()  # problems whose confirmation baselines were planned ahead

    # ---- lifetime ----------------------------------------------------------------------------
    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @property
    def worker(self) -> Worker:
        if self._worker is None:
            self._worker = Worker(self.config.device, self.config.worker_env)
        return self._worker

    @property
    def pool(self) -> CompilePool:
        with self._compile_lock:
            if self._pool is None:
                self._pool = CompilePool(self.config.compile_workers, self.config.compile_timeout_s)
            return self._pool

    @property
    def restarts(self) -> int:
        return self._worker.restarts if self._worker else 0

    @contextlib.contextmanager
    def full_timing(self):
        """evaluate() calls inside take config.timing and config.baselines even where
        config.trial_timing and config.trial_baselines are set: the search's confirmation rounds
        run here (cudal2.tuner.confirm)."""
        before, self._full_timing = self._full_timing, True
        try:
            yield self
        finally:
            self._full_timing = before

    @property
    def timing(self) -> TimingConfig:
        """The timing the next evaluate() call takes."""
        trial = self.config.trial_timing
        return self.config.timing if self._full_timing or trial is None else trial

    @property
    def timed_baselines(self) -> tuple[str, ...]:
        """The baselines the next evaluate() call times (and baselines() answers for)."""
        trial = self.config.trial_baselines
        return self.config.baselines if self._full_timing or trial is None else trial

    # ---- memory -----------------------------------------------------------------------------------
    def device_memory(self, problem: GemmProblem | None = None) -> DeviceMemory | None:
        """Free and total bytes of the evaluator's GPU as its worker can use them (after it lets go
        of what it keeps for problems other than `problem`), or None without a GPU."""
        try:
            msg = self.worker.request("memory", problem, 120, "reading the GPU's free memory")
        except WorkerDied:
            return None
        self._memory = msg[1] if msg[0] == "ok" else None
        return self._memory

    def check_fits(self, problem: GemmProblem) -> DeviceMemory | None:
        """Raise MemoryFitError (a SpecError naming the bytes needed and free) before anything is
        compiled or allocated, when the problem's operands and output do not fit in the GPU's free
        memory. Returns the memory report (None without a GPU: nothing to check against)."""
        mem = self.device_memory(problem)
        if mem is not None:
            check_fits(problem, mem.free, f"free on {mem.name} ({self.config.device})")
        return mem

    def _workspace_refusal(self, problem: GemmProblem, spec: KernelSpec, mem: DeviceMemory | None) -> str:
        """Why a spec's workspace does not fit beside the problem ("" where it does, or where the
        free memory is not known)."""
        if mem is None:
            return ""
        found = fit_violation(problem, mem.free, f"free on {mem.name}", spec)
        return "" if found is None else str(found[0])

    # ---- Runner protocol -----------------------------------------------------------------------
    def evaluate(self, problem: GemmProblem, specs: list[KernelSpec],
                 modes: tuple[Mode, ...] = (DEFAULT_MODE,), with_baselines: bool = True) -> list[CandidateResult]:
        """Evaluate specs on problem. Raises MemoryFitError (a SpecError) when the problem does not
        fit the GPU's free memory; a spec whose split-K or stream-K workspace does not fit beside it
        comes back "unsupported", uncompiled. with_baselines: time the baselines interleaved with
        these specs (baselines() then returns those figures); False where they were timed with an
        earlier call (a sweep times them once per shape)."""
        problem = GemmProblem.parse(problem)
        modes = _modes(modes)
        mem = self.check_fits(problem)
        results: list[CandidateResult | None] = [None] * len(specs)
        kept: list[int] = []
        for i, spec in enumerate(specs):
            why = self._workspace_refusal(problem, spec, mem)
            if why:
                results[i] = CandidateResult(spec, "unsupported", f"does not fit: {why}", name=_label(spec, i))
            else:
                kept.append(i)
        items = [(_label(specs[i], i), specs[i], None) for i in kept]
        baselines = self.timed_baselines if with_baselines else ()
        for i, result in zip(kept, self._run(problem, items, modes, baselines)):
            results[i] = result
        return results  # type: ignore[return-value]

    # prefetch() may run in another thread while evaluate() runs: the search asks for its next
    # batches and hands them over while the GPU measures the current one (cudal2.tuner.loop).
    prefetch_concurrent = True

    def prefetch(self, problem: GemmProblem, specs: list[KernelSpec]) -> None:
        """Start rendering and compiling specs (and their long-K probe variants) in the CPU pool for
        a later evaluate() of the same problem, which picks the work up; the search calls this with
        the next batch while the current one is checked and timed, from its own thread. Specs whose
        workspace did not fit the free memory last reported are left out (evaluate() refuses them
        uncompiled)."""
        problem = GemmProblem.parse(problem)
        with self._compile_lock:
            self._prefetch(problem, specs)

    def _prefetch(self, problem: GemmProblem, specs: list[KernelSpec]) -> None:
        pk = problem.key()
        self._prefetched = {k: v for k, v in self._prefetched.items() if k[0] == pk}  # other problems: stale
        specs = [s for s in specs if (pk, s.key()) not in self._prefetched
                 and not self._workspace_refusal(problem, s, self._memory)]
        if not specs:
            return
        futures, probes = self._compile_futures(problem, self._probe_problem(problem), specs)
        pool = self.pool
        for spec, f, pf in zip(specs, futures, probes or [None] * len(specs)):
            self._prefetched[(pk, spec.key())] = (pool, pool.generation, f, pf)

    def _compile_futures(self, problem: GemmProblem, probe_problem: GemmProblem | None,
                         specs: list[KernelSpec]) -> tuple[list, list]:
        """Compile (and probe-compile) futures for specs, in order: prefetched ones where their pool
        is still alive, a finished one for a spec whose kernel takes the shape at run time and was
        compiled for another shape of this problem's class, new submissions for the rest. A spec
        whose long-K variant is the same kernel gets no probe future of its own (None)."""
        pool, pk = self.pool, problem.key()
        futures: list = [None] * len(specs)
        probes: list = [None] * len(specs)
        own_probe = [probe_problem is not None and not _same_kernel(problem, probe_problem, s) for s in specs]
        for i, spec in enumerate(specs):
            got = self._prefetched.pop((pk, spec.key()), None)
            if got is not None and got[0] is pool and got[1] == pool.generation:
                futures[i], probes[i] = got[2], got[3]
            elif (done := self._class_compiled(problem, spec)) is not None:
                futures[i] = done

        def submit_missing(slots: list, prob: GemmProblem, wanted: list[bool]) -> None:
            missing = [i for i, f in enumerate(slots) if f is None and wanted[i]]
            for i, f in zip(missing, pool.submit_all(prob, [specs[i] for i in missing])):
                slots[i] = f

        submit_missing(futures, problem, [True] * len(specs))
        if probe_problem is None:
            return futures, []
        submit_missing(probes, probe_problem, own_probe)
        return futures, probes

    def _class_compiled(self, problem: GemmProblem, spec: KernelSpec):
        """A finished future of the Prepared of a shape-generic spec already compiled for another
        shape of problem's class with the same variant (the same module and binary serve it), or
        None: the pool then precompiles the variant this shape selects, in parallel, instead of the
        worker's JIT alone. The backend's support check still runs for this shape (TMA, for one,
        needs 16-byte rows)."""
        try:
            backend = get_backend(spec.backend)
            key = backend.compile_unit(problem, spec)
        except Exception:  # noqa: BLE001 - an unknown backend: the pool records why
            return None
        if key is None or key not in self._compiled:
            return None
        ok = backend.supports(problem, spec)
        prep = (Prepared(status="unsupported", reason=ok.reason) if not ok
                else replace(self._compiled[key], source=replace(self._compiled[key].source, problem=problem), seconds=0.0))
        future: cf.Future = cf.Future()
        future.set_result(prep)
        return future

    def _remember_compiled(self, problem: GemmProblem, spec: KernelSpec, prep: Prepared) -> None:
        key = get_backend(spec.backend).compile_unit(problem, spec)
        if key is not None:
            self._compiled[key] = prep

    def evaluate_kernels(self, problem: GemmProblem, kernels: Mapping[str, Callable | str],
                         modes: tuple[Mode, ...] = (DEFAULT_MODE,)) -> list[CandidateResult]:
        """Prebuilt kernels: picklable callables kernel(a, b, c=None, bias=None) -> c (module-level
        functions or instances of module-level classes) or "module:attr" strings."""
        problem = GemmProblem.parse(problem)
        modes = _modes(modes)
        self.check_fits(problem)
        items = [(name, None, k) for name, k in kernels.items()]
        return self._run(problem, items, modes, self.config.baselines)

    def baselines(self, problem: GemmProblem, modes: tuple[Mode, ...] = (DEFAULT_MODE,)) -> dict[str, BaselineResult]:
        """The baselines' figures on problem (measured once per problem and modes). Raises
        MemoryFitError when the problem does not fit the GPU's free memory."""
        problem, modes = GemmProblem.parse(problem), _modes(modes)
        key = (problem.key(), modes, self.timed_baselines)
        if key not in self._baselines:
            self.check_fits(problem)
            t0 = time.perf_counter()
            self._time(problem, [], modes, self.timed_baselines)
            self.stats.timing_s += time.perf_counter() - t0
        return self._baselines.get(key, {})

    def environment(self) -> Environment | None:
        if self._env is None:
            try:
                msg = self.worker.request("env", None, 120, "capturing the environment")
                self._env = msg[1] if msg[0] == "ok" else None
            except WorkerDied:
                self._env = None
        return self._env

    def report(self, problem: GemmProblem, candidates: list[CandidateResult],
               modes: tuple[Mode, ...] = (DEFAULT_MODE,)) -> EvalReport:
        """An EvalReport with the baselines measured with these candidates and the environment,
        its end clocks read now."""
        env = self.environment()
        if env is not None:
            try:
                msg = self.worker.request("env_end", env, 120, "reading the clocks")
                env = msg[1] if msg[0] == "ok" else env
            except WorkerDied:
                pass
        return EvalReport(problem=problem, candidates=candidates, baselines=self.baselines(problem, modes),
                          environment=env)

    # ---- the flow ------------------------------------------------------------------------------
    def _run(self, problem: GemmProblem, items: list[tuple[str, KernelSpec | None, Any]],
             modes: tuple[str, ...], baselines: tuple[str, ...]) -> list[CandidateResult]:
        specs = [s for _, s, _ in items if s is not None]
        # Compiling starts now, unless prefetch() started it already. The long-K probe variants
        # compile in the pool too, behind the candidates themselves; otherwise each one is compiled
        # serially in the GPU worker, which then idles.
        probe_problem = self._probe_problem(problem)
        with self._compile_lock:
            futures, probe_futures = self._compile_futures(problem, probe_problem, specs) if specs else ([], [])
        self.stats.candidates += len(items)
        self.environment()  # clocks at the start, before the GPU is loaded
        self._plan_confirmation_baselines(problem, [*futures, *probe_futures])
        results: list[CandidateResult | None] = [None] * len(items)
        entries: list[tuple[int, KernelRef, tuple | None, str, float, str]] = []
        fi = 0
        t0 = time.perf_counter()
        for i, (name, spec, kernel) in enumerate(items):
            if spec is None:
                ref = KernelRef(name, kernel=kernel)
                entries.append((i, ref, *self._probe_of(problem, probe_problem, ref, None), 0.0, ""))
                continue
            prep: Prepared = self.pool.result(futures, fi, problem, specs)
            probe_source = prep.source
            if probe_futures and probe_futures[fi] is not None:
                probed = self.pool.result(probe_futures, fi, probe_problem, specs)
                probe_source = probed.source if probed.status == "ok" else None
            fi += 1
            if prep.status != "ok":
                results[i] = CandidateResult(spec, prep.status, prep.reason, compile_s=prep.seconds, name=name)
                continue
            with self._compile_lock:
                self._remember_compiled(problem, spec, prep)
            ref = KernelRef(name, spec=spec, source=prep.source)
            entries.append((i, ref, *self._probe_of(problem, probe_problem, ref, probe_source),
                            prep.seconds, getattr(prep.source, "digest", "")))
        t1 = time.perf_counter()
        self.stats.waiting_for_compile_s += t1 - t0
        checked = self._check_many(problem, [(ref, probe) for _, ref, probe, _, _, _ in entries])
        self.stats.checking_s += time.perf_counter() - t1
        passed: list[tuple[int, KernelRef, Correctness, float, str]] = []
        for i, ref, _probe, note, pre_s, digest in entries:
            status, reason, corr, compile_s = checked[ref.name]
            if status == "ok" and note:
                corr = replace(corr, checks=corr.checks + (note,))
            if status != "ok":
                results[i] = CandidateResult(items[i][1] or prebuilt_spec(), status, reason, correctness=corr,
                                             compile_s=pre_s + compile_s, source_digest=digest, name=ref.name)
                continue
            passed.append((i, ref, corr, pre_s + compile_s, digest))
        t0 = time.perf_counter()
        timed = self._time(problem, [r for _, r, _, _, _ in passed], modes, baselines)
        self.stats.timing_s += time.perf_counter() - t0
        for i, ref, corr, compile_s, digest in passed:
            spec = items[i][1] or prebuilt_spec()
            status, reason, timing, post_err, note = timed.get(ref.name, ("crash", "no timing returned", {}, None, ""))
            if post_err is not None and corr is not None:
                corr = replace(corr, rel_error=max(corr.rel_error, post_err), checks=corr.checks + ("timed-output",))
            results[i] = CandidateResult(spec, status, reason, correctness=corr, timing=timing, compile_s=compile_s,
                                         source_digest=digest, name=ref.name, detail=note)
        return results  # type: ignore[return-value]

    def _plan_confirmation_baselines(self, problem: GemmProblem, futures: list) -> None:
        """Plan the cuBLASLt baselines that the confirmation rounds time and the trials do not
        (trial_baselines), in the GPU worker while this call's kernels still compile: the worker has
        nothing else to do then, and the first round would otherwise spend the time (nvmath's plan and
        its autotune over up to 100 algorithms: about 0.45 s on the H100 for 1000x17920x1536). Once
        per problem; the plan is the one the round would have made, bound to the
        round's own operands (baselines.prepare)."""
        names = tuple(b for b in self.config.baselines if b in CUBLASLT and b not in self.timed_baselines)
        if (not names or problem.key() in self._planned
                or all(f is None or f.done() for f in futures)):  # compiled already: no idle time to fill
            return
        self._planned.add(problem.key())
        t0 = time.perf_counter()
        try:
            self.worker.request("plan_baselines", (problem, names, self.timing.seed + 15485863),
                                self.config.time_timeout_s, "planning the baselines " + ", ".join(names))
        except WorkerDied:
            pass  # the first round plans them instead (and meets the fault there, if it is one)
        spent = time.perf_counter() - t0  # in the timing phase, as when the first round plans them
        self.stats.timing_s += spent
        self.stats.baseline_setup_s += spent

    def _probe_of(self, problem: GemmProblem, probe: GemmProblem | None, ref: KernelRef,
                  source: Any) -> tuple[tuple[GemmProblem, KernelRef] | None, str]:
        """The long-K accumulator probe of a candidate (see EvalConfig.accumulator_probe_k): the
        (problem, ref) the worker checks after the candidate passed, or None and the note that says
        why it is skipped ("" where there is nothing to say). source: the probe variant the pool
        rendered and precompiled (the candidate's own for a shape-generic kernel), or None."""
        k = self.config.accumulator_probe_k
        if ref.spec is None and not self.config.probe_prebuilt:
            return None, ""
        if probe is None:
            why = self._probe_skipped(problem) if k and problem.k < k else ""
            return None, f"long-k-probe skipped: {why}" if why else ""
        if ref.spec is None:
            return (probe, KernelRef(f"{ref.name}@K={k}", kernel=ref.kernel)), ""
        try:
            ok = get_backend(ref.spec.backend).supports(probe, ref.spec)
        except Exception as e:  # noqa: BLE001
            ok, why = False, str(e)
        else:
            why = ok.reason
        if not ok:
            return None, f"long-k-probe skipped: {why[:80]}"
        return (probe, KernelRef(f"{ref.name}@K={k}", spec=ref.spec, source=source)), ""

    def _check_many(self, problem: GemmProblem, entries: list[tuple[KernelRef, tuple | None]]
                    ) -> dict[str, tuple[str, str, Correctness | None, float]]:
        """name -> (status, reason, correctness, compile seconds) for every candidate: checked in
        CheckBatch requests to the worker, which answers candidate by candidate (_check_batch). A
        hang or a crash is pinned on the candidate in flight; the worker is replaced and the batch
        goes on from the next one. Where the shared stream-order check itself dies, its survivors
        are checked again one at a time."""
        out: dict[str, tuple[str, str, Correctness | None, float]] = {}
        todo = list(entries)
        one_at_a_time = False
        while todo:
            batch = todo[:1] if one_at_a_time else todo
            todo = todo[len(batch):]
            try:
                got, order = self._check_batch(problem, batch)
            except _Unsendable as e:  # e.g. an unpicklable kernel: find it alone
                if len(batch) == 1:
                    out[batch[0][0].name] = ("crash", str(e), None, 0.0)
                else:
                    todo, one_at_a_time = batch + todo, True
                continue
            except _BatchDied as died:
                got, e = died.got, died.error
                # The candidates that failed before it keep their verdict; those that passed have not
                # had the stream-order check, which runs last: they are checked again.
                again = [entry for entry in batch if entry[0].name in got and got[entry[0].name][0] == "ok"]
                out.update({name: v for name, v in got.items() if v[0] != "ok"})
                if not e.reason:  # the worker ended after its own report of a candidate's crash
                    todo = again + batch[len(got):] + todo
                elif len(got) < len(batch):
                    name = batch[len(got)][0].name
                    status = "compile_error" if died.compiling and e.status == "timeout" else e.status
                    out[name] = (status, e.reason, None, died.compile_s.get(name, 0.0))
                    todo = again + batch[len(got) + 1:] + todo
                elif len(again) == 1 and len(batch) == 1:  # the stream-order check of one: it did
                    name = again[0][0].name
                    out[name] = (e.status, f"during the stream-order check: {e.reason}", None, got[name][3])
                else:  # the stream-order check of several: which survivor did it cannot be told
                    todo, one_at_a_time = again + todo, bool(again) or one_at_a_time
                continue
            for name, (status, reason, corr, c_s) in got.items():
                outcome = order.get(name) if status == "ok" else None
                if isinstance(outcome, float):
                    corr = replace(corr, rel_error=max(corr.rel_error, outcome), checks=corr.checks + ("stream-order",))
                elif isinstance(outcome, str) and outcome.startswith("skipped"):
                    corr = replace(corr, checks=corr.checks + (f"stream-order {outcome}",))
                elif isinstance(outcome, str):
                    status, reason = "incorrect", outcome
                out[name] = (status, reason, corr if status == "ok" else None, c_s)
        return out

    def _check_batch(self, problem: GemmProblem, batch: list[tuple[KernelRef, tuple | None]]
                     ) -> tuple[dict[str, tuple], dict[str, float | str]]:
        """One CheckBatch request: ({name: (status, reason, correctness, compile s)}, {name:
        stream-order outcome}). Each wait has its own limit: the compile timeout until the worker
        says the candidate compiled, then its check timeout (its long-K probe's included), then, once
        every candidate is checked, the shared stream-order check's. Raises _Unsendable, or
        _BatchDied with what was answered before the worker died."""
        refs = [r for r, _ in batch]
        req = CheckBatch(problem, refs, self.config.policy, {r.name: p for r, p in batch if p is not None})
        probe_scale = (self.config.accumulator_probe_k / problem.k) if problem.k else 1.0
        w = self.worker
        try:
            w.send("check_many", req)
        except Exception as e:  # noqa: BLE001
            raise _Unsendable(f"could not send {', '.join(r.name for r in refs)} to the worker: "
                              f"{type(e).__name__}: {e}") from None
        got: dict[str, tuple] = {}
        compile_s: dict[str, float] = {}
        phase = "compile"
        try:
            while True:
                current = refs[len(got)].name if len(got) < len(refs) else ""
                if phase == "compile":
                    limit, what = self.config.compile_timeout_s, f"compiling {current}"
                elif phase == "check":
                    limit = self.check_timeout(problem) + (
                        self.check_timeout(problem, probe_scale, passes=1) if req.probes.get(current) else 0.0)
                    what = f"checking {current}"
                else:
                    limit = self.config.check_floor_s + 2.0 * len(refs)
                    what = "the stream-order check of " + ", ".join(r.name for r in refs)
                msg = w.receive(limit, what)
                if msg[0] == "compiled":
                    compile_s[msg[1]], phase = msg[2], "check"
                elif msg[0] == "checked":
                    got[msg[1]] = msg[2:]
                    phase = "compile" if len(got) < len(refs) else "order"
                    if msg[2] == "crash" and not w._answering():
                        # it lost the CUDA context and exited after saying so: no one else to blame
                        w.restart()
                        raise WorkerDied("crash", "")
                elif msg[0] == "ok":
                    return got, msg[1]
                else:  # ("fail", status, reason): the request itself failed
                    if msg[1] == "crash" and not w._answering():
                        w.restart()
                    raise WorkerDied(msg[1], msg[2])
        except WorkerDied as e:
            raise _BatchDied(e, got, compile_s, phase == "compile") from None

    def check_timeout(self, problem: GemmProblem, work_scale: float = 1.0, passes: int | None = None) -> float:
        """Seconds a candidate's checks may take (see EvalConfig.check_floor_s); work_scale
        scales the torch time (the long-K probe does K_probe / K times the work). passes: input
        sets checked (default: the policy's seeds and the stream-order check), for the time the
        reference's trips to the host take where the GPU cannot hold it (host_reference_s)."""
        policy = self.config.policy
        passes = policy.seeds + (1 if policy.stream_order else 0) if passes is None else passes
        extra = self.host_reference_s(problem, passes)
        cap = self.config.run_timeout_s
        for (key, _modes, _names), found in self._baselines.items():
            torch_ms = found["torch"].kernel_ms() if key == problem.key() and "torch" in found else None
            if torch_ms:
                scaled = self.config.check_per_torch_ms * torch_ms * work_scale
                return min(cap, self.config.check_floor_s + scaled) + extra
        return cap + extra

    def host_reference_s(self, problem: GemmProblem, passes: int) -> float:
        """Seconds the checks of `passes` input sets spend moving the fp32 reference between host
        and device, where the free memory last reported cannot hold it beside the problem (see
        correctness.expected_for): three trips a set (computed, compared with the trusted result,
        compared with the output) at HOST_BYTES_PER_S. 0 where it stays on the device."""
        mem = self._memory
        if mem is None:
            return 0.0
        ref = memory.reference_bytes(problem)
        beside = (memory.input_set_bytes(problem) + memory.output_bytes(problem) + memory.reserve_bytes(mem.total)
                  + SCRATCH_MIN)
        if ref + beside <= HOST_CHECK_SHARE * mem.free:
            return 0.0
        return passes * 3 * ref / HOST_BYTES_PER_S

    def _probe_problem(self, problem: GemmProblem) -> GemmProblem | None:
        """The long-K variant of problem, or None where there is none or it does not fit (see
        _probe_skipped)."""
        k = self.config.accumulator_probe_k
        if not k or problem.k >= k or self._probe_skipped(problem):
            return None
        return problem.replace(k=k)

    def _probe_skipped(self, problem: GemmProblem) -> str:
        """Why the long-K probe of problem cannot run ("" where it can): its longer A and B do not
        fit the free memory last reported (or no GPU could hold them)."""
        k = self.config.accumulator_probe_k
        try:
            probe = problem.replace(k=k)
        except SpecError as e:
            return f"K={k} variant: {e.violations[0].limit}"
        mem = self._memory
        if mem is not None and problem_bytes(probe) > mem.free:
            return (f"the K={k} variant needs {problem_bytes(probe)} bytes, {mem.free} are free on {mem.name}")
        return ""

    def _time(self, problem: GemmProblem, refs: list[KernelRef], modes: tuple[str, ...],
              baselines: tuple[str, ...]) -> dict[str, tuple]:
        """name -> (status, reason, {mode: Timing}, post-timing error, note). Baselines are
        stored for baselines()."""
        if not refs and not baselines:
            return {}
        out = self._time_job(problem, refs, modes, baselines)
        if out is not None:
            return out
        # The joint job died: time everyone alone to find the culprit.
        merged: dict[str, tuple] = {}
        for ref in refs:
            alone = self._time_job(problem, [ref], modes, ())
            merged.update(alone if alone is not None else {ref.name: self._last_death})
        if baselines and self._time_job(problem, [], modes, baselines) is None:
            key = (problem.key(), modes, baselines)
            self._baselines[key] = {b: BaselineResult(b, {}, detail=self._last_death[1], available=False)
                                    for b in baselines}
        return merged

    _last_death: tuple = ("crash", "", {}, None, "")

    def _time_job(self, problem, refs, modes, baselines) -> dict[str, tuple] | None:
        req = TimeRequest(problem, list(refs), tuple(baselines), tuple(modes), self.timing, self.config.policy)
        # Timing takes seconds; the limit only has to end a kernel that hangs after its checks.
        timeout = self.config.time_timeout_s + 30.0 * max(1, len(modes)) * (len(refs) + len(baselines))
        try:
            msg = self.worker.request("time", req, timeout, "timing " + ", ".join([r.name for r in refs] + list(baselines)))
        except WorkerDied as e:
            self._last_death = (e.status, e.reason, {}, None, "")
            return None
        if msg[0] != "ok":
            self._last_death = (msg[1], msg[2], {}, None, "")
            if msg[1] in ("crash", "timeout"):
                return None
            return {r.name: self._last_death for r in refs}
        p = msg[1]
        self.stats.baseline_setup_s += p.get("baseline_setup_s", 0.0)
        self.stats.peer_setup_s += p.get("peer_setup_s", 0.0)
        res: dict[str, tuple] = {}
        for r in refs:
            status, reason = p["failures"].get(r.name, ("ok", ""))
            timing = p["timings"].get(r.name, {})
            if status == "ok" and set(timing) != set(modes):
                status, reason = "crash", "timing incomplete"
            res[r.name] = (status, reason, timing if status == "ok" else {}, p["post_error"].get(r.name),
                           p["notes"].get(r.name, ""))
        if baselines:
            key = (problem.key(), tuple(modes), tuple(baselines))
            self._baselines[key] = {
                name: BaselineResult(name, b["timing"], b["correctness"], b["detail"], b["available"])
                for name, b in p["baselines"].items()}
        return res


class _Unsendable(Exception):
    """A CheckBatch could not be sent to the worker (a candidate that does not pickle)."""


class _BatchDied(Exception):
    """The worker died (or failed the request) during a CheckBatch: what it had answered before."""

    def __init__(self, error: WorkerDied, got: dict, compile_s: dict, compiling: bool):
        super().__init__(error.reason)
        self.error, self.got, self.compile_s, self.compiling = error, got, compile_s, compiling


def _same_kernel(problem: GemmProblem, other: GemmProblem, spec: KernelSpec) -> bool:
    """Whether spec compiles to one kernel for both problems: its backend takes the shape at run time,
    and both shapes select the same compiled variant of it."""
    try:
        backend = get_backend(spec.backend)
        return (backend.shape_key(problem, spec) == backend.shape_key(other, spec) != problem.key()
                and backend.variant_key(problem, spec) == backend.variant_key(other, spec))
    except Exception:  # noqa: BLE001 - an unknown backend: the pool records why
        return False


def _modes(modes: Iterable[str] | str) -> tuple[str, ...]:
    ms = (modes,) if isinstance(modes, str) else tuple(modes)
    bad = [m for m in ms if m not in MODES]
    if bad or not ms:
        raise ValueError(f"unknown timing mode(s) {bad or ms!r}; use any of {MODES}")
    return ms


def _label(spec: KernelSpec, i: int) -> str:
    return f"{spec.backend}-{spec.block_m}x{spec.block_n}x{spec.block_k}-w{spec.num_warps}-s{spec.stages}-{spec.key()[:6]}#{i}"


def _split(candidates) -> list[tuple[str, KernelSpec | None, Any]]:
    if isinstance(candidates, Mapping):
        return [(n, c if isinstance(c, KernelSpec) else None, None if isinstance(c, KernelSpec) else c)
                for n, c in candidates.items()]
    if isinstance(candidates, KernelSpec) or callable(candidates):
        candidates = [candidates]
    items, seen = [], set()
    for i, c in enumerate(candidates):
        if isinstance(c, KernelSpec):
            name, spec, kernel = _label(c, i), c, None
        else:
            name, spec, kernel = (c if isinstance(c, str) else getattr(c, "__name__", f"kernel#{i}")), None, c
        if name in seen:  # results are keyed by name: keep them apart
            name = f"{name}#{i}"
        seen.add(name)
        items.append((name, spec, kernel))
    return items


def evaluate(problem, candidates, mode: str | Iterable[str] = DEFAULT_MODE,
             baselines: Iterable[str] = DEFAULT_BASELINES, **config) -> EvalReport:
    """Evaluate candidates on one problem and return an EvalReport.

    candidates: KernelSpecs (rendered and compiled through the backend registry), prebuilt
    kernels (picklable callables or "module:attr"), or a {name: spec-or-kernel} mapping.
    mode: "layer", "chain", "mlp_chain", "offline", "server", "sustained" or several. config: EvalConfig fields
    (device, timeouts, ...)."""
    problem = GemmProblem.parse(problem)
    modes = _modes(mode)
    with Evaluator(**config, baselines=tuple(baselines)) as ev:
        ev.check_fits(problem)
        results = ev._run(problem, _split(candidates), modes, ev.config.baselines)
        return ev.report(problem, results, modes)


def evaluate_kernels(problem, kernels: Mapping[str, Callable | str], mode: str | Iterable[str] = DEFAULT_MODE,
                     baselines: Iterable[str] = DEFAULT_BASELINES, **config) -> EvalReport:
    """evaluate() for prebuilt kernels given by name."""
    return evaluate(problem, dict(kernels), mode=mode, baselines=baselines, **config)
