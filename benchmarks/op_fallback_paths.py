"""Each of cudal2.linear's fallback paths in situ on a GPU: a call the op sends to torch, against F.linear's.

    python benchmarks/op_fallback_paths.py [ROUNDS]   (default 101)

A table of two entries, a kernel for 1x4096x4096 that saves too little for an eager call (it serves
only while a CUDA graph captures) and one for 1x3072x4096 that an eager call would take, makes three kinds
of weight, each kept by the op after its first call (ops._torch_weights); fp16, no_grad, the calls on the
default stream:
- kept (every call torch): a 2048x4096 weight, whose shape no entry has, called with 1 row;
- served elsewhere: the 3072x4096 weight called with 33 rows, a count no entry of its shape serves (x's
  count read, and looked up in its shape's plan);
- graphs only: the 4096x4096 weight called with 1 row, the count served only while a graph captures, and
  called with 33 rows, served nowhere: once the 1-row kernel is built, every call of the weight runs torch
  unless a capture can record it (ops._UNLESS_CAPTURED: the capture test, no count).
Per path, F.linear and cudal2.linear on the same operands are timed like op_overhead's rounds (200
back-to-back calls, host time per call, every path taking turns, the order reversed every other round);
the figure is the median over the rounds of cudal2.linear's host time minus F.linear's in the same round,
with the quartiles. cudal2.linear is the op's C front where it builds (cudal2.op_front) with its probe bound
(op_front.attach_probe: x's count and the capture test read in C++, and torch's linear called through
at::linear), timed also with the probe's linear unbound (the front's torch calls through F.linear's binding) and
with the whole probe unbound (the front then asks torch's Python bindings), and the op's Python front
(ops._python_linear) beside them; the
bindings are set before each round's timed calls. A breakdown of the op's per-call cost, not a speed claim.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _rounds, op_overhead

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cudal2  # noqa: E402
from cudal2 import op_front, ops  # noqa: E402
from cudal2.ir import GemmProblem, KernelSpec  # noqa: E402
from cudal2.store.table import TunedEntry, TunedTable  # noqa: E402
from _rounds import interleaved, spread  # noqa: E402
from op_overhead import _round  # noqa: E402 - CALLS back-to-back calls: host and wall us per call
from op_served import weight_kept  # noqa: E402


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 101
    saving_ms = ops.EAGER_MIN_SAVING_US / 4e3  # too little for an eager call, enough for a captured one
    spec = KernelSpec(block_m=16, block_n=64, block_k=128, stages=4)
    ops.set_table(TunedTable([TunedEntry(problem=GemmProblem(m=1, n=4096, k=4096, layout="NT"), spec=spec,
                                         kernel_ms=0.010, baselines_ms={"torch": 0.010 + saving_ms}, gpu=""),
                              TunedEntry(problem=GemmProblem(m=1, n=3072, k=4096, layout="NT"), spec=spec,
                                         kernel_ms=0.010, baselines_ms={"torch": 0.010 + 8 * saving_ms}, gpu="")]))
    # an eager call's margin as the op's default: before a launch cost is measured it is 0 on a GPU host, and
    # the entry would be compiled and timed as an eager call's kernel first
    ops._eager_margin_us = lambda backend: ops.EAGER_MIN_SAVING_US
    device, half = "cuda", torch.float16
    w, other = torch.randn(4096, 4096, device=device, dtype=half), torch.randn(2048, 4096, device=device, dtype=half)
    eager_served = torch.randn(3072, 4096, device=device, dtype=half)
    one, many = torch.randn(1, 4096, device=device, dtype=half), torch.randn(33, 4096, device=device, dtype=half)
    cases = {"kept (every call torch)": (one, other), "served elsewhere": (many, eager_served),
             "graphs only": (one, w), "graphs only, 33 rows": (many, w)}
    probe = op_front.attach_probe(wait=True)
    print(f"the C front's probe: {op_front.probe_state()}")
    bindings = {"": probe or {}}  # (timed path suffix: the front's probe bindings set before its rounds)
    if probe:
        # the probe's F.linear alone unbound (the front's torch calls through torch's binding), then all of it
        bindings[", probe's linear unbound"] = {**probe, "linear_probe": 0}
        bindings[", no probe"] = {name: 0 for name in probe}
    paths, before = {}, {}
    with torch.no_grad():
        for name, (x, weight) in cases.items():
            cudal2.linear(x, weight), cudal2.linear(x, weight)
            print(f"{name}: weight {weight_kept(weight)}")
            paths[f"{name}: F.linear"] = lambda x=x, weight=weight: F.linear(x, weight)
            for suffix, bound in bindings.items():
                paths[f"{name}: cudal2.linear{suffix}"] = lambda x=x, weight=weight: cudal2.linear(x, weight)
                before[f"{name}: cudal2.linear{suffix}"] = bound
            paths[f"{name}: Python front"] = lambda x=x, weight=weight: ops._python_linear(x, weight)
        for fn in paths.values():
            for _ in range(50):
                fn()

        def timed(name, fn):
            bound = before.get(name)
            if bound and ops._rebind_front is not None:
                ops._rebind_front(**bound)
            return _round(fn)[0]
        per = interleaved({name: lambda name=name, fn=fn: timed(name, fn) for name, fn in paths.items()}, rounds)
    front = "the C front (cudal2.op_front)" if ops._rebind_front is not None else "the Python front"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; cudal2.linear is {front}; {rounds} rounds")
    for name in cases:
        base = per[f"{name}: F.linear"]
        line = [f"{name:26s} F.linear {sorted(base)[len(base) // 2]:6.2f} us"]
        for path in (*(f"cudal2.linear{suffix}" for suffix in bindings), "Python front"):
            mid, q1, q3 = spread(a - b for a, b in zip(per[f"{name}: {path}"], base))
            line.append(f"{path} {mid:+.3f} us ({q1:+.3f} to {q3:+.3f})")
        print("  ".join(line))


if __name__ == "__main__":
    main()
