"""The search loop: proposals first, then Optuna, until the budget is spent.

    proposer.propose(problem, history, n) -> enqueued trials -> sampler -> validate (prune)
      -> kernel table lookup (never measure a spec twice) -> runner.evaluate -> kernel table
      -> tell Optuna; then the leaders are timed again (confirm.py) and ranked by those rounds

Budget: a number of GPU measurements (`64`) or GPU seconds (`"120s"`, `"5m"`), counted over
the whole study, so a resumed search continues where the killed one stopped. "GPU time" is the
wall time spent inside the runner (compiling, checking and timing candidates).
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..bench.results import BaselineResult, CandidateResult, Mode, Runner
from ..ir import GemmProblem, KernelSpec, SpecError
from .confirm import Confirm, ranked_trials, rounds_on, run_confirmation, summarize
from .proposal import Proposer
from .refiner import (SAMPLER_WARMUP, WORKER, Refiner, fail_trials, measured_spec_keys, reference_of,
                      relative_time, requeue, retry_callback, speedups_of, trial_attrs, validate)
from .store import Store


@dataclass(frozen=True)
class Budget:
    evaluations: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, budget: "int | str | Budget") -> "Budget":
        if isinstance(budget, Budget):
            return budget
        if isinstance(budget, int) and not isinstance(budget, bool):
            if budget < 1:
                raise ValueError(f"budget={budget}: give at least 1 evaluation")
            return cls(evaluations=budget)
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*", str(budget))
        if not m:
            raise ValueError(f"budget={budget!r}: write a number of evaluations (64) or GPU time (\"120s\", \"5m\", \"1h\")")
        value, unit = float(m.group(1)), m.group(2)
        if unit is None:
            return cls.parse(int(value))
        return cls(seconds=value * {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[unit])

    def spent(self, evaluations: int, seconds: float) -> bool:
        if self.evaluations is not None and evaluations >= self.evaluations:
            return True
        return self.seconds is not None and seconds >= self.seconds

    def __str__(self) -> str:
        return f"{self.evaluations} evaluations" if self.evaluations is not None else f"{self.seconds:g} GPU s"


@dataclass
class Best:
    spec: KernelSpec
    time_ms: dict[str, float]  # mode -> kernel ms
    source: str
    result: CandidateResult


@dataclass
class Point:
    """One GPU measurement of the study, in order: for plots of progress."""

    evaluation: int
    gpu_s: float  # cumulative
    kernel_ms: float | None
    best_speedup: float | None  # best speedup over the reference baseline so far


@dataclass
class SearchResult:
    problem: GemmProblem
    best: Best | None
    speedup: dict[str, float]  # baseline -> speedup of the best kernel, in `mode` below
    speedups: dict[str, dict[str, float]]  # mode -> baseline -> speedup
    baselines: dict[str, BaselineResult]
    history: list[CandidateResult]  # every measurement of this problem in the store
    study: Any  # optuna.Study
    evaluations: int  # GPU measurements in the study
    gpu_seconds: float
    curve: list[Point] = field(default_factory=list)
    # Confirmation (confirm.py): the rounds behind the figures above (0: the best's search trial
    # alone), the speedups that trial gave (what a search without confirmation would report), and
    # the leaders a confirmation round found wrong or broken.
    confirmed_rounds: int = 0
    trial_speedup: dict[str, float] = field(default_factory=dict)
    rejected: list[CandidateResult] = field(default_factory=list)
    mode: str = "offline"  # the timing mode `speedup` is in (the confirmation's, where it ranked)
    # GPU measurements of the study by where their spec came from: a proposer's source ("rules",
    # "llm:<model>", "rules (fallback: llm failed)"), "optuna" (sampled) or "requeued"
    proposals: dict[str, int] = field(default_factory=dict)
    _kernel: Any = field(default=None, repr=False)

    @property
    def kernel(self) -> Callable:
        """The best kernel, rendered and compiled through its backend on first use."""
        if self.best is None:
            raise RuntimeError(f"no correct kernel was found for {self.problem.label()}; nothing to run")
        if self._kernel is None:
            from ..codegen import get_backend

            backend = get_backend(self.best.spec.backend)
            self._kernel = backend.compile(backend.render(self.problem, self.best.spec))
        return self._kernel

    def summary(self) -> str:
        if self.best is None:
            return f"{self.problem.label()}: no correct kernel in {self.evaluations} evaluations"
        sp = ", ".join(f"{k} {v:.3f}x" for k, v in sorted(self.speedup.items()))
        ms = ", ".join(f"{m} {v * 1e3:.1f} us" for m, v in self.best.time_ms.items())
        how = (f"median of {self.confirmed_rounds} {self.mode} confirmation rounds" if self.confirmed_rounds
               else "unconfirmed")
        return f"{self.problem.label()}: best {ms}; speedup {sp or 'n/a'} ({self.evaluations} evaluations; {how})"


def _objective_mode(modes: Sequence[str]) -> str:
    return "offline" if "offline" in modes else modes[0]


def ensure_baselines(problem: GemmProblem, runner: Runner, store: Store, modes: Sequence[Mode],
                     remeasure: bool = False) -> dict[str, BaselineResult]:
    """Baselines from the store, measured (and stored) when missing for a requested mode."""
    stored = {} if remeasure else store.baselines(problem)
    if stored and all(any(b.kernel_ms(m) is not None for b in stored.values()) for m in modes):
        return stored
    measured = runner.baselines(problem, tuple(modes))
    store.record_baselines(problem, measured, runner.environment())
    return measured


def render_source(problem: GemmProblem, spec: KernelSpec) -> str:
    """The rendered source for the kernel table; empty when the backend cannot render (yet)."""
    try:
        from ..codegen import get_backend

        return get_backend(spec.backend).render(problem, spec).text
    except Exception:  # noqa: BLE001 - the evaluator reports render failures; the table just lacks text
        return ""


def run_search(problem: GemmProblem, *, backends: Sequence[str], arch: str, proposer: Proposer | None,
               runner: Runner, store: Store, budget: int | str | Budget = 64,
               modes: Sequence[Mode] = ("offline",), n_proposals: int | None = None, sampler: str = "tpe",
               seed: int | None = None, tag: str = "", progress: bool = True,
               max_trials: int | None = None, batch_size: int = 1,
               deadline: float | None = None, lookahead: bool = False,
               confirm: Confirm | None = None) -> SearchResult:
    """Run (or resume) the study of `problem` until `budget` is spent; see the module docstring.
    batch_size: specs handed to runner.evaluate at once (the evaluator compiles a batch in
    parallel; the TPE sampler's constant liar keeps a batch diverse). deadline: a time.monotonic()
    after which no new batch starts (the study stays resumable). lookahead: ask for the next batch
    while the current one is measured and hand it to runner.prefetch (if the runner has one), so
    that it compiles in the meantime. Off by default: on the H100 it cut the wait for compiles
    (0.12 -> 0.09 s a candidate) but the one comparison made gave no shorter search (0.86 against
    0.74 s a candidate, run first and on a cold process), and compiles running during the timing
    job compete with it for the host. confirm: once the budget is spent, time the leaders again
    and rank them by those rounds (confirm.py); None (here; cudal2.search, the CLI and the
    benchmarks pass Confirm()) or rounds=0 reports the best search trial."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    budget = Budget.parse(budget)
    modes = tuple(modes)
    objective_mode = _objective_mode(modes)
    refiner = Refiner(problem, backends, store, arch, sampler=sampler, seed=seed, tag=tag)
    refiner.recover()
    baselines = ensure_baselines(problem, runner, store, modes)
    environment = runner.environment()
    reference = reference_of(baselines)

    state = _State.from_study(refiner.study, store, problem, reference, objective_mode)
    # Proposals first: the proposer sees everything measured for this problem so far. An adaptive
    # proposer (one that learns from each batch) is asked for one batch at a time, again after each
    # measured batch, for its share of the budget; Optuna refines after that.
    adaptive = proposer is not None and getattr(proposer, "adaptive", False)
    n_first = n_proposals if n_proposals is not None else max(1, (budget.evaluations or 16) // 2)
    proposer_share = n_first if not adaptive else (
        n_proposals if n_proposals is not None else max(1, (budget.evaluations or 16) * 3 // 4))

    def ask_proposer(n: int) -> None:
        history = [r["result"] for r in store.kernels(problem)]
        refiner.enqueue(proposer.propose(problem, history, n))

    if proposer is not None and not budget.spent(state.evaluations, state.gpu_s):
        ask_proposer(min(batch_size, proposer_share) if adaptive else n_first)

    if max_trials is None:
        max_trials = 20 * (budget.evaluations or 64) + 50  # pruned trials are cheap but not free
    study = refiner.study
    storage = store.optuna_storage

    # Trials asked and not yet told: if the search is cut short (Ctrl-C, a broken runner) or stops
    # with a batch asked ahead, they go back to the queue rather than stay RUNNING.
    in_hand: dict[int, Any] = {}

    def tell(trial, result: CandidateResult, measured_now: bool, gpu_s: float,
             against: dict[str, BaselineResult]) -> None:
        attrs = trial_attrs(result, against, measured_now=measured_now, reused=not measured_now)
        attrs["gpu_s"] = gpu_s
        ms = result.kernel_ms(objective_mode) if result.ok else None
        if measured_now:
            state.add(gpu_s, ms, speedups_of(result, against).get(objective_mode, {}).get(reference))
        try:
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            if ms is None:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
            else:
                # the objective: kernel time over the reference baseline's in the same call (see collect)
                study.tell(trial, relative_time(ms, against, reference, objective_mode), skip_if_finished=True)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # another worker on a SQLite store popped the same queued trial; its result stands
        in_hand.pop(trial._trial_id, None)

    def next_batch(room: int, in_flight: Sequence[tuple[Any, KernelSpec]] = ()) -> tuple[list, list]:
        """Ask for trials until `room` of them need a GPU measurement (or trials run out): the
        batch, and the trials whose spec is in this batch or `in_flight` (told from the store once
        their twin is measured). On the way, invalid specs are pruned and specs already measured
        (by this study or another) are told from the kernel table at once: a trial left RUNNING
        across a measurement is one the study pays for (see refiner.measured_spec_keys)."""
        nonlocal trials_left
        batch: list[tuple[Any, KernelSpec]] = []
        twins: list[tuple[Any, KernelSpec]] = []
        while len(batch) < room and trials_left > 0:
            trials_left -= 1
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # heartbeats are recorded by hand below
                trial = study.ask()
            in_hand[trial._trial_id] = trial
            try:
                trial.set_user_attr("worker", WORKER)
                storage.record_heartbeat(trial._trial_id)
                try:
                    spec = refiner.suggest(trial)
                except SpecError as e:
                    trial.set_user_attr("status", "invalid")
                    trial.set_user_attr("error", str(e)[:2000])
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
                    in_hand.pop(trial._trial_id)
                    continue
                known = store.measurement(problem, spec)
                if known is not None:  # a spec is measured once per problem
                    tell(trial, known, False, 0.0, store.kernel_baselines(problem, spec) or baselines)
                    continue
                trial.set_user_attr("spec", spec.to_json())
                trial.set_user_attr("spec_key", spec.key())
            except optuna.exceptions.UpdateFinishedTrialError:
                in_hand.pop(trial._trial_id, None)
                continue  # popped by another worker too (SQLite has no row locks) and already settled
            if any(s == spec for _, s in (*in_flight, *batch)):
                twins.append((trial, spec))
                continue
            batch.append((trial, spec))
        return batch, twins

    def room(in_flight: int) -> int:
        if budget.evaluations is None:
            return batch_size
        return max(0, min(batch_size, budget.evaluations - state.evaluations - in_flight))

    def give_back(reason: str) -> None:
        """Every trial in hand back to the queue, so that a resume measures it: failed and queued
        again by Optuna's retry callback, as a dead worker's trial is, but without its retry limit
        (an interrupt is no fault of the spec)."""
        trials = list(in_hand.values())
        in_hand.clear()
        requeue(study, storage, trials, reason, callback=retry_callback(max_retry=None))

    def ahead_room(in_flight: int) -> int:
        """Room for a batch asked ahead. A sampler still in its startup phase (fewer completed
        trials than it needs) would draw at random, which over a space of several backends is
        nearly always an invalid spec: ask ahead then only for a full batch of queued proposals."""
        trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                          optuna.trial.TrialState.WAITING))
        complete = sum(1 for t in trials if t.state == optuna.trial.TrialState.COMPLETE)
        r = room(in_flight)
        return r if complete >= SAMPLER_WARMUP or len(trials) - complete >= r else 0

    def cut_short() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    def stopped() -> bool:
        return budget.spent(state.evaluations, state.gpu_s) or cut_short()

    # Look-ahead (opt-in): while one batch is checked and timed on the GPU, the next one is already
    # asked for (the TPE sampler's constant liar keeps it apart from the batch in flight) and
    # compiled in the runner's CPU pool, so compilation overlaps timing too, not only the checks.
    prefetch = getattr(runner, "prefetch", None) if lookahead else None
    trials_left = max_trials
    bar = _Bar(problem, budget, enabled=progress)
    with bar:
        bar.update(state)
        try:
            batch, twins = ([], []) if stopped() else next_batch(room(0))  # (next_batch stops when trials run out)
            while batch or twins:
                upcoming, upcoming_twins = [], []
                if batch:
                    specs = [s for _, s in batch]
                    if prefetch is not None:
                        prefetch(problem, specs)  # the batch in hand compiles first (a no-op if asked ahead)
                        if not stopped() and (ahead := ahead_room(len(batch))) > 0:
                            upcoming, upcoming_twins = next_batch(ahead, batch)
                            if upcoming:
                                prefetch(problem, [s for _, s in upcoming])
                    t0 = time.perf_counter()
                    beating = _Heartbeat(storage, [t._trial_id for t, _ in (*batch, *upcoming)])
                    try:
                        results = runner.evaluate(problem, specs, modes)
                    finally:
                        beating.stop()
                    if len(results) != len(specs):
                        raise RuntimeError(f"runner returned {len(results)} results for {len(specs)} specs")
                    share = (time.perf_counter() - t0) / len(batch)
                    # Speedups are taken against the baselines timed in the same call (the evaluator
                    # interleaves them with the candidates); a runner without them keeps the first ones.
                    now = runner.baselines(problem, modes) or baselines
                    if now is not baselines:
                        store.record_baselines(problem, now, environment)
                    for (trial, spec), result in zip(batch, results):
                        # The kernel table first: a kill after this write loses nothing (the trial's
                        # retry is told from it).
                        store.record_kernel(problem, result, render_source(problem, spec), environment,
                                            objective_mode, baselines=now)
                    for (trial, spec), result in zip(batch, results):
                        tell(trial, result, True, share, now)
                    bar.update(state)
                for trial, spec in twins:  # their twin was measured in this batch or the one before
                    known = store.measurement(problem, spec)
                    if known is not None:
                        tell(trial, known, False, 0.0, store.kernel_baselines(problem, spec) or baselines)
                # Other workers may share the study (a PostgreSQL store): count what they measured too.
                state = _State.from_study(study, store, problem, reference, objective_mode)
                if stopped():
                    break
                if adaptive and not (upcoming or upcoming_twins) and state.evaluations < proposer_share \
                        and not _queued(study):
                    ask_proposer(min(room(0), proposer_share - state.evaluations))
                batch, twins = (upcoming, upcoming_twins) if upcoming or upcoming_twins else next_batch(room(0))
        except BaseException:
            # Interrupted (Ctrl-C) or a broken runner: the trials in hand go back to the queue.
            give_back("interrupted before it was measured; queued again")
            raise
        if cut_short():
            give_back("asked ahead, not measured before the deadline; queued again")
        else:
            # The search ended on its own (budget spent, or no trial left to ask): it leaves nothing
            # queued or running. A later, larger search proposes these specs again (Refiner.enqueue).
            reason = "not measured: the search's budget was spent first"
            fail_trials(storage, list(in_hand.values()), reason)
            in_hand.clear()
            refiner.close_queue(reason)
    # Confirmation once the search has ended on its own (budget spent or nothing left to try); a
    # deadline leaves it to the resume, which may measure more first.
    confirm_mode = (confirm.mode if confirm is not None else None) or objective_mode
    gpu = getattr(environment, "gpu_name", None) or None  # confirmation rounds count on this GPU only
    if confirm is not None and confirm.rounds > 0 and not (deadline is not None and time.monotonic() >= deadline):
        keys = _study_keys(study)
        run_confirmation(problem, lambda: ranked_trials(store.kernels(problem), keys, baselines, reference,
                                                        objective_mode),
                         runner, store, modes, confirm_mode, confirm, reference, deadline,
                         say=(lambda line: None) if not progress else print, gpu_name=gpu)
    return collect(problem, study, store, baselines, objective_mode, reference, confirm_mode, gpu)


def _queued(study) -> bool:
    """Whether trials wait in the study's queue (enqueued proposals not yet asked for)."""
    import optuna

    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))


