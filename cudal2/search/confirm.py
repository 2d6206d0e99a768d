"""Confirmation: the search's leaders are timed again before one is named the winner.

A search keeps the fastest of many noisy measurements, so the winner's own trial is biased
towards luck (on the H100 the same kernel measured 165.9 and 172.4 us against torch's 160.6 and
170.7 in two runs minutes apart). Its figure is therefore not the trial that picked it: the
`top` leaders by that trial are measured `rounds` more times, each time with the baselines
interleaved in the same evaluator call, and they are ranked by the median of their confirmation
rounds alone. A leader that fails any confirmation round (wrong result, crash) is out, and the
next one by its trial takes its place; the figures reported are those of the winner's median
round (its kernel time and the baselines timed with it, one evaluator call).

Rounds are stored (Store.record_confirmation), so a search stopped mid-way resumes them, and a
larger budget later confirms whatever then leads.

Static twins: a search measures shape-generic kernels, which serve every shape of their class. The
best `static_twins` leaders (by trial) that are shape-generic are timed beside their static twin,
the same spec compiled for this one shape (shape_specialization="static"), in the same rounds. The
twin is kept, and may win, only where its median beats its generic original's by more than
STATIC_MARGIN (kept_twins): static specialization stays where a measurement shows it pays, on
this shape alone (on the H100 two of the 48 probe shapes read 5 to 6% faster static, in
geometric mean 0.7%: docs/results.md).
"""

from __future__ import annotations

import contextlib

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..bench.results import MODES
from ..ir import GemmProblem, KernelSpec
from .refiner import relative_time

# A static twin replaces its shape-generic original only when its median round is faster by more
# than this share: about the spread of one kernel's confirmation medians, so noise alone does not
# pin a shape to a kernel compiled for it.
STATIC_MARGIN = 0.01


@dataclass(frozen=True)
class Confirm:
    """How many leaders to time again, how many times each (rounds=0 switches it off), and in
    which timing mode they are ranked (None: the search's own objective mode). mode="sustained"
    picks, among leaders found cheaply offline, the one that stays fast at the clock its own power
    draw sets (docs/evaluation.md, Timing); each round then costs about 2 s a contender."""

    top: int = 3
    rounds: int = 3
    mode: str | None = None
    static_twins: int = 1  # leaders (best trial first) timed beside their static twin; 0: none

    def __post_init__(self):
        if self.top < 1 or self.rounds < 0 or self.static_twins < 0:
            raise ValueError(f"Confirm(top={self.top}, rounds={self.rounds}, static_twins={self.static_twins}): "
                             "top must be >= 1, rounds and static_twins >= 0")
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"Confirm(mode={self.mode!r}): use None (the search's own mode) or one of {MODES}")


@dataclass
class Confirmed:
    """One leader's confirmation rounds: how it ranks (median relative time over ok rounds), and
    the round whose figures are reported (its median)."""

    rounds: list[dict[str, Any]]  # store rows: result, baselines
    failed: bool  # some round was not ok: never the winner
    score: float  # median of kernel time / reference baseline time, per round (lower is better)
    median_round: dict[str, Any] | None


def ranked_trials(rows: Sequence[dict[str, Any]], keys: set, baselines: dict, reference: str | None,
                  mode: str) -> list[tuple[float, dict[str, Any]]]:
    """(relative time, row) of the correct kernels of this study, best first, one row per spec
    (its latest); rows come from Store.kernels."""
    latest: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["result"].spec.key() in keys:
            latest[r["result"].spec.key()] = r
    out = []
    for r in latest.values():
        res = r["result"]
        ms = res.kernel_ms(mode) if res.ok else None
        if ms is None or not math.isfinite(ms):
            continue
        out.append((relative_time(ms, r["baselines"] or baselines, reference, mode), r))
    out.sort(key=lambda t: t[0])
    return out


