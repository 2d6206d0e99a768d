"""The `cudal2` command: search, show, export, bench, compare, sweep.

Everything heavy is imported inside the commands, so `cudal2 --help` is quick.

What the user sees when something goes wrong is decided in one place, CudalGroup, around every
command: a user error is one line `error: what was wrong, and how to fix it` on stderr and exit 2
(click's own usage errors too); an unexpected exception is a bug, one line and exit 1; Ctrl-C
exits 130. A traceback is shown only with --debug or CUDAL2_DEBUG=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

try:  # newer typer carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:
    from click import exceptions as click_exceptions

from .bench.results import MODES
from .codegen.registry import available_backends
from .ir import SpecError
from .search.proposers import available_proposers
from .search.refiner import SAMPLERS

DEBUG_ENV = "CUDAL2_DEBUG"
INTERRUPTED = "interrupted; run the same command to resume"
console = Console()
err_console = Console(stderr=True, soft_wrap=True, highlight=False)  # soft_wrap: an error stays one line


def _error_line(message: str) -> None:
    err_console.print(f"[red]error:[/red] {escape(' '.join(str(message).split()))}")


def _usage_error(e: click_exceptions.ClickException) -> None:
    """click's own errors (an unknown option, a value out of range or not among the choices) as
    one error line that points at --help, instead of its usage block or typer's box."""
    if type(e).__name__ == "NoArgsIsHelpError":  # plain `cudal2`: the help is the answer
        e.show()
        return
    message = e.format_message().replace("Value error, ", "").rstrip(". ")  # typer words some checks in pydantic's
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    ctx = getattr(e, "ctx", None)
    if isinstance(e, click_exceptions.UsageError) and ctx is not None:
        message += f"; see '{ctx.command_path} --help'"
    _error_line(message)


# Signals that already say what to do (exit with a code, or a usage error): passed through untouched.
_ABORT = tuple({typer.Abort, getattr(click_exceptions, "Abort", typer.Abort)})
_CONTROL_FLOW = (typer.Exit, getattr(click_exceptions, "Exit", typer.Exit), *_ABORT, click_exceptions.ClickException)


class CudalGroup(TyperGroup):
    """The app's click group: every command runs inside invoke(), every parse error passes
    through main(), so the error discipline holds for the console script and for CliRunner alike."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              **extra)
            code = rv if isinstance(rv, int) else 0  # the code of an Exit, in click's non-standalone mode
        except click_exceptions.ClickException as e:
            _usage_error(e)
            code = e.exit_code
        except _ABORT:  # end of input at a prompt
            code = 1
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _CONTROL_FLOW:
            raise
        except KeyboardInterrupt:
            # The search loop has already handed the unmeasured trials of the batch back to the queue.
            if ctx.params.get("debug"):
                traceback.print_exc(file=sys.stderr)  # where it was: a hang is seen this way
            err_console.print(INTERRUPTED)
            raise typer.Exit(130) from None
        except SpecError as e:  # the IR refusing a problem or spec (a size check, say), wherever it is checked
            _error_line(_one_line(e))
            raise typer.Exit(2) from None
        except Exception as e:  # noqa: BLE001 - anything else is a bug in cudal2
            if ctx.params.get("debug"):
                traceback.print_exc(file=sys.stderr)
            else:
                from .search.store import display_url

                reason = display_url((str(e).strip().splitlines() or [""])[0][:300])
                _error_line(f"unexpected {type(e).__name__}{': ' + reason if reason else ''}. This is a bug in "
                            f"cudal2: for the traceback, run it again as '{ctx.command_path} --debug "
                            f"{ctx.invoked_subcommand or ''} ...' (or with {DEBUG_ENV}=1), and report it")
            raise typer.Exit(1) from None


app = typer.Typer(cls=CudalGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Search GEMM kernels faster than cuBLAS, shape by shape.")


@app.callback()
def _global_options(debug: Annotated[bool, typer.Option(
        "--debug", envvar=DEBUG_ENV, help="show the traceback of an unexpected error")] = False) -> None:
    """Search GEMM kernels faster than cuBLAS, shape by shape."""


def _choices(name: str, values) -> type[Enum]:
    """A str Enum of an option's allowed values: click checks them and --help lists them."""
    return Enum(name, {v: v for v in values}, type=str)


