"""benchmarks/transfer.py's smoke path on the CPU: the recorded runner, two validation shapes; with
training data, the leave-one-GPU-out training too. The JSON is shaped as the GPU runs will write it."""

import csv
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import transfer  # noqa: E402

from cudal2.cli import app  # noqa: E402
from cudal2.store.store import Store  # noqa: E402

runner = CliRunner()


def _shape_of(out: dict, count: int) -> None:
    assert set(out) == {"train_gpus", "test_gpu", "budget", "catalogs", "specs_per_catalog", "rows"}
    assert out["catalogs"] == ["base"] and out["specs_per_catalog"] == transfer.SMOKE_SPECS
    assert out["test_gpu"] == "recorded" and out["budget"] == 16 and len(out["rows"]) == count
    for row in out["rows"]:
        assert set(row) == {"shape", "search", "sweep_best", "first_pick"}
        m, n, rest = row["shape"].split("x")
        assert rest.endswith("-NT") and int(m) > 0 and int(n) > 0
        assert all(isinstance(row[k], float) and row[k] > 0 for k in ("search", "sweep_best", "first_pick"))
        assert row["first_pick"] <= row["sweep_best"]  # the first pick is one of the swept specs


def test_the_validation_shapes_are_spread_over_sizes_and_never_training_shapes():
    from cudal2.shapes import shapes

    chosen = transfer.validation_shapes(30)
    flops = [s.m * s.n * s.k for s in chosen]
    assert len(chosen) == 30 and flops == sorted(flops) and flops[-1] / flops[0] > 1e4
    assert {s.label for s in chosen} <= {s.label for s in shapes("serving", "validation")}


