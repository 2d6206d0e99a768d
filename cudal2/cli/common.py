"""What every `cudal2` command shares: the app and its error handling, the option types, and the
helpers that turn options into a problem, a store, a runner or a proposer.

What the user sees when something goes wrong is decided in one place, CudalGroup, around every
command: a user error is one line `error: what was wrong, and how to fix it` on stderr and exit 2
(click's own usage errors too); an unexpected exception is a bug, one line and exit 1; Ctrl-C
exits 130. A traceback is shown only with --debug or CUDAL2_DEBUG=1.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

try:  # newer typer carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:
    from click import exceptions as click_exceptions

from cudal2.settings import settings
from ..bench.results import MODES
from ..codegen.registry import available_backends
from ..ir import SpecError
from cudal2.proposers import available_proposers
from cudal2.tuner.refiner import SAMPLERS
from ..codegen.registry import default_backends, get_backend
from ..disk_faults import refused_write
from ..disk_faults import the_fix
from ..ir import DeviceProfile
from ..ir import GemmProblem
from cudal2.proposers import ProposerUnavailable
from cudal2.proposers import get_proposer
from cudal2.proposers.fallback import failure_line
from cudal2.store.store import ENV_STORE, Store, StoreError, recorded_url, sqlite_path
from cudal2.store.store import display_url
from cudal2.tuner.confirm import Confirm
from cudal2.tuner.loop import Budget

DEBUG_ENV = "CUDAL2_DEBUG"
INTERRUPTED = "interrupted; run the same command to resume"
# Rich wraps at 80 columns where the output is not a terminal, which breaks a spec's JSON mid-token in a
# pipe or a file: there lines are kept whole (soft wrap) and tables get PIPED_WIDTH columns.
PIPED_WIDTH = 200


_PIPED = not os.environ.get("COLUMNS") and not getattr(sys.stdout, "isatty", lambda: False)()
console = Console(width=PIPED_WIDTH if _PIPED else None, soft_wrap=_PIPED)
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
            _environment_fault(e)  # unless it is the store's or the disk's
            if ctx.params.get("debug"):
                traceback.print_exc(file=sys.stderr)
            else:
                from ..redact import escape_controls, mask_urls

                reason = escape_controls(mask_urls((str(e).strip().splitlines() or [""])[0][:300]))
                _error_line(f"unexpected {type(e).__name__}{': ' + reason if reason else ''}. This is a bug in "
                            f"cudal2: for the traceback, run it again as '{ctx.command_path} --debug "
                            f"{ctx.invoked_subcommand or ''} ...' (or with {DEBUG_ENV}=1), and report it")
            raise typer.Exit(1) from None


def _environment_fault(e: Exception) -> None:
    """Exit 2 with one line if e is a store a command found unusable (StoreError: its disk refused a
    write, say) or another write the disk refused (a kernel cache): the user's environment."""
    if isinstance(e, StoreError):
        _fail(_one_line(e))
    words = refused_write(e)
    if words is not None:
        what = f"cannot write {e.filename}" if getattr(e, "filename", None) else "a write failed"
        _fail(f"{what}: {words}; free space, or give --store, --out or $CUDAL2_CACHE_DIR a writable place")


@contextlib.contextmanager
def _writing_output(path: Path, option: str = "--out"):
    """Writes of the file an option names: an OSError (a full or read-only disk, /dev/full) is one
    error line naming the option, the path and the fix."""
    try:
        yield
    except OSError as e:
        words = refused_write(e) or (e.strerror or str(e)).lower()
        _fail(f"{option} {path}: {words}; {the_fix(words, option)}")


app = typer.Typer(cls=CudalGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Search GEMM kernels faster than cuBLAS, shape by shape.")


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            console.print(f"cudal2 {version('cudal2')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            console.print("cudal2 (not installed: run from a checkout)")
        raise typer.Exit()


@app.callback()
def _global_options(debug: Annotated[bool, typer.Option(
        "--debug", envvar=DEBUG_ENV, help="show the traceback of an unexpected error")] = False,
        version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                              help="print cudal2's version and exit")] = False) -> None:
    """Search GEMM kernels faster than cuBLAS, shape by shape."""
    console.quiet = False  # (a --json command quiets it for itself; in one process, the next speaks again)


