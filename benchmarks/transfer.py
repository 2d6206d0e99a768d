"""Does what the cost model learned carry to a GPU it never saw? Leave one GPU out: train on the
sweeps of the others, then, on the held-out GPU, search validation shapes at a small budget with the
learned proposer and sweep the spec catalogs on the same shapes.

    python benchmarks/transfer.py --train-data sweep_h100.csv.gz [--train-data ...] \\
        [--shapes 30] [--budget 16] [--out benchmarks/results] [--catalogs base,narrow] [--specs N]
        [--only sweep|search] [--part i/n] [--max-seconds S]
    python benchmarks/transfer.py --resume benchmarks/results/transfer_<gpu>_<date>.json [same options]
    python benchmarks/transfer.py --smoke        # CPU: the recorded runner, two shapes

Writes benchmarks/results/transfer_<testgpu>_<date>.json:
    {"train_gpus": [str], "test_gpu": str, "budget": 16, "catalogs": [str], "specs_per_catalog": "all" | n,
     "rows": [{"shape": "MxNxK-NT", "search": f, "sweep_best": f, "first_pick": f}]}
and a .md beside it. Each figure is a speedup over torch.matmul in layer mode (the search's
objective): `search` the search's confirmed best, `sweep_best` the best of the catalogs' specs (those
`catalogs` names, all of each or `specs_per_catalog` drawn with the catalog's seed) measured once,
`first_pick` the sweep's measurement of the model's first pick (what a shape never searched gets).
A row holds the figures of the parts done so far (`--only` runs one part): a missing key is a part
still to run, a null one a part that ran and measured nothing.

The run fits in calls of a few minutes. `--max-seconds` ends it before that many seconds, between
shapes and between the evaluator calls of a shape's sweep, with what was measured written; the
sweep's pairs are kept in a store beside the JSON (<json stem>.sweep.db), so `--resume JSON` measures
only what that store and the JSON lack. The model trained by the first call is kept beside the JSON
(transfer_model_<testgpu>.json) and a resumed call uses it. `--part i/n` takes every n-th shape from
the i-th; calls of several parts share one JSON through --resume.

The shapes are serving validation shapes (cudal2/data/shapes/split.json), spread over their sizes:
nothing is fitted on them. The training drops every pair of the held-out GPU and of these shapes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from cudal2.ir import DeviceProfile, KernelSpec  # noqa: E402
from cudal2.proposers.model_files import gpu_slug  # noqa: E402

SMOKE_SHAPES = 2
SMOKE_SPECS = 12  # catalog specs per catalog the smoke run sweeps
SMOKE_CHUNK = 4  # specs per evaluator call in the smoke run: a shape's sweep spans several calls, as on a GPU
PARTS = ("sweep", "search")
FIGURES = ("search", "sweep_best", "first_pick")


class UserError(Exception):
    """Bad input: one line, what was wrong and how to fix it; exit 2."""


class Deadline:
    """A time limit on a run: a step (a sweep's evaluator call, a search) starts only while the longest
    step of its kind so far still fits before the limit, so the run ends before the limit and keeps
    what it measured. Once a step is refused every later one is, so a run stops at one place."""

    def __init__(self, seconds: float | None, clock=time.monotonic):
        self.seconds, self.clock, self.start = seconds, clock, clock()
        self.longest: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.reached = False

    def allows(self, kind: str) -> bool:
        now = self.clock()
        if kind in self.last:  # the time since the last step of this kind began: that step's, and a bit more
            self.longest[kind] = max(self.longest.get(kind, 0.0), now - self.last[kind])
        self.last[kind] = now
        if self.seconds is not None and now - self.start + self.longest.get(kind, 0.0) > self.seconds:
            self.reached = True
        return not self.reached


def smoke_runner():
    """The smoke run's runner (a function, so that a test can count its measurements)."""
    from cudal2.tuner.recorded import RecordedRunner

    return RecordedRunner()


def validation_shapes(count: int):
    """count serving validation shapes, evenly spaced over their sizes (FLOPs), smallest first."""
    from cudal2.shapes import shapes

    every = sorted(shapes("serving", "validation"), key=lambda s: (s.m * s.n * s.k, s.label))
    if count >= len(every):
        return every
    return [every[round(i * (len(every) - 1) / (count - 1))] for i in range(count)] if count > 1 else every[:1]


def parse_part(text: str) -> tuple[int, int]:
    try:
        part, parts = (int(x) for x in text.split("/"))
    except ValueError:
        part, parts = -1, 0
    if not 0 <= part < parts:
        raise UserError(f"--part {text}: give i/n with 0 <= i < n, e.g. 0/2 and 1/2 for two calls")
    return part, parts


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


def catalog_specs(backends, arch: str, catalogs: list[str], count: int | str) -> list[KernelSpec]:
    """The sweep's specs: of each backend, count specs ("all" or a number drawn with the catalog's seed)
    of each named catalog that holds specs for it, each spec once."""
    from cudal2.proposers.catalog import CATALOGS, sample

    out: dict[str, KernelSpec] = {}
    for backend in backends:
        for name in catalogs:
            if backend in CATALOGS[name]:
                for spec in sample(count, backend, arch, name=name):
                    out.setdefault(spec.key(), spec)
    return list(out.values())


def shape_speedups(store, problem) -> dict[str, float]:
    """{kernel key: speedup over torch.matmul in layer mode} of the problem's correct, timed pairs."""
    stored = store.baselines(problem)
    out: dict[str, float] = {}
    for rec in store.kernels(problem):
        result = rec["result"]
        torch = (rec["baselines"] or stored).get("torch")
        kernel_ms = result.kernel_ms("layer") if result.ok else None
        torch_timing = torch.timing.get("layer") if torch is not None and torch.available else None
        if kernel_ms and torch_timing is not None and torch_timing.kernel_ms:
            key = _kernel_key(result.spec)
            out[key] = max(out.get(key, 0.0), torch_timing.kernel_ms / kernel_ms)
    return out


def _figure(x) -> float | None:
    return round(x, 4) if x is not None and math.isfinite(x) and x > 0 else None  # None: not measured


def _write(path: Path, out: dict) -> None:
    """Replace the JSON whole, so that a call killed while writing leaves the last one."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)


def _earlier(path: Path) -> dict:
    try:
        out = json.loads(path.read_text())
        assert isinstance(out["rows"], list) and all("shape" in r for r in out["rows"])
        return out
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
        raise UserError(f"--resume {path}: not a transfer.py JSON ({type(e).__name__}: {e}); give the JSON an "
                        "earlier call wrote") from None


def _check_same(earlier: dict, now: dict, path: Path) -> None:
    for key, flag in (("test_gpu", None), ("budget", "--budget"), ("catalogs", "--catalogs"),
                      ("specs_per_catalog", "--specs"), ("train_gpus", "--train-data")):
        if key in earlier and earlier[key] != now[key]:
            fix = f"give {flag} as it did" if flag else "resume it on that GPU"
            raise UserError(f"--resume {path}: it has {key} {earlier[key]!r}, this call {now[key]!r}; {fix}")


def run(args, deadline: Deadline) -> tuple[dict, Path, list[str]]:
    """The JSON (written after each shape's part), its path, and the parts of this call's shapes left undone."""
    import cudal2
    from cudal2.dataset.sweep import run_sweep
    from cudal2.proposers.catalog import CATALOGS
    from cudal2.proposers.learned import LearnedProposer, load_model
    from cudal2.store.store import Store

    arch = args.arch
    device = DeviceProfile.live(arch)
    test_gpu = "recorded" if args.smoke else device.name
    earlier = _earlier(args.resume) if args.resume else None
    path = args.resume or args.out / f"transfer_{gpu_slug(test_gpu)}_{date.today().isoformat()}.json"
    if earlier is None and path.exists():
        raise UserError(f"{path} exists; continue it with --resume {path}, or move it away to start again")
    catalogs = (args.catalogs or (earlier or {}).get("catalogs")
                or [name for name, axes in CATALOGS.items() if any(b in axes for b in args.backends)])
    unknown = [c for c in catalogs if c not in CATALOGS]
    if unknown:
        raise UserError(f"--catalogs: no catalog {', '.join(unknown)}; give some of {', '.join(CATALOGS)}")
    count = args.specs or (earlier or {}).get("specs_per_catalog") or (SMOKE_SPECS if args.smoke else "all")
    chosen = validation_shapes(SMOKE_SHAPES if args.smoke else args.shapes)
    problems = [s.problem() for s in chosen]
    part, parts = args.part
    mine = problems[part::parts]

    model_path = path.parent / f"transfer_model_{gpu_slug(test_gpu)}.json"
    if earlier is not None and model_path.exists():
        pass  # the model of the first call: every call's first picks come from one model
    elif args.train_data:
        samples = training_samples(args.train_data, test_gpu, {p.label() for p in problems})
        train_model(samples, arch, model_path)
    elif args.smoke:
        from cudal2.proposers.model_files import shipped_model_path

        model_path = shipped_model_path(arch)  # the shipped model: its GPUs are the training GPUs
    elif earlier is not None:
        raise UserError(f"--resume {path}: {model_path.name}, the model of its first call, is not beside it; "
                        "put it back, or give the same --train-data to train it again")
    else:
        raise UserError("give --train-data (exports of the other GPUs' sweeps), or --smoke")
    train_gpus = sorted((load_model(model_path).info.get("data") or {}).get("gpus") or {})
    if test_gpu in train_gpus:
        raise UserError(f"the model was trained on {test_gpu!r}, the GPU it is to be tested on; give "
                        "--train-data of the other GPUs only")
    out = {"train_gpus": train_gpus, "test_gpu": test_gpu, "budget": args.budget, "catalogs": catalogs,
           "specs_per_catalog": count, "rows": []}
    if earlier is not None:
        _check_same(earlier, out, path)
    rows = {r["shape"]: r for r in (earlier or {}).get("rows", [])}
    order = [_shape_key(p) for p in problems] + [k for k in rows if k not in {_shape_key(p) for p in problems}]

    def save() -> None:
        out["rows"] = [{"shape": k, **{f: rows[k][f] for f in FIGURES if f in rows[k]}} for k in order if k in rows]
        _write(path, out)

    save()
    runner = smoke_runner() if args.smoke else None
    if "sweep" in args.only:
        store = Store(path.with_suffix(".sweep.db"))
        specs = catalog_specs(args.backends, arch, catalogs, count)
        sweep_runner = runner or cudal2.api.default_runner()
        for problem in mine:
            key = _shape_key(problem)
            if "sweep_best" in rows.get(key, {}):
                continue
            proposer = LearnedProposer(args.backends, arch, model=model_path, device=device)
            first = proposer.ranked(problem, 1)[0][0]
            wanted = specs + [first] * (first.key() not in {s.key() for s in specs})
            summary = run_sweep([problem], wanted, sweep_runner, store, modes=("layer",),
                                chunk=SMOKE_CHUNK if args.smoke else 32, stop=lambda: not deadline.allows("sweep"))
            if summary.stopped:
                break
            keys = {_kernel_key(s) for s in wanted}
            each = {k: v for k, v in shape_speedups(store, problem).items() if k in keys}
            rows.setdefault(key, {}).update(sweep_best=_figure(max(each.values(), default=None)),
                                            first_pick=_figure(each.get(_kernel_key(first))))
            save()
            print(f"{key}: sweep best {rows[key]['sweep_best']}, first pick {rows[key]['first_pick']} "
                  f"({summary.measured} pairs measured, {summary.already} from the store)", flush=True)
    if "search" in args.only:
        work = Path(tempfile.mkdtemp(prefix="transfer-"))
        for problem in mine:
            key = _shape_key(problem)
            if "search" in rows.get(key, {}):
                continue
            if not deadline.allows("search"):
                break
            proposer = LearnedProposer(args.backends, arch, model=model_path, device=device)  # a fresh search's
            result = cudal2.search(f"{problem.m}x{problem.n}x{problem.k}", layout=problem.layout,
                                   backends=args.backends, proposer=proposer, budget=args.budget,
                                   store=Store(work / f"search_{key}.db"), runner=runner, arch=arch, seed=0,
                                   progress=False)
            rows.setdefault(key, {})["search"] = _figure(result.speedup.get("torch"))
            save()
            print(f"{key}: search {rows[key]['search']}", flush=True)
    left = [f"{_shape_key(p)} {name}" for p in mine for name in args.only
            if ("sweep_best" if name == "sweep" else "search") not in rows.get(_shape_key(p), {})]
    return out, path, left


def markdown(out: dict) -> str:
    rows = [r for r in out["rows"] if all(r.get(f) is not None for f in FIGURES)]
    reached = [r for r in rows if r["search"] >= 0.98 * r["sweep_best"]]
    close = [r for r in rows if r["first_pick"] >= 0.95 * r["sweep_best"]]
    lines = [f"# Transfer: trained on {', '.join(out['train_gpus'])}, tested on {out['test_gpu']} "
             f"(budget {out['budget']})", "",
             f"The sweep's specs: {out['specs_per_catalog']} of each of the catalogs {', '.join(out['catalogs'])}.",
             "",
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


def _specs(text: str) -> int | str:
    if text == "all" or (text.isdigit() and int(text) > 0):
        return text if text == "all" else int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: give 'all' or a positive number")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-data", type=Path, action="append", default=[],
                    help="an export of another GPU's sweep (cudal2 dataset export); repeat for several")
    ap.add_argument("--shapes", type=int, default=30, help="validation shapes to search and sweep")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--backends", default="triton,cute_dsl")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--catalogs", default=None,
                    help="the catalogs the sweep measures, e.g. base,narrow (default: every one of the backends'; "
                         "a resumed call: the earlier call's)")
    ap.add_argument("--specs", type=_specs, default=None,
                    help="'all' specs of each catalog (the default), or N drawn with the catalog's seed")
    ap.add_argument("--only", choices=PARTS, default=None, help="run one part: the catalog sweep or the searches")
    ap.add_argument("--part", default="0/1", help="i/n: every n-th shape from the i-th")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="end before this many seconds, keeping what was measured; continue with --resume")
    ap.add_argument("--resume", type=Path, default=None,
                    help="an earlier call's JSON: keep its rows and measure only what it and its .sweep.db lack")
    ap.add_argument("--smoke", action="store_true", help="CPU: the recorded runner, two shapes, a few specs")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    deadline = Deadline(args.max_seconds)
    args.backends = tuple(b for b in args.backends.split(",") if b)
    if args.smoke:
        args.backends = ("triton",)
    args.catalogs = [c for c in args.catalogs.split(",") if c] if args.catalogs else None
    args.only = (args.only,) if args.only else PARTS
    try:
        args.part = parse_part(args.part)
        if args.resume is not None and not args.resume.is_file():
            raise UserError(f"--resume {args.resume}: no such file; give the JSON an earlier call wrote")
        args.out.mkdir(parents=True, exist_ok=True)
        out, path, left = run(args, deadline)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path.with_suffix(".md").write_text(markdown(out))
    print(f"wrote {path} and {path.with_suffix('.md').name}")
    if left:
        why = f"--max-seconds {args.max_seconds:g} reached" if args.max_seconds is not None else "stopped"
        print(f"{why}: {len(left)} shape parts left ({', '.join(left[:4])}{', ...' if len(left) > 4 else ''}); "
              f"continue with --resume {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
