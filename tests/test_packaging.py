"""A non-editable install carries the templates and the backend entry points inside the wheel."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_ships_templates_and_entry_points(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, text=True)
    (wheel,) = tmp_path.glob("cudal2-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for template in (ROOT / "templates").rglob("*.j2"):
        assert f"cudal2/templates/{template.relative_to(ROOT / 'templates').as_posix()}" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[cudal2.backends]" in entry_points and "triton = cudal2.codegen.triton:TritonBackend" in entry_points
