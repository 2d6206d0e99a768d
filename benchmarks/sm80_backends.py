"""The cuda_cpp backend's sm_80 kernels against the Triton backend forced to sm_80 code, on one GPU
(an H100 runs both as sm_90 binaries), shape by shape; torch.matmul beside them.

    python benchmarks/sm80_backends.py OUT.md --probe h100_probe_cublas_vs_triton.json \\
        [--validation serving:validation --val-sample 16 --val-max-gflop 600] [--specs 12] \\
        [--confirm-rounds 1] [--max-seconds 450] [--store OUT.db] [--recorded]

On the lent H100 (no network: the CUTLASS headers' wheel, and cuda-bindings where the image
lacks it, travel as wheels that tools/device_env.sh installs; the store goes to /tmp and comes
back compressed, since a file that comes back may hold 16 MiB at most):

    export PYTHONPATH=$(bash tools/device_env.sh) PYTHONUNBUFFERED=1
    timeout 590 python3 benchmarks/sm80_backends.py $OUT/sm80_backends.md --store /tmp/sm80.db \\
        --probe .carry/data/h100_probe_cublas_vs_triton.json --max-seconds 450
    gzip -c /tmp/sm80.db > $OUT/sm80_backends.db.gz

The defaults are sized for one such command: 64 shapes x 12 specs x 2 backends = 1536 checked
pairs (the sweep has measured 2.6 to 17 checked pairs a second on the H100, depending on the
shapes and how many specs share an evaluator call), 64 confirmations, 24 nvcc compiles beside
them. A run cut short continues from its store (gunzip it back to the same path).

The procedure, the same for both backends:
1. Shapes: the 48 probe shapes (fp16, NN) and VAL_SAMPLE shapes of the validation serving split
   (fp16, NT, as nn.Linear runs them) of at most VAL_MAX_GFLOP each, drawn with the project's
   fixed seed (dataset.draw_shapes); the two sets interleaved, so a run cut short spans both.
2. Kernels: a pool of SPECS specs per backend, all at arch sm_80 and shape-generic (M, N, K at
   run time: one compile serves every shape of a problem class, which is all cuda_cpp builds). Each
   pool is drawn by the same rule from the rules proposer, run for that backend alone at sm_80
   with the SMs and L2 of an H100 (--sms, --l2-mb; fixed, so a CPU machine draws the same pool):
   its DEPTH best proposals on every shape of the run are ranked lists, and specs are taken
   greedily, each time the one that most raises the sum over shapes of 1/(1 + rank of the
   best-ranked spec taken so far). No measurement picks a pool spec.
3. Measuring: every (pool spec, shape) pair of both backends through the loop of `cudal2 sweep`
   (dataset.run_sweep, into the store; the project's evaluator with its correctness checks on
   every pair: several seeds, NaN-poisoned output, fp32 reference, the long-K accumulator probe,
   stream order) in the sweep's timing (CUDA-graph kernel time, offline), torch.matmul timed with
   the shape's first call. A shape's best per backend is its fastest correct pair. A spec that
   hung or crashed the worker on one shape is not run on later ones (each costs a timeout or a
   worker restart; it counts as failed there), nor is a cuda_cpp kernel nvcc refused.
4. Confirmation (CONFIRM_ROUNDS, default 1; 0 skips it): the two winners, and Triton's winner
   rendered shape-static too (Triton's own default; --no-static leaves it out), timed again in
   one evaluator call per round with the full timing, interleaved with torch.matmul. The table
   reports the median of those rounds: the best of many short trials is biased low (a lucky
   draw), the same way for both backends, and confirmation removes that. Triton's figure is the
   faster of its dynamic and static kernels.
Ratio = Triton kernel time / cuda_cpp kernel time: cuda_cpp's speed as a share of Triton's;
the bar is 0.95.

Triton at sm_80: a spec's arch only narrows the IR's choices; on an H100, Triton's JIT compiles
for the GPU it runs on, so tl.dot becomes wgmma (Hopper code). This script sets
TRITON_OVERRIDE_ARCH=sm80 for itself and every process it starts (the evaluator's worker and
compile pool): Triton then lowers for sm_80 (mma.sync, cp.async pipelining, no wgmma or TMA) and
still assembles for the GPU at hand (Triton 3.6 to 3.9 take the PTX and cubin stages from the
real target). The report counts the Triton kernels compiled in this run (their own cache folder)
by the arch they were lowered for and whether their PTX holds wgmma; it must hold none.

cuda_cpp kernels take 20-45 s of nvcc each. They are compiled ahead, SPECS x (problem classes)
of them, on threads beside the run, while the Triton pairs are measured; the cuda_cpp pairs of
a shape wait for them. `--precompile-only --cuda-target sm_90` does that compile on any machine
(no GPU needed) into $CUDAL2_CACHE_DIR/cuda_cpp, which a GPU run then finds, if nvcc and the
CUTLASS headers there are the same versions (the cache key holds both).

Resumable: the pairs and confirmations live in the store (default OUT.db); the same command on
that store measures only what is missing. OUT.md and OUT.json are rewritten after every step of
every shape, so a run cut short keeps what it measured. --recorded runs the whole flow on a CPU
with the recorded runner's synthetic numbers (not measurements).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

ARCH = "sm_80"
BACKENDS = ("triton", "cuda_cpp")
BAR = 0.95
PROBE_CANDIDATES = ("shared/data/h100_probe_cublas_vs_triton.json", ".carry/data/h100_probe_cublas_vs_triton.json",
                    "../shared/data/h100_probe_cublas_vs_triton.json")


# ---- shapes -------------------------------------------------------------------------------------------
def probe_shapes(path: Path):
    from cudal2 import GemmProblem

    rows = json.loads(path.read_text())
    if not isinstance(rows, list) or not all({"M", "N", "K"} <= set(r) for r in rows):
        raise SystemExit(f"{path}: expected a JSON list of objects with M, N, K (the H100 probe file)")
    return [GemmProblem(m=r["M"], n=r["N"], k=r["K"]) for r in rows]


def validation_shapes(name: str, sample: int, max_gflop: float):
    from cudal2.dataset import draw_shapes, resolve_shapes

    found = [p for p in resolve_shapes(name) if p.flops / 1e9 <= max_gflop]
    return draw_shapes(found, sample) if sample else found


def interleave(sets: dict[str, list]) -> list[tuple[str, object]]:
    """(set name, problem) of every set, merged by relative position (48 and 16 give three of the
    first set, then one of the second, ...), each problem once."""
    items = [((i + 0.5) / len(ps), j, name, p) for j, (name, ps) in enumerate(sets.items()) for i, p in enumerate(ps)]
    seen, out = set(), []
    for _, _, name, p in sorted(items, key=lambda t: (t[0], t[1])):
        if p.key() not in seen:
            seen.add(p.key())
            out.append((name, p))
    return out


# ---- the pools ----------------------------------------------------------------------------------------
def rules_profile(sms: int, l2_mb: float):
    """sm_80 as the rules see it, with the SM count and L2 of the GPU that runs the code."""
    from cudal2.ir import DeviceProfile

    return dataclasses.replace(DeviceProfile.of_arch(ARCH), name=f"sm_80 code on {sms} SMs, {l2_mb:g} MB L2",
                               sm_count=sms, l2_bytes=int(l2_mb * 2**20))


RASTER = ("raster_group", "raster_order")


def describe(spec) -> str:
    """spec.summary() with what it leaves out that a pool spec may vary: rasterization, the
    shared-memory layout, the epilogue path."""
    s = spec.summary() + f" g{spec.raster_group}/{spec.raster_order.replace('along_', '')}"
    if spec.smem_swizzle != "auto" or spec.smem_padding:
        s += f" smem={spec.smem_swizzle}/{spec.smem_padding}"
    if spec.epilogue_path != "registers":
        s += f" epi={spec.epilogue_path}/{spec.epilogue_subtile}"
    return s


def rules_pool(backend: str, problems, n: int, depth: int, profile) -> tuple[list, dict]:
    """n shape-generic specs of backend: greedy over the rules' ranked lists (see the docstring).
    Specs that differ only in rasterization (group, order) count as one kernel family: a family's
    rank on a shape is its best member's, and it enters the pool as the member the rules
    proposed on the most shapes (the first seen of equals). Returns the specs and, per spec key,
    on how many shapes the rules ranked its family and the family's best rank."""
    from cudal2.proposers.rules import RulesProposer

    rp = RulesProposer(backends=(backend,), arch=ARCH, device=profile)
    members: dict[str, Counter] = {}  # family -> Counter of member spec keys
    specs: dict[str, object] = {}
    ranked: list[list[str]] = []  # per shape: families, best first
    for p in problems:
        fams: list[str] = []
        for prop in rp.propose(p, n=depth):
            s = prop.spec.replace(shape_specialization="dynamic")
            fam = s.replace(**{f: type(s).model_fields[f].default for f in RASTER}).key()
            specs.setdefault(s.key(), s)
            members.setdefault(fam, Counter())[s.key()] += 1
            if fam not in fams:
                fams.append(fam)
        ranked.append(fams)
    have = [0.0] * len(ranked)  # per shape: 1/(1 + rank) of its best-ranked family taken so far
    order = list(members)  # first seen first: ties go to the earlier one
    chosen: list[str] = []

    def gain(fam: str) -> float:
        return sum(max(0.0, 1.0 / (1 + fams.index(fam)) - have[i]) for i, fams in enumerate(ranked) if fam in fams)

    while len(chosen) < min(n, len(order)):
        best = max((f for f in order if f not in chosen), key=lambda f: (gain(f), -order.index(f)))
        chosen.append(best)
        for i, fams in enumerate(ranked):
            if best in fams:
                have[i] = max(have[i], 1.0 / (1 + fams.index(best)))
    out, info = [], {}
    for fam in chosen:
        key = members[fam].most_common(1)[0][0]  # Counter keeps insertion order among equals
        out.append(specs[key])
        info[key] = {"shapes": sum(fam in fams for fams in ranked),
                     "best_rank": min(fams.index(fam) for fams in ranked if fam in fams)}
    return out, info


