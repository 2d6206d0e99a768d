"""How fast cudal2 measures: dynamic-shape kernels against static ones, seconds to tune a new
shape, and checked (spec, shape) pairs per second. Every figure is taken with the project's
evaluator (correctness first, CUDA-graph kernel time, baselines interleaved), offline mode.

    python benchmarks/tune_speed.py OUT.md --probe h100_probe_cublas_vs_triton.json \\
        [--part static --part tune --part sweep] [--backend triton] [--max-seconds 500]

Parts:
- static: on each probe shape (fp16, NN), the rules' first proposals rendered static and dynamic,
  timed in one evaluator call; ratio = static kernel time / dynamic kernel time.
- tune: cudal2.search at budget 32 (rules, then Optuna; 3 leaders confirmed) on serving shapes
  from the validation split: cold (empty kernel caches), warm (the same shape again in a fresh
  store, kernels cached), another token count of that weight, a new weight, and the new weight
  again (its kernels compiled by the run before).
- sweep: SPECS catalog specs on small train serving shapes (1 GFLOP or less) through the loop of
  `cudal2 sweep`; pairs/s after the first two shapes (which compile the specs).

The report is rewritten after each part (with a .json beside it), so a run cut short keeps what
it measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from cudal2 import GemmProblem  # noqa: E402

BUDGET = 32


def tune_shapes() -> list[str]:
    """Three validation serving shapes: 64 and 255 tokens of the first validation weight, 1000
    tokens of the last (so the warm runs also meet a weight the cold run did not)."""
    from cudal2 import shapes as shape_sets

    val = shape_sets.shapes("serving", "validation")
    first, last = (val[0].n, val[0].k), (val[-1].n, val[-1].k)
    pick = [next(s for s in val if (s.n, s.k) == w and s.m == m) for w, m in ((first, 64), (first, 255), (last, 1000))]
    return [f"{s.m}x{s.n}x{s.k}" for s in pick]


def search_own_s(row: dict) -> float:
    """Seconds of a tune run outside the evaluator's phases (EvalStats): the search's own work,
    its proposals, sampler and store."""
    p = row["phases"]
    return row["seconds"] - p["waiting_for_compile_s"] - p["checking_s"] - p["timing_s"]


def twin_outcome(store_url: str, problem) -> dict:
    """How the confirmation's static twin fared (cudal2.tuner.confirm): its original's median
    relative time over its own (above 1: static faster), and whether it was kept; {} without one."""
    from cudal2.store.rounds import kept_twins, summarize, twin_rival
    from cudal2.store.store import Store

    confirmed = summarize(Store(store_url).confirmations(problem), "torch", "offline")
    kept = kept_twins(confirmed)
    for key, c in confirmed.items():
        rival = twin_rival(confirmed, c)
        if rival is not None:
            ratio = rival.score / c.score if not c.failed and math.isfinite(c.score) else None
            return {"twin_ratio": ratio, "twin_kept": key in kept and not c.failed,
                    "twin_status": c.rounds[-1]["result"].status}
    return {}


def compile_seconds(store_url: str, problem) -> dict:
    """The compile seconds the kernel table records for problem's candidates (pool and worker)."""
    from cudal2.store.store import Store

    secs = [r["result"].compile_s for r in Store(store_url).kernels(problem)]
    return {"compile_s_sum": sum(secs), "compile_s_max": max(secs, default=0.0),
            "compiled_over_1s": sum(s > 1.0 for s in secs)}


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _specs(problem, backends, n):
    from cudal2.proposers.rules import RulesProposer

    return [p.spec for p in RulesProposer(backends=backends).propose(problem, n=n)]


def part_static(probe: Path, backends, deadline: float, out: dict, save) -> None:
    """Static against dynamic on the probe shapes."""
    from cudal2.bench.evaluator import Evaluator

    rows = out.setdefault("static", [])
    shapes = [(r["M"], r["N"], r["K"]) for r in json.loads(probe.read_text())]
    with Evaluator(baselines=("torch",)) as ev:
        for m, n, k in shapes:
            if time.time() > deadline:
                break
            problem = GemmProblem(m=m, n=n, k=k)
            specs = _specs(problem, backends, 2)
            pairs = [(s.replace(shape_specialization="static"), s.replace(shape_specialization="dynamic"))
                     for s in specs]
            results = ev.evaluate(problem, [x for p in pairs for x in p])
            for i, spec in enumerate(specs):
                st, dy = results[2 * i], results[2 * i + 1]
                row = {"shape": problem.label(), "spec": spec.summary(),
                       "static_ms": st.kernel_ms() if st.ok else None, "dynamic_ms": dy.kernel_ms() if dy.ok else None,
                       "static_status": st.status, "dynamic_status": dy.status}
                row["ratio"] = (row["static_ms"] / row["dynamic_ms"]) if row["static_ms"] and row["dynamic_ms"] else None
                rows.append(row)
                print(f"{problem.label():28s} {spec.summary():40s} static {row['static_ms']} dynamic "
                      f"{row['dynamic_ms']} ratio {row['ratio']}", flush=True)
            save()


