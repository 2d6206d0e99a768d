"""benchmarks/learned_offline.py on the CPU: what a replay reads at each budget, and data without a
validation-split shape refused in one line."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import learned_offline  # noqa: E402


def test_a_replay_reads_its_last_figure_where_it_ran_out_of_specs():
    assert learned_offline.curve_at([0.5, 0.9, 1.0]) == {1: 0.5, 4: 1.0, 8: 1.0, 16: 1.0}


def test_data_without_a_validation_shape_is_refused_in_one_line(tmp_path):
    sample = ROOT / "tests" / "data" / "sweep_h100_sample.csv.gz"  # train-split shapes only
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "learned_offline.py"), "--train", str(sample),
                          "--validation", str(sample), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("learned_offline: no pair of the data is of a validation")
    assert not (tmp_path / "out.json").exists()
