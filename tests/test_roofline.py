"""benchmarks/roofline.py's CPU parts: which shapes it takes, how it reads a shape's limit, and its report."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import roofline  # noqa: E402

from cudal2 import shapes  # noqa: E402
from cudal2.ir import GemmProblem  # noqa: E402


def test_takes_thirty_validation_shapes_of_small_m_and_large_weights():
    chosen = roofline.select("validation", roofline.TOKENS, roofline.MIN_WEIGHT_MIB)
    validation = {s.label for s in shapes.shapes("serving", "validation")}
    assert len(chosen) >= 30
    for p in chosen:
        assert p.label() in validation and p.layout == "NT"
        assert p.m in roofline.TOKENS and p.m <= 256
        assert 2 * p.n * p.k >= 8 * 2**20
    assert roofline.shape_key(chosen[0]) == f"{chosen[0].m}x{chosen[0].n}x{chosen[0].k}-NT"  # the JSON's format
    halves = roofline.select("validation", roofline.TOKENS, 8, 0, 2) + roofline.select("validation", roofline.TOKENS, 8, 1, 2)
    assert sorted(p.label() for p in halves) == sorted(p.label() for p in chosen)


def test_a_decode_gemm_is_memory_bound_and_a_large_one_compute_bound():
    decode = roofline.limits(GemmProblem(m=1, n=4096, k=4096, layout="NT"), read_GBps=4000, dense_TFLOPS=700)
    assert decode["bound"] == "memory"
    assert decode["ideal_us"] == pytest.approx(2 * (4096 + 4096 * 4096 + 4096) / 4000 / 1e3)
    big = roofline.limits(GemmProblem(m=8192, n=8192, k=8192, layout="NT"), read_GBps=4000, dense_TFLOPS=700)
    assert big["bound"] == "compute"
    assert big["ideal_us"] == pytest.approx(2 * 8192**3 / 700 / 1e6)


def test_fractions_and_summary():
    f = roofline.fractions(10.0, {"torch": 20.0, "cudal2": 11.0, "quack_autotune": None})
    assert f == {"torch": 0.5, "cudal2": pytest.approx(10 / 11), "quack_autotune": None}
    rows = [{"shape": "a", "us": {"torch": 20.0, "cudal2": 11.0}, "fraction": f, "speedup": 20 / 11,
             "bound": "memory", "ideal_us": 10.0, "spec": "x"},
            {"shape": "b", "us": {"torch": 10.0, "cudal2": 12.5}, "fraction": {"torch": 0.9, "cudal2": 0.72},
             "speedup": 0.8, "bound": "memory", "ideal_us": 9.0, "spec": "y"},
            {"shape": "c", "us": {"torch": 10.0}, "fraction": {"torch": 0.9}, "status": "search found no kernel",
             "bound": "memory", "ideal_us": 9.0}]
    s = roofline.summarize(rows)
    assert s["shapes"] == 2 and s["cudal2_at_0.85"] == 1 and s["torch_at_0.85"] == 1
    assert s["slowest"] == "b" and s["slower_than_torch"] == 1
    assert s["geomean_speedup"] == pytest.approx((20 / 11 * 0.8) ** 0.5)
    md = roofline.markdown({"gpu": "G", "date": "d", "command": "c", "versions": "v", "copy_GBps": 1.0,
                            "read_GBps": 2.0, "dense_TFLOPS": 3.0, "rows": rows})
    assert "| a | memory |" in md and "search found no kernel" in md and "slower on 1" in md


def test_an_impossible_selection_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        roofline.main(["--tokens", "1", "--min-weight-mib", "1e9"])
    assert str(e.value).startswith("error: no validation serving shape") and "\n" not in str(e.value)
