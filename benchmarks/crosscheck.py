"""The evaluator's figures against two clocks of its own: does a kernel's speedup over torch.matmul
read the same when someone else times it?

    python benchmarks/crosscheck.py OUT.md [--shapes N] [--max-seconds 540]

For each shape, one kernel (the rules proposer's first proposal, as a search would time it first)
and torch.matmul are timed four ways:
- evaluator offline: cudal2's evaluator, checks first, CUDA-graph groups of ~2 ms interleaved with
  the torch baseline over rotated input sets (its default protocol);
- evaluator sustained: each contender alone until the power limit has set the clock, then timed;
- do_bench_cudagraph: triton.testing.do_bench_cudagraph of one call on one input set (L2 warm,
  Triton's own clock);
- rotated graph: a plain CUDA graph of back-to-back calls over input sets together larger than
  twice L2, the kernel's graph and torch's replayed alternately, 25 rounds, median per call; torch
  both as the evaluator calls it (matmul into a given output) and allocating its output.

Each reports ratio = torch time / kernel time. The evaluator agrees with a clock where the two ratios
are within 2%. The shapes: the three large LLM shapes an outside harness disputed, then validation
serving shapes (cudal2/data/shapes/split.json) spread over sizes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from cudal2 import GemmProblem  # noqa: E402

DISPUTED = ("5120x5120x5120", "3000x8192x8192", "13824x5120x640")
AGREE = 0.02


def shapes(n: int) -> list[GemmProblem]:
    from cudal2 import shapes as shape_sets

    out = [GemmProblem.parse(s, layout="NT") for s in DISPUTED]
    val = sorted(shape_sets.shapes("serving", "validation"), key=lambda s: s.m * s.n * s.k)
    val = [s for s in val if s.m >= 16]  # below that both sides are launch-bound: nothing to compare
    step = max(1, len(val) // max(1, n - len(out)))
    out += [s.problem() for s in val[::step]][: n - len(out)]
    return out


def rotated_graph_ms(calls: dict, n_sets: int, rounds: int = 25) -> dict[str, float]:
    """name -> median ms per call of a graph of back-to-back calls over the rotated sets,
    graphs replayed alternately (order flipped every round)."""
    import torch

    graphs, per = {}, {}
    for name, call in calls.items():
        for i in range(n_sets):  # warm-up (and the allocator's first allocations) outside capture
            call(i)
        torch.cuda.synchronize()
        reps = 1
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(n_sets):
            call(i)
        end.record()
        end.synchronize()
        one = start.elapsed_time(end) / n_sets
        reps = max(1, min(64, int(2.0 / max(one, 1e-4) / n_sets)))  # a replay of about 2 ms
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                for i in range(n_sets):
                    call(i)
        graphs[name], per[name] = g, reps * n_sets
    samples: dict[str, list[float]] = {n: [] for n in calls}
    names = list(calls)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graphs[name].replay()
            b.record()
            b.synchronize()
            samples[name].append(a.elapsed_time(b) / per[name])
    return {n: statistics.median(v) for n, v in samples.items()}


def measure(problem: GemmProblem, ev) -> dict:
    import torch
    from triton.testing import do_bench_cudagraph

    from cudal2.bench.inputs import make_operands, rotation_count
    from cudal2.codegen import get_backend
    from cudal2.proposers.rules import RulesProposer

    spec = RulesProposer(backends=("triton",)).propose(problem, n=1)[0].spec
    row = {"shape": problem.label(), "spec": spec.summary()}
    res = ev.evaluate(problem, [spec], modes=("offline", "sustained"))[0]
    base = ev.baselines(problem, ("offline", "sustained"))
    if not res.ok:
        row["status"] = f"{res.status}: {res.reason[:100]}"
        return row
    for mode in ("offline", "sustained"):
        t = base["torch"].kernel_ms(mode)
        row[f"eval_{mode}"] = t / res.kernel_ms(mode)
        row[f"eval_{mode}_kernel_ms"], row[f"eval_{mode}_torch_ms"] = res.kernel_ms(mode), t
    backend = get_backend("triton")
    kernel = backend.compile(backend.render(problem, spec))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n_sets = rotation_count(problem, l2, memory_budget=8 << 30)
    sets = [make_operands(problem, 100 + i, "cuda") for i in range(n_sets)]
    outs = [torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda") for _ in range(n_sets)]
    calls = {"kernel": lambda i: kernel(sets[i].a, sets[i].b, outs[i]),
             "torch": lambda i: torch.matmul(sets[i].a, sets[i].b, out=outs[i]),
             "torch_alloc": lambda i: torch.matmul(sets[i].a, sets[i].b)}
    graph = rotated_graph_ms(calls, n_sets)
    row["graph_n_sets"] = n_sets
    row["graph_kernel_ms"], row["graph_torch_ms"] = graph["kernel"], graph["torch"]
    row["graph"] = graph["torch"] / graph["kernel"]
    row["graph_alloc"] = graph["torch_alloc"] / graph["kernel"]
    k_ms = do_bench_cudagraph(lambda: calls["kernel"](0), rep=100)
    t_ms = do_bench_cudagraph(lambda: calls["torch"](0), rep=100)
    row["dobench_kernel_ms"], row["dobench_torch_ms"] = k_ms, t_ms
    row["dobench"] = t_ms / k_ms
    for clock in ("graph", "dobench"):
        row[f"agree_{clock}"] = abs(row["eval_offline"] / row[clock] - 1) <= AGREE
    return row  # the sets and outputs go with this frame; the caller empties the cache


def markdown(out: dict) -> str:
    rows = [r for r in out["rows"] if "eval_offline" in r]
    lines = [f"# The evaluator against two other clocks ({out['gpu']}, {out['date']})", "",
             f"`{out['command']}`; {out['versions']}", "",
             "Ratio = torch.matmul time / kernel time under each clock. Agreement: the evaluator's offline ratio "
             f"within {AGREE:.0%} of the clock's.", ""]
    for clock, what in (("graph", "rotated graph"), ("dobench", "do_bench_cudagraph")):
        n = sum(bool(r.get(f"agree_{clock}")) for r in rows)
        lines.append(f"- {what}: agrees on {n} of {len(rows)} shapes.")
    lines += ["", "| shape | kernel | eval offline | eval sustained | rotated graph | graph, torch allocating | "
              "do_bench_cudagraph | kernel us (eval / graph / do_bench) | torch us (eval / graph / do_bench) |",
              "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in out["rows"]:
        if "eval_offline" not in r:
            lines.append(f"| {r['shape']} | `{r['spec']}` | {r.get('status', '-')} | | | | | | |")
            continue
        us = lambda *ks: " / ".join(f"{r[k] * 1e3:.1f}" for k in ks)  # noqa: E731
        lines.append(f"| {r['shape']} | `{r['spec']}` | {r['eval_offline']:.3f} | {r['eval_sustained']:.3f} | "
                     f"{r['graph']:.3f}{'' if r['agree_graph'] else ' (differs)'} | {r['graph_alloc']:.3f} | "
                     f"{r['dobench']:.3f}{'' if r['agree_dobench'] else ' (differs)'} | "
                     f"{us('eval_offline_kernel_ms', 'graph_kernel_ms', 'dobench_kernel_ms')} | "
                     f"{us('eval_offline_torch_ms', 'graph_torch_ms', 'dobench_torch_ms')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--shapes", type=int, default=24)
    ap.add_argument("--max-seconds", type=float, default=540)
    args = ap.parse_args()
    import torch
    import triton

    from cudal2.bench.evaluator import Evaluator

    out = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
           "command": "python benchmarks/crosscheck.py " + " ".join(sys.argv[1:]),
           "versions": f"torch {torch.__version__}, triton {triton.__version__}", "rows": []}
    start = time.time()
    with Evaluator(baselines=("torch",)) as ev:
        for p in shapes(args.shapes):
            if time.time() - start > args.max_seconds:
                break
            row = measure(p, ev)
            torch.cuda.empty_cache()
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(markdown(out))
            args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
    print(markdown(out))


if __name__ == "__main__":
    main()
