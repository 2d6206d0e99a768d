"""Time the winners of a search_48.py report again, in other timing modes, against the baselines.

    python benchmarks/retime_winners.py results/search_48_both_backends_h100_2026-11-23.json out.md \\
        --mode offline --mode sustained

Each row's winning spec (its `spec_json`) is checked and timed by the evaluator together with the
baselines, one evaluator call per shape, in every mode given. The report puts each mode's
speedups side by side, so a figure that holds in 2 ms bursts (offline) but not at the clock a
kernel's own power draw sets (sustained) shows, shape by shape and in the aggregates.
Resumable: rows already in OUT's .json are kept, so a run stopped by --max-seconds continues.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from cudal2 import GemmProblem, KernelSpec  # noqa: E402
from cudal2.bench.results import MODES  # noqa: E402
from cudal2.tuner.aggregates import aggregate, markdown  # noqa: E402

BASELINES = ("torch", "cublaslt_autotune", "cublaslt_heuristic")


def load_winners(path: Path) -> list[dict]:
    rows = json.loads(path.read_text())
    if not isinstance(rows, list) or not all({"m", "n", "k", "spec_json"} <= set(r) for r in rows):
        raise SystemExit(f"{path}: expected a search_48.py .json report (rows with m, n, k and spec_json)")
    return [r for r in rows if r["spec_json"]]


def retime(ev, row: dict, modes: tuple[str, ...]) -> dict:
    """One evaluator call: the row's winner and the baselines, in every mode."""
    problem = GemmProblem(m=row["m"], n=row["n"], k=row["k"])
    spec = KernelSpec.from_dict(row["spec_json"])
    (res,) = ev.evaluate(problem, [spec], modes)
    report = ev.report(problem, [res], modes)
    out = {"m": problem.m, "n": problem.n, "k": problem.k, "spec": spec.summary(), "backend": spec.backend,
           "status": res.status, "reason": res.reason[:200], "kernel_ms": {}, "baseline_ms": {}, "speedup": {}}
    for mode in modes:
        out["kernel_ms"][mode] = res.kernel_ms(mode) if res.ok else None
        out["baseline_ms"][mode] = {b: r.kernel_ms(mode) for b, r in report.baselines.items()
                                    if r.available and r.kernel_ms(mode) is not None}
        out["speedup"][mode] = {b: report.speedup(res, b, mode) for b in BASELINES} if res.ok else {}
    return out


def render(rows: list[dict], modes: tuple[str, ...], source: str, note: str = "") -> str:
    head = "| M | N | K | " + " | ".join(f"{m} us | torch {m} us | vs torch ({m})" for m in modes) + " | winner |"
    lines = [f"# The winners of `{source}` timed again: {', '.join(modes)}", "", head,
             "|" + "---:|" * (3 + 3 * len(modes)) + "---|"]
    fmt_us = lambda ms: "-" if ms is None else f"{ms * 1e3:.1f}"  # noqa: E731
    fmt_x = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for r in rows:
        cells = []
        for m in modes:
            cells += [fmt_us(r["kernel_ms"].get(m)), fmt_us(r["baseline_ms"].get(m, {}).get("torch")),
                      fmt_x(r["speedup"].get(m, {}).get("torch"))]
        status = "" if r["status"] == "ok" else f" ({r['status']}: {r['reason'][:60]})"
        lines.append(f"| {r['m']} | {r['n']} | {r['k']} | " + " | ".join(cells) + f" | `{r['spec']}`{status} |")
    for m in modes:
        aggs = {f"{b} ({m})": aggregate(r["speedup"].get(m, {}).get(b) for r in rows) for b in BASELINES}
        lines += ["", f"## Aggregates, {m}", "", markdown(aggs)]
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path, help="a search_48.py .json report")
    ap.add_argument("out", type=Path, help="markdown report (its .json beside it)")
    ap.add_argument("--mode", action="append", choices=MODES,
                    help="timing mode (repeat; default offline and sustained)")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop starting shapes after this long")
    ap.add_argument("--device", default="cuda:0", help="torch device (cpu: the Triton interpreter, for tests)")
    args = ap.parse_args(argv)
    modes = tuple(args.mode or ("offline", "sustained"))
    winners = load_winners(args.report)
    saved = args.out.with_suffix(".json")
    done = json.loads(saved.read_text()) if saved.exists() else []
    seen = {(r["m"], r["n"], r["k"]) for r in done}
    from cudal2.bench.evaluator import Evaluator

    start = time.monotonic()
    todo = [(i, row) for i, row in enumerate(winners) if (row["m"], row["n"], row["k"]) not in seen]
    with Evaluator(device=args.device, baselines=BASELINES) as ev:
        for j, (i, row) in enumerate(todo):
            if args.max_seconds and time.monotonic() - start > args.max_seconds:
                break
            if j + 1 < len(todo):  # the next winner compiles on the CPU while this one is timed
                nxt = todo[j + 1][1]
                ev.prefetch(GemmProblem(m=nxt["m"], n=nxt["n"], k=nxt["k"]), [KernelSpec.from_dict(nxt["spec_json"])])
            done.append(retime(ev, row, modes))
            r = done[-1]
            print(f"[{i + 1}/{len(winners)}] {r['m']}x{r['n']}x{r['k']} "
                  + " ".join(f"{m} {r['speedup'].get(m, {}).get('torch') or float('nan'):.3f}" for m in modes),
                  flush=True)
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps(done, indent=1))
            args.out.write_text(render(done, modes, args.report.name))
        env = ev.environment()
    left = len(winners) - len(done)
    note = f"Environment: {env}" + (f"\n\n{left} shape(s) left: run the same command again." if left else "")
    args.out.write_text(render(done, modes, args.report.name, note))
    print(f"{len(done)} of {len(winners)} shapes timed" + (f"; {left} left" if left else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
