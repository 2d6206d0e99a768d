"""The `cudal2` command through typer's CliRunner (CPU only)."""

import json

import pytest
import torch
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.bench.results import DEFAULT_MODE

runner = CliRunner()


@pytest.fixture(autouse=True)
def _store(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_STORE", str(tmp_path / "store.db"))
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))  # the recorded runner's store is in it
    monkeypatch.setenv("COLUMNS", "200")


def _triton_renders() -> bool:
    try:
        import triton  # noqa: F401

        from cudal2 import GemmProblem, KernelSpec, get_backend

        get_backend("triton").render(GemmProblem(m=64, n=64, k=64), KernelSpec(load_path="pointer"))
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_search_without_gpu_says_so_and_offers_dry_run():
    r = runner.invoke(app, ["search", "4096x4096x4096", "--budget", "4"])
    assert r.exit_code == 2
    assert "no CUDA GPU" in r.output and "--dry-run" in r.output


def test_search_dry_run_with_rules_proposer_and_triton_backend():
    if not _triton_renders():
        pytest.skip("the Triton backend cannot render yet")
    r = runner.invoke(app, ["search", "512x256x128", "--dry-run", "--n", "3", "--backend", "triton"])
    assert r.exit_code == 0, r.output
    assert "dry run" in r.output and "nothing timed" in r.output
    rows = [line for line in r.output.splitlines() if "triton" in line and line.startswith("│ ")
            and line.split("│")[1].strip().isdigit()]  # the proposals, not the backends considered
    assert len(rows) == 3
    # valid, rendered, and built: compiled, or imported where Triton's CPU interpreter stands in
    assert all(line.count("yes") == 2 and ("compiled" in line or "imported (interpreter)" in line)
               for line in rows), r.output


def test_bad_shape_and_budget_are_clear_errors():
    r = runner.invoke(app, ["search", "4096x4096", "--dry-run"])
    assert r.exit_code == 2 and "expected three integers" in r.output
    r = runner.invoke(app, ["search", "64x64x64", "--budget", "lots", "--runner", "recorded"])
    assert r.exit_code == 2 and "GPU time" in r.output


def test_search_show_export_with_recorded_runner(tmp_path):
    """The recorded runner's synthetic results go to their own store, never the default one
    ($CUDAL2_STORE here), and show and export label them synthetic."""
    from cudal2.store.store import recorded_url, sqlite_path

    r = runner.invoke(app, ["search", "1024x512x256", "--budget", "5", "--proposer", "random", "--runner",
                            "recorded", "--seed", "0"])
    assert r.exit_code == 0, r.output
    assert "not GPU measurements" in r.output and "best of 5 evaluations" in r.output
    recorded = sqlite_path(recorded_url())
    assert f"stored in {recorded_url()}, its own store" in r.output and recorded.exists()
    r = runner.invoke(app, ["show"])
    assert r.exit_code == 0 and "nothing tuned yet" in r.output, r.output
    assert f"cudal2 show --store {recorded}" in r.output
    r = runner.invoke(app, ["show", "--store", str(recorded)])
    assert r.exit_code == 0 and "1024x512x256-float16-NN" in r.output and "recorded (synthetic)" in r.output
    assert "1 of 1 row(s) are synthetic" in r.output
    out = tmp_path / "table.json"
    r = runner.invoke(app, ["export", "--out", str(out), "--store", str(recorded)])
    assert r.exit_code == 0, r.output
    assert "warning: 1 of the 1 are synthetic" in r.output
    data = json.loads(out.read_text())
    assert data["format"] == "cudal2.tuned_table" and len(data["entries"]) == 1
    assert data["entries"][0]["problem"]["m"] == 1024 and data["entries"][0]["synthetic"] is True



def test_export_and_dataset_export_of_an_empty_default_store_point_at_the_recorded_one(tmp_path):
    """After a recorded sweep, the default store is empty: the exports say where the pairs went and
    the command that reads them, instead of writing nothing without a word."""
    import shlex

    from cudal2.store.store import recorded_url, sqlite_path

    r = runner.invoke(app, ["sweep", "64x64x64,128x128x128", "--specs", "2", "--runner", "recorded"])
    assert r.exit_code == 0, r.output
    recorded = sqlite_path(recorded_url())
    pairs, table = tmp_path / "pairs.csv", tmp_path / "table.json"
    for args, out in ((["dataset", "export", "--out", str(pairs)], pairs), (["export", "--out", str(table)], table)):
        r = runner.invoke(app, args)
        assert r.exit_code == 0 and "wrote 0" in r.output, r.output
        hint = r.output.split("in their own store: ", 1)[1].splitlines()[0]
        assert shlex.split(hint) == ["cudal2", *args, "--store", str(recorded)], r.output
        r = runner.invoke(app, shlex.split(hint)[1:])
        assert r.exit_code == 0 and "wrote 0" not in r.output and "synthetic" in r.output, r.output


