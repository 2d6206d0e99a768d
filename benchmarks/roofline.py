"""Small-M GEMMs against their roofline, timed as a model calls them: what fraction of its limit each
contender reaches, and how far the search's winner is from torch.matmul.

    python benchmarks/roofline.py [--split validation] [--tokens 1,16,128] [--min-weight-mib 8]
        [--part 0/1] [--budget 16] [--no-search] [--sweep deep,base] [--resume EARLIER.json]
        [--max-seconds 540] [--out-dir benchmarks/results]

Shapes: the serving shapes of one part of the split (cudal2/data/shapes/split.json; validation unless
--split train), layout NT (x @ W.t(), as nn.Linear), at the --tokens counts, whose weight W is at
least --min-weight-mib. --part i/n takes every n-th of them from the i-th, so that calls share the work.

In the same process, first: the GPU's DRAM copy rate (a device-to-device copy of 1 GiB, bytes read
plus bytes written over the time), its read rate (the fastest of a sum and streaming reads over 1 GiB) and its dense fp16 rate
(torch.matmul 8192^3, back to back). Then per shape, every contender in one layer-mode measurement
(cudal2.bench.timing, the search's own objective: before each call a read of twice the L2 evicts W
and a pass over A leaves it warm, as the layers before it would):
- torch: torch.matmul;
- cudal2: the winner of `cudal2.search(shape, budget=--budget)` (default proposer and backends; its
  own store in a temporary folder), compiled here and checked against the evaluator's reference;
- cublaslt_autotune, quack_autotune: the evaluator's baselines, where nvmath-python and
  quack-kernels are installed (null otherwise);
- sweep: with --sweep, the evaluator's best of those catalogs (cudal2.proposers.catalog) on the shape;
- floors, to read the fractions against: "empty" (an empty kernel: what the pattern's events and
  launch cost alone), "read_W" (the best of a few streaming reads of W's bytes and nothing else: what
  any kernel that must read W pays in this pattern).

A shape is memory-bound where its bytes (A, W and D once) over the read rate exceed its flops over
the dense rate; its ideal time is the larger of the two. fraction[c] = ideal / c's time: the share
of the GPU's limit a contender reaches. speedup = torch's time / cudal2's (layer mode).

Writes roofline_<gpu>_<date>.json (and .md) in --out-dir, row by row, so that an interrupted run
keeps what it measured (--resume continues it). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from cudal2 import shapes as shape_sets  # noqa: E402
from cudal2.ir import GemmProblem  # noqa: E402
from cudal2.tuner.aggregates import aggregate  # noqa: E402

TOKENS = (1, 16, 128)
MIN_WEIGHT_MIB = 8.0
BASELINES = ("cublaslt_autotune", "quack_autotune")
STREAM_GRIDS = (528, 1056, 2112)  # 4, 8 and 16 blocks per SM of a 132-SM GPU


def select(split: str, tokens: tuple[int, ...], min_weight_mib: float, part: int = 0, parts: int = 1) -> list[GemmProblem]:
    """The serving shapes of one part of the split at these token counts whose weight (N x K fp16)
    is at least min_weight_mib, smallest weight first; every parts-th from the part-th."""
    chosen = [s for s in shape_sets.shapes("serving", split)
              if s.m in tokens and 2 * s.n * s.k >= min_weight_mib * 2**20]
    chosen.sort(key=lambda s: (s.n * s.k, s.m, s.n))
    return [s.problem() for s in chosen][part::parts]


def shape_key(problem: GemmProblem) -> str:
    """A row's "shape": "MxNxK-LAYOUT" (the JSON's format; "label" holds the problem's full label)."""
    m, n, k = problem.shape
    return f"{m}x{n}x{k}-{problem.layout}"


def limits(problem: GemmProblem, read_GBps: float, dense_TFLOPS: float) -> dict:
    """The shape's bytes and flops, which limit binds ("memory" or "compute") and its ideal time in us."""
    m, n, k = problem.shape
    nbytes = 2 * (m * k + n * k + m * n)
    flops = 2 * m * n * k
    memory_us, compute_us = nbytes / read_GBps / 1e3, flops / dense_TFLOPS / 1e6
    return {"bytes": nbytes, "flops": flops, "bound": "memory" if memory_us >= compute_us else "compute",
            "ideal_us": max(memory_us, compute_us)}


def fractions(ideal_us: float, us: dict[str, float | None]) -> dict[str, float | None]:
    """contender -> ideal / its time (None where it was not measured)."""
    return {name: (ideal_us / t if t else None) for name, t in us.items()}