# ---- compiling cuda_cpp ahead -------------------------------------------------------------------------
def kernel_key(problem, spec) -> tuple:
    from cudal2 import get_backend

    be = get_backend(spec.backend)
    return (spec.key(), be.shape_key(problem, spec), be.variant_key(problem, spec))


def cuda_cpp_jobs(specs, problems, probe_k: int = 4096) -> list[tuple]:
    """One (problem, spec) per compiled kernel: per spec, per problem class and variant (the shapes'
    own, and their long-K probe variants, which the evaluator also checks)."""
    from cudal2 import get_backend

    be = get_backend("cuda_cpp")
    jobs: dict[tuple, tuple] = {}
    for p in problems:
        for q in (p, p.replace(k=probe_k)) if p.k < probe_k else (p,):
            for s in specs:
                if be.supports(q, s):
                    jobs.setdefault(kernel_key(q, s), (q, s))
    return list(jobs.values())


def compile_one(problem, spec) -> dict:
    """nvcc for one kernel (or its cached cubin): what ptxas said, and whether the PTX is sm_80 code."""
    from cudal2 import get_backend

    be = get_backend("cuda_cpp")
    t0 = time.perf_counter()
    out = {"spec": describe(spec), "class": problem.class_label(), "variant": be.variant_key(problem, spec)}
    try:
        b = be.binary(be.render(problem, spec))
    except Exception as e:  # noqa: BLE001 - a failed compile is recorded (the evaluator records it again)
        return {**out, "ok": False, "error": f"{type(e).__name__}: {str(e)[:400]}", "seconds": time.perf_counter() - t0}
    res = b.resources.get("cudal2_gemm")
    return {**out, "ok": True, "target": b.target, "from_cache": b.from_cache, "seconds": round(time.perf_counter() - t0, 1),
            "registers": res.registers if res else None, "spill_bytes": (res.spill_stores + res.spill_loads) if res else None,
            "ptx_wgmma": "wgmma" in b.ptx, "ptx_mma_sync": "mma.sync" in b.ptx}


