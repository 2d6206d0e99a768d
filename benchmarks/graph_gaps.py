"""Where a short GEMM's time goes under the evaluator's kernel timing. A CUDA graph of N calls
(cycling over input sets that together exceed L2, as the evaluator's offline mode does) is
replayed under the profiler; each call's time is split into the kernels it launched (their own
durations, from the profiler) and the idle gap between one call's last kernel and the next call's
first. On kernels of a few microseconds the gap and the kernel's own prologue are most of the time,
so this tells whether a backend loses there on launch cost or on work.

    python benchmarks/graph_gaps.py out.md \\
        --winners benchmarks/results/search_48_both_backends_h100_2026-11-23.json \\
        --shapes 128x1024x256,4096x512x512 [--spec '{"backend": "cute_dsl", ...}']

Contenders per shape: torch.matmul, the winner of that shape in --winners (if any), and each --spec.
Needs a CUDA GPU. Times here come from the profiler; speed claims come from the evaluator.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # retime_winners (--winners)

from cudal2.ir import GemmProblem, KernelSpec  # noqa: E402


def _contenders(problem: GemmProblem, specs: list[KernelSpec]):
    """(label, call(i), input sets) for the evaluator's torch baseline and each spec the backend
    supports, over rotated input sets."""
    import torch

    from cudal2.bench.baselines import prepare
    from cudal2.bench.inputs import make_operands, rotation_count
    from cudal2.codegen.registry import get_backend

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    sets = [make_operands(problem, seed=s, device="cuda") for s in range(rotation_count(problem, l2))]
    outs = [torch.empty(problem.m, problem.n, device="cuda", dtype=sets[0].a.dtype) for _ in sets]
    yield "torch.matmul", prepare("torch", problem, sets, outs).call, len(sets)
    for spec in specs:
        backend = get_backend(spec.backend)
        why = backend.supports(problem, spec)
        if not why:
            print(f"{problem.shape} {spec.summary()}: not supported ({why.reason})", flush=True)
            continue
        kernel = backend.compile(backend.render(problem, spec))
        yield (f"{spec.backend} {spec.summary()} {spec.epilogue_path}",
               (lambda i, k=kernel: k(sets[i].a, sets[i].b, outs[i], sets[i].bias)), len(sets))


def graph_profile(call, n_sets: int, calls: int = 60) -> dict:
    """Per-call figures of one profiled replay of a graph of `calls` calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from cudal2.bench.timing import _capture  # the evaluator's own capture (warm-up on a side stream)

    g, why = _capture(call, [j % n_sets for j in range(calls)], torch.device("cuda"))
    if g is None:
        raise SystemExit(f"graph capture failed: {why}")
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(20):
        t0.record()
        g.replay()
        t1.record()
        t1.synchronize()
        per_call.append(t0.elapsed_time(t1) * 1e3 / calls)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                     key=lambda e: e.time_range.start)
    per = len(kernels) / calls
    busy = sum(e.time_range.end - e.time_range.start for e in kernels) / calls
    span = (kernels[-1].time_range.end - kernels[0].time_range.start) / calls if kernels else 0.0
    names = sorted({e.name for e in kernels})
    return {"graph_us": statistics.median(per_call), "ops_per_call": per, "kernel_us": busy,
            "gap_us": span - busy, "names": names}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shapes", required=True, help="MxNxK[-LAYOUT], comma-separated")
    ap.add_argument("--winners", help="a search JSON (search_48.py --out's .json): each shape's winner joins")
    ap.add_argument("--spec", action="append", default=[], help="a KernelSpec as JSON (repeatable)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("graph_gaps.py profiles kernels on a CUDA GPU, and torch sees none here")
    from cute_dsl_vs_cublas import parse_shape
    from retime_winners import load_winners

    winners = {(row["m"], row["n"], row["k"]): KernelSpec.from_dict(row["spec_json"])
               for row in (load_winners(Path(args.winners)) if args.winners else [])}
    extra = [KernelSpec.from_dict(json.loads(s)) for s in args.spec]
    lines = [f"# One graph of short GEMMs, taken apart ({torch.cuda.get_device_name()}, torch {torch.__version__})",
             "", "| shape | contender | us per call (graph) | GPU ops per call | kernel us | gap us | kernels |",
             "|---|---|---:|---:|---:|---:|---|"]
    for shape in args.shapes.split(","):
        problem = parse_shape(shape)
        specs = ([winners[problem.shape]] if problem.shape in winners else []) + extra
        for label, call, n_sets in _contenders(problem, specs):
            r = graph_profile(call, n_sets)
            names = ", ".join(f"`{n[:60]}`" for n in r["names"])
            lines.append(f"| {shape} | {label} | {r['graph_us']:.2f} | {r['ops_per_call']:.1f} | "
                         f"{r['kernel_us']:.2f} | {r['gap_us']:.2f} | {names} |")
            print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
