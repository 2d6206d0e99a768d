"""Does the op deliver its kernel's speed? A search's winner called directly (as the evaluator and the crosscheck
harness call it) and through cudal2.linear, with torch.matmul(out=) (the search's baseline) and F.linear (the
op's), all four in one chain harness of CUDA graphs on the same operands.

    python benchmarks/served_path.py OUT.md --winners RUN.json [--shapes 1x3072x3072,...] [--rounds 100]

RUN.json: a benchmarks/crosscheck_winners.py run (op_served.py's --winners). The op's table holds every winner of
RUN.json (op_served.table_of). Per shape (fp16, layout NT), crosscheck_winners.chain_harness_rounds over its
placements, each with input sets of its own (the evaluator's operands, crosscheck_winners.winner_placements'
seeds): per set i, A (M, K) and B (K, N), a view of W (N, K); the contenders are torch.matmul(A, B, out=),
the kernel(A, B, out), the kernel(A, B) allocating its output (where the op's and F.linear's lie), F.linear(A, W)
and cudal2.linear(A, W). Reported: each contender's median us a call, and
the two ratios the search and the op's verdict read: torch.matmul over the kernel (as searched) and F.linear over
cudal2.linear (as served). OUT.md and OUT.json. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _outputs import write_results  # noqa: E402

CONTENDERS = ("torch.matmul", "kernel", "kernel, new output", "F.linear", "cudal2.linear")


def report(rows: list[dict], env: dict, command: str) -> list[str]:
    lines = [f"# A winner called directly and through the op, one chain harness ({env.get('date', '?')})", "",
             f"`{command}`", "",
             f"{env.get('gpu_name', '?')} {env.get('gpu_uuid', '')}; torch {env.get('torch', '?')}, Triton "
             f"{env.get('triton', '?')}. Median us a call over the rounds (chain harness, placements as in "
             "crosscheck_winners.py). Searched: the search's confirmed speedup in RUN.json.", "",
             "| shape | spec | " + " | ".join(f"{c} us" for c in CONTENDERS)
             + " | torch.matmul / kernel | F.linear / cudal2.linear | searched |",
             "|---|---|" + "---:|" * (len(CONTENDERS) + 3)]
    for r in rows:
        us = r["us"]
        lines.append(f"| {r['shape']} | `{r['spec']}` | " + " | ".join(f"{us[c]:.2f}" for c in CONTENDERS)
                     + f" | {us['torch.matmul'] / us['kernel']:.3f} | {us['F.linear'] / us['cudal2.linear']:.3f} "
                     f"| {r['search']:.3f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--winners", type=Path, required=True)
    ap.add_argument("--shapes", default="1x3072x3072", help="M x N x K of RUN.json's rows, comma-separated")
    ap.add_argument("--rounds", type=int, default=100)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("served_path.py times CUDA graphs, and torch sees none here; run it on a GPU")
    from torch.nn import functional as F

    import cudal2
    from crosscheck_winners import chain_harness_rounds, problem_of
    from cudal2.bench.environment import record
    from cudal2.bench.inputs import make_operands, rotation_count
    from cudal2.codegen import get_backend
    from cudal2.ir import KernelSpec
    from op_served import table_of

    winners = json.loads(args.winners.read_text())
    cudal2.set_table(table_of(winners["rows"], torch.cuda.get_device_name()))
    wanted = args.shapes.split(",")
    rows = []
    for row in winners["rows"]:
        if row["shape"].split("-")[0] not in wanted or "spec_json" not in row:
            continue
        problem, spec = problem_of(row["shape"]), KernelSpec.from_json(row["spec_json"])
        backend = get_backend(spec.backend)
        kernel = backend.compile(backend.render(problem, spec))
        n_sets = rotation_count(problem, torch.cuda.get_device_properties(0).L2_cache_size, memory_budget=8 << 30)

        def placement(p: int, kernel=kernel, problem=problem, n_sets=n_sets):
            # (winner_placements' seeds and outputs: the evaluator's operands)
            sets = [make_operands(problem, 100 + 1000 * p + i, "cuda") for i in range(n_sets)]
            outs = [torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda") for _ in range(n_sets)]
            return ({"torch.matmul": lambda i: torch.matmul(sets[i].a, sets[i].b, out=outs[i]),
                     "kernel": lambda i: kernel(sets[i].a, sets[i].b, outs[i]),
                     # its output allocated by the call, in the graph's pool, as the op's and F.linear's are
                     "kernel, new output": lambda i: kernel(sets[i].a, sets[i].b),
                     "F.linear": lambda i: F.linear(sets[i].a, sets[i].b.t()),
                     "cudal2.linear": lambda i: cudal2.linear(sets[i].a, sets[i].b.t())}, [s.a for s in sets])

        with torch.no_grad():
            times = chain_harness_rounds(placement, args.rounds)
        us = {name: statistics.median(xs) * 1e3 for name, xs in times.items()}
        rows.append({"shape": row["shape"], "spec": row.get("spec", ""), "search": row["search"], "us": us,
                     "rounds_ms": times})
        print(report(rows[-1:], {}, "")[-1], flush=True)
    env = record()
    command = "python3 benchmarks/served_path.py " + " ".join(sys.argv[1:])
    write_results(args.out, report(rows, env, command), command, env, rows)


if __name__ == "__main__":
    main()
