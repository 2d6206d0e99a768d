"""A Llama-style decoder layer (8B-class sizes, random fp16 weights) with torch.nn.Linear against the
same layer with cudal2 installed (cudal2.route_linears: the projections whose weight shape has a
kernel in the table call cudal2.linear, the others stay nn.Linear): tokens/s eager, under
torch.compile and inside a CUDA graph, and the time of each GEMM alone.

    python benchmarks/e2e_decoder.py OUT.md [--tokens 1,16,128,1024,4096] [--tune-tokens 4096,1024]
        [--budget 4] [--max-tune-seconds 300] [--store PATH] [--rounds 21] [--calls 20] [--search-mode chain]
        [--check-routes] [--no-alone]

The layer: RMSNorm, q/k/v projections (hidden 4096, 32 query heads and 8 key-value heads of 128),
causal attention over the tokens (F.scaled_dot_product_attention), the output projection, RMSNorm,
and a SwiGLU MLP (14336 wide). No biases. Both layers hold the same weights.

1. cudal2.tune_model searches the layer's GEMMs at each token count of --tune-tokens (default: every
   one, 4 distinct shapes per count) at --budget, the store resuming earlier runs, until
   --max-tune-seconds (--budget 0: no search, the store's results as they are); the op then serves a
   shape's eager and compiled calls only where its kernel beat torch.matmul by at least
   ops.EAGER_MIN_SAVING_US a call, and calls captured in a CUDA graph wherever it beat torch
   (ops.GRAPH_MIN_SAVING_US). Untuned shapes run torch.
2. Per token count and mode, the two layers are timed in --rounds interleaved rounds: each round
   times nn.Linear's layer, then ours, and the next round ours first, then nn.Linear's (A B, B A,
   A B, ...), so a drift of the host or the GPU clock falls on both alike. A layer's time in a round
   is per call, over --calls back-to-back calls:
   - eager and compile (torch.compile, default mode, fullgraph, static shapes): wall time from
     perf_counter before the calls to after one torch.cuda.synchronize() after them, the GPU
     synchronized before the round too;
   - graph: one replay of a CUDA graph that captured --calls layer calls, between CUDA events.
   Before its rounds each path is warmed up: 3 calls (the first of a compiled layer compiles it), in
   graph mode on a side stream before the capture, and one replay.
   Reported: each layer's median time over the rounds (tokens/s = tokens / that time), and the
   median over the rounds of the per-round ratio nn.Linear's time / ours, i.e. our tokens/s over
   nn.Linear's (above 1: ours faster), with its quartiles (25% to 75%): a gap within them is noise.
3. Per GEMM shape: F.linear and cudal2.linear alone, each a CUDA graph of --calls calls, timed in
   interleaved rounds as in graph mode above, the same ratio reported. The calls cycle through copies
   of (x, weight) that fill twice the L2 together, so a weight is read from DRAM as in the layer (the
   same weight called back to back would stay in L2; the evaluator rotates its inputs likewise).
4. The table's prediction against the layer: the sum over the served GEMMs of the saving the table
   records (in its mode) against the layer's measured saving in graph mode; then each served group of
   projections alone in the layer and in the other regimes (--no-alone: not), and with --check-routes
   the flow a user follows: cudal2.check_routes declines the groups that do not save time inside the
   layer, and the layer is timed again with the prediction over what is still served.
The two layers' outputs are compared (relative error) before timing. JSON next to OUT.md: every
round's time of every path, the environment and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))  # _rounds

from _rounds import interleaved, spread  # noqa: E402
from cudal2.bench.results import MODES  # noqa: E402
# (what check_routes times a model with)
from cudal2.route_check import graph_timer, side_warmed_graph, wall_timer  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 4096, 32, 8, 128, 14336
ROUNDS, CALLS = 21, 20


def decoder_layer(linear_cls):
    from torch import nn
    from torch.nn import functional as F

    class DecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.RMSNorm(HIDDEN), nn.RMSNorm(HIDDEN)
            self.q = linear_cls(HIDDEN, HEADS * HEAD_DIM, bias=False)
            self.k = linear_cls(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
            self.v = linear_cls(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
            self.o = linear_cls(HEADS * HEAD_DIM, HIDDEN, bias=False)
            self.gate = linear_cls(HIDDEN, INTER, bias=False)
            self.up = linear_cls(HIDDEN, INTER, bias=False)
            self.down = linear_cls(INTER, HIDDEN, bias=False)

        def forward(self, x):  # x: (tokens, hidden), one sequence
            t = x.shape[0]
            h = self.norm1(x)
            q = self.q(h).view(t, HEADS, HEAD_DIM).transpose(0, 1)
            k = self.k(h).view(t, KV_HEADS, HEAD_DIM).transpose(0, 1)
            v = self.v(h).view(t, KV_HEADS, HEAD_DIM).transpose(0, 1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + self.o(a.transpose(0, 1).reshape(t, HIDDEN))
            h = self.norm2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    return DecoderLayer()


def layer_graph(layer, x):
    """A CUDA graph of one no-grad forward of layer on x, after three warm-up forwards on a side stream
    (capture requires them; the op builds its launchers there, outside the capture)."""
    import torch

    with torch.no_grad():
        return side_warmed_graph(lambda: [layer(x) for _ in range(3)], lambda: layer(x))


def layers():
    """(torch layer, cudal2 layer) with the same random fp16 weights on the GPU."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    plain = decoder_layer(nn.Linear).cuda().half().eval()
    for p in plain.parameters():
        p.requires_grad_(False)
        if p.dim() == 2:
            p.normal_(0, p.shape[1] ** -0.5)
    ours = decoder_layer(nn.Linear).cuda().half().eval()  # cudal2.route_linears sends its layers to the op
    ours.load_state_dict(plain.state_dict())
    for p in ours.parameters():
        p.requires_grad_(False)
    return plain, ours


