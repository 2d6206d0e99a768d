"""Compiling ahead: the kernels that searches try first, compiled into the disk caches before any
search needs them.

A shape-generic kernel serves every shape of its problem class (dtype, layout, epilogue), so a
search finds compiled whatever an earlier search of any shape tried. What a search of a new shape
tries first is known before it runs: its proposer's first proposals for that shape. Without them
compiled, a warm CuTe DSL search of a new shape compiled 29-32 of its 32 kernels and waited 3.1-4.4
s of its 7-11 s for them (H100, docs/search.md). Compile time, not the GPU, set its length.

precompile() asks the search's own proposer for each shape of a set (by default the training
split's serving shapes) what it would propose first, with nothing measured, makes each proposal
shape-generic as the search does (refiner.shape_generic_kernel), and compiles each compile unit
once in the compile pool. A compile unit is what one compile serves: the spec, the problem class and
the backend's variant (Backend.compile_unit, which the evaluator also keys its compiled kernels by).
A kernel compiled for one shape alone serves no other shape and is left out.

The disk caches are the record: a second run loads what the first compiled, so a killed run
resumes. What it cannot cover is the search's later picks, which follow its measurements: above all
the sampler's trials (a quarter of a budget-32 search), which come out different on every shape.
On the H100, with the training split's serving shapes precompiled (1761 CuTe DSL kernels), warm
searches of new validation shapes up to 0.17 TFLOP took 6.1-9.3 s and compiled 8-19 of their 33 kernels
(docs/search.md, "Compiling ahead").
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import itertools
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Sequence

from ..ir import GemmProblem, KernelSpec
from .refiner import shape_generic_kernel
from ..bench.compile_pool import exit_with_parent
from ..codegen import get_backend
from cudal2.proposers import get_proposer

# First proposals asked per shape: a budget-32 search's proposer share is 24 (its first 8 and the
# 16 that follow its measurements). The learned proposer gives half of them from its model and half
# from the rules; over the validation serving shapes' replayed searches (recorded runner), 32 a
# shape covered 96% of the model's picks and 79% of the rules'.
PER_SHAPE = 32
# Proposers precompile may ask: those that answer without a service (an LLM would be asked once a
# shape, at its cost).
PROPOSERS = ("auto", "learned", "rules")


@dataclass
class Precompiled:
    """What a precompile run did: compile units ready in the disk caches (compiled now or loaded),
    those the backend refused or failed to compile (spec summary, reason), and the time it took."""

    shapes: int = 0
    units: int = 0
    ready: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    compile_s: float = 0.0  # the pool's own seconds, summed over units (loads from disk included)
    wall_s: float = 0.0
    planned_only: bool = False  # a dry run: planned and counted, nothing compiled

    def line(self) -> str:
        if self.planned_only:
            return f"{self.units} kernels planned for {self.shapes} shapes in {self.wall_s:.0f} s (none compiled)"
        failed = f", {len(self.failed)} refused or failed" if self.failed else ""
        return (f"{self.ready} of {self.units} kernels ready for {self.shapes} shapes{failed} "
                f"in {self.wall_s:.0f} s ({self.compile_s:.0f} s of compile processes)")


def check_proposer(name: str) -> None:
    """Raise ValueError unless precompile may ask the proposer `name` (PROPOSERS)."""
    if name not in PROPOSERS:
        raise ValueError(f"precompile asks {', '.join(PROPOSERS)} for proposals, not {name!r} "
                         "(an LLM would be asked once a shape)")


def first_units(proposer: Any, backends: Sequence[str], per_shape: int,
                problem: GemmProblem) -> list[tuple[tuple[str, str, str], KernelSpec]]:
    """The compile units (key, spec) of problem's first per_shape proposals, nothing measured, in
    the proposer's order: each made shape-generic as the search makes it; kernels of another backend
    and kernels compiled for this one shape left out."""
    out = []
    for proposal in proposer.propose(problem, (), per_shape):
        if proposal.spec.backend not in backends:
            continue
        spec = shape_generic_kernel(problem, proposal.spec)
        key = get_backend(spec.backend).compile_unit(problem, spec)
        if key is not None:
            out.append((key, spec))
    return out


class Planner:
    """Each problem's compile units that no problem before it asked for. Its proposer may be None
    where the first units come from elsewhere (the planning processes, Recipe)."""

    def __init__(self, proposer: Any, backends: Sequence[str], per_shape: int = PER_SHAPE):
        self.proposer, self.backends, self.per_shape = proposer, tuple(backends), per_shape
        self.seen: set[tuple[str, str, str]] = set()

    def first(self, problem: GemmProblem) -> list[tuple[tuple[str, str, str], KernelSpec]]:
        return first_units(self.proposer, self.backends, self.per_shape, problem)

    def units(self, problem: GemmProblem, first: list | None = None) -> list[KernelSpec]:
        """problem's new units (from `first`, else asked of the proposer here), in the proposer's order."""
        out = []
        for key, spec in self.first(problem) if first is None else first:
            if key not in self.seen:
                self.seen.add(key)
                out.append(spec)
        return out


@dataclass(frozen=True)
class Recipe:
    """A proposer by name, as a planning process builds it: planning asks the proposer to rank its
    catalog and enumerate the rules' candidates for every shape (0.4-0.9 s a shape on a CPU core,
    most of it the backend's support checks), which in one process took longer than 14 compile
    processes took to compile what it planned."""

    proposer: str
    backends: tuple[str, ...]
    arch: str
    device: Any = None  # ir.DeviceProfile: the GPU the kernels will run on, as the search sees it
    per_shape: int = PER_SHAPE

    def planner(self) -> Planner:
        return _planner(self)


@lru_cache(maxsize=4)
def _planner(recipe: Recipe) -> Planner:
    proposer = get_proposer(recipe.proposer, backends=recipe.backends, arch=recipe.arch, device=recipe.device)
    return Planner(proposer, recipe.backends, recipe.per_shape)


def plan_chunk(recipe: Recipe, problems: Sequence[GemmProblem]) -> list[list]:
    """In a planning process: each problem's first units."""
    planner = recipe.planner()
    return [planner.first(p) for p in problems]


