"""Triton split-K reduced in one launch ("serial") against its two-launch workspace twin: the evaluator's time
of each in chain mode (its checks included) and the host time one eager call of each costs beyond F.linear's.

    python benchmarks/split_k_serial.py OUT.md --winners benchmarks/results/crosscheck_winners_chain_h200_2026-11-29.json
        [--max-seconds 150]
    python benchmarks/split_k_serial.py OUT.md --train 24 [--max-seconds 150]

Which specs: --winners, each split-K winner of a crosscheck_winners run (validation shapes) whose reduction is
the workspace; --train N, N serving shapes of the split's train part drawn with a fixed seed among those where
the rules' 16 Triton proposals split K, the first such proposal with the workspace reduction (the figures the
rules' serial_reduction_us factor is fitted on). Each spec is timed beside its twin with
split_k_reduction="serial" (the slice that finishes a tile last sums its partials in slice order: the same bits,
no second kernel). Both are
timed by one Evaluator call in chain mode under Evaluator.full_timing (the search's confirmation timing), beside
torch.matmul. The eager host cost is cudal2.bench.launch_cost.measure_us of each kernel's bound launch (a layout-NT
call as cudal2.linear makes it) against F.linear on the same operands: the figure the op's eager rule compares
with a kernel's saving. Writes OUT.md and OUT.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from _outputs import write_results  # noqa: E402
from crosscheck_winners import problem_of  # noqa: E402  (a winners row's label: "MxNxK-dtype-layout")


def host_costs_us(problem, specs: dict) -> dict[str, float]:
    """Per named spec: host us of one eager launch of its bound kernel beyond F.linear's (launch_cost.measure_us)."""
    import torch
    from torch.nn import functional as F

    from cudal2 import get_backend
    from cudal2.bench.launch_cost import measure_us

    m, n, k = problem.shape
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    out = {}
    for name, spec in specs.items():
        backend = get_backend(spec.backend)
        run = backend.compile(backend.render(problem, spec)).bind(m, n, k, torch.device("cuda"))
        d = torch.empty(m, n, device="cuda", dtype=torch.float16)
        run(x, w, d, None)  # the first call goes through the JIT and keeps its compiled launches

        def launch(run=run):
            run(x, w, torch.empty(m, n, device="cuda", dtype=torch.float16), None)
        out[name] = measure_us(launch, lambda: F.linear(x, w))
        out[name + "_path"] = getattr(run, "launch_path", None) or "one launch"
        torch.testing.assert_close(d, F.linear(x, w), rtol=2e-2, atol=2e-2)
    return out


def train_specs(count: int, seed: int = 20261130) -> list[tuple[str, "object"]]:
    """(shape label, spec): count train serving shapes where the rules' 16 Triton proposals split K, drawn with
    seed, each with the first such proposal (workspace reduction)."""
    import random

    from cudal2.proposers.rules import RulesProposer
    from cudal2.shapes import shapes

    rules = RulesProposer(("triton",))
    found = []
    for shape in shapes("serving", "train"):
        problem = problem_of(shape.label)
        split = [p.spec for p in rules.propose(problem, n=16) if p.spec.decomposition == "split_k"]
        if split:
            found.append((shape.label, split[0].model_copy(update={"split_k_reduction": "workspace"})))
    return sorted(random.Random(seed).sample(found, min(count, len(found))), key=lambda f: f[0])


def winner_specs(path: Path) -> list[tuple[str, "object"]]:
    """(shape label, spec): the split-K winners of a crosscheck_winners run whose reduction is the workspace."""
    from cudal2 import KernelSpec

    out = []
    for row in json.loads(path.read_text())["rows"]:
        spec = KernelSpec.from_json(row["spec_json"]) if row.get("spec_json") else None
        if spec is not None and spec.decomposition == "split_k" and spec.split_k_reduction == "workspace":
            out.append((row["shape"], spec))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--winners", type=Path, help="a crosscheck_winners JSON: its split-K winners")
    which.add_argument("--train", type=int, help="this many train shapes, the rules' split-K proposal of each")
    ap.add_argument("--max-seconds", type=float, default=150)
    args = ap.parse_args()

    import torch

    from cudal2.bench.environment import record
    from cudal2.bench.evaluator import Evaluator

    chosen = winner_specs(args.winners) if args.winners else train_specs(args.train)
    source = (f"The split-K winners of {args.winners.name}" if args.winners else
              f"{len(chosen)} train serving shapes (seed 20261130), the rules' first Triton split-K proposal of each")
    rows, start = [], time.time()
    with Evaluator() as ev:
        for label, spec in chosen:
            if time.time() - start > args.max_seconds:
                break
            problem = problem_of(label)
            specs = {"workspace": spec, "serial": spec.model_copy(update={"split_k_reduction": "serial"})}
            with ev.full_timing():
                got = ev.evaluate(problem, list(specs.values()), modes=("chain",))
                base = ev.baselines(problem, ("chain",))
            out = {"shape": label, "spec": spec.summary(), "torch_us": base["torch"].kernel_ms("chain") * 1e3}
            for name, res in zip(specs, got):
                out[name + "_status"] = res.status
                out[name + "_us"] = res.kernel_ms("chain") * 1e3 if res.ok else None
            out.update(host_costs_us(problem, specs))
            rows.append(out)
            print(json.dumps(out), flush=True)
            torch.cuda.empty_cache()
    env = record()
    command = "python benchmarks/split_k_serial.py " + " ".join(sys.argv[1:])
    lines = [f"# Split-K in one launch (serial) against the workspace reduction's two ({env['date']})", "",
             f"`{command}`", "",
             f"{env.get('gpu_name', '?')}, {env.get('gpu_uuid', '?')}; torch {env.get('torch', '?')}, Triton "
             f"{env.get('triton', '?')}. {source}, each with the workspace reduction "
             "and with split_k_reduction='serial'. GPU us: the evaluator in chain mode (full timing), its checks "
             "passed (status). Host us: one eager launch of the bound kernel beyond F.linear's "
             "(cudal2.bench.launch_cost.measure_us).", "",
             "| shape | spec | torch us | workspace us | serial us | workspace / serial time | host us workspace "
             "| host us serial |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ws, se = r["workspace_us"], r["serial_us"]
        ratio = f"{ws / se:.3f}" if ws and se else "-"
        lines.append(f"| {r['shape']} | `{r['spec']}` | {r['torch_us']:.2f} | "
                     f"{ws if ws is None else f'{ws:.2f}'} ({r['workspace_status']}) | "
                     f"{se if se is None else f'{se:.2f}'} ({r['serial_status']}) | {ratio} | "
                     f"{r['workspace']:+.2f} ({r['workspace_path']}) | {r['serial']:+.2f} ({r['serial_path']}) |")
    write_results(args.out, lines, command, env, rows)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
