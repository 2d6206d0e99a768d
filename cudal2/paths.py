"""Where cudal2 keeps its files: one root, named by one environment variable.

Everything cudal2 writes by default (rendered and compiled kernels of each backend, the default
store) lives under cache_dir(), so pointing $CUDAL2_CACHE_DIR somewhere moves all of it: tests
point it at a temporary folder, a shared machine at a per-user one.
"""

from __future__ import annotations

import os
from pathlib import Path
from .settings import settings

ENV_CACHE_DIR = "CUDAL2_CACHE_DIR"


def cache_dir() -> Path:
    """$CUDAL2_CACHE_DIR if set, else the platform's user cache folder for cudal2 (~/.cache/cudal2 on Linux)."""
    env = settings().cache_dir
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("cudal2"))
    except ImportError:  # a dependency, but the GPU machine's environment may lack it: keep the XDG default
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudal2"
