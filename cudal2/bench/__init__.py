"""Evaluator: isolated GPU workers, correctness, timing modes, baselines, anti-cheat checks.

Heavy parts (torch, the worker processes) load only when used: importing this package is cheap.
"""

from .results import BaselineResult, CandidateResult, Correctness, Environment, EvalReport, Runner, Timing

__all__ = ["BaselineResult", "CandidateResult", "Correctness", "EvalConfig", "EvalReport", "Environment", "Evaluator",
           "Runner", "Timing", "evaluate", "evaluate_kernels"]

_LAZY = {"Evaluator": "evaluator", "EvalConfig": "evaluator", "evaluate": "evaluator",
         "evaluate_kernels": "evaluator"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
