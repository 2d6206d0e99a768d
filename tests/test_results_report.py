"""The project reads as a user's guide: docs/results.md is what benchmarks/report.py writes from the
results on disk, every experiment's file exists, README.md stays short, and no file carries a
sequence label (the word session or issue before a number, or a file name ending in _s and a number)
instead of a date."""

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the patterns are spelled with a character class around their space, so this file does not match them itself
LABEL = re.compile(r"session[ ][0-9]|sessions[ ][0-9]|issue[ ][0-9]|_s[0-9]+[a-z]?\.", re.IGNORECASE)


def test_results_page_is_what_the_report_script_writes(results_report):
    report = results_report
    for e in report.EXPERIMENTS:
        assert (report.RESULTS / e.file).exists(), e.file
    assert (ROOT / "docs" / "results.md").read_text() == report.render(report.EXPERIMENTS), (
        "docs/results.md is stale: run python benchmarks/report.py")


def _files_outside_dot_folders():
    """The repository's files, without descending into .git or a virtual environment (tools/test.sh
    builds .venv-lowest while the tests run: a folder that vanishes mid-walk is passed over)."""
    for folder, dirs, files in os.walk(ROOT):
        top = Path(folder) == ROOT
        dirs[:] = [d for d in dirs if d != "__pycache__" and not (top and d.startswith("."))]
        yield from (p for f in files if not (top and f.startswith(".")) and (p := Path(folder) / f).is_file())


def test_no_sequence_labels_and_a_short_readme():
    found = []
    for path in _files_outside_dot_folders():
        rel = path.relative_to(ROOT)
        if re.search(r"_s[0-9]+[a-z]?\.", path.name):
            found.append(f"{rel} (file name)")
        if path.suffix in (".py", ".md", ".j2"):
            for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if LABEL.search(line):
                    found.append(f"{rel}:{i}")
    assert not found, found[:20]
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
