"""docs/environment.md lists every CUDAL2_* variable the package reads."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_variable_the_package_reads_is_documented():
    read = {m for p in (ROOT / "cudal2").rglob("*.py") for m in re.findall(r"[\"'](CUDAL2_[A-Z0-9_]+)[\"']", p.read_text())}
    documented = set(re.findall(r"`(CUDAL2_[A-Z0-9_]+)`", (ROOT / "docs" / "environment.md").read_text()))
    assert read, "no variable found: the pattern no longer matches how the code reads them"
    assert not read - documented, f"read but not in docs/environment.md: {sorted(read - documented)}"
