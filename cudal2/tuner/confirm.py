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
STATIC_MARGIN (cudal2.store.rounds.kept_twins): static specialization stays where a measurement shows it pays, on
this shape alone (on the H100 two of the 48 probe shapes read 5 to 6% faster static, in
geometric mean 0.7%: docs/results.md).
"""

from __future__ import annotations

import contextlib

import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..bench.results import MODES
from ..ir import GemmProblem, KernelSpec
from cudal2.store.rounds import Confirmed, rounds_on, static_twin, summarize


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
