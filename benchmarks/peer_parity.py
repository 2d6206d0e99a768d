"""Our CuTe DSL kernels against quack-kernels', config for config, on validation shapes. Every figure
is the project's evaluator (correctness first, CUDA-graph kernel time, torch.matmul interleaved),
offline mode, fp16, layout NT (x @ W^T), or each shape's own layout with --own-layout.

    python benchmarks/peer_parity.py OUT.md [--shapes serving:validation] [--sample 8] [--budget 16]
        [--own-layout] [--max-seconds 500]

Per shape, in one evaluator call each:
- (a) quack's autotuned config (quack's own autotuner, read from its cache), timed as quack forced to
  it, beside our kernel at the same config (the deepest pipeline that fits);
- (b) our search's winner (cudal2.search over cute_dsl at --budget), beside quack forced to that config
  where quack's kernel has that form (--budget 0: no search);
- (c) torch.matmul and quack_autotune (quack's autotuned call) as the evaluator's baselines, the
  check that quack forced to its autotuned config runs as fast as its autotuned call (it ran at
  0.67-0.91 until its config lookup was cached and the evaluator sized its graphs from the GPU's pace).
The report gives ours / quack per config (kernel time of quack over ours: above 1, ours is faster),
their geomeans, and how many of quack's sm90 configs our IR expresses (cudal2.bench.peers). Without
quack-kernels installed it says so in one line and exits 0. Its runs are in docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def deepest_spec(problem, fields):
    """The spec with the most stages (8 down to 2) the cute_dsl backend takes for problem, or None."""
    from cudal2.codegen import get_backend
    from cudal2.ir import KernelSpec, SpecError

    backend = get_backend("cute_dsl")
    for stages in range(8, 1, -1):
        try:
            spec = KernelSpec(**fields, stages=stages)
        except SpecError:
            continue
        if backend.supports(problem, spec):
            return spec
    return None


def expressible(problems, refused: dict[str, list[str]] | None = None) -> tuple[int, int]:
    """(quack sm90 configs our IR takes on every one of problems, all of them); refused: what
    refusals(problems) returned, where the caller has it already."""
    from cudal2.bench.peers import quack_sm90_configs

    refused = refusals(problems) if refused is None else refused
    total = len(quack_sm90_configs())
    return total - len({c for configs in refused.values() for c in configs}), total


def refusals(problems) -> dict[str, list[str]]:
    """Per refused (shape, reason): the quack sm90 configs our IR refuses there, with the backend's own
    reason (the reason of the fewest stages tried), so a report names what is missing where."""
    from cudal2.bench.peers import quack_sm90_configs
    from cudal2.codegen import get_backend
    from cudal2.ir import KernelSpec, SpecError

    backend, out = get_backend("cute_dsl"), {}
    for c in quack_sm90_configs():
        for p in problems:
            if deepest_spec(p, c.to_spec_fields()) is None:
                try:
                    why = backend.supports(p, KernelSpec(**c.to_spec_fields(), stages=2)).reason
                except SpecError as e:
                    why = str(e)
                out.setdefault(f"{p.label()}: {why.splitlines()[0][:200]}", []).append(c.label())
    return out


def pair(problem, ours_spec, peer_config) -> dict:
    """Our kernel and quack's at one config, timed in one evaluator call with torch."""
    from cudal2.bench.evaluator import evaluate
    from cudal2.bench.peers import QuackAtConfig

    candidates = {}
    if ours_spec is not None:
        candidates["ours"] = ours_spec
    if peer_config is not None:
        candidates["quack"] = QuackAtConfig(peer_config)
    # quack's autotuned call timed in the same call too (quack_vs_sweep's figure): the check that
    # quack forced to the config its autotuner ran is the same quack
    report = evaluate(problem, candidates, baselines=("torch", "quack_autotune"))
    torch_ms = report.baselines["torch"].kernel_ms() if report.baselines.get("torch") else None
    auto = report.baselines.get("quack_autotune")
    row = {"config": peer_config.label() if peer_config else None,
           "spec": ours_spec.summary() if ours_spec else None, "torch_ms": torch_ms,
           "quack_autotune_ms": auto.kernel_ms() if auto is not None and auto.available else None}
    for r in report.candidates:
        row[f"{r.name}_ms"] = r.kernel_ms() if r.ok else None
        row[f"{r.name}_status"] = r.status
    if row.get("ours_ms") and row.get("quack_ms"):
        row["ours_over_quack"] = row["quack_ms"] / row["ours_ms"]
    if row.get("ours_ms") and torch_ms:
        row["ours_vs_torch"] = torch_ms / row["ours_ms"]
    if row.get("quack_ms") and torch_ms:
        row["quack_vs_torch"] = torch_ms / row["quack_ms"]
    return row


