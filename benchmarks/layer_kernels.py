"""Which kernel moves when the op serves a GEMM inside the decoder layer? The layer of
benchmarks/e2e_decoder.py is captured in a CUDA graph twice, with nn.Linear and with the op serving one
group of projections from a table (the others put back to nn.Linear), and both graphs are profiled,
taking turns in chunks of replays: each kernel's duration (median over replays), the gap before it,
and the replay's span. A served
kernel's saving in isolated timing can vanish inside the layer because the kernel itself runs slower
there, or because its neighbours do, or because the gaps between them grow; this shows which.

    python benchmarks/layer_kernels.py OUT.md --store STORE [--tokens 1,16,128] [--replays 60]

STORE: the store a decoder run searched into (e2e_decoder.py --store); every group whose weight shape
the table serves in a graph at a token count is profiled alone, and where a group has two projections,
each of them alone too. A kernel's overlap with the one before it (programmatic dependent launch) shows
as a gap near zero or below, not as a shorter duration; and profiling may itself change the timing it
records, so spans are compared between the two layers profiled alike, never with unprofiled times.
Writes OUT.md and OUT.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _outputs import write_results  # noqa: E402
from e2e_decoder import GROUPS, HIDDEN, layer_graph, layers, serving_only  # noqa: E402


def _profile_chunk(graph, replays: int) -> list[list[tuple[str, float, float, float]]] | str:
    """Per replay of `replays`: its kernels in launch order as (name, start, end, duration) in us; or why not."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    per = len(kernels) // replays
    if per == 0 or len(kernels) % replays:
        return f"{len(kernels)} kernels over {replays} replays"
    return [[(e.name, e.time_range.start, e.time_range.end, e.time_range.elapsed_us())
             for e in kernels[r * per:(r + 1) * per]] for r in range(replays)]


