"""Every loaded artefact is validated: a cost model's trees (sizes, indices in range, no node reached
twice, finite values), a training set's times (finite, positive; the rows left out are named) and a
store's file (a damaged page is found before a search writes into it). Each refusal is one line
naming the file and the fix."""

from __future__ import annotations

import csv
import json
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.proposers.cost_model import ModelError, TreeModel
from cudal2.bench.results import DEFAULT_MODE

SHIPPED = Path(__file__).resolve().parent.parent / "cudal2" / "data" / "models" / "sm_90a.json"
runner = CliRunner()


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads(SHIPPED.read_text())


def _inner_node(d: dict) -> int:
    return next(i for i, f in enumerate(d["nodes"]["feature"]) if f >= 0)


def _leaf(d: dict) -> int:
    return next(i for i, f in enumerate(d["nodes"]["feature"]) if f < 0)


def _broken(d: dict, how: str) -> dict:
    d = json.loads(json.dumps(d))
    nodes, inner, leaf = d["nodes"], _inner_node(d), _leaf(d)
    if how == "cycle":
        nodes["left"][inner] = d["roots"][0]  # a child pointing back at its tree's root
    elif how == "nan leaf":
        nodes["value"][leaf] = float("nan")
    elif how == "inf threshold":
        nodes["threshold"][inner] = float("inf")
    elif how == "nan base":
        d["base"] = float("nan")
    elif how == "negative feature":
        nodes["feature"][inner] = -5
    elif how == "feature 1000":
        nodes["feature"][inner] = 1000
    elif how == "negative child":
        nodes["right"][inner] = -3
    elif how == "child past the end":
        nodes["right"][inner] = len(nodes["feature"]) + 7
    return d


CASES = ["cycle", "nan leaf", "inf threshold", "nan base", "negative feature", "feature 1000", "negative child",
         "child past the end"]


def _alarm(seconds: int):
    def timeout(*_):
        raise TimeoutError("hung")

    signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)


@pytest.mark.parametrize("how", CASES)
def test_a_malformed_cost_model_is_refused_on_load_in_one_line(shipped, tmp_path, how):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(_broken(shipped, how)))
    _alarm(20)  # a cycle once hung the walk
    try:
        with pytest.raises(ModelError) as e:
            TreeModel.load(path)
    finally:
        signal.alarm(0)
    assert str(path) in str(e.value) and "cudal2 train" in str(e.value) and "\n" not in str(e.value)


def test_the_shipped_model_still_loads(shipped):
    model = TreeModel.from_json(shipped)
    assert model.feature.size == len(shipped["nodes"]["feature"])


@pytest.mark.parametrize("how", ["cycle", "nan leaf"])
def test_a_search_with_a_malformed_model_named_by_the_environment_is_one_error_line(shipped, tmp_path, how,
                                                                                     monkeypatch):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(_broken(shipped, how)))
    monkeypatch.setenv("CUDAL2_COST_MODEL", str(path))
    _alarm(60)
    try:
        r = runner.invoke(app, ["search", "1024x1024x1024", "--proposer", "learned", "--runner", "recorded",
                                "--budget", "2", "--store", str(tmp_path / "s.db")])
    finally:
        signal.alarm(0)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2, r.output
    assert any(str(path) in line and "corrupt" in line for line in lines) and "bug" not in r.output
    assert "nanx" not in r.output


def _export(tmp_path: Path) -> Path:
    """A small export of recorded measurements: a sweep over a few shapes and specs."""
    store = tmp_path / "s.db"
    r = runner.invoke(app, ["sweep", "64x64x64,128x128x128,256x256x64,512x256x128", "--specs", "6", "--runner",
                            "recorded", "--store", str(store)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "pairs.csv"
    r = runner.invoke(app, ["dataset", "export", "--out", str(out), "--store", str(store)])
    assert r.exit_code == 0, r.output
    return out


def _poison(src: Path, dst: Path, every: int | None, value: str = "nan") -> int:
    rows = list(csv.DictReader(src.open()))
    hit = 0
    for i, row in enumerate(rows):
        if row[f"kernel_ms.{DEFAULT_MODE}"] and (every is None or i % every == 0):
            row[f"kernel_ms.{DEFAULT_MODE}"] = value
            hit += 1
    with dst.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return hit


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_training_leaves_out_and_names_rows_whose_times_are_not_finite_positive(tmp_path, value):
    pairs = _export(tmp_path)
    some = tmp_path / "some.csv"
    hit = _poison(pairs, some, every=5, value=value)
    r = runner.invoke(app, ["train", "--data", str(some), "--out", str(tmp_path / "m.json")])
    assert r.exit_code == 0, r.output
    assert f"{hit} row(s) have times that are not finite positive numbers" in r.output
    assert "some.csv, row 2" in r.output and "nan" not in r.output.split("not finite")[1].split("\n", 1)[1]
    model = json.loads((tmp_path / "m.json").read_text())
    assert all(v == v for v in model["nodes"]["value"])  # no NaN leaf written
    every = tmp_path / "all.csv"
    _poison(pairs, every, every=None, value=value)
    r = runner.invoke(app, ["train", "--data", str(every), "--out", str(tmp_path / "m2.json")])
    assert r.exit_code == 2 and "not finite positive" in r.output and not (tmp_path / "m2.json").exists()


def test_a_store_with_a_damaged_page_is_refused_before_anything_is_written(tmp_path):
    store = tmp_path / "s.db"
    r = runner.invoke(app, ["search", "1024x1024x1024", "--runner", "recorded", "--budget", "6", "--store", str(store)])
    assert r.exit_code == 0, r.output
    import sqlite3

    with sqlite3.connect(store) as conn:  # the rows out of the write-ahead log, into the file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(store.read_bytes())
    assert len(data) > 3 * 4096
    data[4096:8192] = bytes((i * 37 + 11) % 256 for i in range(4096))  # random bytes over page 2
    store.write_bytes(bytes(data))
    kept = store.read_bytes()
    for args in (["show"], ["export", "--out", str(tmp_path / "t.json")],
                 ["search", "512x512x512", "--runner", "recorded", "--budget", "2"]):
        r = runner.invoke(app, [*args, "--store", str(store)])
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert r.exit_code == 2, (args, r.output)
        assert len(lines) == 1 and "is corrupt" in lines[0] and ".recover" in lines[0], lines
    assert store.read_bytes() == kept  # nothing written into it


def test_damage_found_after_the_check_is_the_same_error(tmp_path, monkeypatch):
    """A page found damaged by a read after the check passed (or damaged since): the same line."""
    import sqlite3

    from cudal2.store.store import Store, StoreError

    store = tmp_path / "s.db"
    r = runner.invoke(app, ["search", "1024x1024x1024", "--runner", "recorded", "--budget", "6", "--store", str(store)])
    assert r.exit_code == 0, r.output
    with sqlite3.connect(store) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(store.read_bytes())
    data[4096:8192] = bytes((i * 37 + 11) % 256 for i in range(4096))
    store.write_bytes(bytes(data))
    monkeypatch.setattr(Store, "check", lambda self: self)
    with pytest.raises(StoreError, match=f"store {store} is corrupt"):
        Store(store).kernels()
    r = runner.invoke(app, ["show", "--store", str(store)])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "is corrupt" in lines[0], r.output
