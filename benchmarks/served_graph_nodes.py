"""What a CUDA graph of the op's served calls holds, against the same kernel called directly and F.linear: the
graph's nodes by type (cuda-python's cudaGraphGetNodes) and each kernel's time in five replays (torch.profiler).
Whether the op adds work to a captured call.

    python benchmarks/served_graph_nodes.py [--winners RUN.json] [--shape 1x3072x3072] > OUT.log

RUN.json: a benchmarks/crosscheck_winners.py run (default: the chain-mode run of 2026-11-30); the op's table holds
its winners (op_served.table_of). Per contender, eight calls over eight input sets (the evaluator's operands) are
warmed up on a side stream, then captured in one graph (kept, so that its nodes can be read). Needs a CUDA GPU.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

SETS = 8


def node_kinds(graph) -> str:
    """The graph's nodes by type, or why they cannot be read."""
    try:
        from cuda.bindings import runtime as rt

        raw = graph.raw_cuda_graph()
        _, _, count = rt.cudaGraphGetNodes(raw, 0)
        _, nodes, count = rt.cudaGraphGetNodes(raw, count)
        kinds: dict[str, int] = {}
        for node in nodes:
            _, kind = rt.cudaGraphNodeGetType(node)
            name = str(kind).split(".")[-1]
            kinds[name] = kinds.get(name, 0) + 1
        return f"{count} nodes {kinds}"
    except Exception as e:  # noqa: BLE001 - a torch without kept graphs, no cuda-python
        return f"(nodes unknown: {type(e).__name__}: {e})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--winners", type=Path,
                    default=ROOT / "benchmarks" / "results" / "crosscheck_winners_chain_h200_2026-11-30.json")
    ap.add_argument("--shape", default="1x3072x3072", help="M x N x K of a row of RUN.json")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("served_graph_nodes.py captures CUDA graphs, and torch sees none here; run it on a GPU")
    from torch.nn import functional as F

    import cudal2
    from crosscheck_winners import problem_of
    from cudal2.bench.inputs import make_operands
    from cudal2.codegen import get_backend
    from cudal2.ir import KernelSpec
    from cudal2.route_check import side_warmed_graph
    from op_served import table_of

    winners = json.loads(args.winners.read_text())
    cudal2.set_table(table_of(winners["rows"], torch.cuda.get_device_name()))
    row = next(r for r in winners["rows"] if r["shape"].split("-")[0] == args.shape)
    problem, spec = problem_of(row["shape"]), KernelSpec.from_json(row["spec_json"])
    backend = get_backend(spec.backend)
    kernel = backend.compile(backend.render(problem, spec))
    sets = [make_operands(problem, 100 + i, "cuda") for i in range(SETS)]
    outs = [torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda") for _ in range(SETS)]
    calls = {"kernel": lambda i: kernel(sets[i].a, sets[i].b, outs[i]),
             "cudal2.linear": lambda i: cudal2.linear(sets[i].a, sets[i].b.t()),
             "F.linear": lambda i: F.linear(sets[i].a, sets[i].b.t())}
    print(torch.cuda.get_device_name(), row["shape"], row.get("spec", ""))
    with torch.no_grad():
        for name, call in calls.items():
            one_pass = lambda call=call: [call(i) for i in range(SETS)]  # noqa: E731
            graph = side_warmed_graph(one_pass, one_pass, keep_graph=True)
            graph.replay()
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    graph.replay()
                torch.cuda.synchronize()
            kernels: dict[str, list] = {}
            for event in prof.events():
                if event.device_type == torch.autograd.DeviceType.CUDA:
                    kernels.setdefault(event.name[:70], []).append(event.device_time)
            print(name, node_kinds(graph))
            for kernel_name, us in kernels.items():
                print(f"    {len(us)} x {kernel_name} median us {statistics.median(us):.2f}")


if __name__ == "__main__":
    main()
