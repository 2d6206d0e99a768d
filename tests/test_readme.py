"""README.md's first screen: what cudal2 is, how to install it (extras, GPUs, Python), the two
commands, and how to try it without a GPU, each checked against the files it names."""

import re
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_the_first_sections_are_install_the_two_commands_and_without_a_gpu():
    headings = re.findall(r"^## (.+)$", README, re.MULTILINE)
    assert headings[:3] == ["Install", "The two commands", "Without a GPU"]
    assert README[:README.index("## Without a GPU")].count("\n") < 40  # on the first screen


def test_install_names_the_extras_that_exist_the_gpus_and_python():
    install = _section("Install")
    extras = PYPROJECT["project"]["optional-dependencies"]
    (pip,) = re.findall(r'pip install -e "\.\[([a-z,]+)\]"', install)
    assert set(pip.split(",")) <= set(extras)
    for name in extras:
        assert f"`{name}`" in install, name
    (dsl,) = [d for d in extras["cute"] if d.startswith("nvidia-cutlass-dsl")]
    assert f"`{dsl}`" in install
    assert PYPROJECT["project"]["requires-python"] == ">=3.10" and "Python 3.10 or newer" in install
    for gpu in ("H100", "H200", "sm_90a", "A100", "sm_80", "other GPUs are refused"):
        assert gpu in install, gpu


def test_the_two_commands_are_those_the_tools_and_ci_run():
    commands = _section("The two commands")
    assert "```bash\nbash tools/run.sh\n```" in commands and "```bash\nbash tools/test.sh\n```" in commands
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == "bash tools/test.sh"


def test_without_a_gpu_says_how_to_reach_the_command_and_try_the_recorded_runner():
    text = _section("Without a GPU")
    for words in (". .venv/bin/activate", ".venv/bin/cudal2", "cudal2 search 4096x4096x4096 --runner recorded",
                  "cudal2 search 4096x4096x4096 --dry-run", "--runner recorded   # compare.png",
                  'runner="recorded"', "own store", "synthetic"):
        assert words in text, words
