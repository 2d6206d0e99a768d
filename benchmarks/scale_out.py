"""Sweep rate on one GPU against several: checked (spec, shape) pairs per second of the loop of
`cudal2 sweep`, in one process on GPU 0, then on a Dask cluster (dask-cuda's LocalCUDACluster) of
1 GPU worker and of N. The scale-out target: N=2 GPUs measure at least 1.8x the pairs/s of one.

    python benchmarks/scale_out.py OUT.json [--gpus 2] [--specs 64] [--shapes serving:train]
        [--max-gflop 1] [--sample 14] [--warm 2] [--recorded]

--recorded checks the script on a CPU: the recorded runner and CPU workers, synthetic numbers.

On the lent 2-GPU machine (no network there: dask, distributed, dask-cuda and what they need
travel as wheels in .whl/, which `tools/device_env.sh` installs):

    export PYTHONPATH=$(bash tools/device_env.sh) && python benchmarks/scale_out.py "$OUT/scale_out.json"

Method, the same for each configuration: the specs are drawn from the Triton catalog (fixed
seed), the shapes from SHAPES (at most MAX_GFLOP each, SAMPLE drawn with a fixed seed). The first
WARM shapes are swept first, into a throwaway store, by the same runners that are then timed:
that compiles every spec on every worker (and fills Triton's disk cache), so that the timed part
measures the steady rate, as a long sweep sees it. The timed part sweeps the other shapes into a
fresh store; pairs/s is its pairs over its wall time, writes to the store included. The cluster
is started (and its workers' runners made) before any clock runs. OUT.json is rewritten after
each configuration, so a run cut short keeps what it measured. No figure is claimed here: this
script only measures.

Then, on the N-worker cluster, the kill: the timed shapes are swept again into a fresh store, and
once the second batch is stored one worker is killed (SIGKILL) while it measures its next batch.
Its nanny starts it again. The figures: whether the sweep completed, whether every pair is in the
store exactly once, SQLite's integrity check, the pids before and after, and a second run of the
same command on that store (it must find every pair there and measure none).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def workload(args):
    from cudal2.api import default_arch
    from cudal2.dataset import draw_shapes, resolve_shapes
    from cudal2.proposers import catalog

    problems = [p for p in resolve_shapes(args.shapes) if p.flops / 1e9 <= args.max_gflop]
    problems = draw_shapes(problems, args.sample)
    if len(problems) <= args.warm:
        sys.exit(f"{len(problems)} shapes left for --warm {args.warm}: give more (--sample, --max-gflop)")
    specs = catalog.sample(args.specs, "triton", default_arch())
    return problems[:args.warm], problems[args.warm:], specs


def versions(recorded: bool) -> dict:
    """The GPU, driver and versions (the evaluator's record), with Dask's."""
    import importlib.metadata as md

    from cudal2.bench import environment

    env = {} if recorded else environment.record()
    for name in ("dask", "distributed", "dask-cuda"):
        try:
            env[name] = md.version(name)
        except md.PackageNotFoundError:
            env[name] = "not installed"
    return env


def timed(sweep, problems, specs, store) -> dict:
    started = time.perf_counter()
    summary = sweep(problems, specs, store)
    seconds = time.perf_counter() - started
    gpus = sorted({(r["environment"] or {}).get("gpu_uuid", "") for r in store.kernels()})
    return {"pairs": summary.measured, "correct": summary.correct, "seconds": round(seconds, 2),
            "pairs_per_s": round(summary.measured / seconds, 2), "gpu_uuids": gpus,
            "gpu": sorted(store.gpu_models())}


def make_runner(recorded: bool, on_worker: bool):
    """The runner a configuration sweeps with (on_worker: the callable that makes it on a worker)."""
    import functools

    from cudal2.bench.timing import TimingConfig

    if recorded:
        from cudal2.tuner.recorded import RecordedRunner

        return functools.partial(RecordedRunner, delay_s=0.005)
    if on_worker:
        from cudal2.dataset.cluster_worker import gpu_runner

        return functools.partial(gpu_runner, timing=TimingConfig.sweep())
    from cudal2.api import default_runner

    return functools.partial(default_runner, timing=TimingConfig.sweep())


def one_process(warm, problems, specs, tmp: Path, recorded: bool) -> dict:
    from cudal2.dataset import run_sweep
    from cudal2.store.store import Store

    runner = make_runner(recorded, on_worker=False)()
    try:
        run_sweep(warm, specs, runner, Store(tmp / "warm_one.db"))
        return timed(lambda p, s, st: run_sweep(p, s, runner, st), problems, specs, Store(tmp / "one.db"))
    finally:
        if hasattr(runner, "close"):
            runner.close()


def on_cluster(n: int, warm, problems, specs, tmp: Path, recorded: bool) -> dict:
    from cudal2.dataset import cluster
    from cudal2.dataset.cluster_sweep import run_sweep_on_cluster
    from cudal2.store.store import Store

    with cluster.open_cluster(n, gpus=not recorded) as client:
        with cluster.runner_on_workers(client, make_runner(recorded, on_worker=True)) as name:
            run_sweep_on_cluster(warm, specs, client, name, Store(tmp / f"warm_{n}.db"))
            out = timed(lambda p, s, st: run_sweep_on_cluster(p, s, client, name, st), problems, specs,
                        Store(tmp / f"cluster_{n}.db"))
    return {**out, "workers": n}


class _KillOne:
    """on_pairs that kills one worker (SIGKILL) once `after` batches are stored: the batches in
    flight are then mid-measurement."""

    def __init__(self, client, after: int = 2):
        self.client, self.after, self.batches, self.killed, self.at_s = client, after, 0, None, None
        self.started = time.perf_counter()

    def __call__(self, n: int, label: str) -> None:
        import os
        import signal

        if n == 0:
            return
        self.batches += 1
        print(f"  {time.perf_counter() - self.started:7.1f} s  batch {self.batches} stored ({label})", flush=True)
        if self.killed is not None:
            return
        if self.batches == self.after:
            self.killed = sorted(self.client.run(os.getpid).values())[0]
            self.at_s = round(time.perf_counter() - self.started, 2)
            os.kill(self.killed, signal.SIGKILL)
            print(f"  killed worker pid {self.killed} at {self.at_s} s", flush=True)


def killed_on_cluster(n: int, problems, specs, tmp: Path, recorded: bool) -> dict:
    """The timed shapes swept on n workers, one of them killed mid-sweep; then the same sweep again."""
    import os
    import sqlite3

    from cudal2.dataset import cluster
    from cudal2.dataset.cluster_sweep import run_sweep_on_cluster
    from cudal2.store.store import Store

    db = tmp / f"killed_{n}.db"
    with cluster.open_cluster(n, gpus=not recorded) as client:
        with cluster.runner_on_workers(client, make_runner(recorded, on_worker=True)) as name:
            before = sorted(client.run(os.getpid).values())
            print(f"kill run: {n} workers up, pids {before}", flush=True)
            kill = _KillOne(client)
            started = time.perf_counter()
            summary = run_sweep_on_cluster(problems, specs, client, name, Store(db), on_pairs=kill)
            seconds = time.perf_counter() - started
            client.wait_for_workers(n, timeout=120)
            after = sorted(client.run(os.getpid).values())
            print(f"kill run: sweep done in {seconds:.1f} s, {summary.measured} pairs; workers now {after}", flush=True)
            again = run_sweep_on_cluster(problems, specs, client, name, Store(db))
    records = Store(db).kernels()
    pairs = {(r["problem"].key(), r["result"].spec.key()) for r in records}
    with sqlite3.connect(db) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    return {"workers": n, "pairs_expected": len(problems) * len(specs), "pairs_measured": summary.measured,
            "pairs_stored": len(records), "pairs_distinct": len(pairs), "correct": summary.correct,
            "seconds": round(seconds, 2), "pairs_per_s": round(summary.measured / seconds, 2),
            "killed_pid": kill.killed, "killed_at_s": kill.at_s, "pids_before": before, "pids_after": after,
            "sqlite_integrity": integrity, "rerun_measured": again.measured, "rerun_already": again.already}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--specs", type=int, default=64)
    ap.add_argument("--shapes", default="serving:train")
    ap.add_argument("--max-gflop", type=float, default=1.0)
    ap.add_argument("--sample", type=int, default=14)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--recorded", action="store_true", help="CPU check: the recorded runner, synthetic numbers")
    ap.add_argument("--parts", default="one,cluster,kill",
                    help="which to run: one (one process), cluster (Dask, 1 and N workers), kill (N, one killed)")
    args = ap.parse_args()
    warm, problems, specs = workload(args)
    report: dict = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"), "specs": len(specs),
                    "environment": versions(args.recorded),
                    "runner": "recorded (synthetic numbers, not GPU timings)" if args.recorded else "gpu",
                    "warm_shapes": [p.label() for p in warm], "shapes": [p.label() for p in problems]}

    def save(name: str, figures: dict) -> None:
        report[name] = figures
        one = report.get("one_process", {}).get("pairs_per_s")
        for key in [k for k in report if k.startswith("cluster_")]:
            if one and report[key].get("pairs_per_s"):
                report[key]["over_one_process"] = round(report[key]["pairs_per_s"] / one, 3)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(name, json.dumps(figures), flush=True)

    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        if "one" in parts:
            save("one_process", one_process(warm, problems, specs, Path(tmp), args.recorded))
        for n in sorted({1, args.gpus}) if "cluster" in parts else ():
            save(f"cluster_{n}", on_cluster(n, warm, problems, specs, Path(tmp), args.recorded))
        if "kill" in parts:
            save(f"killed_{args.gpus}", killed_on_cluster(args.gpus, problems, specs, Path(tmp), args.recorded))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
