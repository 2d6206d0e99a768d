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


@dataclass(frozen=True)
class Confirm:
    """How many leaders to time again, how many times each (rounds=0 switches it off), and in
    which timing mode they are ranked (None: the search's own objective mode). mode="sustained"
    picks, among leaders found cheaply offline, the one that stays fast at the clock its own power
    draw sets (docs/evaluation.md, Timing); each round then costs about 2 s a contender."""

    top: int = 3
    rounds: int = 3
    mode: str | None = None

    def __post_init__(self):
        if self.top < 1 or self.rounds < 0:
            raise ValueError(f"Confirm(top={self.top}, rounds={self.rounds}): top must be >= 1 and rounds >= 0")
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
        with full() if full is not None else contextlib.nullcontext():
            results = runner.evaluate(problem, needing, timed)
        if len(results) != len(needing):
            raise RuntimeError(f"runner returned {len(results)} results for {len(needing)} specs")
        baselines = runner.baselines(problem, timed) or store.baselines(problem)
        environment = runner.environment()
        for result in results:
            store.record_confirmation(problem, result, baselines, environment)
