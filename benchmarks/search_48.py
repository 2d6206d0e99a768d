"""Search the 48 shapes of the H100 probe (data/h100_probe_cublas_vs_triton.json) with the
Triton backend and the rules proposer, and report speedups over torch.matmul and cuBLASLt.

    python benchmarks/search_48.py shared/data/h100_probe_cublas_vs_triton.json \\
        --budget 32 --store results/search_48.db --out results/search_48.md --max-seconds 500

Resumable: the studies live in the store, so a run stopped by --max-seconds (or killed) and
started again skips finished shapes and continues the one it was in. Run it in chunks until it
prints "all 48 shapes done". Offline mode (back-to-back launches), kernel time; speedup =
baseline kernel ms / best kernel ms. The report is rewritten after every shape; at the end a plot of
the speedups goes beside it (.png). `--replot results.json` draws that plot again from a report's .json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from cudal2 import GemmProblem  # noqa: E402
from cudal2.tuner.aggregates import aggregate, markdown  # noqa: E402

BASELINES = ("torch", "cublaslt_autotune", "cublaslt_heuristic")


def load_shapes(path: Path) -> list[dict]:
    rows = json.loads(path.read_text())
    if not isinstance(rows, list) or not all({"M", "N", "K"} <= set(r) for r in rows):
        raise SystemExit(f"{path}: expected a JSON list of objects with M, N, K (the H100 probe file)")
    return rows


def _us(ms):
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def _x(v):
    return "-" if v is None else f"{v:.3f}"


def _spec_text(spec) -> str:
    return ("" if spec.backend == "triton" else f"{spec.backend} ") + spec.summary()


def report(rows: list[dict], total: int, budget, run_note: str = "") -> str:
    """The markdown report; run_note says how long this chunk has run and where the evaluator's time
    went (so two runs, e.g. with and without --lookahead, can be compared from their files)."""
    head = ("| M | N | K | best us | torch us | cuBLASLt-autotune us | vs torch | vs cuBLASLt-autotune | "
            "probe Triton-autotune vs torch | evals | best spec |")
    modes = sorted({r.get("mode", "offline") for r in rows}) or ["offline"]
    lines = [f"# cudal2 search over the H100 probe shapes ({len(rows)} of {total} done; budget {budget}, "
             f"{'/'.join(modes)}, kernel time)", "", head, "|" + "---:|" * 9 + "---|"]
    for r in rows:
        lines.append(f"| {r['m']} | {r['n']} | {r['k']} | {_us(r['best_ms'])} | {_us(r['baseline_ms'].get('torch'))} | "
                     f"{_us(r['baseline_ms'].get('cublaslt_autotune'))} | {_x(r['speedup'].get('torch'))} | "
                     f"{_x(r['speedup'].get('cublaslt_autotune'))} | {_x(r['probe_ratio'])} | {r['evaluations']} | "
                     f"`{r['spec']}` |")
    aggs = {"torch.matmul": aggregate(r["speedup"].get("torch") for r in rows),
            "cuBLASLt autotune": aggregate(r["speedup"].get("cublaslt_autotune") for r in rows),
            "cuBLASLt heuristic": aggregate(r["speedup"].get("cublaslt_heuristic") for r in rows)}
    lines += ["", "## Aggregates (speedup = baseline kernel ms / best kernel ms)", "", markdown(aggs)]
    confirmed = [r for r in rows if r.get("confirmed_rounds")]
    if confirmed:
        trial = aggregate(r["trial_speedup"].get("torch") for r in confirmed)
        rounds = sorted({r["confirmed_rounds"] for r in confirmed})
        kinds = sorted({r.get("mode", "offline") for r in confirmed})
        trial_kinds = sorted({r.get("trial_mode", "offline") for r in confirmed})
        lines.append("" if trial is None else f"Figures of {len(confirmed)} of {len(rows)} shapes are each winner's median of "
                     f"{'/'.join(map(str, rounds))} {'/'.join(kinds)} confirmation rounds (its leaders timed again, "
                     f"baselines interleaved); their best {'/'.join(trial_kinds)} search trials alone gave a geometric "
                     f"mean of {trial.geomean:.3f} over torch.matmul (min {trial.min:.3f})"
                     + (": the difference is the luck of the draw that confirmation removes." if kinds == trial_kinds
                        else ", in another timing mode."))
        rejected = [(r, x) for r in rows for x in r.get("rejected") or ()]
        for r, x in rejected:
            lines.append(f"Rejected on confirmation, {r['m']}x{r['n']}x{r['k']}: `{x}`.")
        lines.append("")
    if rows and rows[0].get("environment"):
        env = rows[0]["environment"]
        lines.append(f"Environment: {env.get('gpu_name')}, driver {env.get('driver')}, CUDA {env.get('cuda')}, "
                     f"torch {env.get('torch')}, triton {env.get('triton')}")
    if run_note:
        lines += ["", run_note]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], out: Path) -> Path | None:
    """Each shape's best speedup over torch.matmul (bars by backend, slowest at the bottom) and over
    cuBLASLt autotune (dots), with the geometric mean beside the project's targets (a geomean of 1.10, no
    shape below 0.97); None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = sorted((r for r in rows if r["speedup"].get("torch")), key=lambda r: r["speedup"]["torch"])
    if not done:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(done) + 1.6))
    y = range(len(done))
    over_torch = [r["speedup"]["torch"] for r in done]
    colors = {"cute_dsl": "tab:green", "triton": "tab:blue"}
    ax.barh(y, over_torch, height=0.7,
            color=[colors.get((r["spec_json"] or {}).get("backend"), "grey") for r in done])
    auto = [(i, r["speedup"]["cublaslt_autotune"]) for i, r in enumerate(done) if r["speedup"].get("cublaslt_autotune")]
    ax.plot([v for _, v in auto], [i for i, _ in auto], "k.", ms=4, label="over cuBLASLt autotune")
    geo = aggregate(over_torch).geomean
    ax.axvline(1.0, color="black", lw=0.8)
    ax.axvline(0.97, color="tab:red", lw=0.8, ls=":", label="0.97 (target floor)")
    ax.axvline(geo, color="tab:orange", lw=1.0, ls="--", label=f"geomean over torch {geo:.3f}")
    ax.axvline(1.10, color="tab:purple", lw=0.8, ls="-.", label="1.10 (target geomean)")
    ax.set_yticks(list(y), [f"{r['m']}x{r['n']}x{r['k']}" for r in done], fontsize=6)
    ax.set_xlabel("best kernel's speedup over torch.matmul (bars: green cute_dsl, blue triton)")
    ax.set_xlim(min(0.9, min(over_torch) - 0.02), max([1.1, *over_torch, *(v for _, v in auto)]) + 0.02)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _run_note(start: float, runner) -> str:
    note = f"This chunk: {time.monotonic() - start:.0f} s"
    stats = getattr(runner, "stats", None)
    return note + (f"; evaluator: {stats.line()}" if stats is not None and stats.candidates else "") + "."


