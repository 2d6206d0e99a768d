"""`cudal2 tune`, `sweep` and `dataset export`: many shapes searched or swept, and the measured pairs written out."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated, Callable, Iterator, Optional

import typer

from ..dataset import draw_shapes, resolve_shapes, run_sweep
from ..dataset.cluster import ClusterError
from cudal2.store.store import StoreError

from .common import (_backends, ArchOpt, Backends, BatchOpt, DtypeOpt, LayoutOpt, OneBackend, SeedOpt, BudgetOpt, ConfirmModeOpt, ConfirmOpt, LlmFatalOpt, Modes,
                     ProposerName, RunnerOpt, StoreOpt, _confirm, _fail, _llm_fatal, _one_line, _parse_shapes_file,
                     _point_at_recorded_store, _problem, _proposer, _runner, _shown_url, _store, _us, _value, _values, _warning, _x, app, console,
                     err_console, _writing_output)
from ..api import default_arch
from ..bench.results import DEFAULT_MODE, is_synthetic
from ..bench.timing import TimingConfig
from ..dataset import cluster
from ..dataset import export_rows, write_rows
from cudal2.proposers import catalog
from cudal2.tuner.aggregates import aggregate, markdown

@app.command()
def tune(shapes_file: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                                     help="one shape per line: 'M N K' or 'MxNxK'")],
          budget: BudgetOpt = "32",
          proposer: Annotated[ProposerName, typer.Option(help=(
              "auto: learned where a cost model exists for the arch, else rules; none: Optuna only"))] = "auto",
          backend: Backends = [],  # noqa: B006
          dtype: DtypeOpt = "float16", layout: LayoutOpt = "NN", store: StoreOpt = None,
          mode: Modes = [DEFAULT_MODE],  # noqa: B006
          out: Annotated[Optional[Path], typer.Option("--out", "-o", help="markdown report to write")] = None,
          seed: SeedOpt = None, batch: BatchOpt = 4, arch: ArchOpt = None,
          confirm: ConfirmOpt = 3, confirm_mode: ConfirmModeOpt = None, runner: RunnerOpt = "gpu",
          llm_fatal: LlmFatalOpt = False) -> None:
    """Search every shape of a file (resumable: finished studies are not repeated) and report."""
    from cudal2.tuner.loop import run_search

    mode, proposer = _values(mode), _value(proposer)
    lines = _parse_shapes_file(shapes_file)
    # each shape once, in first-seen order: identical lines first (cheap), then spellings of one problem
    distinct: dict[str, object] = {}
    for text in dict.fromkeys(lines):
        p = _problem(text, dtype, layout)
        distinct.setdefault(p.key(), p)
    problems = list(distinct.values())
    if len(problems) < len(lines):
        console.print(f"{len(lines)} lines name {len(problems)} distinct shape(s): each is searched once")
    s = _store(store, runner)
    arch = arch or default_arch()
    backend = _backends(backend, arch)
    run = _runner(runner, store=s)
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
        lines.append(f"| {r.problem.label()} | {_us(r.best.time_ms.get(r.mode) if r.best else None)} | "
                     + " | ".join(cells) + " |")
    report = "\n".join(lines) + "\n\n" + markdown({b: aggregate(r.speedup.get(b) for r in results) for b in names})
    console.print(report)
    if out:
        with _writing_output(out):
            out.write_text(report)
        console.print(f"wrote {out}")


# ---- dataset -----------------------------------------------------------------------------------
SpecsOpt = Annotated[str, typer.Option("--specs", help="'all' specs of the catalog, or N drawn with a fixed seed")]
WorkersOpt = Annotated[Optional[str], typer.Option("--workers", help=(
    "measure on a Dask cluster (needs cudal2's dask extra): auto (one worker per GPU here), N workers, or a "
    "scheduler's address tcp://host:8786; default: one process on GPU 0"))]


@app.command()
def sweep(shapes: Annotated[str, typer.Argument(help="grid, serving, all (each optionally :train or :validation), "
                                                     "a file of shapes, or MxNxK[,MxNxK...]")],
          specs: SpecsOpt = "100", backend: OneBackend = "triton",
          store: StoreOpt = None, dtype: DtypeOpt = "float16", mode: Modes = [DEFAULT_MODE],  # noqa: B006
          arch: ArchOpt = None, max_gflop: Annotated[Optional[float], typer.Option(
              "--max-gflop", help="only shapes of at most this many GFLOP (2MNK / 1e9)")] = None,
          limit: Annotated[Optional[int], typer.Option(min=1, help="only the first N shapes")] = None,
          sample: Annotated[Optional[int], typer.Option(min=1, help=(
              "only N shapes drawn with a fixed seed (after --max-gflop; the same N draws the same shapes)"))] = None,
          runner: RunnerOpt = "gpu", workers: WorkersOpt = None,
          catalog_name: Annotated[str, typer.Option("--catalog", help=(
              "the spec catalog: 'base' (every backend), 'narrow' (cute_dsl tiles under 64 wide, "
              "deep split-K and pipelines, for small outputs) or 'deep' (each cute_dsl tile, warp, cluster "
              "and swap arrangement once, at the deepest pipeline that fits)"))] = "base") -> None:
    """Measure many specs on many shapes into the store: one row per (spec, shape) pair, resumable
    (pairs the store holds are not measured again). `cudal2 dataset export` writes them out."""
    backend, modes, runner = _value(backend), _values(mode), _value(runner)
    try:
        problems = resolve_shapes(shapes, dtype)
    except (ValueError, OSError) as e:
        _fail(f"sweep {shapes}: {_one_line(e)}")
    if max_gflop is not None:
        problems = [p for p in problems if p.flops / 1e9 <= max_gflop]
    if sample is not None and sample < len(problems):
        problems = draw_shapes(problems, sample)
    problems = problems[:limit] if limit else problems
    if not problems:
        _fail(f"sweep {shapes}: no shapes left (--max-gflop {max_gflop}, --limit {limit})")
    arch = arch or default_arch()
    try:
        catalog_specs = catalog.sample(specs if specs == "all" else _count(specs), backend, arch, name=catalog_name)
    except ValueError as e:
        _fail(f"--specs {specs} --catalog {catalog_name}: {e}")
    s = _store(store, runner)
    total = len(problems) * len(catalog_specs)
    started = time.monotonic()
    try:
        if workers is None:
            summary = _sweep_here(problems, catalog_specs, runner, s, modes, total, backend)
        else:
            summary = _sweep_on_cluster(workers, problems, catalog_specs, runner, s, modes, total, backend)
    except (ClusterError, StoreError) as e:
        _fail(f"sweep: {e}")
    seconds = time.monotonic() - started
    console.print(f"{summary.measured} pairs measured ({summary.correct} correct) in {seconds:.0f} s = "
                  f"{summary.measured / max(seconds, 1e-9):.1f} pairs/s; {summary.already} were in the store already")
    for line in summary.skipped:
        _warning(f"not measured: {line}")


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[int, str], None]]:
    """A progress bar on stderr (shape, pairs done, pairs/s, time left); yields the on_pairs callback."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]}"), TimeRemainingColumn())
    with Progress(*columns, console=err_console, transient=False) as bar:
        task = bar.add_task("pairs", total=total, rate="")
        started, done = time.monotonic(), [0]

        def advance(n: int, label: str) -> None:
            bar.advance(task, n)
            done[0] += n
            rate = done[0] / max(time.monotonic() - started, 1e-9)
            bar.update(task, description=label, rate=f"{rate:.1f} pairs/s")

        yield advance


