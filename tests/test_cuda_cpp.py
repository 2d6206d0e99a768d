"""cuda_cpp backend on the CPU: its declaration and refusals, the policy it decides alone (warp
layout, swizzle, vector widths), shape-generic rendering, operand checks, the rules proposer with it,
and a covering set of kernels compiled for sm_80 with nvcc whose PTX, SASS (nvdisasm) and ptxas
report must show what each spec asked for. The covering set holds every declared value of every
field, and every (layout, dtype) and (epilogue path, split-K) pair, in eight kernels (about 15-45 s
of nvcc each) compiled in parallel, once per run however many pytest-xdist workers run their tests;
tests/test_gpu_cuda_cpp.py runs the same kernels on a GPU."""

from __future__ import annotations

import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from cudal2.codegen import cuda_cpp_toolchain as toolchain
from cudal2.codegen.cuda_cpp import (CAPABILITIES, CudaCppBackend, CudaCppKernel, smem_bytes, swizzle_bits, variant,
                                     warp_layout)
from cudal2.codegen.registry import get_backend
from cudal2.ir import Epilogue, GemmProblem, KernelSpec, SpecError, arch_limits

BASE = dict(backend="cuda_cpp", arch="sm_80", load_path="cp_async", block_m=128, block_n=128, block_k=32,
            num_warps=4, stages=3)


def spec(**kw) -> KernelSpec:
    return KernelSpec(**{**BASE, **kw})


def problem(m=1024, n=1024, k=1024, **kw) -> GemmProblem:
    return GemmProblem(m=m, n=n, k=k, **kw)


# (name, problem fields, spec fields). Together: every declared value of every spec field, every
# (layout, dtype) pair, both epilogue paths with and without split-K, every vector width of A, B and
# C (8, 4, 2, 1 elements: the shapes' contiguous extents choose them), every activation, alpha,
# beta, bias and a differing output dtype.
COVERING = [
    ("nt-f16-128x128", dict(m=1024, n=1024, k=1024, layout="NT"),
     dict(block_m=128, block_n=128, block_k=32, num_warps=4, stages=3)),
    ("tn-bf16-smem-gelu", dict(m=1000, n=1000, k=512, layout="TN", dtype="bfloat16", out_dtype="float16",
                                epilogue=dict(bias=True, activation="gelu")),
     dict(block_m=64, block_n=128, block_k=64, num_warps=4, stages=4, smem_swizzle="128B", epilogue_path="smem",
          epilogue_subtile=2, raster_order="along_n", raster_group=4)),
    ("nn-f16-splitk-relu", dict(m=777, n=1004, k=1002, layout="NN", epilogue=dict(beta=0.5, activation="relu")),
     dict(block_m=256, block_n=64, block_k=32, num_warps=8, stages=5, smem_swizzle="32B",
          decomposition="split_k", split_k=3)),
    ("tt-bf16-pad8-silu", dict(m=1001, n=1026, k=1000, layout="TT", dtype="bfloat16",
                                epilogue=dict(alpha=2.0, activation="silu")),
     dict(block_m=32, block_n=256, block_k=32, num_warps=4, stages=6, smem_swizzle="none", smem_padding=8,
          epilogue_path="smem", epilogue_subtile=4)),
    ("nt-bf16-bk128-dynamic", dict(m=1024, n=999, k=1000, layout="NT", dtype="bfloat16"),
     dict(block_m=64, block_n=32, block_k=128, num_warps=2, stages=2, smem_swizzle="64B", mma="mma_sync",
          raster_order="along_n", raster_group=1, shape_specialization="dynamic")),
    ("nn-bf16-pad16-bias", dict(m=1000, n=1000, k=1004, layout="NN", dtype="bfloat16",
                                 epilogue=dict(beta=1.0, bias=True, activation="relu")),
     dict(block_m=32, block_n=64, block_k=32, num_warps=1, stages=7, smem_padding=16, epilogue_path="smem")),
    ("tn-f16-bk16-splitk-smem", dict(m=1002, n=1010, k=640, layout="TN"),
     dict(block_m=32, block_n=128, block_k=16, num_warps=2, stages=8, smem_swizzle="none",
          decomposition="split_k", split_k=2, epilogue_path="smem", epilogue_subtile=4, raster_group=2)),
    ("tt-f16-odd-k", dict(m=1000, n=998, k=999, layout="TT", epilogue=dict(alpha=0.5)),
     dict(block_m=64, block_n=64, block_k=64, num_warps=4, stages=3)),
]


