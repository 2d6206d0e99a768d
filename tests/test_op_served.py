"""benchmarks/op_served.py on the CPU: the op's table built from a winners file, the routing record, the
report and its verdicts (the smoke path, and rows as a GPU run writes them)."""

import json
import math
import random
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import op_served  # noqa: E402
from cudal2.ir import KernelSpec

WINNERS = ROOT / "benchmarks" / "results" / "crosscheck_winners_confirm_g60_h200_2026-11-29.json"


@pytest.fixture(autouse=True)
def _default_table():
    from cudal2 import ops

    yield
    ops.set_table(None)  # the smoke run installed its own table


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "served.md"
    op_served.main([str(out), "--smoke", "--rounds", "2"])
    return out, json.loads(out.with_suffix(".json").read_text())


def _row(shape="1x3072x3072-float16-NT", served="triton", eager=1.05, graph=1.05, search=1.07, here=None):
    path = lambda ratio: {"ratio": ratio, "ratio_q1": ratio, "ratio_q3": ratio, "calls": 20,  # noqa: E731
                          "operand_sets": 6, "torch": {"us": 10.0 * ratio}, "cudal2": {"us": 10.0}}
    graph_path = path(graph) if here is None else {**path(graph), "here": here, "here_q1": here, "here_q3": here}
    return {"shape": shape, "spec": "16x32x64 w4 s5 pointer", "search": search, "eval_layer": 1.06,
            "served_eager": served, "served_graph": served, "table_eager": "s", "table_graph": "s",
            "eager": path(eager), "graph": graph_path, "rel_error": 1e-4}


def test_a_chain_row_enters_the_table_in_chain_mode_with_its_chain_figures():
    row = {"shape": "1x3072x3072-float16-NT", "spec_json": KernelSpec().to_json(), "search_mode": "chain",
           "eval_chain_kernel_ms": 0.009, "eval_chain_torch_ms": 0.0104, "eval_offline_kernel_ms": 0.0089}
    entry = op_served.entry_of(row, "NVIDIA H200")
    assert (entry.mode, entry.kernel_ms, entry.baselines_ms) == ("chain", 0.009, {"torch": 0.0104})
    assert op_served.entry_of({**row, "search_mode": None}, "NVIDIA H200") is None  # layer: no layer figures
    assert op_served._eval_cell({"eval": 1.156, "eval_mode": "chain"}) == "1.156 (chain)"
    assert op_served._eval_cell({"eval_layer": 1.06}) == "1.060 (layer)"  # a row of a run before modes were kept


def test_the_table_holds_each_winner_as_the_store_would_in_layer_mode():
    rows = json.loads(WINNERS.read_text())["rows"]
    table = op_served.table_of(rows + [{"shape": "8x40x32-float16-NT", "status": "no winner"}], "NVIDIA H100")
    assert len(table) == len(rows) == 30  # one entry per winner; a row without one routes to torch
    entry = table.lookup(op_served.problem_of(rows[0]["shape"]), gpu="NVIDIA H100")
    assert entry.mode == "layer" and entry.gpu == "NVIDIA H100" and entry.spec.summary() == rows[0]["spec"]
    assert entry.kernel_ms == rows[0]["eval_layer_kernel_ms"]
    assert entry.baselines_ms == {"torch": rows[0]["eval_layer_torch_ms"]}


def test_smoke_run_records_what_the_table_names_and_what_the_op_ran(smoke):
    md, out = smoke
    rows = {r["shape"]: r for r in out["rows"]}
    assert list(rows) == [shape for shape, *_ in op_served.SMOKE_ROWS]
    eager_win, graph_win, none = rows.values()
    assert eager_win["table_eager"] == eager_win["table_graph"] == eager_win["spec"]  # saves 20 us: both paths
    assert graph_win["table_eager"] is None and graph_win["table_graph"] == graph_win["spec"]  # saves 0.5 us
    assert none["table_eager"] is None and none["table_graph"] is None and "spec" not in none
    for r in rows.values():  # CPU tensors: the op runs torch whatever the table says
        assert r["served_eager"] == r["served_graph"] == "torch" and r["rel_error"] < 1e-2
        for path in ("eager", "graph"):
            assert len(r[path]["torch"]["rounds_us"]) == len(r[path]["cudal2"]["rounds_us"]) == 2
    assert out["smoke"] and out["gpu_uuid"] == "?" and "torch" in out["versions"]


def test_smoke_report_has_the_columns_and_the_header(smoke):
    md, out = smoke
    text = md.read_text()
    assert "Smoke run on the CPU" in text and "UUID ?" in text and "--smoke" in text and out["date"] in text
    header = next(line for line in text.splitlines() if line.startswith("| shape | winner"))
    for column in ("served eager", "served graph", "ratio eager", "ratio graph", "served", "searched", "here",
                   "eval (mode)", "eager >= 0.99", "graph >= 0.99", "served >= searched - 0.02",
                   "served >= here - 0.02"):
        assert f"| {column} |" in header
    assert "| 8x40x32-float16-NT | `none` | torch | torch |" in text


