"""benchmarks/op_fallback_python.py: times every path it names, in its own process (it stubs torch's call)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_it_times_each_path_of_the_fallback():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "op_fallback_python.py"), "--calls", "50",
                           "--rounds", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [" ".join(r[:-2]) for r in rows] == ["kept weight", "Parameter, shape shared", "served elsewhere",
                                                "graphs only", "counts (weight remade per call)",
                                                "the stub called directly"]
    assert all(r[-1] == "ns" and float(r[-2]) == float(r[-2]) for r in rows)
