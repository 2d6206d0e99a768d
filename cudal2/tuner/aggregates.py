"""Aggregates of per-shape speedups, as the evaluation protocol asks for them: geometric mean
first, then arithmetic mean, median, minimum, maximum, and how many shapes are slower than
the baseline. Shapes without a number (no kernel found, baseline unavailable) are counted
apart, never silently dropped."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Aggregate:
    n: int  # shapes with a speedup
    missing: int  # shapes without one
    geomean: float
    mean: float
    median: float
    min: float
    max: float
    slower: int  # shapes with speedup < 1

    def row(self) -> dict[str, object]:
        return {"shapes": self.n, "missing": self.missing, "geomean": self.geomean, "mean": self.mean,
                "median": self.median, "min": self.min, "max": self.max, "slower": self.slower}


def aggregate(speedups: Iterable[float | None]) -> Aggregate | None:
    """Aggregate of the given speedups (ratios > 0; None counts as missing). None if none given."""
    values: list[float] = []
    missing = 0
    for s in speedups:
        if s is None or (isinstance(s, float) and math.isnan(s)):
            missing += 1
            continue
        if s <= 0 or math.isinf(s):
            raise ValueError(f"speedup {s!r} is not a positive finite ratio")
        values.append(float(s))
    if not values:
        return None
    return Aggregate(n=len(values), missing=missing, geomean=math.exp(statistics.fmean(math.log(v) for v in values)),
                     mean=statistics.fmean(values), median=statistics.median(values), min=min(values),
                     max=max(values), slower=sum(1 for v in values if v < 1.0))


def markdown(rows: dict[str, Aggregate | None]) -> str:
    """A markdown table: one line per baseline name."""
    lines = ["| over | shapes | geomean | mean | median | min | max | slower |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, a in rows.items():
        if a is None:
            lines.append(f"| {name} | 0 | - | - | - | - | - | - |")
        else:
            lines.append(f"| {name} | {a.n}" + (f" (+{a.missing} missing)" if a.missing else "")
                         + f" | {a.geomean:.3f} | {a.mean:.3f} | {a.median:.3f} | {a.min:.3f} | {a.max:.3f} | {a.slower} |")
    return "\n".join(lines) + "\n"
