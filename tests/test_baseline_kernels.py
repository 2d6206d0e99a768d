"""benchmarks/baseline_kernels.py reads the shapes of a winners file and stops in one line on a bad file or a machine
without a GPU (it profiles CUDA kernels)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from baseline_kernels import problems_of  # noqa: E402


def test_the_problems_are_the_rows_shapes():
    assert problems_of({"rows": [{"shape": "1x3072x3072-float16-NT"}, {"shape": "33x6144x4096"}]}) == [
        ("1x3072x3072-float16-NT", 1, 3072, 3072), ("33x6144x4096", 33, 6144, 4096)]
    with pytest.raises(ValueError, match="'1x3072' is not MxNxK"):
        problems_of({"rows": [{"shape": "1x3072"}]})


@pytest.mark.parametrize("text, said", [
    ('{"rows": [{"shape": "axbxc"}]}', "is not MxNxK"),
    ("not json", "pass a crosscheck_winners.py .json"),
    pytest.param('{"rows": [{"shape": "1x8x8"}]}', "run it on a GPU", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="a GPU here: the script would profile the shape")),
])
def test_it_stops_in_one_line(tmp_path, text, said):
    winners = tmp_path / "w.json"
    winners.write_text(text)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "baseline_kernels.py"), str(tmp_path / "o.md"),
                           "--winners", str(winners)], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and said in lines[0], done.stderr
