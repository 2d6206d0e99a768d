"""The host's share of a search: cudal2.search against the recorded runner (no GPU, no compile), so
what is timed is proposing, sampling, validating and storing: the Optuna study in its SQLite store,
the proposer, the IR checks. The wall time of a GPU search is this plus the evaluator's.

    python benchmarks/search_overhead.py [--shape 255x6144x4096] [--budget 32] [--backend triton
        --backend cute_dsl] [--proposer rules] [--seeds 3]

Prints the seconds of each seed's search (a fresh store each) and their median, after one small
search that pays the imports.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="255x6144x4096")
    ap.add_argument("--layout", default="NT")
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--backend", action="append")
    ap.add_argument("--proposer", default="rules")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    import cudal2
    from cudal2.tuner.recorded import RecordedRunner

    backends = tuple(args.backend or ("triton", "cute_dsl"))
    folder = Path(tempfile.mkdtemp(prefix="cudal2-overhead-"))
    common = dict(layout=args.layout, backends=backends, progress=False, arch="sm_90a", proposer=args.proposer)
    cudal2.search("64x4096x4096", budget=4, store=str(folder / "warm.db"), runner=RecordedRunner(), **common)
    seconds = []
    for seed in range(args.seeds):
        start = time.perf_counter()
        cudal2.search(args.shape, budget=args.budget, store=str(folder / f"s{seed}.db"), runner=RecordedRunner(),
                      seed=seed, **common)
        seconds.append(time.perf_counter() - start)
    print(f"{args.shape}-{args.layout} budget {args.budget}, {'+'.join(backends)}, {args.proposer}: "
          f"{', '.join(f'{s:.2f}' for s in seconds)} s; median {statistics.median(seconds):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
