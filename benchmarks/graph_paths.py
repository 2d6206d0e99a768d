"""One winner in op_served.py's graph harness, three ways: F.linear against cudal2.linear, against the same kernel's
bound run called directly (no op), against torch.matmul(x, w.t()) (the evaluator's torch baseline) and against
F.linear itself (linear: an A/A, the harness's own spread; a matmul ratio apart from it is the baseline's own). Whether the op's graph path costs a served kernel anything, apart from the harness.

    python benchmarks/graph_paths.py OUT.md --winners benchmarks/results/crosscheck_winners_chain_h200_2026-11-30.json
        --shape 1x3072x3072 [--reps 2] [--contenders op,bound,matmul]
    python benchmarks/graph_paths.py OUT.md --winners W.json --shape all --contenders matmul --reps 1

--shape: one MxNxK of the file, several (comma-separated), or all. The table holds every winner of the file (as
op_served.py sets it); each shape's operands, rounds and call pattern are op_served.py's (graph_figures: CUDA graphs
of the chain pattern, GRAPH_MIN_ROUNDS rounds over its placements). The contenders (op: cudal2.linear; bound: the
served kernel's bound run; matmul: torch.matmul(x, w.t()); linear: F.linear in a lambda, as matmul is called) are
timed in turn, --reps times; op and bound only where
the op serves the shape in graphs. Writes OUT.md and OUT.json. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _outputs import write_results  # noqa: E402


CONTENDERS = ("op", "bound", "matmul", "linear")


def shapes_of(winners: dict, shape: str) -> list[dict]:
    """The winners rows --shape names, in the file's order (ValueError naming a shape the file lacks)."""
    rows = {r["shape"].split("-")[0]: r for r in winners["rows"]}
    if shape == "all":
        return list(rows.values())
    wanted = [s.strip() for s in shape.split(",") if s.strip()]
    missing = [s for s in wanted if s not in rows]
    if missing or not wanted:
        raise ValueError(f"no row {', '.join(missing) or '(none named)'}")
    return [rows[s] for s in wanted]


def contenders_of(text: str) -> tuple[str, ...]:
    names = tuple(c.strip() for c in text.split(",") if c.strip())
    unknown = [c for c in names if c not in CONTENDERS]
    if unknown or not names:
        raise ValueError(f"unknown contender {', '.join(unknown) or '(none named)'}; known: {', '.join(CONTENDERS)}")
    return names


def paths_of(row: dict, gpu: str, wanted: tuple[str, ...]) -> tuple[dict, "object", "object"]:
    """({label: call(x, w)} of the wanted contenders this shape has, x, w)."""
    import torch

    import cudal2
    from cudal2 import ops
    from op_served import problem_of

    problem = problem_of(row["shape"])
    m, n, k = problem.shape
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16) / k ** 0.5
    with torch.no_grad():
        cudal2.linear(x, w)
    kernel = ops.tuned_kernel(problem, gpu, ops.GRAPH_MIN_SAVING_US)
    paths = {}
    if kernel is not None and "op" in wanted:
        paths["cudal2.linear"] = cudal2.linear
    if kernel is not None and "bound" in wanted:
        run = kernel.bind(m, n, k, x.device)

        def bound(a, b):
            d = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)
            run(a, b, d, None)
            return d
        paths["the bound run"] = bound
    if "matmul" in wanted:
        paths["torch.matmul(x, w.t())"] = lambda a, b: torch.matmul(a, b.t())
    if "linear" in wanted:
        paths["F.linear (A/A)"] = lambda a, b: torch.nn.functional.linear(a, b)
    return paths, x, w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--winners", type=Path, required=True, help="a benchmarks/crosscheck_winners.py run's .json")
    ap.add_argument("--shape", required=True, help="MxNxK of a winners row, several comma-separated, or all")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help=f"comma-separated: {', '.join(CONTENDERS)}")
    args = ap.parse_args()
    try:
        winners = json.loads(args.winners.read_text())
        rows = shapes_of(winners, args.shape)
        wanted = contenders_of(args.contenders)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"graph_paths.py: {args.winners}: {str(e).splitlines()[0][:200]}; pass a crosscheck_winners.py "
                 ".json, shapes of its rows (or all) and contenders among " + ", ".join(CONTENDERS))
    if args.reps < 1:
        sys.exit("graph_paths.py: --reps takes a number of at least 1")
    import torch

    if not torch.cuda.is_available():
        sys.exit("graph_paths.py times CUDA graphs, and torch sees none here; run it on a GPU")

    import cudal2
    from cudal2.bench.environment import record
    from op_served import GRAPH_MIN_ROUNDS, graph_figures, table_of

    gpu = torch.cuda.get_device_name()
    cudal2.set_table(table_of(winners["rows"], gpu, winners.get("date", "")))
    results = []
    for row in rows:
        paths, x, w = paths_of(row, gpu, wanted)
        for rep in range(args.reps):
            for name, ours in paths.items():
                fig = graph_figures(x, w, GRAPH_MIN_ROUNDS, 20, "chain", ours)
                results.append({"shape": row["shape"], "rep": rep, "contender": name, "ratio": fig["ratio"],
                                "q1": fig["ratio_q1"], "q3": fig["ratio_q3"], "f_linear_us": fig["torch"]["us"],
                                "contender_us": fig["cudal2"]["us"], "spec": row.get("spec"),
                                "search": row.get("search"), "eval_chain": row.get("eval_chain")})
                print(results[-1], flush=True)
        torch.cuda.empty_cache()
    env = record()
    command = "python benchmarks/graph_paths.py " + " ".join(sys.argv[1:])
    lines = [f"# Search winners in op_served.py's graph harness, each path against F.linear ({env['date']})", "",
             f"`{command}`", "", f"{env['gpu_name']} ({env['gpu_uuid']}); torch {env['torch']}, Triton {env['triton']}. "
             "Ratio: F.linear time / the contender's, the median of the per-round ratios (quartiles); searched and "
             "evaluator (chain): the winners file's figures over torch.matmul.", "",
             "| shape | winner | searched | evaluator | rep | contender | F.linear / contender | F.linear us | "
             "contender us |", "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    number = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else "-"  # noqa: E731
    lines += [f"| {r['shape']} | `{r['spec'] or '-'}` | {number(r['search'])} | {number(r['eval_chain'])} | {r['rep']} | "
              f"{r['contender']} | {r['ratio']:.3f} ({r['q1']:.3f} to {r['q3']:.3f}) | {r['f_linear_us']:.2f} | "
              f"{r['contender_us']:.2f} |" for r in results]
    write_results(args.out, lines, command, env, results)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
