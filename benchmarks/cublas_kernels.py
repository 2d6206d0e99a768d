"""Which library kernel torch.matmul launches for each shape, and for how long: the names of cuBLAS's
Hopper kernels spell out their tile, cluster, stages and K decomposition (split-K, stream-K), so this
tells where our search should look when cuBLAS wins.

    python benchmarks/cublas_kernels.py out.md --shapes 256x12288x12288,12288x256x16384[-TN]

Needs a CUDA GPU. Times here come from the profiler (one replay); speed claims come from the evaluator.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal2.ir import GemmProblem  # noqa: E402


def launched_kernels(problem: GemmProblem, repeats: int = 5) -> list[tuple[str, float]]:
    """(kernel name, mean microseconds) of every kernel one torch.matmul of this problem launches."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from cudal2.bench.inputs import make_operands  # the evaluator's own operand layout

    ops = make_operands(problem, seed=0, device="cuda")
    a, b = ops.a, ops.b
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            torch.matmul(a, b)
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA" and ev.count:
            rows.append((ev.key, ev.device_time_total / ev.count))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shapes", required=True, help="MxNxK[-LAYOUT], comma-separated")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("cublas_kernels.py profiles torch.matmul on a CUDA GPU, and torch sees none here")

    lines = [f"# Kernels torch.matmul launches ({torch.cuda.get_device_name()}, torch {torch.__version__})", "",
             "| shape | kernel | us (profiler) |", "|---|---|---:|"]
    for shape in args.shapes.split(","):
        dims, _, layout = shape.partition("-")
        problem = GemmProblem.parse(dims, **({"layout": layout} if layout else {}))
        for name, us in launched_kernels(problem):
            lines.append(f"| {shape} | `{name}` | {us:.1f} |")
        print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
