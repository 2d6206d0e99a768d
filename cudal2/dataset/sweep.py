"""The sweep: many specs measured on many shapes, into the store, resumable.

Every shape is measured in chunks of specs, one evaluator call each; a chunk's pairs are in the
store when the next chunk starts, so a kill loses at most the chunk in flight and a second run
measures only the pairs the store lacks. A shape's baselines are timed once, interleaved with its
first chunk, and stored beside its kernels. The same sweep over many GPUs is cluster_sweep.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..bench.results import DEFAULT_MODE
from ..ir import GemmProblem, KernelSpec, SpecError
from cudal2.store.store import Store
from .. import shapes as shape_sets

CHUNK = 32  # specs per evaluator call, at most


def chunked(specs: Sequence[KernelSpec], chunk: int) -> list[list[KernelSpec]]:
    """specs in evaluator calls of at most chunk, as even as they go (100 as 4 x 25, not 3 x 32 and
    a 4; 10 in fours as 4, 3, 3): a call's fixed costs (inputs, the stream check, the timing
    graphs' warm-up) are nearly those of a full one, however few specs it holds."""
    calls = -(-len(specs) // chunk)
    out, start = [], 0
    for i in range(calls):
        size = len(specs) // calls + (i < len(specs) % calls)
        out.append(list(specs[start:start + size]))
        start += size
    return out


@dataclass
class SweepSummary:
    shapes: int = 0
    measured: int = 0  # pairs measured by this run
    correct: int = 0  # of which ran correctly and were timed
    already: int = 0  # pairs the store held before this run
    skipped: list[str] = field(default_factory=list)  # "shape: why", for shapes not measured
    stopped: bool = False  # `stop` said so before a chunk: the pairs left are measured by a second run


def resolve_shapes(text: str, dtype: str = "float16", layout: str = "NN") -> list[GemmProblem]:
    """Shapes from a name or a list:
    - a set of cudal2.shapes, whole or one part of its split: grid, serving, grid:train,
      serving:validation, all (both sets), all:validation;
    - a file with one shape per line ('M N K' or 'MxNxK', '#' comments);
    - shapes separated by commas: 4096x4096x4096,1x4096x4096.
    A shape in a file or a list is of layout (default NN) unless it ends in its own: 1x4096x4096-NT. A set's
    shapes keep the set's layouts."""
    name, _, part = text.partition(":")
    if name in (*shape_sets.SETS, "all"):
        names = shape_sets.SETS if name == "all" else (name,)
        return [s.problem(dtype) for n in names for s in shape_sets.shapes(n, part or None)]
    path = Path(text)
    if path.is_file():
        lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
        items = [ln for ln in lines if ln]
        if not items:
            raise ValueError(f"{path} lists no shapes (one 'M N K' or 'MxNxK' per line)")
    elif "x" in text or "," in text:
        items = [t.strip() for t in text.split(",") if t.strip()]
    else:
        raise ValueError(f"{text!r} is not a shape set, a file or a list of shapes; give one of "
                         f"{', '.join(shape_sets.SETS)}, all (optionally :train or :validation), a file, or "
                         "MxNxK[,MxNxK...]")
    out = []
    for item in items:
        dims, _, own = item.partition("-")
        if own and own not in ("NN", "NT", "TN", "TT"):
            raise ValueError(f"{item!r}: the layout after '-' is one of NN, NT, TN, TT")
        out.append(GemmProblem.parse(dims, dtype=dtype, layout=own or layout))
    return out


def draw_shapes(problems: Sequence[GemmProblem], count: int, seed: int = 20261125) -> list[GemmProblem]:
    """count of problems drawn with seed, in the order drawn: the same list, count and seed give the
    same shapes, so a sweep killed and run again measures the same ones, and a larger count keeps a
    smaller one's shapes first. Drawn order, not the list's: a sweep cut short still spans the sets."""
    import random

    order = list(range(len(problems)))
    random.Random(seed).shuffle(order)
    return [problems[i] for i in order[:count]]


def run_sweep(problems: Sequence[GemmProblem], specs: Sequence[KernelSpec], runner, store: Store,
              modes: tuple[str, ...] = (DEFAULT_MODE,), chunk: int = CHUNK,
              on_pairs: Callable[[int, str], None] = lambda n, label: None,
              stop: Callable[[], bool] = lambda: False) -> SweepSummary:
    """Measure every spec on every problem that the store does not hold yet. on_pairs(n, label) is
    told of each n pairs done (measured or found in the store) and the shape they were on. stop() is
    asked before each chunk; when it says True the sweep returns (summary.stopped), every chunk
    measured so far in the store, so that a run under a time limit ends cleanly. Raises
    StoreError, before measuring, if the store holds timings of another GPU model. One process, one
    runner; over the GPUs of a Dask cluster: cluster_sweep.run_sweep_on_cluster."""
    summary = SweepSummary()
    environment = runner.environment()
    if environment is not None:
        store.check_gpu_model(environment.gpu_name)
    for problem in problems:
        summary.shapes += 1
        # held: a failure (it fails every mode) or a time in this sweep's mode; a pair timed only in
        # another mode is measured again, so that a dataset's label never mixes modes
        done = {r["result"].spec.key() for r in store.kernels(problem)
                if not r["result"].ok or r["result"].kernel_ms(modes[0]) is not None}
        todo = [s for s in specs if s.key() not in done]
        summary.already += len(specs) - len(todo)
        on_pairs(len(specs) - len(todo), problem.label())
        baselines = store.baselines(problem)
        # Timed before, unless none was or one that ran lacks a mode (one that is not installed never has any).
        fresh_baselines = not any(b.available for b in baselines.values()) or not all(
            m in b.timing for b in baselines.values() if b.available for m in modes)
        left = len(todo)
        for part in chunked(todo, chunk):
            if stop():
                summary.stopped = True
                return summary
            try:
                results = runner.evaluate(problem, part, modes, with_baselines=fresh_baselines)
            except SpecError as e:  # the problem does not fit the GPU: every chunk would say so
                summary.skipped.append(f"{problem.label()}: {' | '.join(str(v) for v in e.violations)}")
                on_pairs(left, problem.label())
                break
            if fresh_baselines:
                baselines = runner.baselines(problem, modes)
                store.record_baselines(problem, baselines, environment)
                fresh_baselines = False
            for result in results:
                store.record_kernel(problem, result, environment=environment, mode=modes[0], baselines=baselines)
                summary.measured += 1
                summary.correct += bool(result.ok)
            left -= len(part)
            on_pairs(len(part), problem.label())
    return summary
