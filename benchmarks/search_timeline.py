"""Where a search's seconds go, call by call: searches of the given shapes one after another with
one evaluator (CuTe DSL, budget 32, look-ahead, quack not timed), each evaluator call printed with
when it started and ended (seconds from the search's start), how many of its kernels were compiled
fresh, its compile wait, checks and timing, the GPU worker's restarts so far and each kernel that
failed (status, spec, reason); each prefetch with when it was handed over.

    python benchmarks/search_timeline.py 64x6144x4096 255x6144x4096 1000x17920x1536 > OUT.txt
    python benchmarks/search_timeline.py --lookahead 4 SHAPES...   (batches asked ahead; default 3)
    python benchmarks/search_timeline.py --cache-dir DIR SHAPES...  (kernel caches in DIR, e.g. filled
        by `CUDAL2_CACHE_DIR=DIR cudal2 precompile`)

The kernel caches start empty (a temporary folder) unless --cache-dir names one, so the first shape
is a cold search.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from cudal2.bench import evaluator as E  # noqa: E402

START = [0.0]
LOG: list[str] = []
_run, _prefetch = E.Evaluator._run, E.Evaluator.prefetch


def traced_run(self, problem, items, modes, baselines):
    before, t = dataclasses.asdict(self.stats), time.perf_counter()
    out = _run(self, problem, items, modes, baselines)
    after = dataclasses.asdict(self.stats)
    d = {k: after[k] - before[k] for k in ("waiting_for_compile_s", "checking_s", "timing_s")}
    fresh = sum(1 for r in out if (r.compile_s or 0) > 0.5)
    detail = "".join(f" [{r.status}: {r.spec.summary()}: {r.reason[:120]}]" for r in out if r.status != "ok")
    if d["checking_s"] > 0.5:  # a slow check: what each kernel's compile took and which checks it ran
        detail += "".join(f"\n    {r.spec.summary()} {r.spec.decomposition} compile_s={r.compile_s or 0:.2f} "
                          f"checks={list(r.correctness.checks) if r.correctness else None}" for r in out)
    LOG.append(f"  eval t={t - START[0]:5.2f} n={len(items)} fresh={fresh} wait={d['waiting_for_compile_s']:.2f} "
               f"check={d['checking_s']:.2f} time={d['timing_s']:.2f} full={self._full_timing} "
               f"end={time.perf_counter() - START[0]:5.2f} restarts={self.restarts}{detail}")
    return out


def traced_prefetch(self, problem, specs):
    LOG.append(f"  prefetch t={time.perf_counter() - START[0]:5.2f} n={len(specs)}")
    return _prefetch(self, problem, specs)


def main(shapes: list[str], lookahead: bool | int = True, cache_dir: str | None = None) -> None:
    cache = tempfile.mkdtemp(prefix="cudal2-timeline-")
    if cache_dir:
        os.environ["CUDAL2_CACHE_DIR"] = cache_dir
    else:
        os.environ["CUDAL2_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"] = cache + "/cudal2", cache + "/triton"
    import cudal2
    from cudal2.api import default_runner
    from cudal2.bench.baselines import QUACK
    from cudal2.bench.environment import host_cpu

    print(f"# host CPU: {host_cpu()} (the compile pool's speed follows it)", flush=True)
    E.Evaluator._run, E.Evaluator.prefetch = traced_run, traced_prefetch
    runner = default_runner(baselines=tuple(b for b in E.DEFAULT_BASELINES if b not in QUACK))
    try:
        for i, shape in enumerate(shapes):
            LOG.clear()
            START[0] = time.perf_counter()
            res = cudal2.search(shape, layout="NT", backends=["cute_dsl"], budget=32, progress=False,
                                store=f"{cache}/store{i}.db", seed=0, runner=runner, lookahead=lookahead)
            print(f"{shape} {time.perf_counter() - START[0]:.1f} s {res.speedup.get('torch'):.3f}",
                  {k: round(v, 2) for k, v in res.phase_s.items()})
            print("\n".join(LOG), flush=True)
    finally:
        runner.close()


if __name__ == "__main__":  # the evaluator's processes are spawned: they import this file
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--lookahead", type=int, default=None, help="batches asked ahead (default: the search's own)")
    ap.add_argument("--cache-dir", default=None, help="kernel caches ($CUDAL2_CACHE_DIR) to start from")
    args = ap.parse_args()
    main(args.shapes, True if args.lookahead is None else args.lookahead, args.cache_dir)
