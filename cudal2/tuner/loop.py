"""The search loop: proposals first, then Optuna, until the budget is spent.

    proposer.propose(problem, history, n) -> enqueued trials -> sampler -> validate (prune)
      -> kernel table lookup (never measure a spec twice) -> runner.evaluate -> kernel table
      -> tell Optuna; then the leaders are timed again (confirm.py) and ranked by those rounds

`Search` holds one study of one problem; `Search.run` is the loop on one screen, and each step is
a method. `run_search` builds one and runs it.

Budget: a number of GPU measurements (`64`) or GPU seconds (`"120s"`, `"5m"`), counted over
the whole study, so a resumed search continues where the killed one stopped. "GPU time" is the
wall time spent inside the runner (compiling, checking and timing candidates). A time budget also
bounds the loop's own wall time to what the budget left when it began: the loop's work (asking
the sampler, writing the store) counts too, so a runner that spends almost nothing inside (the
recorded one) does not run on for minutes. It overruns by at most the batch in flight and the
confirmation rounds.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ..bench.results import DEFAULT_MODE, BaselineResult, CandidateResult, Mode, Runner
from ..ir import GemmProblem, KernelSpec, SpecError
from cudal2.store.rounds import ranked_trials, static_twin
from .confirm import Confirm, run_confirmation
from .outcome import SearchResult, Tally, collect, render_source, study_keys
from cudal2.proposers.proposal import Proposer, propose_excluding
from cudal2.bench.results import relative_time
from .refiner import SAMPLER_WARMUP, WORKER, Refiner
from cudal2.store.store import Store, retry_callback
from . import trials
from .trials import Heartbeat, fail_trials, measured_spec_keys, reference_of, requeue, speedups_of, trial_attrs

# Batches a search with look-ahead asks before they are measured, so that they compile meanwhile.
# On the H100 a CuTe DSL compile takes 1.5-4 s and a batch of 4 is checked and timed in about 0.7 s:
# about 2 s of compiles must be in flight, three batches. With two, warm CuTe DSL searches of a
# new shape still waited 2.4-7.2 s for compiles (docs/search.md).
LOOKAHEAD_BATCHES = 3

# An adaptive proposer (one that learns from each batch) is asked a batch at a time for this share
# of the budget; Optuna refines after it. Any other proposer is asked once, for half the budget.
ADAPTIVE_SHARE = 0.75


@dataclass(frozen=True)
class Budget:
    evaluations: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, budget: "int | str | Budget") -> "Budget":
        if isinstance(budget, Budget):
            return budget
        if isinstance(budget, bool) or (isinstance(budget, float) and not budget.is_integer()):
            raise ValueError(f"budget={budget!r}: give a whole number of evaluations (64) or GPU time "
                             "(\"120s\", \"5m\", \"1h\")")
        if isinstance(budget, float):
            budget = int(budget)
        if isinstance(budget, int):
            if budget < 1:
                raise ValueError(f"budget={budget}: give at least 1 evaluation")
            return cls(evaluations=budget)
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*", str(budget))
        if not m:
            raise ValueError(f"budget={budget!r}: write a number of evaluations (64) or GPU time (\"120s\", \"5m\", \"1h\")")
        value, unit = float(m.group(1)), m.group(2)
        if unit is None:
            return cls.parse(value)
        return cls(seconds=value * {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[unit])

    def spent(self, evaluations: int, seconds: float) -> bool:
        if self.evaluations is not None and evaluations >= self.evaluations:
            return True
        return self.seconds is not None and seconds >= self.seconds

    def __str__(self) -> str:
        return f"{self.evaluations} evaluations" if self.evaluations is not None else f"{self.seconds:g} GPU s"


def _objective_mode(modes: Sequence[str]) -> str:
    return DEFAULT_MODE if DEFAULT_MODE in modes else modes[0]


def ensure_baselines(problem: GemmProblem, runner: Runner, store: Store, modes: Sequence[Mode],
                     remeasure: bool = False) -> dict[str, BaselineResult]:
    """Baselines from the store, measured (and stored) when missing for a requested mode."""
    stored = {} if remeasure else store.baselines(problem)
    if stored and all(any(b.kernel_ms(m) is not None for b in stored.values()) for m in modes):
        return stored
    measured = runner.baselines(problem, tuple(modes))
    store.record_baselines(problem, measured, runner.environment())
    return measured


@dataclass
class Batch:
    """Trials asked of the study: those whose spec needs a GPU measurement, and their twins (trials
    whose spec is in this batch or one in flight, told from the store once it is measured)."""

    trials: list[tuple[Any, KernelSpec]] = field(default_factory=list)
    twins: list[tuple[Any, KernelSpec]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.trials or self.twins)

    @property
    def specs(self) -> list[KernelSpec]:
        return [s for _, s in self.trials]


class Search:
    """One study of one problem, run until its budget is spent (see run_search for the arguments)."""

    # The steps whose wall seconds a search keeps (SearchResult.phase_s): opening the study and its
    # baselines, the proposer, asking the sampler (pruning invalid specs on the way), the runner's
    # measurement, writing the store and telling the study, the confirmation rounds.
    PHASES = ("setup", "propose", "ask", "measure", "record", "confirm")

    def __init__(self, problem: GemmProblem, *, backends: Sequence[str], arch: str, proposer: Proposer | None,
                 runner: Runner, store: Store, budget: int | str | Budget = 64, modes: Sequence[Mode] = (DEFAULT_MODE,),
                 n_proposals: int | None = None, sampler: str = "tpe", seed: int | None = None, tag: str = "",
                 progress: bool = True, max_trials: int | None = None, batch_size: int = 1,
                 deadline: float | None = None, lookahead: bool | int = False, confirm: Confirm | None = None,
                 shape_generic: bool = True):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.phase_s: Counter[str] = Counter()
        t0 = time.perf_counter()
        self.problem, self.proposer, self.runner, self.store = problem, proposer, runner, store
        self.budget, self.modes = Budget.parse(budget), tuple(modes)
        self.mode = _objective_mode(self.modes)
        self.batch_size, self.deadline, self.confirm_with, self.progress = batch_size, deadline, confirm, progress
        self.refiner = Refiner(problem, backends, store, arch, sampler=sampler, seed=seed, tag=tag,
                               shape_generic=shape_generic, mode=self.mode)
        self.refiner.recover()
        self.study, self.storage = self.refiner.study, store.optuna_storage
        # Heartbeats serve workers on other hosts (a PostgreSQL store); a SQLite store's journal has none
        self.heartbeats = hasattr(self.storage, "record_heartbeat")
        self.baselines = ensure_baselines(problem, runner, store, self.modes)
        self.environment = runner.environment()
        self.reference = reference_of(self.baselines)
        self.tally = Tally.from_study(self.study, store, problem, self.reference, self.mode)
        self.began, self.time_up = time.monotonic(), None  # the loop's start, and a time budget's end (run)
        self.adaptive = proposer is not None and getattr(proposer, "adaptive", False)
        evaluations = self.budget.evaluations or 16
        self.first_proposals = n_proposals if n_proposals is not None else max(1, evaluations // 2)
        self.proposer_share = self.first_proposals if not self.adaptive else (
            n_proposals if n_proposals is not None else max(1, int(evaluations * ADAPTIVE_SHARE)))
        self.trials_left = max_trials if max_trials is not None else 20 * (self.budget.evaluations or 64) + 50
        # Trials asked and not yet told: if the search is cut short (Ctrl-C, a broken runner) or stops
        # with a batch asked ahead, they go back to the queue rather than stay RUNNING.
        self.in_hand: dict[int, Any] = {}
        self.prefetch = getattr(runner, "prefetch", None) if lookahead else None
        # batches asked ahead: True takes LOOKAHEAD_BATCHES, a number that many
        self.depth = 0 if self.prefetch is None else (LOOKAHEAD_BATCHES if lookahead is True else int(lookahead))
        self.ahead: list[Batch] = []
        self.leader: tuple[float, KernelSpec] | None = None  # (relative time, spec): the best measured here
        self.twins_prefetched: set[str] = set()
        self.phase_s["setup"] += time.perf_counter() - t0

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phase_s[name] += time.perf_counter() - t0

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self) -> SearchResult:
        # a time budget's end on the wall clock: what it left of the study's GPU time, from the loop's start
        self.began = time.monotonic()
        if self.budget.seconds is not None:
            self.time_up = self.began + max(0.0, self.budget.seconds - self.tally.gpu_s)
        if self.proposer is not None and not self.stopped():
            self.propose(min(self.batch_size, self.proposer_share) if self.adaptive else self.first_proposals)
        bar = _Bar(self.problem, self.budget, enabled=self.progress)
        with bar:
            bar.update(self.tally, time.monotonic() - self.began)
            try:
                batch = Batch() if self.stopped() else self.ask(self.room(0))
                while batch:
                    self.measure(batch)
                    bar.update(self.tally, time.monotonic() - self.began)
                    if self.stopped():
                        break
                    if not self.ahead:
                        self.refill()
                    batch = self.ahead.pop(0) if self.ahead else self.ask(self.room(0))
            except BaseException:
                self.give_back("interrupted before it was measured; queued again")
                raise
            self.close()
        self.confirm()
        return self.result()

    # ---- its steps --------------------------------------------------------------------------------
    def propose(self, n: int, pending: Sequence[KernelSpec] = ()) -> None:
        """The proposer's next n specs, enqueued; it sees everything measured for this problem, and
        is told the specs under measurement (pending), which are not new."""
        with self.phase("propose"):
            history = [r["result"] for r in self.store.kernels(self.problem)]
            self.refiner.enqueue(propose_excluding(self.proposer, self.problem, history, n, pending))

    def refill(self, in_flight: Sequence[KernelSpec] = ()) -> None:
        """An adaptive proposer's next batch, while its share of the budget is not spent (the batch
        in flight counts as spent) and its queued proposals do not fill the next batch. With
        look-ahead it is asked while a batch is measured, so it sees that batch as pending."""
        if not self.adaptive:
            return
        queued = trials.queued(self.study)
        share_left = self.proposer_share - self.tally.evaluations - len(in_flight) - queued
        want = min(self.room(len(in_flight)) - queued, share_left)
        if want > 0:
            self.propose(want, pending=in_flight)

    def ask(self, room: int, in_flight: Sequence[tuple[Any, KernelSpec]] = ()) -> Batch:
        """Trials for up to `room` measurements. Under the store's budget lock, room is cut to what
        the budget leaves once every search of this study is counted (budget_room), and the trials
        are claimed before the lock is let go: concurrent searches of one problem on one SQLite
        store measure at most the budget in all."""
        with self.phase("ask"), self.store.budget_lock():
            return self._ask(min(room, self.budget_room(len(in_flight))), in_flight)

    def budget_room(self, own_in_flight: int) -> int:
        """Measurements the budget still allows, counting what the study measured (any worker's)
        and the specs other workers have claimed and not yet measured."""
        import optuna

        if self.budget.evaluations is None:
            return self.batch_size
        measured = measured_spec_keys(self.study, self.store.measured_spec_keys(self.problem))
        running = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        claimed = {t.user_attrs["spec_key"] for t in running
                   if "spec_key" in t.user_attrs and t.user_attrs.get("worker") != WORKER} - measured
        return self.budget.evaluations - len(measured) - len(claimed) - own_in_flight

    def _ask(self, room: int, in_flight: Sequence[tuple[Any, KernelSpec]]) -> Batch:
        """Trials until `room` of them need a GPU measurement (or trials run out). On the way,
        invalid specs are pruned and specs already measured (by this study or another) are told
        from the kernel table at once: a trial left RUNNING across a measurement is one the study
        pays for (see refiner.measured_spec_keys)."""
        import optuna

        batch = Batch()
        while len(batch.trials) < room and self.trials_left > 0:
            self.trials_left -= 1
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # heartbeats are recorded by hand below
                trial = self.study.ask()
            self.in_hand[trial._trial_id] = trial
            try:
                trial.set_user_attr("worker", WORKER)
                if self.heartbeats:
                    self.storage.record_heartbeat(trial._trial_id)
                try:
                    spec = self.refiner.suggest(trial)
                except SpecError as e:
                    trial.set_user_attr("status", "invalid")
                    trial.set_user_attr("error", str(e)[:2000])
                    self.study.tell(trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
                    self.in_hand.pop(trial._trial_id)
                    continue
                if self.tell_known(trial, spec):  # a spec is measured once per problem
                    continue
                trial.set_user_attr("spec", spec.to_json())
                trial.set_user_attr("spec_key", spec.key())
            except optuna.exceptions.UpdateFinishedTrialError:
                self.in_hand.pop(trial._trial_id, None)
                continue  # popped by another worker too (SQLite has no row locks) and already settled
            if any(s == spec for _, s in (*in_flight, *batch.trials)):
                batch.twins.append((trial, spec))
                continue
            batch.trials.append((trial, spec))
        return batch

    def measure(self, batch: Batch) -> None:
        """Measure a batch on the GPU, record it, tell the study. With look-ahead, the next batches
        are asked (up to `depth`, in self.ahead) and compile in the runner's pool while this one is
        timed: in a thread of their own while the runner measures, where its prefetch may be called
        meanwhile (runner.prefetch_concurrent), else first."""
        if batch.trials:
            asking = None
            if self.prefetch is not None:
                self.prefetch(self.problem, batch.specs)  # the batch in hand compiles first
                if getattr(self.runner, "prefetch_concurrent", False):
                    asking = _Aside(self.ask_ahead, batch)
                else:
                    self.ask_ahead(batch)
            t0 = time.perf_counter()
            beating = Heartbeat(self.storage, lambda: [t._trial_id for b in (batch, *self.ahead) for t, _ in b.trials]
                                 ) if self.heartbeats else None
            try:
                with self.phase("measure"):
                    results = self.runner.evaluate(self.problem, batch.specs, self.modes)
            except BaseException:
                if asking is not None:
                    asking.join(reraise=False)  # its trials are in hand: given back with this batch's
                raise
            finally:
                if beating is not None:
                    beating.stop()
            failed_ahead = asking.join(reraise=False) if asking is not None else None
            if len(results) != len(batch.trials):
                raise RuntimeError(f"runner returned {len(results)} results for {len(batch.trials)} specs")
            with self.phase("record"):
                now = self.record(batch, results, (time.perf_counter() - t0) / len(batch.trials))
            if failed_ahead is not None:  # raised once what was measured meanwhile is recorded
                raise failed_ahead
            self.prefetch_twin(results, now)
        with self.phase("record"):
            for trial, spec in batch.twins:  # their twin was measured in this batch or the one before
                self.tell_known(trial, spec)
            # Other workers may share the study (a PostgreSQL store): count what they measured too.
            self.tally = Tally.from_study(self.study, self.store, self.problem, self.reference, self.mode)

    def ask_ahead(self, batch: Batch) -> None:
        """Top self.ahead up to `depth` batches, each handed to the runner's prefetch as it is asked.
        The proposer's share comes first (refill, with every batch in flight pending)."""
        while len(self.ahead) < self.depth and not self.stopped():
            flight = [ts for b in (batch, *self.ahead) for ts in b.trials]
            self.refill([s for _, s in flight])
            room = self.ahead_room(len(flight))
            if room <= 0:
                return
            nxt = self.ask(room, flight)
            if not nxt:
                return
            if nxt.trials:
                self.prefetch(self.problem, nxt.specs)
            self.ahead.append(nxt)
            if not nxt.trials:
                return  # only repeats of specs in flight: told once those are measured

    def prefetch_twin(self, results: list[CandidateResult], baselines: dict[str, BaselineResult]) -> None:
        """Look-ahead for the confirmation rounds: the static twin of the best kernel so far
        (confirm.static_twin) compiles while the search goes on, so the rounds rarely wait for it."""
        c = self.confirm_with
        if self.prefetch is None or c is None or c.rounds <= 0 or c.static_twins <= 0:
            return
        for r in results:
            ms = r.kernel_ms(self.mode) if r.ok else None
            if ms is not None and math.isfinite(ms):
                rel = relative_time(ms, baselines, self.reference, self.mode)
                if self.leader is None or rel < self.leader[0]:
                    self.leader = (rel, r.spec)
        twin = static_twin(self.leader[1]) if self.leader is not None else None
        if twin is not None and twin.key() not in self.twins_prefetched:
            self.twins_prefetched.add(twin.key())
            self.prefetch(self.problem, [twin])

    def record(self, batch: Batch, results: list[CandidateResult], share_s: float) -> dict[str, BaselineResult]:
        """The kernel table first, then the study: a kill after the table's write loses nothing
        (the trial's retry is told from it). Speedups are taken against the baselines timed in the
        same call (the evaluator interleaves them); a runner without them keeps the first ones."""
        now = self.runner.baselines(self.problem, self.modes) or self.baselines
        if now is not self.baselines:
            self.store.record_baselines(self.problem, now, self.environment)
        for (trial, spec), result in zip(batch.trials, results):
            self.store.record_kernel(self.problem, result, render_source(self.problem, spec), self.environment,
                                     self.mode, baselines=now)
        for (trial, spec), result in zip(batch.trials, results):
            self.tell(trial, result, True, share_s, now)
        return now

    def tell(self, trial, result: CandidateResult, measured_now: bool, gpu_s: float,
             against: dict[str, BaselineResult]) -> None:
        import optuna

        attrs = trial_attrs(result, against, measured_now=measured_now, reused=not measured_now)
        attrs["gpu_s"] = gpu_s
        ms = result.kernel_ms(self.mode) if result.ok else None
        if measured_now:
            self.tally.add(gpu_s, ms, speedups_of(result, against).get(self.mode, {}).get(self.reference))
        try:
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            if ms is None:
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
            else:
                # the objective: kernel time over the reference baseline's in the same call (see collect)
                self.study.tell(trial, relative_time(ms, against, self.reference, self.mode), skip_if_finished=True)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # another worker on a SQLite store popped the same queued trial; its result stands
        self.in_hand.pop(trial._trial_id, None)

    def tell_known(self, trial, spec: KernelSpec) -> bool:
        """Tell a trial its spec's stored measurement, if the store holds one in this search's mode
        (or a failure, which fails every mode): a kernel timed only in another mode is measured
        again, never ranked by another mode's figure."""
        known = self.store.measurement(self.problem, spec)
        if known is None or (known.ok and known.kernel_ms(self.mode) is None):
            return False
        self.tell(trial, known, False, 0.0, self.store.kernel_baselines(self.problem, spec) or self.baselines)
        return True

    def room(self, in_flight: int) -> int:
        if self.budget.evaluations is None:
            return self.batch_size
        return max(0, min(self.batch_size, self.budget.evaluations - self.tally.evaluations - in_flight))

    def ahead_room(self, in_flight: int) -> int:
        """Room for a batch asked ahead. A sampler still in its startup phase (fewer completed
        trials than it needs) would draw at random, which over a space of several backends is
        nearly always an invalid spec: ask ahead then only for a full batch of queued proposals."""
        import optuna

        trials = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                               optuna.trial.TrialState.WAITING))
        complete = sum(1 for t in trials if t.state == optuna.trial.TrialState.COMPLETE)
        r = self.room(in_flight)
        return r if complete >= SAMPLER_WARMUP or len(trials) - complete >= r else 0

    def cut_short(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def stopped(self) -> bool:
        return self.budget.spent(self.tally.evaluations, self.tally.gpu_s) or self.out_of_time() or self.cut_short()

    def out_of_time(self) -> bool:
        """A time budget's wall clock has run out (the search then ends on its own, as when spent)."""
        return self.time_up is not None and time.monotonic() >= self.time_up

    def give_back(self, reason: str) -> None:
        """Every trial in hand back to the queue, so that a resume measures it: failed and queued
        again by Optuna's retry callback, as a dead worker's trial is, but without its retry limit
        (an interrupt is no fault of the spec)."""
        trials = list(self.in_hand.values())
        self.in_hand.clear()
        requeue(self.study, self.storage, trials, reason, callback=retry_callback(max_retry=None))

    def close(self) -> None:
        if self.cut_short():
            self.give_back("asked ahead, not measured before the deadline; queued again")
            return
        # The search ended on its own (budget spent, or no trial left to ask): it leaves nothing
        # queued or running. A later, larger search proposes these specs again (Refiner.enqueue).
        reason = "not measured: the search's budget was spent first"
        fail_trials(self.storage, list(self.in_hand.values()), reason)
        self.in_hand.clear()
        self.refiner.close_queue(reason)

    def confirm(self) -> None:
        """The leaders timed again, once the search has ended on its own (budget spent or nothing
        left to try); a deadline leaves it to the resume, which may measure more first."""
        c = self.confirm_with
        if c is None or c.rounds <= 0 or self.cut_short():
            return
        with self.phase("confirm"):
            self._confirm(c)

    def _confirm(self, c: Confirm) -> None:
        keys = study_keys(self.study)
        run_confirmation(self.problem, lambda: ranked_trials(self.store.kernels(self.problem), keys, self.baselines,
                                                             self.reference, self.mode),
                         self.runner, self.store, self.modes, self.confirm_mode, c, self.reference, self.deadline,
                         say=(lambda line: None) if not self.progress else print, gpu_name=self.gpu)

    @property
    def confirm_mode(self) -> str:
        return (self.confirm_with.mode if self.confirm_with is not None else None) or self.mode

    @property
    def gpu(self) -> str | None:
        return getattr(self.environment, "gpu_name", None) or None  # confirmation rounds count on this GPU only

    def result(self) -> SearchResult:
        t0 = time.perf_counter()
        res = collect(self.problem, self.study, self.store, self.baselines, self.mode, self.reference,
                      self.confirm_mode, self.gpu)
        self.phase_s["record"] += time.perf_counter() - t0
        return replace(res, phase_s={k: self.phase_s[k] for k in self.PHASES})


def run_search(problem: GemmProblem, *, backends: Sequence[str], arch: str, proposer: Proposer | None,
               runner: Runner, store: Store, budget: int | str | Budget = 64,
               modes: Sequence[Mode] = (DEFAULT_MODE,), n_proposals: int | None = None, sampler: str = "tpe",
               seed: int | None = None, tag: str = "", progress: bool = True,
               max_trials: int | None = None, batch_size: int = 1,
               deadline: float | None = None, lookahead: bool | int = False,
               confirm: Confirm | None = None, shape_generic: bool = True) -> SearchResult:
    """Run (or resume) the study of `problem` until `budget` is spent; see the module docstring.
    batch_size: specs handed to runner.evaluate at once (the evaluator compiles a batch in
    parallel; the TPE sampler's constant liar keeps a batch diverse). deadline: a time.monotonic()
    after which no new batch starts (the study stays resumable). lookahead: ask for the next batches
    while the current one is measured and hand them to runner.prefetch (if the runner has one), so
    that they compile in the meantime (True: LOOKAHEAD_BATCHES of them; a number: that many). Off
    here, on in cudal2.search and `cudal2 search`: on the
    H100 a first comparison (cold process, kernels compiled per shape) cut the wait for compiles
    (0.12 -> 0.09 s a candidate) but gave no shorter search (0.86 against 0.74 s a candidate); with
    shape-generic kernels, warm searches of a new shape and of a weight whose kernels were compiled
    took 8.9 and 8.2 s against 9.8 and 10.0 s without it, on one machine
    (benchmarks/results/tune_speed_lookahead_triton_h100_2026-11-27.md). confirm: once the budget
    is spent, time the leaders again and rank them by those rounds (confirm.py); None (here;
    cudal2.search, the CLI and the benchmarks pass Confirm()) or rounds=0 reports the best search
    trial. shape_generic: measure
    each spec's shape-generic kernel where its backend has one (Refiner.kernel_of); False: the
    backend's own choice ("auto", a kernel compiled for this one shape)."""
    return Search(problem, backends=backends, arch=arch, proposer=proposer, runner=runner, store=store,
                  budget=budget, modes=modes, n_proposals=n_proposals, sampler=sampler, seed=seed, tag=tag,
                  progress=progress, max_trials=max_trials, batch_size=batch_size, deadline=deadline,
                  lookahead=lookahead, confirm=confirm, shape_generic=shape_generic).run()


class _Aside:
    """fn(*args) in a thread of its own: the search's look-ahead (proposer, sampler, store reads),
    while the main thread waits on the runner. The study and the store are not touched by the main
    thread meanwhile; join() before they are."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        import threading

        self._error: BaseException | None = None

        def run() -> None:
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread by join()
                self._error = e

        self._thread = threading.Thread(target=run, name="cudal2-ask-ahead", daemon=True)
        self._thread.start()

    def join(self, reraise: bool = True) -> BaseException | None:
        """Wait for it; raise what it raised (reraise), or return it."""
        self._thread.join()
        if reraise and self._error is not None:
            raise self._error
        return self._error


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

    def update(self, state: Tally, wall_s: float = 0.0) -> None:
        if self.plain:
            best = f"{state.best_speedup:.3f}x" if state.best_speedup is not None else "-"
            print(f"{self.problem.label()}: {state.evaluations} evaluations, best {best}, GPU {state.gpu_s:.1f}s",
                  flush=True)
            return
        if self.progress is None:
            return
        done = (state.evaluations if self.budget.evaluations is not None
                else min(max(state.gpu_s, wall_s), self.budget.seconds))  # the wall clock bounds a time budget too
        best = f"{state.best_speedup:.3f}x" if state.best_speedup is not None else "-"
        self.progress.update(self.task, completed=done, best=best, gpu=f"{state.gpu_s:.1f}s")

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)
        return False