def summarize(rows: list[dict], at_least: float = 0.85) -> dict:
    """What the closing table reports: shapes, how many reach `at_least` of their limit (cudal2 and
    torch), the geomean speedup over torch and the slowest shape."""
    done = [r for r in rows if r.get("speedup")]
    reach = lambda name: sum((r["fraction"].get(name) or 0) >= at_least for r in done)  # noqa: E731
    agg = aggregate(r["speedup"] for r in done)
    return {"shapes": len(done), f"cudal2_at_{at_least}": reach("cudal2"), f"torch_at_{at_least}": reach("torch"),
            "geomean_speedup": agg.geomean if agg else None,
            "slowest": min(done, key=lambda r: r["speedup"])["shape"] if done else None,
            "slower_than_torch": sum(r["speedup"] < 1 for r in done)}


def markdown(out: dict) -> str:
    s = summarize(out["rows"])
    names = ["torch", "cudal2", *BASELINES, "sweep", "read_W"]
    lines = [f"# Small-M GEMMs against their roofline, timed as a model calls them ({out['gpu']}, {out['date']})", "",
             f"`{out['command']}`; {out['versions']}; GPU {out.get('gpu_uuid', '?')}; the search's backends: "
             f"{', '.join(out.get('search_backends') or ['not recorded'])}", "",
             f"Rates in this process: DRAM copy {out['copy_GBps']:.0f} GB/s (read + written bytes), read "
             f"{out['read_GBps']:.0f} GB/s, dense fp16 {out['dense_TFLOPS']:.0f} TFLOP/s. Fraction = the shape's "
             "ideal time (its bytes over the read rate, or its flops over the dense rate, whichever is larger) "
             "over the contender's time in layer mode. `empty` is an empty kernel in the same pattern.", "",
             f"{s['shapes']} shapes: cudal2 reaches 0.85 of the limit on {s['cudal2_at_0.85']}, torch on "
             f"{s['torch_at_0.85']}; cudal2 over torch geomean "
             + (f"{s['geomean_speedup']:.3f}" if s["geomean_speedup"] else "-")
             + f", slower on {s['slower_than_torch']}.", "",
             "| shape | bound | ideal us | empty us | " + " | ".join(f"{n} us (fraction)" for n in names)
             + " | speedup | cudal2's kernel |", "|---|---|---:|---:|" + "---:|" * len(names) + "---:|---|"]
    for r in out["rows"]:
        cells = []
        for n in names:
            t, f = r["us"].get(n), r["fraction"].get(n)
            cells.append(f"{t:.1f} ({f:.2f})" if t else "-")
        sp = f"{r['speedup']:.3f}" if r.get("speedup") else r.get("status", "-")
        lines.append(f"| {r['shape']} | {r['bound']} | {r['ideal_us']:.1f} | {r['us'].get('empty') or 0:.1f} | "
                     + " | ".join(cells) + f" | {sp} | `{r.get('spec', '-')}` |")
    return "\n".join(lines) + "\n"


# ---- on the GPU -------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _stream_kernel():
    """A Triton kernel that reads a buffer once (16-byte loads, an fp32 sum per block): the floor
    of any kernel that must read the same bytes; and an empty one. Made once per process (each
    definition is a JIT function of its own, compiled again)."""
    import triton
    import triton.language as tl

    @triton.jit
    def stream_read(x_ptr, out_ptr, numel, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros((BLOCK,), tl.float32)
        for start in range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < numel, other=0.0).to(tl.float32)
        tl.store(out_ptr + pid, tl.sum(acc))

    @triton.jit
    def empty(out_ptr):
        pass

    return stream_read, empty


