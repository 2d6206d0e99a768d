"""The report of proposers run side by side (`cudal2 compare`): each searched every shape at each
budget, in a store of its own, on one runner. It says, per proposer and budget, the
best speed found, its share of the best known speed of the shape, and who beat whom shape by shape.

The best known speed of a shape is the best any arm found on it, or a figure given from outside
(a sweep, a budget-128 search), whichever is higher.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

REACHED = 0.97  # "reaches the best known": at least this share of its speed
TIE = 0.01  # a win needs more than 1 % of speed: closer is measurement spread


@dataclass
class Arm:
    proposer: str
    budget: int | str  # evaluations, or GPU time ("120s")
    shape: str
    speedup: float | None  # best over torch.matmul, confirmed (None: nothing ran correctly)
    backend: str = ""  # whose kernel that is ("" where none ran correctly, or not recorded)


def best_known(arms: Sequence[Arm], outside: dict[str, float] | None = None) -> dict[str, float]:
    shapes = {a.shape for a in arms}
    best: dict[str, float] = {k: v for k, v in (outside or {}).items() if k in shapes}
    for a in arms:
        if a.speedup is not None:
            best[a.shape] = max(best.get(a.shape, 0.0), a.speedup)
    return best


def _geomean(values) -> float | None:
    v = [x for x in values if x]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def summary(arms: Sequence[Arm], best: dict[str, float]) -> list[dict]:
    """Per (proposer, budget): geomean speedup over torch and geomean share of the best known (both
    over the shapes where it found a correct kernel), and the share of all its shapes where it
    reached REACHED of the best known (a search that found nothing did not)."""
    rows = []
    for key in dict.fromkeys((a.proposer, a.budget) for a in arms):
        mine = [a for a in arms if (a.proposer, a.budget) == key]
        shares = [(a.speedup or 0.0) / best[a.shape] for a in mine if best.get(a.shape)]
        rows.append({"proposer": key[0], "budget": key[1], "shapes": len(mine),
                     "geomean_speedup": _geomean(a.speedup for a in mine),
                     "geomean_share_of_best": _geomean(shares),
                     "reached": sum(s >= REACHED for s in shares) / len(shares) if shares else None})
    return rows


def wins(arms: Sequence[Arm], budget: int) -> dict[str, dict[str, int]]:
    """wins[a][b]: shapes on which proposer a's best beat b's by more than TIE, at this budget."""
    at = {(a.proposer, a.shape): a.speedup or 0.0 for a in arms if a.budget == budget}
    names = list(dict.fromkeys(p for p, _ in at))
    shapes = list(dict.fromkeys(s for _, s in at))
    return {a: {b: sum(1 for s in shapes if (a, s) in at and (b, s) in at and at[(a, s)] > at[(b, s)] * (1 + TIE))
                for b in names if b != a} for a in names}


def backend_wins(arms: Sequence[Arm]) -> dict[tuple[str, int | str], dict[str, int]]:
    """Per (proposer, budget): on how many shapes each backend's kernel was the best found."""
    out: dict[tuple[str, int | str], dict[str, int]] = {}
    for a in arms:
        if a.backend and a.speedup is not None:
            per = out.setdefault((a.proposer, a.budget), {})
            per[a.backend] = per.get(a.backend, 0) + 1
    return out


def markdown(arms: Sequence[Arm], best: dict[str, float], *, title: str, command: str, environment: str) -> str:
    budgets = list(dict.fromkeys(a.budget for a in arms))  # as given: 16 and "120s" do not sort
    names = list(dict.fromkeys(a.proposer for a in arms))
    lines = [f"# {title}", "", f"Command: `{command}`", "", environment, "",
             f"Best known: the best speed any arm found on the shape (or a sweep's). Reached: at least "
             f"{REACHED:.0%} of it. A win: faster by more than {TIE:.0%}.", "",
             "| proposer | budget | shapes | geomean vs torch | geomean share of best known | reached |",
             "|---|---|---|---|---|---|"]
    for r in summary(arms, best):
        lines.append(f"| {r['proposer']} | {r['budget']} | {r['shapes']} | {_fmt(r['geomean_speedup'])} | "
                     f"{_fmt(r['geomean_share_of_best'])} | {_pct(r['reached'])} |")
    for budget in budgets:
        table = wins(arms, budget)
        if len(table) < 2:
            continue
        lines += ["", f"Wins at budget {budget} (row beat column on this many shapes):", "",
                  "| | " + " | ".join(table) + " |", "|---" * (len(table) + 1) + "|"]
        for a in table:
            lines.append(f"| {a} | " + " | ".join("-" if a == b else str(table[a][b]) for b in table) + " |")
    backends = sorted({a.backend for a in arms if a.backend})
    several = len(backends) > 1
    if several:
        lines += ["", "Whose kernel was the best found (shapes per backend):", "",
                  "| proposer | budget | " + " | ".join(backends) + " |", "|---" * (len(backends) + 2) + "|"]
        for (name, budget), per in backend_wins(arms).items():
            lines.append(f"| {name} | {budget} | " + " | ".join(str(per.get(b, 0)) for b in backends) + " |")
    shapes = list(dict.fromkeys(a.shape for a in arms))
    cols = [(n, b) for n in names for b in budgets if any(a.proposer == n and a.budget == b for a in arms)]
    at = {(a.proposer, a.budget, a.shape): a.speedup for a in arms}
    who = {(a.proposer, a.budget, a.shape): a.backend for a in arms}

    def cell(n, b, s) -> str:
        x = _fmt(at.get((n, b, s)))
        return f"{x} ({who[(n, b, s)]})" if several and at.get((n, b, s)) is not None and who.get((n, b, s)) else x

    lines += ["", "Per shape, best speedup over torch.matmul" + (" (and its backend)" if several else "") + ":", "",
              "| shape | best known | " + " | ".join(f"{n} b{b}" for n, b in cols) + " |",
              "|---" * (len(cols) + 2) + "|"]
    for s in shapes:
        lines.append(f"| {s} | {_fmt(best.get(s))} | " + " | ".join(cell(n, b, s) for n, b in cols) + " |")
    return "\n".join(lines) + "\n"


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _pct(x) -> str:
    return "-" if x is None else f"{x:.0%}"