class AheadOfTime:
    """The cuda_cpp kernels compiled on threads (nvcc is a subprocess: threads suffice)."""

    def __init__(self, jobs: list[tuple], workers: int):
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="nvcc")
        self.started = time.monotonic()
        self.futures = [self.pool.submit(compile_one, p, s) for p, s in jobs]
        self.keys = [kernel_key(p, s) for p, s in jobs]
        self.finished_s: float | None = None

    def failed(self) -> set[tuple]:
        """(spec, class, variant) keys of the kernels nvcc refused: the evaluator would only run nvcc
        on them again, per shape; they are recorded as compile errors of this backend instead."""
        return {k for k, f in zip(self.keys, self.futures) if f.done() and not f.result()["ok"]}

    def done(self) -> bool:
        if all(f.done() for f in self.futures):
            if self.finished_s is None:
                self.finished_s = time.monotonic() - self.started
            return True
        return False

    def wait(self, timeout: float | None) -> bool:
        wait(self.futures, timeout=timeout)
        return self.done()

    def summary(self) -> dict:
        got = [f.result() for f in self.futures if f.done()]
        return {"kernels": len(self.futures), "done": len(got), "failed": [g for g in got if not g["ok"]][:8],
                "from_cache": sum(bool(g.get("from_cache")) for g in got),
                "ptx_with_wgmma": sum(bool(g.get("ptx_wgmma")) for g in got),
                "ptx_with_mma_sync": sum(bool(g.get("ptx_mma_sync")) for g in got),
                "max_spill_bytes": max((g.get("spill_bytes") or 0 for g in got), default=0),
                "seconds": round(self.finished_s, 1) if self.finished_s is not None else None}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# ---- what Triton compiled -------------------------------------------------------------------------------
class TritonCacheScan:
    """The kernels in this run's Triton cache folder: the arch each was lowered for (its
    options' arch: sm80 under TRITON_OVERRIDE_ARCH) and whether its PTX holds wgmma or mma.sync."""

    def __init__(self, root: Path):
        self.root, self.seen, self.kernels = root, set(), []

    def update(self) -> dict:
        if self.root.is_dir():
            for meta in sorted(self.root.glob("*/*.json")):
                if meta.name.startswith("__grp__") or meta in self.seen:
                    continue
                ptx = meta.with_suffix(".ptx")
                if not ptx.exists():
                    continue
                self.seen.add(meta)
                try:
                    m = json.loads(meta.read_text())
                    text = ptx.read_text(errors="replace")
                except (OSError, ValueError):
                    continue
                target = m.get("target") or {}
                self.kernels.append({"name": m.get("name", meta.stem), "arch": m.get("arch"),
                                     "target": target.get("arch") if isinstance(target, dict) else target,
                                     "wgmma": "wgmma" in text, "mma_sync": "mma.sync" in text})
        dots = [k for k in self.kernels if k["name"] == "matmul_kernel"]
        return {"kernels": len(self.kernels), "matmul_kernels": len(dots),
                "lowered_for": dict(Counter(str(k["arch"]) for k in self.kernels)),
                "assembled_for": dict(Counter(str(k["target"]) for k in self.kernels)),
                "matmul_ptx_with_wgmma": sum(k["wgmma"] for k in dots),
                "matmul_ptx_with_mma_sync": sum(k["mma_sync"] for k in dots)}