def operand_copies(m: int, n: int, k: int, l2_bytes: int, most: int) -> int:
    """Copies of (x, weight) of an (m, n, k) fp16 linear that fill twice the L2 together, at most `most`:
    in the layer each weight is read once per pass, from DRAM (a layer's weights are 0.4 GB), while a
    small weight called alone would stay in L2 from one call to the next; so timed calls cycle through
    copies, as the evaluator's rotated inputs do."""
    return max(1, min(most, -(-2 * l2_bytes // ((m + n) * k * 2))))


def compare(timers: dict, rounds: int) -> dict:
    """The "torch" and "cudal2" timers in interleaved rounds (alternating order): see compared."""
    return compared(interleaved(timers, rounds))


def compared(times: dict[str, list]) -> dict:
    """The "torch" and "cudal2" us of each round: per path its median us and every round's, and the
    per-round ratio torch us / cudal2 us (median and quartiles)."""
    ratio, q1, q3 = spread(p / o for p, o in zip(times["torch"], times["cudal2"]))
    out = {name: {"us": statistics.median(r), "rounds_us": r} for name, r in times.items()}
    return {**out, "ratio": ratio, "ratio_q1": q1, "ratio_q3": q3}


def saving_spread(times: dict[str, list]) -> tuple[float, float, float]:
    """The "torch" path's us less the "cudal2" path's, round by round: their median and quartiles."""
    return spread(p - o for p, o in zip(times["torch"], times["cudal2"]))


def layer_saving(plain, ours, x, rounds: int, calls: int) -> tuple[float, float, float]:
    """What ours saves a forward on x against plain in graph mode: each layer a CUDA graph of calls forwards
    (graph_timer), in interleaved rounds; saving_spread of the rounds."""
    return saving_spread(interleaved({"torch": graph_timer(lambda: plain(x), calls),
                                      "cudal2": graph_timer(lambda: ours(x), calls)}, rounds))


def tune(ours, tokens: list[int], budget: int, store: str, max_seconds: float, mode: str | None = None) -> dict:
    import torch

    import cudal2

    tuned, start = {}, time.monotonic()
    for t in tokens:
        if time.monotonic() - start > max_seconds:
            tuned[t] = "skipped: out of tuning time"
            continue
        x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16)
        cudal2.tune_model(ours, x, budget=budget, store=store, progress=False, **({"modes": (mode,)} if mode else {}))
        tuned[t] = f"budget {budget}" + (f", {mode} mode" if mode else "")
    return tuned


def gemm_rows(t: int, plain, rounds: int, calls: int) -> list[dict]:
    import torch
    from torch.nn import functional as F

    import cudal2
    from cudal2 import ops
    from cudal2.ir import GemmProblem

    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    rows = []
    for name, lin in (("q, o", plain.q), ("k, v", plain.k), ("gate, up", plain.gate), ("down", plain.down)):
        n, k = lin.weight.shape
        # (timed in CUDA graphs: the kernel a captured call takes)
        entry = ops._op_entry(GemmProblem(m=t, n=n, k=k, layout="NT"), torch.cuda.get_device_name(),
                              ops.GRAPH_MIN_SAVING_US)
        copies = operand_copies(t, n, k, l2, calls)
        sets = [(torch.randn(t, k, device="cuda", dtype=torch.float16), lin.weight.clone()) for _ in range(copies)]

        def cycling(op, sets=sets):
            turn = itertools.cycle(sets)
            return lambda: op(*next(turn))

        both = compare({"torch": graph_timer(cycling(F.linear), calls),
                        "cudal2": graph_timer(cycling(cudal2.linear), calls)}, rounds)
        del sets
        rows.append({"gemm": name, "shape": f"{t}x{n}x{k}", "served": entry is not None, "operand_sets": copies,
                     "spec": entry.spec.key() if entry else None,
                     # the layer runs this shape once per GEMM named; the table's own figure of what a call saves
                     "count": len(name.split(",")), "table_mode": entry.mode if entry else None,
                     "predicted_saving_us": ops._saving_us(entry) if entry else 0.0,
                     "torch_us": both["torch"]["us"], "cudal2_us": both["cudal2"]["us"],
                     "torch_rounds_us": both["torch"]["rounds_us"], "cudal2_rounds_us": both["cudal2"]["rounds_us"],
                     "ratio": both["ratio"], "ratio_q1": both["ratio_q1"], "ratio_q3": both["ratio_q3"]})
    return rows


GROUPS = (("q", "o"), ("k", "v"), ("gate", "up"), ("down",))  # the projections that share a weight shape


def rotated_operands(t: int, lin, calls: int) -> tuple[list, list, int]:
    """(xs, weights, L2 bytes): at least two copies of a t-row input and of lin's weight (operand_copies)."""
    import torch

    n, k = lin.weight.shape
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    copies = max(2, operand_copies(t, n, k, l2, calls))
    return ([torch.randn(t, k, device="cuda", dtype=torch.float16) for _ in range(copies)],
            [lin.weight.clone() for _ in range(copies)], l2)


def mode_saving_us(t: int, lin, calls: int, mode: str = "layer") -> float:
    """GPU time cudal2.linear saves against F.linear on this projection's shape now, timed as the
    table's figures are (cudal2.bench.timing.measure in mode, the confirmation's timing): layer, the
    prediction measured again, free of the search's draw; mlp_chain, what that mode would have predicted
    for the same kernel."""
    import torch
    from torch.nn import functional as F

    import cudal2
    from cudal2.bench.timing import LayerPrelude, TimingConfig, measure, neighbours_for

    xs, ws, l2 = rotated_operands(t, lin, calls)
    device = torch.device("cuda")
    got = measure({"torch": lambda i: F.linear(xs[i], ws[i]), "cudal2": lambda i: cudal2.linear(xs[i], ws[i])},
                  len(xs), mode, TimingConfig.confirmation(), device, LayerPrelude(device, l2, xs),
                  neighbours_for(mode, device, xs))
    return (got["torch"].timing.kernel_ms - got["cudal2"].timing.kernel_ms) * 1e3


def stream_savings_us(t: int, lin, rounds: int, calls: int) -> dict[str, float]:
    """What cudal2.linear saves the GPU's stream against F.linear on this projection's shape, the whole
    replay of a graph timed (no events between the calls, so a call's overlap with its neighbours
    counts): each call after LayerPrelude ("after prelude"); after a GEMM of a cold 4096x4096 weight,
    as k follows q in the layer ("after a GEMM"); or between two such GEMMs, as k sits between q and v
    ("between GEMMs": cuBLAS's kernels take part in programmatic dependent launch, so the GEMM after a
    call moves its cost too; docs/evaluation.md); or after the MLP's three GEMMs at this token count and
    before such a GEMM ("after the MLP": the compute-heavy work a layer runs between two q calls). Median
    of the per-round differences, us."""
    import torch
    from torch.nn import functional as F

    import cudal2
    from cudal2.bench.timing import LayerPrelude

    xs, ws, l2 = rotated_operands(t, lin, calls)
    copies = len(xs)
    before = [torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.float16) for _ in range(copies)]
    after = [torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.float16) for _ in range(copies)]
    hs = [torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16) for _ in range(copies)]
    prelude = LayerPrelude(torch.device("cuda"), l2, xs)
    gemm_before = lambda i: F.linear(hs[i], before[i])  # noqa: E731
    gemm_after = lambda i: F.linear(hs[i], after[i])  # noqa: E731
    gate, up = (torch.randn(INTER, HIDDEN, device="cuda", dtype=torch.float16) for _ in range(2))
    down = torch.randn(HIDDEN, INTER, device="cuda", dtype=torch.float16)
    mid = torch.randn(t, INTER, device="cuda", dtype=torch.float16)
    mlp = lambda i: (F.linear(hs[i], gate), F.linear(hs[i], up), F.linear(mid, down))  # noqa: E731
    out = {}
    for regime, work, then in (("after prelude", prelude, None), ("after a GEMM", gemm_before, None),
                               ("between GEMMs", gemm_before, gemm_after), ("after the MLP", mlp, gemm_after)):
        def cycling(op, work=work, then=then):
            turn = itertools.cycle(range(copies))

            def one():
                i = next(turn)
                work(i)
                op(xs[i], ws[i])
                if then is not None:
                    then(i)
            return one

        both = interleaved({"torch": graph_timer(cycling(F.linear), calls),
                            "cudal2": graph_timer(cycling(cudal2.linear), calls)}, rounds)
        out[regime] = saving_spread(both)[0]
    return out