def part_tune(backends, deadline: float, out: dict, save, shared: bool = False, lookahead: bool = False,
              shapes: tuple[str, ...] = (), layout: str = "NT", peers: bool = True) -> None:
    """Seconds to tune new shapes: cold caches, warm caches. shared: one evaluator for every run, as
    a process that tunes shapes one after another keeps it (the cold run then pays its start: the
    worker, the compile pool, CUDA); otherwise each search starts its own."""
    import cudal2
    from cudal2.api import default_runner

    rows = out.setdefault("tune", [])
    cache = Path(tempfile.mkdtemp(prefix="cudal2-tune-"))
    # Every cache a compile writes to starts empty: cudal2's (rendered modules, the CuTe DSL's
    # exports) and Triton's own. Worker and pool processes inherit these.
    os.environ["CUDAL2_CACHE_DIR"] = str(cache / "cudal2")
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    if shapes:  # given shapes, each tuned once, one after another
        runs = [("given shape", s) for s in shapes]
    else:
        a, b, c = tune_shapes()
        # The last run tunes the new weight again, into a fresh store: warm in the sense (the
        # kernels its search tries are compiled), on a 55-GFLOP shape rather than a 3-GFLOP one.
        runs = [("cold", a), ("warm, same shape", a), ("warm, new shape", b), ("warm, new weight", c),
                ("warm, the new weight again", c)]
    from cudal2.bench.baselines import QUACK
    from cudal2.bench.evaluator import DEFAULT_BASELINES

    # without peers: the confirmation rounds time torch.matmul and cuBLASLt alone (quack's autotune
    # of each new shape, its setup, then never runs)
    config = {} if peers else {"baselines": tuple(b for b in DEFAULT_BASELINES if b not in QUACK)}
    runner = default_runner(**config) if shared else None
    for i, (kind, shape) in enumerate(runs):
        if time.time() > deadline:
            break
        start = time.time()
        before = dataclasses.asdict(runner.stats) if hasattr(runner, "stats") else None
        store = str(cache / f"store{i}.db")
        res = cudal2.search(shape, layout=layout, backends=backends, budget=BUDGET, progress=False,
                            store=store, seed=0, runner=runner, lookahead=lookahead)
        wall = time.time() - start
        kind += ", one evaluator for all runs" if shared else ", an evaluator per search"
        kind += ", look-ahead" if lookahead else ""
        kind += "" if peers else ", no peers"
        row = {"kind": kind, "shape": res.problem.label(), "seconds": wall, "evaluations": res.evaluations,
               "speedup_torch": res.speedup.get("torch"), "best": res.best.spec.summary() if res.best else None,
               "search_phases": dict(res.phase_s), "proposals": dict(res.proposals)}
        if before is not None:  # where the shared evaluator's time went in this run (EvalStats)
            after = dataclasses.asdict(runner.stats)
            row["phases"] = {k: after[k] - before[k] for k in after}
        row.update(twin_outcome(store, res.problem))
        row.update(compile_seconds(store, res.problem))
        rows.append(row)
        print(f"tune {kind:18s} {row['shape']:26s} {wall:6.1f} s, {res.evaluations} evaluations, "
              f"{row['speedup_torch']} of torch" + (f"; evaluator {row['phases']}" if "phases" in row else ""),
              flush=True)
        save()
    if runner is not None:
        runner.close()


