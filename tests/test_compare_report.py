"""The report of `cudal2 compare`: best known, shares reached, wins shape by shape."""

import pytest

from cudal2.tuner.compare import Arm, best_known, markdown, summary, wins


def arms():
    return [Arm("learned", 16, "a", 1.10), Arm("rules", 16, "a", 1.00), Arm("learned", 16, "b", 0.90),
            Arm("rules", 16, "b", 0.895), Arm("learned", 1, "a", 1.05), Arm("learned", 1, "b", None)]


def test_best_known_takes_the_best_arm_or_an_outside_figure():
    assert best_known(arms()) == {"a": 1.10, "b": 0.90}
    assert best_known(arms(), {"b": 1.2, "c": 2.0}) == {"a": 1.10, "b": 1.2}  # c: no arm ran it


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



def test_the_markdown_says_whose_kernel_won_where_several_backends_ran():
    from cudal2.tuner.compare import backend_wins

    several = [Arm("rules", 16, "a", 1.10, "cute_dsl"), Arm("rules", 16, "b", 0.95, "triton"),
               Arm("rules", 16, "c", 1.02, "cute_dsl"), Arm("rules", 16, "d", None)]
    assert backend_wins(several) == {("rules", 16): {"cute_dsl": 2, "triton": 1}}
    text = markdown(several, best_known(several), title="t", command="c", environment="e")
    assert "| rules | 16 | 2 | 1 |" in text and "| a | 1.100 | 1.100 (cute_dsl) |" in text
    assert "| d | - | - |" in text
    # one backend: no such table, no backend in the cells
    assert "Whose kernel" not in markdown(arms(), best_known(arms()), title="t", command="c", environment="e")

def test_compare_takes_a_sweeps_best_as_known(tmp_path):
    import csv
    import gzip
    from pathlib import Path

    from typer.testing import CliRunner

    from cudal2.cli import app

    sample = Path(__file__).parent / "data" / "sweep_h100_sample.csv.gz"
    row = next(r for r in csv.DictReader(gzip.open(sample, "rt")) if r["status"] == "ok")
    row.update(m="256", n="512", k="128", layout="NN", **{"kernel_ms.offline": "0.001", "torch_ms.offline": "0.005"})
    swept = tmp_path / "swept.csv"
    with swept.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    out = tmp_path / "c.png"
    r = CliRunner().invoke(app, ["compare", "256x512x128", "--proposers", "random", "--budget", "2", "--runner",
                                 "recorded", "--out", str(out), "--store-dir", str(tmp_path / "s"),
                                 "--best-known", str(swept)])
    assert r.exit_code == 0, r.output
    report = out.with_suffix(".md").read_text()
    assert "| 256x512x128-float16-NN | 5.000 |" in report  # the sweep's 5x is the best known
    assert "| random | 2 | 1 |" in report and "| 0% |" in report
    bad = tmp_path / "bad.csv"
    bad.write_text("status,m\nok,notanumber\n")
    r = CliRunner().invoke(app, ["compare", "256x512x128", "--runner", "recorded", "--best-known", str(bad),
                                 "--out", str(tmp_path / "never.png")])
    assert r.exit_code == 2 and "--best-known" in r.output and "no measured pair" in r.output
    assert not (tmp_path / "never.png").exists()  # refused before any search


def test_compare_takes_shapes_with_their_layouts_a_list_and_a_file(tmp_path):
    from cudal2.cli.compare import _compare_problems

    listed = _compare_problems(["7x16384x3072-NT,64x256x1024"], "float16", "NN", None)
    assert [p.label() for p in listed] == ["7x16384x3072-float16-NT", "64x256x1024-float16-NN"]
    f = tmp_path / "shapes.txt"
    f.write_text("# validation\n512x2048x12288-NN\n1x16384x3072-NT\n")
    assert [p.layout for p in _compare_problems([str(f), "4096x4096x4096"], "float16", "TN", 1)] == ["NN", "NT", "TN"]
    assert len(_compare_problems(["serving:validation"], "float16", "NN", 3)) == 3


def test_the_plot_shows_a_budget_1_arm_and_says_when_its_numbers_are_synthetic(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import cudal2.cli.compare as compare_cli
    from cudal2.cli import app

    figures = []
    made = compare_cli.compare_figure
    monkeypatch.setattr(compare_cli, "compare_figure", lambda *a, **k: figures.append(made(*a, **k)) or figures[-1])
    r = CliRunner().invoke(app, ["compare", "256x512x128", "--proposers", "rules", "--budget", "1,3", "--runner",
                                 "recorded", "--out", str(tmp_path / "c.png"), "--store-dir", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    fig = figures[-1]  # the one written last holds every arm
    assert "synthetic" in fig._suptitle.get_text() and "recorded runner" in fig._suptitle.get_text()
    evaluations_axes = fig.axes[0]
    assert [t.get_text() for t in evaluations_axes.get_legend().get_texts()] == ["rules b1", "rules b3"]
    lines = {line.get_label(): line for line in evaluations_axes.get_lines()}
    one = lines["rules b1"]
    assert len(one.get_xdata()) == 1 and one.get_marker() not in (None, "", "None", " ")  # a lone point, drawn