def rounds_in_mode(confirmation_rows: Sequence[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """The rounds that count in `mode`: those timed in it, and those that failed (a failure fails
    every mode). A store searched once offline and once sustained keeps both kinds of round; an
    offline round says nothing about a kernel's sustained speed, nor the other way round."""
    return [r for r in confirmation_rows if not r["result"].ok or r["result"].kernel_ms(mode) is not None]


def gpu_of(row: dict[str, Any]) -> str:
    """The GPU (by name) a stored kernel or confirmation row was timed on; "" where not recorded."""
    return (row["environment"] or {}).get("gpu_name", "")


def rounds_on(confirmation_rows: Sequence[dict[str, Any]], gpu_name: str | None) -> list[dict[str, Any]]:
    """The rounds timed on this GPU (by name); all of them where the GPU is not known. A store
    may hold searches from several GPUs, and a leader's rounds on one say nothing of another."""
    if not gpu_name:
        return list(confirmation_rows)
    return [r for r in confirmation_rows if gpu_of(r) == gpu_name]


def summarize(confirmation_rows: Sequence[dict[str, Any]], reference: str | None, mode: str) -> dict[str, Confirmed]:
    """spec_key -> Confirmed, from Store.confirmations rows (the rounds timed in `mode`)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rounds_in_mode(confirmation_rows, mode):
        by_key.setdefault(r["spec_key"], []).append(r)
    out = {}
    for key, rounds in by_key.items():
        failed = any(not r["result"].ok or r["result"].kernel_ms(mode) is None for r in rounds)
        scored = [] if failed else sorted(
            (relative_time(r["result"].kernel_ms(mode), r["baselines"], reference, mode), i)
            for i, r in enumerate(rounds))
        score = statistics.median(s for s, _ in scored) if scored else math.inf
        # the lower middle round: with an even count the reported figures stay one call's own
        median_round = rounds[scored[(len(scored) - 1) // 2][1]] if scored else None
        out[key] = Confirmed(rounds=rounds, failed=failed, score=score, median_round=median_round)
    return out


def static_twin(spec: KernelSpec) -> KernelSpec | None:
    """The shape-generic spec's kernel compiled for one shape, or None where spec is not shape-generic."""
    return spec.replace(shape_specialization="static") if spec.shape_specialization == "dynamic" else None


def generic_original(spec: KernelSpec) -> KernelSpec | None:
    """The shape-generic spec whose static twin spec is, or None where spec is no static one."""
    return spec.replace(shape_specialization="dynamic") if spec.shape_specialization == "static" else None


def with_twins(keys: set[str], rows: Sequence[dict[str, Any]]) -> set[str]:
    """keys (a study's spec keys) and the keys of their static twins, among the specs of rows."""
    twins = {t.key() for r in rows if r["result"].spec.key() in keys and (t := static_twin(r["result"].spec))}
    return set(keys) | twins


def twin_rival(confirmed: dict[str, Confirmed], c: Confirmed) -> Confirmed | None:
    """The confirmed shape-generic original of c where c is a static twin, else None."""
    original = generic_original(c.rounds[0]["result"].spec) if c.rounds else None
    return confirmed.get(original.key()) if original is not None else None


def kept_twins(confirmed: dict[str, Confirmed]) -> dict[str, Confirmed]:
    """confirmed without the static twins that did not pay: a twin stays where its generic original
    was not confirmed, or where its median beats the original's by more than STATIC_MARGIN (a failed
    one stays too, which is never a winner, so that a wrong twin is reported)."""
    out = {}
    for key, c in confirmed.items():
        rival = twin_rival(confirmed, c)
        if not c.failed and rival is not None and not rival.failed and not c.score < rival.score * (1 - STATIC_MARGIN):
            continue
        out[key] = c
    return out


def leaders(ranked: Sequence[tuple[float, dict[str, Any]]], confirmed: dict[str, Confirmed], top: int) -> list[KernelSpec]:
    """The `top` best specs by their search trial, skipping those a confirmation round failed."""
    out = []
    for _, r in ranked:
        spec = r["result"].spec
        c = confirmed.get(spec.key())
        if c is not None and c.failed:
            continue
        out.append(spec)
        if len(out) == top:
            break
    return out


def run_confirmation(problem: GemmProblem, ranked_now, runner, store, modes: Sequence[str], mode: str,
                     confirm: Confirm, reference: str | None, deadline: float | None = None, say=print,
                     gpu_name: str | None = None) -> bool:
    """Time the leaders until each has confirm.rounds rounds (those a round fails are replaced by
    the next leader); `mode` is the one they are ranked in, timed beside `modes`. ranked_now() gives
    ranked_trials afresh. False when the deadline stopped it (the rounds so far are stored; a
    resume continues). Only rounds timed on `gpu_name` count (rounds_on)."""
    announced = False
    while True:
        confirmed = summarize(rounds_on(store.confirmations(problem), gpu_name), reference, mode)
        lead = leaders(ranked_now(), confirmed, confirm.top)
        twins = [t for s in lead[:confirm.static_twins] if (t := static_twin(s)) is not None]
        # a twin that failed a round (one its backend cannot build for this shape, say) is out
        lead += [t for t in twins if not (t.key() in confirmed and confirmed[t.key()].failed)]
        needing = [s for s in lead if len(confirmed[s.key()].rounds if s.key() in confirmed else []) < confirm.rounds]
        if not needing:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        if not announced:
            say(f"    confirming {len(lead)} leader(s) of {problem.label()}: {confirm.rounds} more timing(s) each, "
                "baselines interleaved")
            announced = True
        timed = tuple(dict.fromkeys([*modes, mode]))
        # A runner that times trials briefly (Evaluator.trial_timing) times these rounds in full.
        full = getattr(runner, "full_timing", None)
        # (and with every baseline it has, where its trials time only the reference: Evaluator.trial_baselines)
        with full() if full is not None else contextlib.nullcontext():
            results = runner.evaluate(problem, needing, timed)
            baselines = runner.baselines(problem, timed)
        if len(results) != len(needing):
            raise RuntimeError(f"runner returned {len(results)} results for {len(needing)} specs")
        environment = runner.environment()
        if baselines:
            store.record_baselines(problem, baselines, environment)
        baselines = baselines or store.baselines(problem)
        for result in results:
            store.record_confirmation(problem, result, baselines, environment)