ModeName = _choices("ModeName", MODES)
SamplerName = _choices("SamplerName", SAMPLERS)
ProposerName = _choices("ProposerName", (*available_proposers(), "none"))
RunnerName = _choices("RunnerName", ("gpu", "recorded"))
BackendName = _choices("BackendName", available_backends())
PROPOSER_NAMES = ", ".join(ProposerName.__members__)


def _value(choice) -> str:
    return getattr(choice, "value", choice)  # a default reaches the command as the plain string


def _values(choices) -> tuple[str, ...]:
    return tuple(_value(c) for c in choices)


def _budget(value: str) -> str:
    from .search.loop import Budget

    try:
        parsed = Budget.parse(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if parsed.seconds is not None and parsed.seconds <= 0:
        raise typer.BadParameter(f"budget={value!r}: give more than 0 s of GPU time, or a number of evaluations")
    return value


Backends = Annotated[list[BackendName], typer.Option("--backend", "-b", help="codegen backend(s) to search (repeat)")]
Modes = Annotated[list[ModeName], typer.Option("--mode", "-m", help="timing mode(s) (repeat)")]
StoreOpt = Annotated[Optional[str], typer.Option("--store", help="SQLAlchemy URL or SQLite file "
                                                 "(default: $CUDAL2_STORE or the user cache store)")]
RunnerOpt = Annotated[RunnerName, typer.Option("--runner", help="gpu: the evaluator; recorded: synthetic replayed "
                                               "numbers for trying the tools without a GPU (not measurements)")]
BudgetOpt = Annotated[str, typer.Option(help="GPU measurements (64) or GPU time (120s, 5m)", callback=_budget)]
BatchOpt = Annotated[int, typer.Option(min=1, help="specs per evaluator call")]


def _fail(message: str, code: int = 2) -> None:
    _error_line(message)
    raise typer.Exit(code)


def _one_line(e: Exception) -> str:
    """An exception's message on one line; a SpecError's violations (each names the field, the limit
    and the fix) joined by ' | '."""
    if isinstance(e, SpecError):
        return f"invalid {e.what}: " + " | ".join(str(v) for v in e.violations)
    return " ".join(str(e).split())


def _problem(shape: str, dtype: str, layout: str):
    from .ir import GemmProblem

    try:
        return GemmProblem.parse(shape, dtype=dtype, layout=layout)
    except ValueError as e:  # SpecError, or a size check that refuses the problem
        _fail(_one_line(e))


def _runner(kind: str, **config):
    kind = _value(kind)
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
        return default_runner(**config)
    except RuntimeError as e:
        _fail(str(e))


def _store(url: str | None):
    """The store, checked: one error line if it is a directory, not a database, or lacks its driver."""
    from .search.store import ENV_STORE, Store, StoreError

    try:
        return Store(url).check()
    except StoreError as e:
        where = "" if url else f" (named by ${ENV_STORE})" if os.environ.get(ENV_STORE) else " (the default store)"
        _fail(f"{e}{where}")


def _shown_url(store) -> str:
    from .search.store import display_url

    return display_url(store.url)  # a password in the URL is not printed


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


# ---- search --------------------------------------------------------------------------------------
REFERENCE = "torch"
ConfirmOpt = Annotated[int, typer.Option(min=0, help="time the 3 leaders this many more times and name the "
                                              "winner by the median (0: report the best search trial alone)")]
ConfirmModeOpt = Annotated[Optional[ModeName], typer.Option(
    "--confirm-mode", help="rank the leaders in this timing mode (sustained: at the clock each kernel's own "
                           "power draw sets; default: the search's own mode)")]


def _confirm(rounds: int, mode: str | None = None):
    from .search.confirm import Confirm

    mode = _value(mode)
    try:
        return Confirm(rounds=rounds, mode=mode)
    except ValueError as e:
        _fail(f"--confirm {rounds} --confirm-mode {mode}: {e}")


LlmFatalOpt = Annotated[bool, typer.Option(
    "--llm-fatal", help="an LLM endpoint failure ends the run (one error line, exit 1) instead of falling back "
                        "to the rules proposals, then Optuna: for benchmarking the LLM itself")]


def _warning(line: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {escape(line)}")


def _proposer(name: str, backends, arch: str, *, llm_fatal: bool = False, fallback: str | None = "default"):
    """The proposer of a run (None for 'none'). An LLM endpoint that fails after its retries is
    one warning line, then `fallback` (default: rules proposals, then Optuna; None: Optuna alone)."""
    from .search.proposers import get_proposer

    if name == "none":
        return None
    try:
        return get_proposer(name, backends=tuple(backends), arch=arch, fatal=llm_fatal, fallback=fallback,
                            warn=_warning)
    except Exception as e:  # noqa: BLE001 - missing package, no model, a bad CUDAL2_LLM_* value
        _fail(f"proposer {name!r}: {_one_line(e)}")


@contextlib.contextmanager
def _llm_fatal(prop):
    """With --llm-fatal the LLM proposer raises on an endpoint failure: one error line, exit 1."""
    from .search.proposers import ProposerUnavailable
    from .search.proposers.fallback import failure_line

    try:
        yield
    except ProposerUnavailable as e:
        _fail(failure_line(getattr(prop, "name", "llm"), e, "stopping, as --llm-fatal asks (without it: rules "
                           "proposals, then Optuna)"), code=1)


@app.command()
def search(shape: Annotated[str, typer.Argument(help="M x N x K, e.g. 4096x4096x4096")],
           budget: BudgetOpt = "64",
           proposer: Annotated[ProposerName, typer.Option(help="none: Optuna only")] = "rules",
           backend: Backends = ["triton"],  # noqa: B006 - typer reads the default
           dtype: str = "float16", layout: str = "NN", store: StoreOpt = None,
           dry_run: Annotated[bool, typer.Option("--dry-run", help="propose, validate, render and compile; "
                                                 "no GPU timing")] = False,
           mode: Modes = ["offline"],  # noqa: B006
           sampler: Annotated[SamplerName, typer.Option(help="Optuna's sampler after the proposals")] = "tpe",
           seed: Optional[int] = None,
           batch: BatchOpt = 4,
           n: Annotated[int, typer.Option(min=1, help="proposals to show in a dry run")] = 8,
           arch: Annotated[Optional[str], typer.Option(help="target arch (default: the GPU's, or sm_90a)")] = None,
           confirm: ConfirmOpt = 3, confirm_mode: ConfirmModeOpt = None,
           runner: RunnerOpt = "gpu", llm_fatal: LlmFatalOpt = False) -> None:
    """Search kernels for one shape (resumes the study of that shape found in the store)."""
    from .api import default_arch
    from .search.loop import run_search

    backend, mode, proposer, sampler = _values(backend), _values(mode), _value(proposer), _value(sampler)
    problem = _problem(shape, dtype, layout)
    arch = arch or default_arch()
    if dry_run:
        _dry_run(problem, backend, arch, proposer, n)
        return
    s = _store(store)
    prop = _proposer(proposer, backend, arch, llm_fatal=llm_fatal)
    run = _runner(runner)
    try:
        with _llm_fatal(prop):
            res = run_search(problem, backends=tuple(backend), arch=arch, proposer=prop, runner=run,
                             store=s, budget=budget, modes=tuple(mode), sampler=sampler, seed=seed,
                             batch_size=batch, confirm=_confirm(confirm, confirm_mode))
    finally:
        if hasattr(run, "close"):
            run.close()
    _print_result(res, _shown_url(s))


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
    if res.proposals:
        by_source = sorted(res.proposals.items(), key=lambda kv: -kv[1])
        console.print("specs measured, by source: " + ", ".join(f"{n} {src}" for src, n in by_source),
                      markup=False, soft_wrap=True)
    console.print(f"spec: {res.best.spec.to_json()}")
    console.print(f"study: {res.study.study_name} (view: optuna-dashboard {url})")


def _dry_run(problem, backends, arch: str, proposer: str, n: int) -> None:
    from .api import gpu_available, resolve_proposer

    if not gpu_available():
        # Kernels are compiled for the interpreter (Triton) or compile-only (CuTe DSL) here.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("CUTE_DSL_ARCH", arch)
    from .search.dry_run import dry_run

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
TableModeOpt = Annotated[ModeName, typer.Option(
    "--mode", help="the timing mode kernels are ranked in: offline, or sustained for the kernels a search "
                   "confirmed with --confirm-mode sustained (at the clock their own power draw sets)")]


def _table(store, mode: str):
    from .search.table import TunedTable

    return TunedTable.from_store(store, mode=_value(mode))


@app.command()
def show(store: StoreOpt = None, mode: TableModeOpt = "offline") -> None:
    """Table of tuned shapes in the store: best kernel and its speedups."""
    s = _store(store)
    table = _table(s, mode)
    if not len(table):
        console.print(f"nothing tuned yet in {_shown_url(s)}; run `cudal2 search SHAPE`")
        return
    names = sorted({b for e in table for b in e.baselines_ms})
    t = Table(title=f"tuned shapes in {_shown_url(s)}")
    for col in ("problem", "gpu", "backend", "spec", "kernel us", *[f"vs {b}" for b in names]):
        t.add_column(col, overflow="fold")
    for e in table:
        t.add_row(e.problem.label(), e.gpu or "?", e.spec.backend, e.spec.summary(), _us(e.kernel_ms),
                  *[_x(e.speedup(b)) for b in names])
    console.print(t)
    console.print("used by cudal2.matmul only where faster than torch; studies: optuna-dashboard " + _shown_url(s))


@app.command()
def export(out: Annotated[Path, typer.Option("--out", "-o", dir_okay=False, help="JSON file to write")] = Path(
               "cudal2_table.json"),
           store: StoreOpt = None, mode: TableModeOpt = "offline") -> None:
    """Write the tuned table (best kernel per shape and GPU) to JSON; point CUDAL2_TABLE at it."""
    table = _table(_store(store), mode)
    path = table.save(out)
    console.print(f"wrote {len(table)} tuned shape(s) to {path}; use it with CUDAL2_TABLE={path}")


# ---- bench --------------------------------------------------------------------------------------
@app.command()
def bench(shape: str, backend: Annotated[BackendName, typer.Option("--backend", "-b")] = "triton",
          spec: Annotated[Optional[Path], typer.Option("--spec", exists=True, dir_okay=False,
                                                       help="JSON file: a KernelSpec or a list")] = None,
          mode: Modes = ["offline"],  # noqa: B006
          dtype: str = "float16", layout: str = "NN") -> None:
    """Evaluate given specs (or the rules proposer's first picks) against the baselines."""
    backend, mode = _value(backend), _values(mode)
    _problem(shape, dtype, layout)
    specs = _spec_file(spec) if spec is not None else None
    try:
        from .bench.report import run_bench
    except ImportError:
        _fail("the evaluator's report (cudal2.bench.report.run_bench) is not installed in this checkout")
    from .api import gpu_available

    if not gpu_available():
        _fail("no CUDA GPU found: `cudal2 bench` times kernels and needs one")
    run_bench(shape, backend=backend, specs=specs, modes=tuple(mode), dtype=dtype, layout=layout, console=console)


def _spec_file(path: Path) -> list:
    """The KernelSpecs of a JSON file (one object or a list), or one error line in SpecError's
    words: the field, the value, the limit and the fix."""
    from .ir import KernelSpec, SpecError

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
def _parse_shapes_file(path: Path) -> list[str]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"{path} cannot be read as text ({e}); give a file with one shape per line")
    shapes = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            shapes.append(line)
    if not shapes:
        _fail(f"{path} lists no shapes (one 'M N K' or 'MxNxK' per line)")
    return shapes


def _proposer_list(value: str) -> str:
    unknown = [n for n in (p.strip() for p in value.split(",")) if n and n not in ProposerName.__members__]
    if unknown or not value.strip(","):
        raise typer.BadParameter(f"{value!r}: give a comma-separated list of {PROPOSER_NAMES}")
    return value


def _budgets(value: str) -> str:
    for part in value.split(","):
        _budget(part.strip())
    return value


@app.command()
def compare(shapes: Annotated[list[str], typer.Argument(help=(
                "shapes (4096x4096x4096 512x16384x1024), or a set: serving:validation, grid, all:validation"))],
            proposers: Annotated[str, typer.Option(help=f"comma-separated proposers: {PROPOSER_NAMES}",
                                                   callback=_proposer_list)] = "rules,random",
            budget: Annotated[str, typer.Option(help="GPU measurements (64), GPU time (120s), or several: 1,16,32",
                                                callback=_budgets)] = "32",
            backend: Backends = ["triton"],  # noqa: B006
            dtype: str = "float16", layout: str = "NN",
            sample: Annotated[Optional[int], typer.Option(min=1, help=(
                "of a shape set, only N shapes drawn with a fixed seed"))] = None,
            out: Annotated[Path, typer.Option("--out", "-o", help="PNG plot to write (and .json, .md beside it)")] = Path(
                "compare.png"),
            store_dir: Annotated[Optional[Path], typer.Option(file_okay=False, help="one store per proposer here "
                                                              "(default: a fresh temporary directory)")] = None,
            seed: int = 0, batch: BatchOpt = 4, arch: Optional[str] = None, runner: RunnerOpt = "gpu",
            llm_fatal: LlmFatalOpt = False) -> None:
    """Run proposers side by side at equal budgets; plot best speedup against evaluations and GPU time,
    and write a report (.md): share of the best known speed reached, and wins shape by shape. Each
    proposer and budget gets its own store, so none profits from another's measurements. The llm arm
    never falls back to another proposer: a round whose endpoint failed leaves Optuna alone to fill
    that search, and the failures are counted in the table and the plot."""
    import shlex
    import tempfile

    from .api import default_arch
    from .dataset import draw_shapes, resolve_shapes
    from .search import compare as cmp
    from .search.confirm import Confirm
    from .search.loop import run_search
    from .search.store import Store

    names = [p.strip() for p in proposers.split(",") if p.strip()]
    budgets = [b.strip() for b in budget.split(",") if b.strip()]
    backend = _values(backend)
    problems = []
    for text in shapes:
        if text.partition(":")[0] in ("grid", "serving", "all"):
            try:
                found = resolve_shapes(text, dtype)
            except ValueError as e:
                _fail(f"compare {text}: {_one_line(e)}")
            problems += draw_shapes(found, sample) if sample else found
        else:
            problems.append(_problem(text, dtype, layout))
    arch = arch or default_arch()
    run = _runner(runner)
    root = store_dir or Path(tempfile.mkdtemp(prefix="cudal2-compare-"))
    root.mkdir(parents=True, exist_ok=True)
    env = run.environment() if hasattr(run, "environment") else None
    where = f"GPU: {getattr(env, 'gpu_name', '?')}, {_versions(env)}" if env else "runner without an environment"
    curves: dict[str, dict[str, list]] = {}
    finals: dict[str, dict[str, float | None]] = {}
    labels: dict[str, str] = {}  # arm -> its name in the table and the legend, with its endpoint failures
    arms: list = []
    for name in names:
        for b in budgets:
            arm = name if len(budgets) == 1 else f"{name} b{b}"
            # no fallback: the arm's specs are its proposer's or Optuna's, never another proposer's
            prop = _proposer(name, backend, arch, llm_fatal=llm_fatal, fallback=None)
            store = Store(root / f"{arm.replace(' ', '-')}.db")
            for problem in problems:
                console.print(f"[bold]{arm}[/bold] on {problem.label()}")
                with _llm_fatal(prop):
                    res = run_search(problem, backends=tuple(backend), arch=arch, proposer=prop, runner=run,
                                     store=store, budget=b, seed=seed, tag=f"compare-{arm}", batch_size=batch,
                                     confirm=Confirm(), progress=False)
                curves.setdefault(arm, {})[problem.label()] = res.curve
                finals.setdefault(arm, {})[problem.label()] = res.speedup.get("torch")
                arms.append(cmp.Arm(name, int(b) if b.isdigit() else b, problem.label(), res.speedup.get("torch")))
            labels[arm] = _arm_label(name, prop).replace(name, arm, 1)
            # after every arm: a run cut short keeps the arms it finished
            _plot_compare(curves, out, labels)
            (out.with_suffix(".json")).write_text(json.dumps(
                {n: {s: [p.__dict__ for p in c] for s, c in per.items()} for n, per in curves.items()}, indent=1))
            out.with_suffix(".md").write_text(cmp.markdown(arms, cmp.best_known(arms), title="Proposers at equal budget",
                                                           command="cudal2 " + shlex.join(sys.argv[1:]),
                                                           environment=where))
    if hasattr(run, "close"):
        run.close()
    _print_compare(finals, problems, labels)
    console.print(f"wrote {out}, {out.with_suffix('.json')} and {out.with_suffix('.md')}; stores in {root}")


def _versions(env) -> str:
    import datetime

    return (f"driver {env.driver}, CUDA {env.cuda}, torch {env.torch}, Triton {env.triton}, cudal2 {env.cudal2}, "
            f"{datetime.date.today().isoformat()}")


def _arm_label(name: str, prop) -> str:
    """'llm (3 failures)' for a proposer with an outside service (counted even at 0), else the name."""
    failures = getattr(prop, "failures", None)
    if failures is None:
        return name
    return f"{name} ({len(failures)} failure{'' if len(failures) == 1 else 's'})"


def _plot_compare(curves: dict[str, dict[str, list]], out: Path, labels: dict[str, str] | None = None) -> None:
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
            label = (labels or {}).get(name, name)
            ax_n.step([p.evaluation for p in pts], [p.best_speedup for p in pts], where="post", label=label)
            ax_t.step([p.gpu_s for p in pts], [p.best_speedup for p in pts], where="post", label=label)
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


def _print_compare(finals: dict[str, dict[str, float | None]], problems,
                   labels: dict[str, str] | None = None) -> None:
    from .search.aggregates import aggregate

    t = Table(title="best speedup over torch at equal budget")
    t.add_column("shape")
    for name in finals:
        t.add_column((labels or {}).get(name, name), justify="right")
    for p in problems:
        t.add_row(p.label(), *[_x(finals[n].get(p.label())) for n in finals])
    aggs = {n: aggregate(finals[n].values()) for n in finals}
    t.add_row("geomean", *[_x(a.geomean if a else None) for a in aggs.values()])
    console.print(t)


@app.command()
def tune(shapes_file: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                                     help="one shape per line: 'M N K' or 'MxNxK'")],
          budget: BudgetOpt = "32",
          proposer: Annotated[ProposerName, typer.Option(help="none: Optuna only")] = "rules",
          backend: Backends = ["triton"],  # noqa: B006
          dtype: str = "float16", layout: str = "NN", store: StoreOpt = None,
          mode: Modes = ["offline"],  # noqa: B006
          out: Annotated[Optional[Path], typer.Option("--out", "-o", help="markdown report to write")] = None,
          seed: Optional[int] = None, batch: BatchOpt = 4, arch: Optional[str] = None,
          confirm: ConfirmOpt = 3, confirm_mode: ConfirmModeOpt = None, runner: RunnerOpt = "gpu",
          llm_fatal: LlmFatalOpt = False) -> None:
    """Search every shape of a file (resumable: finished studies are not repeated) and report."""
    from .api import default_arch
    from .search.aggregates import aggregate, markdown
    from .search.loop import run_search

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

    from .api import default_arch
    from .bench.timing import TimingConfig
    from .dataset import resolve_shapes, run_sweep
    from .search import catalog

    backend, modes = _value(backend), _values(mode)
    try:
        problems = resolve_shapes(shapes, dtype)
    except (ValueError, OSError) as e:
        _fail(f"sweep {shapes}: {_one_line(e)}")
    if max_gflop is not None:
        problems = [p for p in problems if p.flops / 1e9 <= max_gflop]
    if sample is not None and sample < len(problems):
        from .dataset import draw_shapes

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
    from .dataset import export_rows, write_rows

    s = _store(store)
    try:
        n = write_rows(export_rows(s), out)
    except (RuntimeError, ValueError, OSError) as e:
        _fail(f"dataset export: {_one_line(e)}")
    console.print(f"wrote {n} rows to {out}")


from .learn.command import train  # noqa: E402 - the command's module reads this one's helpers when run

app.command()(train)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
