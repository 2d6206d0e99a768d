"""Does a served kernel's saving depend on where its weight lies in memory? A model's weight sits at one
address for the whole run, while the evaluator's figure averages over rotated copies at several. Per
shape, the weight is placed at PLACEMENTS offsets into one pool (a few MiB apart plus a random multiple
of 512 bytes), and at each placement F.linear and cudal2.linear (served from a table) are timed in --mode
(cudal2.bench.timing.measure, the confirmation's groups: layer, LayerPrelude then the call in a CUDA graph;
or chain, the call between its neighbour GEMMs, the replay less the floor's), the input at a placement of
its own too. The spread of each path's time over the placements,
and of the ratio, says how far one address can sit from the average the table predicts from.

    python benchmarks/weight_placement.py OUT.md --store STORE [--shapes 128x4096x4096,1x1024x4096]
        [--mode layer]

STORE: a store that serves the shapes (e2e_decoder.py --store). Writes OUT.md and OUT.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _outputs import write_results  # noqa: E402

PLACEMENTS, SEED = 12, 0
STRIDE_BYTES = 3 << 20  # between placements, before each one's random offset


def offsets(count: int, seed: int = SEED) -> list[int]:
    """Byte offsets of the placements: STRIDE_BYTES apart, each plus a random multiple of 512 bytes
    below 1 MiB (512: every kernel's alignment holds; random: the low address bits vary too)."""
    rng = random.Random(seed)
    return [i * STRIDE_BYTES + 512 * rng.randrange(2048) for i in range(count)]


def placed(pool, offset_bytes: int, rows: int, cols: int):
    """A (rows, cols) fp16 view of pool starting offset_bytes into it."""
    start = offset_bytes // 2
    return pool[start:start + rows * cols].view(rows, cols)


def time_placements(m: int, n: int, k: int, count: int, mode: str = "layer") -> list[dict]:
    import torch
    from torch.nn import functional as F

    import cudal2
    from cudal2.bench.timing import LayerPrelude, TimingConfig, measure, neighbours_for

    device = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    where = offsets(count)
    w_pool = torch.randn((where[-1] + 2 * n * k * 2) // 2, device=device, dtype=torch.float16) / k ** 0.5
    x_pool = torch.randn((where[-1] + 2 * m * k * 2) // 2, device=device, dtype=torch.float16)
    rows = []
    for off in where:
        w, x = placed(w_pool, off, n, k), placed(x_pool, off, m, k)
        got = measure({"torch": lambda i, x=x, w=w: F.linear(x, w), "cudal2": lambda i, x=x, w=w: cudal2.linear(x, w)},
                      1, mode, TimingConfig.confirmation(), device, LayerPrelude(device, l2, [x]),
                      neighbours_for(mode, device, [x]))
        t, o = (got[p].timing.kernel_ms * 1e3 for p in ("torch", "cudal2"))
        rows.append({"offset_bytes": off, "weight_ptr": w.data_ptr(), "torch_us": t, "cudal2_us": o, "ratio": t / o})
    return rows


def summary(rows: list[dict]) -> dict:
    out = {}
    for key in ("torch_us", "cudal2_us", "ratio"):
        xs = [r[key] for r in rows]
        out[key] = {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}
    return out


def markdown(results: list[dict], env: dict, command: str, mode: str = "layer") -> str:
    lines = [f"# A served kernel's time at several placements of its weight ({env['date']})", "",
             f"`{command}`", "",
             f"{env.get('gpu_name', '?')}, {env.get('gpu_uuid', '?')}; torch {env.get('torch', '?')}, "
             f"Triton {env.get('triton', '?')}, nvidia-cutlass-dsl {env.get('cutlass_dsl', '?')}. Timing mode {mode} "
             "(cudal2.bench.timing.measure, the confirmation's groups), one input set: the weight and the "
             "input at one address each. us per call; ratio: F.linear's time over the op's.", "",
             "| shape | served kernel | F.linear us min / median / max | op us min / median / max "
             "| ratio min / median / max |", "|---|---|---:|---:|---:|"]
    for r in results:
        s = r["summary"]
        cell = lambda d, f: f"{d['min']:{f}} / {d['median']:{f}} / {d['max']:{f}}"  # noqa: E731
        lines.append(f"| {r['shape']} | {r['served']} | {cell(s['torch_us'], '.2f')} | {cell(s['cudal2_us'], '.2f')} "
                     f"| {cell(s['ratio'], '.3f')} |")
    lines += ["", "Per placement (offset into the pool, MiB; us; ratio):", ""]
    for r in results:
        lines.append(f"- {r['shape']}: " + "; ".join(
            f"{p['offset_bytes'] / (1 << 20):.2f}: {p['torch_us']:.2f} / {p['cudal2_us']:.2f} = {p['ratio']:.3f}"
            for p in r["placements"]))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--store", required=True, help="a store that serves the shapes (e2e_decoder.py --store)")
    ap.add_argument("--shapes", default="128x4096x4096,128x14336x4096,1x1024x4096,16x4096x4096")
    ap.add_argument("--placements", type=int, default=PLACEMENTS)
    ap.add_argument("--mode", default="layer", choices=("layer", "chain", "mlp_chain"),
                    help="the timing mode at each placement")
    args = ap.parse_args()
    if not Path(args.store).exists():
        sys.exit(f"weight_placement.py: no store at {args.store}; pass the --store of an e2e_decoder.py run")
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
        if any(len(s) != 3 or min(s) < 1 for s in shapes):
            raise ValueError
    except ValueError:
        sys.exit(f"weight_placement.py: --shapes {args.shapes!r} is not MxNxK[,MxNxK...]; write e.g. 128x4096x4096")
    if args.placements < 2:
        sys.exit("weight_placement.py: --placements must be at least 2 to show a spread")

    from cudal2 import ops
    from cudal2.bench.environment import record
    from cudal2.ir import GemmProblem
    from cudal2.store.table import TunedTable

    ops.set_table(TunedTable.for_serving(args.store))
    results = []
    for m, n, k in shapes:
        # eager and graph-only entries alike: the timing captures a graph, where the op serves both
        entry = ops._op_entry(GemmProblem(m=m, n=n, k=k, layout="NT"), None, ops.GRAPH_MIN_SAVING_US)
        if entry is None:
            print(f"{m}x{n}x{k}: the table serves no kernel; skipped", flush=True)
            continue
        rows = time_placements(m, n, k, args.placements, args.mode)
        results.append({"shape": f"{m}x{n}x{k}", "served": f"{entry.spec.backend} {entry.spec.key()}",
                        "placements": rows, "summary": summary(rows)})
        s = results[-1]["summary"]["ratio"]
        print(f"{m}x{n}x{k}: ratio {s['min']:.3f} / {s['median']:.3f} / {s['max']:.3f}", flush=True)
    env = record()
    command = "python3 benchmarks/weight_placement.py " + " ".join(sys.argv[1:])
    write_results(args.out, markdown(results, env, command, args.mode), command, env, results, key="results",
                  mode=args.mode)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
