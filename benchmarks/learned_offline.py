"""The cost model judged on validation shapes, offline: from sweep exports measured on a GPU, with no
GPU needed here.

    python benchmarks/learned_offline.py --train T.csv.gz [--train ...] --validation V.csv.gz [...] \
        --out benchmarks/results/learned_offline_h100_DATE

It trains as `cudal2 train` does (settings chosen by cross-validation on the training shapes),
then, on each validation shape, over the specs the sweep measured there:
- the top-1 ratio: the speed of the model's first choice over the best measured (budget 1);
- a replayed search: the bandit picks batches of 4 from those specs, its measurements being the
  sweep's, and the curve of the best found against evaluations, with uniform random search over
  the same specs (averaged over 32 seeds) beside it.
"Best" here is the best of the sweep's specs on the shape, not the best kernel there is: the live
comparison (`cudal2 compare`) is the figure for that. Writes OUT.json and OUT.md.

--against MODEL.json (repeatable) replays a model file too (the shipped one, one trained on other data)
on the same validation shapes and specs, beside the model trained here: the question whether training
on these pairs helps at all.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cudal2.ir import DeviceProfile  # noqa: E402
from cudal2.learn.samples import from_csv  # noqa: E402
from cudal2.learn.train import split_samples, train  # noqa: E402
from cudal2.learn.validate import by_shape, random_replay, replay, top1_ratios  # noqa: E402
from cudal2.proposers.cost_model import TreeModel  # noqa: E402

BUDGETS = (1, 4, 8, 16)


def curve_at(curve: list[float]) -> dict[int, float]:
    """A replay's share of the best at each of BUDGETS evaluations (its last where it ran out of specs)."""
    return {b: curve[min(b, len(curve)) - 1] for b in BUDGETS}


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", action="append", required=True, type=Path)
    ap.add_argument("--validation", action="append", required=True, type=Path)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", required=True, type=Path, help="path without suffix")
    ap.add_argument("--against", action="append", default=[], type=Path,
                    help="a model file to replay beside the one trained here (repeatable)")
    args = ap.parse_args()
    samples = [s for f in (*args.train, *args.validation) for s in from_csv(f)]
    report = train(samples, DeviceProfile.of_arch(args.arch), say=print)
    model = report.model
    held = split_samples(samples)[1]  # the pairs of validation-split shapes, as train() set them aside
    groups = by_shape(held)
    if not groups:
        raise SystemExit("learned_offline: no pair of the data is of a validation-split shape (cudal2/data/shapes/"
                         "split.json); pass --validation an export of a sweep of SET:validation shapes")
    top1 = top1_ratios(model, held)
    against = {str(path): TreeModel.load(path) for path in args.against}
    rows = []
    for label, group in sorted(groups.items()):
        learned, rand = replay(model, group, max(BUDGETS)), random_replay(group, max(BUDGETS))
        rows.append({"shape": label, "specs": len(group), "top1": top1[label],
                     "learned": curve_at(learned), "random": curve_at(rand),
                     "against": {name: curve_at(replay(other, group, max(BUDGETS))) for name, other in against.items()}})
    summary = {b: {"learned_geomean": geomean(r["learned"][b] for r in rows),
                   "random_geomean": geomean(r["random"][b] for r in rows),
                   **{f"{name}_geomean": geomean(r["against"][name][b] for r in rows) for name in against},
                   "learned_reached_97": sum(r["learned"][b] >= 0.97 for r in rows) / len(rows),
                   "learned_within_5": sum(r["learned"][b] >= 0.95 for r in rows) / len(rows),
                   "learned_beats_random": sum(r["learned"][b] > r["random"][b] for r in rows) / len(rows)}
               for b in BUDGETS}
    command = "python " + shlex.join(sys.argv)
    out = {"command": command, "model_info": model.info, "params": report.params,
           "cross_validation": {"top1_geomean": report.cross_validation.geomean,
                                "top1_within5": report.cross_validation.within5,
                                "shapes": report.cross_validation.shapes},
           "against": list(against), "summary": summary, "shapes": rows}
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["# The cost model on validation shapes, offline", "", f"Command: `{command}`", "",
             f"Training data: {model.info['data']}; LightGBM {model.info['lightgbm']}; settings {report.params} "
             f"chosen by 5-fold cross-validation over the training shapes (top-1 "
             f"{report.cross_validation.geomean:.3f}, within 5 % on {report.cross_validation.within5:.0%} of "
             f"{report.cross_validation.shapes} shapes).", "",
             f"{len(rows)} validation shapes, each with the specs its sweep measured (one brief measurement each). "
             "Share of the best of those specs found after so many evaluations; random is averaged over 32 seeds.",
             "", "| evaluations | learned (geomean) | random (geomean) | learned >= 97 % | learned >= 95 % | "
             "learned beats random |", "|---|---|---|---|---|---|"]
    for b, s in summary.items():
        lines.append(f"| {b} | {s['learned_geomean']:.3f} | {s['random_geomean']:.3f} | {s['learned_reached_97']:.0%} "
                     f"| {s['learned_within_5']:.0%} | {s['learned_beats_random']:.0%} |")
    if against:
        lines += ["", "The model trained here against the models given (--against), the same replay (geomean share of "
                  "the best):", "", "| evaluations | trained here | " + " | ".join(f"`{n}`" for n in against) + " |",
                  "|---|---|" + "---|" * len(against)]
        lines += [f"| {b} | {s['learned_geomean']:.3f} | " + " | ".join(f"{s[f'{n}_geomean']:.3f}" for n in against)
                  + " |" for b, s in summary.items()]
    lines += ["", "| shape | specs | learned 1 | learned 4 | learned 16 | random 16 |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['specs']} | {r['learned'][1]:.3f} | {r['learned'][4]:.3f} | "
                     f"{r['learned'][16]:.3f} | {r['random'][16]:.3f} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:14]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
