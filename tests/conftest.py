"""Test setup: the Triton interpreter on CPU unless a GPU test session asks otherwise, and every
cache (cudal2's, Triton's, the CuTe DSL's, matplotlib's) in a folder of this test session."""

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Must be set before triton is imported anywhere: CPU tests run Triton kernels interpreted.
if os.environ.get("CUDAL2_GPU_TESTS") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")

_session_dir: str | None = None
_saved_env: dict[str, str | None] = {}


def pytest_configure(config):
    """Point every cache at a fresh folder before any test module is collected: the CuTe DSL fixes
    its cache folder when it is imported, matplotlib when it is first imported. So no test writes
    to the user's cache or HOME, and no test sees what an earlier session left there."""
    global _session_dir
    _session_dir = tempfile.mkdtemp(prefix="cudal2-tests-")
    redirected = {
        "CUDAL2_CACHE_DIR": "cudal2",  # rendered kernels and the default store (cudal2.paths.cache_dir)
        "TRITON_HOME": "triton",  # Triton's ~/.triton (cache, dumps, overrides)
        "TRITON_CACHE_DIR": "triton/cache",
        "CUTE_DSL_CACHE_DIR": "cute_dsl",  # the DSL's own IR cache (default: under /tmp)
        "MPLCONFIGDIR": "matplotlib",  # matplotlib's font cache (default: ~/.cache/matplotlib)
    }
    for name, sub in redirected.items():
        _saved_env[name] = os.environ.get(name)
        os.environ[name] = os.path.join(_session_dir, sub)
    # The store and the tuned table default to the cache folder above; a user's own must not leak in. Nor
    # the terminal's size: pytest-xdist's workers get COLUMNS=80, and the CLI's tables follow it.
    for name in ("CUDAL2_STORE", "CUDAL2_TABLE", "COLUMNS", "LINES"):
        _saved_env[name] = os.environ.pop(name, None)


def pytest_unconfigure(config):
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if _session_dir is not None:
        shutil.rmtree(_session_dir, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run with CUDAL2_GPU_TESTS=1 pytest -m gpu on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def cute_dsl_backend(tmp_path_factory):
    """A CuteDslBackend whose compiled-kernel cache lives in a fresh folder for this module."""
    from cudal2.codegen.cute_dsl import CuteDslBackend

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDAL2_CACHE_DIR", str(tmp_path_factory.mktemp("cute_dsl_cache")))
        yield CuteDslBackend()


@pytest.fixture(scope="session")
def results_report():
    """benchmarks/report.py (a script, not part of the package), loaded once as a module."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "report.py"
    spec = importlib.util.spec_from_file_location("cudal2_results_report", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
