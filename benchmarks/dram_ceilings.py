"""What the GPU's DRAM sustains, timed the way the evaluator times kernels (a CUDA graph of calls,
events around replays, the median), on buffers larger than L2: write only (fill_), read only (a
sum) and copy. A GEMM whose time goes to writing D (shallow K, large output) is measured against
the write figure.

    python benchmarks/dram_ceilings.py [--mib 512 --mib 1024]

Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed_us(fn, calls: int = 20, reps: int = 15) -> float:
    """Median microseconds per call of fn over `reps` replays of a graph of `calls` calls."""
    import torch

    from cudal2.bench.timing import _capture  # the evaluator's own capture

    g, why = _capture(lambda _i: fn(), [0] * calls, torch.device("cuda"))
    if g is None:
        raise SystemExit(f"graph capture failed: {why}")
    g.replay()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    xs = []
    for _ in range(reps):
        t0.record()
        g.replay()
        t1.record()
        t1.synchronize()
        xs.append(t0.elapsed_time(t1) * 1e3 / calls)
    return statistics.median(xs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, action="append", help="buffer size in MiB (repeatable; default 512 and 1024)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("dram_ceilings.py measures a CUDA GPU, and torch sees none here")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for mib in args.mib or (512, 1024):
        n = mib * 2**20 // 2
        a = torch.empty(n, dtype=torch.float16, device="cuda").normal_()
        b = torch.empty(n, dtype=torch.float16, device="cuda")
        w = timed_us(lambda: b.fill_(1.0))
        r = timed_us(lambda: torch.sum(a, dtype=torch.float32))
        c = timed_us(lambda: b.copy_(a))
        nbytes = 2 * n
        print(f"{mib} MiB: write {nbytes / w / 1e6:.2f} TB/s ({w:.1f} us), read {nbytes / r / 1e6:.2f} TB/s "
              f"({r:.1f} us), copy {2 * nbytes / c / 1e6:.2f} TB/s ({c:.1f} us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