def _row(problem, res, s: dict, args, store) -> dict:
    """One shape's line of the report (and its JSON)."""
    return {
        "m": problem.m, "n": problem.n, "k": problem.k,
        "mode": res.mode,
        "best_ms": res.best.time_ms.get(res.mode) if res.best else None,
        "baseline_ms": {b: r.kernel_ms(res.mode) for b, r in res.baselines.items()
                        if r.available and r.kernel_ms(res.mode) is not None},
        "speedup": dict(res.speedup), "evaluations": res.evaluations,
        "confirmed_rounds": res.confirmed_rounds, "trial_speedup": dict(res.trial_speedup),
        "trial_mode": args.mode,
        "rejected": [r.spec.summary() for r in res.rejected],
        "probe_ratio": s["cublas_ms"] / s["triton_ms"] if s.get("triton_ms") else None,
        "spec": _spec_text(res.best.spec) if res.best else "-",
        "spec_json": res.best.spec.to_dict() if res.best else None,
        "environment": (store.best(problem) or {}).get("environment"),
    }


def _arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shapes", type=Path, help="h100_probe_cublas_vs_triton.json")
    ap.add_argument("--budget", default="32", help="GPU measurements per shape (or GPU time, e.g. 60s)")
    ap.add_argument("--store", default=str(ROOT / "results" / "search_48.db"))
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "search_48.md")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="stop starting new work after this many seconds (resume later)")
    ap.add_argument("--proposer", default="rules")
    ap.add_argument("--backend", action="append", default=None)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--proposals", type=int, default=None,
                    help="specs the proposer gives per shape (default: half the budget; Optuna has the rest)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N shapes")
    ap.add_argument("--lookahead", action="store_true",
                    help="ask for the next batch and compile it while the current one is measured")
    ap.add_argument("--runner", choices=("gpu", "recorded"), default="gpu",
                    help="recorded: synthetic numbers (to try the script without a GPU)")
    ap.add_argument("--mode", choices=("offline", "sustained"), default="offline",
                    help="the timing mode trials and confirmation rounds are ranked in (sustained: each kernel at "
                         "the clock its own power draw sets, as in a long training job; slower to measure)")
    ap.add_argument("--confirm-mode", choices=("offline", "sustained"), default=None,
                    help="rank the leaders in this mode (default: --mode): offline trials, sustained confirmation "
                         "costs about a third of an all-sustained search")
    ap.add_argument("--confirm", type=int, default=3,
                    help="time each shape's 3 leaders this many more times and report the winner's median "
                         "round (0: report the best search trial, which favours lucky measurements)")
    ap.add_argument("--replot", action="store_true",
                    help="only draw the plot of an earlier run: `shapes` is then its .json report")
    return ap