# ---- measuring ----------------------------------------------------------------------------------------
def _reasons(records) -> list[str]:
    seen: list[str] = []
    for r in records:
        if r["status"] != "ok":
            line = f"{r['status']}: {(r['result'].reason or '')[:200]}"
            if line not in seen:
                seen.append(line)
    return seen[:4]


BROKEN = ("timeout", "crash")  # a pair that hung or killed the worker (each costs seconds to recover from)


def sweep_backend(problem, specs, runner, store, refused: set | frozenset = frozenset(),
                  broken: dict | None = None) -> dict:
    """Every pool spec of one backend on problem (the store's pairs are not measured again), but
    those whose kernel for this shape failed to compile ahead (`refused`: compile errors) and
    those that hung or crashed on an earlier shape (`broken`, spec key -> where; this call adds
    to it); its fastest correct pair."""
    from cudal2.dataset import run_sweep

    t0 = time.monotonic()
    broken = {} if broken is None else broken
    keys = {s.key() for s in specs}
    done = store.measured_spec_keys(problem)
    not_built = [s for s in specs if s.key() not in done and kernel_key(problem, s) in refused] if refused else []
    dropped = [s for s in specs if s.key() not in done and s.key() in broken and s not in not_built]
    specs = [s for s in specs if s not in not_built and s not in dropped]
    summary = run_sweep([problem], specs, runner, store)
    recs = [r for r in store.kernels(problem) if r["result"].spec.key() in keys]
    for r in recs:
        if r["status"] in BROKEN:
            broken.setdefault(r["result"].spec.key(), f"{r['status']} on {problem.label()}")
    ok = [r for r in recs if r["status"] == "ok" and r["kernel_ms"] is not None]
    best = min(ok, key=lambda r: r["kernel_ms"]) if ok else None
    return {"best_ms": best["kernel_ms"] if best else None,
            "spec": describe(best["result"].spec) if best else None,
            "spec_json": best["result"].spec.to_dict() if best else None,
            "pairs": len(recs) + len(not_built) + len(dropped), "correct": len(ok),
            "statuses": dict(Counter(r["status"] for r in recs) + Counter({"compile_error": len(not_built),
                                                                            "not_run": len(dropped)})),
            "not_compiled": [describe(s) for s in not_built],
            "not_run": [f"{describe(s)} ({broken[s.key()]})" for s in dropped],
            "reasons": _reasons(recs), "skipped": summary.skipped, "measured_now": summary.measured,
            "seconds": round(time.monotonic() - t0, 1)}


def _torch_ms(baselines) -> float | None:
    b = (baselines or {}).get("torch")
    return b.kernel_ms("offline") if b is not None and b.available else None


def confirm(problem, contenders: dict, runner, store, rounds: int, environment) -> dict:
    """contenders {role: spec} timed again, together, `rounds` times in full timing (rounds the
    store holds already are reused); per role the median kernel ms of its correct rounds."""
    by_key = {s.key(): role for role, s in contenders.items()}
    old = [c for c in store.confirmations(problem) if c["spec_key"] in by_key]
    per_role: dict[str, list] = {role: [] for role in contenders}
    torch_rounds: list[float] = []
    for c in old:
        per_role[by_key[c["spec_key"]]].append(c)
    reused = min(len(v) for v in per_role.values()) >= rounds
    if reused:
        for role in per_role:
            per_role[role] = per_role[role][-rounds:]
        torch_rounds = [t for c in per_role[next(iter(per_role))] if (t := _torch_ms(c["baselines"])) is not None]
    else:
        per_role = {role: [] for role in contenders}
        specs = list(contenders.values())
        full = getattr(runner, "full_timing", None)
        for _ in range(rounds):
            with full() if full else contextlib.nullcontext():
                results = runner.evaluate(problem, specs, ("offline",), with_baselines=True)
            base = runner.baselines(problem, ("offline",))
            if (t := _torch_ms(base)) is not None:
                torch_rounds.append(t)
            for res in results:
                store.record_confirmation(problem, res, base, environment)
                per_role[by_key[res.spec.key()]].append({"result": res, "baselines": base})
    out = {"rounds": rounds, "reused": reused, "torch_ms": statistics.median(torch_rounds) if torch_rounds else None}
    for role, got in per_role.items():
        times = [c["result"].kernel_ms("offline") for c in got if c["result"].ok]
        out[role] = {"ms": statistics.median(times) if times else None,
                     "statuses": dict(Counter(c["result"].status for c in got)),
                     "reasons": sorted({(c["result"].reason or "")[:200] for c in got if not c["result"].ok})[:2]}
    return out


