"""tools/run.sh ends by printing the command to type next, with the virtual environment's path: the
printing step (tools/next_command.sh) run alone, and its place in run.sh (the set-up itself is not run)."""

import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _fake_venv(where: Path) -> Path:
    """A .venv whose activate puts a `cudal2` on the PATH that prints its arguments."""
    bin_dir = where / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "activate").write_text(f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"\n')
    (bin_dir / "cudal2").write_text('#!/bin/sh\necho "cudal2 ran with: $*"\n')
    (bin_dir / "cudal2").chmod(0o755)
    return where / ".venv"


@pytest.mark.parametrize("kind, command", [("cpu", "cudal2 search 4096x4096x4096 --runner recorded"),
                                           ("gpu", "cudal2 show")])
def test_the_printed_command_activates_the_venv_by_its_path_and_runs(tmp_path, kind, command):
    venv = _fake_venv(tmp_path / "a folder with spaces")
    out = subprocess.run(["bash", str(ROOT / "tools" / "next_command.sh"), str(venv), kind], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    (line,) = [ln.strip() for ln in out.splitlines() if ln.strip().endswith(command)]
    assert line.startswith(". /") and "/.venv/bin/activate && " in line  # an absolute path: typed from anywhere
    ran = subprocess.run(["bash", "-c", line], cwd="/", capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert ran.returncode == 0 and ran.stdout.strip() == "cudal2 ran with: " + command.split(" ", 1)[1], ran


def test_run_sh_ends_each_branch_with_the_next_command():
    lines = [ln.strip() for ln in (ROOT / "tools" / "run.sh").read_text().splitlines()]
    gpu = lines.index("cudal2 show")
    assert lines[gpu + 1] == "bash tools/next_command.sh .venv gpu"
    dry = lines.index('cudal2 search 4096x4096x4096 --dry-run "$@"')
    assert lines[dry + 1] == "bash tools/next_command.sh .venv cpu" and lines[dry + 2:] in (["fi"], ["fi", ""])