def test_the_smoke_run_writes_the_json_the_issue_asks_for(tmp_path):
    assert transfer.main(["--smoke", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("transfer_recorded_*[0-9].json")
    out = json.loads(path.read_text())
    _shape_of(out, 2)
    assert out["train_gpus"] == ["NVIDIA H100 80GB HBM3"]  # the shipped model's
    assert "| shape | search |" in path.with_suffix(".md").read_text()


def test_the_smoke_run_trains_leaving_the_test_gpu_out(tmp_path):
    pytest.importorskip("lightgbm")
    store, rows = tmp_path / "s.db", tmp_path / "other_gpu.csv"
    r = runner.invoke(app, ["sweep", "64x64x64,128x128x128,256x256x64,512x256x128", "--specs", "8", "--runner",
                            "recorded", "--store", str(store)])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["dataset", "export", "--out", str(rows), "--store", str(store)]).exit_code == 0
    with rows.open(newline="") as f:
        table = list(csv.DictReader(f))
    for i, row in enumerate(table):  # measured on another GPU, but a few pairs of the test GPU: left out
        row["gpu"] = "recorded" if i < 3 else "NVIDIA H100 80GB HBM3"
    with rows.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    assert transfer.main(["--smoke", "--train-data", str(rows), "--out", str(tmp_path / "out")]) == 0
    (path,) = (tmp_path / "out").glob("transfer_recorded_*.json")
    out = json.loads(path.read_text())
    _shape_of(out, 2)
    assert out["train_gpus"] == ["NVIDIA H100 80GB HBM3"]
    model = json.loads((tmp_path / "out" / "transfer_model_recorded.json").read_text())
    assert model["info"]["data"]["pairs"] == len(table) - 3


class StepsAllowed:
    """A transfer.Deadline reached after a fixed number of steps (sweep calls and searches), whatever the clock."""

    def __init__(self, steps):
        self.steps, self.reached = steps, False

    def allows(self, kind):
        self.steps -= 1
        self.reached = self.reached or self.steps < 0
        return not self.reached


def _logged_runner(monkeypatch, log):
    from cudal2.tuner.recorded import RecordedRunner

    monkeypatch.setattr(transfer, "smoke_runner", lambda: RecordedRunner(log=log))


def _steps(monkeypatch, steps):
    monkeypatch.setattr(transfer, "Deadline", lambda seconds: StepsAllowed(steps))


def _json(folder: Path) -> dict:
    (path,) = folder.glob("transfer_recorded_*[0-9].json")
    return json.loads(path.read_text())


def test_a_run_cut_short_and_resumed_gives_one_run_s_rows_and_measures_no_pair_twice(tmp_path, monkeypatch):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    _logged_runner(monkeypatch, tmp_path / "whole.log")
    assert transfer.main(["--smoke", "--out", str(whole)]) == 0
    _logged_runner(monkeypatch, tmp_path / "cut.log")
    _steps(monkeypatch, 2)  # two of the first shape's four sweep calls
    assert transfer.main(["--smoke", "--out", str(cut)]) == 0
    (path,) = cut.glob("transfer_recorded_*[0-9].json")
    assert _json(cut)["rows"] == [] and len((tmp_path / "cut.log").read_text().splitlines()) == 7  # 4 + 3 of 13
    for steps in (5, 2):  # the first shape's sweep ends and the second's is cut; then it ends, and one search runs
        _steps(monkeypatch, steps)
        assert transfer.main(["--smoke", "--resume", str(path)]) == 0
    assert "search" not in _json(cut)["rows"][-1] and "sweep_best" in _json(cut)["rows"][-1]
    _steps(monkeypatch, 100)
    assert transfer.main(["--smoke", "--resume", str(path)]) == 0
    assert _json(cut) == _json(whole)
    done, once = (tmp_path / "cut.log").read_text().splitlines(), (tmp_path / "whole.log").read_text().splitlines()
    assert sorted(done) == sorted(once)  # every measurement of one run, none twice
    swept = Store(path.with_suffix(".sweep.db")).kernels()
    assert len(swept) == 26 == len({(r["problem"].key(), r["result"].spec.key()) for r in swept})


def test_max_seconds_ends_the_run_before_the_limit_and_says_how_to_continue(tmp_path, capsys):
    assert transfer.main(["--smoke", "--out", str(tmp_path), "--max-seconds", "0"]) == 0
    out = _json(tmp_path)
    assert out["rows"] == [] and "--max-seconds 0 reached" in capsys.readouterr().out
    (path,) = tmp_path.glob("transfer_recorded_*[0-9].json")
    assert transfer.main(["--smoke", "--resume", str(path)]) == 0
    _shape_of(_json(tmp_path), 2)


def test_the_deadline_starts_a_step_only_while_the_longest_of_its_kind_still_fits():
    now = [0.0]
    deadline = transfer.Deadline(10, clock=lambda: now[0])
    assert deadline.allows("sweep")
    now[0] = 4.0
    assert deadline.allows("sweep")  # a 4 s step so far: 4 + 4 <= 10
    now[0] = 6.5
    assert not deadline.allows("sweep") and deadline.reached  # 6.5 + 4 > 10
    assert not deadline.allows("search")  # once reached, nothing more starts
    assert transfer.Deadline(None).allows("sweep")


def test_parts_share_one_json_through_resume(tmp_path, monkeypatch):
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert transfer.main(["--smoke", "--out", str(whole)]) == 0
    assert transfer.main(["--smoke", "--out", str(split), "--part", "0/2"]) == 0
    first = _json(split)["rows"]
    assert [r["shape"] for r in first] == [_json(whole)["rows"][0]["shape"]]
    (path,) = split.glob("transfer_recorded_*[0-9].json")
    assert transfer.main(["--smoke", "--resume", str(path), "--part", "1/2"]) == 0
    assert _json(split) == _json(whole)


def test_the_sweep_and_the_searches_run_in_separate_calls(tmp_path, monkeypatch):
    whole, apart = tmp_path / "whole", tmp_path / "apart"
    _logged_runner(monkeypatch, tmp_path / "whole.log")
    assert transfer.main(["--smoke", "--out", str(whole)]) == 0
    _logged_runner(monkeypatch, tmp_path / "apart.log")
    assert transfer.main(["--smoke", "--out", str(apart), "--only", "search"]) == 0
    assert all(set(r) == {"shape", "search"} for r in _json(apart)["rows"])
    (path,) = apart.glob("transfer_recorded_*[0-9].json")
    assert transfer.main(["--smoke", "--resume", str(path), "--only", "sweep"]) == 0
    assert _json(apart) == _json(whole)
    assert sorted((tmp_path / "apart.log").read_text().splitlines()) == sorted(
        (tmp_path / "whole.log").read_text().splitlines())


def test_catalogs_choose_the_swept_specs_and_the_json_names_them(tmp_path):
    from cudal2.proposers.catalog import catalog

    narrow = transfer.catalog_specs(("cute_dsl",), "sm_90a", ["narrow"], 5)
    assert len(narrow) == 5 and {s.key() for s in narrow} <= {s.key() for s in catalog("cute_dsl", "sm_90a", "narrow")}
    both = transfer.catalog_specs(("cute_dsl", "triton"), "sm_90a", ["base", "narrow"], 5)
    assert len(both) == 15  # triton has no narrow catalog
    assert transfer.main(["--smoke", "--out", str(tmp_path), "--catalogs", "base", "--specs", "3"]) == 0
    out = _json(tmp_path)
    assert out["catalogs"] == ["base"] and out["specs_per_catalog"] == 3
    assert "3 of each of the catalogs base" in next(tmp_path.glob("*.md")).read_text()


@pytest.mark.parametrize("argv, says", [
    (["--part", "2/2"], "--part 2/2: give i/n"),
    (["--catalogs", "wide"], "no catalog wide"),
    (["--resume", "missing.json"], "no such file"),
])
def test_bad_options_are_one_line_errors(tmp_path, capsys, argv, says):
    assert transfer.main(["--smoke", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and len(err.strip().splitlines()) == 1


def test_a_resumed_call_keeps_the_earlier_sweep_s_catalogs_and_a_second_fresh_run_is_refused(tmp_path, capsys):
    assert transfer.main(["--smoke", "--out", str(tmp_path), "--only", "search"]) == 0
    (path,) = tmp_path.glob("transfer_recorded_*[0-9].json")
    assert transfer.main(["--smoke", "--resume", str(path), "--specs", "3"]) == 2
    assert "specs_per_catalog 12" in capsys.readouterr().err
    assert transfer.main(["--smoke", "--out", str(tmp_path)]) == 2
    assert f"continue it with --resume {path}" in capsys.readouterr().err


def test_the_calls_docs_learning_md_gives_for_a_gpu_budget_are_valid_and_resume_one_run():
    text = (Path(__file__).resolve().parent.parent / "docs" / "learning.md").read_text()
    calls = [line.split("#")[0].split()[2:] for line in text.splitlines() if line.startswith("python $T")]
    assert len(calls) == 3
    parsed = [transfer.parser().parse_args(c) for c in calls]
    assert parsed[0].resume is None and parsed[0].train_data and parsed[0].specs
    assert all(a.resume is not None and a.max_seconds <= 540 for a in parsed[1:])
    assert {a.only for a in parsed} == set(transfer.PARTS)
