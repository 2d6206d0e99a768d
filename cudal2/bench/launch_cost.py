"""The host time one launch path costs beyond torch's own call of the same GEMM, measured on this host
once per path and kept for the process.

cudal2.matmul/linear serve an eager call only where the kernel's measured GPU saving exceeds this
cost: in a host-bound model (eager, few tokens) the host time is the model's, the GPU time hidden.
The cost is a property of the launch path on this host and of this CPU, not of the shape: the
backend's launcher (TVM-FFI, Triton's compiled-kernel runner or its JIT, the DSL's executor) and how
many kernels a call launches (a split-K kernel whose reduction is a second kernel pays two launches).
A path is named by its backend, then what else sets it apart ("triton", "triton x2", "triton jit",
"cute_dsl executor"). The first launch of each path is timed against torch's call on the same
operands, and every later decision reuses the figure. Nothing is measured without CUDA: a CPU
tensor's call is torch's anyway.
"""

from __future__ import annotations

import statistics
import time
from threading import Lock
from typing import Callable

# Calls per timed loop and rounds: each round times one loop of each side, the two in turn (the order
# flipped every round), and the cost is the median of the rounds' differences. A least-loop figure per
# side read a Triton launch at under 1.4 us on one H200 host where 15 rounds of 200 calls put it at 5 us
# (2026-11-29): one undisturbed loop of the launch against disturbed ones of torch is enough to serve a
# kernel that then runs 0.78x F.linear. Few calls a loop: each enqueues a real GEMM on the GPU, and the
# GPU's queue must not fill (a full queue blocks the host and would be timed as launch cost).
CALLS = 20
ROUNDS = 9


def _cuda_sync() -> None:
    import torch

    torch.cuda.synchronize()


def _cuda_device(device) -> bool:
    import torch

    return getattr(device, "type", None) == "cuda" and torch.cuda.is_available()


def measure_us(launch: Callable[[], object], torch_call: Callable[[], object], clock: Callable[[], float] =
               time.perf_counter, sync: Callable[[], None] = _cuda_sync, calls: int = CALLS,
               rounds: int = ROUNDS) -> float:
    """Host microseconds a call of launch() costs more than one of torch_call() (negative where it costs
    less): the median over `rounds` rounds of (the mean of `calls` calls of launch - the same of
    torch_call), the two loops of a round in turn, the device idle (sync()) before each loop so that
    earlier work queues in front of neither."""
    def per_call_s(call: Callable[[], object]) -> float:
        sync()
        start = clock()
        for _ in range(calls):
            call()
        return (clock() - start) / calls

    torch_call()  # torch's first call of a shape picks its kernel: not a launch cost
    differences = []
    for r in range(rounds):
        if r % 2:
            theirs = per_call_s(torch_call)
            ours = per_call_s(launch)
        else:
            ours = per_call_s(launch)
            theirs = per_call_s(torch_call)
        differences.append(ours - theirs)
    return statistics.median(differences) * 1e6


def path_name(backend: str, launch_path: str | None) -> str:
    """The name of a launch path: the backend, then what sets the path apart ("" or None: nothing)."""
    return f"{backend} {launch_path}" if launch_path else backend


class LaunchCosts:
    """Each launch path's measured cost (measure_us) on this host, measured once per process (see
    path_name)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, sync: Callable[[], None] = _cuda_sync,
                 measurable: Callable[[object], bool] | None = None, calls: int = CALLS, rounds: int = ROUNDS):
        self._clock, self._sync, self._calls, self._rounds = clock, sync, calls, rounds
        self._measurable = measurable or _cuda_device
        self._us: dict[str, float] = {}
        self._lock = Lock()

    def known(self, path: str) -> float | None:
        """The path's measured cost in microseconds, or None where it was not measured yet."""
        return self._us.get(path)

    def of_backend(self, backend: str) -> list[float]:
        """The measured costs of every path of backend."""
        return [us for path, us in list(self._us.items()) if path == backend or path.startswith(backend + " ")]

    def can_measure(self, device) -> bool:
        """Whether a launch on device can be timed here (a CUDA device, with CUDA available)."""
        return self._measurable(device)

    def measure(self, path: str, launch: Callable[[], object], torch_call: Callable[[], object]) -> float:
        """The path's cost: timed now (launch and torch_call: the same GEMM's two calls), unless known."""
        known = self._us.get(path)
        if known is not None:
            return known
        cost = measure_us(launch, torch_call, self._clock, self._sync, self._calls, self._rounds)
        with self._lock:
            return self._us.setdefault(path, cost)

    def items(self) -> list[tuple[str, float]]:
        return sorted(self._us.items())
