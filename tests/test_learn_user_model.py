"""Every measurement teaches: `cudal2 train --store` without --out makes the user's model of the
store's GPU, with its provenance, and the learned proposer uses it on that GPU ($CUDAL2_COST_MODEL
first, the shipped model where the user has none). The GPU is faked: the recorded runner's
synthetic store, and a live device named as its GPU is."""

import csv
import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.ir import DeviceProfile
from cudal2.proposers.model_files import gpu_slug, user_model_path

runner = CliRunner()
pytest.importorskip("lightgbm")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))  # the user's model folder is in it


@pytest.fixture
def store(tmp_path):
    store = tmp_path / "s.db"
    r = runner.invoke(app, ["sweep", "64x64x64,128x128x128,256x256x64,512x256x128", "--specs", "6", "--runner",
                            "recorded", "--store", str(store)])
    assert r.exit_code == 0, r.output
    return store


def _live(monkeypatch, name):
    fake = replace(DeviceProfile.of_part(name, "sm_90a"), name=name)
    monkeypatch.setattr(DeviceProfile, "live", classmethod(lambda cls, arch=None, device=None: fake))


def test_training_on_a_store_without_out_writes_the_users_model_of_its_gpu(store, tmp_path):
    r = runner.invoke(app, ["train", "--store", str(store), "--seed", "3"])
    assert r.exit_code == 0, r.output
    assert "pairs are synthetic" in r.output  # the recorded runner's numbers, not a GPU's
    path = user_model_path("sm_90a", "recorded")
    assert path.is_file() and path.parent.name == "models" and str(path).startswith(str(tmp_path / "cache"))
    info = json.loads(path.read_text())["info"]
    assert info["source"] == {"store": f"sqlite:///{store}"} and info["seed"] == 3 and info["trained"]
    assert info["data"]["gpus"] == {"recorded": 24} and info["data"]["pairs"] == 24
    assert "the learned proposer uses it on recorded" in r.output
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_the_learned_proposer_takes_the_environments_then_the_users_then_the_shipped_model(
        store, tmp_path, monkeypatch):
    from cudal2.ir import GemmProblem
    from cudal2.proposers.learned import LearnedProposer

    monkeypatch.delenv("CUDAL2_COST_MODEL", raising=False)
    assert runner.invoke(app, ["train", "--store", str(store)]).exit_code == 0
    mine = user_model_path("sm_90a", "recorded")

    _live(monkeypatch, "recorded")  # the GPU the store's pairs were measured on
    prop = LearnedProposer(arch="sm_90a")
    assert prop.model_source == f"{mine} (trained on this GPU's measurements)"
    assert str(mine) in repr(prop)
    first = prop.propose(GemmProblem(m=256, n=512, k=256, layout="NT"), [], 2)
    assert str(mine) in first[0].reasoning

    _live(monkeypatch, "NVIDIA H200")  # a GPU the user has no model of: the shipped one
    assert LearnedProposer(arch="sm_90a").model_source.endswith("sm_90a.json (shipped with cudal2)")

    _live(monkeypatch, "recorded")
    other = tmp_path / "other.json"
    other.write_text(mine.read_text())
    monkeypatch.setenv("CUDAL2_COST_MODEL", str(other))  # the environment comes first
    assert LearnedProposer(arch="sm_90a").model_source == f"{other} (named by $CUDAL2_COST_MODEL)"


def test_a_users_model_needs_one_gpu_or_an_out_file(tmp_path, monkeypatch):
    rows = tmp_path / "pairs.csv"
    r = runner.invoke(app, ["sweep", "64x64x64,128x128x128", "--specs", "3", "--runner", "recorded",
                            "--store", str(tmp_path / "s.db")])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["dataset", "export", "--out", str(rows), "--store", str(tmp_path / "s.db")]).exit_code == 0
    with rows.open(newline="") as f:
        table = list(csv.DictReader(f))
    for n, row in enumerate(table):
        row["gpu"] = "GPU X" if n % 2 else row["gpu"]  # half the pairs from another GPU model
    with rows.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    r = runner.invoke(app, ["train", "--data", str(rows)])
    assert r.exit_code == 2 and "2 GPU models" in r.output and "--out FILE" in r.output
    assert "Traceback" not in r.output
