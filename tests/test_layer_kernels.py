"""benchmarks/layer_kernels.py's report, on a CPU with made-up profiles: the span saved, the served kernels'
durations against torch's, and the change of the other kernels and of the gaps, each from its own column."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import layer_kernels  # noqa: E402


def _profile(kernels: list[tuple[str, float, float]], span: float) -> dict:
    return {"kernels": [{"name": n, "us": us, "gap_us": gap} for n, us, gap in kernels], "span_us": span}


def test_the_report_says_which_kernel_moved():
    torch_run = _profile([("norm", 7.0, 0.0), ("nvjet", 13.0, 0.4), ("add", 2.0, 0.4)], 23.0)
    ours_run = _profile([("norm", 7.0, 0.0), ("matmul_kernel", 14.0, 0.5), ("add", 2.5, 0.4)], 24.5)
    runs = [{"tokens": 128, "served": ["q"], "torch": torch_run, "cudal2": ours_run},
            {"tokens": 1, "served": ["q", "o"], "torch": torch_run,
             "cudal2": _profile([("norm", 7.0, 0.0)], 7.0)},
            {"tokens": 16, "served": ["k"], "torch": {"error": "0 kernels over 30 replays"}, "cudal2": ours_run}]
    md = layer_kernels.markdown(runs, {"date": "2026-01-01", "gpu_name": "a GPU"}, "cmd")
    assert "| 128 | q | 23.00 | 24.50 | -1.50 | 13.00 -> 14.00 (0.40 -> 0.50) | +0.50 | +0.10 |" in md
    assert "| 1 | q, o | - | - | - | kernel counts differ | - | - |" in md
    assert "| 16 | k | - | - | - | 0 kernels over 30 replays | - | - |" in md