def covering_case(name):
    p, s = next((p, s) for n, p, s in COVERING if n == name)
    p = dict(p)
    if "epilogue" in p:
        p["epilogue"] = Epilogue(**p["epilogue"])
    return GemmProblem(**p), spec(**s)


# ---- declaration and refusals ---------------------------------------------------------------------
def test_registered_through_the_entry_point_group():
    assert isinstance(get_backend("cuda_cpp"), CudaCppBackend)


@pytest.mark.parametrize("field, value", [
    ("arch", "sm_90a"), ("load_path", "pointer"), ("mma", "wgmma"), ("warp_specialization", "cooperative"),
    ("persistent", True), ("epilogue_path", "tma_store"), ("split_k_reduction", "atomic"), ("swap_ab", True),
    ("shape_specialization", "static"), ("num_warps", 16), ("stages", 1), ("block_m", 16),
])
def test_undeclared_values_refused_by_the_ir(field, value):
    kw = {field: value}
    if field == "arch":
        kw["load_path"] = "pointer"
    if field == "split_k_reduction":
        kw.update(decomposition="split_k", split_k=2)
    with pytest.raises(SpecError) as e:
        spec(**kw)
    assert field in e.value.fields


def test_other_backends_still_refuse_what_only_cuda_cpp_declares():
    with pytest.raises(SpecError) as e:
        KernelSpec(backend="triton", arch="sm_80", smem_padding=8, smem_swizzle="none")
    assert "smem_padding" in e.value.fields
    with pytest.raises(SpecError):
        KernelSpec(backend="triton", arch="sm_80", load_path="cp_async")


def test_template_refusals_name_the_field_and_a_fix():
    be = get_backend("cuda_cpp")
    cases = [
        (spec(block_m=32, block_n=32, num_warps=8, block_k=16), problem(), "num_warps"),  # 8 warps on 32x32
        (spec(block_m=32, block_n=32, block_k=16, num_warps=4), problem(), "block_k"),  # < one access per thread
        (spec(block_m=32, block_k=32, smem_swizzle="128B"), problem(layout="TN"), "smem_swizzle"),  # 32-wide M rows
        (spec(), problem(epilogue=Epilogue(alpha=float("inf"))), "problem.epilogue.alpha"),
    ]
    for s, p, field in cases:
        support = be.supports(p, s)
        assert not support and field in support.reason and "fix:" in support.reason, (field, support.reason)
    assert be.supports(problem(), spec())


def test_shared_memory_counted_within_the_ir_estimate_and_the_arch():
    for name, _, _ in COVERING:
        p, s = covering_case(name)
        assert smem_bytes(p, s) <= min(s.smem_bytes(), arch_limits("sm_80").smem_per_block), name


# ---- policy ----------------------------------------------------------------------------------------
def test_warp_layout_prefers_square_warp_tiles_that_split_into_16x16():
    assert warp_layout(128, 128, 4) == (2, 2)
    assert warp_layout(128, 256, 8) == (2, 4)
    assert warp_layout(256, 64, 8) == (8, 1)  # 32x64 and 64x32 tie: the taller one
    assert warp_layout(32, 256, 4) == (1, 4)
    assert warp_layout(32, 32, 8) is None


def test_variant_is_the_vector_width_of_each_contiguous_extent():
    assert variant(problem(1024, 1024, 1024, layout="NN")) == (8, 8, 8)
    assert variant(problem(1001, 1026, 1000, layout="TT")) == (1, 8, 2)  # A along M, B along K, C along N
    assert variant(problem(777, 1004, 1002, layout="NN")) == (2, 4, 4)


def test_swizzle_follows_the_contiguous_rows():
    assert swizzle_bits(spec(smem_swizzle="auto"), 32) == 2  # 64-byte rows of 32 fp16
    assert swizzle_bits(spec(smem_swizzle="auto"), 128) == 3
    assert swizzle_bits(spec(smem_swizzle="auto", smem_padding=8), 64) == 0  # padding instead
    assert swizzle_bits(spec(smem_swizzle="128B"), 32) is None


