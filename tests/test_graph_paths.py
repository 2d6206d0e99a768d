"""benchmarks/graph_paths.py picks the winners rows and contenders it is asked for, and stops in one line on a shape
the file lacks, an unknown contender, or a machine without a GPU (its timing needs one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from graph_paths import contenders_of, shapes_of  # noqa: E402

WINNERS = {"rows": [{"shape": "1x3072x3072-float16-NT"}, {"shape": "33x3072x3072-float16-NT"},
                    {"shape": "16x8192x3584-float16-NT"}]}


def test_shapes_are_the_rows_named_in_the_order_asked_or_all_in_the_files():
    assert [r["shape"] for r in shapes_of(WINNERS, "33x3072x3072, 1x3072x3072")] == [
        "33x3072x3072-float16-NT", "1x3072x3072-float16-NT"]
    assert len(shapes_of(WINNERS, "all")) == 3
    with pytest.raises(ValueError, match="no row 7x7x7"):
        shapes_of(WINNERS, "1x3072x3072,7x7x7")


def test_contenders_are_checked():
    assert contenders_of("matmul,linear") == ("matmul", "linear") and contenders_of("op, bound") == ("op", "bound")
    with pytest.raises(ValueError, match="unknown contender cublas; known: op, bound, matmul"):
        contenders_of("op,cublas")


@pytest.mark.parametrize("args, said", [
    (["--shape", "7x7x7"], "no row 7x7x7"),
    (["--shape", "all", "--contenders", "nope"], "unknown contender nope"),
    pytest.param(["--shape", "all", "--contenders", "matmul"], "run it on a GPU", marks=pytest.mark.skipif(
        torch.cuda.is_available(), reason="a GPU here: the script would time the shapes")),
])
def test_it_stops_in_one_line(tmp_path, args, said):
    winners = tmp_path / "w.json"
    winners.write_text('{"rows": [{"shape": "1x3072x3072-float16-NT"}]}')
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "graph_paths.py"), str(tmp_path / "o.md"),
                           "--winners", str(winners), *args], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and said in lines[0], done.stderr
