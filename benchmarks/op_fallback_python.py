"""The Python time of cudal2.linear's fallback per call, on this host's CPU, with torch's own call stubbed out.

    python benchmarks/op_fallback_python.py [--calls 20000] [--rounds 15]

On a GPU host the fallback's cost (benchmarks/op_overhead.py) sits under F.linear's 15 to 27 us call,
whose own time moves between processes by more than the fallback costs. Here the op's module calls a
stub instead of F.linear, on CPU tensors, so that only the op's Python is timed. Each path is timed
against a bare Python wrapper of the same stub (what any Python function in front of F.linear costs),
over interleaved rounds; the figure is the median of the per-round differences, in ns per call. Paths:
- kept weight: a weight no table entry has, the first of its shape (kept by identity at its first call);
- Parameter, shape shared: a second nn.Linear weight of the same shape, kept at its first call;
- counts: a weight remade for every call (never kept), the same shape: the element counts decide;
- served elsewhere: a weight whose shape a kernel serves at other row counts (kept with those counts);
- graphs only: a row count a kernel serves only while a CUDA graph captures (plus the capture test);
- the stub called directly, with no function in front (below the wrapper by what a Python frame costs).
Not a speed claim for any GPU: the CPU's Python time, which the op adds to each call of a host-bound model.
cudal2.linear is the op's C front where it builds (cudal2.op_front; $CUDAL2_NATIVE_FRONT=0: its Python front),
which calls the stub itself: with it a path can read below the wrapper, which pays a Python frame.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing


def _timer(fn, args, calls: int):
    def once() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        return (time.perf_counter() - start) / calls * 1e9
    return once


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)

    import torch

    import cudal2
    from cudal2 import ops
    from cudal2.ir import GemmProblem, KernelSpec
    from cudal2.store.table import TunedEntry, TunedTable

    spec = KernelSpec(block_m=32, block_n=32, block_k=32, stages=2)
    eager = GemmProblem(m=3, n=32, k=64, layout="NT")  # served eagerly at 3 rows (a 32 x 64 weight)
    graph_only = GemmProblem(m=5, n=48, k=64, layout="NT")  # a win too small for eager calls
    small_ms = ops.EAGER_MIN_SAVING_US / 4e3
    ops.set_table(TunedTable([
        TunedEntry(problem=eager, spec=spec, kernel_ms=0.1, baselines_ms={"torch": 0.2}, gpu=""),
        TunedEntry(problem=graph_only, spec=spec, kernel_ms=small_ms, baselines_ms={"torch": 2 * small_ms}, gpu="")]))
    stub = slice  # a C callable of two or three objects, as torch's linear is: no Python frame of its own
    ops._F_linear = stub
    if ops._rebind_front is not None:  # the C front calls torch's linear itself (cudal2.op_front)
        ops._rebind_front(torch_linear=stub)
    ops._captured_now = lambda t: False  # (CPU tensors: what the test answers on a GPU's default stream)
    # an eager call's margin as on a host without a GPU: on a GPU host, before a launch cost is measured, it is
    # 0 and the graphs-only entry would serve eager calls (then its weight is not kept, and the path not timed)
    ops._eager_margin_us = lambda backend: ops.EAGER_MIN_SAVING_US

    def wrapper(x, w, b=None):
        return stub(x, w, b)

    x = torch.empty(6, 64, dtype=torch.float16)
    kept = torch.empty(80, 64, dtype=torch.float16)
    first, second = (torch.nn.Linear(64, 96, bias=False).half() for _ in range(2))
    served_elsewhere = torch.empty(32, 64, dtype=torch.float16)
    graph_w, graph_x = torch.empty(48, 64, dtype=torch.float16), torch.empty(5, 64, dtype=torch.float16)
    paths = {"kept weight": (kept, x), "Parameter, shape shared": (second.weight, x),
             "served elsewhere": (served_elsewhere, x), "graphs only": (graph_w, graph_x)}
    with torch.no_grad():
        cudal2.linear(x, first.weight)  # binds the shape's counts: the second layer's first call runs torch on them
        for w, a in paths.values():
            cudal2.linear(a, w), cudal2.linear(a, w)
        kept_ids = getattr(ops, "_torch_weights", {})  # (absent in code before kept weights: nothing kept)
        if kept_ids and not all(id(w) in kept_ids for w, _ in paths.values()):
            raise SystemExit("op_fallback_python: a path's weight was not kept by the op; the figures would not be "
                             "what they are named")
        remade = lambda a: cudal2.linear(a, first.weight.detach().clone())  # noqa: E731 - a new object every call
        timers = {name: _timer(cudal2.linear, (a, w), args.calls) for name, (w, a) in paths.items()}
        timers["counts (weight remade per call)"] = _timer(remade, (x,), args.calls)
        timers["the stub called directly"] = _timer(stub, (x, kept), args.calls)  # (minus: the wrapper's own cost)
        clone_only = _timer(lambda a: wrapper(a, first.weight.detach().clone()), (x,), args.calls)
        base = _timer(wrapper, (x, kept), args.calls)
        diffs: dict[str, list[float]] = {name: [] for name in timers}
        for _ in range(args.rounds):
            ref = base()
            ref_clone = clone_only()
            for name, timer in timers.items():
                diffs[name].append(timer() - (ref_clone if name.startswith("counts") else ref))
    front = "C front (cudal2.op_front)" if ops._rebind_front is not None else "Python front"
    print(f"cudal2.linear's fallback, Python ns per call over a bare wrapper of the same call "
          f"(torch {torch.__version__}, {args.rounds} rounds of {args.calls} calls, {front}):")
    for name, d in diffs.items():
        print(f"  {name:34s} {statistics.median(d):7.0f} ns")


if __name__ == "__main__":
    main()