def routed_projections(ours) -> dict:
    """name -> module of ours's projections that cudal2.route_linears routed through the op."""
    from cudal2.ops import RoutedLinear

    return {name: m for name, m in ours.named_children() if type(m) is RoutedLinear}


@contextlib.contextmanager
def serving_only(ours, names):
    """Inside the block, the op serves only the routed projections of ours named in names: the others run
    nn.Linear's forward, and are routed again after it."""
    import torch

    from cudal2.ops import RoutedLinear

    routed = routed_projections(ours)
    for name, m in routed.items():
        if name not in names:
            m.__class__ = torch.nn.Linear
    try:
        yield
    finally:
        for m in routed.values():
            m.__class__ = RoutedLinear


def served_alone(t: int, plain, ours, gemms: list[dict], rounds: int, calls: int) -> list[dict]:
    """Per served group of projections: what the table predicts it saves a layer call, the same measured
    again in layer, chain and mlp_chain mode now (chain: the table's own mode, on this GPU), the stream
    regimes, and the layer's own saving in graph mode with only that group served (the other routed
    projections put back to nn.Linear for the measurement): which GEMM the table's prediction misses, whether the miss is the table's draw or the
    regime, and whether mlp_chain would have predicted it."""
    import torch

    x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16)
    routed = routed_projections(ours)
    out = []
    for group in GROUPS:
        row = next(g for g in gemms if g["gemm"] == ", ".join(group))
        if not row["served"] or not all(name in routed for name in group):
            continue
        with serving_only(ours, group):
            # twice, each pair of timers captured anew: how far the layer's own figure moves between two
            # measurements bounds how closely any prediction can be judged
            savings = [layer_saving(plain, ours, x, rounds, calls) for _ in range(2)]
        (saving, q1, q3), again = savings[0], savings[1][0]
        now = mode_saving_us(t, getattr(plain, group[0]), calls)
        chain = mode_saving_us(t, getattr(plain, group[0]), calls, "chain")
        heavy = mode_saving_us(t, getattr(plain, group[0]), calls, "mlp_chain")
        stream = stream_savings_us(t, getattr(plain, group[0]), rounds, calls)
        count = len(group)
        out.append({"gemms": row["gemm"], "shape": row["shape"], "predicted_us": row["predicted_saving_us"] * count,
                    "layer_mode_now_us": now * count, "chain_now_us": chain * count, "mlp_chain_now_us": heavy * count,
                    "stream_after_prelude_us": stream["after prelude"] * count,
                    "stream_after_gemm_us": stream["after a GEMM"] * count,
                    "stream_between_gemms_us": stream["between GEMMs"] * count,
                    "stream_after_mlp_us": stream["after the MLP"] * count, "layer_saving_us": saving,
                    "layer_saving_q1_us": q1, "layer_saving_q3_us": q3, "layer_saving_again_us": again})
    return out