def test_synthetic_pairs_are_named_by_dataset_export_and_train(tmp_path):
    store = tmp_path / "s.db"
    r = runner.invoke(app, ["sweep", "64x64x64,128x128x128,256x256x64,512x256x128", "--specs", "6", "--runner",
                            "recorded", "--store", str(store)])
    assert r.exit_code == 0, r.output
    pairs = tmp_path / "pairs.csv"
    r = runner.invoke(app, ["dataset", "export", "--out", str(pairs), "--store", str(store)])
    assert r.exit_code == 0, r.output
    assert "warning: 24 of the 24 rows are synthetic" in r.output
    r = runner.invoke(app, ["train", "--data", str(pairs), "--out", str(tmp_path / "m.json")])
    assert r.exit_code == 0, r.output
    assert "pairs are synthetic" in r.output and "not measurements" in r.output


def test_search_confirms_its_leaders_unless_told_not_to(tmp_path):
    args = ["search", "1024x512x256", "--budget", "4", "--proposer", "random", "--runner", "recorded", "--seed", "0"]
    r = runner.invoke(app, [*args, "--confirm", "2"])
    assert r.exit_code == 0, r.output
    assert f"the median of 2 {DEFAULT_MODE} confirmation rounds" in r.output and "alone said" in r.output
    r = runner.invoke(app, [*args, "--confirm", "0", "--store", str(tmp_path / "other.db")])
    assert r.exit_code == 0 and "one search trial, not confirmed" in r.output
    r = runner.invoke(app, [*args, "--confirm", "-1"])
    assert r.exit_code == 2 and "error: invalid value for '--confirm'" in r.output
    r = runner.invoke(app, [*args, "--confirm", "2", "--confirm-mode", "sustained", "--store", str(tmp_path / "s.db")])
    assert r.exit_code == 0, r.output
    assert "the median of 2 sustained confirmation rounds" in r.output and "sustained" in r.output
    r = runner.invoke(app, [*args, "--confirm-mode", "warm"])
    assert r.exit_code == 2 and "'--confirm-mode'" in r.output and "'warm' is not one of" in r.output
    # the tuned table ranks by the mode asked for: the sustained rounds are there, the default's too
    for mode in ("sustained", DEFAULT_MODE):
        out = tmp_path / f"table_{mode}.json"
        r = runner.invoke(app, ["export", "--out", str(out), "--store", str(tmp_path / "s.db"), "--mode", mode])
        assert r.exit_code == 0, r.output
        (entry,) = json.loads(out.read_text())["entries"]
        assert entry["kernel_ms"] > 0 and entry["baselines_ms"]["torch"] > 0
    r = runner.invoke(app, ["show", "--store", str(tmp_path / "s.db"), "--mode", "warm"])
    assert r.exit_code == 2 and "'--mode'" in r.output and "'warm' is not one of" in r.output


def test_compare_writes_a_png(tmp_path):
    out = tmp_path / "cmp.png"
    r = runner.invoke(app, ["compare", "256x512x128", "--proposers", "random,none", "--budget", "4", "--runner",
                            "recorded", "--out", str(out), "--store-dir", str(tmp_path / "stores")])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = json.loads(out.with_suffix(".json").read_text())
    assert set(curves) == {"random", "none"}
    assert [p["evaluation"] for p in curves["random"]["256x512x128-float16-NN"]] == [1, 2, 3, 4]
    assert (tmp_path / "stores" / "random.db").exists() and (tmp_path / "stores" / "none.db").exists()
    assert "speedups in chain mode" in out.with_suffix(".md").read_text()  # the objective's mode, named


