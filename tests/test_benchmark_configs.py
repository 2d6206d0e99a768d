"""The hand-picked cute_dsl configurations of benchmarks/cute_dsl_vs_cublas.py are valid specs that
the backend takes on the shapes each set was made for (a typo there would cost a GPU run),
benchmarks/cublas_kernels.py names kernels briefly, and benchmarks/peer_parity.py counts the quack
configs our IR expresses and stops in one line without quack."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from cublas_kernels import _short  # noqa: E402
from cute_dsl_vs_cublas import BASE, CONFIG_SETS  # noqa: E402

from cudal2.codegen.cute_dsl import CuteDslBackend  # noqa: E402
from cudal2.ir import GemmProblem, KernelSpec  # noqa: E402

# the shapes each set was run on (benchmarks/results/)
SET_SHAPES = {
    "large": ("4096x4096x4096", "16384x16384x4096"),
    "epilogue": ("16384x512x128",),
    "streamk": ("12288x256x16384",),
    "fill": ("256x4096x2048", "2048x1024x2048"),
    "widths": ("256x12288x12288", "2048x128x4096"),
    "streaming": ("12288x1024x16384",),
    "deepk": ("512x512x12288", "512x128x8192"),
    "deepk_clusters": ("512x512x12288", "12288x128x12288"),
    "deepk_wide": ("512x512x12288",),
    "deepk_pipeline": ("512x512x12288", "2048x128x4096"),
    "large_sweep": ("1024x16384x8192", "16384x16384x4096"),
    "pingpong_stages": ("4096x4096x4096", "8192x8192x8192", "16384x16384x4096", "1024x16384x8192"),
    "pingpong_k": ("1024x16384x8192", "4096x4096x4096", "8192x8192x8192"),
    "pingpong_clusters": ("1024x16384x8192", "16384x16384x4096", "4096x4096x4096"),
    "swap_ab": ("12288x256x16384", "12288x128x12288", "2048x128x4096", "4096x128x4096"),
    "multicast_major": ("4096x4096x4096", "1024x16384x8192"),
    "swap_ab_stages": ("12288x256x16384",),
    "cluster_wide": ("256x2048x4096", "256x4096x2048", "512x4096x4096", "256x12288x12288"),
    "epilogue_pieces": ("12288x256x16384", "256x12288x12288", "8192x8192x8192", "256x4096x2048"),
    "power": ("4096x4096x4096", "8192x8192x8192", "16384x16384x4096", "1024x16384x8192"),
    "streamk_cluster": ("1024x16384x8192",),
    "streamk_ragged": ("256x12288x12288", "512x16384x1024", "12288x256x16384", "2048x16384x8192",
                       "12288x1024x16384", "512x4096x4096"),
    "streamk_lanes": ("12288x256x16384", "12288x1024x16384", "16384x256x16384"),
    "cluster4": ("1024x16384x8192", "4096x4096x4096", "8192x8192x8192", "16384x16384x4096"),
    "output_bound": ("16384x16384x128", "12288x8192x64", "16384x1024x64"),
    "walk_stages": ("16384x512x128", "16384x256x64", "16384x1024x64"),
    "splitk_clusters": ("512x512x12288", "512x128x8192"),
    "walk_displaced": ("12288x8192x64", "16384x256x64"),
    "short_k_clusters": ("16384x256x64", "16384x128x128", "16384x512x128", "16384x1024x64", "8192x256x256",
                         "16384x128x512", "16384x256x512", "4096x512x512"),
}


def test_every_set_has_its_shapes():
    assert set(SET_SHAPES) == set(CONFIG_SETS)


@pytest.mark.parametrize("name", sorted(CONFIG_SETS))
def test_every_configuration_is_a_spec_the_backend_takes(name):
    backend = CuteDslBackend()
    for label, overrides in CONFIG_SETS[name].items():
        spec = KernelSpec(**{**BASE, **overrides})
        for shape in SET_SHAPES[name]:
            support = backend.supports(GemmProblem.parse(shape), spec)
            assert support, f"{name} / {label} on {shape}: {support}"


def test_kernel_names_lose_their_signatures_only():
    reduce = ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __half>(cublasLt::cublasSplitKParams<float>, "
              "float const*, __half const*)")
    assert _short(reduce) == "cublasLt::splitKreduce_kernel<…>"
    assert _short("nvjet_sm90_hsh_64x64_64x13_2x1_v_bz_splitK_NNT") == "nvjet_sm90_hsh_64x64_64x13_2x1_v_bz_splitK_NNT"
    assert _short("Memset (Device)") == "Memset (Device)"


def test_retime_winners_times_each_winner_in_every_mode_and_resumes(tmp_path):
    """benchmarks/retime_winners.py on the CPU (Triton interpreter): a search report's winner is
    checked and timed with the baselines in both modes; a second run keeps what is done."""
    import json

    import retime_winners

    spec = KernelSpec(block_m=32, block_n=32, block_k=32, arch="sm_80")
    report = tmp_path / "search.json"
    report.write_text(json.dumps([
        {"m": 40, "n": 24, "k": 64, "spec_json": spec.to_dict()},
        {"m": 48, "n": 32, "k": 64, "spec_json": None},  # a shape with no correct kernel: skipped
    ]))
    out = tmp_path / "retimed.md"
    args = [str(report), str(out), "--device", "cpu", "--mode", "offline", "--mode", "sustained"]
    assert retime_winners.main(args) == 0
    (row,) = json.loads(out.with_suffix(".json").read_text())
    assert row["status"] == "ok" and set(row["kernel_ms"]) == {"offline", "sustained"}
    for mode in ("offline", "sustained"):
        assert row["kernel_ms"][mode] > 0 and row["baseline_ms"][mode]["torch"] > 0
        assert row["speedup"][mode]["torch"] == pytest.approx(row["baseline_ms"][mode]["torch"] / row["kernel_ms"][mode])
    text = out.read_text()
    assert "## Aggregates, sustained" in text and "| 40 | 24 | 64 |" in text
    assert retime_winners.main(args) == 0  # resumed: nothing left, the row kept as it was
    assert json.loads(out.with_suffix(".json").read_text()) == [row]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"M": 1}]))
    with pytest.raises(SystemExit, match="search_48.py .json report"):
        retime_winners.main([str(bad), str(out), "--device", "cpu"])


def test_peer_parity_says_in_one_line_when_quack_is_missing(tmp_path):
    """Without quack-kernels the peer benchmark is skipped with a clear line, not a traceback."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("quack") is not None:
        pytest.skip("quack-kernels is installed here")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peer_parity.py"), str(tmp_path / "p.md")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "quack-kernels is not importable" in out.stdout and "Traceback" not in out.stdout + out.stderr