def checked(t: int, plain, ours, gemms: list[dict], rounds: int, calls: int) -> dict:
    """The flow a user follows: cudal2.check_routes times each served group of the layer's projections inside the
    layer (graph mode, t tokens) and declines this count where the group does not save time; then the two layers
    are timed again in graph mode. The table's prediction counts only the groups still served. ours is routed as
    route_linears(graphs=True) left it, and is left with the declines (route_linears clears them)."""
    import torch

    import cudal2

    x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16)
    checks = cudal2.check_routes(ours, x, graphs=True, rounds=rounds, calls=calls)
    declined = {name for c in checks if not c.kept for name in c.layers}
    with torch.no_grad():
        both = compare({"torch": graph_timer(lambda: plain(x), calls),
                        "cudal2": graph_timer(lambda: ours(x), calls)}, rounds)
    _, q1, q3 = saving_spread({path: both[path]["rounds_us"] for path in ("torch", "cudal2")})
    return {"checks": [{"layers": list(c.layers), "served": c.served, "kept": c.kept, "saving_us": c.saving_us,
                        "saving_q1_us": c.saving_q1_us, "saving_q3_us": c.saving_q3_us, "floor_us": c.floor_us}
                       for c in checks],
            "predicted_saving_us": sum(g["predicted_saving_us"] * g["count"] for g in gemms
                                       if not set(g["gemm"].split(", ")) & declined),
            "measured_saving_us": both["torch"]["us"] - both["cudal2"]["us"],
            "measured_saving_q1_us": q1, "measured_saving_q3_us": q3, "graph": both}


