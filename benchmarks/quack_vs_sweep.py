"""quack-kernels' autotuned GEMM against the fastest kernel of one or more sweeps, on their validation
shapes. For each shape, the fastest correct spec over every export given (of any backend) is
checked and timed again by the project's evaluator in one call with torch.matmul and
quack_autotune (quack's own autotuner, its first call of a shape tuning before any timing),
interleaved, full timing. A shape counts where quack beats torch.matmul; there the question is
whether our kernel is at least as fast as quack's.

    python benchmarks/quack_vs_sweep.py OUT.md --export benchmarks/results/sweep_....csv.gz \\
        [--export another.csv.gz] [--screen 0.05] [--top 4] [--shapes 128x16384x64,...] [--timing brief]
        [--gpus 4] [--max-seconds 500] [--recorded]

--screen MARGIN measures only the shapes where an export's own brief timing has quack_autotune
within MARGIN of torch.matmul or faster (a sweep run with quack-kernels installed records both),
and the shapes no export has a quack time for; the others are listed as screened out.

Shapes are taken in an order drawn with a fixed seed, so a run cut short by --max-seconds still
spans the shape sets. The report (with a .json beside it) is rewritten after every shape. A run
given an OUT whose .json holds shapes measured on the same GPU model with the same timing keeps
each whose spec is still the fastest, and measures the others.
--top K takes each shape's K fastest specs by the exports' brief timing (a sweep's one brief timing
per pair ranks near-equal specs by noise), checks and times them again in one call, and times the
fastest of those once more with the baselines: the figure reported is that last timing, never the
one that chose it.
--shapes takes only the shapes listed (MxNxK, or full labels). --timing brief times as a sweep does
(10 graph replays of about 1 ms after 1 ms of warm-up) instead of the evaluator's full timing, to
see whether a ranking depends on the timing's length.
--gpus N runs one process per GPU, each timing every N-th shape, and writes one report of all.
--recorded replays synthetic numbers on a CPU, to check the script, not to measure.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from cudal2.dataset import draw_shapes  # noqa: E402
from cudal2.learn.samples import from_rows  # noqa: E402

BASELINES = ("torch", "quack_autotune")


def read_exports(exports: list[Path]) -> dict[str, list[dict]]:
    """{export name: its rows}, each export read once."""
    tables = {}
    for export in exports:
        with gzip.open(export, "rt", newline="") if export.suffix == ".gz" else open(export, newline="") as f:
            tables[export.name] = list(csv.DictReader(f))
    return tables


def shape_key(problem) -> tuple[str, str, str, str]:
    """A problem's shape as an export's rows write it."""
    return str(problem.m), str(problem.n), str(problem.k), problem.layout


def row_shape(row: dict) -> tuple[str, str, str, str]:
    """An export row's shape, as shape_key writes a problem's."""
    return row["m"], row["n"], row["k"], row["layout"]


def fastest_per_validation_shape(tables: dict[str, list[dict]], top: int = 1) -> dict:
    """{problem: (its top fastest specs, fastest first; the first's kernel time over the shape's
    torch time in its export; shape set)} for each validation shape over all exports
    (read_exports). A spec in two exports counts once, at its faster time."""
    times: dict = {}  # problem -> {spec key: (relative time, spec)}
    sets: dict = {}
    for name, rows in tables.items():
        where = {row_shape(r): (r["split"], r["shape_set"]) for r in rows}
        for s in from_rows(rows, where=name):
            split, shape_set = where[shape_key(s.problem)]
            if split != "validation":
                continue
            relative = math.exp(-s.log_speedup)  # kernel time in units of the shape's torch time
            mine = times.setdefault(s.problem, {})
            key = s.spec.key()
            if key not in mine or relative < mine[key][0]:
                mine[key] = (relative, s.spec)
            sets[s.problem] = shape_set
    best = {}
    for problem, mine in times.items():
        ranked = sorted(mine.values(), key=lambda v: v[0])[:top]
        best[problem] = ([spec for _, spec in ranked], ranked[0][0], sets[problem])
    return best


def quack_over_torch(tables: dict[str, list[dict]]) -> dict:
    """{(m, n, k, layout): the lowest quack_autotune / torch.matmul time any export's brief timing
    recorded} for the shapes whose exports hold a quack time."""
    ratio: dict = {}
    for rows in tables.values():
        for r in rows:
            q, t = r.get("quack_autotune_ms.offline"), r.get("torch_ms.offline")
            if q and t:
                key = row_shape(r)
                ratio[key] = min(ratio.get(key, math.inf), float(q) / float(t))
    return ratio


def screened(best: dict, ratio: dict, margin: float | None) -> tuple[dict, list[str]]:
    """best less the shapes where an export's quack time is more than margin slower than torch's."""
    if margin is None:
        return best, []
    keep, out = {}, []
    for problem, v in best.items():
        r = ratio.get(shape_key(problem))
        if r is not None and r > 1 + margin:
            out.append(problem.label())
        else:
            keep[problem] = v
    return keep, sorted(out)


def only_shapes(best: dict, listed: str) -> dict:
    """best less the shapes not in listed (comma-separated MxNxK or full labels); an unknown one is
    an error that names it."""
    wanted = [w.strip() for w in listed.split(",") if w.strip()]
    kept = {p: v for p, v in best.items() if p.label() in wanted or p.label().split("-")[0] in wanted}
    known = {p.label() for p in kept} | {p.label().split("-")[0] for p in kept}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"quack_vs_sweep: --shapes {', '.join(unknown)}: not a validation shape of the exports "
                         "(or screened out); give MxNxK as the exports' rows have it")
    return kept


def measure(best: dict, runner, deadline: float, out: dict, save, part: tuple[int, int] = (0, 1)) -> None:
    """Time each shape of best (the part-th of every parts shapes, in the drawn order) not in out."""
    rows = out.setdefault("shapes", [])
    done = {r["shape"] for r in rows}  # the rows kept are those whose spec is still the fastest
    index, parts = part
    for i, problem in enumerate(draw_shapes(list(best), len(best))):
        if i % parts != index or problem.label() in done:
            continue
        if time.time() > deadline:
            break
        specs, _, shape_set = best[problem]
        spec, shortlist = specs[0], None
        if len(specs) > 1:  # choose by one timing, report another: the chosen time is a selected minimum
            timed = runner.evaluate(problem, specs, with_baselines=False)  # the baselines: with the pick
            shortlist = [{"spec_key": r.spec.key(), "status": r.status, "ms": r.kernel_ms() if r.ok else None}
                         for r in timed]
            ok = [r for r in timed if r.ok]
            spec = min(ok, key=lambda r: r.kernel_ms()).spec if ok else specs[0]
        result = runner.evaluate(problem, [spec])[0]
        base = runner.baselines(problem)
        row = {"shape": problem.label(), "set": shape_set, "backend": spec.backend, "spec": spec.summary(),
               "spec_key": spec.key(), "status": result.status,
               "ours_ms": result.kernel_ms() if result.ok else None}
        if shortlist is not None:
            row["shortlist"] = shortlist
        for name in BASELINES:
            b = base.get(name)
            row[f"{name}_ms"] = b.kernel_ms() if b is not None and b.available else None
            if b is not None and not b.available:
                row[f"{name}_why"] = b.detail
        q, t, o = row["quack_autotune_ms"], row["torch_ms"], row["ours_ms"]
        row["quack_beats_torch"] = bool(q and t and q < t)
        row["ours_over_quack"] = (q / o) if q and o else None  # above 1: ours is faster
        rows.append(row)
        print(f"{row['shape']:30s} ours {o} torch {t} quack {q} quack beats torch {row['quack_beats_torch']}",
              flush=True)
        save()


def still_fastest(row: dict, specs: list) -> bool:
    """Whether a row measured earlier measured the same shortlist specs (a single spec: rows written
    before they held a spec key held a Triton spec's summary)."""
    if "shortlist" in row or len(specs) > 1:
        return [r["spec_key"] for r in row.get("shortlist", [])] == [s.key() for s in specs]
    if "spec_key" in row:
        return row["spec_key"] == specs[0].key()
    return specs[0].backend == "triton" and row["spec"] == specs[0].summary()


def markdown(out: dict) -> str:
    rows = out.get("shapes", [])
    wins = [r for r in rows if r["quack_beats_torch"]]
    lines = [f"# quack's autotuned GEMM against a sweep's fastest kernel ({out['gpu']}, {out['date']})", "",
             f"`{out['command']}`", "",
             f"{len(rows)} validation shapes of `{out['export']}` measured; quack_autotune beat torch.matmul on "
             f"{len(wins)}; on those, ours at least as fast as quack's on "
             f"{sum(1 for r in wins if (r['ours_over_quack'] or 0) >= 1)}.", ""]
    if out.get("timing") == "brief":
        lines += ["Brief timing (a sweep's: 10 graph replays of about 1 ms after 1 ms of warm-up), not the "
                  "evaluator's full timing.", ""]
    if out.get("top", 1) > 1:
        lines += [f"Each shape's {out['top']} fastest specs by the exports' brief timing were checked and timed "
                  "again; the fastest of those was timed once more with the baselines, and that timing is "
                  "the one below.", ""]
    if out.get("screened_out"):
        lines += [f"Screened out ({len(out['screened_out'])}): the exports' brief timing had quack_autotune more "
                  f"than {out['screen']:.0%} slower than torch.matmul there: {', '.join(out['screened_out'])}.", ""]
    missing = {r.get("quack_autotune_why") for r in rows if r.get("quack_autotune_why")}
    lines += [f"quack unavailable: {m}" for m in missing]
    lines += ["", "| shape | set | our spec | ours us | torch us | quack us | quack beats torch | quack / ours |",
              "|---|---|---|---:|---:|---:|---|---:|"]

    def spec(r):
        return f"{r['backend']} {r['spec']}" if r.get("backend") else r["spec"]

    def us(ms):
        return f"{ms * 1e3:.1f}" if ms else "-"

    for r in sorted(rows, key=lambda r: (not r["quack_beats_torch"], r["shape"])):
        ratio = f"{r['ours_over_quack']:.3f}" if r["ours_over_quack"] else "-"
        lines.append(f"| {r['shape']} | {r['set']} | `{spec(r)}` | {us(r['ours_ms'])} | {us(r['torch_ms'])} | "
                     f"{us(r['quack_autotune_ms'])} | {'yes' if r['quack_beats_torch'] else 'no'} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--export", type=Path, action="append", required=True,
                    help="a `cudal2 dataset export` (.csv or .csv.gz); give it again for more")
    ap.add_argument("--screen", type=float, default=None, metavar="MARGIN",
                    help="measure only shapes where an export has quack within MARGIN of torch or faster")
    ap.add_argument("--top", type=int, default=1, metavar="K",
                    help="time each shape's K fastest specs again and report the fastest of them, timed anew")
    ap.add_argument("--shapes", default=None, help="only these shapes, comma-separated (MxNxK or full labels)")
    ap.add_argument("--timing", choices=("full", "brief"), default="full",
                    help="full: the evaluator's timing; brief: a sweep's (shorter) timing")
    ap.add_argument("--max-seconds", type=float, default=500)
    ap.add_argument("--gpus", type=int, default=1,
                    help="measure on this many GPUs at once, one process each, every GPU's shapes its own")
    ap.add_argument("--part", default="0/1", help=argparse.SUPPRESS)  # I/N: the I-th of N processes (--gpus)
    ap.add_argument("--recorded", action="store_true", help="synthetic numbers on a CPU (checks the script)")
    args = ap.parse_args()
    if args.top < 1:
        ap.error(f"--top {args.top}: give 1 or more specs per shape")
    if args.gpus > 1:
        return on_gpus(args)
    deadline = time.time() + args.max_seconds
    tables = read_exports(args.export)
    best, dropped = screened(fastest_per_validation_shape(tables, args.top), quack_over_torch(tables), args.screen)
    if args.shapes:
        best = only_shapes(best, args.shapes)
    if args.recorded:
        from cudal2.tuner.recorded import RecordedRunner

        runner, gpu = RecordedRunner(), "recorded (synthetic numbers)"
    else:
        from cudal2.bench.evaluator import Evaluator

        from cudal2.bench.timing import TimingConfig

        timing = TimingConfig.sweep() if args.timing == "brief" else TimingConfig()
        runner = Evaluator(baselines=BASELINES, timing=timing)
        env = runner.environment()
        gpu = env.gpu_name if env else "?"
    out = {"command": "python benchmarks/quack_vs_sweep.py " + " ".join(sys.argv[1:]), "gpu": gpu,
           "date": time.strftime("%Y-%m-%d"), "export": ", ".join(e.name for e in args.export)}
    if args.screen is not None:
        out.update(screen=args.screen, screened_out=dropped)
    if args.top > 1:
        out["top"] = args.top
    if args.timing != "full":
        out["timing"] = args.timing
    index, parts = (int(x) for x in args.part.split("/"))
    earlier = args.out.with_suffix(".json")
    if not earlier.exists() and parts > 1:  # a process of --gpus: resume from the whole run's report
        earlier = whole_report(args.out).with_suffix(".json")
    if earlier.exists():  # resume: keep the shapes measured on the same GPU model with the spec still fastest
        before = json.loads(earlier.read_text())
        if before.get("gpu") == gpu and before.get("timing", "full") == args.timing:
            fastest = {p.label(): v[0] for p, v in best.items()}
            mine = {p.label() for i, p in enumerate(draw_shapes(list(best), len(best))) if i % parts == index}
            out["shapes"] = [r for r in before.get("shapes", []) if r["shape"] in fastest and r["shape"] in mine
                             and still_fastest(r, fastest[r["shape"]])]
            out["date"] = " and ".join(dict.fromkeys([before.get("date", "?"), out["date"]]))

    def save():
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
        args.out.write_text(markdown(out))

    try:
        measure(best, runner, deadline, out, save, (index, parts))
    finally:
        if hasattr(runner, "close"):
            runner.close()
    save()
    print(markdown(out).split("\n\n")[2])
    return 0


def part_report(out: Path, index: int) -> Path:
    return out.with_name(f"{out.stem}.part{index}{out.suffix}")


def whole_report(part: Path) -> Path:
    stem, _, _ = part.stem.rpartition(".part")
    return part.with_name(stem + part.suffix)


def on_gpus(args) -> int:
    """One process of this script per GPU (CUDA_VISIBLE_DEVICES), each timing every gpus-th shape
    into its own report, then one report of them all. The processes resume from the whole run's
    report, so a run cut short and run again measures only what is missing."""
    import os
    import subprocess

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    devices = [d for d in visible.split(",") if d] or [str(i) for i in range(args.gpus)]
    argv = [x for e in args.export for x in ("--export", str(e))] + ["--max-seconds", str(args.max_seconds)]
    argv += ["--screen", str(args.screen)] if args.screen is not None else []
    argv += ["--top", str(args.top), "--timing", args.timing]
    argv += ["--shapes", args.shapes] if args.shapes else []
    argv += ["--recorded"] if args.recorded else []
    procs = []
    for i in range(args.gpus):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": devices[i % len(devices)]}
        procs.append(subprocess.Popen([sys.executable, __file__, str(part_report(args.out, i)), *argv,
                                       "--part", f"{i}/{args.gpus}"], env=env))
    codes = [p.wait() for p in procs]
    parts = [json.loads(f.read_text()) for i in range(args.gpus)
             if (f := part_report(args.out, i).with_suffix(".json")).exists()]
    if not parts:
        print(f"quack_vs_sweep: no process of --gpus {args.gpus} wrote a report (exit codes {codes})")
        return 1
    out = {**parts[0], "command": "python benchmarks/quack_vs_sweep.py " + " ".join(sys.argv[1:]),
           "shapes": [r for d in parts for r in d.get("shapes", [])]}
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
    args.out.write_text(markdown(out))
    for i in range(args.gpus):
        for f in (part_report(args.out, i), part_report(args.out, i).with_suffix(".json")):
            f.unlink(missing_ok=True)
    print(markdown(out).split("\n\n")[2])
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
