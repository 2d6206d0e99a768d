"""The `cudal2 bench` table: each candidate against every baseline, per timing mode.

    table = bench_table(problem, specs, modes=("offline",), baselines=DEFAULT_BASELINES)
    run_bench("4096x4096x4096", backend="triton", spec_file=None, modes=("offline", "server"))

Columns: time (kernel time from CUDA-graph replay, microseconds), call time, TFLOP/s on
kernel time, relative error, and the speedup over each baseline on kernel time (>1: the
candidate is faster). Baselines are rows too, so their times and availability are visible.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from ..ir import GemmProblem, KernelSpec
from .evaluator import DEFAULT_BASELINES, evaluate
from .results import DEFAULT_MODE, EvalReport


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def _tflops(problem: GemmProblem, ms: float | None) -> str:
    return "-" if not ms else f"{problem.flops / (ms * 1e-3) / 1e12:.1f}"


def table_from_report(report: EvalReport, modes: Iterable[str] = (DEFAULT_MODE,)):
    """A rich Table of a finished report (no GPU needed)."""
    from rich.table import Table

    problem, modes = report.problem, tuple(modes)
    env = report.environment
    title = f"{problem.label()} on {env.gpu_name if env else 'unknown GPU'}"
    t = Table(title=title, caption="time: kernel time (CUDA-graph replay), us per GEMM; speedup = baseline / candidate "
                                   "kernel time")
    names = list(report.baselines)
    for col in ("contender", "mode", "status", "time us", "call us", "TFLOP/s", "rel err"):
        t.add_column(col, justify="left" if col in ("contender", "status", "mode") else "right")
    for b in names:
        t.add_column(f"vs {b}", justify="right")
    for b in report.baselines.values():
        for m in modes:
            tm = b.timing.get(m)
            err = f"{b.correctness.rel_error:.1e}" if b.correctness else "-"
            status = "baseline" if b.available else "unavailable"
            t.add_row(b.name, m, status, _us(tm.kernel_ms if tm else None), _us(tm.call_ms if tm else None),
                      _tflops(problem, tm.kernel_ms if tm else None), err, *["" for _ in names])
    for c in report.candidates:
        label = c.name or c.spec.backend
        err = f"{c.correctness.rel_error:.1e}" if c.correctness else "-"
        for m in modes:
            tm = c.timing.get(m)
            status = c.status if c.ok else f"{c.status}: {c.reason[:60]}"
            speed = []
            for b in names:
                s = report.speedup(c, b, m)
                speed.append("-" if s is None else f"{s:.3f}")
            t.add_row(label, m, status, _us(tm.kernel_ms if tm else None), _us(tm.call_ms if tm else None),
                      _tflops(problem, tm.kernel_ms if tm else None), err, *speed)
    return t


def bench_report(problem, specs: list[KernelSpec], modes: Iterable[str] = (DEFAULT_MODE,),
                 baselines: Iterable[str] = DEFAULT_BASELINES, **config) -> EvalReport:
    """Evaluate specs against the baselines (config: EvalConfig fields such as device)."""
    return evaluate(GemmProblem.parse(problem), list(specs), mode=tuple(modes), baselines=tuple(baselines), **config)


def bench_table(problem, specs: list[KernelSpec], modes: Iterable[str] = (DEFAULT_MODE,),
                baselines: Iterable[str] = DEFAULT_BASELINES, **config):
    """Evaluate specs on the GPU and return the rich Table (see table_from_report)."""
    modes = tuple(modes)
    return table_from_report(bench_report(problem, specs, modes, baselines, **config), modes)


def load_specs(spec_file: str | Path) -> list[KernelSpec]:
    """A JSON file with one spec object or a list of them."""
    data = json.loads(Path(spec_file).read_text())
    items = data if isinstance(data, list) else [data]
    return [KernelSpec.model_validate(d) for d in items]


def default_specs(backend: str) -> list[KernelSpec]:
    """Specs to bench when none are given: a few classic tiles (the search layer proposes better
    ones; bench/ does not import search/, data flows the other way)."""
    tiles = [(128, 128, 64, 4, 3), (128, 256, 64, 8, 3), (64, 128, 64, 4, 4)]
    out = []
    for bm, bn, bk, w, s in tiles:
        try:
            out.append(KernelSpec(backend=backend, block_m=bm, block_n=bn, block_k=bk, num_warps=w, stages=s))
        except Exception:  # noqa: BLE001 - a backend that does not support this tile
            pass
    return out or [KernelSpec(backend=backend)]


def run_bench(shape, backend: str = "triton", spec_file: str | Path | None = None,
              modes: Iterable[str] = (DEFAULT_MODE,), baselines: Iterable[str] = DEFAULT_BASELINES,
              dtype: str = "float16", layout: str = "NN", specs: list[KernelSpec] | None = None,
              console=None, **config) -> EvalReport:
    """What `cudal2 bench SHAPE [--backend B] [--spec FILE] [--mode M]` does: evaluate, print the
    table, return the report."""
    from rich.console import Console

    problem = GemmProblem.parse(shape, dtype=dtype, layout=layout)
    if specs is None:
        specs = load_specs(spec_file) if spec_file else default_specs(backend)
    modes = tuple(modes)
    report = bench_report(problem, specs, modes, baselines, **config)
    (console or Console()).print(table_from_report(report, modes))
    return report
