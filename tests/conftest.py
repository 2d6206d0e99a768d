"""Test setup: the Triton interpreter on CPU unless a GPU test session asks otherwise."""

import os

import pytest

# Must be set before triton is imported anywhere: CPU tests run Triton kernels interpreted.
if os.environ.get("CUDAL2_GPU_TESTS") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")


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