def test_one_text_per_problem_class_and_variant():
    be = get_backend("cuda_cpp")
    s = spec()
    a, b = problem(1024, 512, 256, layout="NT"), problem(4096, 8192, 64, layout="NT")
    odd = problem(1024, 512, 250, layout="NT")
    assert be.shape_key(a, s) == be.shape_key(b, s) == be.shape_key(odd, s) != a.key()
    assert be.variant_key(a, s) == be.variant_key(b, s) != be.variant_key(odd, s)
    assert be.render(a, s).text == be.render(b, s).text  # the shape is a kernel argument
    assert be.render(a, s).text != be.render(odd, s).text
    text = be.render(a, s).text
    for needle in ("kBlockM = 128", "kStages = 3", "SM80_16x8x16_F32F16F16F32_TN", "kAlignA = 8"):
        assert needle in text
    assert "1024" not in text and "4096" not in text


# ---- the kernel object (no GPU: operand checks only) -----------------------------------------------
def _kernel(p: GemmProblem, s: KernelSpec) -> CudaCppKernel:
    source = get_backend("cuda_cpp").render(p, s)
    binary = toolchain.Binary(target="sm_80", cubin=b"", ptx="")
    return CudaCppKernel(source, toolchain.LoadedModule(binary, (source.entry,), {}))


def test_operand_errors_are_value_errors_that_name_the_mismatch():
    p = problem(256, 128, 64, layout="NT", epilogue=Epilogue(bias=True))
    k = _kernel(p, spec())
    a = torch.zeros(256, 64, dtype=torch.float16)
    b = torch.zeros(128, 64, dtype=torch.float16).t()
    bias = torch.zeros(128, dtype=torch.float16)
    cases = [
        ((a, b.contiguous(), None, bias), "strides"),  # B row-major where NT wants column-major
        ((a.float(), b, None, bias), "dtype"),
        ((a, b, None, None), "bias"),
        ((a[:, :32], b, None, bias), "not (M, K) and (K, N)"),
        ((a, b, None, bias), "on cpu"),  # everything right but the device
        ((a, torch.zeros(100, 64, dtype=torch.float16).t(), None, torch.zeros(100, dtype=torch.float16)),
         "vectors"),  # N=100 allows 4-element vectors of C; the kernel was built for 8
    ]
    for args, needle in cases:
        with pytest.raises(ValueError, match=re.escape(needle)):
            k(*args)


# ---- the rules proposer and the search space with this backend ------------------------------------
def test_rules_propose_valid_cuda_cpp_specs_on_sm_80_beside_triton():
    from cudal2.proposers.rules import RulesProposer

    be = get_backend("cuda_cpp")
    for shape in ((4096, 4096, 4096), (1000, 1000, 1000), (128, 8192, 4096)):
        p = problem(*shape, layout="NT")
        props = RulesProposer(backends=("triton", "cuda_cpp"), arch="sm_80").propose(p, [], n=12)
        mine = [x for x in props if x.spec.backend == "cuda_cpp"]
        assert mine and {x.spec.backend for x in props} == {"triton", "cuda_cpp"}
        assert all(be.supports(p, x.spec) for x in mine)


def test_rules_on_hopper_leave_cuda_cpp_out_without_failing():
    from cudal2.proposers.rules import RulesProposer

    rules = RulesProposer(backends=("triton", "cuda_cpp"), arch="sm_90a")
    assert rules.backends == ["triton"] and rules.refused_backends == ["cuda_cpp"]
    with pytest.raises(ValueError, match="none of the backends"):
        RulesProposer(backends=("cuda_cpp",), arch="sm_90a")


def test_search_space_holds_the_declared_values():
    from cudal2.tuner.space import search_space

    options = {o.name: o for o in search_space(("triton", "cuda_cpp"), "sm_80")}
    assert set(options["backend"].choices) == {"triton", "cuda_cpp"}
    assert options["cuda_cpp:load_path"].choices == ("cp_async",) and options["triton:load_path"].choices == ("pointer",)
    assert {0, 8, 16} <= set(options["cuda_cpp:smem_padding"].choices)


# ---- compiling with nvcc -------------------------------------------------------------------------------
def _toolchain_missing() -> str:
    try:
        toolchain.find_nvcc()
        toolchain.cutlass_include_dir()
    except toolchain.ToolchainMissing as e:
        return str(e)
    return ""


