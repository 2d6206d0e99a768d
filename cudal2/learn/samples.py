"""Training samples for the cost model: measured (problem, spec) pairs with their reward, read from
a store or from `cudal2 dataset export` files.

The reward is the log speedup over torch.matmul on the same shape, on the same GPU, in one timing
mode: log(torch_ms / kernel_ms). The mode is the objective's (chain) where the rows have it, else
layer, else offline (stores measured before each became the objective); one set never mixes them
(label_mode). A pair that failed, was refused, or whose shape has no torch time
is left out: the IR's own checks keep a proposer from refused specs, and a wrong kernel is never a
candidate to rank. A cost model learns one GPU model's speed: one_gpu_model refuses a mix.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from pathlib import Path
from typing import Iterable, Iterator

from ..ir import Epilogue, GemmProblem, KernelSpec
from ..proposers.sample import Sample
from ..dataset import export_rows

SPEC_PREFIX = "spec."


def from_store(store, refused: list[str] | None = None) -> Iterator[Sample]:
    """Every correct, timed pair of the store whose shape has a torch time (refused: see from_rows)."""
    yield from from_rows(export_rows(store), refused=refused)


def from_csv(path: Path, refused: list[str] | None = None) -> Iterator[Sample]:
    """The rows of an export (.csv or .csv.gz) (refused: see from_rows)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        yield from from_rows(csv.DictReader(f), where=path.name, refused=refused)


LABEL_MODES = ("chain", "layer", "offline")  # as cudal2.dataset.export keeps them, in order of preference


def label_mode(rows: Iterable[dict]) -> str:
    """The mode a training set's rewards come from: the first of LABEL_MODES that any correct row
    has both times of (a store measured before chain mode was the objective: layer, or offline)."""
    for mode in LABEL_MODES:
        if any(row.get("status") == "ok" and _cell(row.get(f"kernel_ms.{mode}")) is not None
               and _cell(row.get(f"torch_ms.{mode}")) is not None for row in rows):
            return mode
    return LABEL_MODES[0]


def from_rows(rows: Iterable[dict], where: str = "store", refused: list[str] | None = None) -> Iterator[Sample]:
    """The correct, timed pairs among export rows (dicts of `cudal2 dataset export`'s columns),
    their rewards in one mode (label_mode); rows without that mode's times are left out. A row
    whose times are not finite positive numbers is left out too, and named in `refused`
    ("<where>, row N: kernel_ms.layer=nan") where a list is given."""
    rows = list(rows)
    mode = label_mode(rows)
    for i, row in enumerate(rows):
        if row.get("status") != "ok":
            continue
        kernel, torch = _number(row.get(f"kernel_ms.{mode}")), _number(row.get(f"torch_ms.{mode}"))
        if kernel is None or torch is None:
            continue
        if not (math.isfinite(kernel) and kernel > 0 and math.isfinite(torch) and torch > 0):
            if refused is not None:
                refused.append(f"{where}, row {i + 2}: kernel_ms.{mode}={kernel:g}, torch_ms.{mode}={torch:g}")
            continue
        try:
            problem = GemmProblem(m=int(row["m"]), n=int(row["n"]), k=int(row["k"]), dtype=row["dtype"],
                                  layout=row["layout"], epilogue=_epilogue(row.get("epilogue")))
            spec = KernelSpec.from_dict({k[len(SPEC_PREFIX):]: _cell(v) for k, v in row.items()
                                         if k.startswith(SPEC_PREFIX) and _cell(v) is not None})
        except (KeyError, ValueError, TypeError) as e:
            raise ValueError(f"{where}, row {i + 2}: not a measured pair ({e}); give an export of "
                             "'cudal2 dataset export'") from None
        yield Sample(problem, spec, math.log(torch / kernel), gpu=str(row.get("gpu") or ""),
                     created=str(row.get("created") or ""), mode=mode)


def _number(v) -> float | None:
    if v is None or v == "":
        return None
    return float(v)


def _cell(v):
    """A CSV cell as the IR wants it: '' is unset, True/False are bools, digits are ints."""
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        return v
    if v in ("True", "False"):
        return v == "True"
    try:
        return int(v)
    except ValueError:
        return v


def _epilogue(text) -> Epilogue:
    if not text:
        return Epilogue()
    return Epilogue(**json.loads(text)) if isinstance(text, str) else text
