"""Does what the cost model learned carry to a GPU it never saw? Leave one GPU out: train on the
sweeps of the others, then, on the held-out GPU, search validation shapes at a small budget with the
learned proposer and sweep the full spec catalogs on the same shapes in the same run.

    python benchmarks/transfer.py --train-data sweep_h100.csv.gz [--train-data ...] \\
        [--shapes 30] [--budget 16] [--out benchmarks/results]
    python benchmarks/transfer.py --smoke        # CPU: the recorded runner, two shapes

Writes benchmarks/results/transfer_<testgpu>_<date>.json:
    {"train_gpus": [str], "test_gpu": str, "budget": 16,
     "rows": [{"shape": "MxNxK-NT", "search": f, "sweep_best": f, "first_pick": f}]}
and a .md beside it. Each figure is a speedup over torch.matmul in layer mode (the search's
objective): `search` the search's confirmed best, `sweep_best` the best of every catalog spec measured
once, `first_pick` the sweep's measurement of the model's first pick (what a shape never searched gets).

The shapes are serving validation shapes (cudal2/data/shapes/split.json), spread over their sizes:
nothing is fitted on them. The training drops every pair of the held-out GPU and of these shapes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from cudal2.ir import DeviceProfile, KernelSpec  # noqa: E402
from cudal2.proposers.model_files import gpu_slug  # noqa: E402

SMOKE_SHAPES = 2
SMOKE_SPECS = 12  # catalog specs per backend the smoke run sweeps


def validation_shapes(count: int):
    """count serving validation shapes, evenly spaced over their sizes (FLOPs), smallest first."""
    from cudal2.shapes import shapes

    every = sorted(shapes("serving", "validation"), key=lambda s: (s.m * s.n * s.k, s.label))
    if count >= len(every):
        return every
    return [every[round(i * (len(every) - 1) / (count - 1))] for i in range(count)] if count > 1 else every[:1]


def _shape_key(problem) -> str:
    return f"{problem.m}x{problem.n}x{problem.k}-{problem.layout}"


def _kernel_key(spec: KernelSpec) -> str:
    """A spec's key whatever its shape specialization: the sweep measures catalog specs as given."""
    return spec.model_copy(update={"shape_specialization": "dynamic"}).key()


def training_samples(paths: list[Path], test_gpu: str, test_labels: set[str]):
    """The exports' pairs of every GPU but the held-out one, less those of the test shapes."""
    from cudal2.learn.samples import from_csv

    samples = [s for p in paths for s in from_csv(p)]
    kept = [s for s in samples if s.gpu != test_gpu and s.group not in test_labels]
    if not kept:
        raise SystemExit(f"no training pair left: the exports hold only {test_gpu!r} or the test shapes")
    return kept


def train_model(samples, arch: str, out: Path, say=print) -> Path:
    from cudal2.learn.train import train

    report = train(samples, DeviceProfile.of_arch(arch), seed=0, say=say)
    report.model.info["source"] = {"benchmark": "transfer.py"}
    report.model.save(out)
    return out


def sweep(problems, backends, arch: str, runner, store, smoke: bool,
          also: list[KernelSpec] = ()) -> dict[str, tuple[float, dict[str, float]]]:
    """shape -> (best speedup over torch.matmul, {kernel key: speedup}) over the full catalogs (the
    smoke run: a few specs of them) and the specs `also` names (the model's first picks)."""
    from cudal2.dataset.sweep import run_sweep
    from cudal2.learn.samples import from_store
    from cudal2.proposers.catalog import CATALOGS, catalog

    specs = []
    for backend in backends:
        mine = {s.key(): s for name, axes in CATALOGS.items() if backend in axes for s in catalog(backend, arch, name)}
        specs += list(mine.values())[:SMOKE_SPECS] if smoke else list(mine.values())
    keys = {s.key() for s in specs}
    specs += [s for s in also if s.key() not in keys and not keys.add(s.key())]
    run_sweep(problems, specs, runner, store, modes=("layer",))
    out: dict[str, tuple[float, dict[str, float]]] = {}
    wanted = {p.label(): _shape_key(p) for p in problems}
    for s in from_store(store):
        if s.group in wanted:
            best, each = out.get(wanted[s.group], (0.0, {}))
            speed = math.exp(s.log_speedup)
            each[_kernel_key(s.spec)] = max(each.get(_kernel_key(s.spec), 0.0), speed)
            out[wanted[s.group]] = (max(best, speed), each)
    return out


def _figure(x) -> float | None:
    return round(x, 4) if x is not None and math.isfinite(x) and x > 0 else None  # None: not measured