def test_verdicts_hold_each_path_to_099_and_a_kernel_served_in_a_graph_to_its_searched_speedup():
    v = op_served.verdicts
    assert v(_row()) == {"eager": True, "graph": True, "searched": True, "searched_here": None,  # 1.05 >= 1.07 - 0.02
                         "passed": True}
    assert v(_row(eager=0.985))["eager"] is False and not v(_row(eager=0.985))["passed"]
    assert v(_row(graph=0.985))["graph"] is False
    low = v(_row(graph=1.04))  # served in the graph, below 1.07 - 0.02
    assert low["graph"] is True and low["searched"] is False and not low["passed"]
    torch_served = v(_row(served="torch", graph=1.0, eager=0.99))  # torch ran: no searched bar
    assert torch_served["searched"] is None and torch_served["passed"]


def test_where_the_search_was_timed_again_here_the_bar_reads_that_figure_and_reports_the_searched_one():
    v = op_served.verdicts
    # the op at its kernel's speed on this GPU (1.19 against 1.19 here), below the search's host's 1.226
    ok = v(_row(graph=1.19, search=1.226, here=1.19))
    assert ok["searched_here"] is True and ok["searched"] is False and ok["passed"]
    # the op below its kernel here fails, whatever the search's host read
    slow = v(_row(graph=1.15, search=1.16, here=1.19))
    assert slow["searched_here"] is False and slow["searched"] is True and not slow["passed"]
    assert v(_row(served="torch", graph=1.0, here=1.2))["searched_here"] is None  # torch ran: no kernel to hold to
    # both are read off the ratio of the median times, as the search scores, not the per-round ratio's median
    row = _row(graph=1.15, search=1.226, here=1.20)
    row["graph"]["torch"]["us"] = 12.2  # F.linear 12.2 us, the op 10.0: 1.22
    assert v(row)["searched_here"] is True and v(row)["searched"] is True


def test_report_marks_each_failed_verdict():
    out = {"gpu": "NVIDIA H200", "gpu_uuid": "GPU-x", "date": "2026-11-30", "command": "python x", "rounds": 25,
           "versions": "torch 2.11", "winners": "w.json", "winners_run": {}, "smoke": False,
           "rows": [_row(), _row("33x3072x3072-float16-NT", eager=0.985), _row("7x1x1-float16-NT", graph=1.04),
                    _row("2x1x1-float16-NT", graph=1.04, here=1.05), _row("3x1x1-float16-NT", graph=1.04, here=1.09)]}
    text = op_served.markdown(out)
    assert "**2 of 5 shapes pass every verdict.**" in text and "GPU-x" in text
    lines = {line.split(" | ")[0][2:]: line.split(" | ")[-4:] for line in text.splitlines()
             if line.startswith("| ") and "-float16-NT" in line and "`" in line}
    assert lines["1x3072x3072-float16-NT"] == ["pass", "pass", "pass", "- |"]
    assert lines["33x3072x3072-float16-NT"] == ["**FAIL**", "pass", "pass", "- |"]
    assert lines["7x1x1-float16-NT"] == ["pass", "pass", "**FAIL**", "- |"]
    assert lines["2x1x1-float16-NT"] == ["pass", "pass", "**FAIL**", "pass |"]  # here's bar passes the row
    assert lines["3x1x1-float16-NT"] == ["pass", "pass", "**FAIL**", "**FAIL** |"]
    assert "| 1.050 (1.050 to 1.050) |" in next(ln for ln in text.splitlines() if ln.startswith("| 2x1x1"))


def test_resume_keeps_the_earlier_rows_and_max_seconds_bounds_the_run(smoke, tmp_path):
    _, out = smoke
    earlier = {**out, "rows": [{**r, "kept": True} for r in out["rows"][:2]]}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    again = tmp_path / "again.md"
    op_served.main([str(again), "--smoke", "--rounds", "1", "--resume", str(tmp_path / "earlier.json")])
    rows = json.loads(again.with_suffix(".json").read_text())["rows"]
    assert [r.get("kept", False) for r in rows] == [True, True, False]  # only the shape it lacked was timed
    assert "continuing earlier.json, 2 shapes" in again.read_text()
    op_served.main([str(tmp_path / "only.md"), "--smoke", "--rounds", "1", "--only", "4x48x32,8x40x32"])
    assert [r["shape"] for r in json.loads((tmp_path / "only.json").read_text())["rows"]] == [
        "4x48x32-float16-NT", "8x40x32-float16-NT"]
    op_served.main([str(tmp_path / "none.md"), "--smoke", "--max-seconds", "0"])
    assert json.loads((tmp_path / "none.json").read_text())["rows"] == []


@pytest.mark.parametrize("args, says", [(["--winners", "missing.json"], "winners file missing.json does not exist"),
                                        ([], "--winners is required"),
                                        (["--smoke", "--shapes", "0"], "--shapes and --rounds"),
                                        (["--smoke", "--nosuch"], "unrecognized arguments"),
                                        (["--smoke", "--only", "9x9x9"], "--only 9x9x9 names no shape")])
