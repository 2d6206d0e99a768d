"""docs/results.md from the JSON results in benchmarks/results: the current figure of every
experiment, each with its GPU, versions, date and the report that holds its command.

    python benchmarks/report.py            # writes docs/results.md and docs/results_probe48.png
    python benchmarks/report.py --check    # exit 1 if docs/results.md is not what this writes

The experiments are data (EXPERIMENTS): a title, the result file, and the kind of file, which
names the function that reads it. A new run of an experiment replaces its file; git keeps the old
one. Nothing here measures anything: it only reads what the benchmarks wrote.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import itertools
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "results.md"
PLOT = ROOT / "docs" / "results_probe48.png"


@dataclass(frozen=True)
class Experiment:
    title: str
    file: str  # under benchmarks/results
    kind: str  # a key of READERS
    what: str  # one sentence: what was measured and how
    parts: tuple[str, ...] = ()  # tune_speed: which of its parts (static, tune, sweep) are current
    against: str = ""  # retime_against: the run of the same winners with the code it is compared with




def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _date(name: str) -> str:
    """The date in a result file's name (every file is named with the date it was measured)."""
    found = re.search(r"(\d{4}-\d{2}-\d{2})", name)
    return found.group(1) if found else "undated"


def _env_line(env: dict | None) -> str:
    if not env:
        return "versions not recorded"
    return (f"{env.get('gpu_name', '?')}, driver {env.get('driver', '?')}, CUDA {env.get('cuda', '?')}, "
            f"torch {env.get('torch', '?')}, Triton {env.get('triton', '?')}")


