"""Each test on cudal2.linear's fastest fallback path, timed in situ between F.linear calls on a GPU.

    python benchmarks/op_fallback_parts.py [ROUNDS]   (default 101)

benchmarks/op_fallback_python.py times the op's Python in a tight loop on the CPU, where the kept-weight
path costs about 90 ns; benchmarks/op_overhead.py times the op against F.linear as a user calls it, where
the same path reads +0.3 to +1.4 us on the lent H200 hosts. This script sits between the two: the calls
of 1x4096x4096 (fp16, no_grad, an empty table, so the weight is kept: every call runs torch) are timed
like op_overhead's (rounds of 200 back-to-back calls, host time per call, the paths taking turns, the
order reversed every other round), through functions that add the fast path's tests one at a time:
- wrapper: F.linear behind a bare Python function;
- +is_dynamo_compiling(), +_is_compiling_flag, +_torch_weights.get(id(w)): the wrapper plus one test;
- all three, inline copy: a copy of the fast path (the three tests, then F.linear);
- Python front: the op's Python linear (ops._python_linear), what cudal2.linear is without its C front;
- cudal2.linear: the op itself (its C front, cudal2.op_front, where that builds).
Each path's figure: the median over the rounds of its host time minus F.linear's in the same round, with
the quartiles. Prints a table; not a speed claim, a breakdown of the op's per-call cost on this host.
"""

import inspect
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _rounds, op_overhead

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cudal2  # noqa: E402
from cudal2 import ops  # noqa: E402
from cudal2.store.table import TunedTable  # noqa: E402
from _rounds import interleaved, spread  # noqa: E402
from op_overhead import _round  # noqa: E402 - op_overhead's round: CALLS back-to-back calls, host and wall us


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 101
    ops.set_table(TunedTable())
    print("torch", torch.__version__, "flag attr:", hasattr(torch.compiler, "_is_compiling_flag"), type(ops._compile_state))
    print(inspect.getsource(torch.compiler.is_dynamo_compiling).splitlines()[-1])
    print("cudal2.linear:", "the C front (cudal2.op_front)" if ops._rebind_front is not None else "the Python front")
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    f_lin = F.linear
    dynamo_compiling, compile_state, kept = ops._dynamo_compiling, ops._compile_state, ops._torch_weights

    def wrapper(x, w, b=None):
        return f_lin(x, w, b)

    def with_dynamo_test(x, w, b=None):
        if dynamo_compiling():
            return None
        return f_lin(x, w, b)

    def with_flag_test(x, w, b=None):
        if compile_state._is_compiling_flag:
            return None
        return f_lin(x, w, b)

    def with_kept_test(x, w, b=None):
        if kept.get(id(w)) is None:
            return None
        return f_lin(x, w, b)

    def inline_copy(x, w, b=None):
        if dynamo_compiling() or compile_state._is_compiling_flag:
            return None
        known = kept.get(id(w))
        if known is not None:
            if known is ops._EVERY_CALL:
                return f_lin(x, w, b)
        return None

    with torch.no_grad():
        cudal2.linear(x, w), cudal2.linear(x, w)
        print("kept:", kept.get(id(w)) is ops._EVERY_CALL)
        paths = {"F.linear": lambda: F.linear(x, w), "wrapper": lambda: wrapper(x, w),
                 "+is_dynamo_compiling()": lambda: with_dynamo_test(x, w),
                 "+_is_compiling_flag": lambda: with_flag_test(x, w),
                 "+_torch_weights.get(id(w))": lambda: with_kept_test(x, w),
                 "all three, inline copy": lambda: inline_copy(x, w),
                 "Python front": lambda: ops._python_linear(x, w), "cudal2.linear": lambda: cudal2.linear(x, w)}
        for fn in paths.values():
            for _ in range(50):
                fn()
        per = interleaved({name: lambda fn=fn: _round(fn)[0] for name, fn in paths.items()}, rounds)
    base = per["F.linear"]
    for name, times in per.items():
        mid, q1, q3 = spread(a - b for a, b in zip(times, base))
        print(f"{name:32s} host {statistics.median(times):7.2f} us  over F.linear {mid:+.3f} us ({q1:+.3f} to {q3:+.3f})")


if __name__ == "__main__":
    main()