def _study_keys(study) -> set:
    return {t.user_attrs.get("spec_key") for t in study.get_trials(deepcopy=False)}


def proposal_sources(study) -> dict[str, int]:
    """GPU measurements of the study by the source of their spec (the trial's "proposal" attribute,
    set when a proposal is enqueued; a trial the sampler drew has none: "optuna")."""
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("measured"):
            source = t.user_attrs.get("proposal") or "optuna"
            counts[source] = counts.get(source, 0) + 1
    return counts


class _Heartbeat:
    """Record Optuna heartbeats for trials under measurement, so that workers on other hosts
    (fail_stale_trials) do not take a long batch for a dead one."""

    def __init__(self, storage, trial_ids: list[int], every_s: float = 30.0):
        import threading

        self._done = threading.Event()

        def beat() -> None:
            while not self._done.wait(every_s):
                for tid in trial_ids:
                    try:
                        storage.record_heartbeat(tid)
                    except Exception:  # noqa: BLE001 - a missed heartbeat only risks a retry
                        pass

        self._thread = threading.Thread(target=beat, name="cudal2-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)


class _State:
    """Running totals over the study's GPU measurements (including those of earlier sessions)."""

    def __init__(self, reference: str | None):
        self.reference = reference
        self.evaluations = 0
        self.gpu_s = 0.0
        self.best_speedup: float | None = None
        self.curve: list[Point] = []

    @classmethod
    def from_study(cls, study, store: Store, problem: GemmProblem, reference: str | None, mode: str) -> "_State":
        """Totals over the specs the study paid to measure, each counted once however many of its
        trials carry it (a killed trial and the retry told from its stored measurement, say): one
        point each, at the first trial told its result, and at the end for one never told again."""
        counted = measured_spec_keys(study, store.measured_spec_keys(problem))
        s = cls(reference)
        seen: set[str] = set()
        gpu_s = 0.0
        for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
            key = t.user_attrs.get("spec_key")
            if key not in counted:
                continue
            gpu_s += float(t.user_attrs.get("gpu_s", 0.0))
            if key in seen or "status" not in t.user_attrs:
                continue
            seen.add(key)
            ms = t.user_attrs.get("kernel_ms", {}).get(mode) if t.user_attrs.get("status") == "ok" else None
            s.add(gpu_s - s.gpu_s, ms, t.user_attrs.get("speedups", {}).get(mode, {}).get(reference))
        for _ in counted - seen:
            s.add(0.0, None, None)
        s.gpu_s = gpu_s
        return s

    def add(self, gpu_s: float, kernel_ms: float | None, speedup: float | None) -> None:
        self.evaluations += 1
        self.gpu_s += gpu_s
        if speedup is not None and (self.best_speedup is None or speedup > self.best_speedup):
            self.best_speedup = speedup
        self.curve.append(Point(self.evaluations, self.gpu_s, kernel_ms, self.best_speedup))


class _Bar:
    """rich progress bar: trials measured, best speedup so far, GPU time."""

    def __init__(self, problem: GemmProblem, budget: Budget, enabled: bool):
        self.enabled = enabled
        self.budget = budget
        self.problem = problem
        self.progress = None

    def __enter__(self):
        if self.enabled:
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError:  # a bare GPU image: plain lines instead of a bar
                self.plain = True
                return self

            self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("best {task.fields[best]}"), TextColumn("GPU {task.fields[gpu]}"),
                                     TimeElapsedColumn(), transient=False)
            self.progress.__enter__()
            total = self.budget.evaluations if self.budget.evaluations is not None else self.budget.seconds
            self.task = self.progress.add_task(self.problem.label(), total=total, best="-", gpu="0.0s")
        return self

    plain = False

    def update(self, state: _State) -> None:
        if self.plain:
            best = f"{state.best_speedup:.3f}x" if state.best_speedup is not None else "-"
            print(f"{self.problem.label()}: {state.evaluations} evaluations, best {best}, GPU {state.gpu_s:.1f}s",
                  flush=True)
            return
        if self.progress is None:
            return
        done = state.evaluations if self.budget.evaluations is not None else min(state.gpu_s, self.budget.seconds)
        best = f"{state.best_speedup:.3f}x" if state.best_speedup is not None else "-"
        self.progress.update(self.task, completed=done, best=best, gpu=f"{state.gpu_s:.1f}s")

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)
        return False