# ---- readers: (headline figure, markdown body, environment line) -----------------------------------
def read_search(path: Path) -> tuple[str, list[str], str]:
    """A search report (benchmarks/search_48.py --out): one row per shape with its winner."""
    rows = json.loads(path.read_text())
    sp = [r["speedup"].get("torch") for r in rows]
    lt = [r["speedup"].get("cublaslt_autotune") for r in rows]
    g, worst = geomean(sp), min(x for x in sp if x)
    slower = sum(1 for x in sp if x and x < 1)
    head = f"{g:.3f}x torch.matmul (geomean over {len(rows)} shapes), min {worst:.3f}, {slower} slower"
    body = [f"- over torch.matmul: geometric mean **{g:.3f}**, min {worst:.3f}, {slower} of {len(rows)} slower",
            f"- over cuBLASLt autotuned: {geomean(lt):.3f}" if geomean(lt) else "- cuBLASLt: not measured",
            "", "| shape | winner | us | vs torch | vs cuBLASLt autotune |", "|---|---|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: r["m"] * r["n"] * r["k"]):
        s = r["speedup"]
        body.append(f"| {r['m']}x{r['n']}x{r['k']} | `{r.get('spec', '')}` | {r['best_ms'] * 1e3:.1f} | "
                    f"{s.get('torch', 0):.3f} | {s.get('cublaslt_autotune') or 0:.3f} |")
    return head, body, _env_line(rows[0].get("environment"))


def read_retime(path: Path) -> tuple[str, list[str], str]:
    """Winners timed again (benchmarks/retime_winners.py)."""
    rows = [r for r in json.loads(path.read_text()) if r.get("status", "ok") == "ok"]
    heads, body = [], []
    for mode in sorted({m for r in rows for m in r["speedup"]}):
        sp = [r["speedup"][mode].get("torch") for r in rows if mode in r["speedup"]]
        g, worst = geomean(sp), min(x for x in sp if x)
        heads.append(f"{mode} {g:.3f}x torch.matmul, min {worst:.3f}")
        body.append(f"- {mode}: geometric mean over torch.matmul **{g:.3f}**, min {worst:.3f}, "
                    f"{sum(1 for x in sp if x < 1)} of {len(sp)} slower")
    return f"{'; '.join(heads)} ({len(rows)} shapes)", body, "versions as in the report"


def read_retime_against(path: Path, against: Path) -> tuple[str, list[str], str]:
    """Two retime_winners.py runs of the same winners on one machine, with two versions of the code:
    kernel time of the other run over this one's, shape by shape (above 1: this run's kernel is faster)."""
    now = {(r["m"], r["n"], r["k"]): r for r in json.loads(path.read_text()) if r.get("status") == "ok"}
    old = {(r["m"], r["n"], r["k"]): r for r in json.loads(against.read_text()) if r.get("status") == "ok"}
    pairs = [(shape, old[shape]["kernel_ms"]["offline"] / r["kernel_ms"]["offline"], r)
             for shape, r in now.items() if shape in old]
    g = geomean(x for _, x, _ in pairs)
    long = [x for _, x, r in pairs if r["kernel_ms"]["offline"] >= 0.05]
    cute = [x for _, x, r in pairs if r["backend"] == "cute_dsl"]
    vs = lambda rows: geomean(r["speedup"]["offline"].get("torch") for r in rows.values())  # noqa: E731
    head = (f"kernel time before / now: geomean {g:.3f} over {len(pairs)} winners, {geomean(long):.3f} over the "
            f"{len(long)} of 50 us or more")
    body = [f"- kernel time of {against.name} over this run's, geomean: {g:.3f} over {len(pairs)} winners "
            f"({len(cute)} CuTe DSL: {geomean(cute):.3f}; {len(long)} kernels of 50 us or more: "
            f"{geomean(long):.3f}); lowest {min(x for _, x, _ in pairs):.3f}, highest {max(x for _, x, _ in pairs):.3f}",
            f"- over torch.matmul, each run against its own torch timings: this run {vs(now):.3f}, "
            f"{against.name} {vs(old):.3f}", "",
            "| shape | winner | us | us before | before / now |", "|---|---|---:|---:|---:|"]
    for (m, n, k), x, r in sorted(pairs, key=lambda p: p[1])[:8]:
        body.append(f"| {m}x{n}x{k} | `{r['spec']}` | {r['kernel_ms']['offline'] * 1e3:.1f} | "
                    f"{old[(m, n, k)]['kernel_ms']['offline'] * 1e3:.1f} | {x:.3f} |")
    body.append("\n(the eight lowest ratios: where this run's kernel was slowest against the other's)")
    return head, body, "versions as in both reports"


def _benchmarks_importable() -> None:
    """The scripts beside this file importable: it is also imported as a module (the tests)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))


def read_peer_parity(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/peer_parity.py: our CuTe DSL kernel against quack's, config for config."""
    _benchmarks_importable()
    from peer_parity import refused_lines  # benchmarks/, beside this file

    d = json.loads(path.read_text())
    shapes = d["shapes"]
    at_quack = geomean(s["a"].get("ours_over_quack") for s in shapes if s.get("a"))
    ours = geomean(s["b"].get("ours_vs_torch") for s in shapes if s.get("b"))
    quack = geomean(s["a"].get("quack_vs_torch") for s in shapes if s.get("a"))
    fmt = lambda x: f"{x:.3f}" if x else "-"  # noqa: E731
    searched = f"our search {ours:.3f}x torch" if ours else "no search (--budget 0)"
    # quack's autotuned call timed in the same evaluator call (runs from 2026-11-27 on): quack forced to
    # the config its cache names (QuackAtConfig) measured slower than that call
    auto = geomean(s["a"]["quack_autotune_ms"] / s["a"]["ours_ms"] for s in shapes
                   if s.get("a") and s["a"].get("quack_autotune_ms") and s["a"].get("ours_ms"))
    if auto:
        head = (f"ours at quack's autotuned configs {auto:.3f}x quack's autotuned call, {at_quack:.3f}x quack forced "
                f"to the config ({len(shapes)} shapes)")
    else:
        head = (f"ours at quack's autotuned configs {at_quack:.3f}x quack forced to them; {searched} against "
                f"quack forced to its pick {quack:.3f}x ({len(shapes)} shapes)")
    body = [f"- our kernel at quack's autotuned config, over quack's kernel forced to it: geomean {at_quack:.3f}",
            *([f"- over quack's autotuned call, timed in the same evaluator call: geomean {auto:.3f}"] if auto else []),
            f"- over torch.matmul: our search's winner {fmt(ours)}, quack forced to its pick {quack:.3f} (geomeans)",
            f"- quack sm90 configs our IR expresses on these shapes: {d['expressible'][0]} of {d['expressible'][1]}",
            *refused_lines(d.get("refused") or {}),
            "", "| shape | quack's pick | ours / quack there | ours vs torch there | our search's pick | "
            "ours vs torch | quack autotuned vs torch |", "|---|---|---:|---:|---|---:|---:|"]
    for s in shapes:
        a, b = s.get("a") or {}, s.get("b") or {}
        body.append(f"| {s['shape']} | {a.get('config', '-')} | {fmt(a.get('ours_over_quack'))} | "
                    f"{fmt(a.get('ours_vs_torch'))} | `{b.get('spec', '-')}` | {fmt(b.get('ours_vs_torch'))} | "
                    f"{fmt(a.get('quack_vs_torch'))} |")
    return head, body, f"{d.get('gpu', '?')}, quack-kernels 0.6.5"


def read_crosscheck(path: Path) -> tuple[str, list[str], str]:
    d = json.loads(path.read_text())
    rows = [r for r in d["rows"] if "eval_offline" in r]
    graph = sum(bool(r.get("agree_graph")) for r in rows)
    dob = sum(bool(r.get("agree_dobench")) for r in rows)
    head = f"evaluator within 2% of a rotated-input CUDA graph on {graph} of {len(rows)} shapes"
    body = [f"- rotated graph: {graph} of {len(rows)} shapes within 2%; do_bench_cudagraph: {dob} of {len(rows)}",
            "", "| shape | evaluator | rotated graph | do_bench_cudagraph |", "|---|---:|---:|---:|"]
    body += [f"| {r['shape']} | {r['eval_offline']:.3f} | {r['graph']:.3f} | {r['dobench']:.3f} |" for r in rows]
    return head, body, f"{d['gpu']}, {d['versions']}"


def read_crosscheck_winners(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/crosscheck_winners.py: search winners, the evaluator's ratio in the run's mode (layer, or
    chain where the run says so) against a harness's."""
    d = json.loads(path.read_text())
    mode = d.get("mode", "layer")
    rows = [r for r in d["rows"] if "harness" in r]
    agree = sum(bool(r["agree"]) for r in rows)
    gm = lambda k: math.exp(statistics.fmean(math.log(r[k]) for r in rows))  # noqa: E731
    head = (f"{mode} mode: evaluator within 2% of the harness on {agree} of {len(rows)} shapes; geomean over torch "
            f"eval {gm(f'eval_{mode}'):.3f}, harness {gm('harness'):.3f}, search {gm('search'):.3f}")
    body = [f"- GPU {d.get('gpu_uuid', '?')}", "", f"| shape | winner | search | eval {mode} | harness | eval offline |",
            "|---|---|---:|---:|---:|---:|"]
    body += [f"| {r['shape']} | `{r['spec']}` | {r['search']:.3f} | {r[f'eval_{mode}']:.3f} | {r['harness']:.3f} | "
             f"{r['eval_offline']:.3f} |" for r in rows]
    return head, body, f"{d['gpu']}, {d['versions']}"


def _md_table(path: Path) -> list[str]:
    """The table rows of a result's OUT.md (every line that starts with "|")."""
    return [ln for ln in path.with_suffix(".md").read_text().splitlines() if ln.startswith("|")]


def read_op_served(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/op_served.py: cudal2.linear through the op against F.linear with a search's winners served."""
    d = json.loads(path.read_text())
    rows = d["rows"]
    count = lambda key: sum(1 for r in rows if r["verdicts"].get(key, True))  # noqa: E731
    served = [r for r in rows if r.get("served_graph") not in (None, "torch")]
    close = sum(1 for r in served if r["verdicts"].get("searched"))
    head = (f"{count('passed')} of {len(rows)} shapes pass every verdict: eager >= 0.99 on {count('eager')}, graph "
            f">= 0.99 on {count('graph')}; {len(served)} served a kernel in graphs, {close} of them within 0.02 of the "
            "searched speedup")
    here = [r for r in served if r["verdicts"].get("searched_here") is not None]
    if here:  # a run that also timed the search's measure on its own GPU
        head += (f", {sum(1 for r in here if r['verdicts']['searched_here'])} of {len(here)} within 0.02 of it timed "
                 "here")
    if d.get("aa"):  # F.linear against itself: the ratios are the harness's error, the verdicts say nothing of the op
        spread = lambda path: (min(r[path]["ratio"] for r in rows), max(r[path]["ratio"] for r in rows))  # noqa: E731
        head = ("A/A, F.linear against itself on {} shapes: eager {:.3f} to {:.3f}, graph {:.3f} to {:.3f}"
                .format(len(rows), *spread("eager"), *spread("graph")))
    table = _md_table(path)
    return head, [f"- GPU {d.get('gpu_uuid', '?')}", "", *table], f"{d['gpu']}, {d['versions']}"


def read_e2e_model(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/e2e_model.py: a transformers Llama's tokens/s, cudal2 over untouched, per mode and phase."""
    d = json.loads(path.read_text())
    lines = path.with_suffix(".md").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    table = list(itertools.takewhile(lambda ln: ln.startswith("|"), lines[start:]))  # the first table: tokens/s
    cells = [ln.split("|") for ln in table[2:]]
    head = "cudal2 / untouched tokens/s: " + "; ".join(f"{c[1].strip()} {c[2].strip()} {c[5].split()[0]}"
                                                        for c in cells)
    return head, table, _env_line(d.get("env"))


def read_tune_speed(path: Path, parts: tuple[str, ...] = ()) -> tuple[str, list[str], str]:
    _benchmarks_importable()
    from tune_speed import search_own_s  # benchmarks/, beside this file

    d = json.loads(path.read_text())
    runs = [v for k, v in sorted(d.items()) if k.startswith("run_")] or [d]  # several runs in one file
    # each part from the last run that has it
    d = {"gpu": runs[-1].get("gpu", "?"), **{p: r[p] for r in runs for p in ("static", "tune", "sweep") if r.get(p)}}
    d = {k: v for k, v in d.items() if k == "gpu" or not parts or k in parts}
    body, heads = [], []
    if d.get("tune"):
        phased = any("phases" in r for r in d["tune"])  # where the evaluator's time went (EvalStats)
        peers = any("peer_setup_s" in (r.get("phases") or {}) for r in d["tune"])  # quack's setup apart
        twins = any("twin_kept" in r for r in d["tune"])  # the confirmation's static twin
        body += (["| run | shape | seconds | vs torch | compile wait | checks | timing | the search's own |"
                  + (" of the timing, quack's setup |" if peers else "") + (" static twin: generic/static |" if twins else ""),
                  "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if peers else "") + ("---|" if twins else "")]
                 if phased else ["| run | shape | seconds | vs torch |", "|---|---|---:|---:|"])
        for r in d["tune"]:
            line = f"| {r['kind']} | {r['shape']} | {r['seconds']:.1f} | {r['speedup_torch'] or 0:.3f} |"
            p = r.get("phases")
            if phased and p:
                line += (f" {p['waiting_for_compile_s']:.1f} | {p['checking_s']:.1f} | {p['timing_s']:.1f} | "
                         f"{search_own_s(r):.1f} |")
            elif phased:
                line += " | | | |"
            if peers:
                line += f" {(p or {}).get('peer_setup_s', 0.0):.1f} |"
            if twins:
                ratio = r.get("twin_ratio")
                line += (f" {ratio:.3f}, {'kept' if r.get('twin_kept') else 'not kept'} |" if ratio
                         else f" {r.get('twin_status', '-')} |")
            body.append(line)
        warm = [r["seconds"] for r in d["tune"] if r["kind"].startswith("warm")]
        given = [r["seconds"] for r in d["tune"] if r["kind"].startswith("given shape")][1:]  # the first is cold
        if warm:
            heads.append(f"warm tune at budget 32: {min(warm):.1f}-{max(warm):.1f} s")
        elif given:
            span = f"{min(given):.1f}" if len(given) == 1 else f"{min(given):.1f}-{max(given):.1f}"
            heads.append(f"tune at budget 32 after the first shape: {span} s")
    if d.get("sweep"):
        s = d["sweep"]
        rate = s["second_pairs"] / max(s["second_s"], 1e-9)
        heads.append(f"sweep {rate:.1f} checked pairs/s")
        body.append(f"- sweep: {s['specs']} specs on {s['shapes']} shapes of at most 1 GFLOP: {rate:.1f} checked "
                    f"pairs/s on new shapes; per pair: {s.get('stats', '')}")
    if d.get("static"):
        ratios = [r["ratio"] for r in d["static"] if r.get("ratio")]
        heads.append(f"dynamic-shape kernels at {geomean(ratios):.3f} of static speed")
        body.append(f"- static / dynamic kernel time over {len(ratios)} pairs: geomean {geomean(ratios):.3f}, "
                    f"lowest {min(ratios):.3f}")
    return "; ".join(heads), body, d.get("gpu", "?")


def read_sweep(path: Path) -> tuple[str, list[str], str]:
    """A `cudal2 dataset export` (CSV, gzipped): the fastest spec per shape, one brief measurement, in the
    export's label mode (chain where its rows have it, else layer, else offline: cudal2.learn.samples.label_mode)."""
    from cudal2.learn.samples import label_mode

    rows = list(csv.DictReader(io.TextIOWrapper(gzip.open(path), encoding="utf-8")))
    mode = label_mode(rows)
    best: dict[tuple, dict] = {}
    for r in rows:
        if r["status"] != "ok" or not r.get(f"kernel_ms.{mode}") or not r.get(f"speedup_vs_torch.{mode}"):
            continue
        key = (int(r["m"]), int(r["n"]), int(r["k"]), r["layout"])
        if key not in best or float(r[f"kernel_ms.{mode}"]) < float(best[key][f"kernel_ms.{mode}"]):
            best[key] = r
    sp = [float(r[f"speedup_vs_torch.{mode}"]) for r in best.values()]
    g = geomean(sp)
    specs = len({r["spec_key"] for r in rows})
    head = f"best of {specs} specs: {g:.3f}x torch.matmul over {len(best)} shapes ({mode} mode, unconfirmed)"
    statuses = collections.Counter(r["status"] for r in rows)
    body = [f"- {len(rows)} pairs ({', '.join(f'{n} {s}' for s, n in statuses.most_common())}), {specs} specs on "
            f"{len(best)} shapes; fastest spec per shape: geometric mean {g:.3f} of torch.matmul, faster on "
            f"{sum(x > 1 for x in sp)}. One brief measurement each, and the best of many is a selected maximum: a "
            "figure to confirm, not to claim."]
    for part in ("validation", "train"):
        for shape_set in sorted({r["shape_set"] for r in best.values() if r["split"] == part}):
            xs = [float(r[f"speedup_vs_torch.{mode}"]) for r in best.values()
                  if r["split"] == part and r["shape_set"] == shape_set]
            body.append(f"- {part}, {shape_set or 'no set'}: {len(xs)} shapes, fastest spec {geomean(xs):.3f} of "
                        f"torch.matmul (faster on {sum(x > 1 for x in xs)}, lowest {min(xs):.3f}, highest {max(xs):.3f})")
    r0 = rows[0]
    cards = len({r.get("gpu_uuid") for r in rows})  # older exports have no card column
    return head, body, (f"{r0['gpu']}{f' (x{cards} cards)' if cards > 1 else ''}, driver {r0['driver']}, torch "
                        f"{r0['torch']}, Triton {r0['triton']}")


def read_learned_offline(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/learned_offline.py: the cost model's first pick and replayed searches on validation shapes."""
    d = json.loads(path.read_text())
    s = d["summary"]
    n = len(d["shapes"])
    head = (f"first pick {s['1']['learned_geomean']:.3f} of the sweep's best (within 5 % on "
            f"{s['1']['learned_within_5']:.0%} of {n} shapes); 16 evaluations {s['16']['learned_geomean']:.3f}, "
            f"random {s['16']['random_geomean']:.3f}")
    body = ["| evaluations | learned (geomean) | random (geomean) | learned >= 97 % | learned beats random |",
            "|---|---|---|---|---|"]
    body += [f"| {b} | {v['learned_geomean']:.3f} | {v['random_geomean']:.3f} | {v['learned_reached_97']:.0%} | "
             f"{v['learned_beats_random']:.0%} |" for b, v in s.items()]
    for name in d.get("against", []):  # models replayed beside the one trained here
        head += f"; `{Path(name).name}` first pick {s['1'][name + '_geomean']:.3f}, 16 evaluations " \
                f"{s['16'][name + '_geomean']:.3f}"
    data = d["model_info"]["data"]
    gpu = next(iter(data["gpus"]), "?")
    return head, body, f"trained on {data['pairs']} pairs ({data['shapes']} train shapes) measured on {gpu}"


def read_compare(path: Path) -> tuple[str, list[str], str]:
    """`cudal2 compare`'s report (.md beside its .json): the summary table and the wins."""
    text = path.with_suffix(".md").read_text().splitlines()
    env = next((ln for ln in text if ln.startswith("GPU:")), "GPU not recorded")
    # the summary table: from its header to the first line that is not a table row
    start = next(i for i, ln in enumerate(text) if ln.startswith("| proposer | budget | shapes"))
    table = list(itertools.takewhile(lambda ln: ln.startswith("|"), text[start:]))
    rows = [ln.strip("|").split("|") for ln in table[2:]]
    head = "; ".join(f"{r[0].strip()} b{r[1].strip()} {float(r[3]):.3f}x" for r in rows if r[1].strip() != "1")
    return f"geomean vs torch.matmul at equal budget: {head}", table, env


def read_op_overhead(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/op_overhead.py: host time per call of our op over torch's, by path, on the shapes where
    the op ran a tuned kernel (the table served it, or the kernel was installed)."""
    d = json.loads(path.read_text())
    table = _md_table(path)
    if "combined" in d:  # --processes: each process's median difference, and their median
        served = any(c["served"] for c in d["combined"])
        head = "; ".join(f"{c['path']} {c['over_us']:+.2f} us ({min(c['over_us_per_process']):+.2f} to "
                         f"{max(c['over_us_per_process']):+.2f} over {len(c['over_us_per_process'])} processes)"
                         for c in d["combined"] if c["served"] == served)
        where = "where the op ran a tuned kernel" if served else "with nothing served (the fallback)"
        return f"host time per call over torch's {where}, median over processes: {head}", table, _env_line(d.get("env"))
    _benchmarks_importable()
    from op_overhead import PAIRS  # benchmarks/, beside this file: each path of ours and torch's it is compared with

    over = {}
    # with nothing served anywhere (a run with no search), the fallback's cost: torch through the op
    fallback = not any(row.get("served") or "cudal2.linear, kernel installed" in row["paths"] for row in d["rows"])
    for row in d["rows"]:
        for name, base in PAIRS.items():
            if name in row["paths"] and (fallback or row.get("served") or name == "cudal2.linear, kernel installed"):
                ours, theirs = row["paths"][name], row["paths"][base]
                if "host_rounds" in ours:  # interleaved rounds: the median of the per-round differences
                    diff = statistics.median(o - b for o, b in zip(ours["host_rounds"], theirs["host_rounds"]))
                else:
                    diff = ours["host_us"] - theirs["host_us"]
                over.setdefault(name, []).append(diff)
    head = "; ".join(f"{name} {min(v):+.1f} to {max(v):+.1f} us" for name, v in over.items())
    where = "with nothing served (the fallback)" if fallback else "where the op ran a tuned kernel"
    return f"host time per call over torch's {where}: {head}", table, _env_line(d.get("env"))


def read_e2e_decoder(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/e2e_decoder.py: a decoder layer's tokens/s with cudal2.linear over nn.Linear's (per mode,
    its range over the token counts)."""
    d = json.loads(path.read_text())
    ratios = {}
    for row in d["rows"]:
        for mode, both in row["modes"].items():
            # interleaved rounds: the median of the per-round ratios; older files: the ratio of the medians
            ratio = both["ratio"] if "ratio" in both else both["torch"]["us"] / both["cudal2"]["us"]
            ratios.setdefault(mode, []).append(ratio)
    head = "; ".join(f"{mode} {min(v):.3f} to {max(v):.3f}" for mode, v in ratios.items())
    table = _md_table(path)
    return f"cudal2 / torch tokens/s per mode, over token counts: {head}", table, _env_line(d.get("env"))


def read_sm80_backends(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/sm80_backends.py: the cuda_cpp backend's sm_80 kernels against Triton's lowered for
    sm_80, on one GPU; ratio = Triton kernel time / cuda_cpp kernel time (the bar is 0.95)."""
    d = json.loads(path.read_text())
    aggs, rows = d["aggregates"], d["rows"]
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    us = lambda ms: "-" if ms is None else f"{ms * 1e3:.1f}"  # noqa: E731
    every = aggs.get("all") or {}
    sets = [name for name in aggs if name != "all"]
    head = (f"cuda_cpp at {fmt(every.get('geomean_ratio'))}x Triton-sm80's speed (geomean; min "
            f"{fmt(every.get('min_ratio'))}, {every.get('at_bar', 0)} of {every.get('shapes', 0)} shapes at 0.95 or more; "
            f"{', '.join(sets)})")
    body = [f"- {name}: geomean Triton/cuda_cpp **{fmt(a['geomean_ratio'])}**, min {fmt(a['min_ratio'])}, "
            f"{a['at_bar']} of {a['shapes']} at 0.95 or more ({a['rows']} shapes run); over torch.matmul: cuda_cpp "
            f"{fmt(a['cuda_cpp_vs_torch'])}, Triton-sm80 {fmt(a['triton_vs_torch'])}" for name, a in aggs.items()]
    tri = d.get("triton_kernels") or {}
    if tri.get("matmul_kernels"):
        body.append(f"- Triton's GEMM kernels of the run: {tri['matmul_ptx_with_mma_sync']} with mma.sync, "
                    f"{tri['matmul_ptx_with_wgmma']} with wgmma, lowered for {tri['lowered_for']}")
    body += ["", "| shape | set | Triton-sm80 us | cuda_cpp us | Triton/cuda_cpp | torch.matmul us |",
             "|---|---|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["set"], r.get("ratio") or 0)):
        body.append(f"| {r['shape']} | {r['set']} | {us(r.get('triton_ms'))} | {us(r.get('cuda_cpp_ms'))} | "
                    f"{fmt(r.get('ratio'))} | {us(r.get('torch_ms'))} |")
    return head, body, _env_line(d.get("environment"))


def read_scale_out(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/scale_out.py: checked pairs per second of a sweep in one process and on Dask clusters of
    1 and N GPU workers; and/or a sweep with one worker killed mid-sweep."""
    d = json.loads(path.read_text())
    runs = {k: v for k, v in d.items() if k == "one_process" or k.startswith("cluster_")}
    body = []
    if runs:
        one = runs.get("one_process", {}).get("pairs_per_s")
        body += ["| configuration | GPUs | pairs | correct | seconds | pairs/s | over one process |",
                 "|---|---:|---:|---:|---:|---:|---:|"]
        for name, r in runs.items():
            over = f"{r['pairs_per_s'] / one:.3f}" if one else "-"
            body.append(f"| {name} | {len(r.get('gpu_uuids', []))} | {r['pairs']} | {r['correct']} | {r['seconds']} | "
                        f"{r['pairs_per_s']} | {over} |")
    kills = {k: v for k, v in d.items() if k.startswith("killed_")}
    for name, k in kills.items():
        body += ["", f"- {name}: {k['workers']} workers, worker pid {k['killed_pid']} killed (SIGKILL) at "
                 f"{k['killed_at_s']} s; pairs expected {k['pairs_expected']}, measured {k['pairs_measured']}, "
                 f"stored {k['pairs_stored']} ({k['pairs_distinct']} distinct), correct {k['correct']}; SQLite "
                 f"integrity {k['sqlite_integrity']}; workers before {k['pids_before']}, after {k['pids_after']}; "
                 f"the same sweep again measured {k['rerun_measured']} and found {k['rerun_already']} stored"]
    heads = []
    n = max((int(k.split("_")[1]) for k in runs if k.startswith("cluster_")), default=0)
    if n > 1 and runs.get("one_process") and runs.get(f"cluster_{n}"):
        c, o, c1 = runs[f"cluster_{n}"], runs["one_process"], runs.get("cluster_1", {})
        heads.append(f"{n} GPUs {c['pairs_per_s']} pairs/s, {c['pairs_per_s'] / o['pairs_per_s']:.2f}x one process "
                     f"({o['pairs_per_s']})" + (f", {c['pairs_per_s'] / c1['pairs_per_s']:.2f}x one Dask worker"
                                                 if c1.get("pairs_per_s") else ""))
    for k in kills.values():
        whole = k["pairs_stored"] == k["pairs_distinct"] == k["pairs_expected"] and k["rerun_measured"] == 0
        heads.append(f"a worker killed mid-sweep: {k['pairs_stored']} of {k['pairs_expected']} pairs stored once each"
                     + ("" if whole else " (NOT whole)"))
    return "; ".join(heads), body, _env_line(d.get("environment"))


def read_quack_vs_sweep(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/quack_vs_sweep.py: quack's autotuned GEMM against a sweep's fastest kernel."""
    d = json.loads(path.read_text())
    rows = d["shapes"]
    wins = [r for r in rows if r["quack_beats_torch"]]
    held = [r for r in wins if (r["ours_over_quack"] or 0) >= 1]
    head = (f"quack beat torch.matmul on {len(wins)} of {len(rows)} validation shapes; ours at least as fast on "
            f"{len(held)} of those")
    text = path.with_suffix(".md").read_text().splitlines()
    table = list(itertools.takewhile(lambda ln: ln.startswith("|"), text[next(i for i, ln in enumerate(text)
                                                                               if ln.startswith("| shape")):]))
    return head, table, f"{d['gpu']}; export {d['export']}"


def read_chain_placement(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/chain_placement.py: the chain ratio's range over timings on one placement of the buffers
    and over fresh placements, by the harness and by the evaluator's timing code."""
    d = json.loads(path.read_text())

    def width(xs):
        return (max(xs) - min(xs)) / statistics.median(xs)

    parts = [f"{r['shape'].split('-')[0]}: harness {width(r['harness_same']):.1%} one / {width(r['harness_fresh']):.1%} "
             f"fresh, evaluator {width(r['evaluator_same']):.1%} / {width(r['evaluator_fresh']):.1%}" for r in d["rows"]]
    head = "range of torch/winner over 5 timings on one placement against fresh ones: " + "; ".join(parts)
    text = path.with_suffix(".md").read_text().splitlines()
    table = [ln for ln in text if ln.startswith("|")]
    return head, table, f"{d['gpu']}, {d['versions']}"


def read_stream_state(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/stream_state.py: torch / winner and a graph's gaps per kernel before a second stream ran
    work in the process and after."""
    d = json.loads(path.read_text())
    parts = []
    for state, r in d["states"].items():
        torch_graph = r["profile"]["torch"]
        parts.append(f"{state}: torch / winner {r['ms']['torch'] / r['ms']['kernel']:.3f}, the torch graph's gaps "
                     f"{torch_graph['gaps_us'] / torch_graph['kernels']:.2f} us a kernel")
    head = f"{d['shape'].split('-')[0]}: " + "; ".join(parts)
    text = path.with_suffix(".md").read_text().splitlines()
    table = [ln for ln in text if ln.startswith("|")]
    return head, table, f"{d['gpu']} {d['gpu_uuid']}, {d['versions']}"


def read_split_k_serial(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/split_k_serial.py: Triton split-K reduced in one launch against its workspace twin, chain mode."""
    d = json.loads(path.read_text())
    pairs = [(r["workspace_us"], r["serial_us"]) for r in d["rows"] if r.get("workspace_us") and r.get("serial_us")]
    ratios = [w / s for w, s in pairs]
    head = (f"workspace / serial chain time {geomean(ratios):.3f} (geomean over {len(pairs)} specs), median saving "
            f"{statistics.median(w - s for w, s in pairs):.2f} us; serial ahead by 1% or more on "
            f"{sum(x >= 1.01 for x in ratios)}, behind on {sum(x <= 0.99 for x in ratios)}")
    table = _md_table(path)
    return head, table, _env_line(d.get("env"))


def read_two_streams(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/two_streams.py: one served kernel on two CUDA streams at once, outputs that differ."""
    d = json.loads(path.read_text())
    head = "; ".join(f"{r['kernel']}, {r['variant']}: {r['differ']} of {r['calls']} differ" for r in d["rows"])
    table = _md_table(path)
    return head, table, _env_line(d.get("env"))


def read_graph_paths(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/graph_paths.py: search winners in op_served.py's graph harness through the op, their bound runs
    and torch.matmul, each against F.linear."""
    d = json.loads(path.read_text())
    by: dict[str, list[float]] = {}
    shapes: dict[str, set] = {}
    for r in d["rows"]:
        by.setdefault(r["contender"], []).append(r["ratio"])
        shapes.setdefault(r["contender"], set()).add(r.get("shape", d.get("shape")))
    head = "F.linear / contender, geomean of the per-rep medians: " + "; ".join(
        f"{name} {geomean(xs):.3f} ({len(xs)} readings, {len(shapes[name])} shape(s))" for name, xs in by.items())
    table = _md_table(path)
    return head, table, _env_line(d.get("env"))


def read_baseline_kernels(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/baseline_kernels.py: the GPU kernels torch.matmul(x, w.t()) and F.linear(x, w) launch."""
    d = json.loads(path.read_text())
    head = f"the same kernels on {sum(r['same'] for r in d['rows'])} of {len(d['rows'])} shapes"
    table = _md_table(path)
    return head, table, _env_line(d.get("env"))


def read_layer_kernels(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/layer_kernels.py: the decoder layer's kernels profiled, nn.Linear against the op serving one group."""
    d = json.loads(path.read_text())
    saved = [r["torch"]["span_us"] - r["cudal2"]["span_us"] for r in d["runs"]
             if "span_us" in r["torch"] and "span_us" in r["cudal2"]]
    head = f"{len(d['runs'])} served groups profiled; span saved {min(saved):+.2f} to {max(saved):+.2f} us" \
        if saved else f"{len(d['runs'])} served groups profiled"
    return head, _md_table(path), _env_line(d.get("env"))


def read_context_ladder(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/context_ladder.py: one projection's saving in contexts from the evaluator's to the layer's."""
    d = json.loads(path.read_text())
    layer = [r for r in d["rows"] if r["context"] == "layer"]
    head = f"{len(layer)} projections; saving a pass in the layer: " + ", ".join(
        f"{r['tokens']}:{r['projection']} {r['saving_us'][0]:+.2f} us" for r in layer)
    return head, _md_table(path), _env_line(d.get("env"))


def read_weight_placement(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/weight_placement.py: a served kernel's ratio over F.linear at several placements of the weight."""
    d = json.loads(path.read_text())
    head = "; ".join(f"{r['shape']} {r['summary']['ratio']['min']:.3f} to {r['summary']['ratio']['max']:.3f}"
                     for r in d["results"])
    return f"F.linear / op over the placements: {head}", _md_table(path), _env_line(d.get("env"))


def read_runner_ups(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/runner_ups.py: each group of the decoder layer served by each of its confirmed leaders in turn."""
    d = json.loads(path.read_text())
    groups: dict[tuple, list[dict]] = {}
    for r in d["rows"]:
        groups.setdefault((r["tokens"], r["group"]), []).append(r)
    ranked = [g for g in groups.values() if len(g) > 1]
    best_first = sum(max(g, key=lambda r: r["saving_us"])["rank"] == 1 for g in ranked)
    wins = sum(any(r["saving_us"] > 0 for r in g[1:]) and g[0]["saving_us"] <= 0 for g in ranked)
    head = (f"the table's kernel saves the layer the most in {best_first} of {len(ranked)} groups with runners-up; "
            f"a runner-up wins where it loses in {wins}")
    return head, _md_table(path), _env_line(d.get("env"))


def read_served_path(path: Path) -> tuple[str, list[str], str]:
    """benchmarks/served_path.py: a winner called directly and through the op, both baselines, one chain harness."""
    d = json.loads(path.read_text())
    head = "; ".join(f"{r['shape'].split('-')[0]} searched-style {r['us']['torch.matmul'] / r['us']['kernel']:.3f}, "
                     f"served-style {r['us']['F.linear'] / r['us']['cudal2.linear']:.3f}" for r in d["rows"])
    return head, _md_table(path), _env_line(d.get("env"))


READERS = {"chain_placement": read_chain_placement, "stream_state": read_stream_state, "op_overhead": read_op_overhead, "e2e_decoder": read_e2e_decoder, "search": read_search, "retime": read_retime, "crosscheck": read_crosscheck,
           "crosscheck_winners": read_crosscheck_winners, "op_served": read_op_served, "e2e_model": read_e2e_model,
           "tune_speed": read_tune_speed, "sweep": read_sweep, "learned_offline": read_learned_offline,
           "compare": read_compare, "retime_against": read_retime_against, "peer_parity": read_peer_parity,
           "sm80_backends": read_sm80_backends, "scale_out": read_scale_out, "quack_vs_sweep": read_quack_vs_sweep,
           "split_k_serial": read_split_k_serial, "two_streams": read_two_streams,
           "graph_paths": read_graph_paths, "baseline_kernels": read_baseline_kernels,
           "layer_kernels": read_layer_kernels, "context_ladder": read_context_ladder,
           "weight_placement": read_weight_placement, "runner_ups": read_runner_ups,
           "served_path": read_served_path}

PROBE48 = "the 48 H100 probe shapes (fp16, NN; `../shared/data/h100_probe_cublas_vs_triton.json`)"
EXPERIMENTS: list[Experiment] = [
    Experiment("The 48 probe shapes, both backends", "search_48_both_backends_h100_2026-11-23.json", "search",
               f"`cudal2.search` with the Triton and CuTe DSL backends on {PROBE48}: the rules' 12 proposals per "
               "shape, the three leaders timed three more times, the winner's median round (offline)."),
    Experiment("The same 48 winners timed again", "retime_48_offline_h100_2026-11-26.json", "retime",
               "The winners above, timed again in one evaluator call each (offline) with the CuTe DSL kernel as "
               "DSL Python (cudal2/codegen/cute_sm90), three days after the search."),
    Experiment("The CuTe DSL kernel as DSL Python against the Jinja template it replaced, H100",
               "retime_48_offline_h100_2026-11-26.json", "retime_against",
               "The 48 winners timed with today's code and then, on the same machine, with a checkout of git "
               "4a79754 (the Jinja-template kernel); a PTX comparison finds the two the same program for every "
               "compile variant (tools/ptx_equivalence.py).", against="retime_48_jinja_template_h100_2026-11-26.json"),
    Experiment("The CuTe DSL kernel as DSL Python against the Jinja template it replaced, H200",
               "retime_48_offline_h200_2026-11-25.json", "retime_against",
               "As above, on an H200 (winners picked on an H100; compare these two runs with each other only).",
               against="retime_48_jinja_template_h200_2026-11-25.json"),
    Experiment("Four large shapes, offline", "large4_offline_h100_2026-11-23.json", "search",
               "4096^3, 8192^3, 16384x16384x4096 and 1024x16384x8192, both backends, budget 16, confirmed."),
    Experiment("Four large shapes, sustained", "large4_sustained_h100_2026-11-23.json", "search",
               "The same four, leaders confirmed in sustained mode (each kernel alone at the clock its own "
               "power draw sets under the 700 W cap)."),
    Experiment("The 21 longer probe shapes, sustained", "big21_sustained_h100_2026-11-23.json", "search",
               "The 21 probe shapes that take 20 us or more: offline trials, leaders confirmed sustained."),
    Experiment("LLM-serving validation shapes, 100-spec sweep", "sweep_serving_validation_h100_2026-11-25.csv.gz",
               "sweep", "`cudal2 sweep serving:validation --specs 100 --max-gflop 1`: 100 shape-generic Triton "
               "catalog specs on each validation serving shape of at most 1 GFLOP (layout NT), brief timing."),
    Experiment("The cost model on validation shapes, offline", "learned_offline_h100_2026-11-25.json",
               "learned_offline", "`benchmarks/learned_offline.py`: trained as `cudal2 train` does on the train-split "
               "sweeps, then on each validation shape's sweep: the model's first pick, and the bandit's search "
               "replayed over the specs the sweep measured, against random search over the same specs."),
    Experiment("Proposers at equal budget on validation shapes", "compare_validation_h100_2026-11-25.json",
               "compare", "`cudal2 compare serving:validation grid:validation --sample 4 --proposers "
               "learned,rules,random --budget 1,16`: 8 validation shapes, Triton backend, each proposer in a store "
               "of its own, leaders confirmed. The learned proposer's model here was trained on 92 train shapes of "
               "at most 64 GFLOP (8913 pairs)."),
    Experiment("The learned proposer, trained with larger shapes too", "compare_validation_learned_h100_2026-11-25.json",
               "compare", "The learned arm of the run above again, on the same 8 shapes, with the model then shipped in "
               "cudal2/data/models/sm_90a.json: trained on 102 train shapes up to 1160 GFLOP (9842 pairs; "
               "`CUDAL2_COST_MODEL` named it). Its best known is its own best, not the run above's."),
    Experiment("The learned proposer (Triton-trained model) against rules, one run", "compare_validation_learned_rules_h100_2026-11-25.json",
               "compare", "`cudal2 compare serving:validation grid:validation --sample 4 --proposers learned,rules "
               "--budget 16`: the same 8 validation shapes, the model then shipped (Triton only), both arms in one run."),
    Experiment("Proposers at equal budget on more validation shapes (4)", "compare_validation_more4_h100_2026-11-26.json",
               "compare", "`cudal2 compare` with learned, rules and random at budgets 1 and 16, Triton backend, the "
               "model then shipped (Triton only), on the validation shapes drawn 5th and 6th from each set (the runs above took the "
               "first four of each)."),
    Experiment("Proposers at equal budget on more validation shapes (6)", "compare_validation_more6_h100_2026-11-26.json",
               "compare", "As above, on the shapes drawn 7th to 9th from each set."),
    Experiment("The dataset: 100 Triton catalog specs on every shape of at most 4 GFLOP, four H100s",
               "sweep_triton_all_h100x4_2026-11-27.csv.gz", "sweep",
               "`cudal2 sweep all:validation --max-gflop 4 --specs 100 --workers auto` then `cudal2 sweep all:train "
               "--max-gflop 4 --specs 100 --workers auto` (the second resumed once after a timeout) into one store, "
               "then `cudal2 dataset export`: 614 shapes (154 validation, 460 train), one Dask worker per GPU on the "
               "lent 4-GPU kind; dask and distributed 2026.7.1, dask-cuda 26.10.00, Triton backend version 4. "
               "cuBLASLt's baselines are empty: nvmath-python was not installed on that machine."),
    Experiment("quack's autotuned GEMM against the dataset's fastest Triton kernel, validation shapes",
               "quack_vs_sweep_h100_2026-11-27.json", "quack_vs_sweep",
               "`benchmarks/quack_vs_sweep.py OUT.md --export sweep_triton_all_h100x4_2026-11-27.csv.gz "
               "--max-seconds 270`: on validation shapes of the dataset above, drawn in a fixed order, its fastest "
               "spec checked and timed again in one evaluator call with torch.matmul and quack_autotune (quack-kernels "
               "0.6.5, nvidia-cutlass-dsl 4.8.1, full timing); 29 of the 154 shapes before the time ran out."),
    Experiment("CuTe DSL catalog sweep on every validation shape of at most 4 GFLOP, four H100s",
               "sweep_cute_dsl_validation_h100x4_2026-11-27.csv.gz", "sweep",
               "`cudal2 sweep all:validation --max-gflop 4 --specs 100 --backend cute_dsl --workers auto` (resumed "
               "once after a timeout), then `cudal2 dataset export`: 100 shape-generic CuTe DSL catalog specs on the "
               "154 validation shapes, one Dask worker per GPU, quack-kernels 0.6.5 and nvmath-python 1.0.0 installed "
               "(so quack's and cuBLASLt's baselines are in every row), nvidia-cutlass-dsl 4.8.1; kernels without "
               "programmatic dependent launch."),
    Experiment("quack's autotuned GEMM against the fastest kernel of both sweeps, validation shapes",
               "quack_vs_sweep_both_h100_2026-11-27.json", "quack_vs_sweep",
               "`benchmarks/quack_vs_sweep.py OUT.md --export sweep_triton_all_h100x4_2026-11-27.csv.gz --export "
               "sweep_cute_dsl_validation_h100x4_2026-11-27.csv.gz --screen 0.05`: each validation shape's fastest "
               "spec over both exports timed again with torch.matmul and quack_autotune (full timing), on the 60 "
               "shapes where the CuTe DSL sweep's brief timing had quack within 5% of torch or faster (29 rows kept "
               "from the run above where the Triton spec was still the fastest); on the 4-GPU machine's first GPU, "
               "kernels without programmatic dependent launch."),
    Experiment("Our CuTe DSL kernels at quack's autotuned configs, small-K NN validation shapes",
               "peer_parity_small_k_nn_h100_2026-11-27.json", "peer_parity",
               "`benchmarks/peer_parity.py --own-layout --budget 0 --sample 8 --shapes 1024x2048x128,...`: the eight "
               "shapes of the run above where quack led ours the most, quack autotuned on each shape's own layout "
               "(NN), then ours and quack forced to that config in one evaluator call; ours without programmatic "
               "dependent launch."),
    Experiment("The same, with programmatic dependent launch", "peer_parity_small_k_nn_pdl_h100_2026-11-27.json",
               "peer_parity", "The same command and shapes after the CuTe DSL kernel took programmatic dependent "
               "launch (as quack's sm90 kernel does), another machine of the same kind."),
    Experiment("The same, with programmatic dependent launch, twelve more shapes",
               "peer_parity_small_k_nn_pdl_rest_h100_2026-11-27.json", "peer_parity",
               "`--sample 14 --max-seconds 300` on the other 14 shapes where the next run's fastest spec stayed "
               "slower than quack; 12 measured before the time ran out."),
    Experiment("quack's autotuned GEMM against the fastest kernel of both sweeps, with programmatic dependent launch",
               "quack_vs_sweep_pdl_h100_2026-11-27.json", "quack_vs_sweep",
               "The command of the run two above (a new OUT: every shape timed again), after the CuTe DSL kernel "
               "took programmatic dependent launch; the fastest specs are those the sweeps picked without it."),
    Experiment("CuTe DSL deep catalog sweep on every validation shape of at most 4 GFLOP, four H100s",
               "sweep_cute_dsl_deep_validation_h100x4_2026-11-27.csv.gz", "sweep",
               "`cudal2 sweep all:validation --max-gflop 4 --specs all --backend cute_dsl --catalog deep --workers "
               "auto` (resumed once after a timeout), then `cudal2 dataset export`: the 150 specs of the deep catalog "
               "(each TMA-store arrangement once, at the deepest pipeline that fits) on the 154 validation shapes, "
               "one Dask worker per GPU, quack-kernels 0.6.5 and nvmath-python 1.0.0 installed, "
               "nvidia-cutlass-dsl 4.8.1; kernels with programmatic dependent launch."),
    Experiment("quack's autotuned GEMM against the fastest kernel of three sweeps, four H100s",
               "quack_vs_sweep_deep_h100x4_2026-11-27.json", "quack_vs_sweep",
               "`benchmarks/quack_vs_sweep.py OUT.md --export sweep_triton_all_h100x4_2026-11-27.csv.gz --export "
               "sweep_cute_dsl_validation_h100x4_2026-11-27.csv.gz --export "
               "sweep_cute_dsl_deep_validation_h100x4_2026-11-27.csv.gz --screen 0.05 --gpus 4`: each screened "
               "validation shape's fastest spec over the three exports (by their brief timing) timed again with "
               "torch.matmul and quack_autotune (full timing), one process per GPU, on the machine that swept."),
    Experiment("The same with a shortlist: each shape's four fastest specs timed again, four H100s",
               "quack_vs_sweep_top4_h100x4_2026-11-27.json", "quack_vs_sweep",
               "The command above with `--top 4`, on a new machine of the same kind: each screened shape's four "
               "fastest specs over the three exports checked and timed again in one call, and the fastest of them "
               "timed once more with torch.matmul and quack_autotune; the table gives that last timing."),
    Experiment("quack against the fastest of three sweeps, sixteen fastest specs each, every screened shape, one H100",
               "quack_vs_sweep_top16_h100_2026-11-27.json", "quack_vs_sweep",
               "The `--screen 0.05 --top 16 --gpus 1` command, resumed from the run cut short below (its report "
               "copied to OUT.json, so its 40 shapes were kept): the other 20 screened shapes measured on a new "
               "one-GPU machine of the same kind the same day. The one shape below 1.000 (2048x1024x256, 4.5 us) "
               "was measured three times more on its own: the three runs below."),
    Experiment("The shape quack won in the run above, measured again (1 of 3)",
               "quack_vs_sweep_top16_repeat1_2048x1024x256_h100_2026-11-27.json", "quack_vs_sweep",
               "The command above with `--shapes 2048x1024x256` into a new report (no resume), three times in a "
               "row on one H100: its sixteen fastest specs checked and timed again, the fastest timed once more "
               "with the baselines."),
    Experiment("The same shape measured again (2 of 3)",
               "quack_vs_sweep_top16_repeat2_2048x1024x256_h100_2026-11-27.json", "quack_vs_sweep",
               "Right after the run above, on the same GPU."),
    Experiment("The same shape measured again (3 of 3)",
               "quack_vs_sweep_top16_repeat3_2048x1024x256_h100_2026-11-27.json", "quack_vs_sweep",
               "Right after the run above, on the same GPU."),
    Experiment("quack against the fastest of three sweeps, sixteen fastest specs each, one H100 (cut short)",
               "quack_vs_sweep_top16_partial_h100_2026-11-27.json", "quack_vs_sweep",
               "The `--screen 0.05` command below with `--top 16 --gpus 1`, after the evaluator began sizing its timed "
               "groups from the GPU's pace: the session's device time ran out after 427 s, with 40 of the 60 screened "
               "shapes measured."),
    Experiment("The 7 shapes quack won, sixteen fastest specs each, one H100",
               "quack_vs_sweep_losers_top16_h100_2026-11-27.json", "quack_vs_sweep",
               "`--shapes <the 7> --top 16 --gpus 1` on a one-GPU machine, with the evaluator sizing its timed groups "
               "from the GPU's pace."),
    Experiment("Ours against quack at quack's own config, quack's config looked up once, one H100",
               "peer_parity_quack_config_once_h100_2026-11-27.json", "peer_parity",
               "The peer_parity command below on the 7 shapes, with quack forced to a config that is looked up once "
               "(it was rebuilt from quack's 486-entry list on every call, about 1.1 ms of Python) and the evaluator "
               "sizing its timed groups from the GPU's pace: quack forced now matches its autotuned call."),
    Experiment("quack against the fastest of three sweeps, CuTe DSL backend version 5, four H100s",
               "quack_vs_sweep_v5_top4_h100x4_2026-11-27.json", "quack_vs_sweep",
               "The `--screen 0.05 --top 4` command above, two GPUs of a four-GPU machine (`--gpus 2`), after the CuTe "
               "DSL kernel changed (backend version 5: ping-pong's warpgroups share one set of staged output pieces, "
               "twice as deep; a piece waits for an earlier store only where it reuses its buffer; the producer alone "
               "waits for the previous grid; the first WGMMA sets the accumulators). The other two GPUs ran other "
               "benchmarks."),
    Experiment("The 7 shapes quack still won, eight fastest specs each, CuTe DSL backend version 5",
               "quack_vs_sweep_losers_v5_top8_h100x4_2026-11-27.json", "quack_vs_sweep",
               "The shapes where the run above had quack_autotune faster than our kernel, `--shapes ... --top 8 "
               "--gpus 3`, three GPUs of a four-GPU machine."),
    Experiment("Ours against quack at quack's own autotuned config on those 7 shapes, CuTe DSL backend version 5",
               "peer_parity_losers_v5_h100_2026-11-27.json", "peer_parity",
               "`benchmarks/peer_parity.py --shapes <the 7> --sample 7 --budget 0 --own-layout`: quack's autotuned "
               "config read from its cache, quack forced to it beside our kernel at the same config (deepest "
               "pipeline that fits), one GPU of a four-GPU machine."),
    Experiment("The same 7 with quack's autotuned call timed in the same evaluator call, one H100",
               "peer_parity_autotune_v5_h100_2026-11-27.json", "peer_parity",
               "The peer_parity command above with `quack_autotune` among the baselines of each call, on a one-GPU "
               "machine: quack forced to the config its autotuner's cache names ran 0.67-0.91 of its autotuned "
               "call's speed, so the config-for-config ratios before this run overstate ours."),
    Experiment("The 11 shapes quack won, eight fastest specs each, with the shared output staging alone",
               "quack_vs_sweep_losers_staging_top8_h100x4_2026-11-27.json", "quack_vs_sweep",
               "As the 11-shape run below, one GPU of a four-GPU machine, with the kernel between version 4 and 5: "
               "the shared, deeper output staging and the producer's PDL wait, not yet the accumulators set by the "
               "first WGMMA."),
    Experiment("The 11 shapes quack won in both runs, eight fastest specs each, two H100s",
               "quack_vs_sweep_losers_top8_h100x4_2026-11-27.json", "quack_vs_sweep",
               "The command above on the 11 shapes where quack_autotune beat our fastest kernel in both runs "
               "(`--shapes ... --top 8 --gpus 2`, two GPUs of a four-GPU machine, the other two running other "
               "benchmarks): each shape's eight fastest specs by the exports' brief timing checked and timed again, "
               "full timing. CuTe DSL backend version 4."),
    Experiment("CuTe DSL catalog sweep, train and validation shapes, H100", "sweep_cute_dsl_h100_2026-11-26.csv.gz",
               "sweep", "`cudal2 sweep all:train --sample 64 --specs 96 --backend cute_dsl` and `cudal2 sweep "
               "all:validation --sample 24 --specs 96 --backend cute_dsl` into one store, then `cudal2 dataset export`: "
               "96 shape-generic CuTe DSL catalog specs on 88 shapes, brief timing. Measured before split-K kernels "
               "of an overhanging cluster took predicated stores: 23 of their pairs are wrong, and 2 correct kernels "
               "on 64x32064x3072 are marked wrong because one of them wrote into their guards."),
    Experiment("The cost model over both backends' sweeps, validation shapes, offline",
               "learned_offline_both_h100_2026-11-26.json", "learned_offline",
               "`benchmarks/learned_offline.py` with the Triton train sweep and the CuTe DSL sweep as training data "
               "(the latter's validation shapes held back by the split), scored on every validation shape of the "
               "sweeps, over the specs each measured there; the shipped model's data."),
    Experiment("Proposers at equal budget, both Hopper backends, validation shapes (5 + 5)",
               "compare_both_a_h100_2026-11-26.json", "compare",
               "`cudal2 compare` over triton and cute_dsl with the model trained on both backends' sweeps "
               "(`cudal2/data/models/sm_90a.json`), the learned proposer ranking the catalog alone; the random arm "
               "ran out of time at budget 16. The ten validation shapes of the Triton-only runs above. "
               "`.carry/sweep/cute_sweep.csv.gz` in the command is the sweep above."),
    Experiment("As above, the other five shapes", "compare_both_b_h100_2026-11-26.json", "compare",
               "The same run's second call (learned and rules only)."),
    Experiment("Proposers at equal budget, the rules filling half of the learned proposer's batches (5 + 5)",
               "compare_hedged_a_h100_2026-11-26.json", "compare",
               "As above, after the change that gives the rules half of each learned batch after the first pick "
               "(kernels beyond the catalog: specialized to the shape, narrower tiles, deeper split-K)."),
    Experiment("As above, the other five shapes", "compare_hedged_b_h100_2026-11-26.json", "compare",
               "The same run's second call."),
    Experiment("Proposers at equal budget, the model trained with the narrow sweep (5 + 5)",
               "compare_narrow_a_h100_2026-11-26.json", "compare",
               "As above, with the model retrained on the four sweeps above and the `narrow` catalog's sweep "
               "(`sweep_narrow_h100_2026-11-26.csv.gz`; the command in docs/learning.md, given to the run as "
               "`$CUDAL2_COST_MODEL` and since shipped as `cudal2/data/models/sm_90a.json`), the rules filling half "
               "of each learned batch."),
    Experiment("As above, the other five shapes", "compare_narrow_b_h100_2026-11-26.json", "compare",
               "The same model, the second call."),
    Experiment("The learned proposer against random search at budget 16 (5 + 5)",
               "compare_narrow_random_a_h100_2026-11-26.json", "compare",
               "`cudal2 compare ... --proposers learned,random --budget 16` on the same ten shapes with the same "
               "model, two calls."),
    Experiment("As above, the other five shapes", "compare_narrow_random_b_h100_2026-11-26.json", "compare",
               "The same run's second call."),
    Experiment("Our CuTe DSL kernels against quack's on two large shapes, H100", "peer_parity_named_h100_2026-11-26.json",
               "peer_parity", "`benchmarks/peer_parity.py --shapes 5120x5120x5120,13824x5120x640 --budget 32`: quack's "
               "autotuner (44 sm90 configs) and `cudal2.search` over cute_dsl at budget 32 on each shape (layout NT); "
               "each pick timed as ours and as quack's kernel in one evaluator call with torch."),
    Experiment("Our CuTe DSL kernels against quack's on two large shapes, with the grouped walk, H100",
               "peer_parity_named_walk_h100_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --shapes 5120x5120x5120,13824x5120x640 --sample 2 --budget 32 "
               "--max-seconds 450`: as above, after static kernels took the grouped walk. Our search reached 1.012x "
               "torch on 5120x5120x5120 here, against 1.034x in the run above: the budget-32 search does not reach "
               "1.02 every time."),
    Experiment("Our CuTe DSL kernels against quack's on two large shapes, learned proposer over both sweeps, H100",
               "peer_parity_named_learned_h100_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --shapes 5120x5120x5120,13824x5120x640 --sample 2 --budget 32 --max-seconds "
               "360`: as above, the search's proposer (auto: learned) now ranking CuTe DSL kernels with the model "
               "trained on both backends' sweeps, the rules filling half of each batch. Neither shape is in a sweep."),
    Experiment("The per-call cost of cudal2.linear and cudal2.matmul, H100", "op_overhead_h100_2026-11-26.json",
               "op_overhead", "`benchmarks/op_overhead.py --budget 4` on three NT shapes searched over cute_dsl: host "
               "and wall time per call, 7 rounds of 200 back-to-back calls, eager and torch.compile, against torch's."),
    Experiment("The per-call cost on the decoder's k/v shapes, H100", "op_overhead_kv_h100_2026-11-26.json",
               "op_overhead", "`benchmarks/op_overhead.py --shapes 1x1024x4096,16x1024x4096 --budget 4` on the store "
               "of the decoder run (its tuned k/v kernel served): eager and compiled host time per call."),
    Experiment("The per-call cost at 128 tokens, H100", "op_overhead_128_h100_2026-11-26.json", "op_overhead",
               "`benchmarks/op_overhead.py --shapes 128x4096x4096,128x14336x4096 --budget 1`: both searches found a "
               "kernel at 1.001x and 1.004x torch, so the op served them; eager and compiled host time per call."),
    Experiment("The per-call cost with compiled graphs launching through C++, H100", "op_overhead_native_h100_2026-11-26.json",
               "op_overhead", "`benchmarks/op_overhead.py --shapes 1x4096x4096,16x14336x4096,128x4096x4096 --budget 2 "
               "--min-saving-us 0`: a compiled graph that holds the op calls its C++ launch path "
               "(`cudal2.codegen.native_launch`); the same graph traced with the Python op is timed beside it. With "
               "--min-saving-us 0 the op serves every shape whose kernel beat torch; the budget-2 searches found one "
               "(1x4096x4096)."),
    Experiment("The per-call cost with compiled graphs launching through C++, decoder shapes, H100",
               "op_overhead_native_kv_h100_2026-11-26.json", "op_overhead",
               "`benchmarks/op_overhead.py --shapes 1x1024x4096,16x1024x4096,1x14336x4096,16x4096x4096 --budget 3 "
               "--min-saving-us 0`: as above; three of the four searches found a kernel faster than torch."),
    Experiment("The decoder layer with kernels in compiled graphs launched through C++, H100",
               "e2e_decoder_native_h100_2026-11-26.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py --budget 0` on a store tuned at 1, 16 and 128 tokens (budget 3, 260 s; "
               "128 ran out of time), with a traced graph taking every kernel that beat torch "
               "(`NATIVE_TRACED_MIN_SAVING_US` = 0, since raised to 10 us by this run): q, k, v and o were served "
               "inside compiled graphs at 1 and 16 tokens (kernels saving about a microsecond each), eager calls kept "
               "torch's (`EAGER_MIN_SAVING_US`)."),
    Experiment("The decoder layer with kernels served in captured CUDA graphs, H100", "e2e_decoder_graphs_h100_2026-11-27.json",
               "e2e_decoder", "`benchmarks/e2e_decoder.py --budget 0 --rounds 41` on the store of the compiled-path runs "
               "below (tuned at 1, 16 and 128 tokens): calls made while a CUDA graph captures take any kernel that beat "
               "torch (`GRAPH_MIN_SAVING_US` = 0), and the graph mode routes the layers so served "
               "(`route_linears(graphs=True)`: q, k, v, o); eager and compiled calls keep the 10 us rules, under which "
               "no layer is routed, so those modes run nn.Linear's code on both sides."),
    Experiment("The decoder layer with graph-only layers routed in every mode, H100",
               "e2e_decoder_graph_routed_eager_h100_2026-11-27.json", "e2e_decoder",
               "As above, but with q, k, v and o routed in every mode (the default then): their eager calls ran torch "
               "after a test for a capture (the CUDA runtime asked only off the default stream). Eager ran about 2% "
               "slower, so route_linears now routes them only with graphs=True."),
    Experiment("The decoder layer with routed layers as a class, H100", "e2e_decoder_routed_class_h100_2026-11-26.json",
               "e2e_decoder", "As above, q, k, v and o routed in every mode as `RoutedLinear` (a class) instead of a "
               "forward set on each instance; the eager capture test asked the CUDA runtime on every call."),
    Experiment("The decoder layer with routed layers as a class, compiled graphs taking every win, H100",
               "e2e_decoder_native_class_h100_2026-11-26.json", "e2e_decoder",
               "As the run above with `--traced-min-saving-us 0`: compiled graphs launched q, k, v and o's kernels (about "
               "a microsecond saved each) through the C++ path at 1 and 16 tokens."),
    Experiment("The decoder layer with routed layers as instance forwards, H100",
               "e2e_decoder_instance_forward_h100_2026-11-26.json", "e2e_decoder",
               "As above (default compiled rule: no kernel in compiled graphs), with q, k, v and o routed by setting "
               "forward on each nn.Linear: torch.compile guarded those with a Python function on every call, and the "
               "compiled layer ran 3 to 5% slower."),
    Experiment("The decoder layer with the compiled path's 10 us rule, H100", "e2e_decoder_native_gated_h100_2026-11-26.json",
               "e2e_decoder", "`benchmarks/e2e_decoder.py --budget 0` on the store of the run above, after "
               "`NATIVE_TRACED_MIN_SAVING_US` became 10 us: no kernel of the store saves that much a call, so "
               "route_linears routed no layer and both layers ran nn.Linear's code; the spread of the ratios around "
               "1 is this harness's noise on the host that day."),
    Experiment("A Llama-style decoder layer with cudal2.linear, H100", "e2e_decoder_h100_2026-11-26.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py --budget 3 --max-tune-seconds 280`: the layer's GEMMs tuned by "
               "`cudal2.tune_model` over cute_dsl (the store also held the Triton searches of the run below), the op "
               "launching cute_dsl kernels only; eager, torch.compile and CUDA-graph time per layer at 1 to 4096 "
               "tokens against nn.Linear, and each GEMM alone in a CUDA graph. Its \"served by\" column names the "
               "table's entry before the op's backend filter: a Triton entry there ran torch."),
    Experiment("The decoder layer in interleaved rounds, H100", "e2e_decoder_rounds_h100_2026-11-26.json",
               "e2e_decoder", "`benchmarks/e2e_decoder.py --budget 3 --max-tune-seconds 170`: the same layer, the two "
               "layers timed in 21 interleaved rounds of 20 calls (order reversed every other round), the median "
               "per-round ratio with its quartiles; tuned by `cudal2.tune_model` (leaders confirmed sustained) until "
               "the tuning time ran out, served from `TunedTable.for_serving`."),
    Experiment("The decoder layer, all projections through cudal2.linear, table of the run above, H100",
               "e2e_decoder_served_h100_2026-11-26.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py --budget 0` on the run above's store (no new tuning): every projection "
               "through cudal2.linear (the op's fallback skipping its call key for weights no entry has), each GEMM "
               "alone timed over operand copies that fill twice the L2 (the run above timed it L2-hot)."),
    Experiment("The decoder layer with cudal2 installed by route_linears, H100", "e2e_decoder_routed_h100_2026-11-26.json",
               "e2e_decoder", "`benchmarks/e2e_decoder.py --budget 0` on the same store: `cudal2.route_linears` sends "
               "only the layers whose weight has a kernel in the table (k and v) through cudal2.linear, and a traced "
               "graph takes the op only where the kernel saves 25 us a call or more (`TRACED_MIN_SAVING_US`), so "
               "under torch.compile every GEMM here ran torch's."),
    Experiment("The decoder layer tuned at 4096 and 1024 tokens, H100", "e2e_decoder_tune_large_h100_2026-11-26.json",
               "e2e_decoder", "`benchmarks/e2e_decoder.py --tokens 4096,1024 --tune-tokens 4096,1024 --budget 3 "
               "--max-tune-seconds 330` on the store above (its 1- and 16-token entries kept). Offline the search's "
               "kernels beat torch on 4096x4096x4096 (1.038) and 4096x14336x4096 (1.019); timed again sustained, "
               "none did, so the table served nothing here."),
    Experiment("The decoder layer with the op's eager saving rule, H100", "e2e_decoder_gated_h100_2026-11-26.json",
               "e2e_decoder", "`benchmarks/e2e_decoder.py --budget 0` on the store of the run above: a kernel is "
               "used only where it saves `EAGER_MIN_SAVING_US` (10 us) a call, so the k/v kernels of 1 and 16 "
               "tokens (about 1.2 us saved) are left to torch and route_linears routes no layer."),
    Experiment("The same decoder layer with Triton kernels launched by the op, H100",
               "e2e_decoder_with_triton_h100_2026-11-26.json", "e2e_decoder",
               "As above, before the op left Triton kernels to torch: tuned at budget 3 over both backends (learned "
               "proposer, 230 s), the op launching Triton kernels through Triton's JIT launcher."),
    Experiment("Our CuTe DSL kernels against quack's on two large shapes, H200", "peer_parity_named_h200_2026-11-25.json",
               "peer_parity", "As above, on an H200."),
    Experiment("Our CuTe DSL kernels against quack's on validation serving shapes, H100",
               "peer_parity_validation_h100_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --sample 8 --budget 16 --max-seconds 230`: the first 3 validation serving "
               "shapes drawn (layout NT) before the time ran out, our search at budget 16."),
    Experiment("Our CuTe DSL kernels against quack's on ten validation serving shapes, H100",
               "peer_parity_validation10_h100_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --sample 10 --budget 16 --max-seconds 400`: the first 5 of 10 validation "
               "serving shapes drawn (layout NT) before the time ran out, our search at budget 16; the share of "
               "quack's configs our IR expresses is over all 10. The 22 it does not express are quack's swap_ab "
               "configs on 1x16384x3072, which the cute_dsl backend refuses for a one-row output (\"a 1x16384 output "
               "is a vector; the kernel's one-row and one-column TMA paths are written for the unswapped kernel\"); "
               "all 44 are expressed on the other nine."),
    Experiment("Our CuTe DSL kernels against quack's on the other validation shapes of the ten, H100",
               "peer_parity_validation_rest_h100_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --shapes 512x6144x4096,16384x16384x3072,1000x32000x5120,1x16384x3072,"
               "100x3072x3072 --sample 5 --budget 16 --max-seconds 400`: the five of the ten drawn above that it "
               "did not reach; 4 ran before the time ran out (512x6144x4096 did not)."),
    Experiment("Our CuTe DSL kernels against quack's on 16384x16384x3072 with the grouped walk, H100",
               "peer_parity_16384_h100_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --shapes 16384x16384x3072 --sample 1 --budget 16 --max-seconds 180`: the "
               "validation shape where ours trailed most at quack's pick (0.931, above), after static kernels took "
               "the backend's grouped walk where the DSL's scheduler cut the raster group to 1."),
    Experiment("Our CuTe DSL kernels against quack's on the ten validation shapes, with the grouped walk, H100 (1 of 2)",
               "peer_parity_validation_walk_a_h100_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --shapes 2048x16384x3072,128x8192x3584,16x9216x3072,4096x3584x18944,"
               "7x16384x3072 --sample 5 --budget 16 --max-seconds 500`: the first five of the ten validation serving "
               "shapes `--sample 10` draws, after static kernels took the grouped walk."),
    Experiment("Our CuTe DSL kernels against quack's on the ten validation shapes, with the grouped walk, H100 (2 of 2)",
               "peer_parity_validation_walk_b_h100_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --shapes 512x6144x4096,16384x16384x3072,1000x32000x5120,1x16384x3072,"
               "100x3072x3072 --sample 5 --budget 16 --max-seconds 500`: the other five, the same machine and code. "
               "The 22 swap_ab refusals on 1x16384x3072 were lifted after this run (swap_ab on a one-row output, "
               "`peer_config_variants_one_row_h100_2026-11-26.md`)."),
    Experiment("Our CuTe DSL kernels against quack's on validation serving shapes, H200",
               "peer_parity_validation_h200_2026-11-26.json", "peer_parity",
               "`benchmarks/peer_parity.py --sample 8 --budget 16 --max-seconds 360`: the first 5 validation serving "
               "shapes drawn (layout NT) before the time ran out, our search at budget 16."),
    Experiment("A sweep on two GPUs against one", "scale_out_h100x2_2026-11-26.json", "scale_out",
               "`benchmarks/scale_out.py OUT.json --gpus 2` on two H100 80GB HBM3 (the 2-GPU kind came with H100s): 64 "
               "Triton catalog specs on 12 train serving shapes of at most 1 GFLOP (2 more swept first to compile), one "
               "process, then dask-cuda clusters of 1 and 2 workers; dask 2026.7.1, distributed 2026.7.1, dask-cuda "
               "26.10.00, torch 2.11.0+cu130, Triton 3.6.0 (from the run's log; this file predates the environment key)."),
    Experiment("A sweep on two GPUs with one worker killed", "scale_out_kill_h100x2_2026-11-26.json", "scale_out",
               "`benchmarks/scale_out.py OUT.json --gpus 2 --parts kill --sample 8` on two H100 80GB HBM3 (another "
               "machine of the same kind): 64 specs on 6 shapes, a worker killed with SIGKILL once two batches were "
               "stored, then the same sweep again on the store; versions as above."),
    Experiment("cuda_cpp's sm_80 kernels against Triton lowered for sm_80", "sm80_backends_h100_2026-11-26.json",
               "sm80_backends", "`benchmarks/sm80_backends.py --max-seconds 470`: the 48 probe shapes and 16 validation "
               "serving shapes; a rules-drawn pool of 12 shape-generic sm_80 specs per backend swept (cuda_cpp's "
               "data-parallel specs staging their epilogue through shared memory, the rules' first choice for it), "
               "winners confirmed once; ratio Triton us / cuda_cpp us."),
    Experiment("cuda_cpp's sm_80 kernels against Triton lowered for sm_80, registers epilogue, partial",
               "sm80_backends_partial_h100_2026-11-26.json",
               "sm80_backends", "The same benchmark earlier the same day, before the rules staged cuda_cpp's epilogue "
               "through shared memory (every cuda_cpp spec stored from registers): 25 of its 64 shapes (19 probe, 6 "
               "validation) before the device time ran out (`--max-seconds 200`)."),
    Experiment("Search winners in layer mode, the evaluator against a harness, 30 validation shapes, H200",
               "crosscheck_winners_h200_2026-11-29.json", "crosscheck_winners",
               "`benchmarks/crosscheck_winners.py OUT.md --shapes 30 --budget 4`: each shape searched (layer mode, "
               "Triton), the winner and torch.matmul timed again by the evaluator (a trial's timing) and by a harness "
               "written apart from cudal2's timing (25 rounds)."),
    Experiment("The same winners checked again on another machine, H200", "crosscheck_winners_recheck_h200_2026-11-29.json",
               "crosscheck_winners", "`--recheck` of the run above: no search, the same two timings."),
    Experiment("The same winners with the confirmation's timing and 100 harness rounds, H200",
               "crosscheck_winners_confirm_g20_h200_2026-11-29.json", "crosscheck_winners",
               "`--recheck --rounds 100 --groups 20` on a third machine: the evaluator times as the search's "
               "confirmation does (20 groups a round)."),
    Experiment("As above with 60 groups a round, H200", "crosscheck_winners_confirm_g60_h200_2026-11-29.json",
               "crosscheck_winners", "`--recheck --rounds 100 --groups 60`, the same machine, right after."),
    Experiment("Search winners, layer-mode groups of about 2 ms, checked again, H200",
               "crosscheck_winners_groups_h200_2026-11-29.json", "crosscheck_winners",
               "`--recheck` of the first run's winners with `--rounds 100`, after a layer-mode group came to cycle "
               "over the input sets for about target_group_ms (it was one pass of 2-4 calls)."),
    Experiment("As above, again on the same machine, H200", "crosscheck_winners_groups_again_h200_2026-11-29.json",
               "crosscheck_winners", "The same command right after, in the same call."),
    Experiment("Search winners searched and checked on one machine, harness of 25 rounds, H200",
               "crosscheck_winners_search_h200_2026-11-29.json", "crosscheck_winners",
               "`benchmarks/crosscheck_winners.py OUT.md --shapes 30 --budget 4` with the sized groups; the harness "
               "still took 25 rounds with no warm-up, right after each search."),
    Experiment("Search winners searched and checked on one machine, harness warmed up, 100 rounds, H200",
               "crosscheck_winners_search2_h200_2026-11-29.json", "crosscheck_winners",
               "The same command on another machine after the harness warmed up 0.5 s and took 100 rounds."),
    Experiment("cudal2.linear with those winners served, against F.linear, H200",
               "op_served_same_machine_h200_2026-11-29.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners RUN.json`, on the machine that searched them (the run two "
               "above), before the op's 1.01 margin: eager wall time of back-to-back calls and a CUDA graph of the "
               "model's call pattern."),
    Experiment("cudal2.linear with re-timed winners served, another machine, H200", "op_served_h200_2026-11-29.json",
               "op_served", "`benchmarks/op_served.py` with the winners of the sized-groups recheck, served on another "
               "machine than the one that measured them, before the op's 1.01 margin."),
    Experiment("The decoder layer, sized layer-mode groups, each served group alone, H200",
               "e2e_decoder_groups_h200_2026-11-29.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128,1024 --modes graph --budget 4 --max-tune-seconds "
               "240`: the table's predicted saving against the layer's, and each served group alone."),
    Experiment("As above, the same store on another machine, with whole-replay timings", "e2e_decoder_stream_h200_2026-11-29.json",
               "e2e_decoder", "`--budget 0`: each served group's prediction also timed as the whole replay of a graph "
               "after the prelude and after a GEMM."),
    Experiment("The decoder layer, each served group also between two GEMMs and its layer saving measured twice, H200",
               "e2e_decoder_between_h200_2026-11-29.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128 --modes graph --budget 4 --max-tune-seconds 200`: "
               "a served group's saving timed as the whole replay with a cuBLAS GEMM before and after each call comes "
               "within 25% of the layer's at 1 and 16 tokens; at 128 tokens no isolated regime sees the layer's loss "
               "(benchmarks/layer_kernels.py: the o projection's kernel runs 1.3 us slower there than cuBLAS's)."),
    Experiment("The decoder layer searched in chain mode, H200", "e2e_decoder_chain_h200_2026-11-29.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128 --modes graph --budget 4 --max-tune-seconds 200 "
               "--search-mode chain`: the table's prediction within 25% of the layer's saving at 1 token (4.61 against "
               "5.28 us), 25.1% off at 16 (2.56 against 3.42), wrong in sign at 128; the layer 1.026x and 1.017x at 1 "
               "and 16 tokens."),
    Experiment("Search winners in chain mode, the evaluator against the chain harness, H200",
               "crosscheck_winners_chain_h200_2026-11-29.json", "crosscheck_winners",
               "`benchmarks/crosscheck_winners.py OUT.md --shapes 30 --budget 4 --mode chain --max-seconds 470`: "
               "25 of 30 within 2% (the five others among the eight smallest)."),
    Experiment("The eight smallest of those winners checked again on another machine, H200",
               "crosscheck_winners_chain_small_recheck_h200_2026-11-29.json", "crosscheck_winners",
               "`--recheck` of the eight smallest rows, `--mode chain`: 7 of 8 within 2%; 1x3072x3072 differs in both "
               "runs (evaluator 1.149 and 1.152, harness 1.074 and 1.096)."),
    Experiment("The chain regime on one placement of its buffers against fresh ones, H200",
               "chain_placement_h200_2026-11-29.json", "chain_placement",
               "`benchmarks/chain_placement.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-29.json --shapes "
               "1x3072x3072,33x3072x3072,33x6144x4096`: five timings on one placement, five on fresh ones, by each timer."),
    Experiment("Those 30 winners again, chain groups over four placements of the buffers, H200",
               "crosscheck_winners_chain_placements_h200_2026-11-29.json", "crosscheck_winners",
               "`--recheck` of the 30-shape chain run, `--mode chain`, the evaluator's groups and the harness's rounds "
               "each split over four placements of their buffers: 27 of 30 within 2%; 1x3072x3072, 33x3072x3072 and "
               "33x6144x4096 differ."),
    Experiment("The eight smallest again, the harness's operands drawn anew at each placement too, H200",
               "crosscheck_winners_chain_placements_small_h200_2026-11-29.json", "crosscheck_winners",
               "`--recheck` of the eight smallest rows, `--mode chain`, the harness as committed: 6 of 8; 1x3072x3072 "
               "still reads torch at 9.4 us in the harness against 10.4 in the evaluator."),
    Experiment("All 30 winners, the chain harness warming each graph up on a side stream, H200",
               "crosscheck_winners_chain_sidestream_all_h200_2026-11-29.json", "crosscheck_winners",
               "`--recheck` of the 30-shape chain run, `--mode chain`: 28 of 30 within 2%; 1x3072x3072 (1.150 against "
               "1.124) and 33x3072x3072 (0.914 against 0.895) differ. A graph's kernels run further apart once the "
               "process has run work on a second stream, as the evaluator's and a model's have (docs/evaluation.md)."),
    Experiment("All 30 winners, the harness's warm-up on the current stream, H200",
               "crosscheck_winners_chain_placements_all_h200_2026-11-29.json", "crosscheck_winners",
               "`--recheck` of the 30-shape chain run, `--mode chain`, right after the run above on the same machine: "
               "27 of 30 within 2%; 1x3072x3072 and 33x3072x3072 differ as before, 128x152064x8192 by 2.1%."),
    Experiment("A graph's kernel gaps before and after a second stream ran work in the process, H200",
               "stream_state_h200_2026-11-29.json", "stream_state",
               "`benchmarks/stream_state.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-29.json`: the "
               "crosscheck's chain harness on 1x3072x3072, its graphs profiled in a fresh process and again after "
               "torch.matmul ran on a new stream; why the harness warms each graph up on a side stream."),
    Experiment("The decoder layer at 1, 16, 128 and 1024 tokens, chain mode the default objective, H200",
               "e2e_decoder_chain_all_h200_2026-11-29.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128,1024 --modes graph --budget 4 --max-tune-seconds "
               "270` (Triton only): the table's prediction within 25% of the layer's saving at 16 tokens (3.59 against "
               "3.45 us); 25.5% off at 1 (4.07 against 5.46), wrong in sign at 128 (1.42 against -1.87: the q, o "
               "kernel loses 1.2 us in the layer while every isolated regime reads a saving); at 1024 tokens no "
               "kernel was served, the layers differ by noise (quartiles 0.991 to 1.014)."),
    Experiment("A transformers Llama (2 layers) in eager, compiled and graph modes, H200", "e2e_model_all_modes_h200_2026-11-29.json",
               "e2e_model", "`benchmarks/e2e_model.py --layers 2 --budget 4 --modes eager,compile,graph --rounds 21` "
               "(Triton only), before the op's 1.01 margin."),
    Experiment("cudal2.linear with those winners served, Triton kernels launched directly, a third machine, H200",
               "op_served_direct_launch_h200_2026-11-29.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_search2_h200_2026-11-29.json "
               "--max-seconds 470` after bound Triton runs came to relaunch their compiled kernels (host cost of a "
               "served Triton call about 2 us over F.linear, against 13 us through the JIT), with the op's 1.01 margin."),
    Experiment("cudal2.linear, the first six winners again after the graph-only fast path, H200",
               "op_served_small_h200_2026-11-29.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_search2_h200_2026-11-29.json --shapes 6`: "
               "a count pair served only in graphs goes to torch after the capture test; the host-bound 1x3072x3072 "
               "still reads 0.916 eager."),
    Experiment("The op's fallback: the per-call cost with nothing served, H200", "op_overhead_fallback_h200_2026-11-29.json",
               "op_overhead", "`benchmarks/op_overhead.py OUT.md --shapes 1x4096x4096,16x14336x4096 --budget 0 "
               "--rounds 61` with a fresh store: no search, the op runs torch on every call."),
    Experiment("The per-call cost of a served Triton kernel launched directly, H200", "op_overhead_triton_h200_2026-11-29.json",
               "op_overhead", "`benchmarks/op_overhead.py OUT.md --shapes 1x4096x4096,1x32000x5120 --budget 4 "
               "--backends triton --rounds 41`, same machine, after bound Triton runs came to relaunch their compiled "
               "kernels."),
    Experiment("cudal2.linear with the chain-mode winners served, launch cost from least loops, H200",
               "op_served_chain_rounds100_h200_2026-11-29.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-29.json --rounds 100` "
               "(graph path in the chain pattern, one placement): the op's launch cost, the least of five loops per "
               "side, read Triton's launch low enough to serve 1x3072x3072 and 16x3584x18944 eagerly, which then ran "
               "0.777 and 0.970 of F.linear."),
    Experiment("The same after the launch cost became a median of interleaved rounds, call key included, H200",
               "op_served_chain_h200_2026-11-29.json", "op_served",
               "The command above on another machine: the op measured Triton's launch at 7.9 us beyond F.linear's and "
               "served no small shape eagerly; 7x152064x8192's winner ran 1.005x here (1.051x on the earlier "
               "machines: this one's F.linear the same, the kernel 5% slower)."),
    Experiment("The same with the chain graph path over four placements of operands and buffers, H200",
               "op_served_chain_placements_h200_2026-11-29.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-29.json --rounds 100 "
               "--max-seconds 290`: the graph failures are all on shapes where both sides run F.linear (the op serves "
               "torch there), ratios 0.972 to 0.989 with quartiles reaching 0.99 or above 1; over the 25 such shapes "
               "the median reads 1.000. Eager: 1x3072x3072, 33x3072x3072 and 128x17920x1536 at 0.926, 0.949 and 0.967, "
               "each running torch through the op (its Python on a host where F.linear's call takes 24 us)."),
    Experiment("The op's fallback again, another machine, H200", "op_overhead_fallback_again_h200_2026-11-29.json",
               "op_overhead", "`benchmarks/op_overhead.py OUT.md --shapes 1x4096x4096 --budget 0 --rounds 61` with a "
               "fresh store: +0.53 us a call over F.linear's 24.0 us (quartiles +0.16 to +0.88)."),
    Experiment("The op's fallback with kept weights, H200", "op_overhead_fallback_kept_weight_h200_2026-11-29.json",
               "op_overhead", "The command above (GPU-cc41ac5f) after the op kept the weights whose every call runs torch "
               "(one id lookup before the grad test and the element counts): +1.15 us a call over F.linear's 25.6 us "
               "(quartiles +0.56 to +1.60)."),
    Experiment("The op's fallback with kept weights, 201 rounds, H200", "op_overhead_fallback_kept_weight_r201_h200_2026-11-29.json",
               "op_overhead", "`benchmarks/op_overhead.py OUT.md --shapes 1x4096x4096 --budget 0 --rounds 201` with a fresh "
               "store (GPU-ae09d539): +1.07 us over F.linear's 26.6 us (quartiles +0.16 to +1.90)."),
    Experiment("The op's fallback before kept weights, 201 rounds, same machine, H200",
               "op_overhead_fallback_before_kept_weight_r201_h200_2026-11-29.json", "op_overhead",
               "The same command with the code of commit 0df301b, run next in a fresh process on the same machine "
               "(GPU-ae09d539): +0.37 us over F.linear's 19.6 us (quartiles +0.10 to +0.68). F.linear's own host time "
               "moved from 19.6 to 26.6 us between the two processes: on these hosts the fallback's sub-microsecond "
               "cost is within the noise of a process's state."),
    Experiment("Host-bound shapes through the op with kept weights, H200", "op_served_host_bound_kept_weight_h200_2026-11-29.json",
               "op_served", "`benchmarks/op_served.py OUT.md --winners W --shapes 5 --rounds 100` (GPU-cc41ac5f), W the "
               "rows of crosscheck_winners_chain_h200_2026-11-29.json with five shapes first "
               "(crosscheck_winners_chain_host_bound_first_h200_2026-11-29.json; the table holds all 30). Eager: "
               "1x3072x3072 0.942 (a kernel serves it in graphs only, so its eager call also asks whether a capture "
               "is underway), 33x3072x3072 0.962, 128x17920x1536 1.000."),
    Experiment("Host-bound shapes through the op before kept weights, same machine, H200",
               "op_served_host_bound_before_kept_weight_h200_2026-11-29.json", "op_served",
               "The same command with the code of commit 0df301b, next on the same machine: eager 0.926, 0.953 and 0.980."),
    Experiment("Proposers at equal budget, chain mode, serving validation shapes, H200",
               "compare_validation_chain_h200_2026-11-29.json", "compare",
               "`cudal2 compare serving:validation --sample 6 --layout NT --proposers learned,rules --budget 16 --backend "
               "triton` (GPU-c96141b4; Triton only: nvidia-cutlass-dsl was not installed), every search in chain mode, "
               "the default objective: learned 1.000x torch.matmul in geomean, rules 0.983x."),
    Experiment("The same on eleven more serving validation shapes, layout NT, H200",
               "compare_validation_chain_more11_nt_h200_2026-11-29.json", "compare",
               "The same command on eleven shapes drawn by a shuffle of the serving validation set (Python's random.Random(1)), less the "
               "six above and one of 41 TFLOP (16384x152064x8192, for the 10-minute call), GPU-b57b62cc: learned "
               "0.967x, rules 0.937x. Over the 17 shapes of the two runs: learned 0.979x, rules 0.953x."),
    Experiment("Those eleven shapes in layout NN, H200", "compare_validation_chain_more11_nn_h200_2026-11-29.json",
               "compare", "The run before the one above, GPU-c96141b4: the comma list lost `--layout NT` (a bug, fixed: a "
               "list's shapes now take --layout unless one names its own), so it searched layout NN: learned 0.970x, "
               "rules 0.926x."),
    Experiment("A transformers Llama (2 layers), routes checked inside the model, H200", "e2e_model_checked_h200_2026-11-29.json",
               "e2e_model", "`benchmarks/e2e_model.py --layers 2 --budget 4 --modes eager,compile,graph --rounds 15` "
               "(Triton only, direct Triton launches): cudal2.check_routes kept a routed group only where it saved "
               "time inside the model, in each mode; it kept none."),
    Experiment("A transformers Llama (2 layers), both backends, routes checked inside the model, H200",
               "e2e_model_both_backends_h200_2026-11-29.json", "e2e_model",
               "The same command with nvidia-cutlass-dsl 4.8.1 installed (CuTe DSL and Triton): the search's CuTe DSL "
               "kernel for 512x14336x4096 (1.125x torch in layer mode) served gate_proj and up_proj in CUDA graphs, "
               "where cudal2.check_routes measured them saving 24.8 us a prefill forward; no group was kept in eager "
               "or compiled mode."),
    Experiment("A transformers Llama (2 layers), graph mode, routes checked against an A/A floor, H200",
               "e2e_model_floor_h200_2026-11-29.json", "e2e_model",
               "`benchmarks/e2e_model.py --layers 2 --budget 4 --modes graph --rounds 15` (Triton only) after "
               "cudal2.check_routes came to time the forward against itself first: the floor read 0.76 us, and the "
               "one routed group (q/o, -0.19 us a prefill forward) went back to nn.Linear."),
    Experiment("Proposers at equal budget, chain mode, both backends, serving validation shapes, H200",
               "compare_validation_chain_both_backends_h200_2026-11-29.json", "compare",
               "`cudal2 compare serving:validation --sample 6 --layout NT --proposers learned --budget 16 --backend triton "
               "--backend cute_dsl` (GPU-c898d4e7; nvidia-cutlass-dsl 4.8.1): the learned proposer's search reads 1.072x "
               "torch.matmul in geomean, in chain mode, on the six shapes whose Triton-only run read 1.000x; a CuTe DSL "
               "kernel won four of them."),
    Experiment("The same on the eleven more serving validation shapes, both backends, H200",
               "compare_validation_chain_both_backends_more11_h200_2026-11-29.json", "compare",
               "The same command on the eleven shapes of the Triton-only run above, layout NT, same machine: 1.046x "
               "(Triton only: 0.967x); CuTe DSL kernels won nine; one shape slower than torch (100x3072x3072, 0.892x). "
               "Over the 17 shapes of the two runs: 1.055x (Triton only: 0.979x)."),
    Experiment("The op's fallback over seven fresh processes, H200", "op_overhead_fallback_processes_h200_2026-11-29.json",
               "op_overhead", "`benchmarks/op_overhead.py OUT.md --shapes 1x4096x4096 --budget 0 --eager-only --processes 7 "
               "--rounds 101` with a fresh store (GPU-c898d4e7): cudal2.linear +0.78 us a call over F.linear (the seven "
               "processes +0.66 to +0.89, F.linear's own call 16.1 to 17.4 us), cudal2.matmul +0.62 us."),
    Experiment("A transformers Llama (2 layers), batch 4, both backends, budget 16, graph mode, H200",
               "e2e_model_batch4_h200_2026-11-29.json", "e2e_model",
               "`benchmarks/e2e_model.py --layers 2 --batch 4 --budget 16 --modes graph --rounds 15` (GPU-73b7670a), "
               "before cudal2.check_routes left untimed a group the op served no call of: the prefill's checks (none of "
               "the 2048-row GEMMs had a win) took back every route, the decode's wins (4x4096x4096 1.096x, "
               "4x1024x4096 1.172x in the search) with them."),
    Experiment("A transformers Llama (2 layers), batch 64 decode, both backends, budget 16, graph mode, H200",
               "e2e_model_batch64_h200_2026-11-29.json", "e2e_model",
               "`benchmarks/e2e_model.py --layers 2 --batch 64 --prompt 64 --budget 16 --modes graph --rounds 15` "
               "(GPU-bf0d9c04): a decode step of 64 sequences runs 1.036x the untouched model's tokens/s (quartiles "
               "1.035 to 1.038), the prefill of 4096 tokens 1.003x; cudal2.check_routes kept q, k, v, o, down and "
               "lm_head, each saving a decode forward 2.0 to 29.3 us, and took back gate and up (the prefill's 4096-row "
               "kernel, 1.036x in the search, lost inside the model)."),
    Experiment("The same model and store in eager mode, H200", "e2e_model_batch64_eager_h200_2026-11-29.json", "e2e_model",
               "`--budget 0 --modes eager` on that store, same machine: 1.004x prefill, 1.009x decode; "
               "cudal2.check_routes took every served group back (each lost 5 to 92 us a host-bound decode forward), "
               "so both models ran torch's kernels."),
    Experiment("The batch-64 Llama again, a losing group declining only its row counts, graph mode, H200",
               "e2e_model_batch64_declines_h200_2026-11-29.json", "e2e_model",
               "`benchmarks/e2e_model.py --layers 2 --batch 64 --prompt 64 --budget 0 --modes graph --rounds 15` on the "
               "batch-64 store above (GPU-3f55face), after cudal2.check_routes made a losing group decline only the row "
               "counts it was served at: decode 1.034x (1.033 to 1.034), prefill 1.004x. gate/up declined its 4096-row "
               "prefill calls, where it lost; at 64 rows its decode kernel (0.85 us saved a forward) and q/o's (0.96 us) fell "
               "under the floor (1.38 us) and declined too; k/v, down and lm_head kept their decode wins."),
    Experiment("The same in eager mode, H200", "e2e_model_batch64_declines_eager_h200_2026-11-29.json", "e2e_model",
               "`--modes eager` on the same store and machine: prefill 1.002x, decode 0.993x (0.971 to 1.002); every "
               "served group lost inside the host-bound eager forward and declined its row counts, so both models ran "
               "torch's kernels, ours through the routed layers' row test."),
    Experiment("The op's fallback beside a bare Python wrapper of F.linear, five processes, H200",
               "op_overhead_fallback_floor_h200_2026-11-29.json", "op_overhead",
               "`benchmarks/op_overhead.py OUT.md --shapes 1x4096x4096 --budget 0 --eager-only --processes 5 --rounds 101` "
               "with a fresh store (GPU-3f55face), a path added that calls F.linear through one Python function and "
               "nothing else: that wrapper -0.08 us, cudal2.linear +0.78 us, cudal2.matmul +0.68 us."),
    Experiment("The same, the kept-weight test first in linear(), three processes, another machine, H200",
               "op_overhead_fallback_floor_again_h200_2026-11-29.json", "op_overhead",
               "The command above with `--processes 3` (GPU-62ab8264) after linear() tested for a kept weight before "
               "anything else past the trace test: cudal2.linear +1.06 us, the wrapper -0.02 us."),
    Experiment("The same, linear() a short front, three processes, a third machine, H200",
               "op_overhead_fallback_front_h200_2026-11-29.json", "op_overhead",
               "`--processes 3` (GPU-a66de040) after linear() became a short function of the trace test and the "
               "kept-weight test, the rest in _linear: cudal2.linear +1.01 us (+0.74 to +1.39 over the processes), the "
               "wrapper -0.15 us. The same machine's benchmarks/op_fallback_parts.py read the op +0.44 us, as a copy of "
               "its three tests (op_fallback_parts_h200_2026-11-29.md)."),
    Experiment("The same, the paths' order reversed every other round, a fourth machine, H200",
               "op_overhead_fallback_alternating_h200_2026-11-29.json", "op_overhead",
               "`--processes 3` (GPU-65148e78) after op_overhead.py reversed the order of the paths every other round "
               "(the wrapper had always run last): cudal2.linear +0.73 us (+0.71 to +0.84), cudal2.matmul +0.56 us, "
               "the wrapper -0.02 us."),
    Experiment("The op's fallback through its C front, three processes, H200",
               "op_overhead_fallback_c_front_h200_2026-11-30.json", "op_overhead",
               "`--processes 3` (GPU-0221c1ab) with cudal2.linear the op's C front (cudal2.op_front), its Python "
               "front timed beside it: cudal2.linear +0.09 us (+0.12, +0.09, +0.02 over the processes), its Python "
               "front +0.74 us, the wrapper +0.01 us, cudal2.matmul (no C front) +0.57 us. In situ on the same machine "
               "benchmarks/op_fallback_parts.py read the C front +0.22 us and the Python front +0.41 us "
               "(op_fallback_parts_c_front_h200_2026-11-30.md)."),
    Experiment("The op served with the C front, 30 validation shapes, H200", "op_served_c_front_h200_2026-11-30.json",
               "op_served", "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-29.json "
               "--rounds 40` (GPU-b59ceb88; Triton winners, chain pattern) with cudal2.linear the C front over kept "
               "weights: 26 of 30 shapes pass every verdict (23 of 30 on 2026-11-29 with the Python front). 1x3072x3072 "
               "eager read 0.798: its split-K kernel was declined for its two launches, yet every call still built its "
               "call key to find torch (the plans had taken the count for an eager kernel's); found here, fixed next."),
    Experiment("The same after a declined kernel leaves the fast path, H200", "op_served_declined_h200_2026-11-30.json",
               "op_served", "`--rounds 40` again (GPU-7dfac145) after the op kept declined entries out of its plans "
               "(_declined_eager) and the C front took a weight served at other row counts: 25 of 30; 1x3072x3072 eager "
               "0.931 (now a graph-only count, its calls through the Python capture test), the other eager misses "
               "0.975 and 0.986 on torch-served shapes, graph misses 0.986 and 1.008 against 1.009."),
    Experiment("The same with graph-only counts in the C front, H200", "op_served_graph_only_in_c_h200_2026-11-30.json",
               "op_served", "`--rounds 60` (GPU-0dcc1f4f) with graph-only counts sent to torch by the C front after "
               "asking CUDA whether a capture runs: 25 of 30; 1x3072x3072 eager 0.937 (the capture query cost it; the "
               "next version asks the stream first, as the Python test does), 33x3072x3072 eager 0.970; in graphs torch "
               "against torch read 0.989 and 0.988 on two shapes, and two served kernels missed their searched speedup "
               "less 0.02 by 0.001 and 0.010 (1x32000x5120 1.009, 1x3072x3072 1.106)."),
    Experiment("The first ten shapes with the final C front, 100 rounds, H200", "op_served_small_c_front_h200_2026-11-30.json",
               "op_served", "`--shapes 10 --rounds 100` (GPU-95d714ce) with the C front's capture test in C: 5 of 10 "
               "pass. Eager: 1x3072x3072 0.960, 33x3072x3072 0.974, 33x6144x4096 0.983, every other shape 0.993 to "
               "1.036. 1x3072x3072 and 33x3072x3072, whose weight shape a kernel serves at 1 row only in graphs, pay 0.6 "
               "to 0.8 us; 33x6144x4096, a weight kept for every call, read 0.983 here and 0.993 to 1.000 in the three "
               "30-shape runs above. In situ "
               "(benchmarks/op_fallback_paths.py 101, GPU-cb29aa99; op_fallback_paths_h200_2026-11-30.md) the C front "
               "costs +0.20 us over F.linear for a kept weight, +0.54 for one served at other row counts, +0.85 for a "
               "count served only in graphs; the Python front +0.48, +0.90 and +1.56. Graph: torch against torch read 0.983 and 0.990 on two shapes; the "
               "served kernels of 1x3072x3072 (1.111) and 1x32000x5120 (1.007) missed their searched speedup less 0.02 "
               "by 0.005 and 0.002."),
    Experiment("The op served with the C front's probe and weights kept unless captured, 30 shapes, H200",
               "op_served_probe_h200_2026-11-30.json", "op_served",
               "`--rounds 40` (GPU-6e43fcb9), eager rounds continued until 3 s of them (40 to 406 rounds a shape), "
               "with the C front's probe bound (x's count and the capture test read from torch's C++ objects, "
               "op_front_probe.cpp) and a weight whose shape is served only in graphs kept as 'unless "
               "captured' once its kernels are built: 25 of 30. Eager: every shape 0.999 to 1.049 but 1x3072x3072 "
               "0.982 and 33x3072x3072 0.979, whose 3072x3072 weight a kernel serves at 1 row only in graphs; "
               "graph misses 0.982 to 0.990 are torch against torch on shapes the op serves with torch. Fallback "
               "paths in situ (op_fallback_paths.py 301, GPU-622d4466; op_fallback_paths_probe_h200_2026-11-30.md), "
               "C front with / without the probe: kept +0.24 / +0.29 us, a count read in the plan +0.45 / +0.69, "
               "unless captured +0.35 to +0.37 / +0.54 to +0.55."),
    Experiment("The first four shapes again, with how each weight is kept, H200",
               "op_served_probe_kept_h200_2026-11-30.json", "op_served",
               "`--shapes 4 --rounds 40` (GPU-622d4466): 1 of 4. Eager 1x3072x3072 0.977 (weight kept "
               "unless captured, +0.53 us a call), 33x3072x3072 0.970 (kept with its plan, +0.79 us: in this process "
               "its shape's 1-row kernel was not built before its first call), 1x16384x3072 1.000 (every call "
               "torch), 1x32000x5120 1.034 (its Triton kernel served). Graph: 1x3072x3072's kernel 1.106 against "
               "1.136 searched, 1x32000x5120's 1.008 against 1.029."),
    Experiment("The same with graphs timed in at least 100 rounds, 30 shapes, H200",
               "op_served_graph_rounds_h200_2026-11-30.json", "op_served",
               "`--rounds 40` (GPU-e7c4e3d1), graph rounds at least the harness's 100, eager rounds until 3 s: 25 of "
               "30. Eager: every shape 0.998 to 1.044 but 33x3072x3072 0.978 and 1x3072x3072 0.981 (as above). Graph, "
               "torch against torch: 33x3072x3072 0.981, 33x6144x4096 0.983, 16x8192x3584 0.987; 100 rounds left "
               "the harness's bias on these small calls. 7x152064x8192's Triton kernel read 1.003 in both paths here "
               "(600 us against torch's 602 eager) where it read 1.049 on GPU-6e43fcb9 (572 against 601): the "
               "kernel, not torch, ran 5% slower on this GPU; the verdict 'searched - 0.02' fails. The GPU tests of "
               "the op's served paths (`CUDAL2_GPU_TESTS=1 pytest -m gpu tests/test_ops.py tests/test_op_front.py "
               "tests/test_gpu_triton_direct_launch.py tests/test_gpu_triton.py tests/test_search_api.py`, "
               "GPU-a68a2661): 73 passed, 8 skipped (no CuTe DSL installed; two TMA specs invalid for a shape)."),
    Experiment("The harness's own error: F.linear against itself, ten shapes, H200", "op_served_aa_h200_2026-11-30.json",
               "op_served", "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-29.json "
               "--aa --shapes 10 --rounds 40` (GPU-1cce4d01): F.linear timed against itself in op_served's two paths. "
               "Eager (rounds until 3 s): 1.000 to 1.003 on all ten. Graph, the chain harness in at least 100 rounds, "
               "the contenders' graphs captured in the reverse order in every other placement: 0.979 (33x6144x4096) to "
               "1.033 (1x3072x3072). So a graph verdict at 0.99 is within this harness's error on calls of about 10 "
               "to 20 us; where torch ran in both paths it says nothing of the op."),
    Experiment("The same A/A, both graphs captured in one order", "op_served_aa_same_order_h200_2026-11-30.json",
               "op_served", "As above in the same process lifetime of the machine (GPU-1cce4d01), with "
               "op_served.ALTERNATE_CAPTURE = False (`python -c \"import op_served; op_served.ALTERNATE_CAPTURE = "
               "False; op_served.main(...)\"` with the arguments above): eager 1.000 to 1.001, graph 0.994 to 1.029 "
               "(1x3072x3072 again 1.029). The capture order is not what moves it. In the harness each contender's "
               "floor-or-own order then started on the floor, so the second contender's graph was the first replay "
               "after the pause between rounds in every other round; the harness now starts each contender where "
               "the last one ended (measured below)."),
    Experiment("The same A/A, each contender's pairing starting where the last one ended, H200",
               "op_served_aa_paired_h200_2026-11-30.json", "op_served",
               "The A/A command above (`--max-seconds 120`) after the chain harness's floor-or-own pairing became "
               "crosscheck_winners.paired_timers (each contender's order starts where the previous one's ended, "
               "restarted after the warm-up), GPU-923681f5: eager 0.999 to 1.002, graph 0.991 (33x3584x18944) to "
               "1.002 (100x9216x3072), against 0.979 to 1.033 before. One run: the quartiles of the smallest calls "
               "are still wide (1x3072x3072 0.947 to 1.066), so a single shape's graph verdict at 0.99 stays within "
               "the harness's error there."),
    Experiment("The batch-64 Llama, Triton only, budget 16, eager and graph modes, H200",
               "e2e_model_triton_h200_2026-11-30.json", "e2e_model",
               "`benchmarks/e2e_model.py --layers 2 --batch 64 --prompt 64 --budget 16 --modes graph,eager --rounds 15` "
               "with a fresh store, no CuTe DSL installed (GPU-923681f5): graph decode 1.024x (1.023 to 1.025), "
               "prefill 1.001x; eager decode 0.994x (0.981 to 1.051), prefill 1.001x. cudal2.check_routes kept down "
               "(4.58 us a forward) and lm_head (19.63 us) in graphs and declined every eager decode group (each lost "
               "69 to 116 us a host-bound forward)."),
    Experiment("The same store, routed layers whose eager kernel was declined sent to linear(), H200",
               "e2e_model_routed_declined_h200_2026-11-30.json", "e2e_model",
               "`--budget 0 --modes eager,graph` on the store above (GPU-a9263fb6), after a routed layer whose count's "
               "kernel the op declined for eager calls (its launch path costs more than it saves) sends those calls to "
               "linear(): in ten decode steps with k/v routed, the eager path's Python (_run_linear, _captured_now) "
               "ran 0 times, against 40 before. Eager decode 0.989x (0.969 to 1.034), prefill 0.999x; graph decode "
               "1.011x (1.010 to 1.013), prefill 1.001x: this time check_routes declined down too (3.98 us saved, "
               "lower quartile 3.09 under the floor of 3.57), keeping lm_head only (14.59 us)."),
    Experiment("The same store, eager mode, 41 rounds, H200", "e2e_model_eager_rounds41_h200_2026-11-30.json",
               "e2e_model",
               "`--budget 0 --modes eager --rounds 41` on the same store (GPU-bd8d0a90): decode 0.983x (0.964 to "
               "1.000), prefill 1.003x; check_routes declined gate/up (-171 us a forward) and lm_head (-43 us); k/v "
               "and down served no eager call (their kernels declined for their launch paths) and kept their routes."),
    Experiment("The Llama's own A/A in eager mode: the untouched model against an untouched copy, H200",
               "e2e_model_aa_run1_h200_2026-11-30.json", "e2e_model",
               "`benchmarks/e2e_model.py --aa --layers 2 --batch 64 --prompt 64 --modes eager --rounds 41` (an empty "
               "table: nothing tuned, routed or checked), GPU-54c3f8f4: prefill 1.000x (0.998 to 1.003), decode 1.006x "
               "(0.997 to 1.016). With nothing changed, the eager decode ratio reads 0.6% off 1."),
    Experiment("The same A/A again, the same machine", "e2e_model_aa_run2_h200_2026-11-30.json", "e2e_model",
               "The command above again, right after (GPU-54c3f8f4): prefill 1.002x, decode 1.015x (0.999 to 1.060); "
               "the decode tokens/s of both models fell by 40% against the run before (a disturbed host), and the ratio "
               "read 1.5% off 1."),
    Experiment("The batch-64 Llama's eager mode beside those two A/A runs, H200",
               "e2e_model_eager_beside_aa_h200_2026-11-30.json", "e2e_model",
               "`--budget 0 --modes eager --rounds 41` on the Triton-only store, the same machine right after the "
               "two A/A runs (GPU-54c3f8f4): decode 0.993x (0.972 to 1.018), prefill 1.002x; check_routes declined "
               "gate/up, down and lm_head at 64 rows. Four eager decode readings of this store, 0.983 to 0.994, lie "
               "within 1.7% of 1, and the A/A's own readings within 1.5%."),
    Experiment("The op served, 30 validation shapes, the chain harness's new pairing, H200",
               "op_served_paired_h200_2026-11-30.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-29.json --rounds 40 "
               "--max-seconds 430` after the harness's pairing change (GPU-c0361d91): 25 of 30. Graph: 30 of 30 at "
               "0.99 or more (0.992 to 1.164; every torch-against-torch miss of the runs before is gone). Eager: the "
               "same two host-bound misses, 1x3072x3072 0.989 and 33x3072x3072 0.981. Served in graphs within "
               "searched - 0.02: 2 of 5 (1x3072x3072 1.164, 16x3584x18944 1.037); 1x32000x5120 read 0.995 against "
               "1.029, and on this GPU torch's own GEMM ran faster on the two 152064-wide shapes (7 rows: 577 us eager "
               "against 601 on GPU-6e43fcb9 and GPU-e7c4e3d1; 64 rows: 591 against 624), so their kernels, faster "
               "still, read 1.029 and 1.013 against a searched 1.052 and 1.049."),
    Experiment("Triton split-K reduced in one launch against the workspace's two, train shapes, H200",
               "split_k_serial_train_h200_2026-11-30.json", "split_k_serial",
               "`benchmarks/split_k_serial.py OUT.md --train 24 --max-seconds 330` (GPU-e2f20526): 24 train serving "
               "shapes, the rules' first Triton split-K proposal of each, timed by the evaluator in chain mode (full "
               "timing) with the workspace reduction and with split_k_reduction='serial' (the tile's last K slice sums "
               "the partials in slice order: the same bits, one launch). The rules' serial_reduction_us (1.14 us "
               "on sm_90a, against the workspace's 2.0) is the median saving fitted here."),
    Experiment("The same on the split-K winners of the validation shapes, H200",
               "split_k_serial_h200_2026-11-30.json", "split_k_serial",
               "`benchmarks/split_k_serial.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-29.json "
               "--max-seconds 150` (GPU-23eb4708): the six split-K winners of the 2026-11-29 search, each with both "
               "reductions: 0.992x to 1.121x."),
    Experiment("The same after the serial counters came to be taken back, not zeroed, H200",
               "split_k_serial_subtract_h200_2026-11-30.json", "split_k_serial",
               "The same command with `--max-seconds 80` (GPU-f64d0db8) after the tile's last slice came to take "
               "split_k off its counter with an atomic instead of storing zero (so that calls overlapping against "
               "the stream-order contract leave the calls after them right): 0.983x to 1.118x, as before; the "
               "25 serial GPU tests pass (bitwise equal to the workspace, the op's eager and graph calls)."),
    Experiment("Search winners in chain mode with the rules' serial split-K, H200",
               "crosscheck_winners_chain_rules_serial_h200_2026-11-30.json", "crosscheck_winners",
               "`benchmarks/crosscheck_winners.py OUT.md --shapes 30 --budget 4 --mode chain --max-seconds 480` "
               "(GPU-5183136f) after the rules came to propose Triton's split-K with the serial reduction first: 30 "
               "of 30 within 2%; one winner (1x3072x3072, 1.231 in eval) took it, the learned proposer's catalog "
               "picks kept the workspace's on five others."),
    Experiment("Search winners in chain mode with serial split-K from both proposers, H200",
               "crosscheck_winners_chain_h200_2026-11-30.json", "crosscheck_winners",
               "`--resume` of the run above with its 17 shapes of M <= 128 searched again (GPU-e17474fb) after the "
               "learned proposer came to run its catalog split-K specs as their serial twins: 30 of 30 within 2%; on "
               "those 17 shapes the evaluator's chain geomean reads 0.977 (0.966 for the 2026-11-29 winners on "
               "GPU-fb1ea895), 33x3072x3072 and 33x3584x18944 now ahead of torch (1.019, 1.010; 0.909 and 0.976 "
               "before)."),
    Experiment("The op served with those winners, 30 validation shapes, H200",
               "op_served_serial_h200_2026-11-30.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --rounds 40 "
               "--max-seconds 430` on the GPU that searched the small shapes (GPU-e17474fb): 28 of 30. The serial "
               "1x3072x3072 kernel is served eagerly too (1.043, the launch path 'triton' -5.03 us) where the "
               "workspace's two launches had been declined (0.989); eager 33x3072x3072 still 0.980 (torch served: "
               "its weight shape's plan tests the row count); 1x3072x3072 in graphs 1.177 (1.133 to 1.270) against "
               "a searched 1.226."),
    Experiment("The op with the same winners after its C front came to read a plan's counts at their slots, H200",
               "op_served_front_h200_2026-11-30.json", "op_served",
               "The command above with `--max-seconds 470` (GPU-6abc58d3, another host than the search's) after the "
               "C front came to read a _Plan's count sets at their __slots__ offsets and keep recent counts' ints: "
               "28 of 30 again. Eager 33x3072x3072 0.988 (0.981 to 0.995; 15.73 us F.linear, 15.91 us through the "
               "op), against 0.980 before; 1x3072x3072 served eagerly 1.120, in graphs 1.135 (1.109 to 1.251) "
               "against a searched 1.226; 16x3584x18944 and 7x152064x8192 served in both modes, within 0.02 of "
               "their searched figures."),
    Experiment("The batch-64 Llama's eager mode after check_routes came to put fully declined layers back, H200",
               "e2e_model_unrouted_eager_h200_2026-11-30.json", "e2e_model",
               "`benchmarks/e2e_model.py --layers 2 --batch 64 --prompt 64 --budget 0 --modes eager --rounds 61` on a "
               "copy of the serial-split-K store above (GPU-30ce921e): check_routes declined every decode group "
               "(each lost 56 to 154 us a host-bound forward) and, the table serving those layers at no other count, "
               "put all 11 back to nn.Linear: no layer routed while timed, so both models ran the same code. Eager "
               "decode 1.015x (0.990 to 1.037), prefill 1.000x: the harness's own spread."),
    Experiment("The Llama's eager A/A, 61 rounds, next on the same machine",
               "e2e_model_aa_rounds61_h200_2026-11-30.json", "e2e_model",
               "`benchmarks/e2e_model.py --aa --layers 2 --batch 64 --prompt 64 --modes eager --rounds 61` "
               "(GPU-30ce921e): decode 0.999x (0.977 to 1.020), prefill 1.001x."),
    Experiment("The batch-64 Llama in graph and eager modes with the day's code, H200",
               "e2e_model_unrouted_h200_2026-11-30.json", "e2e_model",
               "`--budget 0 --modes graph,eager --rounds 41` on the same store, next on GPU-30ce921e, with serial "
               "split-K, launches that follow the stream and fully declined layers put back: graph decode 1.029x "
               "(1.028 to 1.030), prefill 1.001x; eager decode 1.002x (0.981 to 1.043), prefill 1.002x. In graphs "
               "check_routes kept k/v (5.45 us a forward), down (6.46) and lm_head (17.02) and declined gate/up "
               "(0.98, lower quartile -0.29 under the floor of 2.11), which went back to nn.Linear; in eager "
               "mode every layer went back."),
    Experiment("1x3072x3072's winner in the op's graph harness through the op, its bound run and torch.matmul, H200",
               "graph_paths_h200_2026-11-30.json", "graph_paths",
               "`benchmarks/graph_paths.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --shape "
               "1x3072x3072 --reps 3` (GPU-fbef266b): against F.linear, cudal2.linear read 1.228, 1.219, 1.184 and "
               "the same kernel's bound run called directly 1.176, 1.202, 1.191: the op's graph path costs the "
               "kernel nothing measurable, and on this host it meets searched - 0.02 (1.206) in two reps of three. "
               "torch.matmul(x, w.t()), the evaluator's baseline call, read 0.971, 0.976, 0.972 of F.linear: if "
               "that holds on other shapes, a searched speedup over torch.matmul overstates the gain over nn.Linear "
               "by as much (1.226 searched against about 1.21 here)."),
    Experiment("The evaluator's torch baseline and F.linear: the kernels they launch, H200",
               "baseline_kernels_h200_2026-11-30.json", "baseline_kernels",
               "`benchmarks/baseline_kernels.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json` "
               "(GPU-a9709527): torch.matmul(x, w.t()) and F.linear(x, w) launch the same cuBLAS kernels (the same "
               "names, split-K reductions and memsets included) on all 30 validation shapes."),
    Experiment("torch.matmul against F.linear, and F.linear against itself, in the op's graph harness, H200",
               "graph_paths_baseline_small_h200_2026-11-30.json", "graph_paths",
               "`benchmarks/graph_paths.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --shape "
               "<the 17 shapes of M <= 128> --contenders matmul,linear --reps 1` (GPU-9b167a02): F.linear / "
               "torch.matmul(x, w.t()) geomean 1.000 (0.987 to 1.014), F.linear / F.linear 1.001 (0.988 to 1.016); "
               "1x3072x3072 read 1.014 and 1.013. The 0.97 read there on GPU-fbef266b was the harness's spread, "
               "not the baseline's call. (The 13 larger shapes, run first on the same GPU, read 0.996 to 1.003 for "
               "both; that run was cut by its time limit before it wrote its file.)"),
    Experiment("The batch-64 Llama searched with the CuTe DSL installed, H200",
               "e2e_model_cute_h200_2026-11-30.json", "e2e_model",
               "`benchmarks/e2e_model.py --layers 2 --batch 64 --prompt 64 --budget 16 --modes graph,eager --rounds 15` "
               "on a fresh store (GPU-a9709527; nvidia-cutlass-dsl 4.8.1, so Triton and the CuTe DSL searched): graph "
               "decode 1.030x (1.029 to 1.031), prefill 1.001x; in graphs check_routes kept every decode group, q/o "
               "(1.38 us a forward) and gate/up (4.00) served now, and declined gate/up at prefill; eager: every layer "
               "put back to nn.Linear, so both models ran the same code (decode 0.948x, quartiles 0.912 to 1.024: "
               "15 rounds of eager noise)."),
    Experiment("The same store timed again, 41 rounds, H200",
               "e2e_model_cute_rounds41_h200_2026-11-30.json", "e2e_model",
               "`--budget 0 --modes graph,eager --rounds 41` on the store above, next on GPU-a9709527: graph decode "
               "**1.031x** (1.029 to 1.031), prefill 1.001x; eager decode 0.998x (0.962 to 1.026), prefill 1.000x "
               "(no layer routed in eager mode)."),
    Experiment("A second architecture: Qwen2.5-7B's dimensions, batch 64, CuTe DSL installed, H200",
               "e2e_model_qwen2_5-7b_h200_2026-11-30.json", "e2e_model",
               "`benchmarks/e2e_model.py --model qwen2.5-7b --layers 2 --batch 64 --prompt 64 --budget 16 --modes "
               "graph,eager --rounds 15` on a fresh store (GPU-61fa014a; transformers' Qwen2, q/k/v with biases): "
               "graph decode 1.016x (1.015 to 1.018), prefill 1.001x; check_routes kept k/v (the bias fused: 8.34 us "
               "a forward) and lm_head (3.48), declined q (-1.40) and down (-0.02) at decode; no layer routed in "
               "eager mode."),
    Experiment("The same store timed again, 31 rounds, H200",
               "e2e_model_qwen2_5-7b_rounds31_h200_2026-11-30.json", "e2e_model",
               "`--budget 0 --modes graph,eager --rounds 31` on that store, next on GPU-61fa014a: graph decode "
               "**1.019x** (1.019 to 1.020), prefill 1.002x; eager 0.999x and 1.002x; check_routes kept k/v (9.62 us), "
               "down (2.38) and lm_head (6.17) at decode, declined q (1.00, its lower quartile under the floor)."),
    Experiment("The decoder layer at 1 to 1024 tokens with the CuTe DSL installed, H200",
               "e2e_decoder_cute_h200_2026-11-30.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128,1024 --modes graph --budget 4 --max-tune-seconds "
               "250` (GPU-a9709527; Triton and nvidia-cutlass-dsl 4.8.1): layer 1.018, 1.043, 0.984, 1.000; the "
               "table's prediction within 25% at 16 tokens (8.37 against 8.55 us), 40% over at 1 (4.94 against 3.54: "
               "its k/v kernel loses 0.59 us in the layer), wrong in sign at 128 (10.58 against -3.91: q/o, a CuTe "
               "DSL kernel, loses 1.59 us in the layer while it wins 0.7 us a call alone), nothing served at 1024."),
    Experiment("The decoder layer searched in mlp_chain mode, 1 and 16 tokens, H200",
               "e2e_decoder_mlp_chain_h200_2026-11-30.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16 --tune-tokens 1,16,128 --modes graph --budget 4 "
               "--max-tune-seconds 270 --search-mode mlp_chain` on a fresh store (GPU-0c121aaf; Triton and "
               "nvidia-cutlass-dsl 4.8.1): layer 1.024 and 1.048; predicted against measured 6.11 against 4.73 us at 1 "
               "token (29% over: the k/v kernel again, +0.62 predicted, -0.23 in the layer), 8.99 against 9.76 at 16."),
    Experiment("The same store at 128 and 1024 tokens, H200",
               "e2e_decoder_mlp_chain_large_h200_2026-11-30.json", "e2e_decoder",
               "`--tokens 128,1024 --tune-tokens 1024 --budget 4 --search-mode mlp_chain`, next on GPU-0c121aaf: layer "
               "1.000 and 1.000; predicted 11.03 against 0.11 us at 128 tokens and 4.49 against 0.04 at 1024, where "
               "mlp_chain served a q/o kernel chain had not. mlp_chain predicts the layer no better than chain."),
    Experiment("Both stores, chain's and mlp_chain's, measured in one call on one H200",
               "e2e_decoder_chain_store_same_host_h200_2026-11-30.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128,1024 --modes graph --budget 0` on the "
               "chain-searched store of the CuTe DSL run above, then the same on the mlp_chain store (GPU-4f038bf4): "
               "chain's "
               "predicted against measured 4.94/3.75, 8.37/9.16, 10.58/-2.73, nothing served (-0.33); mlp_chain's "
               "6.11/4.06, 8.99/9.11, 11.03/1.31, 4.49/-2.06 (that run's report, "
               "e2e_decoder_mlp_chain_store_same_host_h200_2026-11-30.md; its JSON did not come back from the device). "
               "The same 128-row q/o kernel read 1.032x alone in one process and 1.162x in the next."),
    Experiment("The decoder layer after cudal2.check_routes, chain store, H200",
               "e2e_decoder_check_routes_h200_2026-11-30.json", "e2e_decoder",
               "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128,1024 --modes graph --budget 0 --store STORE "
               "--check-routes --no-alone` on the chain-searched CuTe DSL store (GPU-0cd28d19): as routed, predicted "
               "against measured 4.94/4.15, 8.37/9.41, 10.58/-1.53, nothing served; after check_routes 4.29/6.49 (k, v "
               "declined), 8.37/9.87, 3.25/0.51 (q, o and gate, up declined), nothing served. Inside the layer the groups' "
               "savings add up: 4.37 + 1.72 against 6.49 at 1 token, 3.89 + 4.78 + 1.45 against 9.87 at 16."),
    Experiment("The same with each group timed again in chain mode on the serving GPU, H200",
               "e2e_decoder_check_routes_alone_h200_2026-11-30.json", "e2e_decoder",
               "As above without --no-alone (GPU-c930b84f): as routed 4.94/4.53, 8.37/9.50, 10.58/-3.63; after "
               "check_routes 4.29/5.96, 8.37/9.80, and at 128 tokens every group declined, the two layers then running the "
               "same kernels 1.54 us apart. Chain mode timed again here reads the 128-row q/o kernel at -0.16 us a layer "
               "call against the table's 5.15 (searched on another H200); k/v 1.59 and 3.35 at 1 and 128 tokens against "
               "0.55/-0.89 and 0.48/-0.37 inside the layer."),
    Experiment("The decoder layer's kernels with the mlp_chain store's kernels served, H200",
               "layer_kernels_mlp_chain_h200_2026-11-30.json", "layer_kernels",
               "`benchmarks/layer_kernels.py OUT.md --store STORE --tokens 128,1024,1` on the mlp_chain store "
               "(GPU-000135fd): at 128 tokens the served q kernel runs 12.57 us in the layer against cuBLAS's 12.99 "
               "(0.4 us of the 2.4 the table predicts), the served gate kernel 34.82 against 33.79."),
    Experiment("One projection's saving, context by context up to the decoder layer, H200",
               "context_ladder_h200_2026-11-30.json", "context_ladder",
               "`benchmarks/context_ladder.py OUT.md --store STORE --at 128:q,128:o,128:gate,128:k,1:k,1:q,1024:q` "
               "(new; GPU-70d91685) on the mlp_chain store: layer mode, mlp_chain, the layer's end (its MLP, residual "
               "and norm before the call) and the layer itself. No context reads the layer's figure at 128 tokens "
               "for every projection; the layer's own figure is the least certain (its quartiles 1.6 to 15 us apart, "
               "the other contexts' 0.4 to 2.0)."),
    Experiment("The same with the SM clock and power sampled, H200",
               "context_ladder_clocks_h200_2026-11-30.json", "context_ladder",
               "`--at 128:q,128:o,128:gate,1:k,1:q` (GPU-4f038bf4): at 128 tokens the SM clock fell to 1845 to 1965 "
               "MHz (454 to 656 W) in mlp_chain and to 1770 to 1860 MHz (636 to 671 W) in the layer's end, and stayed "
               "at 1980 MHz in the layer (496 to 587 W) and in layer mode: an MLP alone draws more power than the "
               "layer's average, so mlp_chain times at a clock the layer does not run at. o at 128 tokens: the served "
               "kernel 12.03 us in layer mode, 14.05 us after attention (cuBLAS's 13.26 and 13.94)."),
    Experiment("A served kernel at 12 placements of its weight, H200",
               "weight_placement_h200_2026-11-30.json", "weight_placement",
               "`benchmarks/weight_placement.py OUT.md --store STORE` (new; GPU-466f940f), layer mode, one input set "
               "at each placement: cuBLAS's 128x4096x4096 time moves 15.30 to 16.73 us with the weight's address, the "
               "CuTe DSL kernel's 14.55 to 14.97, so the ratio 1.027 to 1.139; the 1x1024x4096 k/v kernel loses at "
               "every placement (0.905 to 0.966)."),
    Experiment("Two of those kernels at 12 placements in chain mode, H200",
               "weight_placement_chain_h200_2026-11-30.json", "weight_placement",
               "`benchmarks/weight_placement.py OUT.md --store STORE --mode chain --shapes 1x1024x4096,128x4096x4096` "
               "(GPU-d76a1e8f, another host): the 1x1024x4096 k/v kernel that loses at every placement in layer mode "
               "wins at every one in chain mode (1.029 to 1.165), and the 128-row q/o kernel reads 1.135 to 1.234: "
               "chain's neighbours, not the weight's address, credit these kernels."),
    Experiment("The decoder layer's groups served by each confirmed leader in turn, H200",
               "runner_ups_h200_2026-11-30.json", "runner_ups",
               "`benchmarks/runner_ups.py OUT.md --store STORE --tokens 1,16,128` on the chain-searched CuTe DSL store "
               "(GPU-adb32fa9): in all seven groups with runners-up, the table's kernel saves the layer at least as much "
               "as each runner-up, in chain mode's order. Where it loses (q/o and gate/up at 128 tokens: -0.75, -1.50 "
               "us), its runners-up lose more (-2.51, -1.92). Chain mode ranks the kernels of a group as the layer does; "
               "at 128 tokens its level is off for all of them."),
    Experiment("One served kernel on two CUDA streams at once, with a negative control, H200",
               "two_streams_h200_2026-11-30.json", "two_streams",
               "`benchmarks/two_streams.py OUT.md --calls 400` (GPU-1bd0346a): with the op's launches as they are (a "
               "launch on another stream than the workspace's previous one waits for that stream; one TMA descriptor "
               "scratch per stream) no output differs from the kernel called alone; as they were before, 258 (serial "
               "split-K), 231 (workspace split-K) and 23 (TMA, no split) of 400 did."),
    Experiment("The op over the 30 validation winners after its launches came to follow the stream, H200",
               "op_served_streams_h200_2026-11-30.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --rounds 40 "
               "--max-seconds 300` (GPU-1bd0346a), the launch path 'triton' measured at -2.59 us: 26 of 30. The two "
               "served split-K kernels: 1x3072x3072 eager 1.117 (1.120 before the change, on another host), graph "
               "1.143; 16x3584x18944 eager 1.030 (1.075), graph 1.065 (1.122). This host's eager calls ran slower "
               "and spread wider than the other's (F.linear on 33x3072x3072: 25.42 us against 15.73): the two new "
               "eager misses, 16x8192x3584 (0.986) and 33x6144x4096 (0.990, just under), are torch-served shapes, "
               "whose calls the change does not touch."),
    Experiment("The op over the 30 validation winners, its torch calls through at::linear, H200",
               "op_served_linear_probe_h200_2026-11-30.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --rounds 40 "
               "--max-seconds 300` (GPU-450809cd) after the C front's probe came to call at::linear for the calls it "
               "sends to torch: 29 of 30, eager at least 0.99 on all 30 (the torch-served 33x3072x3072, 16x8192x3584 "
               "and 33x6144x4096, which missed before: 1.002, 1.004, 1.000). The miss: 1x3072x3072's served kernel in "
               "graphs, 1.124 (1.091 to 1.233) against a searched 1.226. In situ on the same host "
               "(benchmarks/op_fallback_paths.py 101, op_fallback_paths_linear_probe_h200_2026-11-30.md) the C front "
               "costs +0.06 us over F.linear for a kept weight, +0.20 for one served at other row counts, +0.20 and "
               "+0.08 for one served only in graphs; with the probe's linear unbound +0.33, +0.49, +0.49 and +0.43."),
    Experiment("The op's fallback with its torch calls through at::linear, three processes, H200",
               "op_overhead_fallback_linear_probe_h200_2026-11-30.json", "op_overhead",
               "`benchmarks/op_overhead.py OUT.md --shapes 1x4096x4096 --budget 0 --eager-only --processes 3 --rounds "
               "101` (GPU-0ecb8783): cudal2.linear -0.18 us against F.linear (-0.31, -0.18, -0.13 over the processes; "
               "F.linear's host time 18.5 to 21.1 us), its Python front +0.75 us. The same call then ran "
               "`benchmarks/op_served.py --winners crosscheck_winners_chain_h200_2026-11-30.json --rounds 40 "
               "--max-seconds 290`: 29 of 30 again, the one miss again 1x3072x3072's kernel in graphs (1.179, 1.142 "
               "to 1.286, against a searched 1.226). That run's report and JSON did not come back from the device (the "
               "call left more files than it returns); these figures are from its log."),
    Experiment("The served winners called directly and through the op, in one chain harness, H200",
               "served_path_h200_2026-11-30.json", "served_path",
               "`benchmarks/served_path.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --shapes "
               "1x3072x3072,16x3584x18944,7x152064x8192 --rounds 100` (GPU-7ce51b4a): 1x3072x3072's kernel 8.48 us "
               "called directly and 8.70 through the op, torch.matmul(out=) 10.25 and F.linear 10.18, so 1.208 as the "
               "search reads it and 1.170 as the op's verdict does. On the same host, benchmarks/served_graph_nodes.py "
               "(served_graph_nodes_h200_2026-11-30.log) found the op's graph of eight calls the same eight kernel "
               "nodes as the direct calls', the kernel 8.03 us against 7.97: the op adds no work to a captured call."),
    Experiment("The same with the kernel also allocating its own output, another H200",
               "served_path_new_output_h200_2026-11-30.json", "served_path",
               "`benchmarks/served_path.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --shapes "
               "1x3072x3072,16x3584x18944 --rounds 100` (GPU-22da1be8): 1x3072x3072's kernel 8.54 us into its buffer, "
               "8.41 allocating its output, 8.50 through the op; torch.matmul(out=) 10.18, F.linear 10.14: 1.192 as "
               "searched, 1.193 as served. The 0.22 us between the direct and the op's call on the host before did not "
               "come back here; on both hosts the kernel reads 1.19 to 1.21 by the search's own measure, against "
               "1.226 on the host that searched it."),
    Experiment("The op over the 30 validation winners, the search's measure timed again in the same rounds, H200",
               "op_served_here_per_round_h200_2026-11-30.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --rounds 40 "
               "--max-seconds 470` (GPU-f6015d18), the first version of the \"here\" column: each served kernel also "
               "called directly beside torch.matmul(out=) in the graph rounds, scored as the median of per-round "
               "ratios. 29 of 30: 1x3072x3072 in graphs read 1.201 through the op against 1.224 here and 1.226 "
               "searched. In the same rounds the ratios of the median times read 1.216 through the op and 1.206 here, "
               "and the kernel's time over the op's per round 1.000: the op ran at its kernel's speed, and the "
               "per-round median moved 2% from the ratio of medians. The verdict now scores both as the search "
               "scores (ratio of medians)."),
    Experiment("The same with both figures scored as the search scores, another H200",
               "op_served_here_h200_2026-11-30.json", "op_served",
               "The same command (GPU-4e70194b): 29 of 30. Every served kernel met both bars: 1x3072x3072 1.238 "
               "through the op, 1.221 here, 1.226 searched; 16x3584x18944 1.061, 1.062, 1.059; 7x152064x8192 1.054, "
               "1.054, 1.029. The miss: 33x3072x3072 in graphs, 0.988 (0.956 to 1.057; ratio of medians 1.001), a "
               "shape the op sends to torch, whose captured call holds F.linear's own kernels."),
    Experiment("The chain harness's A/A on the ten smallest calls, rounds until the median is known to 0.3%, H200",
               "op_served_aa_error_target_h200_2026-11-30.json", "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --aa --rounds "
               "40 --only 1x3072x3072,1x16384x3072,1x32000x5120,33x3072x3072,16x8192x3584,33x6144x4096,16x3584x18944,"
               "16x28672x3584,33x3584x18944,100x9216x3072` (GPU-2e3366ee), after the graph path came to run rounds "
               "over fresh placements until the per-round ratio's median has a standard error of 0.3% (at most 800): "
               "graph 0.993 to 1.021 (33x6144x4096, 504 rounds). Per placement the smallest calls' medians ranged "
               "0.938 to 1.073: more rounds cannot average out where each contender's output lies."),
    Experiment("The same A/A with every contender's graph captured into one memory pool, H200",
               "op_served_aa_one_pool_h200_2026-11-30.json", "op_served",
               "The same command (GPU-df22b45f) after op_served's chain graph path came to capture all graphs into one "
               "pool (crosscheck_winners.chain_harness_timers one_pool): graph 0.992 (33x6144x4096) to 1.004, eager "
               "1.000 to 1.005. A probe on the same host captured F.linear (33x3072x3072) twice: its output lay at two "
               "addresses in pools of their own, and at one in a shared pool. One run on each host."),
    Experiment("The op over the 30 validation winners, one pool, H200", "op_served_one_pool_h200_2026-11-30.json",
               "op_served",
               "`benchmarks/op_served.py OUT.md --winners crosscheck_winners_chain_h200_2026-11-30.json --rounds 40 "
               "--max-seconds 430` (GPU-df22b45f): 30 of 30. Served kernels, through the op / here / searched: "
               "1x3072x3072 1.240 / 1.229 / 1.226 (per-round median 1.224, 800 rounds); 16x3584x18944 1.060 / 1.055 / "
               "1.059; 7x152064x8192 1.029 / 1.028 / 1.029. Torch-served shapes in graphs 0.991 to 1.008, eager "
               "at least 0.999 on all 30."),
    Experiment("The same again, next on the same machine", "op_served_one_pool_again_h200_2026-11-30.json", "op_served",
               "`--max-seconds 330` (GPU-df22b45f): 30 of 30. 1x3072x3072 1.243 / 1.225 / 1.226; 16x3584x18944 1.064 "
               "/ 1.065 / 1.059; 7x152064x8192 1.029 / 1.029 / 1.029; torch-served in graphs 0.992 to 1.005."),
    Experiment("The batch-64 Llama with serial split-K proposed, Triton only, budget 16, H200",
               "e2e_model_serial_h200_2026-11-30.json", "e2e_model",
               "`benchmarks/e2e_model.py --layers 2 --batch 64 --prompt 64 --budget 16 --modes graph,eager --rounds 15` "
               "with a fresh store (GPU-d752a940): graph decode 1.028x (1.028 to 1.029), prefill 1.001x; eager decode "
               "0.987x (0.980 to 1.018), prefill 1.003x. Every decode group kept in graphs (k/v 6.37 us a forward, "
               "gate/up 3.15, down 8.73, lm_head 16.79); the winners of k/v (64x32x128, split 4) and down (64x64x128, "
               "split 2) reduce serially. q/o (64x4096x4096) has no winner: its best, 14.34 us, against torch's "
               "12.31. Every eager decode group declined (this host's eager floor read 92 us)."),
    Experiment("The same store timed again in graphs, the same machine",
               "e2e_model_serial_again_h200_2026-11-30.json", "e2e_model",
               "`--budget 0 --modes graph --rounds 15` on a copy of that store, next on GPU-d752a940: graph decode "
               "1.026x (1.025 to 1.027), prefill 1.001x; check_routes declined gate/up this time (-0.39 us, under the "
               "floor of 1.29), kept k/v (5.21), down (6.62) and lm_head (14.56)."),
    Experiment("A chain-mode sweep of the serving train shapes, both backends, H200",
               "sweep_chain_train_h200_2026-11-29.csv.gz", "sweep",
               "`cudal2 sweep serving:train --specs 12 --sample 24 --backend triton` then `--backend cute_dsl` (chain "
               "mode, the default; GPU-62ab8264), each stopped at its time limit: 516 pairs on 23 shapes, 492 measured "
               "correct; 15 CuTe DSL pairs refused (a split-K workspace too large), 9 recorded as crashes (an output of "
               "2.5e9 elements, past the kernel's 32-bit extents: the backend now refuses these before building)."),
    Experiment("The same on the serving validation shapes, H200", "sweep_chain_serving_validation_h200_2026-11-29.csv.gz",
               "sweep", "`cudal2 sweep serving:validation --specs 12 --sample 24` with each backend (GPU-a66de040): 576 "
               "pairs on 24 shapes, 567 correct, 9 refused (workspace)."),
    Experiment("A cost model trained on chain-mode labels against the shipped one, H200 validation shapes",
               "learned_offline_chain_h200_2026-11-29.json", "learned_offline",
               "`benchmarks/learned_offline.py --train sweep_chain_train_h200_2026-11-29.csv.gz --validation "
               "sweep_chain_serving_validation_h200_2026-11-29.csv.gz --against cudal2/data/models/sm_90a.json`: "
               "trained on the 492 chain-mode pairs of the train sweep, its first pick on the 24 validation shapes "
               "reads 0.939 of the best measured spec; the shipped model (18,952 offline pairs, H100) reads 0.953, and "
               "at least as much at 4, 8 and 16 evaluations. Training on this sweep does not help: the shipped model "
               "stays."),
    Experiment("The decoder layer at 1 to 1024 tokens, layer-mode table, H200", "e2e_decoder_layer_h200_2026-11-29.json",
               "e2e_decoder", "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128,1024 --modes eager,graph --budget 4 "
               "--max-tune-seconds 220`: the op routed none of the searched GEMMs, so the table's predicted saving "
               "(0) could not be checked against the layer's."),
    Experiment("The decoder layer with the op serving its layer-mode table, H200", "e2e_decoder_layer_served_h200_2026-11-29.json",
               "e2e_decoder", "`benchmarks/e2e_decoder.py OUT.md --tokens 1,16,128,1024 --modes eager,graph --budget 4 "
               "--max-tune-seconds 200` with apache-tvm-ffi, after the op looked up only the backends it launches: "
               "the table's predicted saving a layer call against the graph-mode layer's."),
    Experiment("As above, the same store measured again, graph mode", "e2e_decoder_layer_served_again_h200_2026-11-29.json",
               "e2e_decoder", "`--budget 0 --modes graph`, a minute later on the same machine."),
    Experiment("The evaluator against two other clocks, 30 shapes", "crosscheck_h100_2026-11-27.json", "crosscheck",
               "`benchmarks/crosscheck.py --shapes 30`: one kernel per shape and torch.matmul under the evaluator, "
               "triton.testing.do_bench_cudagraph and a rotated-input CUDA graph; ratio torch / kernel."),
    Experiment("The evaluator against two other clocks", "crosscheck_h100_2026-11-25.json", "crosscheck",
               "`benchmarks/crosscheck.py`: one kernel per shape and torch.matmul under the evaluator, "
               "triton.testing.do_bench_cudagraph and a rotated-input CUDA graph; ratio torch / kernel."),
    Experiment("Dynamic-shape Triton kernels whose tile arithmetic divides by multiply and shift, against static ones",
               "tune_speed_static_triton_fastdiv_h100_2026-11-27.json", "tune_speed",
               f"The rules' first two Triton proposals on {PROBE48}, rendered static and dynamic (backend version 5: "
               "the tile arithmetic divides by run-time tile counts with a multiply and a shift from launch(), none "
               "without split-K; M unspecialized where A is row-major), timed in one evaluator call per shape "
               "(`--part static --backend triton`), on one GPU of a four-GPU machine whose other GPUs ran other "
               "benchmarks.", parts=("static",)),
    Experiment("Seconds to tune a new shape: look-ahead asked while the GPU measures, three batches ahead, CuTe DSL, "
               "no peers", "tune_speed_aside_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead --no-peers --max-seconds 180` on a "
               "one-GPU machine: the batches ahead are asked in a thread of their own while the runner measures; "
               "three batches ahead into a compile pool of up to 16 processes at a lower CPU priority; the study's "
               "journal written without an fsync a record; the stream-order delay sized to its group; a request's "
               "candidates checked on shared fresh inputs, each input set's reference taken once.", parts=("tune",)),
    Experiment("Seconds to tune a new shape: confirmation plans made while the first kernels compile, one "
               "persistent grid for the compile pool and the GPU worker, CuTe DSL, no peers",
               "tune_speed_grid_record_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead --no-peers --max-seconds 120` on a "
               "one-GPU machine: the GPU worker makes the confirmation rounds' cuBLASLt plans while a problem's "
               "first kernels compile, and records the DSL's persistent grid per cluster size before any compile, "
               "which the compile processes read (they had taken the arch table's 33 clusters of 4 where the H100 "
               "runs 30, and the worker compiled each 2x2-cluster kernel again).", parts=("tune",)),
    Experiment("The same again, CuTe DSL, right after on the same GPU",
               "tune_speed_grid_record_cute_dsl_nopeers_repeat_h100_2026-11-27.json", "tune_speed",
               "The same command, a second time.", parts=("tune",)),
    Experiment("The same, Triton, on the same kind of machine",
               "tune_speed_grid_record_triton_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton --lookahead --no-peers --max-seconds 100`.",
               parts=("tune",)),
    Experiment("A token count of 1000 on each validation weight, one process after a cold search, CuTe DSL, no peers",
               "tune_speed_weights_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead --no-peers --max-seconds 200 --shape "
               "64x6144x4096 --shape 1000xNxK ...` over the ten validation serving weights, in the order of the "
               "split file; each search finds the kernels of the ones before it compiled.", parts=("tune",)),
    Experiment("Seconds to tune a new shape: guard patterns drawn on the GPU, CuTe DSL, no peers",
               "tune_speed_guards_on_device_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead --no-peers --max-seconds 120` on a "
               "one-GPU machine: each guarded output draws its guard pattern on the GPU (drawn on the host, its copy "
               "had waited for the GPU's queued work at every output), and the cost model's walk takes the splits "
               "on the shape's own features once before it.", parts=("tune",)),
    Experiment("The same again, CuTe DSL, right after on the same GPU",
               "tune_speed_guards_on_device_cute_dsl_nopeers_repeat_h100_2026-11-27.json", "tune_speed",
               "The same command, a second time.", parts=("tune",)),
    Experiment("The same, Triton, right after on the same GPU",
               "tune_speed_guards_on_device_triton_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton --lookahead --no-peers --max-seconds 95`.",
               parts=("tune",)),
    Experiment("The same CuTe DSL command on another machine of the kind, whose compile processes ran faster",
               "tune_speed_guards_on_device_cute_dsl_nopeers_other_machine_h100_2026-11-27.json", "tune_speed",
               "The same command on another one-GPU machine, earlier the same day: its compile processes recorded "
               "35.4 s of compiles for the new token count where the machine above recorded 49.0 s.",
               parts=("tune",)),
    Experiment("A token count of 1000 on each validation weight, guard patterns drawn on the GPU, CuTe DSL, no peers",
               "tune_speed_weights_guards_on_device_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead --no-peers --max-seconds 180 --shape "
               "64x6144x4096 --shape 1000xNxK ...` over the ten validation serving weights, on the machine of the "
               "first two runs above, right after them.", parts=("tune",)),
    Experiment("The same again, CuTe DSL, right after on the same GPU",
               "tune_speed_aside_cute_dsl_nopeers_repeat_h100_2026-11-27.json", "tune_speed",
               "The same command, a second time.", parts=("tune",)),
    Experiment("The same, Triton, right after on the same GPU", "tune_speed_aside_triton_nopeers_h100_2026-11-27.json",
               "tune_speed", "`--part tune --shared-evaluator --backend triton --lookahead --no-peers "
               "--max-seconds 130`.", parts=("tune",)),
    Experiment("Look-ahead asked while the GPU measures, two batches ahead, CuTe DSL, no peers",
               "tune_speed_aside_depth2_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "The first of the changes above alone (with the unsynced journal, the nicer compile pool and the "
               "sized stream-order delay), two batches ahead into 12 processes: compile waits of 2.4-7.2 s "
               "remained in new shapes' searches.", parts=("tune",)),
    Experiment("Three batches ahead, before the shared references, CuTe DSL, no peers",
               "tune_speed_depth3_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "Three batches ahead into up to 16 processes; each candidate still checked on inputs of its own.",
               parts=("tune",)),
    Experiment("Three batches ahead, before the shared references, CuTe DSL, with quack timed",
               "tune_speed_depth3_cute_dsl_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead`: quack's autotune of each new "
               "shape runs in the confirmation rounds (33.5 s cold, 5.3 and 7.6 s for the two new shapes).",
               parts=("tune",)),
    Experiment("Seconds to tune a new shape: the proposer's share kept, two batches ahead, CuTe DSL, no peers",
               "tune_speed_share_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead --no-peers` on a one-GPU machine: "
               "look-ahead asks the learned proposer for its 24 of 32 trials (it had handed most of them to the "
               "sampler) with the batches in flight pending; a sampled stage count is a ceiling; two batches asked "
               "ahead into a compile pool of 12; confirmation rounds of 20 groups; torch.matmul and cuBLASLt timed, "
               "not quack (its autotune of a new shape is the peer's cost, shown in the run with peers).",
               parts=("tune",)),
    Experiment("The same, Triton, right after on the same GPU",
               "tune_speed_share_triton_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton --lookahead --no-peers`.", parts=("tune",)),
    Experiment("The same with quack timed in the confirmation rounds, CuTe DSL",
               "tune_speed_share_cute_dsl_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead`, right after the two runs above: "
               "quack's autotune of each new shape (34.6 s cold, 5.7-7.6 s warm) runs in the rounds.",
               parts=("tune",)),
    Experiment("The same with quack, Triton", "tune_speed_share_triton_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton --lookahead`, on the same machine right after.",
               parts=("tune",)),
    Experiment("The proposer's share kept and the stage ceiling alone, CuTe DSL, no peers",
               "tune_speed_share_lookahead1_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "The run above before two batches were asked ahead, the compile pool grew from 8 to 12 and the "
               "confirmation rounds went from 50 groups to 20: one batch ahead.", parts=("tune",)),
    Experiment("The same, Triton", "tune_speed_share_lookahead1_triton_nopeers_h100_2026-11-27.json", "tune_speed",
               "Right after the run above.", parts=("tune",)),
    Experiment("Where the time of the changed CuTe DSL search went, main process and GPU worker profiled",
               "tune_speed_profiled_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "`CUDAL2_PROFILE_WORKER=DIR python -m cProfile ... --no-peers --shape 64x6144x4096 --shape "
               "255x6144x4096` (cold, then a new token count), after the changes above, figures under cProfile: "
               "the GPU worker loaded 65 exported kernels in 0.18 s, and spent 5.3 s (the main process 3.4 s) "
               "compiling Python source to bytecode, because the lent machine's packages were installed without it "
               "(`--no-compile`; tools/device_env.sh and tools/gpu_cute_dsl.sh now byte-compile them).",
               parts=("tune",)),
    Experiment("Before: where a CuTe DSL search's time went, no peers",
               "tune_speed_before_share_cute_dsl_nopeers_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead --no-peers --shape 255x6144x4096 "
               "--shape 255x6144x4096 --shape 1000x17920x1536` under cProfile, before the changes above: a search "
               "with look-ahead measured 24 of its 32 trials from the sampler, which pruned 2-3 invalid specs for "
               "each it measured.", parts=("tune",)),
    Experiment("Seconds to tune a new shape: confirmation's call time from 10 groups, CuTe DSL",
               "tune_speed_confirm_calls_cute_dsl_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl --lookahead` on a one-GPU machine with quack and "
               "nvmath installed: trials timed beside torch.matmul alone, the confirmation rounds beside every "
               "baseline (quack's autotune of each new shape among them) with the call time from 10 of their 50 "
               "groups, the best trial's static twin in those rounds.", parts=("tune",)),
    Experiment("The same, Triton, right after on the same GPU",
               "tune_speed_confirm_calls_triton_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton --lookahead`, right after the run above (quack's "
               "autotune of these shapes was cached on disk by then).", parts=("tune",)),
    Experiment("Seconds to tune a new shape with static twins and trial baselines, CuTe DSL",
               "tune_speed_twins_cute_dsl_h100_2026-11-27.json", "tune_speed",
               "As the run above, with the confirmation rounds' call time from all 50 groups; an earlier machine of the "
               "same kind.", parts=("tune",)),
    Experiment("The same, Triton", "tune_speed_twins_triton_h100_2026-11-27.json", "tune_speed",
               "`--backend triton`, right after the run above on the same GPU.", parts=("tune",)),
    Experiment("Static twins on the two probe shapes where static read more than 5% faster, Triton",
               "tune_speed_twins_probe_triton_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton --lookahead --layout NN --shape 1024x128x1024 "
               "--shape 16384x256x64`: a search of each at budget 32; the winner's static twin timed in its "
               "confirmation rounds and kept only where its median beat the shape-generic kernel's by over 1%.",
               parts=("tune",)),
    Experiment("Seconds to tune a new shape: the search on shape-generic kernels, compiling ahead, Triton",
               "tune_speed_lookahead_triton_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton --lookahead`: cudal2.search measuring each spec's "
               "shape-generic kernel and compiling its next batch while one is measured; one GPU of a four-GPU "
               "machine whose other GPUs ran the CuTe DSL GPU tests and a quack comparison.", parts=("tune",)),
    Experiment("The same without compiling ahead, the same GPU right after",
               "tune_speed_generic2_triton_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton`, right after the run above on the same GPU.",
               parts=("tune",)),
    Experiment("Seconds to tune a new shape: the search on shape-generic kernels, CuTe DSL",
               "tune_speed_generic_cute_dsl_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend cute_dsl` (no look-ahead), one GPU of a four-GPU machine "
               "whose other GPUs ran other benchmarks; CuTe DSL kernels between backend version 4 and 5.",
               parts=("tune",)),
    Experiment("Seconds to tune a new shape: the search on shape-generic kernels, Triton, first run",
               "tune_speed_generic_triton_h100_2026-11-27.json", "tune_speed",
               "`--part tune --shared-evaluator --backend triton` (no look-ahead), beside the CuTe DSL run above.",
               parts=("tune",)),
    Experiment("Seconds to tune a new shape, with where the evaluator's time went",
               "tune_speed_warm_phases_h100_2026-11-27.json", "tune_speed",
               "The tune part alone on a one-GPU machine, under cProfile, Triton backend version 5, the search on "
               "kernels compiled per shape; the evaluator's phases (EvalStats) per run.", parts=("tune",)),
    Experiment("Dynamic-shape Triton kernels with a straight K loop where K is one step, against static ones",
               "tune_speed_static_triton_onek_h100_2026-11-27.json", "tune_speed",
               f"The rules' first two Triton proposals on {PROBE48}, rendered static and dynamic (int32 offsets unless "
               "a call needs 64 bits; ONE_K where K fits one BLOCK_K step), timed in one evaluator call per shape "
               "(`--part static --backend triton`); another H100 machine than the run below.", parts=("static",)),
    Experiment("Seconds to tune a new shape, and a new weight whose kernels are compiled",
               "tune_speed_warm_h100_2026-11-27.json", "tune_speed",
               "`cudal2.search` at budget 32 (rules, then Optuna; leaders confirmed) on validation serving shapes, one "
               "evaluator for all runs (`--part tune --shared-evaluator`); the last run tunes the new weight again into "
               "a fresh store, its kernels compiled by the run before it. Triton backend version 4.", parts=("tune",)),
    Experiment("Dynamic-shape Triton kernels with 32-bit offsets against static ones",
               "tune_speed_static_triton_h100_2026-11-27.json", "tune_speed",
               f"The rules' first two Triton proposals on {PROBE48}, rendered static and dynamic (int32 offsets unless "
               "a call needs 64 bits), timed in one evaluator call per shape (`--part static --backend triton`).",
               parts=("static",)),
    Experiment("Dynamic-shape Triton kernels against static ones", "tune_speed_h100_2026-11-25.json", "tune_speed",
               f"The rules' first two proposals on {PROBE48}, rendered static and dynamic, timed in one call.",
               parts=("static",)),
    Experiment("Dynamic-shape CuTe DSL kernels against static ones", "tune_speed_static_cute_dsl_h100_2026-11-26.json",
               "tune_speed", f"The rules' first two CuTe DSL proposals on {PROBE48}, rendered static and dynamic, timed "
               "in one evaluator call per shape (`--part static --backend cute_dsl`).", parts=("static",)),
    Experiment("Checked pairs per second in a sweep, full garbage collection per problem", "tune_speed_gc_h100_2026-11-26.json",
               "tune_speed", "`cudal2 sweep`'s loop: 128 catalog specs on 14 train serving shapes of at most 1 GFLOP, "
               "brief timing of 10 groups after 1 ms of warm-up, the GPU worker collecting garbage fully only when "
               "the problem changes.", parts=("sweep",)),
    Experiment("Seconds to tune a new shape, full garbage collection per problem", "tune_speed_gc_h100_2026-11-26.json",
               "tune_speed", "`cudal2.search` at budget 32 (rules, then Optuna; leaders confirmed) on validation "
               "serving shapes, one evaluator for all runs; cold = empty kernel caches; same code as above.",
               parts=("tune",)),
    Experiment("Checked pairs per second in a sweep, brief timing shortened", "tune_speed_brief_h100_2026-11-26.json",
               "tune_speed", "As above, before the worker's garbage collection change (a full collection after every "
               "request).", parts=("sweep",)),
    Experiment("Seconds to tune a new shape, brief timing shortened", "tune_speed_brief_h100_2026-11-26.json",
               "tune_speed", "As above, before the worker's garbage collection change.", parts=("tune",)),
    Experiment("Checked pairs per second in a sweep", "tune_speed_bulk_h100_2026-11-25.json", "tune_speed",
               "`cudal2 sweep`'s loop: 128 catalog specs on 14 train serving shapes of at most 1 GFLOP.",
               parts=("sweep",)),
    Experiment("Seconds to tune a new shape, one evaluator", "tune_speed_shared_h100_2026-11-25.json",
               "tune_speed", "`cudal2.search` at budget 32 (rules, then Optuna; leaders confirmed) on validation "
               "serving shapes, one evaluator for all runs; cold = empty kernel caches.", parts=("tune",)),
    Experiment("Seconds to tune a new shape, an evaluator per search", "tune_speed_trials_h100_2026-11-25.json",
               "tune_speed", "As above, each search starting its own evaluator (worker, compile pool).",
               parts=("tune",)),
]


def plot_search(path: Path, out: Path) -> None:
    """Speedup over torch.matmul per shape of a search report, sorted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = json.loads(path.read_text())
    sp = sorted(r["speedup"]["torch"] for r in rows)
    fig, ax = plt.subplots(figsize=(7, 2.6), dpi=110)
    ax.bar(range(len(sp)), sp, color=["#c44" if x < 1 else "#4a4" for x in sp])
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylim(min(0.9, min(sp) - 0.02), max(sp) + 0.05)
    ax.set_ylabel("x torch.matmul")
    ax.set_xlabel("the 48 probe shapes, sorted")
    ax.set_title(f"Searched kernels on the H100 ({_date(path.name)}): geomean {geomean(sp):.3f}")
    fig.tight_layout()
    fig.savefig(out, metadata={"Software": None})  # no timestamps: the file only changes with the data
    plt.close(fig)


def render(experiments: list[Experiment]) -> str:
    """An index: one row per experiment (its figure, date and file), then what each measured, on what.
    The details are in each experiment's own report beside its file."""
    lines = ["# Results", "",
             "Generated by `python benchmarks/report.py` from the results in `benchmarks/results/`; do not edit",
             "by hand. One row per experiment: its current figure and the file that holds its command and",
             "details (older runs are in git's history). Below the table, what each one measured and on what.", "",
             "Timing modes (docs/evaluation.md): chain mode became the objective of the search, the table and the",
             "op on 2026-11-29. The rows whose title or file names chain were measured in it; every other row in",
             "another mode (offline, sustained, layer, or a benchmark's own call pattern), as its file's command and",
             "report say, and none of those was measured again in chain mode.", "",
             "| experiment | figure | date | file |", "|---|---|---|---|"]
    notes = []
    for e in experiments:
        path = RESULTS / e.file
        if not path.exists():
            lines.append(f"| {e.title} | missing: {e.file} | | |")
            continue
        reader = READERS[e.kind]
        extra = {"parts": e.parts} if e.parts else {"against": RESULTS / e.against} if e.against else {}
        head, _body, env = reader(path, **extra)
        report = path.with_suffix(".md") if path.suffix == ".json" else None
        shown = report if report is not None and report.exists() else path
        lines.append(f"| {e.title} | {head} | {_date(e.file)} | [{shown.name}](../benchmarks/results/{shown.name}) |")
        notes.append(f"- **{e.title}** ({env}; {_date(e.file)}): {e.what}")
    return "\n".join(lines + ["", "## What each experiment measured", "", *notes]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = render(EXPERIMENTS)
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT} {'is' if same else 'is NOT'} what benchmarks/report.py writes")
        return 0 if same else 1
    OUT.write_text(text)
    probe = next((e for e in EXPERIMENTS if e.kind == "search" and "48" in e.file), None)
    if probe is not None and (RESULTS / probe.file).exists():
        plot_search(RESULTS / probe.file, PLOT)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