def measure(t: int, plain, ours, rounds: int, calls: int, modes=("eager", "compile", "graph"), check: bool = False,
            alone: bool = True) -> dict:
    import torch

    import cudal2

    x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        want, got = plain(x).float(), ours(x).float()
        row = {"tokens": t, "rel_error": float((got - want).norm() / want.norm()), "modes": {}}
        for mode in modes:
            # a model run inside CUDA graphs routes the layers a kernel serves only there too
            cudal2.route_linears(ours, graphs=mode == "graph")
            timers = {}
            for name, layer in (("torch", plain), ("cudal2", ours)):
                if mode == "compile":
                    layer = torch.compile(layer, dynamic=False, fullgraph=True)
                timer = graph_timer if mode == "graph" else wall_timer
                timers[name] = timer(lambda layer=layer: layer(x), calls)
            both = row["modes"][mode] = compare(timers, rounds)
            for name in timers:
                both[name]["tokens_per_s"] = t / both[name]["us"] * 1e6
        row["gemms"] = gemm_rows(t, plain, rounds, calls)
    # what the table predicts a layer call saves (its served GEMMs, each in the table's mode) against what
    # the layer measured in graph mode, where every served GEMM runs the tuned kernel
    row["predicted_saving_us"] = sum(g["predicted_saving_us"] * g["count"] for g in row["gemms"])
    graph = row["modes"]["graph"]
    row["measured_saving_us"] = graph["torch"]["us"] - graph["cudal2"]["us"]
    # how far the layer's own figure spreads: the quartiles of the per-round differences (the bar is judged
    # on the medians; at 128 tokens one projection's saving is the size of this spread, docs/evaluation.md)
    _, row["measured_saving_q1_us"], row["measured_saving_q3_us"] = saving_spread(
        {path: graph[path]["rounds_us"] for path in ("torch", "cudal2")})
    if check:
        cudal2.route_linears(ours, graphs=True)
        row["checked"] = checked(t, plain, ours, row["gemms"], rounds, calls)
    if alone:
        with torch.no_grad():
            cudal2.route_linears(ours, graphs=True)  # (which also clears what check_routes declined)
            row["served_alone"] = served_alone(t, plain, ours, row["gemms"], rounds, calls)
    return row


