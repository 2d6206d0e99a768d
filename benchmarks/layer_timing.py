"""Which timing regime reproduces a GEMM's time inside a model? The decoder layer of
benchmarks/e2e_decoder.py (8B-class sizes, random fp16 weights, nn.Linear) is captured in a CUDA
graph and profiled: each GEMM kernel's duration inside the layer, and the kernels that run before it.
Then torch's F.linear on the same shape is timed alone, through cudal2's own timing code
(cudal2.bench.timing.measure), in each regime:

- offline: back-to-back calls over rotated input sets (no foreign work between calls);
- layer: cudal2's default objective: each call after LayerPrelude (a read of twice the L2, the
  weights of the projections before it; then an in-place pass over A, the norm that produced it);
- stream_only: the prelude's read alone (B and A both cold);
- elementwise_64mb: each call after a 64 MB in-place elementwise kernel (L2 full of dirty lines).

A regime reproduces the model's call where its time matches the in-layer time. Reported per GEMM
and token count: in-layer us and each regime's us over it; per regime, the geomean of those ratios
and their range.

    python benchmarks/layer_timing.py OUT.md [--tokens 1,16,128,1024] [--groups 30] [--replays 20]

Writes OUT.md and OUT.json (every figure, the environment, the command).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from e2e_decoder import HEAD_DIM, HEADS, HIDDEN, INTER, KV_HEADS, decoder_layer, layer_graph  # noqa: E402

from cudal2.tuner.aggregates import aggregate  # noqa: E402

# The layer's GEMMs in the order its forward runs them: name, out_features, in_features.
GEMMS = (("q", HEADS * HEAD_DIM, HIDDEN), ("k", KV_HEADS * HEAD_DIM, HIDDEN), ("v", KV_HEADS * HEAD_DIM, HIDDEN),
         ("o", HIDDEN, HEADS * HEAD_DIM), ("gate", INTER, HIDDEN), ("up", INTER, HIDDEN), ("down", HIDDEN, INTER))
REGIMES = ("offline", "layer", "stream_only", "elementwise_64mb")
_GEMM_KERNEL = re.compile(r"gemm|nvjet|xmma|cutlass|cublas", re.I)
_NOT_GEMM = re.compile(r"flash|fmha|attention|splitKreduce|reduce", re.I)


def in_layer_times(tokens: int, replays: int, graphed: bool = True) -> dict:
    """Each GEMM's kernel time (ms, median over replays) inside the layer's CUDA graph (graphed=False:
    eager forward passes), and the kernels that ran between it and the GEMM before it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    layer = decoder_layer(torch.nn.Linear).to("cuda", torch.float16).eval()
    x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.float16)
    graph = layer_graph(layer, x)
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
        for _ in range(replays):
            graph.replay() if graphed else layer(x)
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    kernels = [(e.name, e.time_range.elapsed_us()) for e in kernels]
    per_replay = len(kernels) // replays if replays else 0
    out = {"tokens": tokens, "kernels_per_replay": per_replay, "gemms": {}, "graphed": graphed}
    if per_replay == 0 or len(kernels) % replays:
        out["error"] = f"{len(kernels)} kernels over {replays} replays"
        return out
    durations: dict[str, list[float]] = {name: [] for name, _, _ in GEMMS}
    before: dict[str, list[str]] = {}
    for r in range(replays):
        seq = kernels[r * per_replay:(r + 1) * per_replay]
        gemm_at = [i for i, (n, _) in enumerate(seq) if _GEMM_KERNEL.search(n) and not _NOT_GEMM.search(n)]
        if len(gemm_at) == len(GEMMS) + 2:  # attention's two products (scores, then values) run between v and o
            gemm_at = gemm_at[:3] + gemm_at[5:]
        if len(gemm_at) != len(GEMMS):
            out["error"] = f"{len(gemm_at)} GEMM kernels in a replay, expected {len(GEMMS)}: {[seq[i][0][:60] for i in gemm_at]}"
            return out
        for j, (i, (name, _, _)) in enumerate(zip(gemm_at, GEMMS)):
            us = seq[i][1]
            nxt = i + 1  # a split-K GEMM's reduction belongs to it
            while nxt < len(seq) and "reduce" in seq[nxt][0].lower() and "splitk" in seq[nxt][0].lower():
                us += seq[nxt][1]
                nxt += 1
            durations[name].append(us)
            if r == 0:
                prev = gemm_at[j - 1] + 1 if j else 0
                before[name] = [f"{n[:70]} ({d:.1f} us)" for n, d in seq[prev:i]] or ["(the GEMM before it)"]
                out.setdefault("kernel_names", {})[name] = seq[i][0][:100]
    out["gemms"] = {name: statistics.median(v) * 1e-3 for name, v in durations.items()}  # ms
    out["before"] = before
    del graph, layer
    torch.cuda.empty_cache()
    return out


class _Elementwise64:
    """The foreign work an outside harness used: a 64 MB in-place elementwise kernel."""

    def __init__(self):
        import torch

        self.buf = torch.ones(32 << 20, dtype=torch.float16, device="cuda")

    def __call__(self, i: int) -> None:
        self.buf.mul_(1)


