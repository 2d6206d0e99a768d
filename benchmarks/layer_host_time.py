"""Where a host-bound layer's time goes with cudal2: the decoder layer of benchmarks/e2e_decoder.py at 1
and 16 tokens, eager, four ways, timed in interleaved rounds (41 rounds of 20 calls):
A nn.Linear everywhere; B the layers route_linears picks sent through cudal2.linear (the table serves
them); D those layers' forward replaced by a plain Python function calling F.linear (the cost of a
Python forward alone); E those layers' forward calling the op's launcher directly (the kernel without
the op's Python between forward and launch).

    python benchmarks/layer_host_time.py STORE     (a store whose table serves some of the layer's GEMMs)

Prints each variant's median us per layer and the median per-round ratio A / variant with quartiles.
"""

import statistics
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def main():
    import torch
    from torch.nn import functional as F

    import cudal2
    import e2e_decoder as e
    from _rounds import interleaved, spread
    from cudal2 import ops
    from cudal2.store.table import TunedTable

    ops.set_table(TunedTable.for_serving(sys.argv[1]))
    plain, _ = e.layers()
    variants = {name: e.layers()[1] for name in "BDE"}
    routed = cudal2.route_linears(variants["B"])
    print("routed:", routed, flush=True)

    def py_forward(self, x):
        return F.linear(x, self.weight, self.bias)

    for name in routed:
        m = variants["D"].get_submodule(name)
        m.forward = types.MethodType(py_forward, m)
    with torch.no_grad():
        for t in (1, 16):
            x = torch.randn(t, e.HIDDEN, device="cuda", dtype=torch.float16)
            variants["B"](x)  # binds the launchers of this token count
            for name in routed:
                m = variants["E"].get_submodule(name)
                launch = ops._launchers.get(ops._linear_key(torch.empty_like(x), m.weight, None))
                m.forward = types.MethodType(lambda self, x, launch=launch: launch(x, self.weight, None), m) \
                    if launch is not None else types.MethodType(py_forward, m)
            timers = {"A": e.wall_timer(lambda: plain(x), 20)}
            timers.update({name: e.wall_timer(lambda layer=layer: layer(x), 20) for name, layer in variants.items()})
            times = interleaved(timers, 41)
            for name, r in times.items():
                med, q1, q3 = spread(a / b for a, b in zip(times["A"], r))
                print(f"{t} tokens {name}: {statistics.median(r):.1f} us; A/{name} {med:.3f} ({q1:.3f} to {q3:.3f})",
                      flush=True)


if __name__ == "__main__":
    main()