def _ratio(d: dict) -> str:
    return f"{d['ratio']:.3f} ({d['ratio_q1']:.3f} to {d['ratio_q3']:.3f})"


def _agreement(predicted: float, measured: float, served: bool) -> str:
    """The decoder's bar: the table's predicted saving within 25% of the layer's measured one. Where no GEMM is
    served both layers run the same kernels, and the bar has no saving to judge."""
    if not served:
        return "- (nothing served)"
    return "yes" if abs(predicted - measured) <= 0.25 * abs(measured) else "no"


def report(rows: list[dict], tuned: dict, env: dict, command: str, rounds: int, calls: int,
           routed: list[str], routed_in_graphs: list[str]) -> str:
    lines = [f"# A Llama-style decoder layer: nn.Linear against cudal2.linear ({env['date']})", "",
             f"`{command}`", "",
             f"{env.get('gpu_name', '?')}; torch {env.get('torch', '?')}, Triton {env.get('triton', '?')}, "
             f"nvidia-cutlass-dsl {env.get('cutlass_dsl', '?')}, apache-tvm-ffi {env.get('tvm_ffi', '?')}. "
             "fp16, one sequence, hidden 4096, 32/8 heads, MLP 14336.", "",
             f"us per call: medians of {rounds} rounds of {calls} back-to-back calls, the two layers taking turns "
             "(order reversed every other round). cudal2 / torch: the median of the per-round ratios nn.Linear's "
             "time / cudal2.linear's (our tokens/s over nn.Linear's), with its quartiles.", "",
             "Layers routed through cudal2.linear (cudal2.route_linears: a kernel in the table for their weight "
             f"shape): {', '.join(routed) or 'none'}; in graph mode also (route_linears(graphs=True): a kernel "
             f"serves them only in captured CUDA graphs): {', '.join(routed_in_graphs) or 'none'}; the others ran "
             "nn.Linear's forward.", "",
             "| tokens | mode | nn.Linear us | cudal2.linear us | cudal2 / torch tokens/s (25% to 75%) | tuned |",
             "|---:|---|---:|---:|---:|---|"]
    for row in rows:
        for mode, both in row["modes"].items():
            lines.append(f"| {row['tokens']} | {mode} | {both['torch']['us']:.1f} | {both['cudal2']['us']:.1f} "
                         f"| {_ratio(both)} | {tuned.get(row['tokens'], '')} |")
    lines += ["", "Each GEMM alone (CUDA graph, us per call, rounds as above; the calls cycle through copies of x and "
              "the weight that fill twice the L2):", "",
              "| tokens | GEMM | shape | F.linear | cudal2.linear | F.linear / cudal2.linear time (25% to 75%) "
              "| served in a graph by |", "|---:|---|---|---:|---:|---:|---|"]
    for row in rows:
        for g in row["gemms"]:
            lines.append(f"| {row['tokens']} | {g['gemm']} | {g['shape']} | {g['torch_us']:.2f} | "
                         f"{g['cudal2_us']:.2f} | {_ratio(g)} | {g['spec'] or 'torch'} |")
    predicted = [row for row in rows if "predicted_saving_us" in row]  # (results written before it was kept)
    if predicted:
        lines += ["", "What the table predicts a layer call saves (the sum over its served GEMMs of torch's time "
                  "minus the kernel's, in the table's mode) against the saving measured in graph mode (the difference "
                  "of the two layers' medians; in brackets the quartiles of the per-round differences); agreement: "
                  "within 25% of the measured saving:", "", "| tokens | table modes | predicted us | measured us "
                  "| agree |", "|---:|---|---:|---:|---|"]
    for row in predicted:
        modes = ", ".join(sorted({g["table_mode"] for g in row["gemms"] if g.get("table_mode")})) or "-"
        p, m = row["predicted_saving_us"], row["measured_saving_us"]
        quartiles = (f" ({row['measured_saving_q1_us']:.2f} to {row['measured_saving_q3_us']:.2f})"
                     if "measured_saving_q1_us" in row else "")
        lines.append(f"| {row['tokens']} | {modes} | {p:.2f} | {m:.2f}{quartiles} | {_agreement(p, m, modes != '-')} |")
    checked_rows = [row for row in rows if "checked" in row]
    if checked_rows:
        lines += ["", "After cudal2.check_routes (each served group of projections timed inside the layer in graph "
                  "mode, "
                  "this token count declined where the lower quartile of its saving is not above the A/A floor), the "
                  "layers timed again in graph mode; the table's prediction over the groups still served:", "",
                  "| tokens | each group inside the layer: saving us (25% to 75%), kept | floor us | predicted us "
                  "| measured us | agree |", "|---:|---|---:|---:|---:|---|"]
    for row in checked_rows:
        c = row["checked"]
        groups = "; ".join(f"{', '.join(g['layers'])} {g['saving_us']:.2f} ({g['saving_q1_us']:.2f} to "
                           f"{g['saving_q3_us']:.2f}) {'kept' if g['kept'] else 'declined'}"
                           for g in c["checks"] if g["served"]) or "none served"
        floor = max((g["floor_us"] for g in c["checks"]), default=0.0)
        p, m = c["predicted_saving_us"], c["measured_saving_us"]
        kept = any(g["served"] and g["kept"] for g in c["checks"])
        lines.append(f"| {row['tokens']} | {groups} | {floor:.2f} | {p:.2f} | {m:.2f} "
                     f"({c['measured_saving_q1_us']:.2f} to {c['measured_saving_q3_us']:.2f}) "
                     f"| {_agreement(p, m, kept)} |")
    alone = [(row["tokens"], g) for row in rows for g in row.get("served_alone", [])]
    if alone:
        lines += ["", "Each served group alone: the table's prediction, the same GEMMs timed again in layer, chain and "
                  "mlp_chain mode now (cudal2.bench.timing.measure, F.linear against cudal2.linear), and the layer's "
                  "saving in graph mode with only that group served (median of the per-round differences, "
                  "quartiles):", "",
                  "| tokens | GEMMs | shape | predicted us | layer mode now us | chain now us | mlp_chain now us "
                  "| stream after prelude us "
                  "| stream after a GEMM us | stream between GEMMs us | stream after the MLP us "
                  "| layer's saving us (25% to 75%) "
                  "| layer's saving again us |",
                  "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        cell = lambda g, key: f"{g[key]:.2f}" if key in g else "-"  # noqa: E731
        for t, g in alone:
            lines.append(f"| {t} | {g['gemms']} | {g['shape']} | {g['predicted_us']:.2f} | {g['layer_mode_now_us']:.2f} "
                         f"| {cell(g, 'chain_now_us')} | {cell(g, 'mlp_chain_now_us')} "
                         f"| {cell(g, 'stream_after_prelude_us')} "
                         f"| {cell(g, 'stream_after_gemm_us')} "
                         f"| {cell(g, 'stream_between_gemms_us')} | {cell(g, 'stream_after_mlp_us')} "
                         f"| {g['layer_saving_us']:.2f} ({g['layer_saving_q1_us']:.2f} to {g['layer_saving_q3_us']:.2f}) "
                         f"| {cell(g, 'layer_saving_again_us')} |")
    lines += ["", "Relative error of the cudal2 layer's output: " +
              ", ".join(f"{r['tokens']}: {r['rel_error']:.1e}" for r in rows)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokens", default="1,16,128,1024,4096")
    ap.add_argument("--tune-tokens", default=None,
                    help="the token counts to tune, in this order (default: --tokens); the others keep what the store has")
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--max-tune-seconds", type=float, default=300)
    ap.add_argument("--store", default=None, help="store for the searches (default: a file next to OUT)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per mode and token count")
    ap.add_argument("--calls", type=int, default=CALLS, help="back-to-back calls per path and round")
    ap.add_argument("--search-mode", default=None, choices=MODES,
                    help="the timing mode the searches rank in (default: the search's own objective)")
    ap.add_argument("--modes", default="eager,compile,graph",
                    help="the layer's call modes to time (graph is the one the table's prediction is checked in)")
    ap.add_argument("--check-routes", action="store_true",
                    help="also run cudal2.check_routes on the layer at each token count (graph mode) and time it again "
                         "with what the check kept: the flow a user follows")
    ap.add_argument("--no-alone", action="store_true",
                    help="skip timing each served group alone in the layer and in the other regimes")
    ap.add_argument("--traced-min-saving-us", type=float, default=None,
                    help="ops.NATIVE_TRACED_MIN_SAVING_US for this run: the GPU time a kernel must save a call for a "
                         "compiled graph to launch it through the C++ path (default: the op's)")
    args = ap.parse_args()

    import torch

    import cudal2
    from cudal2 import ops
    from cudal2.bench.environment import record
    from cudal2.store.table import TunedTable

    tokens = [int(t) for t in args.tokens.split(",")]
    if args.traced_min_saving_us is not None:
        ops.NATIVE_TRACED_MIN_SAVING_US = args.traced_min_saving_us
    # both layers share DecoderLayer.forward, compiled once per token count each
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4 * len(tokens))
    store = args.store or str(args.out.with_suffix(".db"))
    plain, ours = layers()
    tune_tokens = [int(t) for t in args.tune_tokens.split(",")] if args.tune_tokens else tokens
    tuned = tune(ours, tune_tokens, args.budget, store, args.max_tune_seconds, args.search_mode) \
        if args.budget > 0 else {}
    # the table the op serves by default (the layer-mode ranking, the search's objective); with
    # --budget 0: what earlier runs put in the store
    ops.set_table(TunedTable.for_serving(store))
    routed = cudal2.route_linears(ours)  # the layers whose weight the table has a kernel for
    routed_in_graphs = cudal2.route_linears(ours, graphs=True)  # ... and those it serves only in CUDA graphs
    cudal2.route_linears(ours)
    modes = tuple(args.modes.split(","))
    if "graph" not in modes:
        sys.exit("--modes must include graph: the table's predicted saving is checked against the graph mode's")
    rows = [measure(t, plain, ours, args.rounds, args.calls, modes, check=args.check_routes, alone=not args.no_alone)
            for t in tokens]
    env = record()
    command = "python3 benchmarks/e2e_decoder.py " + " ".join(sys.argv[1:])
    args.out.write_text(report(rows, tuned, env, command, args.rounds, args.calls, routed, routed_in_graphs))
    order = "torch then cudal2 in rounds 0, 2, 4, ...; cudal2 then torch in rounds 1, 3, ..."
    args.out.with_suffix(".json").write_text(json.dumps(
        {"command": command, "env": env, "tuned": tuned, "rounds": args.rounds, "calls": args.calls, "order": order,
         "routed": routed, "routed_in_graphs_too": routed_in_graphs, "rows": rows}, indent=1, default=str))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