def isolated_times(tokens: int, out_f: int, in_f: int, groups: int) -> dict[str, float]:
    """F.linear(x, W) alone on one shape, ms per call in each regime (cudal2.bench.timing)."""
    import torch
    from torch.nn import functional as F

    from cudal2.bench.timing import LayerPrelude, TimingConfig, measure

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    per_set = (tokens * in_f + out_f * in_f + tokens * out_f) * 2
    n_sets = max(2, min(64, math.ceil(2 * l2 / per_set)))
    g = torch.Generator(device="cuda").manual_seed(tokens * 7 + out_f)
    xs = [torch.randn(tokens, in_f, device="cuda", dtype=torch.float16, generator=g) for _ in range(n_sets)]
    ws = [torch.randn(out_f, in_f, device="cuda", dtype=torch.float16, generator=g) / in_f ** 0.5
          for _ in range(n_sets)]
    call = {"torch": lambda i: F.linear(xs[i], ws[i])}
    cfg = TimingConfig(groups=groups)
    preludes = {"layer": LayerPrelude("cuda", l2, xs), "stream_only": LayerPrelude("cuda", l2, None),
                "elementwise_64mb": _Elementwise64()}
    out = {"n_sets": n_sets}
    for regime in REGIMES:
        mode = "offline" if regime == "offline" else "layer"
        m = measure(call, n_sets, mode, cfg, "cuda", preludes.get(regime))["torch"]
        out[regime] = m.timing.kernel_ms if m.timing else float("nan")
    xs = ws = preludes = None  # (rebound, not deleted: the call closure reads them)
    torch.cuda.empty_cache()
    return out


def markdown(rows: list[dict], env: dict, cmd: str) -> str:
    lines = ["# Timing regimes against the decoder layer's own GEMM times\n",
             f"{env['gpu']}, torch {env['torch']}, {env['date']}. Command: `{cmd}`\n",
             "In-layer: the GEMM kernel's duration inside the layer's CUDA graph (profiler, median over "
             "replays). Each regime: F.linear alone timed by cudal2.bench.timing, its time over the in-layer "
             "time (1.00 = reproduces the model's call).\n",
             "| tokens | gemm | M x N x K | in-layer us | " + " | ".join(REGIMES) + " | before it in the layer |",
             "|---:|---|---|---:|" + "---:|" * len(REGIMES) + "---|"]
    for r in rows:
        lines.append(f"| {r['tokens']} | {r['gemm']} | {r['shape']} | {r['in_layer_ms'] * 1e3:.2f} | "
                     + " | ".join(f"{r[g] / r['in_layer_ms']:.3f}" for g in REGIMES) + f" | {'; '.join(r['before'])[:120]} |")
    lines += ["", "| regime | geomean over in-layer | min | max | mean abs deviation |", "|---|---:|---:|---:|---:|"]
    for g in REGIMES:
        ratios = [r[g] / r["in_layer_ms"] for r in rows if math.isfinite(r[g])]
        a = aggregate(ratios)
        if a is not None:
            lines.append(f"| {g} | {a.geomean:.3f} | {a.min:.3f} | {a.max:.3f} | "
                         f"{statistics.fmean(abs(x - 1) for x in ratios):.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    import datetime

    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokens", default="1,16,128,1024")
    ap.add_argument("--groups", type=int, default=30)
    ap.add_argument("--replays", type=int, default=20)
    a = ap.parse_args()
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "date": datetime.date.today().isoformat()}
    cmd = "python benchmarks/layer_timing.py " + " ".join(sys.argv[1:])
    rows, profiles = [], []
    t0 = time.perf_counter()
    for tokens in (int(t) for t in a.tokens.split(",")):
        prof = in_layer_times(tokens, a.replays)
        if "error" in prof:  # the profiler saw no kernels inside the graph's replays: eager passes
            print(f"tokens {tokens}, graphed: {prof['error']}; profiling eager passes", flush=True)
            prof = in_layer_times(tokens, a.replays, graphed=False)
        profiles.append(prof)
        if "error" in prof:
            print(f"tokens {tokens}: {prof['error']}", flush=True)
            continue
        for name, out_f, in_f in GEMMS:
            iso = isolated_times(tokens, out_f, in_f, a.groups)
            row = {"tokens": tokens, "gemm": name, "shape": f"{tokens}x{out_f}x{in_f}",
                   "in_layer_ms": prof["gemms"][name], "before": prof["before"][name], **iso}
            rows.append(row)
            print(f"{tokens:5d} {name:5s} in-layer {row['in_layer_ms'] * 1e3:8.2f} us  "
                  + "  ".join(f"{g} {row[g] / row['in_layer_ms']:.3f}" for g in REGIMES)
                  + f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    a.out.write_text(markdown(rows, env, cmd))
    a.out.with_suffix(".json").write_text(json.dumps({"env": env, "command": cmd, "rows": rows,
                                                      "profiles": profiles}, indent=1, default=str))
    print(markdown(rows, env, cmd))


if __name__ == "__main__":
    main()