def rates() -> dict:
    """The DRAM copy and read rates (GB/s) and the dense fp16 rate (TFLOP/s) of this GPU, timed as
    benchmarks/dram_ceilings.py times them (a graph of calls, the median)."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from dram_ceilings import timed_us

    n = 2**29  # 1 GiB of fp16
    src = torch.empty(n, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    copy_us = timed_us(lambda: dst.copy_(src))
    # the read rate: the fastest of torch's sum and the streaming reads (torch.sum alone reads a few
    # percent below what a GEMM's weight stream reaches, and a fraction above 1 would mean nothing)
    stream_read, _ = _stream_kernel()
    sink = torch.empty(max(STREAM_GRIDS), dtype=torch.float32, device="cuda")
    reads = [lambda: torch.sum(src, dtype=torch.float32)]
    reads += [(lambda g: lambda: stream_read[(g,)](src, sink, n, BLOCK=4096, num_warps=8))(g) for g in STREAM_GRIDS]
    read_us = min(timed_us(fn) for fn in reads)
    a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    mm_us = timed_us(lambda: torch.matmul(a, b), calls=5, reps=10)
    return {"copy_GBps": 4 * n / copy_us / 1e3, "read_GBps": 2 * n / read_us / 1e3,
            "dense_TFLOPS": 2 * 8192**3 / mm_us / 1e6}


def _search(problem: GemmProblem, ev, store, budget: int) -> tuple[dict, object | None]:
    import cudal2

    t0 = time.perf_counter()
    res = cudal2.search(problem, budget=budget, store=store, runner=ev, progress=False)
    info = {"search_s": round(time.perf_counter() - t0, 1)}
    if res.best is None:
        info["status"] = "search found no kernel"
        return info, None
    spec = res.best.spec
    info.update(spec=spec.summary(), backend=spec.backend, spec_json=spec.to_json(),
                search_claim=res.speedup.get("torch"))
    return info, spec


def _sweep_best(problem: GemmProblem, ev, catalogs: list[str]) -> tuple[dict, object | None]:
    """The evaluator's fastest (layer mode) of the named catalogs' specs for every installed backend."""
    from cudal2.codegen import registry
    from cudal2.ir import DEFAULT_ARCH
    from cudal2.proposers import catalog

    specs = []
    for backend in registry.default_backends(DEFAULT_ARCH):
        for name in catalogs:
            if name in catalog.names_for(backend):
                specs += catalog.catalog(backend, name=name)
    results = [r for r in ev.evaluate(problem, specs, modes=("layer",)) if r.ok]
    if not results:
        return {"sweep_status": f"none of {len(specs)} specs passed"}, None
    best = min(results, key=lambda r: r.kernel_ms("layer"))
    return {"sweep_spec": best.spec.summary(), "sweep_specs": len(specs)}, best.spec


def _compiled(problem: GemmProblem, spec, ops):
    """The spec's kernel compiled in this process, checked against the evaluator's reference."""
    import torch

    from cudal2.bench.correctness import expected_for, rel_error
    from cudal2.codegen import get_backend

    backend = get_backend(spec.backend)
    kernel = backend.compile(backend.render(problem, spec))
    expected = expected_for(problem, ops)
    out = torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda")
    kernel(ops.a, ops.b, out)
    torch.cuda.synchronize()
    err = rel_error(out, expected.ref)
    if not err <= expected.bound:
        raise RuntimeError(f"{spec.summary()}: error {err:.3g} over the bound {expected.bound:.3g}")
    return kernel


def measure_shape(problem: GemmProblem, ev, store, args, rate: dict) -> dict:
    import torch

    from cudal2.bench import baselines
    from cudal2.bench.inputs import make_operands, rotation_count
    from cudal2.bench.timing import LayerPrelude, TimingConfig, measure

    row = {"shape": shape_key(problem), "label": problem.label(), "split": args.split,
           **limits(problem, rate["read_GBps"], rate["dense_TFLOPS"])}
    specs = {}
    if not args.no_search:
        info, specs["cudal2"] = _search(problem, ev, store, args.budget)
        row.update(info)
    if args.sweep:
        info, specs["sweep"] = _sweep_best(problem, ev, args.sweep.split(","))
        row.update(info)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n_sets = rotation_count(problem, l2, memory_budget=8 << 30)
    sets = [make_operands(problem, 100 + i, "cuda") for i in range(n_sets)]
    outs = [torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda") for _ in range(n_sets)]
    calls = {"torch": lambda i: torch.matmul(sets[i].a, sets[i].b, out=outs[i])}
    for name, spec in specs.items():
        if spec is None:
            continue
        try:
            kernel = _compiled(problem, spec, sets[0])
        except Exception as e:  # noqa: BLE001 - a contender that fails here is reported, not timed
            row[f"{name}_status"] = f"{type(e).__name__}: {str(e)[:200]}"
            continue
        calls[name] = (lambda kern: lambda i: kern(sets[i].a, sets[i].b, outs[i]))(kernel)
    cache: dict = {}
    for name in BASELINES:
        prepared = baselines.prepare(name, problem, sets, outs, cache)
        if prepared.available:
            calls[name] = prepared.call
        else:
            row[f"{name}_status"] = prepared.detail[:200]
    stream_read, empty = _stream_kernel()
    sink = torch.empty(max(STREAM_GRIDS), dtype=torch.float32, device="cuda")
    weights = [s.b for s in sets]  # (K, N) views of W (N, K): the same bytes
    floors = {"read_W torch.sum": lambda i: torch.sum(weights[i], dtype=torch.float32)}
    for grid in STREAM_GRIDS:
        floors[f"read_W stream{grid}"] = (lambda g: lambda i: stream_read[(g,)](
            weights[i], sink, weights[i].numel(), BLOCK=4096, num_warps=8))(grid)
    floors["empty"] = lambda i: empty[(1,)](sink)
    timed = measure({**calls, **floors}, n_sets, "layer", TimingConfig(groups=args.groups), torch.device("cuda"),
                    prelude=LayerPrelude(torch.device("cuda"), l2, [s.a for s in sets]))
    us = {name: (m.timing.kernel_ms * 1e3 if m.timing else None) for name, m in timed.items()}
    reads = {k: v for k, v in us.items() if k.startswith("read_W") and v}
    row["read_W_how"] = min(reads, key=reads.get) if reads else None
    row["us"] = {**{k: v for k, v in us.items() if not k.startswith("read_W")},
                 "read_W": min(reads.values()) if reads else None}
    for name in ("cudal2", *BASELINES, "sweep"):
        row["us"].setdefault(name, None)
    row["fraction"] = fractions(row["ideal_us"], {k: v for k, v in row["us"].items() if k != "empty"})
    if row["us"].get("cudal2"):
        row["speedup"] = row["us"]["torch"] / row["us"]["cudal2"]
    return row


def gpu_uuid() -> str:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from crosscheck_winners import gpu_uuid as uuid

    return uuid()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", default="validation", choices=("train", "validation"))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="token counts (M), comma-separated")
    ap.add_argument("--min-weight-mib", type=float, default=MIN_WEIGHT_MIB)
    ap.add_argument("--part", default="0/1", help="i/n: every n-th shape from the i-th")
    ap.add_argument("--budget", type=int, default=16, help="the search's budget (kernels measured)")
    ap.add_argument("--no-search", action="store_true", help="time the baselines and floors only")
    ap.add_argument("--sweep", default="", help="catalog names (comma-separated) to sweep on each shape")
    ap.add_argument("--groups", type=int, default=30, help="timed groups per contender")
    ap.add_argument("--resume", type=Path, default=None, help="an interrupted run's .json: measure what it lacks")
    ap.add_argument("--max-seconds", type=float, default=540)
    ap.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    tokens = tuple(int(t) for t in args.tokens.split(","))
    part, parts = (int(x) for x in args.part.split("/"))
    problems = select(args.split, tokens, args.min_weight_mib, part, parts)
    if not problems:
        raise SystemExit(f"error: no {args.split} serving shape at tokens {tokens} has a weight of at least "
                         f"{args.min_weight_mib} MiB; lower --min-weight-mib or name other --tokens")
    import torch
    import triton

    if not torch.cuda.is_available():
        raise SystemExit("error: roofline.py measures a CUDA GPU, and torch sees none here; run it on one")
    from cudal2.api import default_runner
    from cudal2.codegen import registry
    from cudal2.ir import DEFAULT_ARCH
    from cudal2.store.store import Store

    start = time.time()
    gpu = torch.cuda.get_device_name()
    out = json.loads(args.resume.read_text()) if args.resume else None
    if out is None:
        out = {"gpu": gpu, "gpu_uuid": gpu_uuid(), "date": time.strftime("%Y-%m-%d"),
               "command": "python benchmarks/roofline.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "versions": f"torch {torch.__version__}, triton {triton.__version__}",
               # what the default search could use on this machine (a backend whose toolchain is absent is not searched)
               "search_backends": list(registry.default_backends(DEFAULT_ARCH)), **rates(), "rows": []}
    else:
        out["command"] += " ; then " + " ".join(argv if argv is not None else sys.argv[1:])
    done = {r["shape"] for r in out["rows"]}
    print(f"{gpu}: copy {out['copy_GBps']:.0f} GB/s, read {out['read_GBps']:.0f} GB/s, "
          f"dense {out['dense_TFLOPS']:.0f} TFLOP/s; {len(problems)} shapes, {len(done)} done", flush=True)
    slug = gpu.replace("NVIDIA ", "").split()[0].lower()
    path = args.out_dir / f"roofline_{slug}_{out['date']}.json"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    store = Store(Path(tempfile.mkdtemp()) / "roofline.db")
    with default_runner(baselines=("torch",)) as ev:
        for problem in problems:
            if shape_key(problem) in done:
                continue
            if time.time() - start > args.max_seconds:
                print(f"stopped after {args.max_seconds:.0f} s; continue with --resume {path}", flush=True)
                break
            row = measure_shape(problem, ev, store, args, out)
            torch.cuda.empty_cache()
            out["rows"].append(row)
            print(json.dumps({k: row.get(k) for k in ("shape", "bound", "us", "speedup", "spec")}), flush=True)
            path.write_text(json.dumps(out, indent=1))
            path.with_suffix(".md").write_text(markdown(out))
    print(markdown(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
