"""The per-call cost of cudal2.matmul / cudal2.linear against torch's, as a user calls them: fp16,
layout NT (x @ W^T), back-to-back calls from Python, eager and under torch.compile.

    python benchmarks/op_overhead.py OUT.md [--shapes 1x4096x4096,16x14336x4096] [--budget 8]
        [--backends cute_dsl] [--store PATH] [--min-saving-us US] [--rounds 21] [--calls 200]
        [--eager-only] [--processes N]

1. Each shape is searched (cudal2.search at --budget, layout NT) and the store's table is loaded into
   the op, as a user's tuned table would be: the op serves a shape only where the search's kernel
   beat torch.matmul. --budget 0 searches nothing: with a fresh store the op serves nothing, and the
   figures are its fallback's cost.
2. Per shape and path, two figures, each the median of 21 rounds of 200 calls, the paths of a shape
   taking turns round by round, in reverse order every other round (the overhead is the median of the
   per-round differences):
   - host us: Python time per call with the GPU left to run behind (no synchronization inside the
     round; 200 launches stay within the launch queue). This is the op's overhead: what a host-bound
     model (small token counts, eager) pays per GEMM.
   - wall us: time per call of the same round including its synchronization (GPU-bound at large shapes).
   Paths: torch's call (F.linear, torch.matmul), F.linear behind a bare Python function (the floor of
   any op written in Python), and ours, eager (cudal2.linear, its C front where that builds, cudal2.op_front,
   and then its Python front beside it) and compiled (torch.compile of a module
   holding the weight; default mode, fullgraph, no_grad). "route" says what ours ran: the tuned kernel,
   or torch where the table does not serve the shape. A compiled graph that holds the op calls its C++
   launch path (cudal2.codegen.native_launch) where that builds; then the same graph traced with the Python op
   instead is timed too ("compiled cudal2.linear, Python op").
   --min-saving-us sets the op's EAGER_MIN_SAVING_US and TRACED_MIN_SAVING_US (default: the op's own):
   0 serves every shape whose kernel beat torch, so that the op's own path is what is timed.
3. Where the table does not serve a shape, the eager kernel route is also timed with the search's
   best kernel installed as that call's launcher (what a table hit installs): an overhead figure
   only, not a speed claim.
The overhead is ours minus torch's host time. JSON next to OUT.md holds every figure.
4. --eager-only times the eager paths alone: no torch.compile in the process. --processes N (after the
   searches, in this process) measures in N fresh processes one after another, each with the same store
   and flags, and reports per path the median over the processes of each process's median difference,
   with every process's figure. On the lent H200 hosts the fallback's difference over F.linear read +0.37
   and +1.07 us in two processes of one machine, whose F.linear call took 19.6 and 26.6 us (2026-11-29):
   a process's state moves a sub-microsecond figure more than its rounds do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))  # _rounds

from _rounds import interleaved, spread  # noqa: E402

ROUNDS, CALLS = 21, 200
# each path of ours, and torch's path it is compared with
PAIRS = {"cudal2.linear": "F.linear", "cudal2.matmul": "torch.matmul", "compiled cudal2.linear": "compiled nn.Linear",
         "cudal2.linear, kernel installed": "F.linear", "compiled cudal2.linear, Python op": "compiled nn.Linear",
         "Python wrapper of F.linear": "F.linear", "cudal2.linear, Python front": "F.linear"}


def python_wrapper(linear):
    """linear behind one Python function and nothing else: what any op written in Python pays a call on this
    host at least (the floor under cudal2.linear's fallback)."""
    def wrapper(x, weight, bias=None):
        return linear(x, weight, bias)
    return wrapper


def _round(fn) -> tuple[float, float]:
    """(host us, wall us) per call over one round of CALLS back-to-back calls."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    queued = time.perf_counter()
    torch.cuda.synchronize()
    done = time.perf_counter()
    return (queued - start) / CALLS * 1e6, (done - start) / CALLS * 1e6


def interleaved_us(paths: dict) -> dict:
    """Per path: host and wall us per call of every round. The paths take turns round by round, so a
    drift of the host (or the GPU clock) falls on all of them alike."""
    import torch

    for fn in paths.values():
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    # the order reversed every other round: a path's place in the round moves its host time (a bare Python
    # wrapper of F.linear, timed last in every round, read 0.15 us faster than F.linear, timed first; 2026-11-29)
    rounds = interleaved({name: lambda fn=fn: _round(fn) for name, fn in paths.items()}, ROUNDS)
    out = {}
    for name, r in rounds.items():
        host, wall = [h for h, _ in r], [w for _, w in r]
        out[name] = {"host_us": statistics.median(host), "wall_us": statistics.median(wall),
                     "host_rounds": host, "wall_rounds": wall}
    return out


def _modules(weight):
    import torch

    import cudal2

    class Torch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)

        def forward(self, x):
            return torch.nn.functional.linear(x, self.weight)

    class Ours(Torch):
        def forward(self, x):
            return cudal2.linear(x, self.weight)

    return Torch(), Ours()


def measure_shape(m: int, n: int, k: int, store, eager_only: bool = False) -> dict:
    import torch

    import cudal2
    from cudal2.codegen import native_launch
    from cudal2 import ops
    from cudal2.ir import GemmProblem

    problem = GemmProblem(m=m, n=n, k=k, layout="NT")
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16) / k ** 0.5
    entry = ops.tuned_table().lookup(problem, gpu=torch.cuda.get_device_name())
    row = {"shape": f"{m}x{n}x{k}", "served": entry is not None,
           "table_speedup": entry.speedup("torch") if entry else None,
           "spec": entry.spec.key() if entry else None, "spec_summary": entry.spec.summary() if entry else None}
    with torch.no_grad():
        want = x.float() @ w.float().t()
        got = cudal2.linear(x, w)
        row["rel_error"] = float((got.float() - want).norm() / want.norm())
        row["launch_path"] = served_path(x, w)
        paths = {"F.linear": lambda: torch.nn.functional.linear(x, w),
                 "cudal2.linear": lambda: cudal2.linear(x, w),
                 "torch.matmul": lambda: torch.matmul(x, w.t()),
                 "cudal2.matmul": lambda: cudal2.matmul(x, w.t()),
                 "Python wrapper of F.linear": lambda f=python_wrapper(torch.nn.functional.linear): f(x, w)}
        if ops._rebind_front is not None:  # cudal2.linear is the C front: its Python front beside it
            paths["cudal2.linear, Python front"] = lambda: ops._python_linear(x, w)
        if eager_only:
            row["paths"] = interleaved_us(paths)
            return row
        plain, ours = _modules(w)
        paths["compiled nn.Linear"] = lambda f=torch.compile(plain, fullgraph=True): f(x)
        paths["compiled cudal2.linear"] = lambda f=torch.compile(ours, fullgraph=True): f(x)
        paths["compiled cudal2.linear"]()  # traced now, with the native launch path where it builds
        row["compiled_graph"] = _graph_ops(ours, x)
        if native_launch.loaded():
            python_op = torch.compile(_modules(w)[1], fullgraph=True)
            native_launch._library, loaded = False, native_launch._library  # trace this one with the Python op
            try:
                python_op(x)
            finally:
                native_launch._library = loaded
            paths["compiled cudal2.linear, Python op"] = lambda f=python_op: f(x)
        if entry is None:
            forced = _forced_kernel_route(problem, store, x, w)
            if forced is not None:
                paths["cudal2.linear, kernel installed"] = forced
        row["paths"] = interleaved_us(paths)
    return row


def served_path(x, w) -> str | None:
    """The launch path (cudal2.bench.launch_cost.path_name: backend, launcher, launches a call) of the kernel
    the op bound for linear's call (x, w), or None where it runs torch (the op's private state)."""
    from cudal2 import ops
    from cudal2.bench.launch_cost import path_name

    launcher = ops._call_launcher(ops._linear_key(x, w, None), graphs=False)
    if launcher is None:
        return None
    return path_name(launcher.backend or "?", getattr(launcher.run, "launch_path", None))


def route_of(row: dict) -> str:
    """What ours ran for a row: the tuned kernel (its spec, launch path, and speedup in the search), or torch."""
    if not row["served"]:
        return "torch (the search found nothing faster)"
    spec, path = row.get("spec_summary"), row.get("launch_path")
    return " ".join(["tuned kernel", *([f"`{spec}`"] if spec else []), *([f"via {path}"] if path else []),
                     f"({row['table_speedup']:.3f}x torch in the search)"])


def _graph_ops(module, x) -> list[str]:
    """The targets of the graph torch.compile traces for module(x) (what the compiled path runs)."""
    import torch

    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch.compile(module, backend=backend, fullgraph=True)(x)
    return targets


def _forced_kernel_route(problem, store, x, w):
    """The op's eager path with the store's best kernel for problem installed as the call's launcher,
    or None when the store has no kernel for it."""
    from cudal2 import ops
    from cudal2.codegen import get_backend
    from cudal2.store.table import TunedTable

    best = [e for e in TunedTable.from_store(store) if e.problem.key() == problem.key()]
    if not best:
        return None
    backend = get_backend(best[0].spec.backend)
    kernel = backend.compile(backend.render(problem, best[0].spec))
    ops._launchers[ops._linear_key(x, w, None)] = ops._launcher(kernel, problem, (problem.m, problem.n), x.device)
    import cudal2

    return lambda: cudal2.linear(x, w)


def versions(env: dict) -> str:
    """The GPU and the versions a run's figures depend on, as its report's header says them."""
    front = {True: "its C front (cudal2.op_front)", False: "its Python front"}.get(env.get("c_front"), "?")
    if env.get("c_front") and env.get("probe"):
        front += f", its probe {env['probe']}"
    return (f"{env.get('gpu_name', '?')}; torch {env.get('torch', '?')}, Triton {env.get('triton', '?')}, "
            f"nvidia-cutlass-dsl {env.get('cutlass_dsl', '?')}, apache-tvm-ffi {env.get('tvm_ffi', '?')}; "
            f"cudal2.linear: {front}.")


def record_env() -> dict:
    """cudal2.bench.environment.record(), whether cudal2.linear is the op's C front (c_front), and its probe's
    state (op_front.probe_state())."""
    from cudal2 import op_front, ops
    from cudal2.bench.environment import record

    return {**record(), "c_front": ops._rebind_front is not None, "probe": op_front.probe_state()}


def report(rows: list[dict], env: dict, command: str) -> str:
    lines = [f"# Per-call cost of cudal2.linear / cudal2.matmul against torch ({env.get('date', '')})", "",
             f"`{command}`", "",
             versions(env), "",
             "Host us: Python time per call with the GPU running behind (the op's overhead). Wall us: per call "
             f"including the GPU. Medians of {ROUNDS} rounds of {CALLS} back-to-back calls, the paths taking turns "
             "round by round; host over torch's: the median of the per-round differences (quartiles).", "",
             "| shape | route | path | host us | wall us | host over torch's us |", "|---|---|---|---:|---:|---:|"]
    for row in rows:
        route = route_of(row)
        for name, t in row["paths"].items():
            base = row["paths"].get(PAIRS.get(name, ""))
            over = ""
            if base:  # the difference within each round, then its median and quartiles over the rounds
                mid, q1, q3 = spread(o - b for o, b in zip(t["host_rounds"], base["host_rounds"]))
                over = f"{mid:+.2f} ({q1:+.2f} to {q3:+.2f})"
            lines.append(f"| {row['shape']} | {route if name.startswith(('cudal2', 'compiled cudal2')) else 'torch'} "
                         f"| {name} | {t['host_us']:.2f} | {t['wall_us']:.2f} | {over} |")
    lines += ["", "What the compiled cudal2.linear graph calls (torch.compile's traced graph):", ""]
    lines += [f"- {row['shape']}: {', '.join(row.get('compiled_graph') or ['?'])}" for row in rows]
    return "\n".join(lines) + "\n"


def child_command(args, out: Path, store: str) -> list[str]:
    """This script's command for one measuring process of a --processes run: the same shapes, rounds, calls
    and flags, no search (--budget 0) on store, OUT replaced by out."""
    command = [sys.executable, str(Path(__file__).resolve()), str(out), "--shapes", args.shapes, "--budget", "0",
               "--store", store, "--rounds", str(args.rounds), "--calls", str(args.calls)]
    if args.min_saving_us is not None:
        command += ["--min-saving-us", str(args.min_saving_us)]
    return command + (["--eager-only"] if args.eager_only else [])


def combine(runs: list[dict]) -> list[dict]:
    """Per shape and path of our op, each process's median host difference over torch's path (us) and
    their median: runs are the processes' JSON outputs, in order."""
    out = []
    for i, row in enumerate(runs[0]["rows"]):
        for name, base in PAIRS.items():
            if name not in row["paths"]:
                continue
            per = [statistics.median(o - b for o, b in zip(r["rows"][i]["paths"][name]["host_rounds"],
                                                          r["rows"][i]["paths"][base]["host_rounds"])) for r in runs]
            torch_us = [r["rows"][i]["paths"][base]["host_us"] for r in runs]
            out.append({"shape": row["shape"], "served": row["served"], "path": name,
                        "route": route_of(row) if row["served"] else "torch", "over_us": statistics.median(per),
                        "over_us_per_process": per, "torch_host_us_per_process": torch_us})
    return out


