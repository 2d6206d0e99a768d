"""Evaluator: isolated GPU workers, correctness, timing modes, baselines, anti-cheat checks."""

from .results import BaselineResult, CandidateResult, Correctness, Environment, EvalReport, Runner, Timing

__all__ = ["BaselineResult", "CandidateResult", "Correctness", "Environment", "EvalReport", "Runner", "Timing"]
