"""The cost model, its training and the learned proposer, on CPU. The data is a slice of a real
sweep (10 shapes x 100 catalog specs, measured on an H100 on 2026-11-25: tests/data)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cudal2.ir import GemmProblem, KernelSpec, check_compatible
from cudal2.ir import DeviceProfile
from cudal2.learn import ModelError, TreeModel, feature_names, fit
from cudal2.proposers import bandit
from cudal2.proposers.features import features
from cudal2.learn.samples import from_csv
from cudal2.learn.validate import by_shape, replay, top1_ratios
from cudal2.bench.results import DEFAULT_MODE

DATA = Path(__file__).parent / "data" / "sweep_h100_sample.csv.gz"
H100 = DeviceProfile.of_arch("sm_90a")
lgb = pytest.importorskip("lightgbm")


@pytest.fixture(scope="module")
def samples():
    return list(from_csv(DATA))


@pytest.fixture(scope="module")
def split(samples):
    groups = sorted(by_shape(samples))
    held = set(groups[::3])  # every third shape held back
    return [s for s in samples if s.group not in held], [s for s in samples if s.group in held]


@pytest.fixture(scope="module")
def model(split):
    return fit(split[0], H100, seed=0, rounds=120, params={"num_leaves": 15})


def test_the_sample_is_real_measurements(samples):
    assert len(by_shape(samples)) == 10 and len(samples) > 900
    assert all(s.gpu.startswith("NVIDIA H100") and math.isfinite(s.log_speedup) for s in samples)


def test_features_are_one_row_per_pair_in_name_order():
    p = GemmProblem(m=4096, n=4096, k=4096)
    row = features(p, KernelSpec(block_m=128, block_n=256, num_warps=8), H100)
    names = feature_names()
    assert len(row) == len(names) == len(set(names))
    got = dict(zip(names, row))
    assert got["spec.block_n"] == 256 and got["shape.log_m"] == 12 and got["device.sm_count"] == 132
    assert got["fit.tiles_m"] == 32 and got["fit.tiles_n"] == 16 and got["fit.pad_waste"] == 0
    odd = dict(zip(names, features(GemmProblem(m=100, n=4096, k=4096), KernelSpec(block_m=128), H100)))
    assert odd["fit.pad_waste"] == pytest.approx(1 - 100 / 128) and odd["shape.m_mod16"] == 0


def test_numpy_scoring_is_lightgbms_own(split):
    train, held = split
    from cudal2.proposers.features import matrix

    x = np.vstack([matrix(s.problem, [s.spec], H100) for s in held[:300]])
    y = np.array([s.log_speedup for s in train])
    xt = np.vstack([matrix(s.problem, [s.spec], H100) for s in train])
    booster = lgb.train({"objective": "regression", "verbose": -1, "num_leaves": 7, "deterministic": True,
                         "num_threads": 1, "seed": 0}, lgb.Dataset(xt, y), num_boost_round=40)
    from cudal2.proposers.cost_model import _from_lightgbm

    ours = _from_lightgbm(booster.dump_model(), H100)
    np.testing.assert_allclose(ours.predict_rows(x), booster.predict(x), rtol=1e-9, atol=1e-9)
    # One shape's candidates hold one value in each of its shape's columns, and a single row in all
    # of them: the splits on those are taken before the walk, and must land where LightGBM's do.
    one = matrix(held[0].problem, [s.spec for s in train[:400]], H100)
    np.testing.assert_allclose(ours.predict_rows(one), booster.predict(one), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours.predict_rows(one[:1]), booster.predict(one[:1]), rtol=1e-9, atol=1e-9)
    assert ours.leaves(one[:0]).shape == (0, ours.roots.size)


def test_training_is_reproducible_and_a_file_round_trips(split, model, tmp_path):
    again = fit(split[0], H100, seed=0, rounds=120, params={"num_leaves": 15})
    assert json.dumps(again.to_json()["nodes"]) == json.dumps(model.to_json()["nodes"])
    model.save(tmp_path / "m.json")
    loaded = TreeModel.load(tmp_path / "m.json")
    p, specs = split[1][0].problem, [s.spec for s in split[1][:50]]
    np.testing.assert_allclose(loaded.predict(p, specs), model.predict(p, specs), atol=1e-5)
    assert loaded.info["data"]["pairs"] == len(split[0]) and loaded.info["seed"] == 0


def test_new_measurements_change_the_model_without_code_changes(split, model):
    more = fit(split[0] + split[1][:200], H100, seed=0, rounds=120, params={"num_leaves": 15})
    assert more.info["data"]["pairs"] == model.info["data"]["pairs"] + 200
    assert json.dumps(more.to_json()["nodes"]) != json.dumps(model.to_json()["nodes"])


def test_it_ranks_held_back_shapes_better_than_chance(split, model):
    held = split[1]
    ratios = top1_ratios(model, held)
    chance = {}
    for label, group in by_shape(held).items():
        y = np.array([s.log_speedup for s in group])
        chance[label] = float(np.mean(np.exp(y - y.max())))  # a spec picked at random, on average
    assert np.mean(np.log(list(ratios.values()))) > np.mean(np.log(list(chance.values())))
    for label, group in by_shape(held).items():  # and its order agrees with the measured one
        pred = model.predict(group[0].problem, [s.spec for s in group])
        y = np.array([s.log_speedup for s in group])
        assert np.corrcoef(np.argsort(np.argsort(pred)), np.argsort(np.argsort(y)))[0, 1] > 0.3, label


def test_a_replayed_search_never_loses_what_it_found_and_beats_its_first_pick(split, model):
    for group in by_shape(split[1]).values():
        curve = replay(model, group, 16, prior_sd=0.3)
        assert len(curve) == 16 and all(b >= a for a, b in zip(curve, curve[1:])) and curve[-1] <= 1.0


def test_the_bandit_moves_towards_what_was_measured_fast():
    # two clusters of candidates the model cannot tell apart (same leaves within a cluster)
    leaves = np.array([[0, 0]] * 5 + [[1, 1]] * 5)
    mu = np.zeros(10)
    picks = bandit.choose(mu, leaves, measured=[0, 5], y=[0.0, 0.5], n=3, prior_sd=0.3, beta=0.1)
    assert picks[0] in range(6, 10)  # the cluster that measured faster
    assert set(picks).isdisjoint({0, 5})
    assert bandit.choose(mu, leaves, [], [], 3, prior_sd=0.3, exclude=range(9)) == [9]


def test_corrupt_or_foreign_model_files_are_one_clear_error(tmp_path, model):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ModelError, match="not JSON"):
        TreeModel.load(bad)
    d = model.to_json()
    d["feature_version"] = -1
    bad.write_text(json.dumps(d))
    with pytest.raises(ModelError, match="other features"):
        TreeModel.load(bad)
    d = model.to_json()
    d["nodes"]["left"] = d["nodes"]["left"][:-1]
    bad.write_text(json.dumps(d))
    with pytest.raises(ModelError, match="corrupt"):
        TreeModel.load(bad)
    with pytest.raises(ModelError, match="cannot read"):
        TreeModel.load(tmp_path / "missing.json")


def test_learned_proposals_are_valid_distinct_and_learn_from_history(model, tmp_path):
    from cudal2.bench.results import CandidateResult, Timing
    from cudal2.codegen import get_backend
    from cudal2.proposers import get_proposer

    model.save(tmp_path / "m.json")
    prop = get_proposer("learned", backends=("triton",), arch="sm_90a", model=tmp_path / "m.json",
                        beyond_catalog=False)
    problem = GemmProblem(m=300, n=4096, k=1000, layout="NT")
    first = prop.propose(problem, [], 6)
    assert len(first) == 6 and len({p.spec.key() for p in first}) == 6
    for p in first:
        check_compatible(problem, p.spec)
        assert get_backend("triton").supports(problem, p.spec) and p.source == "learned"
    assert first[0].spec == prop.ranked(problem, 1)[0][0]
    # measured as the search measures them (static kernels): not proposed again
    history = [CandidateResult(spec=p.spec.replace(shape_specialization="auto"), status="ok",
                               timing={DEFAULT_MODE: Timing(kernel_ms=0.1 * (i + 1), call_ms=0.1, groups=1)})
               for i, p in enumerate(first)]
    later = prop.propose(problem, history, 6)
    assert {p.spec.key() for p in later}.isdisjoint({p.spec.key() for p in first})
    assert "after 6 measured" in later[0].reasoning


def test_the_rules_fill_half_a_batch_beyond_the_catalog(model, tmp_path):
    from cudal2.proposers import get_proposer

    model.save(tmp_path / "m.json")
    prop = get_proposer("learned", backends=("triton",), arch="sm_90a", model=tmp_path / "m.json")
    problem = GemmProblem(m=128, n=128, k=8192)
    assert [p.source for p in prop.propose(problem, [], 1)] == ["learned"]  # the first pick is the model's
    batch = prop.propose(problem, [], 6)
    assert [p.source for p in batch].count("rules") == 3 and len({p.spec.key() for p in batch}) == 6
    assert batch[0].spec == prop.ranked(problem, 1)[0][0]


def test_learned_split_k_runs_the_reduction_the_rules_rank_first_and_counts_as_its_catalog_spec(model, tmp_path):
    from cudal2.bench.results import CandidateResult, Timing
    from cudal2.proposers import get_proposer
    from cudal2.proposers.rules import split_k_reduction_first

    model.save(tmp_path / "m.json")
    problem = GemmProblem(m=128, n=128, k=8192, layout="NT")
    for arch in ("sm_90a", "sm_80"):
        prop = get_proposer("learned", backends=("triton",), arch=arch, model=tmp_path / "m.json", beyond_catalog=False)
        first = prop.propose(problem, [], 6)
        split = [p.spec for p in first if p.spec.decomposition == "split_k"]
        assert split, [p.spec.summary() for p in first]
        assert {s.split_k_reduction for s in split} == {split_k_reduction_first("triton", arch)}
        assert split_k_reduction_first("triton", arch) == ("serial" if arch == "sm_90a" else "workspace")
        # the twins measured: the model's catalog specs (workspace) count as measured, never proposed again
        history = [CandidateResult(spec=p.spec, status="ok",
                                   timing={DEFAULT_MODE: Timing(kernel_ms=0.1 * (i + 1), call_ms=0.1, groups=1)})
                   for i, p in enumerate(first)]
        later = prop.propose(problem, history, 6)
        assert "after 6 measured" in later[0].reasoning
        assert {p.spec.key() for p in later}.isdisjoint({p.spec.key() for p in first})
    # a problem whose output has more tiles than a serial workspace's counters keeps the catalog's reduction
    prop = get_proposer("learned", backends=("triton",), arch="sm_90a", model=tmp_path / "m.json", beyond_catalog=False)
    catalog_spec = next(s for s in prop.candidates(problem)[0] if s.decomposition == "split_k")
    wide = GemmProblem(m=16384, n=16384, k=8192, layout="NT")
    assert prop._reduced_first(wide, catalog_spec.replace(block_m=16, block_n=16)).split_k_reduction == "workspace"
    assert prop._reduced_first(problem, catalog_spec).split_k_reduction == "serial"


def test_the_search_asks_an_adaptive_proposer_after_every_batch(model, tmp_path):
    from cudal2.tuner.loop import run_search
    from cudal2.proposers import get_proposer
    from cudal2.tuner.recorded import RecordedRunner
    from cudal2.store.store import Store

    model.save(tmp_path / "m.json")
    prop = get_proposer("learned", backends=("triton",), arch="sm_90a", model=tmp_path / "m.json",
                        beyond_catalog=False)
    calls = []
    real = prop.propose
    prop.propose = lambda problem, history, n: (calls.append((len(history), n)), real(problem, history, n))[1]
    res = run_search(GemmProblem(m=256, n=1024, k=512), backends=("triton",), arch="sm_90a", proposer=prop,
                     runner=RecordedRunner(), store=Store(tmp_path / "s.db"), budget=12, batch_size=3, progress=False)
    assert calls == [(0, 3), (3, 3), (6, 3)]  # three quarters of the budget, a batch at a time
    assert res.proposals == {"learned": 9, "optuna": 3}


@pytest.mark.parametrize("depth, expected", [(1, [(0, 3, 0), (0, 3, 3), (3, 3, 3)]),
                                             (2, [(0, 3, 0), (0, 3, 3), (0, 3, 6)])])
def test_look_ahead_asks_the_adaptive_proposer_with_the_batches_in_flight_pending(model, tmp_path, depth, expected):
    """Asked ahead, the next batches are still the proposer's while its share lasts (not the
    sampler's), and the proposer is told which specs are under measurement, so it proposes new ones."""
    from cudal2.tuner.loop import run_search
    from cudal2.proposers import get_proposer
    from cudal2.tuner.recorded import RecordedRunner
    from cudal2.store.store import Store

    model.save(tmp_path / "m.json")
    prop = get_proposer("learned", backends=("triton",), arch="sm_90a", model=tmp_path / "m.json",
                        beyond_catalog=False)
    calls = []
    real = prop.propose

    def spy(problem, history, n, pending=()):
        calls.append((len(history), n, len(pending)))
        return real(problem, history, n, pending=pending)

    prop.propose = spy
    res = run_search(GemmProblem(m=256, n=1024, k=512), backends=("triton",), arch="sm_90a", proposer=prop,
                     runner=RecordedRunner(), store=Store(tmp_path / "s.db"), budget=12, batch_size=3,
                     progress=False, lookahead=depth)
    assert calls == expected  # (measured, asked for, pending): the second and third batches asked ahead
    assert res.proposals == {"learned": 9, "optuna": 3}