def finish_row(row: dict) -> None:
    """The row's reported figures: confirmed where it was, else the sweep's."""
    t, c, conf = row.get("triton") or {}, row.get("cuda_cpp") or {}, row.get("confirm")
    if conf:
        tri = [x for x in ((conf.get("triton") or {}).get("ms"), (conf.get("triton_static") or {}).get("ms")) if x]
        row["triton_ms"] = min(tri) if tri else None
        dyn, static = (conf.get("triton") or {}).get("ms"), (conf.get("triton_static") or {}).get("ms")
        row["triton_kind"] = None if not tri else "static" if static and (not dyn or static < dyn) else "dynamic"
        row["cuda_cpp_ms"] = (conf.get("cuda_cpp") or {}).get("ms")
        row["torch_ms"] = conf.get("torch_ms") or row.get("sweep_torch_ms")
        row["figures"] = "confirmed"
    else:
        row["triton_ms"], row["triton_kind"] = t.get("best_ms"), "dynamic" if t.get("best_ms") else None
        row["cuda_cpp_ms"] = c.get("best_ms")
        row["torch_ms"] = row.get("sweep_torch_ms")
        row["figures"] = "sweep"
    tm, cm, th = row["triton_ms"], row["cuda_cpp_ms"], row["torch_ms"]
    row["ratio"] = tm / cm if tm and cm else None
    row["cuda_cpp_vs_torch"] = th / cm if th and cm else None
    row["triton_vs_torch"] = th / tm if th and tm else None


# ---- the report ---------------------------------------------------------------------------------------
def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def aggregates(rows: list[dict]) -> dict:
    out = {}
    for name in [*dict.fromkeys(r["set"] for r in rows), "all"]:
        mine = [r for r in rows if name in ("all", r["set"]) and r.get("ratio")]
        ratios = [r["ratio"] for r in mine]
        out[name] = {"shapes": len(mine), "rows": sum(name in ("all", r["set"]) for r in rows),
                     "geomean_ratio": geomean(ratios), "min_ratio": min(ratios) if ratios else None,
                     "at_bar": sum(x >= BAR for x in ratios),
                     "cuda_cpp_vs_torch": geomean(r["cuda_cpp_vs_torch"] for r in mine),
                     "triton_vs_torch": geomean(r["triton_vs_torch"] for r in mine)}
    return out


def _key(pool_entry: dict) -> str:
    from cudal2.ir import KernelSpec

    return KernelSpec.from_dict(pool_entry["spec_json"]).key()


