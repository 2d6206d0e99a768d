"""Baselines: the vendor libraries a candidate must beat, given the same operands (the same
strided views, so the same layouts) and timed through the same path as candidates.

- torch: torch.matmul (cuBLAS, through torch's heuristics), as users call it.
- cublaslt_heuristic: cuBLASLt's top-1 heuristic algorithm, through nvmath-python.
- cublaslt_autotune: cuBLASLt autotuned over up to 100 algorithms the heuristic offers
  (nvmath `plan(preferences=MatmulPlanPreferences(limit=100))` then `autotune()`).
Both cuBLASLt baselines use the same MatmulOptions, so the same workspace policy
(nvmath sizes and allocates the workspace for the chosen algorithm).
- quack_heuristic: quack-kernels' GEMM (`quack.gemm_interface.gemm`, CuTe DSL) with its own
  default config (tuned=False), the best open-source peer.
- quack_autotune: the same with its own autotuner (tuned=True); the first call of a shape tunes,
  before any timing.
quack-kernels is optional like nvmath: where it is not installed the two are reported
unavailable with the reason.

nvmath-python is optional and imported only here, lazily; without it the cuBLASLt
baselines are reported unavailable with the reason. nvmath's execute() costs tens of
microseconds on the host per call, so timing it by host calls would cripple it: it is timed
by CUDA-graph replay when capture works, else by events around many launches (and the
BaselineResult says which).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

from ..ir import GemmProblem

QUACK = ("quack_heuristic", "quack_autotune")
CUBLASLT = ("cublaslt_heuristic", "cublaslt_autotune")
NAMES = ("torch", *CUBLASLT, *QUACK)
# Baselines that write into the output they are given (the others allocate their own results).
WRITE_GIVEN_OUTPUT = ("torch", *QUACK)


@dataclass
class PreparedBaseline:
    name: str
    call: Callable[[int], Any] | None  # call(i): GEMM on input set i
    output: Callable[[int], Any] | None = None  # output(i): the tensor holding set i's result
    detail: str = ""

    @property
    def available(self) -> bool:
        return self.call is not None


def prepare(name: str, problem: GemmProblem, sets: list, outs: list, cache: dict | None = None) -> PreparedBaseline:
    """sets: list of Operands; outs: list of output tensors (M, N), one per set.

    cache: a dict the caller keeps across calls (the GPU worker keeps one per process). The
    cuBLASLt plans are kept there for the last problem seen, so that one search autotunes
    cuBLASLt once per problem instead of once per batch: the choice stays the same algorithm
    for every batch (and the autotune of a 7 ms GEMM, 100 algorithms x 10 runs, is not paid
    again). The plan is bound to the new operands on every call."""
    if name == "torch":
        return _torch(problem, sets, outs)
    if name in CUBLASLT:
        try:
            return _cublaslt(name, problem, sets, cache)
        except ImportError as e:
            return PreparedBaseline(name, None, detail=f"nvmath-python is not installed ({e}); "
                                                      f"pip install nvmath-python[cu12] to enable cuBLASLt baselines")
        except Exception as e:  # noqa: BLE001 - a library failure makes the baseline unavailable, not the run
            return PreparedBaseline(name, None, detail=f"cuBLASLt through nvmath failed: {type(e).__name__}: {e}")
    if name in QUACK:
        try:
            return _quack(name, problem, sets, outs)
        except ImportError as e:
            return PreparedBaseline(name, None, detail=f"quack-kernels is not installed ({e}); pip install "
                                                      "quack-kernels to compare with it")
        except Exception as e:  # noqa: BLE001 - a library failure makes the baseline unavailable, not the run
            return PreparedBaseline(name, None, detail=f"quack failed: {type(e).__name__}: {str(e)[:300]}")
    raise KeyError(f"unknown baseline {name!r}; known: {', '.join(NAMES)}")


def _torch(problem: GemmProblem, sets, outs) -> PreparedBaseline:
    import torch
    import torch.nn.functional as F

    e = problem.epilogue
    plain = e.alpha == 1.0 and e.beta == 0 and not e.bias and e.activation == "none"
    act = {"none": None, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[e.activation]

    def call(i):
        s, c = sets[i], outs[i]
        if plain:
            return torch.matmul(s.a, s.b, out=c)
        # The idiomatic torch call for the epilogue: addmm fuses alpha/beta/bias in cuBLAS.
        if e.beta != 0:
            c.copy_(s.c_in)
            torch.addmm(c, s.a, s.b, beta=e.beta, alpha=e.alpha, out=c)
            if e.bias:
                c.add_(s.bias)
        elif e.bias:
            torch.addmm(s.bias, s.a, s.b, alpha=e.alpha, out=c)
        else:
            torch.mm(s.a, s.b, out=c)
            if e.alpha != 1.0:
                c.mul_(e.alpha)
        if act is not None:
            c.copy_(act(c))
        return c

    return PreparedBaseline("torch", call, lambda i: outs[i], detail="torch.matmul/addmm (cuBLAS)")


def _cublaslt(name: str, problem: GemmProblem, sets, cache: dict | None = None) -> PreparedBaseline:
    from nvmath.linalg.advanced import Matmul, MatmulPlanPreferences  # optional dependency

    e = problem.epilogue
    if e.bias or e.activation != "none":
        return PreparedBaseline(name, None, detail="epilogue with bias/activation is not mapped to nvmath epilogs yet")
    key = (problem.key(), name)
    if cache is not None and key in cache:
        mm, detail = cache[key]
        detail += "; plan reused from an earlier batch of this problem"
        rebind = True
    else:
        if cache is not None:  # one problem at a time: a plan holds its operands alive
            for other in [k for k in cache if k[0] != key[0]]:
                del cache[other]
        s0 = sets[0]
        kw: dict[str, Any] = {"alpha": e.alpha}
        if e.beta != 0:
            kw.update(c=s0.c_in, beta=e.beta)
        mm = Matmul(s0.a, s0.b, **kw)
        if name == "cublaslt_heuristic":
            algos = mm.plan()
            detail = f"nvmath Matmul.plan(): heuristic top-1 of {len(algos)} algorithm(s)"
        else:
            algos = mm.plan(preferences=MatmulPlanPreferences(limit=100))
            mm.autotune(iterations=10)
            detail = f"nvmath Matmul.plan(limit=100) offered {len(algos)} algorithm(s); autotune(iterations=10)"
        if cache is not None:
            cache[key] = (mm, detail)
        rebind = len(sets) > 1
    results: dict[int, Any] = {}

    def call(i):
        s = sets[i]
        if rebind:
            reset = {"a": s.a, "b": s.b}
            if e.beta != 0:
                reset["c"] = s.c_in
            mm.reset_operands(**reset)
        r = mm.execute()
        results[i] = r
        return r

    return PreparedBaseline(name, call, lambda i: results.get(i), detail=detail + "; workspace managed by nvmath")


@contextlib.contextmanager
def _children_allowed():
    """quack's autotuner compiles its candidate configs in a pool of processes, and the evaluator's
    GPU worker is a daemon process, which Python forbids to start any ("daemonic processes are not
    allowed to have children"): every quack_autotune baseline failed there. The flag is lifted
    while quack compiles and tunes. Its pool lives as long as the worker: its processes wait on
    pipes the worker holds, and end when it does."""
    import multiprocessing

    config = multiprocessing.current_process()._config
    daemon = config.get("daemon", False)
    config["daemon"] = False
    try:
        yield
    finally:
        config["daemon"] = daemon


def _quack(name: str, problem: GemmProblem, sets, outs) -> PreparedBaseline:
    from quack.gemm_interface import gemm  # optional dependency

    e = problem.epilogue
    if e.beta != 0 or e.activation != "none":
        return PreparedBaseline(name, None, detail="epilogue with C or an activation is not mapped to quack yet")
    tuned = name == "quack_autotune"

    def call(i):
        s = sets[i]
        return gemm(s.a, s.b, out=outs[i], bias=s.bias if e.bias else None, alpha=e.alpha, tuned=tuned)

    with _children_allowed():
        for i in range(len(sets)):  # compile (and tune) here, before the timed path and any graph capture
            call(i)
    how = "its autotuner (tuned=True)" if tuned else "its default config (tuned=False)"
    return PreparedBaseline(name, call, lambda i: outs[i], detail=f"quack.gemm_interface.gemm with {how}")
