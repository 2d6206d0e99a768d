"""`cudal2 compare`: proposers side by side at equal budgets, with curves and a report."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..bench.results import is_synthetic
from .common import (_backends, ArchOpt, Backends, DtypeOpt, LayoutOpt, BatchOpt, LlmFatalOpt, PROPOSER_NAMES, ProposerName, RunnerOpt, _budget, _fail,
                     _llm_fatal, _one_line, _problem, _proposer, _runner, _x, app, console)
from ..api import default_arch
from ..dataset import draw_shapes, resolve_shapes
from cudal2.store.store import Store
from cudal2.tuner import compare as cmp
from cudal2.tuner.aggregates import aggregate
from cudal2.tuner.confirm import Confirm

SYNTHETIC = "synthetic numbers of the recorded runner's model, not GPU measurements"


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
                "shapes (4096x4096x4096 512x16384x1024-NT: a layout after '-' overrides --layout), a comma list or a "
                "file of them, or a set: serving:validation, grid, all:validation"))],
            proposers: Annotated[str, typer.Option(help=f"comma-separated proposers: {PROPOSER_NAMES}",
                                                   callback=_proposer_list)] = "rules,random",
            budget: Annotated[str, typer.Option(help="GPU measurements (64), GPU time (120s), or several: 1,16,32",
                                                callback=_budgets)] = "32",
            backend: Backends = [],  # noqa: B006
            dtype: DtypeOpt = "float16", layout: LayoutOpt = "NN",
            sample: Annotated[Optional[int], typer.Option(min=1, help=(
                "of a shape set, only N shapes drawn with a fixed seed"))] = None,
            out: Annotated[Path, typer.Option("--out", "-o", help="PNG plot to write (and .json, .md beside it)")] = Path(
                "compare.png"),
            store_dir: Annotated[Optional[Path], typer.Option(file_okay=False, help="one store per proposer here "
                                                              "(default: a fresh temporary directory)")] = None,
            seed: Annotated[int, typer.Option(help="the samplers' seed, one for every arm")] = 0,
            batch: BatchOpt = 4, arch: ArchOpt = None, runner: RunnerOpt = "gpu",
            llm_fatal: LlmFatalOpt = False,
            best_known: Annotated[Optional[list[Path]], typer.Option("--best-known", exists=True, dir_okay=False, help=(
                "a sweep's export (cudal2 dataset export; repeatable): its best speed on a shape counts as known "
                "too"))] = None) -> None:
    """Run proposers side by side at equal budgets; plot best speedup against evaluations and GPU time,
    and write a report (.md): share of the best known speed reached, and wins shape by shape. Each
    proposer and budget gets its own store, so none profits from another's measurements. The llm arm
    never falls back to another proposer: a round whose endpoint failed leaves Optuna alone to fill
    that search, and the failures are counted in the table and the plot."""
    import shlex
    import tempfile

    from cudal2.tuner.loop import run_search

    names = [p.strip() for p in proposers.split(",") if p.strip()]
    budgets = [b.strip() for b in budget.split(",") if b.strip()]
    problems = _compare_problems(shapes, dtype, layout, sample)
    outside = _swept_best(best_known or [])
    arch = arch or default_arch()
    backend = _backends(backend, arch)
    run = _runner(runner)
    root = store_dir or Path(tempfile.mkdtemp(prefix="cudal2-compare-"))
    root.mkdir(parents=True, exist_ok=True)
    env = run.environment() if hasattr(run, "environment") else None
    where = f"GPU: {getattr(env, 'gpu_name', '?')}, {_versions(env)}" if env else "runner without an environment"
    synthetic = SYNTHETIC if env is not None and is_synthetic(env.gpu_name) else ""
    where = f"{synthetic}. {where}" if synthetic else where
    curves: dict[str, dict[str, list]] = {}
    finals: dict[str, dict[str, float | None]] = {}
    labels: dict[str, str] = {}  # arm -> its name in the table and the legend, with its endpoint failures
    arms: list = []
    modes: set[str] = set()  # the timing modes the arms' speedups are in (docs/evaluation.md)
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
                modes.add(res.mode)
                arms.append(cmp.Arm(name, int(b) if b.isdigit() else b, problem.label(), res.speedup.get("torch"),
                                    res.best.spec.backend if res.best is not None else ""))
            labels[arm] = _arm_label(name, prop).replace(name, arm, 1)
            # after every arm: a run cut short keeps the arms it finished
            _plot_compare(curves, out, labels, note=synthetic)
            (out.with_suffix(".json")).write_text(json.dumps(
                {n: {s: [p.__dict__ for p in c] for s, c in per.items()} for n, per in curves.items()}, indent=1))
            out.with_suffix(".md").write_text(cmp.markdown(arms, cmp.best_known(arms, outside), title="Proposers at equal budget",
                                                           command="cudal2 " + shlex.join(sys.argv[1:]),
                                                           environment=f"{where}; speedups in {' and '.join(sorted(modes))} mode"))
    if hasattr(run, "close"):
        run.close()
    _print_compare(finals, problems, labels, note=synthetic)
    console.print(f"wrote {out}, {out.with_suffix('.json')} and {out.with_suffix('.md')}; stores in {root}")


def _compare_problems(shapes: list[str], dtype: str, layout: str, sample: int | None) -> list:
    """Each argument a shape (with --layout unless it names its own), a comma list or file of shapes, or a
    shape set (of which --sample draws N)."""
    problems = []
    for text in shapes:
        is_set = text.partition(":")[0] in ("grid", "serving", "all")
        if is_set or "," in text or "-" in text or Path(text).is_file():  # a set, a list or a file of shapes
            try:
                found = resolve_shapes(text, dtype, layout)
            except ValueError as e:
                _fail(f"compare {text}: {_one_line(e)}")
            problems += draw_shapes(found, sample) if sample and is_set else found
        else:
            problems.append(_problem(text, dtype, layout))
    return problems


def _swept_best(paths: list[Path]) -> dict[str, float]:
    """problem label -> the best speedup over torch.matmul that these sweep exports measured."""
    from ..learn.samples import from_csv

    best: dict[str, float] = {}
    for path in paths:
        try:
            samples = list(from_csv(path))
        except (ValueError, OSError) as e:
            _fail(f"--best-known {path}: {_one_line(e)}")
        if not samples:
            _fail(f"--best-known {path}: no measured pair with a torch time; give an export of 'cudal2 dataset export'")
        for sample in samples:
            best[sample.group] = max(best.get(sample.group, 0.0), math.exp(sample.log_speedup))
    return best


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


def _plot_compare(curves: dict[str, dict[str, list]], out: Path, labels: dict[str, str] | None = None,
                  note: str = "") -> None:
    """compare_figure, written to out."""
    import matplotlib.pyplot as plt

    fig = compare_figure(curves, labels, note)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def compare_figure(curves: dict[str, dict[str, list]], labels: dict[str, str] | None = None, note: str = ""):
    """Best speedup against evaluations and GPU time, a row per shape; note (the synthetic
    runner's label) heads the figure. Each measurement is a marker: a budget-1 arm's curve is one
    point, which a line alone does not draw."""
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
            style = dict(where="post", label=label, marker="o", markersize=4)
            ax_n.step([p.evaluation for p in pts], [p.best_speedup for p in pts], **style)
            ax_t.step([p.gpu_s for p in pts], [p.best_speedup for p in pts], **style)
        for ax, xlabel in ((ax_n, "evaluations"), (ax_t, "GPU time (s)")):
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("best speedup over torch")
            ax.set_title(shape, fontsize=9)
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(6))
        ax_n.legend(fontsize=8)
    if note:
        fig.suptitle(note, color="firebrick", fontsize=10)
    fig.tight_layout()
    return fig


def _print_compare(finals: dict[str, dict[str, float | None]], problems,
                   labels: dict[str, str] | None = None, note: str = "") -> None:
    t = Table(title="best speedup over torch at equal budget" + (f" ({note})" if note else ""))
    t.add_column("shape")
    for name in finals:
        t.add_column((labels or {}).get(name, name), justify="right")
    for p in problems:
        t.add_row(p.label(), *[_x(finals[n].get(p.label())) for n in finals])
    aggs = {n: aggregate(finals[n].values()) for n in finals}
    t.add_row("geomean", *[_x(a.geomean if a else None) for a in aggs.values()])
    console.print(t)