def combined_report(combined: list[dict], env: dict, command: str, processes: int) -> str:
    lines = [f"# Per-call cost of cudal2.linear / cudal2.matmul against torch, {processes} processes "
             f"({env.get('date', '')})", "", f"`{command}`", "",
             versions(env), "",
             f"Each process: {ROUNDS} interleaved rounds of {CALLS} back-to-back calls per path, its figure the median "
             "of the per-round differences of host time per call. Over processes: the median of those figures.", "",
             "| shape | route | path | host over torch's us, median over processes | per process | torch's host us "
             "per process |", "|---|---|---|---:|---|---|"]
    for c in combined:
        lines.append(f"| {c['shape']} | {c['route']} | {c['path']} | {c['over_us']:+.2f} | "
                     f"{', '.join(f'{v:+.2f}' for v in c['over_us_per_process'])} | "
                     f"{', '.join(f'{v:.1f}' for v in c['torch_host_us_per_process'])} |")
    return "\n".join(lines) + "\n"


def _in_processes(args, store: str, command: str) -> None:
    runs = []
    for i in range(args.processes):
        out = args.out.with_name(f"{args.out.stem}.process{i}.md")
        subprocess.run(child_command(args, out, store), check=True)
        runs.append(json.loads(out.with_suffix(".json").read_text()))
    combined = combine(runs)
    env = record_env()
    args.out.write_text(combined_report(combined, env, command, args.processes))
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "env": env, "processes": args.processes,
                                                        "combined": combined, "runs": runs}, indent=1, default=str))
    print(args.out.read_text())