def _choices(name: str, values) -> type[Enum]:
    """A str Enum of an option's allowed values: click checks them and --help lists them."""
    return Enum(name, {v: v for v in values}, type=str)


ModeName = _choices("ModeName", MODES)
SamplerName = _choices("SamplerName", SAMPLERS)
ProposerName = _choices("ProposerName", ("auto", *available_proposers(), "none"))
RunnerName = _choices("RunnerName", ("gpu", "recorded"))
BackendName = _choices("BackendName", available_backends())
PROPOSER_NAMES = ", ".join(ProposerName.__members__)


def _value(choice) -> str:
    return getattr(choice, "value", choice)  # a default reaches the command as the plain string


def _values(choices) -> tuple[str, ...]:
    return tuple(_value(c) for c in choices)


def _budget(value: str) -> str:
    try:
        parsed = Budget.parse(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if parsed.seconds is not None and parsed.seconds <= 0:
        raise typer.BadParameter(f"budget={value!r}: give more than 0 s of GPU time, or a number of evaluations")
    return value


Backends = Annotated[list[BackendName], typer.Option("--backend", "-b", help=(
    "codegen backend(s) to search (repeat; default: every backend that declares the arch and can compile here)"))]


def _backends(chosen, arch: str) -> list[str]:
    """The --backend values, or every backend that declares arch and can compile here."""
    picked = list(_values(chosen))
    for name in picked:  # a search has one arch: a backend that declares no code for it proposes nothing
        archs = get_backend(name).capabilities.allowed("arch", arch)
        if archs is not None and arch not in archs:
            _warning(f"backend {name} declares no {arch} code ({', '.join(sorted(archs))} only): this run leaves "
                     f"it out; --arch {sorted(archs)[0]} searches it")
    return picked or list(default_backends(arch))
Modes = Annotated[list[ModeName], typer.Option("--mode", "-m", help="timing mode(s) (repeat)")]
StoreOpt = Annotated[Optional[str], typer.Option("--store", help="SQLAlchemy URL or SQLite file "
                                                 "(default: $CUDAL2_STORE or the user cache store)")]
RunnerOpt = Annotated[RunnerName, typer.Option("--runner", help="gpu: the evaluator; recorded: synthetic replayed "
                                               "numbers for trying the tools without a GPU (not measurements)")]
BudgetOpt = Annotated[str, typer.Option(help="GPU measurements (64) or GPU time (120s, 5m)", callback=_budget)]
BatchOpt = Annotated[int, typer.Option(min=1, help="specs per evaluator call")]
DtypeOpt = Annotated[str, typer.Option(help="dtype of A and B: float16 or bfloat16")]
LayoutOpt = Annotated[str, typer.Option(help="storage of A then B: N row-major, T column-major (NN, NT, TN, TT)")]
ArchOpt = Annotated[Optional[str], typer.Option(help="target arch (default: the GPU's, or sm_90a)")]
SeedOpt = Annotated[Optional[int], typer.Option(help="the sampler's seed (default: none, a fresh draw)")]
OneBackend = Annotated[BackendName, typer.Option("--backend", "-b", help="the codegen backend of the specs")]


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
    try:
        return GemmProblem.parse(shape, dtype=dtype, layout=layout)
    except ValueError as e:  # SpecError, or a size check that refuses the problem
        _fail(_one_line(e))


def _runner(kind: str, *, has_dry_run: bool = False, store=None, **config):
    """The runner a command measures with (config: EvalConfig fields). has_dry_run: the command has
    a --dry-run, which the no-GPU error then names beside --runner recorded. store: the command's
    store, named in the recorded runner's line where it is that runner's own (_store)."""
    kind = _value(kind)
    if kind == "recorded":
        from cudal2.store.store import recorded_url
        from cudal2.tuner.recorded import RecordedRunner

        own = (f"; stored in {_shown_url(store)}, its own store (--store names another)"
               if store is not None and store.url == recorded_url() else "")
        console.print(f"[yellow]runner 'recorded': synthetic numbers from a model, not GPU measurements{escape(own)}"
                      "[/yellow]", soft_wrap=True)
        return RecordedRunner()
    if kind != "gpu":
        _fail(f"unknown runner {kind!r}; use 'gpu' or 'recorded'")
    from ..api import default_runner, gpu_available

    if not gpu_available():
        dry_run = (", or --dry-run to propose, validate, render and compile the kernels without timing them"
                   if has_dry_run else "")
        _fail("no CUDA GPU found: nothing can be timed here; run with --runner recorded to try the command on "
              f"synthetic numbers from a model (not measurements){dry_run}")
    try:
        return default_runner(**config)
    except RuntimeError as e:
        _fail(str(e))


def _store(url: str | None, runner: str = "gpu"):
    """The store, checked: one error line if it is a directory, not a database, or lacks its driver.
    Without --store, the recorded runner writes into its own store, never the default one."""
    recorded = url is None and _value(runner) == "recorded"
    if recorded:
        url = recorded_url()
    try:
        return Store(url, warn=_warning).check()
    except StoreError as e:
        where = ("" if url and not recorded else " (the recorded runner's store)" if recorded
                 else f" (named by ${ENV_STORE})" if settings().store else " (the default store)")
        _fail(f"{e}{where}")


def _point_at_recorded_store(*command: str) -> None:
    """Where the default store gave nothing: say where the recorded runner's results went, if it has
    any, and the command (its words given) that reads them there."""
    path = sqlite_path(recorded_url())
    if path is not None and path.exists():
        line = shlex.join(["cudal2", *command, "--store", str(path)])
        console.print(f"the recorded runner's synthetic results are in their own store: {line}", markup=False,
                      soft_wrap=True)


def _shown_url(store) -> str:
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


StaticTwinsOpt = Annotated[int, typer.Option(
    "--static-twins", min=0, help="time this many leaders beside their kernel compiled for this one shape in the "
                                  "confirmation rounds; one kept only where it beats the shape-generic one by over 1% "
                                  "(0: none)")]


def _confirm(rounds: int, mode: str | None = None, static_twins: int = 1):
    mode = _value(mode)
    try:
        return Confirm(rounds=rounds, mode=mode, static_twins=static_twins)
    except ValueError as e:
        _fail(f"--confirm {rounds} --confirm-mode {mode} --static-twins {static_twins}: {e}")


LlmFatalOpt = Annotated[bool, typer.Option(
    "--llm-fatal", help="an LLM endpoint failure ends the run (one error line, exit 1) instead of falling back "
                        "to the rules proposals, then Optuna: for benchmarking the LLM itself")]


def _warning(line: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {escape(line)}")


def _proposer(name: str, backends, arch: str, *, llm_fatal: bool = False, fallback: str | None = "default"):
    """The proposer of a run (None for 'none'). An LLM endpoint that fails after its retries is
    one warning line, then `fallback` (default: rules proposals, then Optuna; None: Optuna alone)."""
    if name == "none":
        return None
    try:
        return get_proposer(name, backends=tuple(backends), arch=arch, device=DeviceProfile.live(arch),
                            fatal=llm_fatal, fallback=fallback, warn=_warning)
    except Exception as e:  # noqa: BLE001 - missing package, no model, a bad CUDAL2_LLM_* value
        _fail(f"proposer {name!r}: {_one_line(e)}")


@contextlib.contextmanager
def _llm_fatal(prop):
    """With --llm-fatal the LLM proposer raises on an endpoint failure: one error line, exit 1."""
    try:
        yield
    except ProposerUnavailable as e:
        _fail(failure_line(getattr(prop, "name", "llm"), e, "stopping, as --llm-fatal asks (without it: rules "
                           "proposals, then Optuna)"), code=1)


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
