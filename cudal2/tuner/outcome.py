"""What a search found: the result of one study of one problem, built from the study and the
store (`collect`), and the running totals behind its progress curve (`Tally`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..bench.results import DEFAULT_MODE, BaselineResult, CandidateResult
from ..ir import GemmProblem, KernelSpec
from cudal2.store.rounds import kept_twins, ranked_trials, rounds_on, summarize, with_twins
from .trials import measured_spec_keys, speedups_of
from cudal2.store.store import Store


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
    mode: str = DEFAULT_MODE  # the timing mode `speedup` is in (the confirmation's, where it ranked)
    # GPU measurements of the study by where their spec came from: a proposer's source ("rules",
    # "llm:<model>", "rules (fallback: llm failed)"), "optuna" (sampled) or "requeued"
    proposals: dict[str, int] = field(default_factory=dict)
    # Wall seconds of this call by step (Search.PHASES): where a search's time went, the evaluator's
    # included ("measure", "confirm"); empty where the result was built from a store alone.
    phase_s: dict[str, float] = field(default_factory=dict)
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


class Tally:
    """Running totals over the study's GPU measurements (including those of earlier sessions)."""

    def __init__(self, reference: str | None):
        self.reference = reference
        self.evaluations = 0
        self.gpu_s = 0.0
        self.best_speedup: float | None = None
        self.curve: list[Point] = []

    @classmethod
    def from_study(cls, study, store: Store, problem: GemmProblem, reference: str | None, mode: str) -> "Tally":
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



def study_keys(study) -> set:
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


def render_source(problem: GemmProblem, spec: KernelSpec) -> str:
    """The rendered source for the kernel table; empty when the backend cannot render (yet)."""
    try:
        from ..codegen import get_backend

        return get_backend(spec.backend).render(problem, spec).text
    except Exception:  # noqa: BLE001 - the evaluator reports render failures; the table just lacks text
        return ""


def collect(problem: GemmProblem, study, store: Store, baselines: dict[str, BaselineResult], mode: str,
            reference: str | None, confirm_mode: str | None = None, gpu_name: str | None = None) -> SearchResult:
    """A SearchResult from what the study and the store hold: trials ranked in `mode`, confirmation
    rounds in `confirm_mode` (default: the same), those timed on `gpu_name` (default: any GPU)."""
    confirm_mode = confirm_mode or mode
    rows = store.kernels(problem)
    history = [r["result"] for r in rows]
    state = Tally.from_study(study, store, problem, reference, mode)
    # Candidates are ranked by their speedup over the reference baseline timed in the same
    # evaluator call: the GPU's clock drifts between calls (torch took 874 us in one batch of an
    # H100 search on 8192x8192x4096 and 762 us in the next, when it had cooled), so raw times of
    # different batches do not compare, while each kernel's ratio to its interleaved baseline does.
    keys = study_keys(study)
    ranked = ranked_trials(rows, keys, baselines, reference, mode)
    rounds_here = rounds_on(store.confirmations(problem), gpu_name)
    # the study's own specs and their static twins (confirm.py), the twins only where they paid
    allowed = with_twins(keys, rows)
    confirmed = kept_twins({k: c for k, c in summarize(rounds_here, reference, confirm_mode).items() if k in allowed})
    # (a twin its backend cannot build for this shape is no rejected kernel)
    rejected = [c.rounds[-1]["result"] for c in confirmed.values()
                if c.failed and c.rounds[-1]["result"].status != "unsupported"]
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
                    # (a static twin, timed in confirmation rounds only, has no kernel-table row)
                    source=sources.get(res.spec.key()) or render_source(problem, res.spec), result=res)
        speedups = speedups_of(res, baselines)
    shown = confirm_mode if passed else mode
    return SearchResult(problem=problem, best=best, speedup=speedups.get(shown, {}), speedups=speedups,
                        baselines=baselines, history=history, study=study, evaluations=state.evaluations,
                        gpu_seconds=state.gpu_s, curve=state.curve, confirmed_rounds=rounds,
                        trial_speedup=trial_speedups.get(mode, {}), rejected=rejected, mode=shown,
                        proposals=proposal_sources(study))
