"""Each of cudal2.linear's fallback paths in situ on a GPU: a call the op sends to torch, against F.linear's.

    python benchmarks/op_fallback_paths.py [ROUNDS]   (default 101)

A table with one entry, a kernel for 1x4096x4096 that saves too little for an eager call (it serves
only while a CUDA graph captures), makes three kinds of weight, each kept by the op after its first
call (ops._torch_weights); fp16, no_grad, the calls on the default stream:
- kept (every call torch): a 2048x4096 weight, whose shape no entry has, called with 1 row;
- served elsewhere: the 4096x4096 weight called with 33 rows, a count no entry of its shape serves;
- graphs only: the same weight called with 1 row, the count served only while a graph captures.
Per path, F.linear and cudal2.linear on the same operands are timed like op_overhead's rounds (200
back-to-back calls, host time per call, every path taking turns, the order reversed every other round);
the figure is the median over the rounds of cudal2.linear's host time minus F.linear's in the same round,
with the quartiles. cudal2.linear is the op's C front where it builds (cudal2.op_front), and the op's
Python front (ops._python_linear) is timed beside it. A breakdown of the op's per-call cost, not a speed
claim.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _rounds, op_overhead

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cudal2  # noqa: E402
from cudal2 import ops  # noqa: E402
from cudal2.ir import GemmProblem, KernelSpec  # noqa: E402
from cudal2.store.table import TunedEntry, TunedTable  # noqa: E402
from _rounds import interleaved, spread  # noqa: E402
from op_overhead import _round  # noqa: E402 - CALLS back-to-back calls: host and wall us per call


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 101
    saving_ms = ops.EAGER_MIN_SAVING_US / 4e3  # too little for an eager call, enough for a captured one
    spec = KernelSpec(block_m=16, block_n=64, block_k=128, stages=4)
    ops.set_table(TunedTable([TunedEntry(problem=GemmProblem(m=1, n=4096, k=4096, layout="NT"), spec=spec,
                                         kernel_ms=0.010, baselines_ms={"torch": 0.010 + saving_ms}, gpu="")]))
    # an eager call's margin as the op's default: before a launch cost is measured it is 0 on a GPU host, and
    # the entry would be compiled and timed as an eager call's kernel first
    ops._eager_margin_us = lambda backend: ops.EAGER_MIN_SAVING_US
    device, half = "cuda", torch.float16
    w, other = torch.randn(4096, 4096, device=device, dtype=half), torch.randn(2048, 4096, device=device, dtype=half)
    one, many = torch.randn(1, 4096, device=device, dtype=half), torch.randn(33, 4096, device=device, dtype=half)
    cases = {"kept (every call torch)": (one, other), "served elsewhere": (many, w), "graphs only": (one, w)}
    paths = {}
    with torch.no_grad():
        for name, (x, weight) in cases.items():
            cudal2.linear(x, weight), cudal2.linear(x, weight)
            known = ops._torch_weights.get(id(weight))
            kept = "every call" if known is ops._EVERY_CALL else ("plan" if known is not None else "not kept")
            print(f"{name}: weight {kept}")
            paths[f"{name}: F.linear"] = lambda x=x, weight=weight: F.linear(x, weight)
            paths[f"{name}: cudal2.linear"] = lambda x=x, weight=weight: cudal2.linear(x, weight)
            paths[f"{name}: Python front"] = lambda x=x, weight=weight: ops._python_linear(x, weight)
        for fn in paths.values():
            for _ in range(50):
                fn()
        per = interleaved({name: lambda fn=fn: _round(fn)[0] for name, fn in paths.items()}, rounds)
    front = "the C front (cudal2.op_front)" if ops._rebind_front is not None else "the Python front"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; cudal2.linear is {front}; {rounds} rounds")
    for name in cases:
        base = per[f"{name}: F.linear"]
        line = [f"{name:26s} F.linear {sorted(base)[len(base) // 2]:6.2f} us"]
        for path in ("cudal2.linear", "Python front"):
            mid, q1, q3 = spread(a - b for a, b in zip(per[f"{name}: {path}"], base))
            line.append(f"{path} {mid:+.3f} us ({q1:+.3f} to {q3:+.3f})")
        print("  ".join(line))


if __name__ == "__main__":
    main()
