"""Does where the chain regime's buffers lie move a call's marginal? For each winner of an earlier
crosscheck run (--winners, a crosscheck_winners.py .json), the winner and torch.matmul are timed in the
chain regime five times on one placement of the buffers, then five times on fresh ones, by both timers:
the crosscheck's harness (chain_harness_timers; its prelude buffer, neighbour weights and outputs) and
the evaluator's timing code (cudal2.bench.timing.measure in chain mode, one placement a call; its
LayerPrelude and ChainNeighbours). Operands stay the same throughout. A spread over fresh placements
wider than over one is what TimingConfig.placements averages over.

    python benchmarks/chain_placement.py OUT.md --winners RUN.json [--shapes 1x3072x3072,33x6144x4096]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _rounds import interleaved  # noqa: E402
from crosscheck_winners import chain_harness_timers, problem_of, winner_placements  # noqa: E402

REPEATS, ROUNDS = 5, 50


def ratios(timers_of, repeats: int = REPEATS, fresh: bool = False) -> list[float]:
    """torch time / winner time of `repeats` timings; timers_of(held) -> (ratio, what it holds). With
    fresh, each timing gets buffers of its own, made while the last are held (so elsewhere in memory);
    without, every timing reuses the first one's."""
    out, held = [], None
    for _ in range(repeats):
        ratio, made = timers_of(None if fresh else held)
        held = made
        out.append(ratio)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--winners", type=Path, required=True, help="a crosscheck_winners.py run's .json")
    ap.add_argument("--shapes", default="1x3072x3072,33x6144x4096", help="M x N x K of the rows to time")
    args = ap.parse_args()
    import torch

    from cudal2.bench import timing
    from cudal2.bench.environment import record
    from cudal2.ir import KernelSpec

    want = args.shapes.split(",")
    rows = [r for r in json.loads(args.winners.read_text())["rows"] if r["shape"].split("-")[0] in want]
    if not rows:
        sys.exit(f"chain_placement.py: none of {args.shapes} is a row of {args.winners}; pick shapes it holds")
    env = record()
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    one_placement = dataclasses.replace(timing.TimingConfig.confirmation(), placements=1)
    result = {"gpu": env.get("gpu_name"), "gpu_uuid": env.get("gpu_uuid"), "date": env.get("date"),
              "versions": f"torch {env.get('torch')}, triton {env.get('triton')}",
              "command": "python benchmarks/chain_placement.py " + " ".join(sys.argv[1:]), "rows": []}
    for r in rows:
        calls, a_ops = winner_placements(problem_of(r["shape"]), KernelSpec.from_json(r["spec_json"]))(0)
        n_sets = len(a_ops)

        def harness(held):
            timers = held or chain_harness_timers(calls, a_ops)
            t = interleaved(timers, ROUNDS)
            return statistics.median(t["torch"]) / statistics.median(t["kernel"]), timers

        def evaluator(held):
            buffers = held or (timing.LayerPrelude(dev, l2, a_ops), timing.ChainNeighbours(dev, a_ops))
            m = timing.measure(calls, n_sets, "chain", one_placement, dev, *buffers)
            return m["torch"].timing.kernel_ms / m["kernel"].timing.kernel_ms, buffers

        row = {"shape": r["shape"], "spec": r["spec"]}
        for name, timer in (("harness", harness), ("evaluator", evaluator)):
            row[f"{name}_same"] = ratios(timer)
            row[f"{name}_fresh"] = ratios(timer, fresh=True)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    args.out.write_text(markdown(result))
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    print(markdown(result))


def markdown(result: dict) -> str:
    def cell(xs):
        return f"{min(xs):.3f} to {max(xs):.3f} ({(max(xs) - min(xs)) / statistics.median(xs):.1%})"

    lines = [f"# Chain regime: one placement of the buffers against fresh ones ({result['gpu']}, {result['date']})", "",
             f"`{result['command']}`; {result['versions']}; GPU {result['gpu_uuid']}", "",
             f"torch.matmul time / winner time, {REPEATS} timings each (range, and range / median). The harness: "
             f"{ROUNDS} rounds a timing; the evaluator's timing code: its confirmation groups, one placement a timing.",
             "", "| shape | winner | harness, one placement | harness, fresh | evaluator, one placement | "
             "evaluator, fresh |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['shape']} | `{r['spec']}` | {cell(r['harness_same'])} | {cell(r['harness_fresh'])} | "
                     f"{cell(r['evaluator_same'])} | {cell(r['evaluator_fresh'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