# Problems a planning process takes at once: small enough that the compiles start within seconds
PLAN_CHUNK = 4


def planning_processes() -> int:
    """Processes that plan beside the compile pool: a quarter of the cores, up to 4; none on a
    machine of fewer than 8 cores (the compiles need them)."""
    cores = os.cpu_count() or 1
    return min(4, cores // 4) if cores >= 8 else 0


def precompile(problems: Sequence[GemmProblem], planner: Planner, pool: Any,
               on_progress: Callable[[int, int, int], None] | None = None, recipe: Recipe | None = None,
               plan_processes: int = 0) -> Precompiled:
    """Plan and compile: each problem's new units go to the pool (a bench.compile_pool.CompilePool;
    None plans and counts them, compiling nothing) as soon as they are planned, so that planning the
    next shapes overlaps the compiles. With a recipe and plan_processes > 0 the first units are
    asked in that many processes of their own, in chunks, and taken in the problems' order (a unit
    is the first asker's either way). Results are taken in order through the pool's own timeout and
    crash handling (one bad spec costs its own unit alone). on_progress(shapes planned, units done,
    units planned) after each step; without a pool a unit counts as done once planned."""
    started = time.perf_counter()
    out = Precompiled(shapes=len(problems), planned_only=pool is None)
    groups: list[tuple[GemmProblem, list[KernelSpec], list]] = []  # per problem: its units, their futures
    at = [0, 0]  # the group being taken, and the unit in it
    planned = 0

    def report() -> None:
        if on_progress:  # a dry run's work is the planning: a unit is done once planned
            done = out.units if pool is None else out.ready + len(out.failed)
            on_progress(planned, done, out.units)

    def take(block: bool) -> None:
        while at[0] < len(groups):
            problem, specs, futures = groups[at[0]]
            while at[1] < len(specs):
                if not block and not futures[at[1]].done():
                    return
                prepared = pool.result(futures, at[1], problem, specs)
                out.compile_s += prepared.seconds
                if prepared.status == "ok":
                    out.ready += 1
                else:
                    out.failed.append((specs[at[1]].summary(), " ".join(prepared.reason.split())[:300]))
                at[1] += 1
                report()
            at[0], at[1] = at[0] + 1, 0

    with _firsts_in_order(problems, planner, recipe, plan_processes) as firsts:
        for problem, first in zip(problems, firsts):
            specs = planner.units(problem, first)
            planned += 1
            if specs and pool is not None:
                groups.append((problem, specs, pool.submit_all(problem, specs)))
            out.units += len(specs)
            report()
            take(block=False)
    take(block=True)
    out.wall_s = time.perf_counter() - started
    return out


@contextlib.contextmanager
def _firsts_in_order(problems: Sequence[GemmProblem], planner: Planner, recipe: Recipe | None, processes: int):
    """An iterator of each problem's first units, in order: from planning processes, or None for
    each (the planner asks its own proposer)."""
    if recipe is None or processes <= 0:
        yield iter([None] * len(problems))
        return
    chunks = [list(problems[i:i + PLAN_CHUNK]) for i in range(0, len(problems), PLAN_CHUNK)]
    with cf.ProcessPoolExecutor(processes, mp_context=mp.get_context("spawn"), initializer=exit_with_parent,
                                initargs=(os.getpid(),)) as executor:
        try:
            yield itertools.chain.from_iterable(executor.map(plan_chunk, [recipe] * len(chunks), chunks))
        finally:
            executor.shutdown(wait=False, cancel_futures=True)


class Bar:
    """A rich progress bar on stderr: kernels ready of those planned so far, and the shapes planned.
    Disabled, or without rich, it shows nothing."""

    def __init__(self, shapes: int, enabled: bool = True, what: str = "compiling ahead"):
        self.shapes, self.enabled, self.what, self.progress = shapes, enabled, what, None

    def __enter__(self) -> "Bar":
        if not self.enabled:
            return self
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return self
        self.progress = Progress(TextColumn(self.what), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("kernels, {task.fields[planned]} of {task.fields[shapes]} shapes planned"),
                                 TimeElapsedColumn(), console=Console(stderr=True))
        self.progress.__enter__()
        self.task = self.progress.add_task("precompile", total=None, planned=0, shapes=self.shapes)
        return self

    def update(self, planned: int, done: int, units: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=done, total=units, planned=planned)

    def __exit__(self, *exc) -> bool:
        if self.progress is not None:
            self.progress.__exit__(*exc)
        return False
