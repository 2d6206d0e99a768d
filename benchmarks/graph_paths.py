"""One winner in op_served.py's graph harness, three ways: F.linear against cudal2.linear, against the same kernel's
bound run called directly (no op), and against torch.matmul(x, w.t()) (torch against itself, near enough: the
harness's own spread). Whether the op's graph path costs a served kernel anything, apart from the harness.

    python benchmarks/graph_paths.py OUT.md --winners benchmarks/results/crosscheck_winners_chain_h200_2026-11-30.json
        --shape 1x3072x3072 [--reps 2]

The table holds every winner of the file (as op_served.py sets it); the shape's operands, rounds and call pattern
are op_served.py's (graph_figures: CUDA graphs of the chain pattern, GRAPH_MIN_ROUNDS rounds over its placements).
The three contenders are timed in turn, --reps times. Writes OUT.md and OUT.json. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--winners", type=Path, required=True, help="a benchmarks/crosscheck_winners.py run's .json")
    ap.add_argument("--shape", required=True, help="MxNxK of a winners row (fp16, layout NT)")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("graph_paths.py times CUDA graphs, and torch sees none here; run it on a GPU")
    try:
        winners = json.loads(args.winners.read_text())
        row = next(r for r in winners["rows"] if r["shape"].split("-")[0] == args.shape)
    except (OSError, ValueError, KeyError, StopIteration) as e:
        sys.exit(f"graph_paths.py: no row {args.shape} in {args.winners} ({type(e).__name__}); pass a "
                 "crosscheck_winners.py .json and one of its shapes")

    import cudal2
    from cudal2 import ops
    from cudal2.bench.environment import record
    from op_served import GRAPH_MIN_ROUNDS, graph_figures, problem_of, table_of

    gpu = torch.cuda.get_device_name()
    cudal2.set_table(table_of(winners["rows"], gpu, winners.get("date", "")))
    problem = problem_of(row["shape"])
    m, n, k = problem.shape
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16) / k ** 0.5
    with torch.no_grad():
        cudal2.linear(x, w)
    kernel = ops.tuned_kernel(problem, gpu, 0.0)
    if kernel is None:
        sys.exit(f"graph_paths.py: the op serves no kernel for {args.shape} in graphs; pick a shape it serves")
    run = kernel.bind(m, n, k, x.device)

    def bound(a, b):
        d = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)
        run(a, b, d, None)
        return d

    contenders = {"cudal2.linear": cudal2.linear, "the bound run": bound,
                  "torch.matmul(x, w.t())": lambda a, b: torch.matmul(a, b.t())}
    rows = []
    for rep in range(args.reps):
        for name, ours in contenders.items():
            fig = graph_figures(x, w, GRAPH_MIN_ROUNDS, 20, "chain", ours)
            rows.append({"rep": rep, "contender": name, "ratio": fig["ratio"], "q1": fig["ratio_q1"],
                         "q3": fig["ratio_q3"], "f_linear_us": fig["torch"]["us"], "contender_us": fig["cudal2"]["us"]})
            print(rows[-1], flush=True)
    env = record()
    command = "python benchmarks/graph_paths.py " + " ".join(sys.argv[1:])
    lines = [f"# {row['shape']}'s winner in op_served.py's graph harness, three ways ({env['date']})", "",
             f"`{command}`", "", f"{env['gpu_name']} ({env['gpu_uuid']}); torch {env['torch']}, Triton {env['triton']}. "
             f"Winner `{row.get('spec', '?')}`, searched {row.get('search', float('nan')):.3f}, evaluator "
             f"{row.get('eval_chain', float('nan')):.3f} (chain). Ratio: F.linear time / the contender's, the median "
             "of the per-round ratios (quartiles).", "",
             "| rep | contender | F.linear / contender | F.linear us | contender us |", "|---:|---|---:|---:|---:|"]
    lines += [f"| {r['rep']} | {r['contender']} | {r['ratio']:.3f} ({r['q1']:.3f} to {r['q3']:.3f}) | "
              f"{r['f_linear_us']:.2f} | {r['contender_us']:.2f} |" for r in rows]
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "env": env, "shape": row["shape"],
                                                         "rows": rows}, indent=1, default=str))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
