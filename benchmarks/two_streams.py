"""One served kernel called by cudal2.linear on two CUDA streams at once: how many outputs differ from the kernel
called alone, with the op's launches as they are and, as a negative control, as they were before they followed the
stream (no wait for the workspace's previous stream, one TMA descriptor scratch for every stream).

    python benchmarks/two_streams.py OUT.md [--calls 400]

For each kernel (Triton, 16x3072x3072 fp16, layout NT: split-K 4 reduced serially, split-K 4 reduced by the
workspace's second kernel, and a TMA kernel that does not split K), in a process of its own per variant: the op
serves it (a table of one entry), and --calls inputs go through cudal2.linear alternately on two streams, 40 at a
time held back by a gate (both streams wait for an event that a third stream records after sleeping about 25 ms),
so that their kernels run at the same time wherever nothing orders them (tests/test_ops.py's
_two_streams_at_once). Each output is compared bit for bit with the same kernel called alone on the default stream.
Writes OUT.md and OUT.json. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))  # _outputs

from _outputs import write_results  # noqa: E402

KERNELS = {
    "split-K 4, serial": dict(decomposition="split_k", split_k=4, split_k_reduction="serial", load_path="pointer"),
    "split-K 4, workspace": dict(decomposition="split_k", split_k=4, split_k_reduction="workspace",
                                 load_path="pointer"),
    "TMA, no split": dict(load_path="tma"),
}
TILE = dict(backend="triton", block_m=16, block_n=64, block_k=128, stages=4, num_warps=4)
VARIANTS = ("as they are", "before (negative control)")


def _launches_as_before() -> None:
    """The op's launches as they were before they followed the stream: no wait, one TMA scratch for all streams."""
    import torch

    from cudal2.codegen import triton as triton_backend
    from cudal2.codegen.workspace import Workspace

    def one_scratch(self, device):
        def allocate(size, alignment, stream):
            held = self._scratch.get("one")
            if held is None or held.numel() < size:
                held = self._scratch["one"] = torch.empty(size, dtype=torch.int8, device=device)
            return held
        return allocate

    Workspace.follow_stream = lambda self, index: None
    triton_backend.TritonKernel._scratch_on = one_scratch


def one(kernel: str, variant: str, calls: int) -> dict:
    """The count of outputs that differ, for one kernel and variant (run in a process of its own)."""
    import torch

    import cudal2
    from cudal2 import ops
    from cudal2.codegen import get_backend
    from cudal2.ir import GemmProblem, KernelSpec
    from cudal2.store.table import TunedEntry, TunedTable
    from test_ops import _two_streams_at_once

    if variant == VARIANTS[1]:
        _launches_as_before()
    problem = GemmProblem(m=16, n=3072, k=3072, layout="NT")
    spec = KernelSpec(**TILE, **KERNELS[kernel])
    ops.set_table(TunedTable([TunedEntry(problem=problem, spec=spec, kernel_ms=0.010, baselines_ms={"torch": 1.0},
                                         gpu="")]))
    backend = get_backend("triton")
    alone = backend.compile(backend.render(problem, spec))
    w = torch.randn(3072, 3072, device="cuda", dtype=torch.float16) / 64
    xs = [torch.randn(16, 3072, device="cuda", dtype=torch.float16) for _ in range(calls)]
    with torch.no_grad():
        expected = [alone(x, w.t()) for x in xs]
        cudal2.linear(xs[0], w)
        torch.cuda.synchronize()
        outs = []
        for start in range(0, calls, 40):
            outs += _two_streams_at_once(lambda x: cudal2.linear(x, w), xs[start:start + 40])
    served = getattr(ops._launchers.get(ops._linear_key(xs[0], w, None)), "backend", None)
    return {"kernel": kernel, "variant": variant, "calls": calls, "served_by": served or "torch",
            "differ": sum(not torch.equal(got, want) for got, want in zip(outs, expected))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--one", nargs=2, metavar=("KERNEL", "VARIANT"), help=argparse.SUPPRESS)  # a child's run
    args = ap.parse_args()
    if args.calls < 40 or args.calls % 40:
        sys.exit("two_streams.py: --calls takes a multiple of 40 (the calls one gate holds back)")
    if args.one:
        print(json.dumps(one(*args.one, args.calls)))
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit("two_streams.py needs a CUDA GPU, and torch sees none here; run it on one")
    from cudal2.bench.environment import record

    rows = []
    for kernel in KERNELS:
        for variant in VARIANTS:
            child = subprocess.run([sys.executable, __file__, str(args.out), "--calls", str(args.calls), "--one",
                                    kernel, variant], capture_output=True, text=True)
            if child.returncode:
                sys.exit(f"two_streams.py: the run of {kernel!r} ({variant}) failed: "
                         f"{(child.stderr.strip().splitlines() or ['no output'])[-1]}")
            rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    env = record()
    command = "python benchmarks/two_streams.py " + " ".join(sys.argv[1:])
    lines = [f"# One served kernel on two CUDA streams at once ({env.get('date', '')})", "", f"`{command}`", "",
             f"{env.get('gpu_name')} ({env.get('gpu_uuid')}); torch {env.get('torch')}, Triton {env.get('triton')}. "
             "16x3072x3072 fp16, layout NT, through cudal2.linear; calls alternate between two streams, 40 at a time "
             "held back by a gate so that they can run at once. Outputs compared bit for bit with the kernel called "
             "alone.", "",
             "| kernel | op's launches | served by | calls | outputs that differ |", "|---|---|---|---:|---:|"]
    lines += [f"| {r['kernel']} | {r['variant']} | {r['served_by']} | {r['calls']} | {r['differ']} |" for r in rows]
    write_results(args.out, lines, command, env, rows)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
