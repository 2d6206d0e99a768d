"""How reproducible are the baseline timings? Three independent measurements (each in a new
worker process) of torch.matmul and cuBLASLt autotuned (when nvmath-python is importable), in
both timing modes, on three shapes that stress different limits:
  4096x4096x4096  compute-bound
  8192x256x256    memory-bound, skinny
  512x128x8192    long K, few output tiles (split-K territory)
Prints, and writes as a markdown table to the path given: the kernel time of each run, the
spread (max - min) / median over the three runs, and torch / cuBLASLt.

    python benchmarks/measure_spread.py spread.md [--shapes 4096x4096x4096,...] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal2.bench.evaluator import Evaluator  # noqa: E402
from cudal2.ir import GemmProblem  # noqa: E402

SHAPES = ("4096x4096x4096", "8192x256x256", "512x128x8192")
MODES = ("offline", "server")


def have_nvmath() -> bool:
    try:
        import nvmath  # noqa: F401
        return True
    except ImportError:
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="markdown file to write")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args(argv)

    baselines = ("torch", "cublaslt_autotune") if have_nvmath() else ("torch",)
    rows, env, notes = [], None, {}
    t0 = time.time()
    for shape in args.shapes.split(","):
        problem = GemmProblem.parse(shape)
        runs: dict[tuple[str, str], list[float]] = {}
        for rep in range(args.reps):
            with Evaluator(device=args.device, baselines=baselines) as ev:  # a new process: independent
                env = env or ev.environment()
                res = ev.baselines(problem, MODES)
            for name, b in res.items():
                if not b.available:
                    notes[name] = b.detail
                for mode in MODES:
                    t = b.timing.get(mode)
                    if t is not None:
                        runs.setdefault((name, mode), []).append(t.kernel_ms)
                        if t.method != "cuda-graph":
                            notes[f"{name} ({mode})"] = f"timed by {t.method}: {b.detail}"
            print(f"{shape} run {rep + 1}/{args.reps} done ({time.time() - t0:.0f} s)", flush=True)
        for mode in MODES:
            torch_ms = runs.get(("torch", mode), [])
            lt_ms = runs.get(("cublaslt_autotune", mode), [])
            for name, xs in ((n, runs.get((n, mode), [])) for n in baselines):
                if not xs:
                    continue
                med = statistics.median(xs)
                spread = (max(xs) - min(xs)) / med
                ratio = ""
                if name == "torch" and lt_ms:
                    ratio = f"{statistics.median(lt_ms) / med:.3f}"  # >1: torch faster than cuBLASLt
                rows.append((shape, mode, name, " ".join(f"{x * 1e3:.1f}" for x in xs), f"{med * 1e3:.1f}",
                             f"{problem.flops / (med * 1e-3) / 1e12:.1f}", f"{100 * spread:.2f}%", ratio))
            del torch_ms

    header = ("shape", "mode", "baseline", "kernel us per run", "median us", "TFLOP/s", "spread (max-min)/median",
              "cuBLASLt/torch time")
    lines = [f"# Baseline timing spread ({args.reps} independent runs each)", ""]
    if env is not None:
        lines += [f"GPU: {env.gpu_name} ({env.sm_count} SMs), driver {env.driver}, CUDA {env.cuda}, "
                  f"torch {env.torch}, Triton {env.triton}; clocks at start {env.clocks_start}", ""]
    lines += ["Kernel time = CUDA-graph replay of calls over rotated input sets (offline: back to back; "
              "server: one call after an L2 flush and an exponential idle gap).", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if not have_nvmath():
        lines += ["", "cuBLASLt: not measured, nvmath-python is not importable here."]
    for k, v in notes.items():
        lines += ["", f"- {k}: {v}"]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
