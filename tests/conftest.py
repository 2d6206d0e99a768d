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
