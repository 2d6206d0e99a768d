"""Would a runner-up win where the table's kernel loses inside the model? e2e_decoder.py's layer in graph mode,
each group of projections (one weight shape) served alone by each leader a search confirmed for it, in turn.

    python benchmarks/runner_ups.py OUT.md --store STORE [--tokens 1,16,128] [--rounds 21] [--calls 20]

STORE: the store of an e2e_decoder.py run. The op's table is TunedTable.for_serving(STORE); for each token count
and group, each of TunedTable.leaders(STORE, problem, gpu) whose chain-mode speedup over torch.matmul exceeds the
op's MIN_SERVED_SPEEDUP (the served kernel first, then its runners-up) takes the group's problem in the table, the
layer is routed again (route_linears, graphs=True), and the layer with only that group served is timed against
nn.Linear's in interleaved rounds of CUDA-graph replays (e2e_decoder.served_alone's measurement): the saving per
forward, median of the per-round differences, with quartiles. Beside it, what the table predicts that leader
saves the layer (its chain-mode saving a call, times the group's calls), and whether the op serves it in a graph
(a saving under GRAPH_MIN_SAVING_US is not served: the layer then runs torch). OUT.md and OUT.json
(benchmarks/_outputs.write_results). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _outputs import write_results  # noqa: E402
from e2e_decoder import CALLS, GROUPS, HIDDEN, ROUNDS  # noqa: E402


def with_entry(table, entry):
    """table with every entry of entry's problem replaced by entry: the op serves that kernel for the problem."""
    from cudal2.store.table import TunedTable

    return TunedTable([e for e in table if e.problem.key() != entry.problem.key()] + [entry])


def report(rows: list[dict], env: dict, command: str) -> list[str]:
    lines = [f"# The decoder layer's groups served by each confirmed leader ({env.get('date', '?')})", "",
             f"`{command}`", "",
             f"{env.get('gpu_name', '?')} {env.get('gpu_uuid', '')}; torch {env.get('torch', '?')}, Triton "
             f"{env.get('triton', '?')}, nvidia-cutlass-dsl {env.get('cutlass_dsl', '?')}. The layer in graph mode "
             "with only the group served, by the leader named, against nn.Linear's layer: the saving per forward, "
             "median of the per-round differences (quartiles). Predicted: the table's chain-mode saving for that "
             "leader, times the group's calls. Rank 1: the kernel the table serves.", "",
             "| tokens | group | rank | leader | backend | chain speedup | served | predicted us | layer's saving us |",
             "|---:|---|---:|---|---|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['tokens']} | {r['group']} | {r['rank']} | {r['spec']} | {r['backend']} | "
                     f"{r['speedup']:.3f} | {'yes' if r['served'] else 'no'} | {r['predicted_us']:.2f} | {r['saving_us']:.2f} ({r['saving_q1_us']:.2f} "
                     f"to {r['saving_q3_us']:.2f}) |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--store", required=True)
    ap.add_argument("--tokens", default="1,16,128")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--calls", type=int, default=CALLS)
    args = ap.parse_args()
    if not Path(args.store).exists():
        sys.exit(f"runner_ups.py: no store at {args.store}; pass the store of an e2e_decoder.py run")
    import torch

    if not torch.cuda.is_available():
        sys.exit("runner_ups.py times CUDA graphs, and torch sees none here; run it on a GPU")
    import cudal2
    from cudal2 import ops
    from cudal2.bench.environment import record
    from cudal2.ir import GemmProblem
    from cudal2.store.table import TunedTable
    from e2e_decoder import layer_saving, layers, serving_only

    base = TunedTable.for_serving(args.store)
    gpu = torch.cuda.get_device_name()
    plain, ours = layers()
    rows = []
    for t in (int(t) for t in args.tokens.split(",")):
        x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16)
        for group in GROUPS:
            lin = getattr(plain, group[0])
            problem = GemmProblem(m=t, n=lin.out_features, k=lin.in_features, layout="NT")
            leaders = [e for e in TunedTable.leaders(args.store, problem, gpu, "chain")
                       if e.spec.backend in ops.op_backends() and (e.speedup("torch") or 0) > ops.MIN_SERVED_SPEEDUP]
            for rank, entry in enumerate(leaders, 1):
                ops.set_table(with_entry(base, entry))
                cudal2.route_linears(ours, graphs=True)
                # (a saving under the op's margin for captured calls is not served: the layer then runs torch)
                served = ops._op_entry(problem, gpu, ops.GRAPH_MIN_SAVING_US) is not None
                with torch.no_grad(), serving_only(ours, group):
                    saving, q1, q3 = layer_saving(plain, ours, x, args.rounds, args.calls)
                rows.append({"tokens": t, "group": ", ".join(group), "rank": rank, "spec": entry.spec.key(),
                             "backend": entry.spec.backend, "speedup": entry.speedup("torch"), "served": served,
                             "predicted_us": ops._saving_us(entry) * len(group), "saving_us": saving,
                             "saving_q1_us": q1, "saving_q3_us": q3})
                print(report(rows[-1:], {}, "")[-1], flush=True)
    env = record()
    command = "python3 benchmarks/runner_ups.py " + " ".join(sys.argv[1:])
    write_results(args.out, report(rows, env, command), command, env, rows)


if __name__ == "__main__":
    main()
