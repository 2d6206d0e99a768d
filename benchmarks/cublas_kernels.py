"""Which library kernel torch.matmul launches for each shape, and for how long: the names of cuBLAS's
Hopper kernels spell out their tile, cluster, stages and K decomposition (split-K, stream-K), so this
tells where our search should look when cuBLAS wins. With --lt-autotune it also lists what the
evaluator's cuBLASLt-autotune baseline runs (nvmath's autotune picks other kernels than torch's
heuristic), and with --ours SET the kernels each cute_dsl configuration of that set in
cute_dsl_vs_cublas.py launches (split-K: the GEMM and its reduction kernel, each timed).

    python benchmarks/cublas_kernels.py out.md --shapes 256x12288x12288,12288x256x16384[-TN] [--lt-autotune] [--ours deepk]

Needs a CUDA GPU. Times here come from the profiler (one replay); speed claims come from the evaluator.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cute_dsl_vs_cublas (--ours)

from cudal2.ir import GemmProblem  # noqa: E402


def launched_kernels(problem: GemmProblem, kernel=None, repeats: int = 5,
                     baseline: str | None = None) -> list[tuple[str, float]]:
    """(kernel name, mean microseconds) of every kernel one call launches: torch.matmul of this
    problem, `kernel` (a compiled cudal2 kernel) when given, or the evaluator's baseline of that
    name (cudal2.bench.baselines: "cublaslt_autotune" autotunes first, as the evaluator does)."""
    import torch

    from cudal2.bench.baselines import prepare
    from cudal2.bench.inputs import make_operands  # the evaluator's own operand layout

    ops = make_operands(problem, seed=0, device="cuda")
    a, b = ops.a, ops.b
    c = torch.empty(problem.m, problem.n, device="cuda", dtype=a.dtype)
    if baseline is not None:
        prepared = prepare(baseline, problem, [ops], [c])
        if not prepared.available:
            raise SystemExit(f"baseline {baseline}: {prepared.detail}")
        call = lambda: prepared.call(0)  # noqa: E731
    elif kernel is None:
        call = lambda: torch.matmul(a, b)  # noqa: E731
    else:
        call = lambda: kernel(a, b, c, ops.bias)  # noqa: E731
    return profiled_kernels(call, repeats)


def profiled_kernels(call, repeats: int, warmup: int = 3) -> list[tuple[str, float]]:
    """(kernel name, mean microseconds a launch) of every GPU kernel `repeats` calls of call() launch, after
    `warmup` unprofiled calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            call()
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA" and ev.count:
            rows.append((ev.key, ev.device_time_total / ev.count))
    return rows


def _short(name: str) -> str:
    """A kernel's name without its return type, template arguments and parameter list (cuBLASLt's
    split-K reduction spells out 15 template arguments and 20 parameters)."""
    if not name.startswith("void "):  # a plain name ("nvjet_sm90_...", "Memset (Device)")
        return name
    name = name.removeprefix("void ").split("(")[0]
    return name.split("<")[0] + ("<…>" if "<" in name else "")


def our_kernels(problem: GemmProblem, config_set: str | None, only=None):
    """(label, compiled kernel) for each configuration of a cute_dsl_vs_cublas.py set this problem takes
    (those named in `only`, when given)."""
    if not config_set:
        return
    from cudal2.codegen.cute_dsl import CuteDslBackend
    from cudal2.ir import KernelSpec
    from cute_dsl_vs_cublas import BASE, CONFIG_SETS

    backend = CuteDslBackend()
    for label, overrides in CONFIG_SETS[config_set].items():
        if only and label not in only:
            continue
        spec = KernelSpec(**{**BASE, **overrides})
        if not backend.supports(problem, spec):
            continue
        yield label, backend.compile(backend.render(problem, spec))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shapes", required=True, help="MxNxK[-LAYOUT], comma-separated")
    ap.add_argument("--lt-autotune", action="store_true", help="also profile the evaluator's cuBLASLt-autotune "
                    "baseline (nvmath-python)")
    ap.add_argument("--ours", metavar="SET", help="also profile the cute_dsl configurations of this set "
                    "(a --configs name of cute_dsl_vs_cublas.py)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("cublas_kernels.py profiles torch.matmul on a CUDA GPU, and torch sees none here")
    from cute_dsl_vs_cublas import parse_shape

    lines = [f"# Kernels torch.matmul launches ({torch.cuda.get_device_name()}, torch {torch.__version__})", "",
             "| shape | kernel | us (profiler) |", "|---|---|---:|"]
    for shape in args.shapes.split(","):
        problem = parse_shape(shape)
        for name, us in launched_kernels(problem):
            lines.append(f"| {shape} | `{_short(name)}` | {us:.1f} |")
        if args.lt_autotune:
            for name, us in launched_kernels(problem, baseline="cublaslt_autotune"):
                lines.append(f"| {shape} | cuBLASLt autotune: `{_short(name)}` | {us:.1f} |")
        for label, kernel in our_kernels(problem, args.ours):
            for name, us in launched_kernels(problem, kernel):
                lines.append(f"| {shape} | cudal2 {label}: `{_short(name)}` | {us:.1f} |")
        print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