def test_our_ir_expresses_every_quack_config_on_validation_shapes():
    from peer_parity import expressible  # benchmarks/ is on sys.path (above)

    from cudal2.dataset.sweep import draw_shapes, resolve_shapes

    problems = draw_shapes(resolve_shapes("serving:validation"), 4)
    assert expressible(problems) == (44, 44)


def test_peer_parity_names_each_refusal_with_the_backends_reason():
    from peer_parity import refusals, refused_lines

    from cudal2.ir import GemmProblem

    square, vector = GemmProblem(m=512, n=4096, k=1024, layout="NT"), GemmProblem(m=1, n=16384, k=3072, layout="NT")
    assert refusals([square, vector]) == {}  # a one-row output takes swap_ab too
    odd = GemmProblem(m=512, n=4100, k=1024, layout="NT")  # B's rows of 4100 halves: no TMA
    refused = refusals([square, odd])
    assert len(refused) == 1  # one shape, one reason
    (where, configs), = refused.items()
    assert where.startswith("512x4100x1024-float16-NT: invalid problem") and len(configs) == 44
    assert refused_lines(refused)[0].startswith("- refused on 512x4100x1024")


def _write_export(path, rows) -> str:
    """rows (dicts of one export's columns) as a gzipped export at path."""
    import csv
    import gzip

    with gzip.open(path, "wt", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return str(path)


def _validation_rows(shapes: int) -> tuple[list[tuple], list[dict]]:
    """The first `shapes` validation shapes (sorted) of the committed Triton export, and their rows."""
    import csv
    import gzip

    with gzip.open(ROOT / "benchmarks" / "results" / "sweep_triton_all_h100x4_2026-11-27.csv.gz", "rt") as f:
        rows = [r for r in csv.DictReader(f) if r["split"] == "validation"]
    kept = sorted({(r["m"], r["n"], r["k"], r["layout"]) for r in rows})[:shapes]
    return kept, [r for r in rows if (r["m"], r["n"], r["k"], r["layout"]) in kept]


def test_quack_vs_sweep_takes_each_validation_shape_s_fastest_spec_and_reports_quack_s_wins(tmp_path):
    """Recorded numbers (no quack, no GPU): the script picks the fastest correct spec of each
    validation shape in the export and writes its report and .json."""
    import csv
    import gzip
    import json
    import subprocess

    export = tmp_path / "e.csv.gz"
    with gzip.open(ROOT / "benchmarks" / "results" / "sweep_triton_all_h100x4_2026-11-27.csv.gz", "rt") as f:
        rows = list(csv.DictReader(f))
    shapes = {(r["m"], r["n"], r["k"], r["layout"]) for r in rows if r["split"] == "validation"}
    keep = set(sorted(shapes)[:3]) | {next((r["m"], r["n"], r["k"], r["layout"]) for r in rows if r["split"] == "train")}
    rows = [r for r in rows if (r["m"], r["n"], r["k"], r["layout"]) in keep]
    _write_export(export, rows)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quack_vs_sweep.py"), str(tmp_path / "q.md"),
                          "--export", str(export), "--recorded"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads((tmp_path / "q.json").read_text())
    assert len(d["shapes"]) == 3  # the validation shapes alone
    for r in d["shapes"]:
        m, n, k = r["shape"].split("-")[0].split("x")
        mine = [x for x in rows if (x["m"], x["n"], x["k"]) == (m, n, k) and x["status"] == "ok"]
        fastest = min(mine, key=lambda x: float(x["kernel_ms.offline"]) / float(x["torch_ms.offline"]))
        assert r["spec"].startswith(f"{fastest['spec.block_m']}x{fastest['spec.block_n']}x{fastest['spec.block_k']}")
    assert "validation shapes of `e.csv.gz` measured" in (tmp_path / "q.md").read_text()
    # run again on the same OUT: the shapes measured are kept, none is measured again
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quack_vs_sweep.py"), str(tmp_path / "q.md"),
                            "--export", str(export), "--recorded"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "quack beats torch" not in again.stdout  # no shape measured
    assert json.loads((tmp_path / "q.json").read_text())["shapes"] == d["shapes"]


def test_quack_vs_sweep_takes_the_fastest_spec_over_several_exports_and_screens_on_their_quack_times(tmp_path):
    """Two exports of one validation shape set, each fastest somewhere; --screen leaves out the shapes
    whose export had quack more than the margin slower than torch, and a row whose spec is no longer
    the fastest is measured again."""
    import json
    import subprocess

    shapes, rows = _validation_rows(3)

    first = _write_export(tmp_path / "a.csv.gz", rows)
    # the second export: one spec of the first shape, made twice as fast, quack slow on the second shape
    faster = dict(next(r for r in rows if (r["m"], r["n"], r["k"], r["layout"]) == shapes[0] and r["status"] == "ok"))
    faster["kernel_ms.offline"] = str(min(float(r["kernel_ms.offline"]) for r in rows
                                          if r["status"] == "ok" and r["m"] == faster["m"]) / 2)
    slow = dict(next(r for r in rows if (r["m"], r["n"], r["k"], r["layout"]) == shapes[1]))
    slow["quack_autotune_ms.offline"] = str(float(slow["torch_ms.offline"]) * 1.5)
    second = _write_export(tmp_path / "b.csv.gz", [faster, slow])
    script = [sys.executable, str(ROOT / "benchmarks" / "quack_vs_sweep.py"), str(tmp_path / "q.md"), "--recorded"]
    out = subprocess.run(script + ["--export", first], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    out = subprocess.run(script + ["--export", first, "--export", second, "--screen", "0.05"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads((tmp_path / "q.json").read_text())
    first_row = next(r for r in d["shapes"] if r["shape"].startswith("x".join(shapes[0][:3]) + "-"))
    assert len(d["shapes"]) == 2 and d["screened_out"] == [f"{'x'.join(shapes[1][:3])}-float16-{shapes[1][3]}"]
    assert first_row["spec_key"] == faster["spec_key"]  # measured again: the second export's spec is faster
    assert out.stdout.count("quack beats torch") == 1  # the third shape's row was kept
    report = (tmp_path / "q.md").read_text()
    assert "a.csv.gz, b.csv.gz" in report and "Screened out (1)" in report


def test_quack_vs_sweep_on_several_gpus_splits_the_shapes_and_writes_one_report(tmp_path):
    """--gpus 2 (recorded numbers): two processes, each its share of the shapes, merged into one
    report holding every shape once, as one process would; run again, it measures nothing."""
    import json
    import subprocess

    shapes, rows = _validation_rows(5)
    _write_export(tmp_path / "e.csv.gz", rows)

    def run(out, *more):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quack_vs_sweep.py"), str(tmp_path / out),
                               "--export", str(tmp_path / "e.csv.gz"), "--recorded", *more],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done, json.loads((tmp_path / out).with_suffix(".json").read_text())

    _, one = run("one.md")
    _, two = run("two.md", "--gpus", "2")
    shapes = [r["shape"] for r in two["shapes"]]
    assert sorted(shapes) == sorted(r["shape"] for r in one["shapes"]) and len(shapes) == len(set(shapes)) == 5
    assert not list(tmp_path.glob("*.part*"))
    again, merged = run("two.md", "--gpus", "2")
    assert "quack beats torch" not in again.stdout and merged["shapes"] == two["shapes"]


def test_quack_vs_sweep_top_times_a_shortlist_again_and_reports_the_fastest_of_it_timed_anew(tmp_path):
    """--top 3 (recorded numbers): each shape's three fastest specs by the export, timed again; the
    row's spec is the fastest of that timing, and its figure comes from a further call. Run again
    with the same shortlists nothing is measured; with --top 2 every shape is measured again."""
    import json
    import subprocess

    shapes, rows = _validation_rows(3)
    _write_export(tmp_path / "e.csv.gz", rows)

    def run(*more):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quack_vs_sweep.py"), str(tmp_path / "q.md"),
                               "--export", str(tmp_path / "e.csv.gz"), "--recorded", *more],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done, json.loads((tmp_path / "q.json").read_text())

    _, d = run("--top", "3")
    assert len(d["shapes"]) == 3 and d["top"] == 3
    for row in d["shapes"]:
        m, n, k = row["shape"].split("-")[0].split("x")
        ok = sorted((float(r["kernel_ms.offline"]), r["spec_key"]) for r in rows
                    if (r["m"], r["n"], r["k"]) == (m, n, k) and r["status"] == "ok")
        listed = [s["spec_key"] for s in row["shortlist"]]
        assert sorted(listed) == sorted(key for _, key in ok[:3]) and len(set(listed)) == 3
        timed = [s for s in row["shortlist"] if s["ms"] is not None]
        assert row["spec_key"] == min(timed, key=lambda s: s["ms"])["spec_key"]
    assert "3 fastest specs" in (tmp_path / "q.md").read_text()
    again, _ = run("--top", "3")
    assert "quack beats torch" not in again.stdout
    fewer, d2 = run("--top", "2")
    assert fewer.stdout.count("quack beats torch") == 3 and all(len(r["shortlist"]) == 2 for r in d2["shapes"])
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quack_vs_sweep.py"), str(tmp_path / "q.md"),
                          "--export", str(tmp_path / "e.csv.gz"), "--recorded", "--top", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--top 0" in bad.stderr and "Traceback" not in bad.stderr


def test_quack_vs_sweep_takes_only_the_shapes_listed_and_keeps_brief_and_full_timing_apart(tmp_path):
    """--shapes picks shapes by MxNxK; --timing brief is recorded, and a report of one timing is
    never resumed with the other; an unknown shape is a one-line error that names it."""
    import json
    import subprocess

    shapes, rows = _validation_rows(3)
    _write_export(tmp_path / "e.csv.gz", rows)
    listed = ",".join("x".join(s[:3]) for s in shapes[:2])

    def run(*more):
        return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quack_vs_sweep.py"), str(tmp_path / "q.md"),
                               "--export", str(tmp_path / "e.csv.gz"), "--recorded", "--shapes", listed, *more],
                              capture_output=True, text=True, timeout=300)

    brief = run("--timing", "brief")
    assert brief.returncode == 0, brief.stderr[-2000:]
    d = json.loads((tmp_path / "q.json").read_text())
    assert sorted(r["shape"].split("-")[0] for r in d["shapes"]) == sorted(listed.split(","))
    assert d["timing"] == "brief" and "Brief timing" in (tmp_path / "q.md").read_text()
    full = run()
    assert full.returncode == 0 and full.stdout.count("quack beats torch") == 2  # not resumed from brief
    assert "timing" not in json.loads((tmp_path / "q.json").read_text())
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "quack_vs_sweep.py"), str(tmp_path / "q.md"),
                          "--export", str(tmp_path / "e.csv.gz"), "--recorded", "--shapes", "3x5x7"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--shapes 3x5x7" in bad.stderr and "Traceback" not in bad.stderr