def main() -> None:
    global ROUNDS, CALLS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shapes", default="1x4096x4096,16x14336x4096")
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--backends", default="cute_dsl")
    ap.add_argument("--store", default=None, help="store for the searches (default: a file next to OUT)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per path")
    ap.add_argument("--calls", type=int, default=CALLS, help="back-to-back calls per round")
    ap.add_argument("--min-saving-us", type=float, default=None,
                    help="the op's EAGER_MIN_SAVING_US and TRACED_MIN_SAVING_US (default: its own)")
    ap.add_argument("--eager-only", action="store_true", help="time the eager paths alone (no torch.compile)")
    ap.add_argument("--processes", type=int, default=1, help="measure in this many fresh processes, one after another")
    args = ap.parse_args()

    import torch

    import cudal2
    from cudal2 import op_front, ops
    from cudal2.store.table import TunedTable

    if args.min_saving_us is not None:
        ops.EAGER_MIN_SAVING_US = ops.TRACED_MIN_SAVING_US = ops.NATIVE_TRACED_MIN_SAVING_US = args.min_saving_us

    # each shape traces the same forward three times (timed, inspected, with the Python op)
    torch._dynamo.reset()
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    store = args.store or str(args.out.with_suffix(".db"))
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ROUNDS, CALLS = args.rounds, args.calls
    for m, n, k in shapes if args.budget > 0 else []:
        cudal2.search((m, n, k), layout="NT", backends=args.backends.split(","), budget=args.budget, store=store,
                      progress=False)
    command = "python3 benchmarks/op_overhead.py " + " ".join(sys.argv[1:])
    if args.processes > 1:
        _in_processes(args, store, command)
        return
    ops.set_table(TunedTable.from_store(store))
    if torch.cuda.is_available():  # the front's probe bound before any timing, as in a process serving a while
        op_front.attach_probe(wait=True)
    rows = [measure_shape(m, n, k, store, args.eager_only) for m, n, k in shapes]
    env = record_env()
    args.out.write_text(report(rows, env, command))
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "env": env, "rows": rows},
                                                        indent=1, default=str))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