needs_nvcc = pytest.mark.skipif(bool(_toolchain_missing()), reason=f"compile tests skipped: {_toolchain_missing()}")


@needs_nvcc
def test_compile_error_comes_back_with_the_first_compiler_lines(tmp_path):
    broken = "#include <cute/tensor.hpp>\n__global__ void cudal2_gemm() { undeclared_thing(); }\n"
    with pytest.raises(toolchain.CudaCompileError) as e:
        toolchain.compile_cuda(broken, "sm_80", tmp_path)
    assert "undeclared_thing" in str(e.value) and "error" in str(e.value)
    assert "CompileError" in type(e.value).__name__  # the evaluator files it as a compile error


FAKE_NVCC = """#!{python}
import pathlib, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    sys.exit(print("Cuda compilation tools, release 13.0, V13.0.88"))
with open({runs!r}, "a") as f:
    f.write("run\\n")
time.sleep(1.0)  # long enough that the other compile asks for the same unit meanwhile
out = pathlib.Path(args[args.index("-o") + 1])
out.write_bytes(b"cubin")
(pathlib.Path(args[args.index("--keep-dir") + 1]) / "kernel.ptx").write_text("// ptx")
"""


@pytest.mark.skipif(os.name != "posix", reason="the compile lock is a POSIX file lock")
def test_one_unit_wanted_by_two_compiles_at_once_runs_nvcc_once(tmp_path, monkeypatch):
    runs = tmp_path / "runs.txt"
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable, runs=str(runs)))
    nvcc.chmod(0o755)
    include = tmp_path / "include"
    (include / "cute").mkdir(parents=True)
    (include / "cute" / "tensor.hpp").write_text("")
    monkeypatch.setenv("CUDAL2_NVCC", str(nvcc))
    monkeypatch.setenv("CUDAL2_CUTLASS_INCLUDE", str(include))
    with ThreadPoolExecutor(max_workers=2) as pool:  # two workers that share a cache folder
        both = list(pool.map(lambda _: toolchain.compile_cuda("__global__ void k() {}", "sm_80", tmp_path / "cache"),
                             range(2)))
    assert runs.read_text().count("run") == 1
    assert sorted(b.from_cache for b in both) == [False, True] and both[0].cubin == both[1].cubin == b"cubin"


def test_every_declared_value_is_in_the_covering_set():
    specs = [covering_case(name)[1] for name, _, _ in COVERING]
    problems = [covering_case(name)[0] for name, _, _ in COVERING]
    for field, allowed in CAPABILITIES.options.items():
        if field.startswith("problem."):
            have = {getattr(p, field.split(".")[1]) for p in problems}
        else:
            have = {getattr(s, field) for s in specs}
        assert set(allowed) <= have, f"{field}: {sorted(set(allowed) - have, key=str)} never compiled"
    assert {(p.layout, p.dtype) for p in problems} == {(lay, d) for lay in ("NN", "NT", "TN", "TT")
                                                          for d in ("float16", "bfloat16")}
    assert {(s.epilogue_path, s.decomposition) for s in specs} == {(e, d) for e in ("registers", "smem")
                                                                    for d in ("data_parallel", "split_k")}
    widths = [variant(p) for p in problems]
    for i in range(3):
        assert {w[i] for w in widths} == {1, 2, 4, 8}
    assert {p.epilogue.activation for p in problems} == {"none", "relu", "gelu", "silu"}
    for name, _, _ in COVERING:
        p, s = covering_case(name)
        assert get_backend("cuda_cpp").supports(p, s), name


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """{name: (problem, spec, Binary)} for the covering set, compiled for sm_80 in parallel into a cache
    folder that every pytest-xdist worker shares. Each kernel is compiled once in a run: a worker that
    wants a kernel another worker is compiling waits for it (compile_cuda's lock) and reads its cubin,
    and odd workers take the set in reverse, so that two workers that start together split it."""
    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
    root = (base.parent if worker else base) / "cuda_cpp_cubins"
    names = [n for n, _, _ in COVERING]
    if worker and int(worker.removeprefix("gw") or 0) % 2:
        names.reverse()
    be = get_backend("cuda_cpp")

    def build(name):
        p, s = covering_case(name)
        return name, (p, s, toolchain.compile_cuda(be.render(p, s).text, "sm_80", root))

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(build, names))


