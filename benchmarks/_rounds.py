"""Interleaved rounds, shared by the benchmarks that compare paths (op_overhead, e2e_decoder,
crosscheck_winners, op_served): the paths being compared take turns round by round, so a drift of
the host or of the GPU clock falls on all of them alike, and a comparison is made within each round
before taking a median over the rounds."""

from __future__ import annotations

import statistics


def interleaved(timers: dict, rounds: int, alternate: bool = True) -> dict[str, list]:
    """Per name in timers: what its timer (a function of no arguments timing one round) returned in
    each of `rounds` rounds. Every round runs every timer once, in the order of timers; with
    alternate, the odd rounds run them in reverse (two paths: A B, B A, A B, ...)."""
    out = {name: [] for name in timers}
    order = list(timers.items())
    for r in range(rounds):
        for name, timer in (order[::-1] if alternate and r % 2 else order):
            out[name].append(timer())
    return out


def spread(xs) -> tuple[float, float, float]:
    """(median, 25th percentile, 75th percentile) of xs (statistics.quantiles' default method); the
    median for all three with fewer than two values."""
    xs = list(xs)
    mid = statistics.median(xs)
    if len(xs) < 2:
        return mid, mid, mid
    q = statistics.quantiles(xs, n=4)
    return mid, q[0], q[2]


def median_error(xs) -> float:
    """The standard error of xs's median, read off its quartiles as for a normal spread (sigma = IQR / 1.349, the
    median's error 1.2533 sigma / sqrt(n)): robust to the few rounds that a pause of the host makes slow."""
    xs = list(xs)
    if len(xs) < 4:
        return float("inf")
    _, q1, q3 = spread(xs)
    return 1.2533 * (q3 - q1) / 1.349 / len(xs) ** 0.5