def _us(ms) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def _x(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def markdown(d: dict) -> str:
    env = d.get("environment") or {}
    p = d["procedure"]
    lines = [f"# cuda_cpp (sm_80) against Triton forced to sm_80 ({env.get('gpu_name', '?')}, {d['date']})", "",
             f"`{d['command']}`", "",
             f"Runner: {d['runner']}. {env.get('gpu_name', '?')}, driver {env.get('driver', '?')}, CUDA "
             f"{env.get('cuda', '?')}, torch {env.get('torch', '?')}, Triton {env.get('triton', '?')}.", "",
             f"Procedure (the same for both backends): a pool of {p['specs']} shape-generic sm_80 specs per backend, "
             f"drawn from the rules proposer's {p['depth']} best proposals per shape ({p['rules_profile']}); every "
             "(spec, shape) pair measured through `cudal2 sweep`'s loop with the evaluator's correctness checks; "
             f"per shape the fastest correct kernel of each backend; "
             + (f"the two winners (and Triton's rendered static{'' if p['static'] else ': off'}) timed again "
                f"together with torch.matmul, {p['confirm_rounds']} full-timing round(s), median reported."
                if p["confirm_rounds"] else "figures from the sweep's timing (no confirmation).")
             + f" Ratio = Triton us / cuda_cpp us (cuda_cpp's share of Triton's speed); bar {BAR}.", "",
             "## Per shape set", "",
             "| set | shapes with both | geomean ratio | min ratio | at or above the bar | cuda_cpp vs torch | "
             "Triton-sm80 vs torch |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, a in d["aggregates"].items():
        lines.append(f"| {name} | {a['shapes']} of {a['rows']} | {_x(a['geomean_ratio'])} | {_x(a['min_ratio'])} | "
                     f"{a['at_bar']} | {_x(a['cuda_cpp_vs_torch'])} | {_x(a['triton_vs_torch'])} |")
    lines += ["", "## Per shape", "",
              "| shape | set | Triton-sm80 us | cuda_cpp us | Triton/cuda_cpp | torch.matmul us | correct pairs "
              "(Triton, cuda_cpp) | Triton winner | cuda_cpp winner |", "|---|---|---:|---:|---:|---:|---|---|---|"]
    for r in d["rows"]:
        t, c = r.get("triton") or {}, r.get("cuda_cpp") or {}
        kind = " (static)" if r.get("triton_kind") == "static" else ""
        flag = " **below**" if r.get("ratio") is not None and r["ratio"] < BAR else ""
        lines.append(f"| {r['shape']} | {r['set']} | {_us(r.get('triton_ms'))}{kind} | {_us(r.get('cuda_cpp_ms'))} | "
                     f"{_x(r.get('ratio'))}{flag} | {_us(r.get('torch_ms'))} | {t.get('correct', '-')}/{t.get('pairs', '-')}, "
                     f"{c.get('correct', '-')}/{c.get('pairs', '-')} | `{t.get('spec') or '-'}` | `{c.get('spec') or '-'}` |")
    lines += ["", "## Checks", ""]
    for be in BACKENDS:
        st = Counter()
        for r in d["rows"]:
            st.update((r.get(be) or {}).get("statuses") or {})
        reasons = list(dict.fromkeys(x for r in d["rows"] for x in (r.get(be) or {}).get("reasons") or []))[:4]
        lines.append(f"- {be} pairs by status: {dict(st) or '-'}" + (f"; first reasons: {reasons}" if reasons else ""))
    tri = d.get("triton_kernels") or {}
    if tri.get("kernels"):
        lines.append(f"- Triton kernels compiled in this run: {tri['kernels']}, lowered for {tri['lowered_for']}, "
                     f"assembled for {tri['assembled_for']}; of its {tri['matmul_kernels']} GEMM kernels, "
                     f"{tri['matmul_ptx_with_mma_sync']} use mma.sync and {tri['matmul_ptx_with_wgmma']} wgmma "
                     "(must be 0: sm_80 code)")
    for be, where in (d.get("broken") or {}).items():
        if where:
            lines.append(f"- {be} specs not run after a hang or crash: " + "; ".join(
                f"`{next((x['spec'] for x in d['pools'][be] if x['spec_json'] and _key(x) == k), k)}` ({w})"
                for k, w in where.items()))
    pre = d.get("cuda_cpp_compile") or {}
    if pre.get("kernels"):
        lines.append(f"- cuda_cpp kernels compiled ahead: {pre['done']} of {pre['kernels']} ({pre['from_cache']} from "
                     f"the cache, {len(pre['failed'])} failed, {pre['seconds']} s); PTX with mma.sync "
                     f"{pre['ptx_with_mma_sync']}, with wgmma {pre['ptx_with_wgmma']}; most spilled bytes "
                     f"{pre['max_spill_bytes']}")
    if d.get("unfinished"):
        lines.append(f"- not finished ({len(d['unfinished'])}): {', '.join(d['unfinished'][:12])}"
                     + (" ..." if len(d["unfinished"]) > 12 else "") + ": run the same command on the same store")
    lines.append(f"- this run: {d.get('elapsed_s', 0):.0f} s" + (f"; evaluator: {d['evaluator']}" if d.get("evaluator") else ""))
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---- main ---------------------------------------------------------------------------------------------
def _arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the markdown report (OUT.json beside it; the store OUT.db by default)")
    ap.add_argument("--probe", type=Path, default=None, help="h100_probe_cublas_vs_triton.json (default: found under "
                    "shared/data or .carry/data)")
    ap.add_argument("--no-probe", action="store_true", help="leave the probe shapes out")
    ap.add_argument("--validation", default="serving:validation", help="a shape set of cudal2.shapes ('' for none)")
    ap.add_argument("--val-sample", type=int, default=16, help="validation shapes drawn (0: all of them)")
    ap.add_argument("--val-max-gflop", type=float, default=600.0, help="only validation shapes of at most this many GFLOP")
    ap.add_argument("--shapes", default=None, help="these shapes instead (MxNxK[-LAYOUT],... or a file or a set)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N shapes (the pools are still drawn over all)")
    ap.add_argument("--specs", type=int, default=12, help="pool size per backend")
    ap.add_argument("--depth", type=int, default=8, help="the rules' proposals per shape the pools are drawn from")
    ap.add_argument("--sms", type=int, default=132, help="SMs the rules model (the H100's)")
    ap.add_argument("--l2-mb", type=float, default=50.0, help="L2 the rules model, MiB (the H100's)")
    ap.add_argument("--confirm-rounds", type=int, default=1, help="full-timing rounds of the winners (0: none)")
    ap.add_argument("--no-static", action="store_true", help="confirm without Triton's winner rendered static")
    ap.add_argument("--max-seconds", type=float, default=450.0, help="start no new step after this many seconds")
    ap.add_argument("--store", default=None, help="SQLite file or SQLAlchemy URL (default: OUT.db)")
    ap.add_argument("--compile-workers", type=int, default=None, help="nvcc threads (default: CPUs - 4)")
    ap.add_argument("--cuda-target", default=None, help="compile cuda_cpp for this SASS target (sets CUDAL2_CUDA_ARCH; "
                    "sm_90 for an H100 when compiling on a machine without it)")
    ap.add_argument("--triton-cache", type=Path, default=None, help="Triton's cache folder for this run (default: a "
                    "fresh temporary one, so the report counts only this run's kernels)")
    ap.add_argument("--precompile-only", action="store_true", help="only compile the cuda_cpp pool (no GPU needed)")
    ap.add_argument("--recorded", action="store_true", help="CPU check: the recorded runner's synthetic numbers")
    return ap


def _shape_list(args) -> list[tuple[str, object]]:
    if args.shapes:
        from cudal2.dataset import resolve_shapes

        return [("given", p) for p in resolve_shapes(args.shapes)]
    sets: dict[str, list] = {}
    if not args.no_probe:
        probe = args.probe or next((ROOT / c for c in PROBE_CANDIDATES if (ROOT / c).is_file()), None)
        if probe is None:
            raise SystemExit(f"no probe file: give --probe (looked for {', '.join(PROBE_CANDIDATES)}) or --no-probe")
        sets["probe"] = probe_shapes(probe)
    if args.validation:
        sets["validation"] = validation_shapes(args.validation, args.val_sample, args.val_max_gflop)
    return interleave(sets)


def main(argv=None, runner=None) -> int:
    """runner: a Runner to use instead of the GPU evaluator or --recorded's (tests)."""
    args = _arguments().parse_args(argv)
    own_runner = runner is None
    gpu = own_runner and not args.recorded  # the GPU evaluator: compile the cuda_cpp kernels ahead
    start = time.monotonic()
    deadline = start + args.max_seconds
    # Before anything starts a process: every Triton compile of this run lowers for sm_80.
    if os.environ.get("TRITON_OVERRIDE_ARCH", "sm80") != "sm80":
        print(f"TRITON_OVERRIDE_ARCH={os.environ['TRITON_OVERRIDE_ARCH']} replaced by sm80", flush=True)
    os.environ["TRITON_OVERRIDE_ARCH"] = "sm80"
    if gpu:
        os.environ.pop("TRITON_INTERPRET", None)  # Triton's CPU interpreter would be timed otherwise
    triton_cache = args.triton_cache or Path(tempfile.mkdtemp(prefix="cudal2-sm80-triton-"))
    os.environ["TRITON_CACHE_DIR"] = str(triton_cache)
    if args.cuda_target:
        os.environ["CUDAL2_CUDA_ARCH"] = args.cuda_target

    shapes = _shape_list(args)
    problems = [p for _, p in shapes]
    profile = rules_profile(args.sms, args.l2_mb)
    pools, pool_info = {}, {}
    for be in BACKENDS:
        pools[be], pool_info[be] = rules_pool(be, problems, args.specs, args.depth, profile)
        print(f"{be} pool ({len(pools[be])}): " + "; ".join(describe(s) for s in pools[be]), flush=True)
    shapes = shapes[: args.limit]
    compile_workers = args.compile_workers or max(2, (os.cpu_count() or 4) - 4)

    if args.precompile_only:
        jobs = cuda_cpp_jobs(pools["cuda_cpp"], problems)
        print(f"compiling {len(jobs)} cuda_cpp kernels on {compile_workers} threads "
              f"(target {os.environ.get('CUDAL2_CUDA_ARCH') or 'the visible GPU, else sm_80'})", flush=True)
        ahead = AheadOfTime(jobs, compile_workers)
        for f in ahead.futures:
            r = f.result()
            print(f"  {r['spec']} {r['class']} {r['variant']}: " + (
                f"{r['target']} {r['seconds']} s, {r['registers']} registers, {r['spill_bytes']} spilled bytes"
                if r["ok"] else r["error"]), flush=True)
        ahead.done()
        print(json.dumps(ahead.summary(), indent=1))
        return 0 if not ahead.summary()["failed"] else 1

    from cudal2.store.store import Store

    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    store = Store(args.store or out.with_suffix(".db"))
    ahead = None
    if gpu:  # refuse at once what could not run, then start nvcc: it runs while the Triton pairs are measured
        from cudal2 import get_backend

        for be in BACKENDS:
            ok, why = get_backend(be).usable()
            if not ok:
                raise SystemExit(f"backend {be} cannot compile here: {why}")
        try:
            import cuda.bindings.driver  # noqa: F401 - the cuda_cpp kernels launch through it
        except ImportError as e:
            raise SystemExit(f"cuda_cpp needs cuda-bindings to launch its kernels ({e}); carry its wheel") from None
        ahead = AheadOfTime(cuda_cpp_jobs(pools["cuda_cpp"], [p for _, p in shapes]), compile_workers)
        print(f"compiling {len(ahead.futures)} cuda_cpp kernels ahead on {compile_workers} threads", flush=True)
    if runner is None and args.recorded:
        from cudal2.tuner.recorded import RecordedRunner

        runner = RecordedRunner()
    elif runner is None:
        from cudal2.api import default_runner

        runner = default_runner(baselines=("torch",))
    environment = runner.environment()
    doc = {"command": "python benchmarks/sm80_backends.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "date": time.strftime("%Y-%m-%d"),
           "runner": "the GPU evaluator" if gpu else "recorded (synthetic numbers, not GPU timings)" if args.recorded
           else type(runner).__name__,
           "environment": dataclasses.asdict(environment) if environment is not None else None,
           "procedure": {"specs": args.specs, "depth": args.depth, "rules_profile": profile.name,
                         "confirm_rounds": args.confirm_rounds, "static": not args.no_static,
                         "validation": args.validation, "val_sample": args.val_sample,
                         "val_max_gflop": args.val_max_gflop, "triton_override_arch": "sm80",
                         "sweep_timing": "TimingConfig.sweep()", "confirm_timing": "TimingConfig() (full)"},
           "pools": {be: [{"spec": describe(s), "spec_json": s.to_dict(), **pool_info[be][s.key()]} for s in pools[be]]
                     for be in BACKENDS},
           "rows": [], "unfinished": []}
    rows = {p.key(): {"shape": p.label(), "set": name, "m": p.m, "n": p.n, "k": p.k, "layout": p.layout}
            for name, p in shapes}
    # Specs that hung or crashed are not run again on later shapes (rebuilt from the store on a resume)
    broken: dict[str, dict] = {be: {} for be in BACKENDS}
    keys_of = {s.key(): be for be in BACKENDS for s in pools[be]}
    for rec in store.kernels():
        be = keys_of.get(rec["result"].spec.key())
        if be and rec["status"] in BROKEN:
            broken[be].setdefault(rec["result"].spec.key(), f"{rec['status']} on {rec['problem'].label()}")
    doc["broken"] = broken
    scan = TritonCacheScan(triton_cache)

    def save() -> None:
        doc["rows"] = [r for r in rows.values() if r.get("triton") or r.get("cuda_cpp")]
        for r in doc["rows"]:
            finish_row(r)
        doc["aggregates"] = aggregates(doc["rows"])
        doc["unfinished"] = [r["shape"] for r in rows.values() if not r.get("done")]
        doc["triton_kernels"] = scan.update()
        doc["cuda_cpp_compile"] = ahead.summary() if ahead is not None else None
        stats = getattr(runner, "stats", None)
        doc["evaluator"] = stats.line() if stats is not None and getattr(stats, "candidates", 0) else None
        doc["elapsed_s"] = round(time.monotonic() - start, 1)
        _write(out.with_suffix(".json"), json.dumps(doc, indent=1, default=str) + "\n")
        _write(out, markdown(doc))

    def left() -> float:
        return deadline - time.monotonic()

    def second_half(problem) -> None:
        """cuda_cpp's pairs on problem, then the confirmation of both winners."""
        row = rows[problem.key()]
        if left() <= 0:
            return
        row["cuda_cpp"] = sweep_backend(problem, pools["cuda_cpp"], runner, store,
                                        ahead.failed() if ahead is not None else frozenset(), broken["cuda_cpp"])
        save()
        t, c = row["triton"], row["cuda_cpp"]
        if args.confirm_rounds and t.get("spec_json") and c.get("spec_json") and left() > 0:
            from cudal2.ir import KernelSpec

            contenders = {"cuda_cpp": KernelSpec.from_dict(c["spec_json"]), "triton": KernelSpec.from_dict(t["spec_json"])}
            if not args.no_static:
                contenders["triton_static"] = contenders["triton"].replace(shape_specialization="static")
            row["confirm"] = confirm(problem, contenders, runner, store, args.confirm_rounds, environment)
        row["done"] = bool(row.get("confirm")) or not args.confirm_rounds or not (t.get("spec_json") and c.get("spec_json"))
        finish_row(row)
        print(f"    cuda_cpp {_us(c.get('best_ms'))} us ({c['correct']}/{c['pairs']} correct) -> Triton/cuda_cpp "
              f"{_x(row['ratio'])} ({row['figures']}; torch {_us(row['torch_ms'])} us)  [{time.monotonic() - start:.0f} s]",
              flush=True)
        save()

    pending: list = []
    try:
        for i, (name, problem) in enumerate(shapes):
            if left() <= 0:
                break
            row = rows[problem.key()]
            row["triton"] = sweep_backend(problem, pools["triton"], runner, store, broken=broken["triton"])
            base = store.baselines(problem)
            row["sweep_torch_ms"] = _torch_ms(base)
            t = row["triton"]
            print(f"[{i + 1}/{len(shapes)}] {problem.label()} ({name}): Triton {_us(t['best_ms'])} us "
                  f"({t['correct']}/{t['pairs']} correct, {t['seconds']} s), torch {_us(row['sweep_torch_ms'])} us",
                  flush=True)
            save()
            if args.confirm_rounds and not args.no_static and t.get("spec_json") and hasattr(runner, "prefetch"):
                # Triton's winner rendered static compiles in the pool while cuda_cpp's pairs are measured
                # (its confirmation then finds it in Triton's cache, even where the evaluator let the
                # prefetch go for another shape's)
                from cudal2.ir import KernelSpec

                runner.prefetch(problem, [KernelSpec.from_dict(t["spec_json"]).replace(shape_specialization="static")])
            pending.append(problem)
            if ahead is None or ahead.done():
                while pending and left() > 0:
                    second_half(pending.pop(0))
        if pending and ahead is not None and left() > 0:
            print(f"waiting for the cuda_cpp compiles ({sum(f.done() for f in ahead.futures)} of "
                  f"{len(ahead.futures)} done)", flush=True)
            ahead.wait(max(0.0, left()))
        while pending and left() > 0 and (ahead is None or ahead.done()):
            second_half(pending.pop(0))
    finally:
        save()
        if ahead is not None:
            ahead.close()
        if own_runner and hasattr(runner, "close"):
            runner.close()
    print(markdown(doc))
    if doc["unfinished"]:
        print(f"{len(doc['unfinished'])} shape(s) not finished: run the same command on the same store "
              f"({time.monotonic() - start:.0f} s)")
        return 3
    print(f"all {len(rows)} shapes done ({time.monotonic() - start:.0f} s); wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
