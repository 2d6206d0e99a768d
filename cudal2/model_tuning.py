"""Tuning a whole model: `cudal2.tune_model(model, *example_inputs)` finds the GEMMs a model runs
through its nn.Linear layers, searches each, and puts the results into the table that
cudal2.linear reads.

The shapes come from one forward pass on the example inputs, seen by hooks on every nn.Linear:
(tokens, out_features, in_features), layout NT, with the layer's bias fused. A GEMM the model runs
some other way (torch.matmul, F.linear on tensors of its own) is not seen. Searches resume from
the store, so running it again after an interruption measures only what is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from .ir import Epilogue, GemmProblem
from cudal2.tuner.confirm import Confirm
from .api import check_search_arguments, names
from .bench.results import DEFAULT_MODE
from .ir import SpecError
from cudal2.store.table import TunedTable

SERVING_CONFIRM = Confirm()  # tune_model and tune_untuned confirm their leaders in the objective's mode (layer)

_DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}


@dataclass(frozen=True)
class LinearGemm:
    problem: GemmProblem
    layers: tuple[str, ...]  # the modules that run it
    calls: int  # in the forward pass


def linear_gemms(model, *example_inputs, **example_kwargs) -> list[LinearGemm]:
    """The GEMMs of model's nn.Linear layers in one forward pass (no gradients), in first-seen order.
    Layers whose weight is not fp16 or bf16 are left out: cudal2.linear runs torch for them."""
    import torch

    seen: dict[str, dict[str, Any]] = {}

    def record(name: str):
        def hook(module, args):
            x, w = args[0], module.weight
            dtype = _DTYPES.get(str(w.dtype))
            if dtype is None or x.dim() < 1:
                return
            tokens = math.prod(x.shape[:-1]) if x.dim() > 1 else 1
            problem = GemmProblem(m=max(tokens, 1), n=module.out_features, k=module.in_features, dtype=dtype,
                                  layout="NT", epilogue=Epilogue(bias=module.bias is not None))
            entry = seen.setdefault(problem.label(), {"problem": problem, "layers": [], "calls": 0})
            entry["calls"] += 1
            if name not in entry["layers"]:
                entry["layers"].append(name)
        return hook

    handles = [m.register_forward_pre_hook(record(name)) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear)]
    try:
        with torch.no_grad():
            model(*example_inputs, **example_kwargs)
    finally:
        for h in handles:
            h.remove()
    return [LinearGemm(e["problem"], tuple(e["layers"]), e["calls"]) for e in seen.values()]


def tune_model(model, *example_inputs, budget: int | str = 16, proposer: Any = "learned",
               backends: Sequence[str] | None = None, store: Any = None, runner: Any = None,
               progress: bool = True, **search_options):
    """Search every GEMM of the model's nn.Linear layers (see linear_gemms) with `budget` each, and
    use the results from now on (cudal2.set_table). backends: as cudal2.search's (default: those of
    cudal2.search's default that the op launches, ops.op_backends). Returns the TunedTable, which holds every
    problem the store has. A shape the GPU cannot hold is skipped with a warning."""
    backends = _check_arguments(budget, backends, search_options)  # before the model runs
    gemms = linear_gemms(model, *example_inputs)
    return _tune([(g.problem, f"{len(g.layers)} layer(s)") for g in gemms], budget=budget, proposer=proposer,
                 backends=backends, store=store, runner=runner, progress=progress, **search_options)


def tune_untuned(budget: int | str = 1, proposer: Any = "learned", backends: Sequence[str] | None = None,
                 store: Any = None, runner: Any = None, progress: bool = True, **search_options):
    """Measure the shapes cudal2.matmul/linear have run without a tuned kernel (ops.untuned_problems):
    at budget 1, the learned model's pick among its shape-generic kernels, timed by the evaluator
    against torch.matmul; more budget searches further. The table then serves each shape whose kernel
    won, and torch keeps the rest. Returns the TunedTable."""
    from . import ops

    backends = _check_arguments(budget, backends, search_options)
    problems = ops.untuned_problems()
    return _tune([(p, "seen untuned") for p in problems], budget=budget, proposer=proposer, backends=backends,
                 store=store, runner=runner, progress=progress, **search_options)


def _check_arguments(budget: Any, backends: Any, search_options: dict) -> tuple[str, ...] | None:
    """The arguments passed on to cudal2.search checked as it checks them, once, before any work
    (and even where there is nothing to tune). Returns backends as a tuple of names (or None)."""
    check_search_arguments(budget, search_options.get("modes", DEFAULT_MODE), search_options.get("batch_size", 1),
                           search_options.get("n_proposals"))
    return names(backends, "backends") if backends is not None else None


def _tune(problems: list[tuple[GemmProblem, str]], *, budget, proposer, backends, store, runner, progress,
          **search_options):
    """Search each problem, then load the store's table into cudal2.matmul/linear."""
    import warnings

    from . import api, ops

    # The leaders are ranked as the model calls them (chain mode, the search's objective), and the
    # table (TunedTable.for_serving) serves a kernel only where it beat torch there.
    search_options.setdefault("confirm", SERVING_CONFIRM)
    arch = search_options.pop("arch", None) or api.default_arch()
    if not backends:  # what the op launches (ops.op_backends) of what this machine can build
        from .codegen.registry import default_backends

        usable = default_backends(arch)
        backends = [b for b in usable if b in ops.op_backends()] or usable
    backends = tuple(backends)
    proposer = api.resolve_proposer(proposer, backends, arch)  # once: a learned one loads its model
    store = api.resolve_store(store)
    own_runner = runner is None
    runner = api.default_runner() if own_runner else runner
    try:
        for problem, what in _progress(problems, progress):
            try:
                api.search(problem, backends=backends, proposer=proposer, budget=budget, store=store,
                           runner=runner, arch=arch, progress=False, **search_options)
            except SpecError as e:
                warnings.warn(f"{problem.label()} ({what}) not tuned: {e}", stacklevel=3)
    finally:
        if own_runner and hasattr(runner, "close"):
            runner.close()
    table = TunedTable.for_serving(store)
    ops.set_table(table)
    return table


def _progress(problems: list[tuple[GemmProblem, str]], enabled: bool):
    if not enabled:
        yield from problems
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task("tuning", total=len(problems))
        for problem, what in problems:
            bar.update(task, description=f"{problem.label()} ({what})")
            yield problem, what
            bar.advance(task)
