"""One call each of torch.matmul and of a roofline run's winning kernel on small-M shapes, checked
against the evaluator's reference, for Nsight Compute to take apart (times under ncu are not speed
claims: it fixes the clocks and replays each kernel):

    ncu --target-processes all -k regex:"matmul_kernel|splitk|nvjet|gemv|gemm|xmma" -c 16 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \\
        python3 benchmarks/ncu_small_m.py 1x9216x3072-float16-NT 128x9216x3072-float16-NT \\
        [--results benchmarks/results/roofline_h200_2026-11-29.json]

Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("labels", nargs="+", help="problem labels of the roofline run's rows (MxNxK-dtype-layout)")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks/results/roofline_h200_2026-11-29.json")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("error: ncu_small_m.py runs kernels on a CUDA GPU, and torch sees none here")
    from crosscheck_winners import problem_of

    from cudal2.bench.correctness import expected_for, rel_error
    from cudal2.bench.inputs import make_operands
    from cudal2.codegen import get_backend
    from cudal2.ir import KernelSpec

    rows = {r.get("label", r["shape"]): r for r in json.loads(args.results.read_text())["rows"]}
    for label in args.labels:
        if label not in rows or "spec_json" not in rows[label]:
            raise SystemExit(f"error: {args.results} has no winner for {label}; name one of its rows' labels")
        problem, spec = problem_of(label), KernelSpec.from_json(rows[label]["spec_json"])
        backend = get_backend(spec.backend)
        kernel = backend.compile(backend.render(problem, spec))
        ops = make_operands(problem, 0, "cuda")
        expected = expected_for(problem, ops)
        out = torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda")
        for _ in range(2):  # the first call of a kernel may load its module
            torch.matmul(ops.a, ops.b, out=out)
            kernel(ops.a, ops.b, out)
        torch.cuda.synchronize()
        print(f"{label}: {spec.summary()}, error {rel_error(out, expected.ref):.3g} (bound {expected.bound:.3g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