def test_a_user_error_is_one_line_and_exit_2(args, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        op_served.main(["out.md", *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and says in err and err.count("\n") == 1


def test_a_malformed_winners_row_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "w.json").write_text(json.dumps({"rows": [{"shape": "1x2-float16-NT"}]}))
    with pytest.raises(SystemExit) as e:
        op_served.main([str(tmp_path / "out.md"), "--smoke", "--winners", str(tmp_path / "w.json")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: winners file") and "malformed row" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("mode, pattern", [("chain", "chain"), (None, "layer")])
def test_the_graph_path_times_the_call_pattern_of_the_mode_the_winner_was_searched_in(mode, pattern, monkeypatch):
    seen = []
    path = {"ratio": 1.0, "ratio_q1": 1.0, "ratio_q3": 1.0}
    monkeypatch.setattr(op_served, "eager_figures", lambda *a: dict(path))
    # (x, w, rounds, calls, call pattern, ours)
    monkeypatch.setattr(op_served, "graph_figures", lambda *a: seen.append(a[4]) or dict(path))
    monkeypatch.setattr(op_served, "route", lambda *a: {"served_eager": "torch", "served_graph": "torch"})
    row = {"shape": "16x64x32-float16-NT", "search_mode": mode, "search": 1.0}
    op_served.measure(row, "cpu", "cpu", rounds=1)
    assert seen == [pattern]


def test_an_aa_run_times_f_linear_against_itself_and_says_so(tmp_path, monkeypatch):
    """--aa: the contender timed against F.linear is F.linear itself, in both paths, and the report says the
    figures are the harness's own error."""
    timed = []
    path = {"ratio": 1.0, "ratio_q1": 1.0, "ratio_q3": 1.0, "torch": {"us": 1.0}, "cudal2": {"us": 1.0}, "calls": 1,
            "operand_sets": 1}
    monkeypatch.setattr(op_served, "eager_figures", lambda *a: timed.append(("eager", a[-1])) or dict(path))
    # (x, w, rounds, calls, call pattern, ours, direct)
    monkeypatch.setattr(op_served, "graph_figures", lambda *a: timed.append(("graph", a[5])) or dict(path))
    out = tmp_path / "aa.md"
    op_served.main([str(out), "--smoke", "--aa", "--shapes", "1"])
    assert timed == [("eager", torch.nn.functional.linear), ("graph", torch.nn.functional.linear)]
    assert "A/A run: F.linear is timed against itself" in out.read_text()


def test_the_kernel_timed_as_searched_is_the_one_the_table_names_for_graphs(smoke):
    """ops.tuned_kernel at the graph path's margin, as measure() takes it: the graph path's winner compiled to be
    called as the search calls it, kernel(a, b, out), with b the weight's transpose; none where the table names no
    kernel (Triton's interpreter on the CPU)."""
    from cudal2 import ops

    ops.set_table(op_served.table_of(op_served.smoke_winners()["rows"], op_served.SMOKE_GPU))
    direct_kernel = lambda problem, gpu: ops.tuned_kernel(problem, gpu, ops.GRAPH_MIN_SAVING_US)  # noqa: E731
    kernel = direct_kernel(op_served.problem_of("16x64x32-float16-NT"), op_served.SMOKE_GPU)
    x, w = torch.randn(16, 32, dtype=torch.float16), torch.randn(64, 32, dtype=torch.float16)
    out = x.new_empty(16, 64)
    kernel(x, w.t(), out)
    torch.testing.assert_close(out.float(), x.float() @ w.float().t(), rtol=2e-2, atol=2e-2)
    assert direct_kernel(op_served.problem_of("8x40x32-float16-NT"), op_served.SMOKE_GPU) is None


def test_graph_rounds_go_on_until_the_ratio_median_is_known_to_the_target_error():
    """more_rounds: none where the per-round ratios' median is already known well enough, more in proportion to
    the shortfall (the error falls as 1/sqrt(rounds)), and never past the cap."""
    rng = random.Random(0)
    tight = [1.0 + rng.gauss(0, 0.005) for _ in range(100)]  # a long call: +-0.3% quartiles
    wide = [1.0 + rng.gauss(0, 0.075) for _ in range(100)]  # a 10 us call: +-5%
    assert op_served.more_rounds(tight, 0.003, 800) == 0
    more = op_served.more_rounds(wide, 0.003, 10_000)
    error = op_served.median_error(wide)
    assert 0.008 < error < 0.012 and more == math.ceil(100 * ((error / 0.003) ** 2 - 1))
    assert op_served.more_rounds(wide, 0.003, 800) == 700  # capped
    assert op_served.more_rounds(wide * 8, 0.003, 800) == 0  # at the cap
    assert op_served.more_rounds(wide[:3], 0.003, 800) == 797  # too few to read a spread off


def test_the_median_error_reads_a_normal_spread_off_the_quartiles():
    rng = random.Random(1)
    xs = [rng.gauss(0, 1) for _ in range(10_000)]
    assert op_served.median_error(xs) == pytest.approx(1.2533 / 100, rel=0.05)
    assert op_served.median_error([1.0, 1.0, 1.0]) == float("inf")
