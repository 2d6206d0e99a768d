"""benchmarks/projection_savings.py stops in one line on a missing store or a machine without a GPU (it times CUDA
graphs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def run(script: str, *args: str) -> list[str]:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0, done.stdout
    return done.stderr.strip().splitlines()


def test_a_missing_store_is_one_line(tmp_path):
    [line] = run("projection_savings.py", str(tmp_path / "none.db"))
    assert "pass the store of an e2e_decoder.py run" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU here: the script would time the layer")
def test_it_needs_a_gpu(tmp_path):
    store = tmp_path / "s.db"
    store.write_bytes(b"")
    [line] = run("projection_savings.py", str(store))
    assert "run it on a GPU" in line
