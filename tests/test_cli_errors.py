"""What the `cudal2` command shows when something goes wrong (CPU only, through CliRunner): bad input
is one `error:` line and exit 2, a bug is one line and exit 1, Ctrl-C exits 130; a traceback only
with --debug or CUDAL2_DEBUG=1."""

import pytest
from typer.testing import CliRunner

from cudal2.cli import BackendName, ModeName, ProposerName, SamplerName, app
from cudal2.store.store import Store, StoreError

runner = CliRunner()
RECORDED = ["--runner", "recorded"]


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_STORE", str(tmp_path / "store.db"))
    monkeypatch.setenv("COLUMNS", "60")  # narrower than every error line: none may wrap
    monkeypatch.delenv("CUDAL2_DEBUG", raising=False)


@pytest.fixture
def not_a_database(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("hello, not a database\n" * 20)
    return path


def _one_error_line(result, exit_code: int = 2) -> str:
    """The result's single `error:` line, after checking the exit code, the length of the output and
    that no traceback was printed."""
    lines = result.output.splitlines()
    assert result.exit_code == exit_code, result.output
    assert len(lines) <= 4, result.output
    assert "Traceback" not in result.output
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


# The bad inputs of the command line, each: arguments and what its error line must name.
BAD_INPUTS = {
    "unknown --mode": (["search", "512x512x512", "--mode", "nosuch", *RECORDED],
                       ["'--mode'", "'nosuch'", "'offline'", "'server'", "'sustained'"]),
    "--batch 0": (["search", "512x512x512", "--batch", "0", *RECORDED], ["'--batch'"]),
    "shape too large": (["search", "100000000x100000000x100000000", *RECORDED], []),
    "unknown --sampler": (["search", "512x512x512", "--sampler", "nosuch", *RECORDED],
                          ["'--sampler'", "'nosuch'", "'tpe'", "'gp'", "'random'"]),
    "store not a database": (["search", "512x512x512", "--store", "{notdb}", *RECORDED],
                             ["{notdb}", "not an SQLite database"]),
    "store a directory": (["search", "512x512x512", "--store", "{tmp}", *RECORDED],
                          ["{tmp}", "is a directory", "store.db"]),
    "postgresql without driver": (["search", "512x512x512", "--store", "postgresql://u:pw-secret@127.0.0.1/db",
                                   *RECORDED], ["postgresql://u:***@127.0.0.1/db"]),
    "tune of a missing file": (["tune", "{tmp}/missing.txt", *RECORDED], ["missing.txt", "does not exist"]),
    "sweep of an unknown set": (["sweep", "gird", *RECORDED], ["gird", "not a shape set"]),
    "sweep with a bad spec count": (["sweep", "grid", "--specs", "many", *RECORDED], ["--specs", "'all' or a number"]),
    "sweep of a catalog the backend lacks": (["sweep", "grid", "--catalog", "narrow", *RECORDED],
                                             ["--catalog narrow", "no specs for backend 'triton'", "cute_dsl"]),
    "show of a non-database": (["show", "--store", "{notdb}"], ["{notdb}", "not an SQLite database"]),
    "store whose studies file is corrupt": (["search", "512x512x512", "--store", "{badjournal}", *RECORDED],
                                            ["{badjournal}.optuna-journal", "cannot be read", "move it aside"]),
    "train with nothing to read": (["train"], ["--store URL", "--data FILE"]),
    "train on a file that is no export": (["train", "--data", "{notdb}"], ["no measured pair", "cudal2 sweep"]),
    "compare with a bad budget list": (["compare", "512x512x512", "--budget", "16,lots", *RECORDED],
                                       ["'--budget'", "lots"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_each_bad_input_is_one_error_line_and_exit_2(case, tmp_path, not_a_database):
    args, names = BAD_INPUTS[case]
    fill = {"notdb": str(not_a_database), "tmp": str(tmp_path), "badjournal": str(tmp_path / "j.db")}
    Store(tmp_path / "j.db").engine.dispose()  # an SQLite store ...
    (tmp_path / "j.db.optuna-journal").write_text("not a journal\n{}\n")  # ... whose studies file is garbage
    line = _one_error_line(runner.invoke(app, [a.format(**fill) for a in args]))
    for name in names:
        assert name.format(**fill) in line, line
    assert "pw-secret" not in line


def test_a_corrupt_cost_model_is_one_error_line(tmp_path, monkeypatch):
    model = tmp_path / "model.json"
    model.write_text('{"format": "cudal2-cost-model", "feature_version": 1')
    monkeypatch.setenv("CUDAL2_COST_MODEL", str(model))
    line = _one_error_line(runner.invoke(app, ["search", "512x512x512", "--proposer", "learned", *RECORDED]))
    assert "proposer 'learned'" in line and str(model) in line and "cudal2 train" in line


def test_a_size_check_of_the_problem_is_one_error_line(monkeypatch):
    """Whatever refuses a problem (a SpecError, or a ValueError of a size check) is shown in one line."""
    from cudal2.ir import GemmProblem

    def refuse(*_a, **_k):
        raise ValueError("the operands need 60 TB\nand the GPU has 80 GB")

    monkeypatch.setattr(GemmProblem, "parse", refuse)
    line = _one_error_line(runner.invoke(app, ["search", "4096x4096x4096", *RECORDED]))
    assert line == "error: the operands need 60 TB and the GPU has 80 GB"


def test_a_spec_error_from_inside_a_command_is_a_user_error(monkeypatch):
    """A SpecError names the field, the limit and the fix wherever it is raised (a size check that
    needs the target arch runs inside the search): one line and exit 2, not a bug."""
    import cudal2.tuner.loop
    from cudal2.ir import SpecError, Violation

    def refuse(*_a, **_k):
        raise SpecError(Violation("shape", "100000x100000x100000", "needs 80 GB, the GPU has 40 GB",
                                  "search a smaller shape"), what="GemmProblem")

    monkeypatch.setattr(cudal2.tuner.loop, "run_search", refuse)
    line = _one_error_line(runner.invoke(app, ["search", "4096x4096x4096", *RECORDED]))
    assert line == ("error: invalid GemmProblem: shape='100000x100000x100000': needs 80 GB, the GPU has 40 GB; "
                    "fix: search a smaller shape")


def test_a_bad_shape_is_one_line_in_spec_error_words():
    line = _one_error_line(runner.invoke(app, ["search", "4096x4096", *RECORDED]))
    assert "invalid GemmProblem: shape='4096x4096': expected three integers" in line and "fix:" in line


def test_bench_refuses_a_malformed_spec_file_in_spec_error_words(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('[{"block_m": 128}, {"block_m": 7, "stages": "three", "colour": "red"}]')
    line = _one_error_line(runner.invoke(app, ["bench", "1024x1024x1024", "--spec", str(spec)]))
    assert f"--spec {spec}: invalid KernelSpec:" in line
    for violation in ("block_m=7", "stages='three'", "colour='red': unknown key"):
        assert violation in line, line
    assert "validation error" not in line.lower() and "pydantic" not in line  # no pydantic dump
    spec.write_text('{"block_m": ')
    line = _one_error_line(runner.invoke(app, ["bench", "1024x1024x1024", "--spec", str(spec)]))
    assert "not valid JSON" in line and "line 1" in line
    spec.write_text("[" * 100_000 + "]" * 100_000)  # deeper than the JSON parser recurses
    line = _one_error_line(runner.invoke(app, ["bench", "1024x1024x1024", "--spec", str(spec)]))
    assert "not valid JSON" in line
    line = _one_error_line(runner.invoke(app, ["bench", "1024x1024", "--spec", str(spec)]))
    assert "expected three integers" in line


@pytest.mark.parametrize("args, names", [
    (["search", "512x512x512", "--backend", "nosuch", *RECORDED], ["'--backend'", "'nosuch'", "'triton'"]),
    (["search", "512x512x512", "--proposer", "nosuch", *RECORDED], ["'--proposer'", "'rules'", "'none'"]),
    (["search", "512x512x512", "--runner", "cpu"], ["'--runner'", "'gpu'", "'recorded'"]),
    (["search", "512x512x512", "--budget", "lots", *RECORDED], ["'--budget'", "120s"]),
    (["search", "512x512x512", "--budget", "0s", *RECORDED], ["'--budget'", "more than 0 s"]),
    (["search", "512x512x512", "--confirm", "-1", *RECORDED], ["'--confirm'"]),
    (["search", "512x512x512", "--no-such-flag"], ["--no-such-flag", "--help"]),
    (["compare", "512x512x512", "--proposers", "rules,nosuch", *RECORDED], ["'--proposers'", "rules, none"]),
    (["export", "--out", "{tmp}"], ["'--out'", "directory"]),
    (["nosuch"], ["'nosuch'", "cudal2 --help"]),
])
def test_click_usage_errors_are_one_line_too(args, names, tmp_path):
    line = _one_error_line(runner.invoke(app, [a.format(tmp=tmp_path) for a in args], prog_name="cudal2"))
    for name in names:
        assert name.format(tmp=tmp_path) in line, line


def test_help_lists_the_allowed_values():
    r = runner.invoke(app, ["search", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for values in (ModeName, SamplerName, ProposerName, BackendName):
        for value in values.__members__:
            assert value in r.output, (value, r.output)
    assert "recorded" in r.output and "gpu" in r.output


def test_choices_are_the_registries():
    from cudal2.bench.results import MODES
    from cudal2.codegen.registry import available_backends
    from cudal2.proposers import available_proposers
    from cudal2.tuner.refiner import SAMPLERS

    assert list(BackendName.__members__) == available_backends()
    assert list(ProposerName.__members__) == ["auto", *available_proposers(), "none"]
    assert list(SamplerName.__members__) == list(SAMPLERS) and list(ModeName.__members__) == list(MODES)


def _raise_bug(*_a, **_k):
    raise ZeroDivisionError("float division by zero")


def test_a_bug_is_one_line_that_points_at_debug_and_exits_1(monkeypatch):
    import cudal2.tuner.loop

    monkeypatch.setattr(cudal2.tuner.loop, "run_search", _raise_bug)
    line = _one_error_line(runner.invoke(app, ["search", "512x512x512", *RECORDED]), exit_code=1)
    assert "ZeroDivisionError: float division by zero" in line and "bug" in line and "--debug" in line


@pytest.mark.parametrize("debug", [["--debug"], "CUDAL2_DEBUG=1"])
def test_debug_shows_the_traceback_of_a_bug(debug, monkeypatch):
    import cudal2.tuner.loop

    monkeypatch.setattr(cudal2.tuner.loop, "run_search", _raise_bug)
    if isinstance(debug, str):
        monkeypatch.setenv(*debug.split("="))
        debug = []
    r = runner.invoke(app, [*debug, "search", "512x512x512", *RECORDED])
    assert r.exit_code == 1
    assert "Traceback (most recent call last)" in r.output and "ZeroDivisionError" in r.output
    assert "_raise_bug" in r.output  # the frame where it happened


def test_debug_does_not_turn_a_user_error_into_a_traceback():
    r = runner.invoke(app, ["--debug", "search", "512x512x512", "--batch", "0", *RECORDED])
    _one_error_line(r)


def test_ctrl_c_says_how_to_resume_and_exits_130(monkeypatch, tmp_path):
    from cudal2.tuner.recorded import RecordedRunner

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    args = ["search", "512x256x128", "--budget", "4", "--proposer", "random", "--seed", "0", "--confirm", "0",
            *RECORDED]
    with monkeypatch.context() as m:
        m.setattr(RecordedRunner, "evaluate", interrupted)
        r = runner.invoke(app, args)
    assert r.exit_code == 130, r.output
    assert "interrupted; run the same command to resume" in r.output
    assert "Traceback" not in r.output and len(r.output.splitlines()) <= 4
    r = runner.invoke(app, args)  # the same command resumes and spends the budget
    assert r.exit_code == 0, r.output
    assert "best of 4 evaluations" in r.output


def test_store_named_by_the_environment_says_so(monkeypatch, not_a_database):
    monkeypatch.setenv("CUDAL2_STORE", str(not_a_database))
    line = _one_error_line(runner.invoke(app, ["show"]))
    assert "not an SQLite database" in line and "$CUDAL2_STORE" in line


def test_store_check_passes_a_new_file_and_an_existing_store(tmp_path):
    fresh = Store(tmp_path / "sub" / "new.db")
    assert fresh.check() is fresh and not (tmp_path / "sub" / "new.db").exists()  # checking creates nothing
    used = Store(tmp_path / "used.db")
    used.problems()  # creates the tables
    assert used.check() is used


def test_store_check_names_the_problem(tmp_path, not_a_database):
    with pytest.raises(StoreError, match="is a file, not a directory"):
        Store(not_a_database / "store.db").check()
    with pytest.raises(StoreError, match="knows no database 'nosuchdb'"):
        Store("nosuchdb://host/db").check()
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    with pytest.raises(StoreError, match=r"is corrupt \(file is not a database\); move it aside"):
        Store(corrupt).check()


@pytest.mark.parametrize("command", [
    ["search", "512x512x512"],
    ["compare", "512x512x512", "--store-dir", "{tmp}/stores"],
    ["tune", "{tmp}/shapes.txt"],
    ["sweep", "512x512x512", "--specs", "2"],
])
def test_without_a_gpu_the_error_names_what_works_in_that_command(command, tmp_path, monkeypatch):
    """Each measuring command's no-GPU error names --runner recorded, and --dry-run only where the
    command has one (search)."""
    import cudal2.api

    monkeypatch.setattr(cudal2.api, "gpu_available", lambda: False)
    (tmp_path / "shapes.txt").write_text("512x512x512\n")
    line = _one_error_line(runner.invoke(app, [a.format(tmp=tmp_path) for a in command]))
    assert "no CUDA GPU" in line and "--runner recorded" in line, line
    assert ("--dry-run" in line) == (command[0] == "search"), line


def test_bench_without_a_gpu_names_what_runs_on_a_cpu(monkeypatch):
    import cudal2.api

    monkeypatch.setattr(cudal2.api, "gpu_available", lambda: False)
    line = _one_error_line(runner.invoke(app, ["bench", "512x512x512"]))
    assert "no CUDA GPU" in line and "; " in line, line
    assert "cudal2 search 512x512x512 --runner recorded" in line and "cudal2 search 512x512x512 --dry-run" in line, line
