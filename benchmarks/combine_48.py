"""Per-shape best over several search_48.py runs (e.g. one per backend), and the aggregates.

    python benchmarks/combine_48.py triton.json cute_dsl.json --out both.md

A run is the JSON search_48.py writes, or its markdown report (the per-shape table: speedups
over torch.matmul and cuBLASLt-autotune, and the best spec).

Each run's speedups were measured against the baselines timed in the same job as its kernels,
so shapes are compared by speedup over torch.matmul (a ratio taken on one machine at one
time), never by absolute times from different runs or machines. A shape's row comes from the
run whose best kernel had the highest speedup over torch; its cuBLASLt speedups are that run's
(missing when that run had no cuBLASLt baseline).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cudal2.tuner.aggregates import aggregate, markdown  # noqa: E402


def combine(runs: dict[str, list[dict]]) -> list[dict]:
    best: dict[tuple, dict] = {}
    order: list[tuple] = []
    for name, rows in runs.items():
        for r in rows:
            key = (r["m"], r["n"], r["k"])
            if key not in best:
                order.append(key)
            sp = r["speedup"].get("torch")
            cur = best.get(key)
            if sp is not None and (cur is None or cur["speedup"].get("torch") is None
                                   or sp > cur["speedup"]["torch"]):
                best[key] = {**r, "run": name}
            elif cur is None:
                best[key] = {**r, "run": name}
    return [best[k] for k in order]


def rows_from_report(text: str) -> list[dict]:
    """The per-shape rows of a search_48.py markdown report (M, N, K, best us, torch us, cuBLASLt
    us, vs torch, vs cuBLASLt-autotune, probe ratio, evals, spec), as the JSON rows combine() reads."""
    def num(cell):
        return None if cell in ("", "-") else float(cell)

    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 11 or not cells[0].isdigit():
            continue
        rows.append({"m": int(cells[0]), "n": int(cells[1]), "k": int(cells[2]),
                     "speedup": {b: v for b, v in (("torch", num(cells[6])), ("cublaslt_autotune", num(cells[7])))
                                 if v is not None},
                     "spec": cells[10].strip("`")})
    if not rows:
        raise SystemExit("no per-shape rows found: expected a report written by benchmarks/search_48.py")
    return rows


def load_run(path: Path) -> list[dict]:
    return rows_from_report(path.read_text()) if path.suffix == ".md" else json.loads(path.read_text())


def _x(v):
    return "-" if v is None else f"{v:.3f}"


def report(runs: dict[str, list[dict]]) -> str:
    rows = combine(runs)
    lines = [f"# Best per shape over {', '.join(runs)} (offline, kernel time)", "",
             "| M | N | K | from | vs torch | vs cuBLASLt-autotune | " + " | ".join(f"{n} vs torch" for n in runs)
             + " | best spec |", "|---:|---:|---:|---|---:|---:|" + "---:|" * len(runs) + "---|"]
    per_run = {n: {(r["m"], r["n"], r["k"]): r["speedup"].get("torch") for r in rs} for n, rs in runs.items()}
    for r in rows:
        key = (r["m"], r["n"], r["k"])
        lines.append(f"| {r['m']} | {r['n']} | {r['k']} | {r['run']} | {_x(r['speedup'].get('torch'))} | "
                     f"{_x(r['speedup'].get('cublaslt_autotune'))} | "
                     + " | ".join(_x(per_run[n].get(key)) for n in runs) + f" | `{r['spec']}` |")
    aggs = {"torch.matmul (best of the runs)": aggregate(r["speedup"].get("torch") for r in rows)}
    for n, rs in runs.items():
        aggs[f"torch.matmul ({n} alone)"] = aggregate(r["speedup"].get("torch") for r in rs)
    lines += ["", "## Aggregates (speedup = torch kernel ms / best kernel ms)", "", markdown(aggs)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="JSON files or markdown reports written by search_48.py")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    runs = {p.stem: load_run(p) for p in args.runs}
    text = report(runs)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