def _sweep_here(problems, specs, runner_name: str, store, modes, total: int, backend: str):
    """The sweep in this process, on GPU 0 (or the recorded runner)."""
    # every baseline, timed once per shape (a search's runner times its trials beside torch alone)
    run = (_runner(runner_name, timing=TimingConfig.sweep(), trial_baselines=None) if runner_name == "gpu"
           else _runner(runner_name))
    console.print(f"sweep: {len(specs)} {backend} specs x {len(problems)} shapes = {total} pairs "
                  f"into {_shown_url(store)}")
    try:
        with _progress(total) as advance:
            return run_sweep(problems, specs, run, store, modes=modes, on_pairs=advance)
    finally:
        if hasattr(run, "close"):
            run.close()


def _sweep_on_cluster(workers: str, problems, specs, runner_name: str, store, modes, total: int, backend: str):
    """The sweep on the workers of a Dask cluster, each with its own runner (one per GPU)."""
    import functools

    request = cluster.parse_workers(workers)
    cluster.require_dask()
    from ..dataset.cluster_sweep import run_sweep_on_cluster
    from ..dataset.cluster_worker import gpu_runner

    if runner_name == "recorded":
        from cudal2.tuner.recorded import RecordedRunner

        console.print("[yellow]runner 'recorded': synthetic numbers from a model, not GPU measurements[/yellow]")
        make_runner = RecordedRunner
    else:
        make_runner = functools.partial(gpu_runner, timing=TimingConfig.sweep(), trial_baselines=None)
    with cluster.open_cluster(request, gpus=runner_name == "gpu") as client:
        console.print(f"sweep: {len(specs)} {backend} specs x {len(problems)} shapes = {total} pairs on "
                      f"{cluster.worker_count(client)} workers ({request.where}) into {_shown_url(store)}")
        with _progress(total) as advance:
            return run_sweep_on_cluster(problems, specs, client, make_runner, store, modes=modes, on_pairs=advance)


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
                   store: StoreOpt = None,
                   gpu: Annotated[Optional[str], typer.Option("--gpu", help=(
                       "the GPU model whose pairs to export, for a store that holds several"))] = None) -> None:
    """One row per measured pair: shape, split, spec fields, kernel times per mode, baselines, GPU, versions."""
    s = _store(store)
    synthetic = [0]

    def counted(rows):
        for row in rows:
            synthetic[0] += is_synthetic(row.get("gpu"))
            yield row

    try:
        n = write_rows(counted(export_rows(s, gpu=gpu)), out)
    except (RuntimeError, ValueError, OSError) as e:
        _fail(f"dataset export: {_one_line(e)}")
    console.print(f"wrote {n} rows to {out}")
    if not n and store is None:
        _point_at_recorded_store("dataset", "export", "--out", str(out))
    if synthetic[0]:
        _warning(f"{synthetic[0]} of the {n} rows are synthetic (gpu 'recorded': the recorded runner's model, not "
                 "measurements); a cost model trained on them learns that model, not a GPU")