def part_sweep(backends, n_specs: int, deadline: float, out: dict, save) -> None:
    """Checked (spec, shape) pairs per second: `cudal2 sweep`'s own loop (run_sweep, the sweep
    timing config, baselines once per shape) with n_specs catalog specs on small train serving
    shapes (1 GFLOP or less). The first two shapes compile the specs; the rest is the warm rate."""
    from cudal2 import shapes as shape_sets
    from cudal2.bench.evaluator import Evaluator
    from cudal2.bench.timing import TimingConfig
    from cudal2.dataset import run_sweep
    from cudal2.proposers.catalog import sample
    from cudal2.store.store import Store

    small = [s.problem() for s in shape_sets.shapes("serving", "train") if 2 * s.m * s.n * s.k <= 1e9]
    small = small[:: max(1, len(small) // 14)][:14]
    specs = sample(n_specs, backends[0])
    store = Store(Path(tempfile.mkdtemp(prefix="cudal2-sweep-")) / "store.db")
    row = {"shapes": len(small), "specs": len(specs)}
    with Evaluator(timing=TimingConfig.sweep()) as ev:
        again = Store(store.url.replace("store.db", "again.db"))
        for label, key, part, into in (("first pass (compiles)", "first_s", small[:2], store),
                                       ("new shapes", "second_s", small[2:], store),
                                       ("the same shapes again (every variant compiled)", "again_s", small[2:], again)):
            start, pairs, ok = time.time(), 0, 0
            for p in part:
                if time.time() > deadline:
                    break
                summary = run_sweep([p], specs, ev, into)
                pairs += summary.measured
                ok += summary.correct
            row[key] = time.time() - start
            row[key.replace("_s", "_pairs")] = pairs
            row[key.replace("_s", "_ok")] = ok
            print(f"sweep {label}: {pairs} pairs ({ok} correct) in {row[key]:.1f} s = "
                  f"{pairs / max(row[key], 1e-9):.1f} pairs/s; {ev.stats.line()}", flush=True)
        row["stats"] = ev.stats.line()
    out["sweep"] = row
    save()


def markdown(out: dict) -> str:
    host = f", host {out['host_cpu']}" if out.get("host_cpu") else ""
    lines = [f"# Measurement speed ({out.get('gpu', '?')}{host}, {out.get('date', '')})", "",
             f"`{out.get('command', '')}`", ""]
    st = [r for r in out.get("static", []) if r["ratio"]]
    if out.get("static"):
        g = geomean(r["ratio"] for r in st)
        worst = min(st, key=lambda r: r["ratio"]) if st else None
        summary = (f"{len(st)} (shape, spec) pairs on {len({r['shape'] for r in st})} probe shapes; static/dynamic "
                   f"geometric mean {g:.3f}; lowest {worst['ratio']:.3f} ({worst['shape']}, `{worst['spec']}`). "
                   "Above 1: the dynamic kernel is faster." if st else "no pair measured")
        lines += ["## Dynamic-shape kernels against static ones (offline kernel time)", "", summary, "",
                  "| shape | spec | static us | dynamic us | static/dynamic |", "|---|---|---:|---:|---:|"]
        for r in out["static"]:
            lines.append(f"| {r['shape']} | `{r['spec']}` | {_us(r['static_ms'])} | {_us(r['dynamic_ms'])} | "
                         f"{r['ratio']:.3f} |" if r["ratio"] else
                         f"| {r['shape']} | `{r['spec']}` | {r['static_status']} | {r['dynamic_status']} | - |")
        lines.append("")
    if out.get("tune"):
        lines += [f"## Seconds to tune a new shape (budget {BUDGET}, confirmed)", "",
                  "| run | shape | seconds | evaluations | vs torch | best | static twin: generic/static, kept |",
                  "|---|---|---:|---:|---:|---|---|"]
        for r in out["tune"]:
            sp = f"{r['speedup_torch']:.3f}" if r["speedup_torch"] else "-"
            twin = ("-" if "twin_kept" not in r else
                    f"{r['twin_ratio']:.3f}, {'kept' if r['twin_kept'] else 'not kept'}" if r.get("twin_ratio")
                    else r.get("twin_status", "-"))
            lines.append(f"| {r['kind']} | {r['shape']} | {r['seconds']:.1f} | {r['evaluations']} | {sp} | "
                         f"`{r['best']}` | {twin} |")
        lines.append("")
        if any("phases" in r for r in out["tune"]):
            lines += ["Where the evaluator's time went in each run (seconds; the rest of a run's time is the "
                      "search's own: proposals, sampler, store):", "",
                      "| run | candidates | compile wait | checks | timing | baseline setup | of which quack's | "
                      "compile s recorded (sum, max) | rest |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for r in out["tune"]:
                p = r.get("phases")
                if p:
                    lines.append(f"| {r['kind']} | {p['candidates']} | {p['waiting_for_compile_s']:.1f} | "
                                 f"{p['checking_s']:.1f} | {p['timing_s']:.1f} | {p['baseline_setup_s']:.1f} | "
                                 f"{p.get('peer_setup_s', 0.0):.1f} | "
                                 f"{r.get('compile_s_sum', 0):.1f}, {r.get('compile_s_max', 0):.1f} | "
                                 f"{search_own_s(r):.1f} |")
            lines.append("")
        if any("search_phases" in r for r in out["tune"]):
            lines += ["The search's steps in each run (wall seconds; \"measure\" and \"confirm\" hold the "
                      "evaluator's time above; the rest of a run is its start, the memory check and the result):", "",
                      "| run | setup | propose | ask | measure | record | confirm | measured from: proposer, sampler |",
                      "|---|---:|---:|---:|---:|---:|---:|---|"]
            for r in out["tune"]:
                p = r.get("search_phases")
                if p:
                    src = ", ".join(f"{k} {v}" for k, v in sorted(r.get("proposals", {}).items()))
                    lines.append(f"| {r['kind']} | " + " | ".join(f"{p.get(k, 0.0):.1f}" for k in
                                 ("setup", "propose", "ask", "measure", "record", "confirm")) + f" | {src} |")
            lines.append("")
    if out.get("sweep"):
        s = out["sweep"]
        lines += ["## Bulk measurement", "",
                  f"{s['specs']} catalog specs on {s['shapes']} serving shapes of 1 GFLOP or less (`cudal2 sweep`'s loop): "
                  f"first two shapes {s.get('first_pairs', 0)} pairs in {s.get('first_s', 0):.1f} s; the rest "
                  f"{s.get('second_pairs', 0)} pairs in {s.get('second_s', 0):.1f} s = "
                  f"{s.get('second_pairs', 0) / max(s.get('second_s', 1e-9), 1e-9):.1f} checked pairs/s; the same "
                  f"shapes again into a new store (every variant compiled): {s.get('again_pairs', 0)} pairs in "
                  f"{s.get('again_s', 0):.1f} s = {s.get('again_pairs', 0) / max(s.get('again_s', 1e-9), 1e-9):.1f} "
                  "checked pairs/s. "
                  f"Evaluator time per candidate: {s.get('stats', '')}", ""]
    return "\n".join(lines)


def _us(ms):
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--probe", type=Path, help="the H100 probe file (for --part static)")
    ap.add_argument("--part", action="append", choices=["static", "tune", "sweep"])
    ap.add_argument("--backend", action="append")
    ap.add_argument("--specs", type=int, default=64, help="catalog specs per shape in the sweep")
    ap.add_argument("--max-seconds", type=float, default=500)
    ap.add_argument("--lookahead", action="store_true",
                    help="tune: the search compiles its next batch while one is measured")
    ap.add_argument("--shape", action="append", default=[],
                    help="tune: these shapes, each once (default: a cold run and four warm ones on serving shapes)")
    ap.add_argument("--layout", default="NT", help="tune: the layout of the shapes")
    ap.add_argument("--no-peers", action="store_true",
                    help="tune: the searches time torch.matmul and cuBLASLt only (no quack baselines)")
    ap.add_argument("--shared-evaluator", action="store_true",
                    help="tune: one evaluator for every run (otherwise each search starts its own)")
    args = ap.parse_args()
    parts = args.part or ["static", "tune", "sweep"]
    backends = tuple(args.backend or ["triton"])
    if "static" in parts and not args.probe:
        ap.error("--part static needs --probe")
    if args.no_peers and not args.shared_evaluator:
        ap.error("--no-peers configures the shared evaluator: add --shared-evaluator")
    import torch

    from cudal2.bench.environment import host_cpu

    out = {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU", "host_cpu": host_cpu(),
           "date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/tune_speed.py " + " ".join(sys.argv[1:]),
           "backends": backends}

    def save():
        args.out.write_text(markdown(out) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))

    start = time.time()
    share = args.max_seconds / len(parts)
    for i, part in enumerate(parts):
        deadline = start + share * (i + 1)
        if part == "static":
            part_static(args.probe, backends, deadline, out, save)
        elif part == "tune":
            part_tune(backends, deadline, out, save, args.shared_evaluator, args.lookahead, tuple(args.shape),
                      args.layout, peers=not args.no_peers)
        else:
            part_sweep(backends, args.specs, deadline, out, save)
    save()
    print(markdown(out))


if __name__ == "__main__":
    main()
