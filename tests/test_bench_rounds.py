"""The interleaved rounds of benchmarks/e2e_decoder.py and benchmarks/op_overhead.py, on a CPU with fake
timers: the order of the paths alternates (A B, B A, ...), the per-round ratio's quartiles straddle 1
for equal paths under a drift, and the decoder's report and the results reader read what it writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import e2e_decoder  # noqa: E402
import runner_ups  # noqa: E402
import served_path  # noqa: E402
from _rounds import interleaved, spread  # noqa: E402
from cudal2.ir import GemmProblem, KernelSpec  # noqa: E402
from cudal2.store.table import TunedEntry, TunedTable  # noqa: E402


def _logging_timers(log: list, names=("torch", "cudal2")) -> dict:
    return {name: (lambda name=name: log.append(name) or 1.0) for name in names}


def test_rounds_alternate_the_order_of_the_paths():
    log = []
    out = interleaved(_logging_timers(log), 4)
    assert log == ["torch", "cudal2", "cudal2", "torch", "torch", "cudal2", "cudal2", "torch"]
    assert out == {"torch": [1.0] * 4, "cudal2": [1.0] * 4}
    log.clear()
    interleaved(_logging_timers(log, ("a", "b", "c")), 2, alternate=False)
    assert log == ["a", "b", "c", "a", "b", "c"]


def test_spread_is_the_median_and_quartiles():
    assert spread([5, 1, 4, 2, 3]) == (3, 1.5, 4.5)
    assert spread(iter([2.0])) == (2.0, 2.0, 2.0)


def _drifting_timers(base: dict, drift: float) -> dict:
    """Timers whose time grows by `drift` of itself with every round timed, whichever path runs."""
    step = [0]

    def timer(us):
        step[0] += 1
        return us * (1 + drift * step[0])

    return {name: (lambda us=us: timer(us)) for name, us in base.items()}


def test_equal_paths_under_a_drift_stay_within_the_quartiles():
    both = e2e_decoder.compare(_drifting_timers({"torch": 100.0, "cudal2": 100.0}, 0.01), 21)
    assert both["ratio_q1"] < 1 < both["ratio_q3"]
    assert len(both["torch"]["rounds_us"]) == len(both["cudal2"]["rounds_us"]) == 21
    # the same drift without alternating falls on the second path only: a gap that is not there
    times = interleaved(_drifting_timers({"torch": 100.0, "cudal2": 100.0}, 0.01), 21, alternate=False)
    assert spread(p / o for p, o in zip(times["torch"], times["cudal2"]))[2] < 1


def test_a_real_gap_shows_outside_the_quartiles():
    both = e2e_decoder.compare(_drifting_timers({"torch": 110.0, "cudal2": 100.0}, 0.001), 21)
    assert 1.05 < both["ratio_q1"] <= both["ratio"] <= both["ratio_q3"] < 1.15
    assert both["torch"]["us"] > both["cudal2"]["us"]


def test_wall_timer_warms_up_then_times_calls(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls = []
    one_round = e2e_decoder.wall_timer(lambda: calls.append(1), 5)
    assert len(calls) == 3  # the warm-up
    assert one_round() > 0 and len(calls) == 8


def _row(tokens: int) -> dict:
    def pair(torch_us, ours_us):
        both = e2e_decoder.compare({"torch": lambda: torch_us, "cudal2": lambda: ours_us}, 3)
        for name in ("torch", "cudal2"):
            both[name]["tokens_per_s"] = tokens / both[name]["us"] * 1e6
        return both

    g = pair(10.0, 8.0)
    gemm = {"gemm": "q, o", "shape": f"{tokens}x4096x4096", "served": True, "spec": "abc", "torch_us": g["torch"]["us"],
            "cudal2_us": g["cudal2"]["us"], "torch_rounds_us": g["torch"]["rounds_us"],
            "cudal2_rounds_us": g["cudal2"]["rounds_us"], "ratio": g["ratio"], "ratio_q1": g["ratio_q1"],
            "ratio_q3": g["ratio_q3"]}
    return {"tokens": tokens, "rel_error": 1e-4, "modes": {"eager": pair(500.0, 400.0), "graph": pair(200.0, 250.0)},
            "gemms": [gemm]}


def test_report_and_results_reader(tmp_path, results_report):
    rows, env = [_row(1), _row(16)], {"date": "2026-01-01", "gpu_name": "a GPU"}
    md = e2e_decoder.report(rows, {1: "budget 3"}, env, "python3 benchmarks/e2e_decoder.py x.md", 3, 20, ["k", "v"],
                            ["q"])
    assert "Layers routed through cudal2.linear" in md and "shape): k, v; in graph mode also" in md
    assert "captured CUDA graphs): q; the others ran nn.Linear's forward" in md
    assert "| 1 | eager | 500.0 | 400.0 | 1.250 (1.250 to 1.250) | budget 3 |" in md
    assert "| 16 | q, o | 16x4096x4096 | 10.00 | 8.00 | 1.250 (1.250 to 1.250) | abc |" in md
    assert "medians of 3 rounds of 20 back-to-back calls" in md
    (tmp_path / "e2e_decoder_x.md").write_text(md)
    (tmp_path / "e2e_decoder_x.json").write_text(json.dumps({"env": env, "rows": rows}))

    head, table, _ = results_report.read_e2e_decoder(tmp_path / "e2e_decoder_x.json")
    assert head == "cudal2 / torch tokens/s per mode, over token counts: eager 1.250 to 1.250; graph 0.800 to 0.800"
    assert len(table) == 2 + 4 + 2 + 2


def test_the_report_sets_the_tables_predicted_saving_against_the_layers_measured_one():
    rows = [_row(1), _row(16)]
    rows[0].update(predicted_saving_us=90.0, measured_saving_us=100.0)  # within 25%
    rows[1].update(predicted_saving_us=40.0, measured_saving_us=100.0)  # not
    for g in rows[0]["gemms"] + rows[1]["gemms"]:
        g["table_mode"] = "layer"
    md = e2e_decoder.report(rows, {}, {"date": "2026-01-01"}, "cmd", 3, 20, [], [])
    assert "| 1 | layer | 90.00 | 100.00 | yes |" in md and "| 16 | layer | 40.00 | 100.00 | no |" in md
    rows[0].update(measured_saving_q1_us=97.5, measured_saving_q3_us=103.0)  # the layer's own spread, where kept
    md = e2e_decoder.report(rows, {}, {"date": "2026-01-01"}, "cmd", 3, 20, [], [])
    assert "| 1 | layer | 90.00 | 100.00 (97.50 to 103.00) | yes |" in md
    old = e2e_decoder.report([_row(1)], {}, {"date": "2026-01-01"}, "cmd", 3, 20, [], [])
    assert "What the table predicts" not in old  # results written before the prediction was kept
    none = _row(1024)
    none.update(predicted_saving_us=0.0, measured_saving_us=3.86)  # nothing served: the layers differ by noise
    md = e2e_decoder.report([none], {}, {"date": "2026-01-01"}, "cmd", 3, 20, [], [])
    assert "| 1024 | - | 0.00 | 3.86 | - (nothing served) |" in md


def test_the_report_shows_each_served_group_alone():
    row = _row(1)
    row["served_alone"] = [{"gemms": "k, v", "shape": "1x1024x4096", "predicted_us": 0.96, "layer_mode_now_us": 1.1,
                            "layer_saving_us": 1.6, "layer_saving_q1_us": 1.5, "layer_saving_q3_us": 1.7}]
    md = e2e_decoder.report([row], {}, {"date": "2026-01-01"}, "cmd", 3, 20, [], [])
    # (older results: no stream or mlp_chain figures)
    assert "| 1 | k, v | 1x1024x4096 | 0.96 | 1.10 | - | - | - | - | - | - | 1.60 (1.50 to 1.70) | - |" in md
    row["served_alone"][0].update(stream_after_prelude_us=1.2, stream_after_gemm_us=1.3, stream_between_gemms_us=1.7,
                                  layer_saving_again_us=1.45)
    md = e2e_decoder.report([row], {}, {"date": "2026-01-01"}, "cmd", 3, 20, [], [])
    assert "| 1 | k, v | 1x1024x4096 | 0.96 | 1.10 | - | - | 1.20 | 1.30 | 1.70 | - | 1.60 (1.50 to 1.70) | 1.45 |" in md
    row["served_alone"][0].update(stream_after_mlp_us=-0.4, mlp_chain_now_us=-0.3, chain_now_us=0.5)
    md = e2e_decoder.report([row], {}, {"date": "2026-01-01"}, "cmd", 3, 20, [], [])
    assert "| 0.96 | 1.10 | 0.50 | -0.30 | 1.20 |" in md and "| 1.70 | -0.40 | 1.60 (1.50 to 1.70) |" in md
    assert "Each served group alone" not in e2e_decoder.report([_row(1)], {}, {"date": "2026-01-01"}, "cmd", 3, 20,
                                                                 [], [])


def test_serving_only_puts_the_other_routed_projections_back_and_routes_them_again():
    import pytest
    import torch

    from cudal2.ops import RoutedLinear

    layer = torch.nn.Module()
    for name in ("q", "k", "v", "norm"):
        setattr(layer, name, torch.nn.Linear(4, 4))
    layer.q.__class__ = layer.k.__class__ = layer.v.__class__ = RoutedLinear  # as route_linears leaves them
    assert set(e2e_decoder.routed_projections(layer)) == {"q", "k", "v"}
    with e2e_decoder.serving_only(layer, ("k",)):
        assert [type(m) for m in (layer.q, layer.k, layer.v, layer.norm)] == [
            torch.nn.Linear, RoutedLinear, torch.nn.Linear, torch.nn.Linear]
    assert [type(m) for m in (layer.q, layer.k, layer.v, layer.norm)] == [RoutedLinear] * 3 + [torch.nn.Linear]
    with pytest.raises(RuntimeError), e2e_decoder.serving_only(layer, ()):
        raise RuntimeError("a timing failed")
    assert type(layer.q) is RoutedLinear and type(layer.v) is RoutedLinear  # routed again after an error too


def test_the_report_sets_the_prediction_after_check_routes_against_the_layer_timed_again():
    rows = [_row(1), _row(128)]
    check = lambda layers, saving, kept, served=True: {  # noqa: E731
        "layers": layers, "served": served, "kept": kept, "saving_us": saving, "saving_q1_us": saving - 0.5,
        "saving_q3_us": saving + 0.5, "floor_us": 0.2}
    rows[0]["checked"] = {"checks": [check(["q", "o"], 3.4, True), check(["k", "v"], -0.3, False),
                                     check(["gate", "up"], 0.0, True, served=False)],
                          "predicted_saving_us": 3.0, "measured_saving_us": 3.5, "measured_saving_q1_us": 3.2,
                          "measured_saving_q3_us": 3.9}
    rows[1]["checked"] = {"checks": [check(["q", "o"], -1.0, False)], "predicted_saving_us": 0.0,
                          "measured_saving_us": 0.4, "measured_saving_q1_us": -0.2, "measured_saving_q3_us": 0.9}
    md = e2e_decoder.report(rows, {}, {"date": "2026-01-01"}, "cmd", 3, 20, [], [])
    assert "| 1 | q, o 3.40 (2.90 to 3.90) kept; k, v -0.30 (-0.80 to 0.20) declined | 0.20 | 3.00 | 3.50 (3.20 to " \
           "3.90) | yes |" in md  # |3.0 - 3.5| <= 0.25 * 3.5; the group no kernel served is not listed
    assert "| 128 | q, o -1.00 (-1.50 to -0.50) declined | 0.20 | 0.00 | 0.40 (-0.20 to 0.90) | - (nothing served) |" in md


def test_runner_ups_serves_one_leader_for_its_problem_and_reports_each():
    def entry(m, stages, kernel_ms):
        return TunedEntry(problem=GemmProblem(m=m, n=1024, k=4096, layout="NT"), spec=KernelSpec(stages=stages),
                          kernel_ms=kernel_ms, baselines_ms={"torch": 0.010}, gpu="g")

    base = TunedTable([entry(1, 3, 0.008), entry(16, 3, 0.009)])
    swapped = runner_ups.with_entry(base, entry(1, 4, 0.0095))
    assert {(e.problem.m, e.spec.stages) for e in swapped} == {(1, 4), (16, 3)}
    row = {"tokens": 1, "group": "k, v", "rank": 2, "spec": "abc", "backend": "triton", "speedup": 1.022,
           "served": True, "predicted_us": 0.3, "saving_us": -0.4, "saving_q1_us": -0.6, "saving_q3_us": -0.1}
    lines = runner_ups.report([row], {"date": "2026-01-01"}, "cmd")
    assert "| 1 | k, v | 2 | abc | triton | 1.022 | yes | 0.30 | -0.40 (-0.60 to -0.10) |" in lines


def test_served_path_reports_the_searched_and_the_served_ratio():
    row = {"shape": "1x3072x3072-float16-NT", "spec": "s", "search": 1.226,
           "us": {"torch.matmul": 10.3, "kernel": 8.4, "kernel, new output": 8.5, "F.linear": 10.1,
                  "cudal2.linear": 8.6}}
    lines = served_path.report([row], {"date": "2026-01-01"}, "cmd")
    assert "| 1x3072x3072-float16-NT | `s` | 10.30 | 8.40 | 8.50 | 10.10 | 8.60 | 1.226 | 1.174 | 1.226 |" in lines


def test_saving_spread_is_the_median_and_quartiles_of_the_per_round_saving():
    median, q1, q3 = e2e_decoder.saving_spread({"torch": [10.0, 12.0, 11.0, 15.0, 9.0],
                                                "cudal2": [9.0, 9.0, 10.0, 10.0, 9.0]})
    assert (median, q1, q3) == (1.0, 0.5, 4.0)  # savings 1, 3, 1, 5, 0
