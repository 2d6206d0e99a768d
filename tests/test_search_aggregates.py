import math

import pytest

from cudal2.tuner.aggregates import aggregate, markdown


def test_aggregate_statistics():
    a = aggregate([2.0, 0.5, 1.0, None, 4.0])
    assert a.n == 4 and a.missing == 1
    assert a.geomean == pytest.approx(math.exp((math.log(2) + math.log(0.5) + 0 + math.log(4)) / 4))
    assert a.mean == pytest.approx(7.5 / 4) and a.median == pytest.approx(1.5)
    assert (a.min, a.max, a.slower) == (0.5, 4.0, 1)
    assert aggregate([None, None]) is None and aggregate([]) is None
    with pytest.raises(ValueError, match="positive"):
        aggregate([1.0, 0.0])


def test_markdown_table():
    text = markdown({"torch": aggregate([1.1, 0.9]), "cublaslt_autotune": None})
    assert "| torch | 2 | 0.995 | 1.000 | 1.000 | 0.900 | 1.100 | 1 |" in text
    assert "| cublaslt_autotune | 0 |" in text


def _combine_48():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "combine_48.py"
    spec = importlib.util.spec_from_file_location("combine_48", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_combine_48_keeps_per_shape_the_run_with_the_higher_speedup_over_torch():
    mod = _combine_48()
    row = lambda m, sp, name: {"m": m, "n": 8, "k": 8, "speedup": sp, "spec": name}  # noqa: E731
    runs = {"triton": [row(1, {"torch": 0.9, "cublaslt_autotune": 0.95}, "t1"), row(2, {"torch": 1.2}, "t2"),
                       row(3, {}, "t3")],
            "cute": [row(1, {"torch": 1.1}, "c1"), row(2, {"torch": 0.5}, "c2"), row(3, {"torch": 0.8}, "c3")]}
    best = {r["m"]: (r["run"], r["spec"]) for r in mod.combine(runs)}
    assert best == {1: ("cute", "c1"), 2: ("triton", "t2"), 3: ("cute", "c3")}
    text = mod.report(runs)
    assert "| torch.matmul (best of the runs) | 3 |" in text and "| cute |" in text


def test_combine_48_reads_the_markdown_report_of_search_48():
    mod = _combine_48()
    text = "\n".join([
        "# cudal2 search over the H100 probe shapes (2 of 2 done; budget 8 evaluations, offline, kernel time)", "",
        "| M | N | K | best us | torch us | cuBLASLt-autotune us | vs torch | vs cuBLASLt-autotune "
        "| probe Triton-autotune vs torch | evals | best spec |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        "| 12288 | 4096 | 1024 | 159.3 | 162.4 | - | 1.019 | - | 0.834 | 8 | `cute_dsl 128x128x64 w12 s6` |",
        "| 512 | 128 | 64 | 3.0 | 2.6 | 2.9 | 0.867 | 0.967 | 1.189 | 8 | `64x64x64 w4 s2 pointer` |", "",
        "| over | shapes | geomean | mean | median | min | max | slower |",
        "| torch.matmul | 2 | 0.940 | 0.943 | 0.943 | 0.867 | 1.019 | 1 |"])
    rows = mod.rows_from_report(text)
    assert [(r["m"], r["n"], r["k"]) for r in rows] == [(12288, 4096, 1024), (512, 128, 64)]
    assert rows[0]["speedup"] == {"torch": 1.019} and rows[0]["spec"] == "cute_dsl 128x128x64 w12 s6"
    assert rows[1]["speedup"] == {"torch": 0.867, "cublaslt_autotune": 0.967}
    with pytest.raises(SystemExit, match="no per-shape rows"):
        mod.rows_from_report("| over | shapes |")


def test_search_48_report_says_how_long_the_chunk_ran_and_combine_48_still_reads_it(tmp_path):
    # the recorded runner: synthetic times, so only the report's shape is checked here
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "search_48.py"
    spec = importlib.util.spec_from_file_location("search_48", path)
    search_48 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(search_48)
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps([{"M": 256, "N": 128, "K": 512, "cublas_ms": 0.01, "triton_ms": 0.012},
                                  {"M": 128, "N": 64, "K": 128, "cublas_ms": 0.005, "triton_ms": 0.005}]))
    out = tmp_path / "s48.md"
    assert search_48.main([str(shapes), "--runner", "recorded", "--budget", "4", "--batch", "4",
                           "--store", str(tmp_path / "s48.db"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "(2 of 2 done" in text and "\nThis chunk: " in text
    png = out.with_suffix(".png")  # the speedups plotted beside the report, and again from its .json
    assert png.read_bytes()[:4] == b"\x89PNG"
    png.unlink()
    assert search_48.main([str(out.with_suffix(".json")), "--replot"]) == 0 and png.stat().st_size > 1000
    rows = _combine_48().rows_from_report(text)
    assert [(r["m"], r["n"], r["k"]) for r in rows] == [(256, 128, 512), (128, 64, 128)]