def _expected_ptx(p: GemmProblem, s: KernelSpec) -> list[str]:
    """PTX the spec asks for: the mma, an ldmatrix per operand major order, the global->shared copy
    of each operand's vector width, and the output stores of the epilogue path."""
    va, vb, vc = variant(p)
    kind = {"float16": "f16", "bfloat16": "bf16"}[p.dtype]
    want = [f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32"]
    a_k_major, b_k_major = p.a_row_major, not p.b_row_major
    if a_k_major or b_k_major:
        want.append("ldmatrix.sync.aligned.x4.m8n8.shared.b16")
    if not (a_k_major and b_k_major):
        want.append("ldmatrix.sync.aligned.x4.trans.m8n8.shared.b16")
    for width in (va, vb):
        want.append({8: "cp.async.cg.shared.global.L2::128B", 4: "cp.async.ca.shared.global.L2::128B",
                     2: "cp.async.ca.shared.global.L2::128B", 1: "ld.global.b16"}[width])
    want.append("cp.async.commit_group")
    if s.decomposition == "split_k":  # fp32 partials: pairs from registers, vectors of C's width via smem
        want += ["st.global.v2.b32", ".entry cudal2_splitk_reduce"]
    elif s.epilogue_path == "registers" and vc >= 2:
        want.append("st.global.b32")  # a pair of 16-bit outputs
    elif s.epilogue_path == "smem" and vc >= 2:
        want.append({8: "st.global.v4.b32", 4: "st.global.v2.b32", 2: "st.global.b32"}[vc])
    return want


@needs_nvcc
@pytest.mark.parametrize("name", [n for n, _, _ in COVERING])
def test_covering_kernel_ptx_holds_what_the_spec_asked_for(compiled, name):
    p, s, binary = compiled[name]
    for needle in _expected_ptx(p, s):
        assert needle in binary.ptx, f"{name}: no {needle!r} in the PTX"
    # the pipeline waits for all but stages-2 groups: its depth is the spec's
    wait = "cp.async.wait_all;" if s.stages == 2 else f"cp.async.wait_group {s.stages - 2};"
    assert wait in binary.ptx


@needs_nvcc
@pytest.mark.parametrize("name", [n for n, _, _ in COVERING])
def test_covering_kernel_registers_and_no_spills(compiled, name):
    p, s, binary = compiled[name]
    res = binary.resources["cudal2_gemm"]
    assert 0 < res.registers <= 255
    assert res.spill_stores == 0 and res.spill_loads == 0, f"{name}: {res}"
    if s.decomposition == "split_k":
        reduce = binary.resources["cudal2_splitk_reduce"]
        assert reduce.spill_stores == 0 and reduce.registers <= 64


@needs_nvcc
@pytest.mark.parametrize("name", [n for n, _, _ in COVERING])
def test_covering_kernel_sass_holds_the_instructions(compiled, name):
    p, s, binary = compiled[name]
    sass = toolchain.disassemble(binary)
    if sass is None:
        pytest.skip("neither cuobjdump nor nvdisasm is installed (pip install nvidia-cuda-nvdisasm)")
    hmma = "HMMA.16816.F32.BF16" if p.dtype == "bfloat16" else "HMMA.16816.F32"
    assert re.search(rf"\b{re.escape(hmma)}\b", sass), f"{name}: no {hmma}"
    if p.a_row_major or not p.b_row_major:
        assert "LDSM.16.M88.4" in sass
    if not (p.a_row_major and not p.b_row_major):
        assert "LDSM.16.MT88.4" in sass
    va, vb, vc = variant(p)
    if 8 in (va, vb):
        assert "LDGSTS.E.BYPASS.LTC128B.128" in sass
    if s.epilogue_path == "smem" and vc == 8 and s.decomposition == "data_parallel":
        assert "STG.E.128" in sass


@needs_nvcc
def test_binaries_are_cached_by_source_and_target(compiled, tmp_path):
    p, s, binary = compiled["nt-f16-128x128"]
    again = toolchain.compile_cuda(get_backend("cuda_cpp").render(p, s).text, "sm_80", binary.path.parent)
    assert again.from_cache and again.cubin == binary.cubin and again.resources == binary.resources