def test_a_proposer_without_the_pending_keyword_is_asked_for_more_and_its_repeats_dropped():
    from cudal2.proposers.proposal import Proposal, propose_excluding, takes_pending

    specs = [KernelSpec(backend="triton", block_m=m) for m in (16, 32, 64, 128)]

    class Old:
        name = "old"

        def propose(self, problem, history, n):
            return [Proposal(spec=s) for s in specs[:n]]

    assert not takes_pending(Old())
    got = propose_excluding(Old(), GemmProblem(m=256, n=256, k=256), [], 2, pending=specs[:1])
    assert [p.spec for p in got] == specs[1:3]


def test_the_shipped_model_loads_and_says_where_its_data_came_from():
    from cudal2.proposers.model_files import shipped_model_path

    m = TreeModel.load(shipped_model_path("sm_90a"))
    data = m.info["data"]
    assert data["pairs"] > 1000 and data["shapes"] >= 20 and "H100" in next(iter(data["gpus"]))
    assert m.info["residual_sd"] > 0 and "validation" in m.info and shipped_model_path("sm_90a").stat().st_size < 5e6


def test_auto_is_learned_where_a_model_exists_and_rules_elsewhere(monkeypatch, tmp_path, model):
    from cudal2.proposers import default_proposer, get_proposer

    monkeypatch.delenv("CUDAL2_COST_MODEL", raising=False)
    assert default_proposer("sm_90a") == "learned" and default_proposer("sm_80") == "rules"
    assert get_proposer("auto", arch="sm_80").name == "rules"
    model.save(tmp_path / "m.json")
    monkeypatch.setenv("CUDAL2_COST_MODEL", str(tmp_path / "m.json"))
    assert default_proposer("sm_80") == "learned"


