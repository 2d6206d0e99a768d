"""A Runner that replays recorded measurements instead of timing on a GPU.

It answers from a table of (field subset -> kernel ms) rows, first match wins, and falls back
to a model (a function of problem and spec; by default a crude, deterministic roofline-style
estimate). Used to test the search loop, the store and resumption on a CPU, and to compare
proposers offline against a table measured once on a GPU. Its numbers are not GPU timings.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Sequence

from ..bench.results import RECORDED_GPU, DEFAULT_MODE, BaselineResult, CandidateResult, Correctness, Environment, Timing
from ..ir import GemmProblem, KernelSpec, arch_limits
from ..ir.hardware import DEFAULT_ARCH

Row = tuple[dict[str, Any], "float | str"]  # fields to match -> kernel ms, or a failure status


def synthetic_ms(problem: GemmProblem, spec: KernelSpec) -> float:
    """A deterministic stand-in for kernel time: work of the padded tile grid over a throughput
    that rises with tile size, warps and stages up to a point (peaks near 128x256x64, 8 warps,
    4 stages). Shaped so that a search has something to find; no claim about real GPUs."""
    tiles_m = -(-problem.m // spec.block_m)
    tiles_n = -(-problem.n // spec.block_n)
    k_steps = -(-problem.k // (spec.block_k * spec.split_k))
    work = tiles_m * tiles_n * spec.split_k * k_steps * spec.block_m * spec.block_n * spec.block_k
    tile = spec.block_m * spec.block_n
    eff = min(tile, 128 * 256) / (128 * 256)
    eff *= 1.0 - 0.15 * abs(spec.num_warps - 8) / 8
    eff *= 1.0 - 0.08 * abs(spec.stages - 4)
    eff *= 1.0 - 0.1 * abs(spec.block_k - 64) / 64
    sms = arch_limits(spec.arch).sm_count
    waves = -(-(tiles_m * tiles_n * spec.split_k) // sms)
    occupancy = (tiles_m * tiles_n * spec.split_k) / (waves * sms)
    eff = max(eff, 0.02) * (0.3 + 0.7 * occupancy)
    return 2.0 * work / (eff * 700e12) * 1e3 + 0.004


class RecordedRunner:
    """Runner protocol from a table of measurements. `delay_s` sleeps per evaluated spec (to
    test interruption); `log` appends "problem_key spec_key" per measurement to a file (to check
    that nothing is measured twice)."""

    def __init__(self, rows: Iterable[Row] = (), model: Callable[[GemmProblem, KernelSpec], float | str | None]
                 | None = synthetic_ms, baselines: dict[str, float] | Callable[[GemmProblem], dict[str, float]]
                 | None = None, delay_s: float = 0.0, log: str | os.PathLike | None = None):
        self.rows = list(rows)
        self.model = model
        self._baselines = baselines
        self.delay_s = delay_s
        self.log = log
        self.calls: list[KernelSpec] = []
        self.events: list[tuple[str, list[str]]] = []  # ("prefetch" | "evaluate", spec keys), in order

    def lookup(self, problem: GemmProblem, spec: KernelSpec) -> float | str | None:
        fields = {**spec.to_dict(), **{f"problem.{k}": v for k, v in problem.to_dict().items()}}
        for match, value in self.rows:
            if all(fields.get(k) == v for k, v in match.items()):
                return value
        return self.model(problem, spec) if self.model else None

    def prefetch(self, problem: GemmProblem, specs: list[KernelSpec]) -> None:
        """The evaluator starts compiling these for a later evaluate(); here it is only noted."""
        self.events.append(("prefetch", [s.key() for s in specs]))

    def evaluate(self, problem: GemmProblem, specs: list[KernelSpec],
                 modes: tuple[str, ...] = (DEFAULT_MODE,), with_baselines: bool = True) -> list[CandidateResult]:
        self.events.append(("evaluate", [s.key() for s in specs]))
        out = []
        for spec in specs:
            if self.delay_s:
                time.sleep(self.delay_s)
            self.calls.append(spec)
            if self.log is not None:
                with open(self.log, "a") as f:
                    f.write(f"{problem.key()} {spec.key()}\n")
                    f.flush()
                    os.fsync(f.fileno())
            value = self.lookup(problem, spec)
            if value is None or isinstance(value, str):
                status = value if isinstance(value, str) else "compile_error"
                out.append(CandidateResult(spec=spec, status=status, reason="recorded failure"))
                continue
            timing = {m: Timing(kernel_ms=float(value) * (1.15 if m == "server" else 1.0),
                                call_ms=float(value) + 0.01, groups=1) for m in modes}
            out.append(CandidateResult(spec=spec, status="ok", timing=timing,
                                       correctness=Correctness(rel_error=2e-4, bound=1e-3, seeds=1)))
        return out

    def baselines(self, problem: GemmProblem, modes: tuple[str, ...] = (DEFAULT_MODE,)) -> dict[str, BaselineResult]:
        table = self._baselines(problem) if callable(self._baselines) else self._baselines
        if table is None:
            # torch at a fixed share of the synthetic model's default-spec time
            ref = synthetic_ms(problem, KernelSpec(block_m=128, block_n=256, block_k=64, num_warps=8, stages=3))
            table = {"torch": ref * 1.05}
        return {name: BaselineResult(name=name, timing={m: Timing(kernel_ms=ms, call_ms=ms, groups=1) for m in modes})
                for name, ms in table.items()}

    def environment(self) -> Environment | None:
        return Environment(gpu_name=RECORDED_GPU, sm_count=arch_limits(DEFAULT_ARCH).sm_count, driver="-", cuda="-", torch="-", triton="-",
                           cudal2="-", extra={"runner": "RecordedRunner"})


def specs_measured(log: str | os.PathLike) -> Sequence[str]:
    """Lines of a RecordedRunner log: one "problem_key spec_key" per measurement."""
    try:
        with open(log) as f:
            return [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return []