def test_compare_on_the_recorded_runner_says_its_numbers_are_synthetic(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    titles = []
    suptitle = Figure.suptitle
    monkeypatch.setattr(Figure, "suptitle", lambda self, t, **kw: titles.append(t) or suptitle(self, t, **kw))
    out = tmp_path / "cmp.png"
    r = runner.invoke(app, ["compare", "256x512x128", "--proposers", "random", "--budget", "2", "--runner",
                            "recorded", "--out", str(out), "--store-dir", str(tmp_path / "stores")])
    assert r.exit_code == 0, r.output
    words = "synthetic numbers of the recorded runner's model, not GPU measurements"
    assert titles and all(t == words for t in titles)  # the figure
    assert words in out.with_suffix(".md").read_text() and words in " ".join(r.output.split())  # report, table


def test_tune_reads_a_shapes_file_and_writes_markdown(tmp_path):
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("# M N K\n256 256 128\n512x128x64\n")
    out = tmp_path / "tune.md"
    r = runner.invoke(app, ["tune", str(shapes), "--budget", "3", "--proposer", "none", "--runner", "recorded",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "256x256x128-float16-NN" in text and "512x128x64-float16-NN" in text and "geomean" in text


def test_bench_without_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message")
    r = runner.invoke(app, ["bench", "1024x1024x1024"])
    assert r.exit_code == 2 and ("no CUDA GPU" in r.output or "not installed" in r.output)


def test_search_times_the_leaders_static_twin_unless_told_not_to(tmp_path):
    from cudal2.store.store import Store

    args = ["search", "1024x512x256", "--budget", "4", "--proposer", "random", "--runner", "recorded", "--seed", "0"]
    statics = {}
    for twins in ("1", "0"):
        db = tmp_path / f"t{twins}.db"
        r = runner.invoke(app, [*args, "--static-twins", twins, "--store", str(db)])
        assert r.exit_code == 0, r.output
        (problem,) = Store(db).problems()
        statics[twins] = {c["result"].spec.key() for c in Store(db).confirmations(problem)
                          if c["result"].spec.shape_specialization == "static"}
    assert len(statics["1"]) == 1 and statics["0"] == set()
    r = runner.invoke(app, [*args, "--static-twins", "-1"])
    assert r.exit_code == 2 and "'--static-twins'" in r.output


def test_output_survives_a_pipe_the_winning_spec_on_one_line(tmp_path):
    """Piped (not a terminal, no COLUMNS), the CLI keeps lines whole: the winning spec's JSON is one line
    that parses, and tables are not cut at 80 columns."""
    import json as _json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["CUDAL2_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, "-m", "cudal2.cli", "search", "1024x512x256", "--runner", "recorded",
                        "--budget", "3", "--store", str(tmp_path / "s.db")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("spec: ")]
    assert _json.loads(line[len("spec: "):])["backend"]


def test_search_dry_run_and_show_print_one_json_object_with_json(tmp_path):
    import json as _json

    store = str(tmp_path / "s.db")
    r = runner.invoke(app, ["search", "1024x512x256", "--runner", "recorded", "--budget", "3", "--store", store,
                            "--json"])
    assert r.exit_code == 0, r.output
    out = _json.loads(r.stdout)  # nothing else on stdout
    assert out["problem"] == "1024x512x256-float16-NN" and out["synthetic"] is True and out["evaluations"] == 3
    assert out["best"]["spec"]["backend"] and out["speedup"]["torch"] > 0
    shown = _json.loads(runner.invoke(app, ["show", "--store", store, "--json"]).stdout)
    # the best kernel of each backend that measured the shape
    assert {e["problem"]["m"] for e in shown["entries"]} == {1024} and all(e["synthetic"] for e in shown["entries"])
    assert len({e["spec"]["backend"] for e in shown["entries"]}) == len(shown["entries"])
    dry = runner.invoke(app, ["search", "256x256x256", "--dry-run", "--proposer", "rules", "--backend", "triton",
                              "--n", "2", "--json"])
    assert dry.exit_code == 0, dry.output
    plan = _json.loads(dry.stdout)
    assert plan["timed"] is False and len(plan["proposals"]) == 2
    assert {b["name"] for b in plan["backends"]} == {"triton"} and plan["proposals"][0]["built"]


def test_a_dry_run_where_no_proposal_builds_exits_2_naming_why(monkeypatch):
    from cudal2.tuner import dry_run as dry_run_mod

    real = dry_run_mod.dry_run

    def nothing_builds(*a, **k):
        import dataclasses
        return [dataclasses.replace(r, compiled=False, compiled_as="", error="triton is not installed")
                for r in real(*a, **k)]

    monkeypatch.setattr("cudal2.cli.search.dry_run", nothing_builds)
    r = runner.invoke(app, ["search", "256x256x256", "--dry-run", "--proposer", "rules", "--backend", "triton",
                            "--n", "2"])
    assert r.exit_code == 2
    assert "none of the 2 proposals for 256x256x256-float16-NN built here (triton is not installed)" in r.stderr


def test_python_m_cudal2_is_the_cudal2_command(tmp_path):
    """`python -m cudal2 search` runs the command as `cudal2 search` does (a recorded search, its spec line)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "CUDAL2_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "cudal2", "search", "1024x512x256", "--runner", "recorded", "--budget",
                        "2", "--store", str(tmp_path / "s.db")], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    assert any(ln.startswith("spec: ") for ln in r.stdout.splitlines())


def test_compare_gives_a_comma_list_its_layout_unless_a_shape_names_its_own(tmp_path):
    """--layout applies to the shapes of a comma list as to a single shape; '-NN' after one keeps that one's."""
    out = tmp_path / "cmp.png"
    r = runner.invoke(app, ["compare", "256x512x128,128x256x64-NN", "--layout", "NT", "--proposers", "random",
                            "--budget", "1", "--runner", "recorded", "--out", str(out)])
    assert r.exit_code == 0, r.output
    curves = json.loads(out.with_suffix(".json").read_text())
    assert set(curves["random"]) == {"256x512x128-float16-NT", "128x256x64-float16-NN"}
