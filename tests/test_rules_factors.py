"""The rules' fitted factors as data (cudal2/data/rules/factors.csv): each with its source, read by the
model, the most specific row winning, and a damaged file refused in one line."""

import csv

import pytest

from cudal2 import GemmProblem
from cudal2.proposers import factors as factors_mod
from cudal2.proposers import get_proposer


@pytest.fixture
def factor_file(tmp_path, monkeypatch):
    """A copy of the shipped file the test may change; the caches are cleared around it."""
    path = tmp_path / "factors.csv"
    path.write_text(factors_mod.FACTORS.read_text())
    monkeypatch.setattr(factors_mod, "FACTORS", path)
    factors_mod._rows.cache_clear(), factors_mod.factors.cache_clear()
    yield path
    factors_mod._rows.cache_clear(), factors_mod.factors.cache_clear()


def test_every_shipped_factor_names_where_it_comes_from():
    with open(factors_mod.FACTORS, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["source"].strip() for r in rows)
    assert {r["arch"] for r in rows} <= {"*", "sm_80", "sm_90", "sm_90a"}
    assert {r["backend"] for r in rows} <= {"*", "triton", "cute_dsl", "cuda_cpp"}


def test_the_most_specific_row_wins():
    dsl, triton = factors_mod.factors("sm_90a", "cute_dsl"), factors_mod.factors("sm_90a", "triton")
    assert dsl["tall_tile_factor"] == 1.11 and "tall_tile_factor" not in triton
    assert dsl["cluster_gain"] == triton["cluster_gain"] == 0.96
    assert "cluster_gain" not in factors_mod.factors("sm_80", "cuda_cpp")  # measured on an H100 only
    assert factors_mod.factor("sm_80", "triton", "launch_us") == 3.0


def _model_us(arch="sm_90a", backend="cute_dsl"):
    p = GemmProblem(m=4096, n=4096, k=4096, layout="NT")
    prop = get_proposer("rules", backends=(backend,), arch=arch)
    spec = prop.propose(p, [], 1)[0].spec
    return prop.model_time_us(p, spec.to_dict())


def test_the_model_reads_its_constants_from_the_file(factor_file):
    before = _model_us()
    text = factor_file.read_text().replace("*,*,launch_us,3.0,", "*,*,launch_us,103.0,")
    factor_file.write_text(text)
    factors_mod._rows.cache_clear(), factors_mod.factors.cache_clear()
    assert _model_us() > before + 50  # the launch cost is added to every kernel's time (times its factor)


@pytest.mark.parametrize("damage, says", [
    (lambda t: t.replace("arch,backend,name,value,source", "arch,backend,name,value"), "columns"),
    (lambda t: t.replace("*,*,tma_step,0.95,", "*,*,tma_step,fast,"), "is not a number"),
    (lambda t: t + "*,*,tma_step,0.9,again\n", "given twice"),
    (lambda t: t + "sm_90a,triton,new_factor,1.0, \n", "has no source"),
])
def test_a_damaged_factor_file_is_refused_in_one_line(factor_file, damage, says):
    factor_file.write_text(damage(factor_file.read_text()))
    with pytest.raises(ValueError, match=says) as e:
        factors_mod.factors("sm_90a", "triton")
    assert "\n" not in str(e.value)


def test_a_missing_factor_names_the_file():
    with pytest.raises(KeyError, match="factors.csv has no row for 'no_such'"):
        factors_mod.factor("sm_90a", "triton", "no_such")