def main(argv=None) -> int:
    args = _arguments().parse_args(argv)
    if args.replot:
        png = plot(json.loads(args.shapes.read_text()), args.shapes.with_suffix(".png"))
        print(f"wrote {png}" if png else "nothing to plot (no rows, or no matplotlib)")
        return 0 if png else 1

    from cudal2.api import default_arch, default_runner, resolve_proposer
    from cudal2.tuner.confirm import Confirm
    from cudal2.tuner.loop import Budget, run_search
    from cudal2.store.store import Store

    start = time.monotonic()
    deadline = start + args.max_seconds if args.max_seconds else None
    shapes = load_shapes(args.shapes)[: args.limit]
    backends = tuple(args.backend or ["triton"])
    arch = default_arch()
    store = Store(args.store)
    budget = Budget.parse(int(args.budget) if args.budget.isdigit() else args.budget)
    if args.runner == "recorded":
        from cudal2.tuner.recorded import RecordedRunner

        runner = RecordedRunner()
    else:
        runner = default_runner()
    proposer = resolve_proposer(args.proposer, backends, arch)
    rows, unfinished = [], 0
    try:
        for i, s in enumerate(shapes):
            problem = GemmProblem(m=s["M"], n=s["N"], k=s["K"])
            if deadline is not None and time.monotonic() >= deadline and not store.baselines(problem):
                unfinished += 1  # never started: leave it for the next chunk (shapes begun earlier are
                continue  # still collected below; run_search then spends no GPU time on them)
            print(f"[{i + 1}/{len(shapes)}] {problem.label()}", flush=True)
            seen = getattr(getattr(runner, "stats", None), "candidates", 0)
            res = run_search(problem, backends=backends, arch=arch, proposer=proposer, runner=runner, store=store,
                             budget=budget, modes=(args.mode,), seed=0, batch_size=args.batch, deadline=deadline,
                             n_proposals=args.proposals, lookahead=args.lookahead,
                             confirm=Confirm(rounds=args.confirm, mode=args.confirm_mode))
            cut_short = deadline is not None and time.monotonic() >= deadline and res.confirmed_rounds < args.confirm
            if hasattr(runner, "stats") and runner.stats.candidates > seen:  # this shape measured something
                print(f"    evaluator so far: {runner.stats.line()}", flush=True)
            if budget.spent(res.evaluations, res.gpu_seconds) and not cut_short:
                rows.append(_row(problem, res, s, args, store))
            else:
                unfinished += 1
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(report(rows, len(shapes), budget, _run_note(start, runner)))
            args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    finally:
        if hasattr(runner, "close"):
            runner.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = report(rows, len(shapes), budget, _run_note(start, runner))
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    plot(rows, args.out.with_suffix(".png"))
    print(text)
    if unfinished:
        print(f"{unfinished} shape(s) not finished: run the same command again to continue "
              f"({time.monotonic() - start:.0f} s this chunk)")
        return 3
    print(f"all {len(shapes)} shapes done ({time.monotonic() - start:.0f} s this chunk)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
