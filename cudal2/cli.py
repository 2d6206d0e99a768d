"""The `cudal2` command: search, show, export, bench, compare, sweep.

Everything heavy is imported inside the commands, so `cudal2 --help` is quick.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Search GEMM kernels faster than cuBLAS, shape by shape.")
console = Console()

Backends = Annotated[list[str], typer.Option("--backend", "-b", help="codegen backend(s) to search (repeat)")]
Modes = Annotated[list[str], typer.Option("--mode", "-m", help="timing mode(s): offline, server, sustained (repeat)")]
StoreOpt = Annotated[Optional[str], typer.Option("--store", help="SQLAlchemy URL or SQLite file "
                                                 "(default: $CUDAL2_STORE or the user cache store)")]
RunnerOpt = Annotated[str, typer.Option("--runner", help="gpu: the evaluator; recorded: synthetic replayed "
                                        "numbers for trying the tools without a GPU (not measurements)")]


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def _problem(shape: str, dtype: str, layout: str):
    from .ir import GemmProblem, SpecError

    try:
        return GemmProblem.parse(shape, dtype=dtype, layout=layout)
    except SpecError as e:
        _fail(str(e))


def _runner(kind: str):
    if kind == "recorded":
        from .search.recorded import RecordedRunner

        console.print("[yellow]runner 'recorded': synthetic numbers from a model, not GPU measurements[/yellow]")
        return RecordedRunner()
    if kind != "gpu":
        _fail(f"unknown runner {kind!r}; use 'gpu' or 'recorded'")
    from .api import default_runner, gpu_available

    if not gpu_available():
        _fail("no CUDA GPU found: nothing can be timed here. Run with --dry-run to propose, validate, render "
              "and compile the kernels without timing them.")
    try:
        return default_runner()
    except RuntimeError as e:
        _fail(str(e))


def _store(url: str | None):
    from .search.store import Store

    return Store(url)


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


# ---- search --------------------------------------------------------------------------------------
REFERENCE = "torch"
ConfirmOpt = Annotated[int, typer.Option(help="time the 3 leaders this many more times and name the winner "
                                              "by the median (0: report the best search trial alone)")]
ConfirmModeOpt = Annotated[Optional[str], typer.Option(
    "--confirm-mode", help="rank the leaders in this timing mode (sustained: at the clock each kernel's own "
                           "power draw sets; default: the search's own mode)")]


def _confirm(rounds: int, mode: str | None = None):
    from .search.confirm import Confirm

    try:
        return Confirm(rounds=rounds, mode=mode)
    except ValueError as e:
        _fail(f"--confirm {rounds} --confirm-mode {mode}: {e}")


@app.command()
def search(shape: Annotated[str, typer.Argument(help="M x N x K, e.g. 4096x4096x4096")],
           budget: Annotated[str, typer.Option(help="GPU measurements (64) or GPU time (120s, 5m)")] = "64",
           proposer: Annotated[str, typer.Option(help="rules | llm | random | none (Optuna only)")] = "rules",
           backend: Backends = ["triton"],  # noqa: B006 - typer reads the default
           dtype: str = "float16", layout: str = "NN", store: StoreOpt = None,
           dry_run: Annotated[bool, typer.Option("--dry-run", help="propose, validate, render and compile; "
                                                 "no GPU timing")] = False,
           mode: Modes = ["offline"],  # noqa: B006
           sampler: Annotated[str, typer.Option(help="tpe | gp | random")] = "tpe",
           seed: Optional[int] = None,
           batch: Annotated[int, typer.Option(help="specs per evaluator call")] = 4,
           n: Annotated[int, typer.Option(help="proposals to show in a dry run")] = 8,
           arch: Annotated[Optional[str], typer.Option(help="target arch (default: the GPU's, or sm_90a)")] = None,
           confirm: ConfirmOpt = 3, confirm_mode: ConfirmModeOpt = None,
           runner: RunnerOpt = "gpu") -> None:
    """Search kernels for one shape (resumes the study of that shape found in the store)."""
    from .api import default_arch, resolve_proposer
    from .search.loop import Budget, run_search

    problem = _problem(shape, dtype, layout)
    arch = arch or default_arch()
    if dry_run:
        _dry_run(problem, backend, arch, proposer, n)
        return
    try:
        Budget.parse(budget)
    except ValueError as e:
        _fail(str(e))
    try:
        prop = None if proposer == "none" else resolve_proposer(proposer, tuple(backend), arch)
    except Exception as e:  # noqa: BLE001 - unknown name, missing package, no API key
        _fail(f"proposer {proposer!r}: {e}")
    run = _runner(runner)
    try:
        res = run_search(problem, backends=tuple(backend), arch=arch, proposer=prop, runner=run,
                         store=_store(store), budget=budget, modes=tuple(mode), sampler=sampler, seed=seed,
                         batch_size=batch, confirm=_confirm(confirm, confirm_mode))
    finally:
        if hasattr(run, "close"):
            run.close()
    _print_result(res, _store(store).url)


def _print_result(res, url: str = "<store url>") -> None:
    if res.best is None:
        console.print(f"[red]{res.problem.label()}: no correct kernel in {res.evaluations} evaluations[/red]")
        return
    console.print(f"[bold]{res.problem.label()}[/bold]: best of {res.evaluations} evaluations "
                  f"({res.gpu_seconds:.0f} GPU s)")
    t = Table()
    t.add_column("mode")
    t.add_column("kernel us", justify="right")
    for name in sorted(res.baselines):
        t.add_column(f"vs {name}", justify="right")
    for mode, ms in res.best.time_ms.items():
        t.add_row(mode, _us(ms), *[_x(res.speedups.get(mode, {}).get(b)) for b in sorted(res.baselines)])
    console.print(t)
    trial = res.trial_speedup.get(REFERENCE)
    if res.confirmed_rounds:
        console.print(f"figures: the median of {res.confirmed_rounds} {res.mode} confirmation rounds (the best search trial "
                      f"alone said {_x(trial)} over {REFERENCE})")
    else:
        console.print("figures: one search trial, not confirmed (run with --confirm 3 for the median of 3 rounds)")
    for r in res.rejected:
        console.print(f"[yellow]rejected on confirmation ({r.status}): {r.spec.summary()}[/yellow]")
    console.print(f"spec: {res.best.spec.to_json()}")
    console.print(f"study: {res.study.study_name} (view: optuna-dashboard {url})")


def _dry_run(problem, backends, arch: str, proposer: str, n: int) -> None:
    from .api import gpu_available, resolve_proposer

    if not gpu_available():
        # Kernels are compiled for the interpreter (Triton) or compile-only (CuTe DSL) here.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("CUTE_DSL_ARCH", arch)
    from .search.loop import dry_run

    if proposer == "none":
        _fail("a dry run shows proposals; choose --proposer rules, llm or random")
    try:
        prop = resolve_proposer(proposer, tuple(backends), arch)
    except Exception as e:  # noqa: BLE001 - unknown name, missing package, no API key
        _fail(f"proposer {proposer!r}: {e}")
    rows = dry_run(problem, backends=tuple(backends), arch=arch, proposer=prop, n=n)
    t = Table(title=f"dry run: {problem.label()} on {arch} ({len(rows)} proposals; nothing timed)")
    for col in ("#", "backend", "spec", "valid", "rendered", "compiled", "error"):
        t.add_column(col, overflow="fold")
    ok = lambda b: "[green]yes[/green]" if b else "[red]no[/red]"  # noqa: E731
    for i, r in enumerate(rows):
        t.add_row(str(i), r.spec.backend, r.spec.summary(), ok(r.valid), ok(r.rendered), ok(r.compiled), r.error)
    console.print(t)
    if not rows:
        console.print("[yellow]the proposer returned nothing for this problem[/yellow]")


# ---- show / export ------------------------------------------------------------------------------
TableModeOpt = Annotated[str, typer.Option(
    "--mode", help="the timing mode kernels are ranked in: offline, or sustained for the kernels a search "
                   "confirmed with --confirm-mode sustained (at the clock their own power draw sets)")]


def _table(store, mode: str):
    from .bench.results import MODES
    from .search.table import TunedTable

    if mode not in MODES:
        _fail(f"--mode {mode}: use one of {', '.join(MODES)}")
    return TunedTable.from_store(store, mode=mode)


@app.command()
def show(store: StoreOpt = None, mode: TableModeOpt = "offline") -> None:
    """Table of tuned shapes in the store: best kernel and its speedups."""
    s = _store(store)
    table = _table(s, mode)
    if not len(table):
        console.print(f"nothing tuned yet in {s.url}; run `cudal2 search SHAPE`")
        return
    names = sorted({b for e in table for b in e.baselines_ms})
    t = Table(title=f"tuned shapes in {s.url}")
    for col in ("problem", "gpu", "backend", "spec", "kernel us", *[f"vs {b}" for b in names]):
        t.add_column(col, overflow="fold")
    for e in table:
        t.add_row(e.problem.label(), e.gpu or "?", e.spec.backend, e.spec.summary(), _us(e.kernel_ms),
                  *[_x(e.speedup(b)) for b in names])
    console.print(t)
    console.print("used by cudal2.matmul only where faster than torch; studies: optuna-dashboard " + s.url)


@app.command()
def export(out: Annotated[Path, typer.Option("--out", "-o", help="JSON file to write")] = Path("cudal2_table.json"),
           store: StoreOpt = None, mode: TableModeOpt = "offline") -> None:
    """Write the tuned table (best kernel per shape and GPU) to JSON; point CUDAL2_TABLE at it."""
    table = _table(_store(store), mode)
    path = table.save(out)
    console.print(f"wrote {len(table)} tuned shape(s) to {path}; use it with CUDAL2_TABLE={path}")


# ---- bench --------------------------------------------------------------------------------------
@app.command()
def bench(shape: str, backend: Annotated[str, typer.Option("--backend", "-b")] = "triton",
          spec: Annotated[Optional[Path], typer.Option("--spec", help="JSON file: a KernelSpec or a list")] = None,
          mode: Modes = ["offline"],  # noqa: B006
          dtype: str = "float16", layout: str = "NN") -> None:
    """Evaluate given specs (or the rules proposer's first picks) against the baselines."""
    try:
        from .bench.report import run_bench
    except ImportError:
        _fail("the evaluator's report (cudal2.bench.report.run_bench) is not installed in this checkout")
    from .api import gpu_available

    if not gpu_available():
        _fail("no CUDA GPU found: `cudal2 bench` times kernels and needs one")
    run_bench(shape, backend=backend, spec_file=spec, modes=tuple(mode), dtype=dtype, layout=layout, console=console)


# ---- compare / sweep ----------------------------------------------------------------------------
def _parse_shapes_file(path: Path) -> list[str]:
    shapes = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            shapes.append(line)
    if not shapes:
        _fail(f"{path} lists no shapes (one 'M N K' or 'MxNxK' per line)")
    return shapes


@app.command()
def compare(shapes: Annotated[list[str], typer.Argument(help="shapes, e.g. 4096x4096x4096 512x16384x1024")],
            proposers: Annotated[str, typer.Option(help="comma-separated proposers")] = "rules,random",
            budget: str = "32", backend: Backends = ["triton"],  # noqa: B006
            dtype: str = "float16", layout: str = "NN",
            out: Annotated[Path, typer.Option("--out", "-o", help="PNG plot to write")] = Path("compare.png"),
            store_dir: Annotated[Optional[Path], typer.Option(help="one store per proposer here (default: "
                                                              "a fresh temporary directory)")] = None,
            seed: int = 0, batch: int = 4, arch: Optional[str] = None, runner: RunnerOpt = "gpu") -> None:
    """Run proposers side by side at equal budget; plot best speedup against evaluations and GPU time.
    Each proposer gets its own store, so none profits from another's measurements."""
    import tempfile

    from .api import default_arch, resolve_proposer
    from .search.loop import run_search
    from .search.store import Store

    names = [p.strip() for p in proposers.split(",") if p.strip()]
    problems = [_problem(s, dtype, layout) for s in shapes]
    arch = arch or default_arch()
    run = _runner(runner)
    root = store_dir or Path(tempfile.mkdtemp(prefix="cudal2-compare-"))
    root.mkdir(parents=True, exist_ok=True)
    curves: dict[str, dict[str, list]] = {}
    finals: dict[str, dict[str, float | None]] = {}
    for name in names:
        try:
            prop = None if name == "none" else resolve_proposer(name, tuple(backend), arch)
        except Exception as e:  # noqa: BLE001 - unknown name, missing package, no API key
            _fail(f"proposer {name!r}: {e}")
        store = Store(root / f"{name}.db")
        for problem in problems:
            console.print(f"[bold]{name}[/bold] on {problem.label()}")
            res = run_search(problem, backends=tuple(backend), arch=arch, proposer=prop, runner=run, store=store,
                             budget=budget, seed=seed, tag=f"compare-{name}", batch_size=batch)
            curves.setdefault(name, {})[problem.label()] = res.curve
            finals.setdefault(name, {})[problem.label()] = res.speedup.get("torch")
    if hasattr(run, "close"):
        run.close()
    _plot_compare(curves, out)
    (out.with_suffix(".json")).write_text(json.dumps(
        {n: {s: [p.__dict__ for p in c] for s, c in per.items()} for n, per in curves.items()}, indent=1))
    _print_compare(finals, problems)
    console.print(f"wrote {out} and {out.with_suffix('.json')}; stores in {root}")


def _plot_compare(curves: dict[str, dict[str, list]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    shapes = sorted({s for per in curves.values() for s in per})
    fig, axes = plt.subplots(len(shapes), 2, figsize=(11, 3.2 * len(shapes)), squeeze=False)
    for row, shape in enumerate(shapes):
        ax_n, ax_t = axes[row]
        for name, per in curves.items():
            pts = [p for p in per.get(shape, []) if p.best_speedup is not None]
            if not pts:
                continue
            ax_n.step([p.evaluation for p in pts], [p.best_speedup for p in pts], where="post", label=name)
            ax_t.step([p.gpu_s for p in pts], [p.best_speedup for p in pts], where="post", label=name)
        for ax, xlabel in ((ax_n, "evaluations"), (ax_t, "GPU time (s)")):
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("best speedup over torch")
            ax.set_title(shape, fontsize=9)
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(6))
        ax_n.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _print_compare(finals: dict[str, dict[str, float | None]], problems) -> None:
    from .search.aggregates import aggregate

    t = Table(title="best speedup over torch at equal budget")
    t.add_column("shape")
    for name in finals:
        t.add_column(name, justify="right")
    for p in problems:
        t.add_row(p.label(), *[_x(finals[n].get(p.label())) for n in finals])
    aggs = {n: aggregate(finals[n].values()) for n in finals}
    t.add_row("geomean", *[_x(a.geomean if a else None) for a in aggs.values()])
    console.print(t)


@app.command()
def sweep(shapes_file: Annotated[Path, typer.Argument(help="one shape per line: 'M N K' or 'MxNxK'")],
          budget: str = "32", proposer: str = "rules", backend: Backends = ["triton"],  # noqa: B006
          dtype: str = "float16", layout: str = "NN", store: StoreOpt = None,
          mode: Modes = ["offline"],  # noqa: B006
          out: Annotated[Optional[Path], typer.Option("--out", "-o", help="markdown report to write")] = None,
          seed: Optional[int] = None, batch: int = 4, arch: Optional[str] = None,
          confirm: ConfirmOpt = 3, confirm_mode: ConfirmModeOpt = None, runner: RunnerOpt = "gpu") -> None:
    """Search every shape of a file (resumable: finished studies are not repeated) and report."""
    from .api import default_arch, resolve_proposer
    from .search.aggregates import aggregate, markdown
    from .search.loop import run_search

    problems = [_problem(s, dtype, layout) for s in _parse_shapes_file(shapes_file)]
    arch = arch or default_arch()
    run = _runner(runner)
    prop = None if proposer == "none" else resolve_proposer(proposer, tuple(backend), arch)
    s = _store(store)
    results = [run_search(p, backends=tuple(backend), arch=arch, proposer=prop, runner=run, store=s,
                          budget=budget, modes=tuple(mode), seed=seed, batch_size=batch,
                          confirm=_confirm(confirm, confirm_mode))
               for p in problems]
    if hasattr(run, "close"):
        run.close()
    names = sorted({b for r in results for b in r.baselines})
    lines = ["| shape | best kernel us | " + " | ".join(f"{b} us | vs {b}" for b in names) + " |",
             "|---|---:|" + "---:|---:|" * len(names)]
    for r in results:
        cells = []
        for b in names:
            base = r.baselines.get(b)
            cells += [_us(base.kernel_ms() if base else None), _x(r.speedup.get(b))]
        lines.append(f"| {r.problem.label()} | {_us(r.best.time_ms.get('offline') if r.best else None)} | "
                     + " | ".join(cells) + " |")
    report = "\n".join(lines) + "\n\n" + markdown({b: aggregate(r.speedup.get(b) for r in results) for b in names})
    console.print(report)
    if out:
        out.write_text(report)
        console.print(f"wrote {out}")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
