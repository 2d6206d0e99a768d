"""A measured (problem, kernel) pair as the cost model learns from it, and what a set of them holds:
the GPU model, the catalogs, the dates. cudal2.learn.samples reads them from stores and CSV files."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from ..bench.results import DEFAULT_MODE
from ..ir import GemmProblem, KernelSpec
from cudal2.proposers.catalog import CATALOGS, catalog


@dataclass(frozen=True)
class Sample:
    problem: GemmProblem
    spec: KernelSpec
    log_speedup: float  # log(torch_ms / kernel_ms)
    gpu: str = ""
    created: str = ""  # when it was measured
    mode: str = DEFAULT_MODE  # the timing mode of the reward

    @property
    def group(self) -> str:
        """The shape it was measured on: samples of one group share their torch time."""
        return self.problem.label()


def one_gpu_model(samples: Iterable[Sample]) -> str:
    """The one GPU model the samples were measured on ("" where none names one). Raises ValueError,
    naming the models and the fix, for samples of several: a speed learned from two GPUs is
    neither's, so a model is trained on one GPU's measurements."""
    counts = Counter(s.gpu for s in samples if s.gpu)
    if len(counts) > 1:
        held = ", ".join(f"{gpu!r} ({n} pairs)" for gpu, n in sorted(counts.items()))
        raise ValueError(f"the measurements come from {len(counts)} GPU models, {held}; train on one: export it "
                         "alone with 'cudal2 dataset export --gpu NAME' and give that file")
    return next(iter(counts), "")


def provenance(samples: list[Sample]) -> dict:
    """What a model trained on these samples learned from: GPUs, backends, spec catalogs (pairs of
    each; the learned proposer ranks only catalogs a model saw), shapes, pairs, dates."""
    dates = sorted(s.created[:10] for s in samples if s.created)
    return {"pairs": len(samples), "shapes": len({s.group for s in samples}),
            "specs": len({s.spec.key() for s in samples}), "gpus": dict(Counter(s.gpu for s in samples)),
            "backends": dict(Counter(s.spec.backend for s in samples)), "catalogs": catalog_pairs(samples),
            "measured": [dates[0], dates[-1]] if dates else []}


def catalog_pairs(samples: Iterable[Sample]) -> dict[str, int]:
    """Pairs per spec catalog (cudal2.proposers.catalog) among the samples; a spec of none counts nowhere."""
    by_spec = Counter(s.spec for s in samples)
    kinds = {(spec.backend, spec.arch) for spec in by_spec}
    out: dict[str, int] = {}
    for name, axes in CATALOGS.items():
        keys = {c.key() for backend, arch in kinds if backend in axes for c in catalog(backend, arch, name)}
        pairs = sum(n for spec, n in by_spec.items() if spec.key() in keys)
        if pairs:
            out[name] = pairs
    return out
