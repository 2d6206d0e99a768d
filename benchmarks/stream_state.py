"""How far apart do a CUDA graph's kernels run, in a process that has never run work on a second stream
and after it has? For a winner of an earlier crosscheck run (--winners), the crosscheck's chain harness
builds its graphs (its warm-up on the current stream only, as it did before it warmed up on a side
stream) and times the winner and torch.matmul; the graphs are profiled (torch.profiler, kernels in
launch order) for each kernel's duration and the gap after the one before it. Then torch.matmul runs
once per input set on a new stream, and the same is done again with new graphs.

    python benchmarks/stream_state.py OUT.md --winners RUN.json [--shape 1x3072x3072]
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

from _rounds import interleaved  # noqa: E402
from crosscheck_winners import chain_harness_timers, problem_of, winner_placements  # noqa: E402
from layer_kernels import profile_pair  # noqa: E402

ROUNDS, REPLAYS = 60, 12


def summarize(profiled: dict) -> dict:
    """Per graph: its span per replay, its kernels' busy time and gaps (us), and per kernel name its count
    a replay, median duration and median gap before it."""
    out = {}
    for name, p in profiled.items():
        if "error" in p:
            out[name] = {"error": p["error"]}
            continue
        ks = p["kernels"]
        by_name: dict[str, list] = {}
        for k in ks:
            by_name.setdefault(k["name"][:60], []).append(k)
        out[name] = {"span_us": p["span_us"], "kernels": len(ks), "busy_us": sum(k["us"] for k in ks),
                     "gaps_us": sum(k["gap_us"] for k in ks[1:]),
                     "by_kernel": {n: {"count": len(v), "us": statistics.median(k["us"] for k in v),
                                       "gap_us": statistics.median(k["gap_us"] for k in v)} for n, v in by_name.items()}}
    return out


def state(calls: dict, a_operands: list, warm_on_side: bool) -> dict:
    """The harness's figures and its graphs' profile, the graphs built now."""
    import torch

    timers = chain_harness_timers(calls, a_operands, warm_on_side=warm_on_side)
    t = interleaved(timers, ROUNDS)
    figures = {name: statistics.median(v) for name, v in t.items()}
    graphs = {name: timer.__defaults__[0] for name, timer in timers.items()}  # one_round(g=..., turn=...)
    floor = next(c.cell_contents for c in timers["torch"].__closure__
                 if isinstance(c.cell_contents, torch.cuda.CUDAGraph))
    return {"ms": figures, "profile": summarize(profile_pair({"floor": floor, **graphs}, REPLAYS, 6))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--winners", type=Path, required=True, help="a crosscheck_winners.py run's .json")
    ap.add_argument("--shape", default="1x3072x3072", help="M x N x K of the row to use")
    args = ap.parse_args()
    rows = [r for r in json.loads(args.winners.read_text())["rows"] if r["shape"].split("-")[0] == args.shape]
    if not rows:
        sys.exit(f"stream_state.py: {args.shape} is not a row of {args.winners}; pick a shape it holds")
    import torch

    from cudal2.bench.environment import record
    from cudal2.ir import KernelSpec

    r = rows[0]
    calls, a_ops = winner_placements(problem_of(r["shape"]), KernelSpec.from_json(r["spec_json"]))(0)
    n_sets = len(a_ops)
    states = {"no second stream yet": state(calls, a_ops, warm_on_side=False)}
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for i in range(n_sets):
            calls["torch"](i)
    torch.cuda.synchronize()
    states["after work on a second stream"] = state(calls, a_ops, warm_on_side=False)
    env = record()  # (after the states: nothing before the first may touch another stream)
    result = {"gpu": env.get("gpu_name"), "gpu_uuid": env.get("gpu_uuid"), "date": env.get("date"),
              "versions": f"torch {env.get('torch')}, triton {env.get('triton')}", "shape": r["shape"],
              "spec": r["spec"], "command": "python benchmarks/stream_state.py " + " ".join(sys.argv[1:]),
              "states": states}
    args.out.write_text(markdown(result))
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    print(markdown(result))


def markdown(result: dict) -> str:
    lines = [f"# A CUDA graph's kernel gaps before and after a second stream ran work ({result['gpu']}, "
             f"{result['date']})", "", f"`{result['command']}`; {result['versions']}; GPU {result['gpu_uuid']}", "",
             f"{result['shape']}, winner `{result['spec']}`: the crosscheck's chain harness, each graph's warm-up on "
             "the current stream.", "",
             "| process state | harness torch us | winner us | torch / winner | floor gaps per kernel us | "
             "torch graph gaps per kernel us |", "|---|---:|---:|---:|---:|---:|"]
    for name, st in result["states"].items():
        ms, prof = st["ms"], st["profile"]

        def per_kernel(graph):
            p = prof.get(graph, {})
            return f"{p['gaps_us'] / max(1, p['kernels'] - 1):.3f}" if "gaps_us" in p else "-"
        lines.append(f"| {name} | {ms['torch'] * 1e3:.2f} | {ms['kernel'] * 1e3:.2f} | {ms['torch'] / ms['kernel']:.3f} | "
                     f"{per_kernel('floor')} | {per_kernel('torch')} |")
    lines += ["", "Per kernel of the torch graph (median duration, median gap before it, us):", ""]
    for name, st in result["states"].items():
        p = st["profile"].get("torch", {})
        for kname, k in sorted(p.get("by_kernel", {}).items(), key=lambda x: -x[1]["us"]):
            lines.append(f"- {name}: {k['count']} x {kname}: {k['us']:.2f}, gap {k['gap_us']:.2f}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
