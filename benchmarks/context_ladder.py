"""Where does a served kernel's saving go between the evaluator's timing and the decoder layer? One
projection of benchmarks/e2e_decoder.py's layer, served by the op from a table against F.linear, in
contexts that climb from the evaluator's towards the layer's, all timed in one process on one GPU:

    layer mode   LayerPrelude (twice the L2 streamed, A passed over in place), then the call
    mlp_chain    the prelude, an 8B-class MLP's three GEMMs (MLPNeighbours), the call, chain's GEMM after
    layer's end  the layer's own MLP (gate, up, SiLU times up, down), the residual add and the next
                 layer's RMSNorm, whose output is the call's A; then the k projection after it
    layer        the decoder layer itself, the op serving only this projection

Per context: the saving a pass (F.linear's graph less the op's; CUDA graphs of CALLS passes, the two
taking turns over the rounds; median of the per-round differences and quartiles), and, profiled, the
duration of the call's own kernels in each graph (torch.profiler: the kernels whose names differ
between the two graphs, where both graphs launch as many kernels), and the SM clock and board power
while each graph replays (NVML). The rung where the saving falls is the context the evaluator's timing
lacks.

    python benchmarks/context_ladder.py OUT.md --store STORE [--at 128:q,128:gate,1:k,1:q]

STORE: a store the decoder benchmark searched into (e2e_decoder.py --store). Writes OUT.md and OUT.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _outputs import write_results  # noqa: E402
from _rounds import interleaved  # noqa: E402
from e2e_decoder import HIDDEN, layer_graph, layers, saving_spread, serving_only  # noqa: E402
from layer_kernels import compare_served, profile_pair  # noqa: E402

ROUNDS, CALLS, REPLAYS = 21, 10, 60
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")


def contexts(plain, name: str, tokens: int) -> dict:
    """context -> pass(linear) for the first three contexts: one pass of the work around a call of
    `linear` (F.linear or cudal2.linear) on the projection `name`'s weight."""
    import torch
    from torch.nn import functional as F

    from cudal2.bench.timing import LayerPrelude, MLPNeighbours

    device = torch.device("cuda")
    weight = getattr(plain, name).weight
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    xs = [torch.randn(tokens, weight.shape[1], device=device, dtype=torch.float16)]
    prelude, mlp = LayerPrelude(device, l2, xs), MLPNeighbours(device, xs)
    residual = torch.randn(tokens, HIDDEN, device=device, dtype=torch.float16)
    normed = torch.randn(tokens, HIDDEN, device=device, dtype=torch.float16)

    def layer_mode(linear):
        prelude(0)
        linear(xs[0], weight)

    def mlp_chain(linear):
        prelude(0)
        mlp.before(0)
        linear(xs[0], weight)
        mlp.after(0)

    def layers_end(linear):
        # (the call's A is the norm's output: as wide as the layer's hidden size, so only for the
        # projections that read it; o and down read other activations)
        x = residual + plain.down(F.silu(plain.gate(normed)) * plain.up(normed))
        a = plain.norm1(x)
        linear(a, weight)
        plain.k(a)

    out = {"layer mode": layer_mode, "mlp_chain": mlp_chain}
    if weight.shape[1] == HIDDEN and name in ("q", "k", "v", "gate", "up"):
        out["layer's end"] = layers_end
    return out


def call_kernels(runs: dict) -> str:
    """The call's kernels, F.linear's durations -> the op's (us): those whose names differ between the
    two graphs at the same position; where the graphs launch different numbers of kernels, how many each."""
    a, b = runs["torch"], runs["cudal2"]
    if "error" in a or "error" in b:
        return a.get("error") or b.get("error")
    if len(a["kernels"]) != len(b["kernels"]):
        return f"{len(a['kernels'])} kernels against {len(b['kernels'])}"
    moved = [(ka["us"], kb["us"]) for ka, kb in zip(a["kernels"], b["kernels"]) if ka["name"] != kb["name"]]
    return "; ".join(f"{x:.2f} -> {y:.2f}" for x, y in moved) or "the same kernels"


def clock_while(timer, seconds: float = 0.5) -> dict:
    """The SM clock (MHz) and board power (W), medians of NVML's (else nvidia-smi's) samples taken in
    a thread while timer's graph replays for `seconds`: whether a context changes the call's clock."""
    from cudal2.bench.environment import clocks

    samples, done = [], threading.Event()

    def sample():
        while not done.is_set():
            samples.append(clocks())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        timer()
    done.set()
    thread.join()
    out = {}
    for key in ("sm", "power_w"):
        got = [s[key] for s in samples if key in s]
        if got:
            out[key] = statistics.median(got)
    return out


