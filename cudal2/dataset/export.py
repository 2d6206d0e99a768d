"""The export of a store's measurements: one row per measured (spec, shape) pair, with the shape,
its place in the train/validation split, the spec's fields, the kernel's times per mode, the
baselines timed on the shape, the GPU (model and UUID) and the versions. CSV always; Parquet where
pandas and pyarrow are installed. An export holds one GPU model's timings: a store that holds
several is exported one model at a time (gpu=...), so that no table or training set mixes them."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterator

from ..bench.results import MODES
from ..ir import KernelSpec
from cudal2.store.store import Store
from ..shapes import load_split

BASELINES = ("torch", "cublaslt_heuristic", "cublaslt_autotune", "quack_heuristic", "quack_autotune")
SPEC_FIELDS = tuple(KernelSpec.model_fields)
# The modes a training label can come from: the objective (chain), then layer and offline for stores
# measured before it was. A training set takes one of them, never a mix (learn.samples.label_mode).
LABEL_MODES = ("chain", "layer", "offline")
COLUMNS = (
    "m", "n", "k", "dtype", "layout", "epilogue", "shape_set", "split", "status", "reason",
    *(f"spec.{f}" for f in SPEC_FIELDS), "spec_key",
    *(f"{what}_ms.{mode}" for mode in MODES for what in ("kernel", "call")),
    *(f"{what}.{mode}" for mode in LABEL_MODES for what in ("spread", "timing_groups")),
    *(f"{b}_ms.{mode}" for b in BASELINES for mode in MODES),
    *(f"speedup_vs_torch.{mode}" for mode in LABEL_MODES), "rel_error", "gpu", "gpu_uuid", "driver", "cuda", "torch", "triton", "cudal2",
    "created",
)


def _split_of() -> dict[str, tuple[str, str]]:
    """problem label -> (shape set, train | validation), from the split kept in the repository."""
    out = {}
    for set_name, parts in load_split().items():
        if isinstance(parts, dict):
            for part in ("train", "validation"):
                for label in parts.get(part, ()):
                    out[label] = (set_name, part)
    return out


def gpu_model_of(store: Store, gpu: str | None = None) -> str | None:
    """The GPU model whose pairs to export: gpu, checked against the store, or the store's one
    model (None for a store whose records name no GPU). Raises ValueError, naming the models and
    the fix, for a store of several models and no gpu, or a gpu it does not hold."""
    models = store.gpu_models()
    held = ", ".join(f"{m!r} ({n} pairs)" for m, n in sorted(models.items()))
    if gpu is not None:
        if gpu not in models:
            raise ValueError(f"the store holds no timings of GPU {gpu!r}; it holds {held or 'none that name a GPU'}")
        return gpu
    if len(models) > 1:
        raise ValueError(f"the store holds timings of {len(models)} GPU models, {held}, which one table must not mix; "
                         "export one at a time with --gpu NAME")
    return next(iter(models), None)


def export_rows(store: Store, gpu: str | None = None) -> Iterator[dict[str, Any]]:
    """One dict per measured pair, keys COLUMNS (a missing figure is None), of one GPU model
    (gpu_model_of: raises ValueError for a store of several and no gpu)."""
    model = gpu_model_of(store, gpu)
    mixed = len(store.gpu_models()) > 1
    where = _split_of()
    stored_baselines: dict[str, dict] = {}
    for rec in store.kernels():
        env = rec["environment"] or {}
        gpu_name = env.get("gpu_name")
        if model is not None and gpu_name != model and (mixed or gpu_name):
            continue  # another model's pair (and, in a store of several, one that names none)
        p, r = rec["problem"], rec["result"]
        label = p.label()
        if label not in stored_baselines:
            stored_baselines[label] = store.baselines(p)
        base = rec["baselines"] or stored_baselines[label]
        row: dict[str, Any] = {c: None for c in COLUMNS}
        row.update(m=p.m, n=p.n, k=p.k, dtype=p.dtype, layout=p.layout, epilogue=p.epilogue.model_dump_json(),
                   status=r.status, reason=(r.reason or "")[:200], spec_key=r.spec.key(),
                   created=str(rec["created"]))
        row["shape_set"], row["split"] = where.get(label, ("", ""))
        row.update({f"spec.{k}": v for k, v in r.spec.to_dict().items() if f"spec.{k}" in row})
        for mode, t in (r.timing or {}).items():
            row[f"kernel_ms.{mode}"], row[f"call_ms.{mode}"] = t.kernel_ms, t.call_ms
            if mode in LABEL_MODES:
                row[f"spread.{mode}"], row[f"timing_groups.{mode}"] = t.spread, t.groups
        for name, b in base.items():
            for mode, t in (b.timing or {}).items():
                if f"{name}_ms.{mode}" in row and b.available:
                    row[f"{name}_ms.{mode}"] = t.kernel_ms
        for mode in LABEL_MODES:
            if row[f"kernel_ms.{mode}"] and row[f"torch_ms.{mode}"]:
                row[f"speedup_vs_torch.{mode}"] = row[f"torch_ms.{mode}"] / row[f"kernel_ms.{mode}"]
        if r.correctness is not None:
            row["rel_error"] = r.correctness.rel_error
        row.update(gpu=gpu_name, gpu_uuid=env.get("gpu_uuid") or None, driver=env.get("driver"), cuda=env.get("cuda"),
                   torch=env.get("torch"), triton=env.get("triton"), cudal2=env.get("cudal2"))
        yield row


def write_rows(rows, out: Path) -> int:
    """Write rows to out (.csv, or .parquet with pandas and pyarrow); returns the row count."""
    out = Path(out)
    rows = list(rows)
    if out.suffix == ".parquet":
        import importlib.util

        if importlib.util.find_spec("pandas") is None or importlib.util.find_spec("pyarrow") is None:
            raise RuntimeError(f"writing {out.name} needs pandas and pyarrow (pip install pandas pyarrow); "
                               "or give a .csv path")
        import pandas as pd

        pd.DataFrame(rows, columns=list(COLUMNS)).to_parquet(out, index=False)
        return len(rows)
    if out.suffix != ".csv":
        raise ValueError(f"{out.name}: give a path ending in .csv or .parquet")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    tmp.replace(out)
    return len(rows)