def test_a_backend_the_model_never_saw_gets_the_rules_proposals(model, tmp_path):
    from cudal2.proposers import get_proposer

    model.save(tmp_path / "m.json")  # trained on Triton measurements alone
    problem = GemmProblem(m=4096, n=4096, k=4096)
    both = get_proposer("learned", backends=("triton", "cute_dsl"), arch="sm_90a", model=tmp_path / "m.json",
                        beyond_catalog=False).propose(problem, [], 6)
    assert [(p.source, p.spec.backend) for p in both] == [("learned", "triton")] * 3 + [("rules", "cute_dsl")] * 3
    alone = get_proposer("learned", backends=("cute_dsl",), arch="sm_90a", model=tmp_path / "m.json").propose(
        problem, [], 2)
    assert [p.source for p in alone] == ["rules", "rules"]


def test_the_proposer_ranks_the_catalogs_its_model_was_trained_on(model, split):
    """A model's provenance names the catalogs of its pairs; the proposer ranks those alone, so a
    catalog enters the candidates once a model has learned from its measurements."""
    import copy

    from cudal2.proposers.sample import catalog_pairs
    from cudal2.proposers.learned import LearnedProposer, trained_catalogs

    assert catalog_pairs(split[0]) == {"base": len(split[0])} == model.info["data"]["catalogs"]
    problem = GemmProblem(m=128, n=128, k=8192)
    narrow = lambda m: [s for s in LearnedProposer(("cute_dsl",), "sm_90a", model=m).candidates(problem)[0]
                        if s.block_n < 64]  # noqa: E731
    as_if = copy.deepcopy(model)  # plumbing only: a model said to have learned cute_dsl on each catalog
    as_if.info["data"] = {"backends": {"cute_dsl": 2}, "catalogs": {"base": 1}}
    assert trained_catalogs(as_if) == ("base",) and narrow(as_if) == []
    as_if.info["data"]["catalogs"]["narrow"] = 1
    assert len(narrow(as_if)) > 100
    as_if.info["data"]["catalogs"]["deep"] = 1  # shares specs with base: each is ranked once
    keys = [s.key() for s in LearnedProposer(("cute_dsl",), "sm_90a", model=as_if).candidates(problem)[0]]
    assert len(keys) == len(set(keys))
    del as_if.info["data"]["catalogs"]  # a model trained before provenance named them: the base one
    assert trained_catalogs(as_if) == ("base",)


def test_the_shipped_model_ranks_both_hopper_backends():
    from cudal2.proposers.learned import LearnedProposer, load_model, trained_backends, trained_catalogs

    assert trained_backends(load_model(arch="sm_90a")) >= {"triton", "cute_dsl"}
    assert trained_catalogs(load_model(arch="sm_90a")) == ("base", "narrow")  # it was trained on both sweeps
    assert LearnedProposer(backends=("triton", "cute_dsl"), arch="sm_90a").charted == ("triton", "cute_dsl")


def test_the_trainer_learns_from_each_update(split):
    from cudal2.proposers.cost_model import Trainer

    train, held = split
    t = Trainer(H100)
    problem, specs = held[0].problem, [s.spec for s in held[:20]]
    assert not t.predict(problem, specs).any()  # nothing learned yet: no preference
    t.update(train[:400])
    first = t.predict(problem, specs)
    t.update(train[400:])
    assert len(t.samples) == len(train) and not np.allclose(first, t.predict(problem, specs))
