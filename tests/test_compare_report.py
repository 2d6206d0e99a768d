"""The report of `cudal2 compare`: best known, shares reached, wins shape by shape."""

import pytest

from cudal2.search.compare import Arm, best_known, markdown, summary, wins


def arms():
    return [Arm("learned", 16, "a", 1.10), Arm("rules", 16, "a", 1.00), Arm("learned", 16, "b", 0.90),
            Arm("rules", 16, "b", 0.895), Arm("learned", 1, "a", 1.05), Arm("learned", 1, "b", None)]


def test_best_known_takes_the_best_arm_or_an_outside_figure():
    assert best_known(arms()) == {"a": 1.10, "b": 0.90}
    assert best_known(arms(), {"b": 1.2, "c": 2.0}) == {"a": 1.10, "b": 1.2, "c": 2.0}


def test_summary_counts_shares_of_the_best_known_and_a_missing_result_as_nothing():
    rows = {(r["proposer"], r["budget"]): r for r in summary(arms(), best_known(arms()))}
    assert rows[("learned", 16)]["reached"] == 1.0 and rows[("learned", 16)]["geomean_share_of_best"] == pytest.approx(1.0)
    assert rows[("rules", 16)]["reached"] == 0.5  # 1.00 of 1.10 is short of 97 %; 0.895 of 0.90 is not
    # 1.05 of 1.10 is short; a search that found no correct kernel reaches nothing
    assert rows[("learned", 1)]["reached"] == 0.0
    assert rows[("learned", 1)]["geomean_share_of_best"] == pytest.approx(1.05 / 1.10)  # over shapes it ran


def test_a_win_needs_more_than_the_spread():
    table = wins(arms(), 16)
    assert table == {"learned": {"rules": 1}, "rules": {"learned": 0}}  # b: 0.90 against 0.895 is a tie


def test_the_markdown_names_the_command_and_every_arm():
    text = markdown(arms(), best_known(arms()), title="t", command="cudal2 compare x", environment="GPU: test")
    assert "`cudal2 compare x`" in text and "GPU: test" in text
    # budgets in the order the arms ran them: here 16, then 1
    assert "| learned | 1 | 2 |" in text and "learned b16 | learned b1" in text and "| a | 1.100 | 1.100 | 1.050 |" in text
