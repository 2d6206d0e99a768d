"""The numbers the rules proposer's model is fitted with, as data: cudal2/data/rules/factors.csv, one
row per (arch, backend, name) with its value and where it comes from. "*" matches any arch or backend;
the most specific row wins (arch and backend, then arch, then backend, then neither). A factor
measured on one GPU is written for its arch, so another target starts from the general value."""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

FACTORS = Path(__file__).resolve().parents[1] / "data" / "rules" / "factors.csv"
COLUMNS = ["arch", "backend", "name", "value", "source"]


@lru_cache(maxsize=None)
def _rows() -> dict[tuple[str, str, str], float]:
    path = FACTORS
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames}, expected {COLUMNS}; restore it from the repository")
        out: dict[tuple[str, str, str], float] = {}
        for line, row in enumerate(reader, start=2):
            key = (row["arch"], row["backend"], row["name"])
            try:
                value = float(row["value"])
            except ValueError:
                raise ValueError(f"{path}:{line}: {row['name']} = {row['value']!r} is not a number; "
                                 "restore it from the repository") from None
            if key in out:
                raise ValueError(f"{path}:{line}: {key} is given twice; keep one row")
            if not row["source"].strip():
                raise ValueError(f"{path}:{line}: {row['name']} has no source; say where the value comes from")
            out[key] = value
        return out


@lru_cache(maxsize=None)
def factors(arch: str, backend: str) -> dict[str, float]:
    """Every factor's value for (arch, backend): the most specific row of each name."""
    out: dict[str, float] = {}
    for scope in (("*", "*"), ("*", backend), (arch, "*"), (arch, backend)):  # later rows override
        out.update({name: v for (a, b, name), v in _rows().items() if (a, b) == scope})
    return out


def factor(arch: str, backend: str, name: str, default: float | None = None) -> float:
    """One factor; default where no row names it (None: a KeyError naming the file)."""
    found = factors(arch, backend)
    if name in found:
        return found[name]
    if default is not None:
        return default
    raise KeyError(f"{FACTORS} has no row for {name!r} ({arch}, {backend}); add one with its source")
