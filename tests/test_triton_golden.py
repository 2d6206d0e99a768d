"""Golden renderings of the Triton backend: the rendered text is the kernel, so any change to
it shows up here as a diff. Regenerate deliberately with CUDAL2_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudal2 import GemmProblem, KernelSpec, get_backend
from cudal2.ir import Epilogue

GOLDEN = Path(__file__).resolve().parent / "golden" / "triton"

CASES = {
    # the plain data-parallel pointer kernel compiled for one odd shape (every mask present)
    "pointer_nn_odd": (GemmProblem(m=67, n=45, k=129),
                       KernelSpec(block_m=32, block_n=32, block_k=32, num_warps=4, stages=2)),
    # the same spec for any shape: M, N, K at run time, masks chosen per shape, 64-bit strides
    "pointer_nn_dynamic": (GemmProblem(m=67, n=45, k=129),
                           KernelSpec(block_m=32, block_n=32, block_k=32, num_warps=4, stages=2,
                                      shape_specialization="dynamic")),
    # a dynamic TMA kernel: persistent, split-K, its workspace sized per call
    "tma_nt_dynamic_persistent_splitk": (
        GemmProblem(m=512, n=128, k=8192, layout="NT", epilogue=Epilogue(bias=True)),
        KernelSpec(block_m=64, block_n=128, block_k=64, num_warps=4, stages=4, load_path="tma", persistent=True,
                   decomposition="split_k", split_k=4, shape_specialization="dynamic")),
    # column-major operands, persistent grid, grouping along N, split-K through a workspace, full epilogue
    "pointer_tt_persistent_splitk_workspace_epilogue": (
        GemmProblem(m=512, n=128, k=8192, dtype="bfloat16", layout="TT",
                    epilogue=Epilogue(alpha=0.5, beta=1.0, bias=True, activation="gelu")),
        KernelSpec(block_m=64, block_n=64, block_k=64, num_warps=4, stages=4, persistent=True,
                   raster_order="along_n", decomposition="split_k", split_k=8)),
    # split-K with fp32 atomics, relu, bf16 output
    "pointer_nt_splitk_atomic_relu": (
        GemmProblem(m=8192, n=256, k=256, layout="NT", out_dtype="bfloat16", epilogue=Epilogue(activation="relu")),
        KernelSpec(arch="sm_80", block_m=128, block_n=64, block_k=32, num_warps=4, stages=3,
                   decomposition="split_k", split_k=2, split_k_reduction="atomic")),
    # extents whose products pass 2**31: offsets go int64
    "pointer_nn_wide_index": (GemmProblem(m=65536, n=65536, k=64),
                              KernelSpec(block_m=128, block_n=256, block_k=64, num_warps=8, stages=3)),
    # TMA descriptors, data-parallel, aligned square problem
    "tma_nn": (GemmProblem(m=4096, n=4096, k=4096),
               KernelSpec(block_m=128, block_n=256, block_k=64, num_warps=8, stages=3, load_path="tma")),
    # TMA over transposed views, persistent, silu
    "tma_tn_persistent_silu": (
        GemmProblem(m=4096, n=4096, k=4096, layout="TN", epilogue=Epilogue(activation="silu")),
        KernelSpec(arch="sm_90", block_m=128, block_n=128, block_k=64, num_warps=8, stages=4,
                   load_path="tma", persistent=True, raster_group=16)),
    # TMA + split-K workspace for a deep-K skinny problem
    "tma_nt_splitk_workspace": (GemmProblem(m=512, n=128, k=8192, layout="NT"),
                                KernelSpec(block_m=64, block_n=128, block_k=64, num_warps=4, stages=4,
                                           load_path="tma", decomposition="split_k", split_k=8,
                                           split_k_reduction="workspace")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_golden_rendering(name):
    problem, spec = CASES[name]
    text = get_backend("triton").render(problem, spec).text
    compile(text, f"{name}.py", "exec")  # the rendering is valid Python
    path = GOLDEN / f"{name}.py"
    if os.environ.get("CUDAL2_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with CUDAL2_UPDATE_GOLDEN=1 to create it"
    golden = path.read_text()
    compile(golden, str(path), "exec")
    assert text == golden, f"rendering of {name} changed; review the diff, then CUDAL2_UPDATE_GOLDEN=1"


def test_golden_files_have_cases():
    stale = {p.stem for p in GOLDEN.glob("*.py")} - set(CASES)
    assert not stale, f"golden files without a case: {sorted(stale)}"