def profile_pair(graphs: dict, replays: int, chunks: int = 6) -> dict:
    """Each graph of `graphs` (name -> CUDA graph) profiled in `chunks` chunks of replays // chunks
    replays, the graphs taking turns chunk by chunk (the order reversed every other chunk), so that a
    drift of the GPU's clock falls on both alike. Per graph: per kernel of one replay, in launch order,
    its name, median duration (us) and median gap after the kernel before it (us); the median span of a
    replay, first kernel's start to last kernel's end."""
    import torch

    for graph in graphs.values():
        for _ in range(10):
            graph.replay()
    torch.cuda.synchronize()
    seen: dict[str, list] = {name: [] for name in graphs}
    order = list(graphs)
    for c in range(chunks):
        for name in (order if c % 2 == 0 else order[::-1]):
            got = _profile_chunk(graphs[name], max(1, replays // chunks))
            if isinstance(got, str):
                return {n: {"error": got} for n in graphs}
            seen[name] += got
    out = {}
    for name, runs in seen.items():
        if len({len(r) for r in runs}) != 1:
            out[name] = {"error": "the kernels of a replay differ between replays"}
            continue
        rows = []
        for j in range(len(runs[0])):
            gaps = [r[j][1] - r[j - 1][2] for r in runs] if j else [0.0]
            rows.append({"name": runs[0][j][0], "us": statistics.median(r[j][3] for r in runs),
                         "gap_us": statistics.median(gaps)})
        out[name] = {"kernels": rows, "span_us": statistics.median(r[-1][2] - r[0][1] for r in runs)}
    return out


def compare_served(plain, ours, tokens: int, served: tuple[str, ...], replays: int) -> dict:
    """Both layers profiled at `tokens`, the op serving only the projections in `served`."""
    import torch

    x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.float16)
    with serving_only(ours, served):
        runs = profile_pair({"torch": layer_graph(plain, x), "cudal2": layer_graph(ours, x)}, replays)
    return {"tokens": tokens, "served": list(served), **runs}


def _served_groups(table, tokens: int) -> list[tuple[str, ...]]:
    """The projection groups (and each member of a pair) whose (tokens, weight) shape the table serves
    in a CUDA graph."""
    from cudal2 import ops
    from cudal2.ir import GemmProblem

    from e2e_decoder import HEAD_DIM, HEADS, INTER, KV_HEADS

    out_in = {"q": (HEADS * HEAD_DIM, HIDDEN), "k": (KV_HEADS * HEAD_DIM, HIDDEN), "v": (KV_HEADS * HEAD_DIM, HIDDEN),
              "o": (HIDDEN, HEADS * HEAD_DIM), "gate": (INTER, HIDDEN), "up": (INTER, HIDDEN), "down": (HIDDEN, INTER)}
    found = []
    for group in GROUPS:
        n, k = out_in[group[0]]
        problem = GemmProblem(m=tokens, n=n, k=k, dtype="float16", layout="NT")
        if ops._op_entry(problem, None, ops.GRAPH_MIN_SAVING_US) is not None:
            found.append(group)
            if len(group) > 1:
                found += [(name,) for name in group]
    return found


def markdown(runs: list[dict], env: dict, command: str) -> str:
    lines = [f"# The decoder layer's kernels, nn.Linear against the op serving one group ({env['date']})", "",
             f"`{command}`", "",
             f"{env.get('gpu_name', '?')}, {env.get('gpu_uuid', '?')}; torch {env.get('torch', '?')}, "
             f"Triton {env.get('triton', '?')}. Per kernel of a replay of the layer's CUDA graph: median duration "
             "and median gap after the kernel before it (us), over the replays profiled. Span: first kernel's "
             "start to last kernel's end; saved: nn.Linear's span less the op's.", "",
             "| tokens | served | span nn.Linear us | span op us | saved us | served kernels: nn.Linear us "
             "-> op us (gap before) | other kernels' change us | gaps' change us |",
             "|---:|---|---:|---:|---:|---|---:|---:|"]
    for run in runs:
        a, b = run["torch"], run["cudal2"]
        if "error" in a or "error" in b or len(a["kernels"]) != len(b["kernels"]):
            lines.append(f"| {run['tokens']} | {', '.join(run['served'])} | - | - | - | "
                         f"{a.get('error') or b.get('error') or 'kernel counts differ'} | - | - |")
            continue
        moved, other, gaps = [], 0.0, 0.0
        for ka, kb in zip(a["kernels"], b["kernels"]):
            gaps += kb["gap_us"] - ka["gap_us"]
            if ka["name"] != kb["name"]:
                moved.append(f"{ka['us']:.2f} -> {kb['us']:.2f} ({ka['gap_us']:.2f} -> {kb['gap_us']:.2f})")
            else:
                other += kb["us"] - ka["us"]
        lines.append(f"| {run['tokens']} | {', '.join(run['served'])} | {a['span_us']:.2f} | {b['span_us']:.2f} | "
                     f"{a['span_us'] - b['span_us']:+.2f} | {'; '.join(moved)} | {other:+.2f} | {gaps:+.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--store", required=True, help="the store a decoder run searched into (e2e_decoder.py --store)")
    ap.add_argument("--tokens", default="1,16,128")
    ap.add_argument("--replays", type=int, default=60, help="replays profiled per graph, in 6 chunks")
    args = ap.parse_args()
    if not Path(args.store).exists():
        sys.exit(f"layer_kernels.py: no store at {args.store}; pass the --store of an e2e_decoder.py run")

    import cudal2
    from cudal2 import ops
    from cudal2.bench.environment import record
    from cudal2.store.table import TunedTable

    table = TunedTable.for_serving(args.store)
    ops.set_table(table)
    plain, ours = layers()
    cudal2.route_linears(ours, graphs=True)
    runs = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        for served in _served_groups(table, tokens):
            runs.append(compare_served(plain, ours, tokens, served, args.replays))
            a, b = runs[-1]["torch"], runs[-1]["cudal2"]
            if "span_us" in a and "span_us" in b:
                print(f"{tokens:5d} {', '.join(served):8s} saved {a['span_us'] - b['span_us']:+.2f} us", flush=True)
    env = record()
    command = "python3 benchmarks/layer_kernels.py " + " ".join(sys.argv[1:])
    write_results(args.out, markdown(runs, env, command), command, env, runs, key="runs")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
