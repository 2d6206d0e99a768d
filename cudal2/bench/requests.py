"""What the evaluator sends its GPU worker: a candidate's reference, a timing request, a batch of
checks. Plain data, picklable across the process boundary."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from ..ir import GemmProblem, KernelSpec


@dataclass
class KernelRef:
    """A candidate as the worker receives it: a spec (with the Source the compile pool
    rendered, if any), or a prebuilt kernel: a picklable callable or "module:attr"."""

    name: str
    spec: KernelSpec | None = None
    source: Any = None  # codegen.base.Source
    kernel: Any = None

    @property
    def key(self) -> str:
        if self.spec is not None:
            return f"{self.name}:{self.spec.key()}:{getattr(self.source, 'digest', '')}"
        return f"{self.name}:{self.kernel if isinstance(self.kernel, str) else id(self.kernel)}"


@dataclass
class TimeRequest:
    problem: GemmProblem
    candidates: list[KernelRef]
    baselines: tuple[str, ...]
    modes: tuple[str, ...]
    timing: Any  # timing.TimingConfig
    policy: Any  # correctness.AccuracyPolicy
    seed: int = field(default_factory=lambda: secrets.randbits(31))


@dataclass
class CheckBatch:
    """The checks of many candidates on one problem, in one request: the worker allocates the
    operands and the output once and writes the request's fresh seeds into them anew for each
    candidate (whose references are taken once and shared), runs the
    long-K probe where one is given, then the stream-order check of the survivors behind shared
    delays. It answers one ("checked", name, status, reason, correctness, compile_s) per candidate
    as it goes, then ("ok", {name: stream-order outcome}) (see _check_many)."""

    problem: GemmProblem
    candidates: list[KernelRef]
    policy: Any  # correctness.AccuracyPolicy
    probes: dict[str, tuple[GemmProblem, KernelRef]] = field(default_factory=dict)  # name -> long-K variant
    seed: int = field(default_factory=lambda: secrets.randbits(31))
    stream_chunk: int = 16  # kernels launched behind one stream-order delay