def collect(problem: GemmProblem, study, store: Store, baselines: dict[str, BaselineResult], mode: str,
            reference: str | None, confirm_mode: str | None = None, gpu_name: str | None = None) -> SearchResult:
    """A SearchResult from what the study and the store hold: trials ranked in `mode`, confirmation
    rounds in `confirm_mode` (default: the same), those timed on `gpu_name` (default: any GPU)."""
    confirm_mode = confirm_mode or mode
    rows = store.kernels(problem)
    history = [r["result"] for r in rows]
    state = _State.from_study(study, store, problem, reference, mode)
    # Candidates are ranked by their speedup over the reference baseline timed in the same
    # evaluator call: the GPU's clock drifts between calls (torch took 874 us in one batch of an
    # H100 search on 8192x8192x4096 and 762 us in the next, when it had cooled), so raw times of
    # different batches do not compare, while each kernel's ratio to its interleaved baseline does.
    keys = _study_keys(study)
    ranked = ranked_trials(rows, keys, baselines, reference, mode)
    rounds_here = rounds_on(store.confirmations(problem), gpu_name)
    confirmed = {k: c for k, c in summarize(rounds_here, reference, confirm_mode).items() if k in keys}
    rejected = [c.rounds[-1]["result"] for c in confirmed.values() if c.failed]
    passed = sorted((c for c in confirmed.values() if not c.failed), key=lambda c: c.score)
    best, speedups, trial_speedups, rounds = None, {}, {}, 0
    if ranked:
        top = ranked[0][1]
        trial_speedups = speedups_of(top["result"], top["baselines"] or baselines)
    sources = {r["result"].spec.key(): r["source"] for r in rows}
    if passed:
        # the figures of the winner's median confirmation round: its kernel time and the baselines
        # timed with it, one evaluator call
        winner = passed[0]
        res, baselines = winner.median_round["result"], winner.median_round["baselines"] or baselines
        rounds = len(winner.rounds)
    elif ranked:
        res, baselines = ranked[0][1]["result"], ranked[0][1]["baselines"] or baselines
    if passed or ranked:
        best = Best(spec=res.spec, time_ms={m: t.kernel_ms for m, t in res.timing.items()},
                    source=sources.get(res.spec.key(), ""), result=res)
        speedups = speedups_of(res, baselines)
    shown = confirm_mode if passed else mode
    return SearchResult(problem=problem, best=best, speedup=speedups.get(shown, {}), speedups=speedups,
                        baselines=baselines, history=history, study=study, evaluations=state.evaluations,
                        gpu_seconds=state.gpu_s, curve=state.curve, confirmed_rounds=rounds,
                        trial_speedup=trial_speedups.get(mode, {}), rejected=rejected, mode=shown,
                        proposals=proposal_sources(study))


# ---- dry run: everything but the GPU ----------------------------------------------------------------
@dataclass
class DryRunRow:
    spec: KernelSpec
    source: str  # which proposer
    valid: bool
    rendered: bool
    compiled: bool
    error: str = ""


def dry_run(problem: GemmProblem, *, backends: Sequence[str], arch: str, proposer: Proposer, n: int = 8,
            compile: bool = True) -> list[DryRunRow]:
    """Propose, validate, render and compile, without launching or timing. Compiling means the
    backend's compile() (the rendered module imports) and precompile(), which without a GPU
    lowers the kernel to machine code for spec.arch (Triton's ptxas; CuTe DSL compile-only)."""
    from ..codegen import get_backend

    rows: list[DryRunRow] = []
    for p in proposer.propose(problem, [], n):
        row = DryRunRow(spec=p.spec, source=p.source, valid=False, rendered=False, compiled=False)
        rows.append(row)
        try:
            validate(problem, p.spec)
            row.valid = True
            backend = get_backend(p.spec.backend)
            src = backend.render(problem, p.spec)
            row.rendered = True
            if compile:
                backend.compile(src)
                backend.precompile(src)
                row.compiled = True
        except Exception as e:  # noqa: BLE001 - each row reports its own failure
            row.error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return rows
