"""benchmarks/op_overhead.py --processes: the measuring processes' command, how their figures combine,
the report, and docs/results.md's reader of it (on the CPU: the processes' JSON is made up here)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import op_overhead  # noqa: E402


def _run(torch_rounds, ours_rounds):
    paths = {"F.linear": {"host_us": sorted(torch_rounds)[len(torch_rounds) // 2], "host_rounds": torch_rounds},
             "cudal2.linear": {"host_us": sorted(ours_rounds)[len(ours_rounds) // 2], "host_rounds": ours_rounds}}
    return {"rows": [{"shape": "1x4096x4096", "served": False, "paths": paths}]}


def test_each_process_measures_with_the_same_flags_and_no_search():
    args = argparse.Namespace(shapes="1x4096x4096", rounds=101, calls=200, min_saving_us=None, eager_only=True)
    command = op_overhead.child_command(args, Path("/out/x.process0.md"), "/tmp/s.db")
    assert command[1].endswith("op_overhead.py") and command[2] == "/out/x.process0.md"
    flags = command[3:]
    assert flags[flags.index("--budget") + 1] == "0" and flags[flags.index("--store") + 1] == "/tmp/s.db"
    assert flags[flags.index("--rounds") + 1] == "101" and "--eager-only" in flags and "--processes" not in flags


def test_the_figure_is_the_median_over_processes_of_each_process_median_difference(tmp_path, results_report):
    runs = [_run([20.0, 20.0, 20.0], [20.3, 20.2, 20.4]),  # +0.3
            _run([26.0, 26.0, 26.0], [27.0, 27.1, 26.9]),  # +1.0
            _run([19.0, 19.0, 19.0], [19.2, 19.2, 19.3])]  # +0.2
    combined = op_overhead.combine(runs)
    assert len(combined) == 1 and combined[0]["path"] == "cudal2.linear"
    assert [round(v, 6) for v in combined[0]["over_us_per_process"]] == [0.3, 1.0, 0.2]
    assert round(combined[0]["over_us"], 6) == 0.3
    assert combined[0]["torch_host_us_per_process"] == [20.0, 26.0, 19.0]
    out = tmp_path / "overhead.md"
    out.write_text(op_overhead.combined_report(combined, {"date": "2026-11-29", "gpu_name": "GPU"}, "cmd", 3))
    out.with_suffix(".json").write_text(json.dumps({"combined": combined, "env": {}}))
    assert "| 1x4096x4096 | torch | cudal2.linear | +0.30 | +0.30, +1.00, +0.20 | 20.0, 26.0, 19.0 |" in out.read_text()
    figure, table, _ = results_report.read_op_overhead(out.with_suffix(".json"))
    assert "with nothing served" in figure and "cudal2.linear +0.30 us (+0.20 to +1.00 over 3 processes)" in figure
    assert table[0].startswith("| shape |")


def test_a_served_row_names_its_kernel_and_launch_path():
    """Two kernels of one backend launch differently (a split-K reduction is a second launch): a served row's
    route names the kernel and the path the op bound, so that two runs' figures are compared like with like."""
    row = {"served": True, "table_speedup": 1.056, "spec_summary": "16x64x128 w4 s5 pointer splitk4/workspace",
           "launch_path": "triton x2"}
    assert op_overhead.route_of(row) == ("tuned kernel `16x64x128 w4 s5 pointer splitk4/workspace` via triton x2 "
                                         "(1.056x torch in the search)")
    assert op_overhead.route_of({**row, "spec_summary": None, "launch_path": None}) == \
        "tuned kernel (1.056x torch in the search)"
    assert op_overhead.route_of({"served": False}).startswith("torch")
    runs = [{"rows": [{**row, "shape": "1x4096x4096", "paths": _run([20.0], [22.0])["rows"][0]["paths"]}]}]
    combined = op_overhead.combine(runs)
    report = op_overhead.combined_report(combined, {"date": "2026-11-29"}, "cmd", 1)
    assert "| 1x4096x4096 | tuned kernel `16x64x128 w4 s5 pointer splitk4/workspace` via triton x2 (1.056x" in report
