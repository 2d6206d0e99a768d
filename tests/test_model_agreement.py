"""benchmarks/model_agreement.py reads evaluator tables back into specs and scores the rules model's
ranking against the measured order (CPU only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import model_agreement  # noqa: E402
from cute_dsl_vs_cublas import BASE, CONFIG_SETS  # noqa: E402

from cudal2.ir import GemmProblem, KernelSpec  # noqa: E402
from cudal2.proposers.rules import RulesProposer  # noqa: E402

SHAPE = "512x512x12288"
HEADER = ("| shape | mode | config | status | kernel us | TFLOP/s | rel. error | vs torch |\n"
          "|---|---|---|---|---:|---:|---:|---:|\n")


def _model_times() -> dict[str, float]:
    """Four configurations of one set that the rules model times differently."""
    rules = RulesProposer(backends=("cute_dsl",))
    p = GemmProblem.parse(SHAPE)
    out: dict[str, float] = {}
    for lab, overrides in CONFIG_SETS["deepk_clusters"].items():
        t = rules.model_time_us(p, KernelSpec(**{**BASE, **overrides}).to_dict())
        if all(abs(t - u) > 0.5 for u in out.values()):
            out[lab] = t
    return dict(list(out.items())[:4])


def _table(times: dict[str, float], extra: str = "") -> str:
    rows = [f"| {SHAPE} | offline | baseline torch | ok | 20.0 | 300 | | |"]
    rows += [f"| {SHAPE} | offline | {lab} | ok  | {us:.1f} | 1 | 2e-04 | 1.0 |" for lab, us in times.items()]
    return "# run\n\n" + HEADER + "\n".join(rows) + "\n" + extra


def _score(folder: Path) -> model_agreement.Agreement:
    specs, ambiguous = model_agreement.known_specs()
    rows, _ = model_agreement.read_tables(folder, specs, ambiguous)
    return model_agreement.agreement(rows)


def test_a_table_in_the_models_order_agrees_fully_and_the_reverse_not_at_all(tmp_path):
    model = _model_times()
    assert len(model) == 4
    ranked = sorted(model, key=model.get)
    same = {lab: 10.0 + 2.0 * i for i, lab in enumerate(ranked)}  # measured in the model's order
    (tmp_path / "a.md").write_text(_table(same))
    a = _score(tmp_path)
    assert (a.pairs, a.agreeing, a.groups) == (6, 6, 1) and a.regret_geomean == pytest.approx(1.0)

    reverse = {lab: 10.0 + 2.0 * (len(ranked) - 1 - i) for i, lab in enumerate(ranked)}
    (tmp_path / "a.md").write_text(_table(reverse))
    a = _score(tmp_path)
    assert (a.pairs, a.agreeing) == (6, 0)
    assert a.regret_geomean == pytest.approx(16.0 / 10.0)  # the model's first pick measured slowest
    assert a.worst[0][3] == ranked[0] and a.worst[0][4] == ranked[-1]


def test_close_pairs_baselines_other_modes_failures_and_unknown_labels_are_left_out(tmp_path):
    model = _model_times()
    ranked = sorted(model, key=model.get)
    times = {ranked[0]: 10.0, ranked[1]: 10.1}  # within 3%: not a pair
    extra = (f"| {SHAPE} | sustained | {ranked[2]} | ok  | 1.0 | 1 | 2e-04 | 1.0 |\n"
             f"| {SHAPE} | offline | {ranked[3]} | incorrect | 1.0 | 1 | 2e-04 | 1.0 |\n"
             f"| {SHAPE} | offline | no such label | ok  | 1.0 | 1 | 2e-04 | 1.0 |\n")
    (tmp_path / "b.md").write_text(_table(times, extra))
    specs, ambiguous = model_agreement.known_specs()
    rows, skipped = model_agreement.read_tables(tmp_path, specs, ambiguous)
    assert [r.label for r in rows] == ranked[:2] and skipped == {"no such label"}
    assert model_agreement.agreement(rows).pairs == 0


def test_each_table_is_its_own_group(tmp_path):
    model = _model_times()
    ranked = sorted(model, key=model.get)
    two = {ranked[0]: 10.0, ranked[1]: 12.0}
    (tmp_path / "c.md").write_text(_table(two) + "\n## run 2\n\n" + _table(two))
    assert _score(tmp_path).groups == 2


def test_the_recorded_tables_are_read():
    """The repository's own results: hundreds of measured kernels, and the script's summary runs."""
    a = _score(model_agreement.RESULTS)
    assert a.groups >= 50 and a.pairs >= 1000 and 0.0 <= a.share <= 1.0
    assert model_agreement.main(["--worst", "2"]) == 0


def test_winners_proposed_counts_a_winner_the_rules_offer_and_misses_one_they_do_not(tmp_path):
    import json

    p = GemmProblem.parse("4096x4096x4096")
    first = RulesProposer(backends=("cute_dsl",)).propose(p, n=12)[0].spec
    never = KernelSpec(**{**BASE, "block_m": 128, "block_n": 32, "stages": 4, "cluster_n": 2})  # tiny tile, huge grid
    rows = [{"m": 4096, "n": 4096, "k": 4096, "spec_json": first.to_dict()},
            {"m": 4096, "n": 4096, "k": 2048, "spec_json": never.to_dict()}]
    report = tmp_path / "search.json"
    report.write_text(json.dumps(rows))
    assert model_agreement.winners_proposed(report, proposals=12) == (1, 2, ["4096x4096x2048"])
