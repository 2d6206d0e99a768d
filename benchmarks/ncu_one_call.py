"""One call each of torch.matmul and of chosen cute_dsl configurations, nothing else, for Nsight
Compute (which is on the lent H100s) to take apart kernel by kernel:

    ncu --target-processes all -k regex:"nvjet|kernel_cutlass_kernel" -c 4 --section SpeedOfLight \\
        --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \\
        python3 benchmarks/ncu_one_call.py 512x512x12288 --set deepk_clusters --config "64x128x64 w8 s8 c2x1 split4"

Each kernel runs twice (the first call of a DSL kernel loads its module) and the result is checked
with the evaluator's reference and error bound, so a profile is never taken of a wrong kernel. Times under ncu are not
speed claims: ncu fixes the clocks and replays each kernel; the evaluator's times are the ones to quote.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", help="MxNxK[-LAYOUT]")
    ap.add_argument("--set", required=True, help="a --configs name of cute_dsl_vs_cublas.py")
    ap.add_argument("--config", action="append", default=None, help="a configuration of that set (repeatable; "
                    "default: all of them)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("ncu_one_call.py runs kernels on a CUDA GPU, and torch sees none here")
    from cublas_kernels import our_kernels
    from cute_dsl_vs_cublas import CONFIG_SETS, parse_shape

    from cudal2.bench.correctness import expected_for, rel_error
    from cudal2.bench.inputs import make_operands

    if args.set not in CONFIG_SETS:
        raise SystemExit(f"no configuration set {args.set!r}; the sets are {', '.join(sorted(CONFIG_SETS))}")
    unknown = set(args.config or ()) - set(CONFIG_SETS[args.set])
    if unknown:
        raise SystemExit(f"{sorted(unknown)} not in set {args.set!r}: {', '.join(CONFIG_SETS[args.set])}")
    problem = parse_shape(args.shape)
    ops = make_operands(problem, seed=0, device="cuda")
    expected = expected_for(problem, ops)  # the evaluator's fp32 reference and error bound
    out = torch.empty(problem.m, problem.n, device="cuda", dtype=ops.a.dtype)
    for _ in range(2):
        torch.matmul(ops.a, ops.b)
    for label, kernel in our_kernels(problem, args.set, only=args.config):
        for _ in range(2):
            kernel(ops.a, ops.b, out, ops.bias)
        torch.cuda.synchronize()
        err = rel_error(out, expected.ref)
        print(f"{label}: relative error {err:.1e} (bound {expected.bound:.1e})")
        if not err <= expected.bound:
            raise SystemExit(f"{label} computed a wrong product (relative error {err:.1e}, over the evaluator's "
                             f"bound {expected.bound:.1e}); not worth profiling")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
