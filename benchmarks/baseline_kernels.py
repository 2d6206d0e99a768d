"""Whether the evaluator's torch baseline runs what a model runs: the GPU kernels torch.matmul(x, w.t()) (the
baseline's call, layout NT) and F.linear(x, w) (nn.Linear's) launch on each shape of a winners file, with their mean
GPU time per call (torch profiler, eager, 20 calls each after 5 unprofiled).

    python benchmarks/baseline_kernels.py OUT.md --winners benchmarks/results/crosscheck_winners_chain_h200_2026-11-30.json

Same kernels on a shape: any difference in their timed speed is the harness's, not the call's
(benchmarks/graph_paths.py --contenders matmul,linear reads both in the op's graph harness). Writes OUT.md and
OUT.json. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))  # cublas_kernels

from _outputs import write_results  # noqa: E402

CALLS, WARMUP = 20, 5


def problems_of(winners: dict) -> list[tuple[str, int, int, int]]:
    """(label, M, N, K) of each row (ValueError naming a row whose shape is not MxNxK)."""
    out = []
    for row in winners["rows"]:
        label = str(row["shape"])
        try:
            m, n, k = (int(v) for v in label.split("-")[0].split("x"))
        except ValueError:
            raise ValueError(f"row shape {label!r} is not MxNxK[-dtype-layout]") from None
        out.append((label, m, n, k))
    return out


def kernels_of(call) -> dict[str, dict]:
    """{kernel name: {"us": mean GPU time a launch}} of CALLS calls of call() (cublas_kernels.profiled_kernels)."""
    from cublas_kernels import profiled_kernels

    return {name: {"us": us} for name, us in profiled_kernels(call, CALLS, WARMUP)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--winners", type=Path, required=True, help="a benchmarks/crosscheck_winners.py run's .json")
    args = ap.parse_args()
    try:
        problems = problems_of(json.loads(args.winners.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"baseline_kernels.py: {args.winners}: {str(e).splitlines()[0][:200]}; pass a "
                 "crosscheck_winners.py .json")
    import torch
    from torch.nn import functional as F

    if not torch.cuda.is_available():
        sys.exit("baseline_kernels.py profiles CUDA kernels, and torch sees none here; run it on a GPU")
    from cudal2.bench.environment import record

    rows = []
    for label, m, n, k in problems:
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        linear, matmul = kernels_of(lambda: F.linear(x, w)), kernels_of(lambda: torch.matmul(x, w.t()))
        rows.append({"shape": label, "same": sorted(linear) == sorted(matmul), "F.linear": linear,
                     "torch.matmul": matmul})
        print(rows[-1], flush=True)
        x = w = None  # free the operands before the next shape
        torch.cuda.empty_cache()
    env = record()
    command = "python benchmarks/baseline_kernels.py " + " ".join(sys.argv[1:])
    same = sum(r["same"] for r in rows)
    names = lambda ks: "<br>".join(f"`{n[:80]}` {v['us']:.2f}" for n, v in ks.items())  # noqa: E731
    lines = [f"# The kernels of torch.matmul(x, w.t()) and F.linear(x, w) ({env['date']})", "", f"`{command}`", "",
             f"{env['gpu_name']} ({env['gpu_uuid']}); torch {env['torch']}. Mean GPU us per launch, torch profiler, "
             f"{CALLS} eager calls each.", "", f"**The same kernels on {same} of {len(rows)} shapes.**", "",
             "| shape | same | F.linear | torch.matmul(x, w.t()) |", "|---|---|---|---|"]
    lines += [f"| {r['shape']} | {'yes' if r['same'] else '**no**'} | {names(r['F.linear'])} | "
              f"{names(r['torch.matmul'])} |" for r in rows]
    write_results(args.out, lines, command, env, rows)
    print("\n".join(lines[-len(rows) - 2:]))


if __name__ == "__main__":
    main()
