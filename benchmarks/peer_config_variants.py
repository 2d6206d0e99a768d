"""Our cute_dsl kernel at one of quack's configs, in the variants our IR adds (the deepest three pipelines
that fit, raster groups 1 and 8, and the shape-generic kernel at the deepest), beside quack's kernel
forced to that config: one evaluator call per (shape, config), offline kernel time, torch.matmul as
the baseline. It tells whether a gap at a config is the pipeline depth or rasterization, or the
kernel itself.

    python benchmarks/peer_config_variants.py OUT.json [--cases 16x9216x3072:128x160pp12,...]

A case is MxNxK:TILE_MxTILE_N{pp|co}CLUSTER_M CLUSTER_N[s] (pp: ping-pong, co: cooperative, s: swap_ab;
tile and cluster in quack's terms), layout NT.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # run from a checkout without installing

CASES = "16x9216x3072:128x160pp12,16x9216x3072:128x128pp12,128x8192x3584:128x128pp12"


def parse_case(text: str):
    from cudal2.bench.peers import PeerConfig
    from cudal2.ir import GemmProblem

    shape, config = text.split(":")
    m, n, k = (int(v) for v in shape.split("x"))
    tm, rest = config.split("x")
    kind = "pp" if "pp" in rest else "co"
    tn, cluster = rest.split(kind)
    return GemmProblem(m=m, n=n, k=k, layout="NT"), PeerConfig(int(tm), int(tn), kind == "pp", int(cluster[0]),
                                                              int(cluster[1]), cluster.endswith("s"))


def variants(problem, config) -> dict:
    """The deepest pipeline that fits (peer_parity's choice) and the two below it that fit too, each
    with raster groups 1 and 8."""
    from peer_parity import deepest_spec  # benchmarks/, beside this file

    from cudal2.codegen import get_backend
    from cudal2.ir import KernelSpec, SpecError

    backend, base = get_backend("cute_dsl"), config.to_spec_fields()
    deepest = deepest_spec(problem, base)
    fits = []
    for stages in range(max(2, deepest.stages - 2), deepest.stages + 1) if deepest else ():
        try:
            if backend.supports(problem, KernelSpec(**base, stages=stages)):
                fits.append(stages)
        except SpecError:
            continue
    out = {f"s{s} g{g}": KernelSpec(**base, stages=s, raster_group=g, raster_order="along_m")
           for s in fits for g in (1, 8)}
    if fits:  # the shape-generic kernel at the deepest pipeline (if the backend takes it for this shape)
        dyn = KernelSpec(**base, stages=fits[-1], raster_group=8, raster_order="along_m", shape_specialization="dynamic")
        if backend.supports(problem, dyn):
            out[f"s{fits[-1]} g8 dynamic"] = dyn
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cases", default=CASES)
    args = ap.parse_args()
    try:
        import quack.gemm_interface  # noqa: F401
    except Exception as e:  # ImportError, or a quack whose own imports fail here
        print(f"peer_config_variants: quack-kernels is not importable ({type(e).__name__}: {e}); pip install quack-kernels")
        return 0
    from cudal2.bench.evaluator import evaluate
    from cudal2.bench.peers import QuackAtConfig

    out = []
    for case in args.cases.split(","):
        problem, config = parse_case(case)
        report = evaluate(problem, {"quack": QuackAtConfig(config), **variants(problem, config)}, baselines=("torch",))
        ms = {r.name: (r.kernel_ms() if r.ok else r.status) for r in report.candidates}
        quack = ms.get("quack")
        print(f"{problem.label()} at {config.label()}: torch {report.baselines['torch'].kernel_ms() * 1e3:.2f} us", flush=True)
        for name, t in sorted(ms.items(), key=lambda kv: kv[1] if isinstance(kv[1], float) else 1e9):
            ratio = f"quack / this {quack / t:.3f}" if isinstance(t, float) and isinstance(quack, float) else ""
            print(f"   {name:8s} " + (f"{t * 1e3:8.2f} us  {ratio}" if isinstance(t, float) else str(t)), flush=True)
        out.append({"shape": problem.label(), "config": config.label(), "torch_ms": report.baselines["torch"].kernel_ms(),
                    "kernel_ms": ms})
    args.out.write_text(json.dumps({"command": "python benchmarks/peer_config_variants.py " + " ".join(sys.argv[1:]),
                                    "cases": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
