"""benchmarks/context_ladder.py and benchmarks/weight_placement.py on a CPU: their reports from made-up
measurements, which kernels count as the call's, where the placements lie, and their one-line refusals of
bad arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import context_ladder  # noqa: E402
import weight_placement  # noqa: E402


def _profile(kernels: list[tuple[str, float]]) -> dict:
    return {"kernels": [{"name": n, "us": us, "gap_us": 0.4} for n, us in kernels], "span_us": 1.0}


def test_the_call_kernels_are_those_whose_names_differ():
    torch_run = _profile([("norm", 7.0), ("nvjet_gemm", 13.0), ("splitk_reduce", 2.0), ("add", 1.0)])
    ours = _profile([("norm", 7.1), ("cutlass_kernel", 12.5), ("reduce_kernel", 1.5), ("add", 1.0)])
    assert context_ladder.call_kernels({"torch": torch_run, "cudal2": ours}) == "13.00 -> 12.50; 2.00 -> 1.50"
    fewer = _profile([("norm", 7.0), ("cutlass_kernel", 12.5), ("add", 1.0)])
    assert context_ladder.call_kernels({"torch": torch_run, "cudal2": fewer}) == "4 kernels against 3"
    assert context_ladder.call_kernels({"torch": torch_run, "cudal2": torch_run}) == "the same kernels"
    assert context_ladder.call_kernels({"torch": {"error": "0 kernels"}, "cudal2": ours}) == "0 kernels"


def test_the_ladder_report_gives_each_context_its_row_and_clock():
    row = {"tokens": 128, "projection": "q", "context": "layer mode", "saving_us": (2.27, 2.05, 2.45),
           "call_kernels": "13.73 -> 12.22",
           "clock": {"torch": {"sm": 1980.0, "power_w": 197.0}, "cudal2": {}}}
    md = context_ladder.markdown([row, {**row, "context": "layer", "saving_us": (-1.35, -1.92, -0.62)}],
                                 {"date": "2026-01-01", "gpu_name": "a GPU"}, "cmd",
                                 {(128, "q"): "cute_dsl abc (chain)"})
    assert ("| 128 | q | cute_dsl abc (chain) | layer mode | +2.27 (+2.05 to +2.45) | 13.73 -> 12.22 "
            "| 1980 MHz, 197 W; - |") in md
    assert "| layer | -1.35 (-1.92 to -0.62) |" in md


def test_placements_keep_the_kernels_alignment_and_differ_in_low_bits():
    where = weight_placement.offsets(12)
    assert len(where) == len(set(where)) == 12
    assert all(off % 512 == 0 for off in where)
    assert all(b - a > weight_placement.STRIDE_BYTES - (1 << 20) for a, b in zip(where, where[1:]))
    assert len({off % (1 << 20) for off in where}) > 1  # not one fixed offset modulo a MiB
    assert weight_placement.offsets(12) == where  # seeded: every run places the weight alike


def test_the_placement_summary_and_report():
    rows = [{"offset_bytes": 1 << 20, "weight_ptr": 0, "torch_us": 16.0, "cudal2_us": 14.0, "ratio": 16 / 14},
            {"offset_bytes": 2 << 20, "weight_ptr": 0, "torch_us": 15.0, "cudal2_us": 15.0, "ratio": 1.0},
            {"offset_bytes": 3 << 20, "weight_ptr": 0, "torch_us": 15.5, "cudal2_us": 14.5, "ratio": 15.5 / 14.5}]
    s = weight_placement.summary(rows)
    assert s["torch_us"] == {"min": 15.0, "median": 15.5, "max": 16.0}
    assert s["ratio"]["min"] == 1.0 and abs(s["ratio"]["max"] - 16 / 14) < 1e-12
    md = weight_placement.markdown([{"shape": "128x4096x4096", "served": "cute_dsl abc", "placements": rows,
                                     "summary": s}], {"date": "2026-01-01"}, "cmd")
    assert ("| 128x4096x4096 | cute_dsl abc | 15.00 / 15.50 / 16.00 | 14.00 / 14.50 / 15.00 "
            "| 1.000 / 1.069 / 1.143 |") in md
    assert "1.00: 16.00 / 14.00 = 1.143" in md


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "out.md", *args],
                          capture_output=True, text=True, timeout=120)


def test_bad_arguments_get_one_line_each(tmp_path):
    store = tmp_path / "store.db"
    store.write_bytes(b"")
    cases = [("context_ladder.py", ["--store", str(tmp_path / "none.db")], "no store at"),
             ("context_ladder.py", ["--store", str(store), "--at", "128q"], "is not tokens:projection pairs"),
             ("context_ladder.py", ["--store", str(store), "--at", "128:z"], "no projection z in the layer"),
             ("weight_placement.py", ["--store", str(tmp_path / "none.db")], "no store at"),
             ("weight_placement.py", ["--store", str(store), "--shapes", "12x3"], "is not MxNxK"),
             ("weight_placement.py", ["--store", str(store), "--placements", "1"], "at least 2")]
    for script, args, said in cases:
        got = _run(script, *args)
        assert got.returncode != 0 and said in got.stderr, (script, args, got.stderr)
        assert len(got.stderr.strip().splitlines()) == 1 and "Traceback" not in got.stderr


def test_write_results_takes_a_report_text_a_key_and_extra_fields(tmp_path):
    import json

    from _outputs import write_results

    out = tmp_path / "r.md"
    write_results(out, "# title\n", "cmd", {"date": "d"}, [{"a": 1}], key="results", served={"1:q": "k"})
    assert out.read_text() == "# title\n"
    assert json.loads(out.with_suffix(".json").read_text()) == {"command": "cmd", "env": {"date": "d"},
                                                                "served": {"1:q": "k"}, "results": [{"a": 1}]}
    write_results(out, ["| a |", "| 1 |"], "cmd", {}, [Path("x")])  # lines, the default key, a value as str
    assert out.read_text() == "| a |\n| 1 |\n"
    assert json.loads(out.with_suffix(".json").read_text())["rows"] == ["x"]
