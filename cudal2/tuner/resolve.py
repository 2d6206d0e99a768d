"""Resolving a search's arguments, shared by cudal2.search, the model tuner, the CLI and the cluster's
workers: the target arch, the runner, the proposer, the store, and the checks of budget, modes and
counts (one line naming the value and the fix)."""

from __future__ import annotations

import ast
import sys
from typing import Any, Sequence

from cudal2.bench.results import MODES
from cudal2.bench.timing import TimingConfig
from cudal2.ir import DeviceProfile, GemmProblem, arch_from_capability
from cudal2.ir.footprint import check_fits, largest_memory
from cudal2.ir.hardware import DEFAULT_ARCH
from cudal2.proposers import get_proposer
from cudal2.store.store import Store, recorded_url
from cudal2.tuner.loop import Budget
from cudal2.tuner.recorded import RecordedRunner



def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def default_arch() -> str:
    """The arch of GPU 0, or sm_90a (the H100) where there is none (dry runs, CPU tests)."""
    if gpu_available():
        import torch

        return arch_from_capability(*torch.cuda.get_device_capability(0))
    return DEFAULT_ARCH


def default_runner(**config):
    """The GPU evaluator of cudal2.bench (config: EvalConfig fields). By default a search's trials are
    timed with TimingConfig.sweep() beside torch.matmul alone, the reference of their objective,
    and its confirmation rounds with TimingConfig.confirmation() beside every baseline (a sweep
    passes trial_baselines=None: it times them all once per shape). Raises a clear error without
    a GPU, and where a script calls it at its top level without a main guard (unguarded_script)."""
    script = unguarded_script()
    if script:
        raise RuntimeError(script)
    if not gpu_available():
        raise RuntimeError("no CUDA GPU is visible, so nothing can be timed. On this machine pass "
                           "runner=\"recorded\" (synthetic numbers from a model, not measurements) or any object "
                           "with the Runner protocol of cudal2.bench.results, or use a dry run "
                           "(`cudal2 search SHAPE --dry-run`: propose, validate, render and compile only).")
    try:
        from cudal2.bench.evaluator import Evaluator  # (torch and the worker: loaded only to measure)
    except ImportError as e:
        raise RuntimeError("the GPU evaluator (cudal2.bench.Evaluator) is not installed in this checkout; "
                           "pass runner=... to cudal2.search") from e
    return Evaluator(**{"timing": TimingConfig.confirmation(), "trial_timing": TimingConfig.sweep(),
                        "trial_baselines": ("torch",), **config})


def target_memory(arch: str, runner: Any = None) -> tuple[int, str]:
    """(bytes, where the figure comes from) that one problem's tensors may take on the target:
    the free memory the runner's GPU reports (the evaluator asks its worker), else GPU 0's free
    memory, else, where no GPU is visible (a dry run, the recorded runner), the memory of the
    largest part of the target arch: a problem is refused there only if no part of it could hold it."""
    report = getattr(runner, "device_memory", None)
    mem = report() if callable(report) else None
    if mem is not None:
        return mem.free, f"free on {mem.name}"
    if gpu_available():
        import torch

        free, _total = torch.cuda.mem_get_info(0)
        return free, f"free on {torch.cuda.get_device_name(0)}"
    memory, part = largest_memory(arch)
    return memory, f"of the largest {arch} part ({part}; no GPU is visible here)"


def check_problem_fits(problem: GemmProblem, arch: str, runner: Any = None) -> None:
    """Refuse, before anything compiles, a problem whose operands and output do not fit in the
    target's memory (target_memory): raises MemoryFitError, a SpecError naming the bytes needed
    and the bytes available. The evaluator refuses a spec whose workspace does not fit, per spec."""
    available, where = target_memory(arch, runner)
    check_fits(problem, available, where)


def resolve_proposer(proposer: Any, backends: Sequence[str], arch: str):
    """A Proposer from a name ("auto", "rules", "learned", "llm", "random"), an object, or None (Optuna
    only). A named one sees the live GPU's profile (its SMs and L2) when the GPU is of arch."""
    if proposer is None or not isinstance(proposer, str):
        return proposer
    return get_proposer(proposer, backends=tuple(backends), arch=arch, device=DeviceProfile.live(arch))


def resolve_store(store: Any, runner: Any = None):
    """A Store from a Store, a URL or a path; None: the default store, or the recorded runner's own
    store where the runner is a RecordedRunner (synthetic numbers never mix with measurements)."""
    if store is None and isinstance(runner, RecordedRunner):
        store = recorded_url()
    return store if isinstance(store, Store) else Store(store)


def names(value: Any, what: str) -> tuple[str, ...]:
    """A tuple of names from a sequence of strings, or from one string (one name, as the CLI's
    comma lists take it: "triton" is ("triton",), never its characters)."""
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, (set, frozenset)) or not isinstance(value, Sequence) or \
            not all(isinstance(v, str) for v in value):
        raise TypeError(f"{what}={value!r}: give a name or a list of names, e.g. {what}=(\"a\", \"b\")")
    return tuple(value)


def count(value: Any, what: str, minimum: int, none_ok: bool = False) -> int | None:
    """value as a whole number >= minimum (None where none_ok); else one line naming it."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what}={value!r}: give a whole number, {minimum} or more")
    return value


def check_search_arguments(budget: Any, modes: Any, batch_size: Any, n_proposals: Any):
    """cudal2.search's budget, modes, batch_size and n_proposals checked as the CLI checks its
    options, for every entry point that passes them on (cudal2.search, tune_model, tune_untuned):
    one line naming the value and the fix. Returns (modes, batch_size, n_proposals)."""
    modes = names(modes, "modes")
    unknown = [m for m in modes if m not in MODES] or ([] if modes else ["(none)"])
    if unknown:
        raise ValueError(f"modes={modes!r}: {unknown[0]} is not a timing mode; give one or more of {MODES}")
    Budget.parse(budget)
    return modes, count(batch_size, "batch_size", 1), count(n_proposals, "n_proposals", 0, none_ok=True)


def unguarded_script() -> str:
    """Why the evaluator cannot start here, or "": the call comes from a script's top-level code outside
    `if __name__ == "__main__":`. The evaluator's worker processes start by importing the script
    again (the spawn start method), which would run the search again in each of them: the workers die
    one after another and the search spins for minutes before it gives up."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not path.endswith(".py"):
        return ""  # an interactive session or python -c: nothing is imported again
    spec_name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if spec_name.endswith(".__main__"):
        return ""  # python -m a package (python -m cudal2.cli): spawn never runs a package's __main__ again
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals.get("__name__") == "__main__" and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return ""
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return ""
    line = frame.f_lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test) \
                and node.lineno <= line <= (node.end_lineno or node.lineno):
            return ""
    return (f"{path} line {line} starts a GPU search from the script's top level; the evaluator's worker "
            "processes import the script again, which would start the search again in each of them. Put the "
            "call under `if __name__ == \"__main__\":` (as multiprocessing requires)")