def ladder(plain, ours, tokens: int, name: str) -> list[dict]:
    import torch
    from torch.nn import functional as F

    import cudal2
    from cudal2.route_check import graph_timer

    rows = []
    x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        for context, work in contexts(plain, name, tokens).items():
            timers = {"torch": graph_timer(lambda work=work: work(F.linear), CALLS),
                      "cudal2": graph_timer(lambda work=work: work(cudal2.linear), CALLS)}
            both = interleaved(timers, ROUNDS)
            saving = saving_spread(both)
            clock = {path: clock_while(timer) for path, timer in timers.items()}
            profiled = profile_pair({"torch": layer_graph(lambda _x, w=work: w(F.linear), x),
                                     "cudal2": layer_graph(lambda _x, w=work: w(cudal2.linear), x)}, REPLAYS)
            rows.append({"tokens": tokens, "projection": name, "context": context, "saving_us": saving,
                         "clock": clock, "call_kernels": call_kernels(profiled), "profiled": profiled})
            print(f"{tokens:5d} {name:5s} {context:12s} saved {saving[0]:+.2f} us; {rows[-1]['call_kernels']}; "
                  f"{clock}", flush=True)
        # the layer itself, only this projection served (and its saving a pass timed as above)
        with serving_only(ours, (name,)):
            timers = {"torch": graph_timer(lambda: plain(x), CALLS), "cudal2": graph_timer(lambda: ours(x), CALLS)}
            both = interleaved(timers, ROUNDS)
            clock = {path: clock_while(timer) for path, timer in timers.items()}
            profiled = compare_served(plain, ours, tokens, (name,), REPLAYS)
    saving = saving_spread(both)
    rows.append({"tokens": tokens, "projection": name, "context": "layer", "saving_us": saving, "clock": clock,
                 "call_kernels": call_kernels(profiled), "profiled": profiled})
    print(f"{tokens:5d} {name:5s} {'layer':12s} saved {saving[0]:+.2f} us; {rows[-1]['call_kernels']}; {clock}",
          flush=True)
    return rows


def _clock(c: dict | None) -> str:
    return f"{c['sm']:.0f} MHz, {c.get('power_w', float('nan')):.0f} W" if c and "sm" in c else "-"


def markdown(rows: list[dict], env: dict, command: str, served: dict) -> str:
    lines = [f"# A served kernel's saving, context by context up to the decoder layer ({env['date']})", "",
             f"`{command}`", "",
             f"{env.get('gpu_name', '?')}, {env.get('gpu_uuid', '?')}; torch {env.get('torch', '?')}, "
             f"Triton {env.get('triton', '?')}, nvidia-cutlass-dsl {env.get('cutlass_dsl', '?')}. Saving a pass: "
             f"F.linear's CUDA graph of {CALLS} passes less the op's, per pass, the two taking turns over {ROUNDS} "
             "rounds (median of the per-round differences, quartiles). SM clock and power: medians of NVML's "
             "samples while the graph replays for 0.5 s. Call kernels: torch.profiler's durations "
             f"of the kernels that differ between the two graphs, median over {REPLAYS} replays of one pass.", "",
             "| tokens | projection | served kernel | context | saving a pass us (25% to 75%) "
             "| call kernels: F.linear us -> op us | SM MHz, W: F.linear's graph; the op's |",
             "|---:|---|---|---|---:|---|---|"]
    for r in rows:
        s, q1, q3 = r["saving_us"]
        lines.append(f"| {r['tokens']} | {r['projection']} | {served.get((r['tokens'], r['projection']), '-')} "
                     f"| {r['context']} | {s:+.2f} ({q1:+.2f} to {q3:+.2f}) | {r['call_kernels']} "
                     f"| {_clock(r.get('clock', {}).get('torch'))}; {_clock(r.get('clock', {}).get('cudal2'))} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--store", required=True, help="the store a decoder run searched into (e2e_decoder.py --store)")
    ap.add_argument("--at", default="128:q,128:gate,1:k,1:q",
                    help="tokens:projection pairs, comma-separated (projections: q, k, v, o, gate, up, down)")
    args = ap.parse_args()
    if not Path(args.store).exists():
        sys.exit(f"context_ladder.py: no store at {args.store}; pass the --store of an e2e_decoder.py run")
    try:
        at = [(int(t), p) for t, p in (pair.split(":") for pair in args.at.split(","))]
    except ValueError:
        sys.exit(f"context_ladder.py: --at {args.at!r} is not tokens:projection pairs; write e.g. 128:q,1:k")
    if unknown := sorted({p for _, p in at} - set(PROJECTIONS)):
        sys.exit(f"context_ladder.py: no projection {', '.join(unknown)} in the layer; use {', '.join(PROJECTIONS)}")

    import cudal2
    from cudal2 import ops
    from cudal2.bench.environment import record
    from cudal2.ir import GemmProblem
    from cudal2.store.table import TunedTable

    ops.set_table(TunedTable.for_serving(args.store))
    plain, ours = layers()
    cudal2.route_linears(ours, graphs=True)
    rows, served = [], {}
    for tokens, name in at:
        n, k = getattr(plain, name).weight.shape
        entry = ops._op_entry(GemmProblem(m=tokens, n=n, k=k, layout="NT"), None, ops.GRAPH_MIN_SAVING_US)
        if entry is None:
            print(f"{tokens:5d} {name:5s} the table serves no kernel for {tokens}x{n}x{k}: skipped", flush=True)
            continue
        served[(tokens, name)] = f"{entry.spec.backend} {entry.spec.key()} ({entry.mode})"
        rows += ladder(plain, ours, tokens, name)
    env = record()
    command = "python3 benchmarks/context_ladder.py " + " ".join(sys.argv[1:])
    write_results(args.out, markdown(rows, env, command, served), command, env, rows,
                  served={f"{t}:{p}": s for (t, p), s in served.items()})
    print(args.out.read_text())


if __name__ == "__main__":
    main()
