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

runner = CliRunner()


def _shape_of(out: dict, count: int) -> None:
    assert set(out) == {"train_gpus", "test_gpu", "budget", "rows"}
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
    (path,) = tmp_path.glob("transfer_recorded_*.json")
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
