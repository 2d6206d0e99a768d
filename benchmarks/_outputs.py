"""A benchmark's two result files, shared by the scripts that write one table and one list of rows: OUT.md (the
report's lines) and OUT.json ({"command", "env", "rows"}, what benchmarks/report.py reads)."""

from __future__ import annotations

import json
from pathlib import Path


def write_results(out: Path, lines: list[str] | str, command: str, env: dict, rows: list, key: str = "rows",
                  **extra) -> None:
    """OUT.md from lines (or the report's text), OUT.json from command, env, rows under key and any extra fields
    (a value JSON has no form for written as str)."""
    out.write_text(lines if isinstance(lines, str) else "\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"command": command, "env": env, **extra, key: rows}, indent=1,
                                                   default=str))
