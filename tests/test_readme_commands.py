"""The commands README.md gives for trying cudal2 without a GPU, and those docs/backends.md gives
for a third-party backend, run as written: each read from its fenced block, never copied here, in
a folder of its own with a cache folder of its own, as a newcomer would type them."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BACKENDS_DOC = (ROOT / "docs" / "backends.md").read_text()
ACTIVATE = ". .venv/bin/activate"


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def _bash_lines(section: str) -> list[str]:
    """The command lines of a section's bash blocks, comments and blank lines left out."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def _environment(tmp_path: Path) -> dict[str, str]:
    """This test session's environment in place of the activated .venv (its `cudal2` and python
    first on the PATH: tools/test.sh's session runs in that very .venv), a cache folder of the
    test's own, and a terminal as wide as a newcomer's."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "CUDAL2_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    env.pop("TRITON_INTERPRET", None)  # the CLI's dry run sets it itself where there is no GPU
    if not (bin_dir / "cudal2").exists():  # cudal2 not installed as a script here: its module
        shim = tmp_path / "bin" / "cudal2"
        shim.parent.mkdir()
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m cudal2.cli "$@"\n')
        shim.chmod(0o755)
        env["PATH"] = f"{shim.parent}{os.pathsep}{env['PATH']}"
    return env


def _run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    r = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.mark.slow
def test_readme_without_a_gpu_commands_run_as_written(tmp_path):
    lines = _bash_lines(_section(README, "## Without a GPU"))
    # the set-up (tools/run.sh) makes the .venv the first line activates, and installs `cudal2` into it
    assert lines[0] == ACTIVATE and "python3 -m venv --system-site-packages .venv" in (ROOT / "tools" / "run.sh").read_text()
    commands = lines[1:]
    assert [c.split()[:2] for c in commands] == [["cudal2", "search"], ["cudal2", "search"], ["cudal2", "compare"]]
    env, work = _environment(tmp_path), tmp_path / "work"
    work.mkdir()
    out = {}
    for line in commands:
        out[line] = _run(line, work, env)
    search, dry, compare = (out[c] for c in commands)
    # a recorded search: synthetic, and into its own store, never the default one
    assert "synthetic" in search.stdout and (tmp_path / "cache" / "recorded.db").exists()
    assert not (tmp_path / "cache" / "store.db").exists()
    # the dry run: every backend it considered, and a built row of each one in the run
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in dry.stdout.splitlines() if ln.startswith("│")]
    in_run = {r[0] for r in rows if len(r) == 4 and r[1] == "yes"}
    built = {r[1] for r in rows if len(r) == 7 and r[0].isdigit() and r[5] not in ("", "no")}
    assert "triton" in in_run and in_run <= built, dry.stdout
    # the compare: its plot and report in the current folder, saying the numbers are synthetic
    assert {"compare.png", "compare.json", "compare.md"} <= {p.name for p in work.iterdir()}
    assert "synthetic" in compare.stdout and "synthetic" in (work / "compare.md").read_text()


@pytest.mark.slow
def test_the_documented_backend_installs_with_pip_and_its_commands_run_as_written(tmp_path):
    """docs/backends.md's package, written from its "File" blocks, installed by its own `pip install`
    line (into a folder of the test's own rather than the environment), then its commands."""
    files = dict(re.findall(r"^File `([^`]+)`:\n\n```\w*\n(.*?)^```", BACKENDS_DOC, flags=re.M | re.S))
    commands = _bash_lines(_section(BACKENDS_DOC, "## Trying it"))
    install, commands = commands[0], commands[1:]
    assert install.startswith("pip install ./"), install
    package = install.split()[-1]
    for path, text in files.items():
        (tmp_path / package / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / package / path).write_text(text)
    target = tmp_path / "site"
    env = _environment(tmp_path)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), package]
    r = subprocess.run(pip, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and "hatchling" in r.stderr and ("Could not find" in r.stderr or "No matching" in r.stderr):
        pytest.skip("pip cannot reach the package index for the build backend (hatchling)")
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(target.glob("cudal2_toy/templates/*.j2"))  # the wheel carries the package's templates
    env["PYTHONPATH"] = os.pathsep.join([str(target), env["PYTHONPATH"]])
    outputs = [_run(line, tmp_path, env).stdout for line in commands]
    assert [c.split()[:2] for c in commands] == [["cudal2", "search"]] * 3
    for out in outputs[:2]:
        rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]
        assert ["toy", "yes", "", ""] in rows, out  # considered and in the run
        assert any(len(r) == 7 and r[1] == "toy" and r[5] == "compiled" for r in rows), out  # a row of its own, built
    assert "synthetic" in outputs[2] and '"backend":"' in outputs[2]
