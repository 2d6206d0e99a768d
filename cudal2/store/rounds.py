"""A search's confirmation rounds as the store keeps them: each leader's rounds in one mode and on one
GPU, its median round, and which of a static twin and its shape-generic original is kept. Read by the
tuned table and by the search's confirmation (cudal2.tuner.confirm), which runs the rounds."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from cudal2.bench.results import relative_time
from cudal2.ir import KernelSpec

# A static twin replaces its shape-generic original only when its median round is faster by more
# than this share: about the spread of one kernel's confirmation medians, so noise alone does not
# pin a shape to a kernel compiled for it.
STATIC_MARGIN = 0.01



@dataclass
class Confirmed:
    """One leader's confirmation rounds: how it ranks (median relative time over ok rounds), and
    the round whose figures are reported (its median)."""

    rounds: list[dict[str, Any]]  # store rows: result, baselines
    failed: bool  # some round was not ok: never the winner
    score: float  # median of kernel time / reference baseline time, per round (lower is better)
    median_round: dict[str, Any] | None


def ranked_trials(rows: Sequence[dict[str, Any]], keys: set, baselines: dict, reference: str | None,
                  mode: str) -> list[tuple[float, dict[str, Any]]]:
    """(relative time, row) of the correct kernels of this study, best first, one row per spec
    (its latest); rows come from Store.kernels."""
    latest: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["result"].spec.key() in keys:
            latest[r["result"].spec.key()] = r
    out = []
    for r in latest.values():
        res = r["result"]
        ms = res.kernel_ms(mode) if res.ok else None
        if ms is None or not math.isfinite(ms):
            continue
        out.append((relative_time(ms, r["baselines"] or baselines, reference, mode), r))
    out.sort(key=lambda t: t[0])
    return out


def rounds_in_mode(confirmation_rows: Sequence[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """The rounds that count in `mode`: those timed in it, and those that failed (a failure fails
    every mode). A store searched once offline and once sustained keeps both kinds of round; an
    offline round says nothing about a kernel's sustained speed, nor the other way round."""
    return [r for r in confirmation_rows if not r["result"].ok or r["result"].kernel_ms(mode) is not None]


def gpu_of(row: dict[str, Any]) -> str:
    """The GPU (by name) a stored kernel or confirmation row was timed on; "" where not recorded."""
    return (row["environment"] or {}).get("gpu_name", "")


def rounds_on(confirmation_rows: Sequence[dict[str, Any]], gpu_name: str | None) -> list[dict[str, Any]]:
    """The rounds timed on this GPU (by name); all of them where the GPU is not known. A store
    may hold searches from several GPUs, and a leader's rounds on one say nothing of another."""
    if not gpu_name:
        return list(confirmation_rows)
    return [r for r in confirmation_rows if gpu_of(r) == gpu_name]


def summarize(confirmation_rows: Sequence[dict[str, Any]], reference: str | None, mode: str) -> dict[str, Confirmed]:
    """spec_key -> Confirmed, from Store.confirmations rows (the rounds timed in `mode`)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rounds_in_mode(confirmation_rows, mode):
        by_key.setdefault(r["spec_key"], []).append(r)
    out = {}
    for key, rounds in by_key.items():
        failed = any(not r["result"].ok or r["result"].kernel_ms(mode) is None for r in rounds)
        scored = [] if failed else sorted(
            (relative_time(r["result"].kernel_ms(mode), r["baselines"], reference, mode), i)
            for i, r in enumerate(rounds))
        score = statistics.median(s for s, _ in scored) if scored else math.inf
        # the lower middle round: with an even count the reported figures stay one call's own
        median_round = rounds[scored[(len(scored) - 1) // 2][1]] if scored else None
        out[key] = Confirmed(rounds=rounds, failed=failed, score=score, median_round=median_round)
    return out


def static_twin(spec: KernelSpec) -> KernelSpec | None:
    """The shape-generic spec's kernel compiled for one shape, or None where spec is not shape-generic."""
    return spec.replace(shape_specialization="static") if spec.shape_specialization == "dynamic" else None


def generic_original(spec: KernelSpec) -> KernelSpec | None:
    """The shape-generic spec whose static twin spec is, or None where spec is no static one."""
    return spec.replace(shape_specialization="dynamic") if spec.shape_specialization == "static" else None


def with_twins(keys: set[str], rows: Sequence[dict[str, Any]]) -> set[str]:
    """keys (a study's spec keys) and the keys of their static twins, among the specs of rows."""
    twins = {t.key() for r in rows if r["result"].spec.key() in keys and (t := static_twin(r["result"].spec))}
    return set(keys) | twins


def twin_rival(confirmed: dict[str, Confirmed], c: Confirmed) -> Confirmed | None:
    """The confirmed shape-generic original of c where c is a static twin, else None."""
    original = generic_original(c.rounds[0]["result"].spec) if c.rounds else None
    return confirmed.get(original.key()) if original is not None else None


def kept_twins(confirmed: dict[str, Confirmed]) -> dict[str, Confirmed]:
    """confirmed without the static twins that did not pay: a twin stays where its generic original
    was not confirmed, or where its median beats the original's by more than STATIC_MARGIN (a failed
    one stays too, which is never a winner, so that a wrong twin is reported)."""
    out = {}
    for key, c in confirmed.items():
        rival = twin_rival(confirmed, c)
        if not c.failed and rival is not None and not rival.failed and not c.score < rival.score * (1 - STATIC_MARGIN):
            continue
        out[key] = c
    return out
