"""`cudal2 search`, `show`, `export` and `bench`: one shape searched, the tuned table, one spec timed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from .common import (_backends, ArchOpt, Backends, BatchOpt, DtypeOpt, LayoutOpt, OneBackend, SeedOpt, BudgetOpt, ConfirmModeOpt, ConfirmOpt, LlmFatalOpt, ModeName,
                     Modes, ProposerName, REFERENCE, RunnerOpt, SamplerName, StaticTwinsOpt, StoreOpt, _confirm, _fail,
                     _llm_fatal, _one_line, _point_at_recorded_store, _problem, _proposer, _runner, _shown_url, _store, _us, _value, _values, _warning, _x, app, console,
                     _writing_output)
from ..api import default_arch
from ..bench.results import DEFAULT_MODE
from ..codegen.registry import backend_status, backend_statuses
from ..ir import KernelSpec, SpecError
from ..ir.spec import summaries_told_apart
from cudal2.store.table import TunedTable
from cudal2.tuner.dry_run import dry_run
from cudal2.tuner.precompile import check_proposer

JsonOpt = Annotated[bool, typer.Option("--json", help=(
    "print one JSON object and nothing else on stdout (warnings and errors stay on stderr)"))]


def _print_json(obj) -> None:
    """One JSON object on stdout: what --json prints instead of the tables."""
    console.quiet = False
    print(json.dumps(obj, indent=1, sort_keys=True, default=str))


@app.command()
def search(shape: Annotated[str, typer.Argument(help="M x N x K, e.g. 4096x4096x4096")],
           budget: BudgetOpt = "64",
           proposer: Annotated[ProposerName, typer.Option(help=(
              "auto: learned where a cost model exists for the arch, else rules; none: Optuna only"))] = "auto",
           backend: Backends = [],  # noqa: B006 - typer reads the default
           dtype: DtypeOpt = "float16", layout: LayoutOpt = "NN", store: StoreOpt = None,
           dry_run: Annotated[bool, typer.Option("--dry-run", help="propose, validate, render and compile; "
                                                 "no GPU timing")] = False,
           mode: Modes = [DEFAULT_MODE],  # noqa: B006
           sampler: Annotated[SamplerName, typer.Option(help="Optuna's sampler after the proposals")] = "tpe",
           seed: SeedOpt = None,
           batch: BatchOpt = 4,
           n: Annotated[int, typer.Option(min=1, help=(
               "proposals to show in a dry run (and one more of each backend in the run that none names)"))] = 8,
           arch: ArchOpt = None,
           confirm: ConfirmOpt = 3, confirm_mode: ConfirmModeOpt = None, static_twins: StaticTwinsOpt = 1,
           per_shape: Annotated[bool, typer.Option("--per-shape", help=(
               "measure kernels compiled for this one shape (the backends' \"auto\") instead of each "
               "spec's shape-generic kernel, which one compile serves for every shape"))] = False,
           runner: RunnerOpt = "gpu", llm_fatal: LlmFatalOpt = False, json_out: JsonOpt = False) -> None:
    """Search kernels for one shape (resumes the study of that shape found in the store)."""
    from cudal2.tuner.loop import run_search

    console.quiet = json_out  # the tables and the progress give way to one JSON object

    mode, proposer, sampler = _values(mode), _value(proposer), _value(sampler)
    problem = _problem(shape, dtype, layout)
    arch = arch or default_arch()
    chosen = list(_values(backend))
    backend = _backends(backend, arch)
    if dry_run:
        _dry_run(problem, backend, arch, proposer, n, chosen, json_out)
        return
    s = _store(store, runner)
    prop = _proposer(proposer, backend, arch, llm_fatal=llm_fatal)
    run = _runner(runner, has_dry_run=True, store=s)
    try:
        with _llm_fatal(prop):
            res = run_search(problem, backends=tuple(backend), arch=arch, proposer=prop, runner=run,
                             store=s, budget=budget, modes=tuple(mode), sampler=sampler, seed=seed,
                             batch_size=batch, confirm=_confirm(confirm, confirm_mode, static_twins),
                             shape_generic=not per_shape, lookahead=True, progress=not json_out)
    finally:
        if hasattr(run, "close"):
            run.close()
    if json_out:
        _print_json(_result_json(res, runner))
        return
    _print_result(res, s.studies_at())


def _result_json(res, runner: str) -> dict:
    best = res.best
    return {"problem": res.problem.label(), "mode": res.mode, "evaluations": res.evaluations,
            "gpu_seconds": res.gpu_seconds, "confirmed_rounds": res.confirmed_rounds,
            "synthetic": _value(runner) == "recorded",
            "best": None if best is None else {"spec": best.spec.to_dict(), "summary": best.spec.summary(),
                                               "kernel_ms": dict(best.time_ms)},
            "speedup": dict(res.speedup), "speedups": {m: dict(v) for m, v in res.speedups.items()},
            "study": res.study.study_name if res.study is not None else None}


@app.command()
def precompile(shapes: Annotated[str, typer.Argument(help=(
                   "grid, serving, all (each optionally :train or :validation), a file of shapes, or "
                   "MxNxK[,MxNxK...]"))] = "serving:train",
               backend: Backends = [],  # noqa: B006
               proposer: Annotated[str, typer.Option(help="whose first proposals: auto, learned or rules")] = "auto",
               dtype: DtypeOpt = "float16",
               per_shape: Annotated[int, typer.Option(min=1, help="first proposals asked per shape")] = 32,
               workers: Annotated[Optional[int], typer.Option(min=1, help=(
                   "compile processes (default: one a core, less two, up to 16)"))] = None,
               plan_processes: Annotated[Optional[int], typer.Option(min=0, help=(
                   "processes that ask the proposer beside the compiles (default: a quarter of the cores, "
                   "up to 4; none on fewer than 8 cores)"))] = None,
               dry_run: Annotated[bool, typer.Option("--dry-run", help="plan and count the kernels; "
                                                     "compile nothing")] = False,
               arch: ArchOpt = None,
               ) -> None:
    """Compile ahead the kernels searches try first, so that a search of a new shape finds them
    compiled (resumable: what the disk caches hold is loaded, not compiled again)."""
    from ..api import default_arch, gpu_available, precompile as run_precompile, resolve_problems

    try:  # bad input is one error line before anything else is said
        check_proposer(proposer)
        problems = resolve_problems(shapes, dtype)
    except (ValueError, OSError) as e:
        _fail(f"precompile {shapes}: {_one_line(e)}")
    arch = arch or default_arch()
    backends = _backends(backend, arch)
    if not dry_run and not gpu_available():
        _warning(f"no GPU here: the kernels compile for {arch} without one, and a GPU machine may not take "
                 "them (the CuTe DSL's where its persistent grid matches; Triton's JIT not always); run this "
                 "where you search")
    try:
        done = run_precompile(problems, dtype=dtype, backends=backends, proposer=proposer, arch=arch,
                              per_shape=per_shape, workers=workers, plan_processes=plan_processes,
                              dry_run=dry_run)
    except (ValueError, OSError) as e:
        _fail(f"precompile {shapes}: {_one_line(e)}")
    console.print(f"precompile: {done.line()}")
    for summary, reason in done.failed[:5]:
        console.print(f"  [yellow]{summary}: {reason}[/yellow]", markup=True)
    if len(done.failed) > 5:
        console.print(f"  ... and {len(done.failed) - 5} more")


def _print_result(res, studies: str = "<store url>") -> None:
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
    if res.proposals:
        by_source = sorted(res.proposals.items(), key=lambda kv: -kv[1])
        console.print("specs measured, by source: " + ", ".join(f"{n} {src}" for src, n in by_source),
                      markup=False, soft_wrap=True)
    console.print(f"spec: {res.best.spec.to_json()}")
    console.print(f"study: {res.study.study_name} (view: optuna-dashboard {studies})")


def _dry_run(problem, backends, arch: str, proposer: str, n: int, chosen=(), json_out: bool = False) -> None:
    from ..api import gpu_available, resolve_proposer

    if not gpu_available():
        # Kernels are compiled for the interpreter (Triton) or compile-only (CuTe DSL) here.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("CUTE_DSL_ARCH", arch)
    if proposer == "none":
        _fail("a dry run shows proposals; choose --proposer rules, llm or random")
    try:
        prop = resolve_proposer(proposer, tuple(backends), arch)
    except Exception as e:  # noqa: BLE001 - unknown name, missing package, no API key
        _fail(f"proposer {proposer!r}: {e}")
    _print_backends_considered(chosen, backends, arch)
    rows = dry_run(problem, backends=tuple(backends), arch=arch, proposer=prop, n=n,
                   proposer_for=lambda names: resolve_proposer(proposer, names, arch))
    if json_out:
        statuses = [backend_status(name, arch) for name in chosen] if chosen else backend_statuses(arch)
        _print_json({"problem": problem.label(), "arch": arch, "timed": False,
                     "backends": [{"name": st.name, "in_run": st.name in backends, "reason": st.reason,
                                   "install": st.install} for st in statuses],
                     "proposals": [{"backend": r.spec.backend, "spec": r.spec.to_dict(), "source": r.source,
                                    "valid": r.valid, "rendered": r.rendered, "built": r.compiled_as if r.compiled
                                    else "", "error": r.error} for r in rows]})
        _fail_where_none_built(problem, rows)
        return
    t = Table(title=f"dry run: {problem.label()} on {arch} ({len(rows)} proposals; nothing timed)")
    for col in ("#", "backend", "spec", "valid", "rendered", "built", "error"):
        t.add_column(col, overflow="fold")
    ok = lambda b: "[green]yes[/green]" if b else "[red]no[/red]"  # noqa: E731
    # rows whose summaries coincide name the fields they differ in
    for i, (r, summary) in enumerate(zip(rows, summaries_told_apart([r.spec for r in rows]))):
        built = f"[green]{r.compiled_as}[/green]" if r.compiled else "[red]no[/red]"
        t.add_row(str(i), r.spec.backend, escape(summary), ok(r.valid), ok(r.rendered), built, r.error)
    console.print(t)
    if not rows:
        console.print("[yellow]the proposer returned nothing for this problem[/yellow]")
    unproposed = [b for b in backends if rows and not any(r.spec.backend == b for r in rows)]
    if unproposed:
        console.print(f"[yellow]the proposer returned nothing for {', '.join(unproposed)} on this problem[/yellow]")
    if any(r.compiled_as == "imported (interpreter)" for r in rows):
        console.print("built: imported (interpreter): without a GPU, Triton's CPU interpreter imported the module "
                      "and nothing was compiled to GPU code (TRITON_INTERPRET=0 lowers it to PTX with ptxas "
                      "instead)", markup=False, soft_wrap=True)
    _fail_where_none_built(problem, rows)


def _fail_where_none_built(problem, rows) -> None:
    """A dry run in which no proposal built is an error (exit 2): the environment lacks something."""
    if rows and not any(r.compiled for r in rows):
        first = next((r.error for r in rows if r.error), "")
        _fail(f"none of the {len(rows)} proposals for {problem.label()} built here ({first[:200]}); the backends "
              "table names what each backend lacks and the line that installs it")


def _print_backends_considered(chosen, searched, arch: str) -> None:
    """Each backend the run considered (the chosen ones, else every registered one): whether it is
    in the run, why it cannot compile here, and the command that installs what it lacks."""
    statuses = [backend_status(name, arch) for name in chosen] if chosen else backend_statuses(arch)
    t = Table(title=f"backends considered on {arch}")
    for col in ("backend", "in this run", "why not ready here", "install"):
        t.add_column(col, overflow="fold")
    for s in statuses:
        t.add_row(s.name, "[green]yes[/green]" if s.name in searched else "[yellow]skipped[/yellow]", s.reason,
                  s.install)
    console.print(t)


# ---- show / export ------------------------------------------------------------------------------
TableModeOpt = Annotated[ModeName, typer.Option(
    "--mode", help="the timing mode kernels are ranked in: chain (as a model calls them, the default "
                   "objective), layer (after the layer's prelude, events around the call), offline (back to "
                   "back), or sustained for the kernels a search confirmed with "
                   "--confirm-mode sustained; measurements of one mode are never ranked against another's")]


def _table(store, mode: str):
    return TunedTable.from_store(store, mode=_value(mode))


@app.command()
def show(store: StoreOpt = None, mode: TableModeOpt = DEFAULT_MODE, json_out: JsonOpt = False) -> None:
    """Table of tuned shapes in the store: best kernel and its speedups."""
    s = _store(store)
    table = _table(s, mode)
    if json_out:
        _print_json({"store": _shown_url(s), "mode": _value(mode),
                     "entries": [e.to_dict() for e in table]})
        return
    if not len(table):
        console.print(f"nothing tuned yet in {_shown_url(s)}; run `cudal2 search SHAPE`")
        if store is None:
            _point_at_recorded_store("show")
        return
    names = sorted({b for e in table for b in e.baselines_ms})
    t = Table(title=f"tuned shapes in {_shown_url(s)}")
    for col in ("problem", "gpu", "backend", "spec", "kernel us", *[f"vs {b}" for b in names]):
        t.add_column(col, overflow="fold")
    for e in table:
        gpu = f"{e.gpu} (synthetic)" if e.synthetic else e.gpu or "?"
        t.add_row(e.problem.label(), gpu, e.spec.backend, e.spec.summary(), _us(e.kernel_ms),
                  *[_x(e.speedup(b)) for b in names])
    console.print(t)
    synthetic = sum(e.synthetic for e in table)
    if synthetic:
        console.print(f"[yellow]{synthetic} of {len(table)} row(s) are synthetic: numbers of the recorded runner's "
                      "model, not GPU measurements[/yellow]")
    console.print("used by cudal2.matmul only where faster than torch; studies: optuna-dashboard " + s.studies_at())


@app.command()
def export(out: Annotated[Path, typer.Option("--out", "-o", dir_okay=False, help="JSON file to write")] = Path(
               "cudal2_table.json"),
           store: StoreOpt = None, mode: TableModeOpt = DEFAULT_MODE) -> None:
    """Write the tuned table (best kernel per shape and GPU) to JSON; point CUDAL2_TABLE at it."""
    table = _table(_store(store), mode)
    with _writing_output(out):
        path = table.save(out)
    console.print(f"wrote {len(table)} tuned shape(s) to {path}; use it with CUDAL2_TABLE={path}")
    if not len(table) and store is None:
        _point_at_recorded_store("export", "--out", str(out))
    synthetic = sum(e.synthetic for e in table)
    if synthetic:
        _warning(f"{synthetic} of the {len(table)} are synthetic (GPU 'recorded': the recorded runner's model, not "
                 "measurements; marked \"synthetic\": true in the file); export a store of GPU searches to serve "
                 "kernels")


# ---- bench --------------------------------------------------------------------------------------
@app.command()
def bench(shape: Annotated[str, typer.Argument(help="M x N x K, e.g. 4096x4096x4096")], backend: OneBackend = "triton",
          spec: Annotated[Optional[Path], typer.Option("--spec", exists=True, dir_okay=False,
                                                       help="JSON file: a KernelSpec or a list")] = None,
          mode: Modes = [DEFAULT_MODE],  # noqa: B006
          dtype: DtypeOpt = "float16", layout: LayoutOpt = "NN") -> None:
    """Evaluate given specs (or the rules proposer's first picks) against the baselines."""
    backend, mode = _value(backend), _values(mode)
    _problem(shape, dtype, layout)
    specs = _spec_file(spec) if spec is not None else None
    try:
        from ..bench.report import run_bench
    except ImportError:
        _fail("the evaluator's report (cudal2.bench.report.run_bench) is not installed in this checkout")
    from ..api import gpu_available

    if not gpu_available():
        _fail(f"no CUDA GPU found: `cudal2 bench` times kernels and needs one; on a CPU, `cudal2 search {shape} "
              f"--runner recorded` tries a search on synthetic numbers, and `cudal2 search {shape} --dry-run` "
              "builds the kernels")
    run_bench(shape, backend=backend, specs=specs, modes=tuple(mode), dtype=dtype, layout=layout, console=console)


def _spec_file(path: Path) -> list:
    """The KernelSpecs of a JSON file (one object or a list), or one error line in SpecError's
    words: the field, the value, the limit and the fix."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"--spec {path} cannot be read as text ({e}); give a JSON file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        _fail(f"--spec {path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); write one "
              "KernelSpec object or a list of them")
    except (ValueError, RecursionError) as e:  # an integer of too many digits, nesting too deep
        _fail(f"--spec {path}: not valid JSON ({str(e).split(';')[0] or type(e).__name__}); write one "
              "KernelSpec object or a list of them")
    items = data if isinstance(data, list) else [data]
    try:
        return [KernelSpec.from_dict(d) for d in items]
    except SpecError as e:
        _fail(f"--spec {path}: {_one_line(e)}")


# ---- compare / sweep ----------------------------------------------------------------------------