def run(args) -> dict:
    import cudal2
    from cudal2.proposers.learned import LearnedProposer, load_model
    from cudal2.store.store import Store
    from cudal2.tuner.recorded import RecordedRunner

    arch = args.arch
    device = DeviceProfile.live(arch)
    runner = RecordedRunner() if args.smoke else None
    test_gpu = "recorded" if args.smoke else device.name
    chosen = validation_shapes(SMOKE_SHAPES if args.smoke else args.shapes)
    problems = [s.problem() for s in chosen]
    work = Path(tempfile.mkdtemp(prefix="transfer-"))
    if args.train_data:
        samples = training_samples(args.train_data, test_gpu, {p.label() for p in problems})
        model_path = train_model(samples, arch, args.out / f"transfer_model_{gpu_slug(test_gpu)}.json")
    elif args.smoke:
        from cudal2.proposers.model_files import shipped_model_path

        model_path = shipped_model_path(arch)  # the shipped model: its GPUs are the training GPUs
    else:
        raise SystemExit("give --train-data (exports of the other GPUs' sweeps), or --smoke")
    train_gpus = sorted((load_model(model_path).info.get("data") or {}).get("gpus") or {})
    if test_gpu in train_gpus:
        raise SystemExit(f"the model was trained on {test_gpu!r}, the GPU it is to be tested on")
    proposer = LearnedProposer(args.backends, arch, model=model_path, device=device)
    firsts = [proposer.ranked(problem, 1)[0][0] for problem in problems]
    swept = sweep(problems, args.backends, arch, runner or cudal2.api.default_runner(), Store(work / "sweep.db"),
                  args.smoke, also=firsts)
    rows = []
    for problem, first in zip(problems, firsts):
        key = _shape_key(problem)
        proposer = LearnedProposer(args.backends, arch, model=model_path, device=device)  # a fresh search's
        result = cudal2.search(f"{problem.m}x{problem.n}x{problem.k}", layout=problem.layout, backends=args.backends,
                               proposer=proposer, budget=args.budget, store=Store(work / f"search_{key}.db"),
                               runner=runner, arch=arch, seed=0, progress=False)
        best, each = swept.get(key, (float("nan"), {}))
        rows.append({"shape": key, "search": _figure(result.speedup.get("torch")), "sweep_best": _figure(best),
                     "first_pick": _figure(each.get(_kernel_key(first)))})
        print(f"{key}: search {rows[-1]['search']}, sweep best {rows[-1]['sweep_best']}, "
              f"first pick {rows[-1]['first_pick']}", flush=True)
    return {"train_gpus": train_gpus, "test_gpu": test_gpu, "budget": args.budget, "rows": rows}


def markdown(out: dict) -> str:
    rows = out["rows"]
    rows = [r for r in rows if None not in (r["search"], r["sweep_best"], r["first_pick"])]
    reached = [r for r in rows if r["search"] >= 0.98 * r["sweep_best"]]
    close = [r for r in rows if r["first_pick"] >= 0.95 * r["sweep_best"]]
    lines = [f"# Transfer: trained on {', '.join(out['train_gpus'])}, tested on {out['test_gpu']} "
             f"(budget {out['budget']})", "",
             f"Search at budget {out['budget']} reaches 0.98 of the sweep's best on {len(reached)} of {len(rows)} "
             f"shapes; the first pick is within 5 % of it on {len(close)} of {len(rows)} (of {len(out['rows'])} "
             "shapes, those with all three figures).", "",
             "| shape | search | sweep best | first pick | search / best | first / best |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['search']:.3f} | {r['sweep_best']:.3f} | {r['first_pick']:.3f} | "
                     f"{r['search'] / r['sweep_best']:.3f} | {r['first_pick'] / r['sweep_best']:.3f} |")
    lines += ["", "Speedups over torch.matmul in layer mode; the shapes are serving validation shapes, never "
              "fitted on, and the training dropped every pair of the test GPU."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-data", type=Path, action="append", default=[],
                    help="an export of another GPU's sweep (cudal2 dataset export); repeat for several")
    ap.add_argument("--shapes", type=int, default=30, help="validation shapes to search and sweep")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--backends", default="triton,cute_dsl")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--smoke", action="store_true", help="CPU: the recorded runner, two shapes, a few specs")
    args = ap.parse_args(argv)
    args.backends = tuple(b for b in args.backends.split(",") if b)
    if args.smoke:
        args.backends = ("triton",)
    args.out.mkdir(parents=True, exist_ok=True)
    out = run(args)
    path = args.out / f"transfer_{gpu_slug(out['test_gpu'])}_{date.today().isoformat()}.json"
    path.write_text(json.dumps(out, indent=1, allow_nan=False) + "\n")
    path.with_suffix(".md").write_text(markdown(out))
    print(f"wrote {path} and {path.with_suffix('.md').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