def measure_shape(problem, budget: int) -> dict:
    import torch

    import cudal2
    from cudal2.bench.peers import PeerConfig, autotuned_config

    a = (torch.randn(problem.k, problem.m, dtype=torch.float16, device="cuda").t() if problem.layout[0] == "T"
         else torch.randn(problem.m, problem.k, dtype=torch.float16, device="cuda"))
    b = (torch.randn(problem.n, problem.k, dtype=torch.float16, device="cuda").t() if problem.layout[1] == "T"
         else torch.randn(problem.k, problem.n, dtype=torch.float16, device="cuda"))
    tuned = autotuned_config(a, b)  # quack tunes per operand layout: tune on the shape's own
    del a, b
    out = {"shape": problem.label(), "quack_autotuned": tuned.label() if tuned else None}
    if tuned is not None:
        out["a"] = pair(problem, deepest_spec(problem, tuned.to_spec_fields()), tuned)
    res = cudal2.search(problem, backends=("cute_dsl",), budget=budget, progress=False) if budget > 0 else None
    if res is not None and res.best is not None:
        out["b"] = pair(problem, res.best.spec, PeerConfig.from_spec(res.best.spec))
    return out


def refused_lines(refused: dict[str, list[str]]) -> list[str]:
    """The refusals of refusals(), one line per shape and reason."""
    return [f"- refused on {where} ({len(configs)}: {', '.join(configs)})" for where, configs in refused.items()]


def markdown(out: dict) -> str:
    lines = ["# Our CuTe DSL kernels against quack's, config for config", "",
             f"Command: `{out['command']}`", "", f"GPU: {out.get('gpu', '?')}; {out['date']}", "",
             f"quack sm90 configs our IR expresses on these shapes: {out['expressible'][0]} of {out['expressible'][1]}",
             *refused_lines(out.get("refused") or {}),
             "", "| shape | config | ours us | quack us | quack / ours | ours vs torch | quack vs torch | "
             "quack_autotune us |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    fmt = lambda x, scale=1.0: f"{x * scale:.1f}" if isinstance(x, float) and scale != 1.0 else (  # noqa: E731
        f"{x:.3f}" if isinstance(x, float) else "-")
    for s in out["shapes"]:
        for part, name in (("a", "quack's pick"), ("b", "our pick")):
            r = s.get(part)
            if r:
                lines.append(f"| {s['shape']} | {name}: {r['config'] or r['spec']} | {fmt(r.get('ours_ms'), 1e3)} | "
                             f"{fmt(r.get('quack_ms'), 1e3)} | {fmt(r.get('ours_over_quack'))} | "
                             f"{fmt(r.get('ours_vs_torch'))} | {fmt(r.get('quack_vs_torch'))} | "
                             f"{fmt(r.get('quack_autotune_ms'), 1e3)} |")
    for part, name in (("a", "at quack's autotuned configs"), ("b", "at our search's winners")):
        g = geomean([s[part].get("ours_over_quack") for s in out["shapes"] if s.get(part)])
        lines.append("")
        lines.append(f"- {name}: quack / ours geomean {g:.3f}" if g else f"- {name}: no pair measured")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shapes", default="serving:validation")
    ap.add_argument("--sample", type=int, default=8)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--own-layout", action="store_true", help="each shape's own layout (default: NT)")
    ap.add_argument("--max-seconds", type=float, default=500)
    args = ap.parse_args()
    try:
        import quack.gemm_interface  # noqa: F401
    except Exception as e:  # ImportError, or a quack whose own imports fail here
        print(f"peer_parity: quack-kernels is not importable ({type(e).__name__}: {e}); pip install quack-kernels")
        return 0
    import torch

    from cudal2.dataset.sweep import draw_shapes, resolve_shapes

    problems = [p if args.own_layout else p.replace(layout="NT")
                for p in draw_shapes(resolve_shapes(args.shapes), args.sample)]
    refused = refusals(problems)
    out = {"command": "python benchmarks/peer_parity.py " + " ".join(sys.argv[1:]),
           "gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
           "expressible": expressible(problems, refused), "refused": refused, "shapes": []}
    deadline = time.time() + args.max_seconds
    for problem in problems:
        if time.time() > deadline:
            break
        out["shapes"].append(measure_shape(problem, args.budget))
        args.out.write_text(markdown(out))
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
        print(markdown(out).splitlines()[-4], flush=True)
    print(markdown(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
