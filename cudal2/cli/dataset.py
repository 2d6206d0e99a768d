"""`cudal2 tune`, `sweep` and `dataset export`: many shapes searched or swept, and the measured pairs written out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (BackendName, Backends, BatchOpt, BudgetOpt, ConfirmModeOpt, ConfirmOpt, LlmFatalOpt, Modes,
                     ProposerName, RunnerOpt, StoreOpt, _confirm, _fail, _llm_fatal, _one_line, _parse_shapes_file,
                     _problem, _proposer, _runner, _shown_url, _store, _us, _value, _values, _warning, _x, app, console,
                     err_console)

@app.command()
def tune(shapes_file: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                                     help="one shape per line: 'M N K' or 'MxNxK'")],
          budget: BudgetOpt = "32",
          proposer: Annotated[ProposerName, typer.Option(help=(
              "auto: learned where a cost model exists for the arch, else rules; none: Optuna only"))] = "auto",
          backend: Backends = ["triton"],  # noqa: B006
          dtype: str = "float16", layout: str = "NN", store: StoreOpt = None,
          mode: Modes = ["offline"],  # noqa: B006
          out: Annotated[Optional[Path], typer.Option("--out", "-o", help="markdown report to write")] = None,
          seed: Optional[int] = None, batch: BatchOpt = 4, arch: Optional[str] = None,
          confirm: ConfirmOpt = 3, confirm_mode: ConfirmModeOpt = None, runner: RunnerOpt = "gpu",
          llm_fatal: LlmFatalOpt = False) -> None:
    """Search every shape of a file (resumable: finished studies are not repeated) and report."""
    from ..api import default_arch
    from ..search.aggregates import aggregate, markdown
    from ..search.loop import run_search

    backend, mode, proposer = _values(backend), _values(mode), _value(proposer)
    problems = [_problem(s, dtype, layout) for s in _parse_shapes_file(shapes_file)]
    s = _store(store)
    arch = arch or default_arch()
    run = _runner(runner)
    prop = _proposer(proposer, backend, arch, llm_fatal=llm_fatal)
    with _llm_fatal(prop):
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


# ---- dataset -----------------------------------------------------------------------------------
SpecsOpt = Annotated[str, typer.Option("--specs", help="'all' specs of the catalog, or N drawn with a fixed seed")]


@app.command()
def sweep(shapes: Annotated[str, typer.Argument(help="grid, serving, all (each optionally :train or :validation), "
                                                     "a file of shapes, or MxNxK[,MxNxK...]")],
          specs: SpecsOpt = "100", backend: Annotated[BackendName, typer.Option("--backend", "-b")] = "triton",
          store: StoreOpt = None, dtype: str = "float16", mode: Modes = ["offline"],  # noqa: B006
          arch: Optional[str] = None, max_gflop: Annotated[Optional[float], typer.Option(
              "--max-gflop", help="only shapes of at most this many GFLOP (2MNK / 1e9)")] = None,
          limit: Annotated[Optional[int], typer.Option(min=1, help="only the first N shapes")] = None,
          sample: Annotated[Optional[int], typer.Option(min=1, help=(
              "only N shapes drawn with a fixed seed (after --max-gflop; the same N draws the same shapes)"))] = None,
          runner: RunnerOpt = "gpu") -> None:
    """Measure many specs on many shapes into the store: one row per (spec, shape) pair, resumable
    (pairs the store holds are not measured again). `cudal2 dataset export` writes them out."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ..api import default_arch
    from ..bench.timing import TimingConfig
    from ..dataset import resolve_shapes, run_sweep
    from ..search import catalog

    backend, modes = _value(backend), _values(mode)
    try:
        problems = resolve_shapes(shapes, dtype)
    except (ValueError, OSError) as e:
        _fail(f"sweep {shapes}: {_one_line(e)}")
    if max_gflop is not None:
        problems = [p for p in problems if p.flops / 1e9 <= max_gflop]
    if sample is not None and sample < len(problems):
        from ..dataset import draw_shapes

        problems = draw_shapes(problems, sample)
    problems = problems[:limit] if limit else problems
    if not problems:
        _fail(f"sweep {shapes}: no shapes left (--max-gflop {max_gflop}, --limit {limit})")
    arch = arch or default_arch()
    try:
        catalog_specs = catalog.sample(specs if specs == "all" else _count(specs), backend, arch)
    except ValueError as e:
        _fail(f"--specs {specs}: {e}")
    s = _store(store)
    run = _runner(runner, timing=TimingConfig.sweep()) if _value(runner) == "gpu" else _runner(runner)
    total = len(problems) * len(catalog_specs)
    console.print(f"sweep: {len(catalog_specs)} {backend} specs x {len(problems)} shapes = {total} pairs "
                  f"into {_shown_url(s)}")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]}"), TimeRemainingColumn())
    import time

    with Progress(*columns, console=err_console, transient=False) as bar:
        task = bar.add_task("pairs", total=total, rate="")
        started, measured = time.monotonic(), [0]

        def advance(n: int, label: str) -> None:
            bar.advance(task, n)
            measured[0] += n
            rate = measured[0] / max(time.monotonic() - started, 1e-9)
            bar.update(task, description=label, rate=f"{rate:.1f} pairs/s")

        try:
            summary = run_sweep(problems, catalog_specs, run, s, modes=modes, on_pairs=advance)
        finally:
            if hasattr(run, "close"):
                run.close()
    seconds = time.monotonic() - started
    console.print(f"{summary.measured} pairs measured ({summary.correct} correct) in {seconds:.0f} s = "
                  f"{summary.measured / max(seconds, 1e-9):.1f} pairs/s; {summary.already} were in the store already")
    for line in summary.skipped:
        _warning(f"not measured: {line}")


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        _fail(f"--specs {text!r}: give 'all' or a number of specs")


dataset_app = typer.Typer(no_args_is_help=True, help="The measured (spec, shape) pairs of a store.")
app.add_typer(dataset_app, name="dataset")


@dataset_app.command("export")
def dataset_export(out: Annotated[Path, typer.Option("--out", "-o", dir_okay=False,
                                                     help="a .csv file, or .parquet (needs pandas and pyarrow)")],
                   store: StoreOpt = None) -> None:
    """One row per measured pair: shape, split, spec fields, kernel times per mode, baselines, GPU, versions."""
    from ..dataset import export_rows, write_rows

    s = _store(store)
    try:
        n = write_rows(export_rows(s), out)
    except (RuntimeError, ValueError, OSError) as e:
        _fail(f"dataset export: {_one_line(e)}")
    console.print(f"wrote {n} rows to {out}")
