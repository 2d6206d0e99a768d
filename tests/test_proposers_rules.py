"""The rules and random proposers: n valid, distinct specs for any problem, only values the
backend declares, split-K where the grid cannot fill the GPU, TMA only on aligned operands,
history skipped, deterministic."""

from __future__ import annotations

import pytest

from cudal2.bench.results import CandidateResult, Timing
from cudal2.codegen import get_backend, refresh, register
from cudal2.codegen.base import Backend
from cudal2.ir import ARCHS, Capabilities, GemmProblem, KernelSpec, check_compatible, options
from cudal2.proposers import available_proposers, get_proposer
from cudal2.proposers.rules import RulesProposer

SHAPES = [
    (1, 1, 1), (7, 13, 29), (16, 16, 16), (127, 33, 4097), (512, 128, 8192), (1000, 1000, 1000),
    (64, 8192, 64), (16384, 16, 16384), (8192, 1, 8192), (4096, 4096, 4096), (12288, 128, 12288),
    (16384, 16384, 16384),
]


def assert_valid_and_distinct(problem, proposals, n):
    assert len(proposals) == n
    keys = [p.spec.key() for p in proposals]
    assert len(set(keys)) == n
    for p in proposals:
        again = KernelSpec.from_dict(p.spec.to_dict())  # re-validated from scratch
        check_compatible(problem, again)
        assert get_backend(again.backend).supports(problem, again)
        assert again.smem_bytes() <= ARCHS[again.arch].smem_per_block
        assert p.reasoning and p.source


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rules_gives_n_valid_distinct_specs(shape, arch):
    problem = GemmProblem.parse(shape)
    proposals = RulesProposer(arch=arch).propose(problem, [], n=12)
    assert_valid_and_distinct(problem, proposals, 12)
    assert f"{ARCHS[arch].sm_count} SMs" in proposals[0].reasoning


@pytest.mark.parametrize("layout", ["NT", "TN", "TT"])
def test_rules_other_layouts_and_bf16(layout):
    problem = GemmProblem(m=300, n=517, k=2048, layout=layout, dtype="bfloat16")
    assert_valid_and_distinct(problem, RulesProposer().propose(problem, [], n=8), 8)


def test_split_k_for_a_grid_that_cannot_fill_the_gpu():
    problem = GemmProblem(m=512, n=128, k=8192)
    proposals = RulesProposer().propose(problem, [], n=8)
    top = proposals[0]
    assert top.spec.decomposition == "split_k" and top.spec.split_k >= 2
    assert sum(p.spec.decomposition == "split_k" for p in proposals) >= 6
    assert f"split_k={top.spec.split_k}" in top.reasoning and "wave" in top.reasoning
    # the split fills most of one wave of 132 SMs
    tiles = -(-512 // top.spec.block_m) * -(-128 // top.spec.block_n)
    assert 0.5 <= tiles * top.spec.split_k / 132 <= 1.0


def test_triton_split_k_reduces_in_one_launch_where_that_measured_ahead():
    # on sm_90a the serial reduction (no second kernel, the same bits) measured 0.86 us ahead of the workspace's
    # in the median over 24 train shapes (factors.csv); on sm_80 it is unmeasured and ranks just after it
    problem = GemmProblem(m=16, n=3072, k=3072, layout="NT")
    for arch, first, second in (("sm_90a", "serial", "workspace"), ("sm_80", "workspace", "serial")):
        rules = RulesProposer(arch=arch)
        split = [p.spec for p in rules.propose(problem, [], n=16) if p.spec.decomposition == "split_k"]
        assert split and split[0].split_k_reduction == first, (arch, [s.summary() for s in split])
        f = split[0].to_dict()
        assert rules._model_us(problem, {**f, "split_k_reduction": first}) < \
            rules._model_us(problem, {**f, "split_k_reduction": second})


def test_no_split_k_when_the_grid_fills_the_gpu():
    proposals = RulesProposer().propose(GemmProblem(m=4096, n=4096, k=4096), [], n=8)
    assert all(p.spec.decomposition == "data_parallel" for p in proposals)
    assert proposals[0].spec.block_m * proposals[0].spec.block_n >= 128 * 128  # large tiles first


def test_tma_only_when_aligned_and_only_on_hopper():
    aligned = RulesProposer().propose(GemmProblem(m=1000, n=2048, k=4096), [], n=12)
    assert any(p.spec.load_path == "tma" for p in aligned)
    assert any(p.spec.load_path == "pointer" for p in aligned)  # both, to compare
    for shape, layout in [((1000, 2048, 4095), "NN"), ((1001, 2048, 4096), "TN"), ((1000, 2047, 4096), "NN")]:
        props = RulesProposer().propose(GemmProblem.parse(shape, layout=layout), [], n=12)
        assert not any(p.spec.load_path == "tma" for p in props), (shape, layout)
        assert "TMA needs 16-byte aligned" in props[0].reasoning
    on_a100 = RulesProposer(arch="sm_80").propose(GemmProblem(m=1000, n=2048, k=4096), [], n=12)
    assert not any(p.spec.load_path == "tma" for p in on_a100)


def test_persistent_and_raster_group_follow_the_grid_and_l2():
    props = RulesProposer().propose(GemmProblem(m=16384, n=16384, k=16384), [], n=12)
    assert any(p.spec.persistent for p in props)
    assert all(p.spec.raster_group > 1 for p in props)
    assert "L2" in props[0].reasoning
    small = RulesProposer().propose(GemmProblem(m=512, n=128, k=8192), [], n=4)
    assert not any(p.spec.persistent for p in small)  # one wave: nothing to persist over


def test_the_device_profile_changes_the_plan():
    import dataclasses

    from cudal2.ir import DeviceProfile

    pcie = dataclasses.replace(DeviceProfile.of_arch("sm_90a"), name="H100 PCIe", sm_count=114)
    p = RulesProposer(device=pcie).propose(GemmProblem(m=512, n=128, k=8192), [], n=1)[0]
    assert "114 SMs" in p.reasoning


def test_history_is_skipped():
    problem = GemmProblem(m=2048, n=1024, k=777)
    rules = RulesProposer()
    first = rules.propose(problem, [], n=8)
    history = [CandidateResult(spec=p.spec, status="ok", timing={"offline": Timing(0.1, 0.11, 10)}) for p in first]
    second = rules.propose(problem, history, n=8)
    assert len(second) == 8
    assert not {p.spec.key() for p in first} & {p.spec.key() for p in second}


def test_a_spec_measured_as_its_shape_generic_kernel_or_under_measurement_is_not_new():
    """A search measures an "auto" proposal as its shape-generic kernel (Refiner.kernel_of): the
    history holds the "dynamic" spec, and a rules proposal of the same "auto" spec is no new one."""
    problem = GemmProblem(m=2048, n=1024, k=4096)
    rules = RulesProposer()
    first = rules.propose(problem, [], n=6)
    assert all(p.spec.shape_specialization == "auto" for p in first)
    measured = [CandidateResult(spec=p.spec.replace(shape_specialization="dynamic"), status="ok",
                                timing={"offline": Timing(0.1, 0.11, 10)}) for p in first[:3]]
    again = rules.propose(problem, measured, n=6, pending=[p.spec for p in first[3:]])
    assert len(again) == 6 and not {p.spec.key() for p in first} & {p.spec.key() for p in again}


def test_failed_configurations_sink():
    problem = GemmProblem(m=4096, n=4096, k=4096)
    first = RulesProposer().propose(problem, [], n=4)
    failed = [CandidateResult(spec=first[0].spec, status="compile_error", reason="out of resource")]
    again = RulesProposer().propose(problem, failed, n=4)
    top = first[0].spec
    same_family = [p for p in again[:2] if (p.spec.block_m, p.spec.block_n, p.spec.block_k, p.spec.num_warps,
                                            p.spec.stages, p.spec.load_path) ==
                   (top.block_m, top.block_n, top.block_k, top.num_warps, top.stages, top.load_path)]
    assert not same_family


def test_rules_is_deterministic():
    problem = GemmProblem(m=3000, n=700, k=5000, layout="NT")
    a = RulesProposer().propose(problem, [], n=10)
    b = RulesProposer().propose(problem, [], n=10)
    assert [(p.spec.key(), p.reasoning) for p in a] == [(p.spec.key(), p.reasoning) for p in b]


def test_rules_is_diverse():
    props = RulesProposer().propose(GemmProblem(m=4096, n=4096, k=4096), [], n=12)
    assert len({(p.spec.block_m, p.spec.block_n) for p in props}) >= 4


# ---- capabilities decide what may be proposed -----------------------------------------------------

NARROW = {
    "block_m": [64], "block_n": [64, 128], "block_k": [32], "num_warps": [4], "stages": [2, 3],
    "raster_group": [1, 4], "raster_order": ["along_n"], "persistent": [False], "load_path": ["pointer"],
    "decomposition": ["data_parallel"], "mma": ["auto"], "cluster_m": [1], "cluster_n": [1],
    "warp_specialization": ["none"], "smem_padding": [0], "smem_swizzle": ["none"],
    "epilogue_path": ["registers"], "epilogue_subtile": [1],
}


class NarrowBackend(Backend):
    name = "narrow_test"
    capabilities = Capabilities(options=options(**NARROW))
    templates = {"x": "x.j2"}


@pytest.fixture
def narrow_backend():
    register("narrow_test", NarrowBackend)
    yield "narrow_test"
    refresh()


@pytest.mark.parametrize("proposer", ["rules", "random"])
def test_only_declared_values_are_proposed(narrow_backend, proposer):
    problem = GemmProblem(m=5000, n=300, k=9000)
    props = get_proposer(proposer, backends=(narrow_backend,)).propose(problem, [], n=6)
    assert len(props) == 6  # 2 tiles x 2 stages x 2 raster groups = 8 specs exist
    for p in props:
        d = p.spec.to_dict()
        for name, allowed in NARROW.items():
            assert d[name] in allowed, (name, d[name])
    # the space holds 8 specs in all; asking for more returns what exists, no invalid filler
    assert len(get_proposer(proposer, backends=(narrow_backend,)).propose(problem, [], n=20)) == 8


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (64, 64, 64), (512, 128, 8192), (4096, 4096, 4096)])
def test_persistent_only_backend_gets_specs_for_small_grids(shape):
    # cute_dsl declares persistent=[True] only: a grid too small to want a persistent kernel
    # must still get n specs (it once got none).
    problem = GemmProblem(m=shape[0], n=shape[1], k=shape[2])
    props = RulesProposer(backends=("cute_dsl",), arch="sm_90a").propose(problem, [], 6)
    assert len(props) == 6
    for p in props:
        assert p.spec.backend == "cute_dsl" and p.spec.persistent
        assert get_backend("cute_dsl").supports(problem, p.spec)


def test_several_backends_share_one_ranking():
    problem = GemmProblem(m=4096, n=4096, k=4096)
    props = RulesProposer(backends=("triton", "cute_dsl")).propose(problem, [], n=12)
    assert_valid_and_distinct(problem, props, 12)
    assert {p.spec.backend for p in props} <= {"triton", "cute_dsl"}


def test_a_backend_that_cannot_target_the_arch_is_refused():
    with pytest.raises(ValueError, match="supports sm_80"):
        RulesProposer(backends=("cute_dsl",), arch="sm_80")
    with pytest.raises(KeyError, match="unknown backend"):
        RulesProposer(backends=("nope",))


# ---- random ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1, 1), (127, 33, 4097), (4096, 4096, 4096)], ids=str)
def test_random_gives_valid_distinct_specs(shape):
    problem = GemmProblem.parse(shape)
    props = get_proposer("random", seed=3).propose(problem, [], n=10)
    assert_valid_and_distinct(problem, props, 10)


def test_random_is_seeded_and_skips_history():
    problem = GemmProblem(m=1024, n=512, k=2048)
    a = get_proposer("random", seed=7).propose(problem, [], n=8)
    b = get_proposer("random", seed=7).propose(problem, [], n=8)
    c = get_proposer("random", seed=8).propose(problem, [], n=8)
    assert [p.spec.key() for p in a] == [p.spec.key() for p in b] != [p.spec.key() for p in c]
    history = [CandidateResult(spec=p.spec, status="timeout") for p in a]
    again = get_proposer("random", seed=7).propose(problem, history, n=8)
    assert len(again) == 8 and not {p.spec.key() for p in a} & {p.spec.key() for p in again}


def test_registry():
    assert available_proposers() == ["learned", "llm", "llm+learned", "random", "rules"]
    assert get_proposer("rules", arch="sm_80").arch == "sm_80"
    with pytest.raises(KeyError, match="available: learned, llm, llm\\+learned, random, rules"):
        get_proposer("genetic")


# ---- proposals run: CPU interpreter on small odd shapes, and the GPU ---------------------------------

def _run(problem: GemmProblem, spec: KernelSpec, seed: int = 0, device: str = "cpu"):
    """Relative Frobenius error of the rendered, compiled spec against an fp32 torch reference."""
    import torch

    backend = get_backend(spec.backend)
    kernel = backend.compile(backend.render(problem, spec))
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, problem.dtype)
    A = torch.randn(problem.m, problem.k, generator=g).to(dt).to(device)
    B = torch.randn(problem.k, problem.n, generator=g).to(dt).to(device)
    a = A if problem.a_row_major else A.t().contiguous().t()
    b = B if problem.b_row_major else B.t().contiguous().t()
    out = kernel(a, b)
    ref = A.float() @ B.float()
    assert not torch.isnan(out).any()
    return ((out.float() - ref).norm() / ref.norm()).item(), kernel, (a, b)


@pytest.mark.parametrize("proposer", ["rules", "random"])
@pytest.mark.parametrize("shape,layout", [((37, 45, 70), "TN"), ((64, 48, 512), "NN"), ((33, 64, 1000), "NT")],
                         ids=str)
def test_proposals_compute_the_right_product_in_the_interpreter(proposer, shape, layout, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path))
    problem = GemmProblem.parse(shape, layout=layout)
    for p in get_proposer(proposer, seed=1).propose(problem, [], n=3) if proposer == "random" else \
            get_proposer(proposer).propose(problem, [], n=3):
        err, _, _ = _run(problem, p.spec)
        assert err < 5e-3, (p.spec.key(), err)


GPU_SHAPES = [(512, 128, 8192), (127, 33, 4097), (2048, 1024, 2048), (12288, 128, 12288), (4096, 4096, 4096),
              (8192, 8192, 1024)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rules_proposals_run_correctly_on_the_gpu(shape):
    """Every top proposal compiles and is correct on the real device (its arch and SM count).
    Times are printed for the record (run with -s), never asserted."""
    import torch
    from triton.testing import do_bench

    from cudal2.ir import arch_from_capability

    props = torch.cuda.get_device_properties(0)
    arch = arch_from_capability(props.major, props.minor)
    rules = RulesProposer(arch=arch)  # the live device's profile
    problem = GemmProblem.parse(shape)
    a0 = torch.randn(problem.m, problem.k, device="cuda", dtype=torch.float16)
    b0 = torch.randn(problem.k, problem.n, device="cuda", dtype=torch.float16)
    torch_ms = do_bench(lambda: torch.mm(a0, b0))
    lines = [f"{problem.label()} on {props.name}: torch.mm {torch_ms * 1e3:.1f} us"]
    for rank, p in enumerate(rules.propose(problem, [], n=4)):
        err, kernel, (a, b) = _run(problem, p.spec, seed=rank, device="cuda")
        assert err < 1e-3, (p.spec.key(), err)
        c = torch.empty(problem.m, problem.n, device="cuda", dtype=torch.float16)
        ms = do_bench(lambda: kernel(a, b, c))
        s = p.spec
        lines.append(f"  #{rank} {ms * 1e3:8.1f} us  x{torch_ms / ms:4.2f}  err {err:.1e}  {s.block_m}x{s.block_n}x"
                     f"{s.block_k} w{s.num_warps} s{s.stages} {s.load_path} {s.decomposition}/{s.split_k} "
                     f"{s.split_k_reduction if s.split_k > 1 else ''} persistent={s.persistent} | {p.reasoning}")
    print("\n".join(lines))


def test_cute_dsl_rules_use_the_tma_store_except_for_split_k_partials():
    from cudal2.api import resolve_proposer

    p = resolve_proposer("rules", ("cute_dsl",), "sm_90a")
    big = [x.spec for x in p.propose(GemmProblem(m=4096, n=4096, k=4096), [], 6)]
    assert big and all(s.epilogue_path == "tma_store" for s in big)
    assert any(s.cluster_m * s.cluster_n == 2 for s in big)  # multi-wave grid: clustered variants
    deep = [x.spec for x in p.propose(GemmProblem(m=512, n=128, k=8192), [], 6)]
    split = [s for s in deep if s.decomposition == "split_k"]
    assert split and all(s.epilogue_path == "registers" for s in split)


def test_cute_dsl_rules_rank_pingpong_first_and_128x256_with_four_stages_first_of_the_cooperative():
    # Ping-pong 128x128 in a 1x2 cluster, 5 stages, raster group 8 along M, was the fastest kernel on
    # the four large shapes (4096^3, 8192^3, 16384x16384x4096, 1024x16384x8192; H100). Of the
    # cooperative kernels: the TMA-store epilogue stages 32 KiB, not the 64 KiB tile, so 4 stages of
    # 128x256x64 fit (192 + 32 KiB); and the measured tall-tile factor puts 128x256 ahead of 256x128.
    from cudal2.api import resolve_proposer

    p = resolve_proposer("rules", ("cute_dsl",), "sm_90a")
    for shape in ((8192, 8192, 8192), (1024, 16384, 8192), (4096, 4096, 4096)):
        specs = [x.spec for x in p.propose(GemmProblem.parse(shape), [], 6)]
        first = specs[0]
        assert (first.warp_specialization, first.block_m, first.block_n, first.cluster_m, first.cluster_n,
                first.stages, first.raster_group, first.raster_order) == \
            ("pingpong", 128, 128, 1, 2, 5, 8, "along_m"), first.summary()
        # of the cooperative tiles measured there (powers of two and 192x192; the widths between them
        # were not), 128x256 with 4 stages comes first
        measured = {(128, 256), (256, 128), (192, 192), (128, 128)}
        coop = next(s for s in specs if s.warp_specialization == "cooperative" and (s.block_m, s.block_n) in measured)
        assert (coop.block_m, coop.block_n, coop.stages) == (128, 256, 4), coop.summary()
        assert all(s.stages <= 5 for s in specs if s.warp_specialization == "pingpong")


def test_cute_dsl_rules_offer_pingpong_only_where_every_cta_gets_two_tiles():
    # with one tile per CTA the second consumer warpgroup has nothing to do
    from cudal2.api import resolve_proposer

    p = resolve_proposer("rules", ("cute_dsl",), "sm_90a")
    for shape in ((2048, 1024, 2048), (256, 4096, 2048), (512, 512, 12288)):  # 128, 64, 16 tiles of 128x128
        specs = [x.spec for x in p.propose(GemmProblem.parse(shape), [], 12)]
        assert not any(s.warp_specialization == "pingpong" for s in specs), shape
    triton = resolve_proposer("rules", ("triton",), "sm_90a")  # declares no warp specialization
    assert not any(x.spec.warp_specialization == "pingpong"
                   for x in triton.propose(GemmProblem(m=8192, n=8192, k=8192), [], 12))


def test_cute_dsl_rules_offer_stream_k_only_where_the_last_wave_is_ragged():
    from cudal2.api import resolve_proposer

    p = resolve_proposer("rules", ("cute_dsl",), "sm_90a")
    few_tiles = [x.spec for x in p.propose(GemmProblem(m=12288, n=256, k=16384), [], 8)]
    assert any(s.decomposition == "stream_k" for s in few_tiles)
    assert any(s.decomposition == "data_parallel" for s in few_tiles)  # measured against it
    even = [x.spec for x in p.propose(GemmProblem(m=8192, n=8192, k=4096), [], 8)]
    assert not any(s.decomposition == "stream_k" for s in even)
    triton = resolve_proposer("rules", ("triton",), "sm_90a")  # does not declare stream-K
    assert not any(x.spec.decomposition == "stream_k"
                   for x in triton.propose(GemmProblem(m=12288, n=256, k=16384), [], 8))


def test_cute_dsl_rules_offer_stream_k_in_clusters_but_never_more_than_max():
    # a cluster's CTAs walk the same k-range of neighbouring tiles: in a 1x2 cluster 128x128 stream-K
    # took 12288x256x16384 from 246 to 185 us on the H100; a ragged deep-K grid would otherwise fill
    # most of the list with stream-K variants
    from cudal2.api import resolve_proposer
    from cudal2.proposers.rules import MAX_STREAM_K

    p = resolve_proposer("rules", ("cute_dsl",), "sm_90a")
    specs = [x.spec for x in p.propose(GemmProblem(m=12288, n=256, k=16384), [], 12)]
    sk = [s for s in specs if s.decomposition == "stream_k"]
    assert 1 <= len(sk) <= MAX_STREAM_K, [s.summary() for s in specs]
    assert any(s.cluster_m * s.cluster_n == 2 for s in sk), [s.summary() for s in sk]
    # a nearly full last wave (1024x16384x8192 in 256x128 tiles: 3.88 waves) is left data-parallel
    near_full = [x.spec for x in p.propose(GemmProblem(m=1024, n=16384, k=8192), [], 12)]
    assert not any(s.block_m == 256 and s.block_n == 128 and s.decomposition == "stream_k" for s in near_full)


@pytest.mark.parametrize("shape, order", [((12288, 256, 16384), "along_n"), ((256, 12288, 12288), "along_m")])
def test_cute_dsl_stream_k_numbers_its_tiles_so_lanes_keep_the_larger_operand_in_step(shape, order):
    # the CuTe DSL kernel's stream-K lanes keep a column's tiles (raster along M: B's panel) or a row's (along N:
    # A's) at the same k; on the tall 12288x256x16384 A is the large operand, so its rows must be the lanes
    from cudal2.api import resolve_proposer

    p = resolve_proposer("rules", ("cute_dsl",), "sm_90a")
    specs = [x for x in p.propose(GemmProblem.parse(shape), [], 12) if x.spec.decomposition == "stream_k"]
    assert specs and all(x.spec.raster_order == order for x in specs), [x.spec.summary() for x in specs]
    dp = [x for x in p.propose(GemmProblem.parse(shape), [], 12) if x.spec.decomposition == "data_parallel"]
    if order == "along_n":  # the data-parallel kernels keep the L2 rule's order
        assert "stream-K tiles numbered along_n" in specs[0].reasoning
        assert all(x.spec.raster_order == "along_m" for x in dp if x.spec.backend == "cute_dsl")


def test_cute_dsl_rules_put_split_k_in_the_cluster_that_measured_ahead():
    # On 512x512x12288 every split-K kernel measured 2-17% faster in a cluster, most where it multicasts
    # the wider of the CTA's tiles (64x128: 2x1); on 512x128x8192, whose B is 2 MiB, clusters moved the same
    # kernels by -5% to +3%, so its split-K stays unclustered first (cute_dsl_splitk_clusters.md)
    from cudal2.api import resolve_proposer

    p = resolve_proposer("rules", ("cute_dsl",), "sm_90a")
    deep = [x.spec for x in p.propose(GemmProblem(m=512, n=512, k=12288), [], 12)]
    split = [s for s in deep if s.decomposition == "split_k"]
    # (where the grid's side along the wider tile does not divide by two, as 128x80's 7 tiles along N do
    # not, the cluster that pays has no form, and the other one is modelled even with none)
    along_wider = lambda s: -(-512 // s.block_m) if s.block_n > s.block_m else -(-512 // s.block_n)  # noqa: E731
    clusterable = [s for s in split if along_wider(s) % 2 == 0]
    assert clusterable and all(s.cluster_m * s.cluster_n == 2 for s in clusterable), [s.summary() for s in deep]
    for s in split:
        # the cluster divides the tile grid and shares the wider tile (a square one: along N here)
        assert -(-512 // s.block_m) % s.cluster_m == 0 and -(-512 // s.block_n) % s.cluster_n == 0
        assert (s.cluster_m == 2) == (s.block_n > s.block_m), s.summary()
    assert any((s.block_m, s.block_n, s.cluster_m) == (64, 128, 2) for s in split)
    small_b = [x.spec for x in p.propose(GemmProblem(m=512, n=128, k=8192), [], 12)]
    first = next(s for s in small_b if s.decomposition == "split_k")
    assert first.cluster_m * first.cluster_n == 1, first.summary()


def test_cute_dsl_rules_put_one_k_step_kernels_alone_first():
    # With one k-step per tile the multicast saves one L2 read per output tile: on 16384x256x64 all six
    # kernels tried ran 1-6% faster alone than in 1x2, in two runs (cute_dsl_short_k_clusters.md). Two
    # k-steps keep the cluster's gain (16384x512x128: ping-pong 128x128 9.1-9.3 us in 1x2, 9.3-9.6 alone).
    p = RulesProposer(backends=("cute_dsl",))
    one_step = [x.spec for x in p.propose(GemmProblem(m=16384, n=256, k=64), [], 12)]
    dp = [s for s in one_step if s.warp_specialization == "cooperative"]
    assert dp and all(s.cluster_m * s.cluster_n == 1 for s in dp), [s.summary() for s in one_step]
    two_steps = [x.spec for x in p.propose(GemmProblem(m=16384, n=256, k=128), [], 12)]
    assert two_steps[0].cluster_m * two_steps[0].cluster_n == 2, [s.summary() for s in two_steps]


def test_rules_model_counts_the_cluster_slot_a_ragged_grid_leaves_empty():
    # a 1x2 cluster on a grid one tile wide leaves each cluster's second CTA without a tile (128x128 in
    # 1x2 on 16384x128x128 ran 12-17% slower than alone); the model counts those slots (a grid three tiles
    # wide takes two clusters of two), and a grid that divides by the cluster as it is
    p = RulesProposer(backends=("cute_dsl",))
    f = KernelSpec(backend="cute_dsl", arch="sm_90a", block_m=128, block_n=128, block_k=64, num_warps=12, stages=4,
                   load_path="tma", warp_specialization="cooperative", persistent=True,
                   epilogue_path="tma_store").to_dict()
    three = GemmProblem(m=16384, n=384, k=8192)  # compute-bound, so the DRAM floor does not hide the grid
    alone, ragged = p._model_us(three, f), p._model_us(three, {**f, "cluster_n": 2})
    assert ragged > 1.25 * alone, (alone, ragged)
    even = GemmProblem(m=16384, n=512, k=8192)
    assert p._model_us(even, {**f, "cluster_n": 2}) == p._model_us(even, f)


def test_rules_model_never_charges_a_deeper_pipeline_more():
    # every stage but the first fills while the first is computed: 64x128x128 split-K with 4 stages
    # measured 22.5 us on 512x512x12288 against 24.4 us with 3, and the model ranked 3 first
    p = RulesProposer(backends=("cute_dsl",))
    problem = GemmProblem(m=512, n=512, k=12288)
    base = dict(backend="cute_dsl", block_m=64, block_n=128, num_warps=8, smem_padding=0, load_path="tma",
                warp_specialization="cooperative", decomposition="split_k", split_k=4,
                split_k_reduction="workspace", persistent=True, epilogue_path="registers", cluster_m=2, cluster_n=1)
    for block_k, depths in ((128, (2, 3, 4)), (64, (2, 3, 4, 6, 8))):
        times = [p._model_us(problem, {**base, "block_k": block_k, "stages": s}) for s in depths]
        assert times == sorted(times, reverse=True), (block_k, times)
    top = [x.spec for x in p.propose(problem, [], 12)]
    assert not any(s.block_k == 128 and s.block_m * s.block_n <= 64 * 128 and s.stages == 3 for s in top)


def test_tall_outputs_get_swapped_cute_dsl_proposals_and_wide_ones_do_not():
    rules = RulesProposer(backends=("cute_dsl",))
    tall = rules.propose(GemmProblem(m=12288, n=256, k=16384), n=8)
    swapped = [p.spec for p in tall if p.spec.swap_ab]
    assert swapped and any(not p.spec.swap_ab for p in tall)
    for s in swapped:  # each one valid for the kernel that computes D^T, and no ping-pong
        assert s.decomposition == "data_parallel" and s.warp_specialization == "cooperative"
    # the swapped kernel's M is D's N: 64 rows per consumer warpgroup must divide block_n
    assert all(s.block_n % (64 * (s.num_warps // 4 - 1)) == 0 for s in swapped)
    wide = rules.propose(GemmProblem(m=256, n=12288, k=12288), n=8)
    assert not any(p.spec.swap_ab for p in wide)
    assert not any(p.spec.swap_ab for p in RulesProposer(backends=("triton",)).propose(
        GemmProblem(m=12288, n=256, k=16384), n=8))


@pytest.mark.parametrize("shape, first", [
    # a 1x2 cluster (A's tile shared) measured ahead of 2x1 on the H100 on tall and large grids...
    ("12288x256x16384", (1, 2)), ("4096x128x4096", (1, 2)), ("4096x4096x4096", (1, 2)),
    # ...and a 2x1 (B's tile shared) on short, wide ones: 256x2048x4096 11.5 us against 14.4
    ("256x2048x4096", (2, 1)), ("256x12288x12288", (2, 1)), ("512x4096x4096", (2, 1)),
])
def test_clusters_rank_in_the_direction_that_measured_ahead(shape, first):
    rules = RulesProposer(backends=("cute_dsl",))
    picks = [p.spec for p in rules.propose(GemmProblem.parse(shape), n=12)
             if p.spec.cluster_m * p.spec.cluster_n == 2 and p.spec.decomposition == "data_parallel"]
    assert picks and (picks[0].cluster_m, picks[0].cluster_n) == first, shape


def test_warp_specialized_depth_counts_the_ctas_whole_walk():
    # A persistent warp-specialized CTA loads its next tile through the same pipeline: on 16384x512x128
    # ping-pong 128x128x64 measured 12.1 us with 2 stages (one tile's k-steps) and 9.2 with 5
    # (cute_dsl_walk_stages.md). A CTA with one tile of one k-step has nothing to load ahead.
    p = RulesProposer(backends=("cute_dsl",))
    short_k = [x.spec for x in p.propose(GemmProblem(m=16384, n=512, k=128), [], 12)]
    pingpong = [s for s in short_k if s.warp_specialization == "pingpong" and s.block_k == 64]
    assert pingpong and max(s.stages for s in pingpong) == 5, [s.summary() for s in short_k]
    one_tile = [x.spec for x in p.propose(GemmProblem(m=128, n=1024, k=64), [], 12)]
    assert all(s.stages == 2 for s in one_tile if s.block_m >= 128 and s.block_n >= 128 and s.block_k == 64), \
        [s.summary() for s in one_tile]
    # kernels without warp specialization walk one tile's k-steps, as before
    triton = RulesProposer(backends=("triton",))
    assert all(x.spec.stages <= 2 for x in triton.propose(GemmProblem(m=16384, n=512, k=128), [], 12)
               if x.spec.block_k == 64)


# ---- cute_dsl: every declared width, ranked by the wave model ---------------------------------------

ODD_SHAPES = ["7x16384x3072", "1x4096x4096", "13824x5120x640", "5120x5120x5120", "128x8192x3584", "127x40x4104",
              "12288x256x16384", "1000x1000x1000", "3x24x65536"]  # TMA: 16-byte aligned leading dims


@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_cute_dsl_proposals_from_every_width_are_valid(shape):
    problem = GemmProblem.parse(shape)
    assert_valid_and_distinct(problem, RulesProposer(backends=("cute_dsl",)).propose(problem, [], n=16), 16)


@pytest.mark.parametrize("shape", ["4096x4096x4096", "5120x5120x5120", "8192x8192x4096", "13824x5120x640"])
def test_cute_dsl_rules_reach_widths_between_the_powers_of_two_on_large_grids(shape):
    # 5120 in 128x128 tiles is 1600 tiles, 12.1 waves of 132 SMs; widths such as 160 or 224 fill the last
    # wave better, and the model (waves rounded up times per-tile time) ranks them into the first picks
    from cudal2.codegen import get_backend
    from cudal2.proposers import space

    declared = set(space.domain(get_backend("cute_dsl").capabilities, "block_n", "sm_90a"))
    specs = [x.spec for x in RulesProposer(backends=("cute_dsl",)).propose(GemmProblem.parse(shape), [], n=12)]
    between = [s for s in specs[:8] if {s.block_m, s.block_n} - {64, 128, 256}]
    assert between and all({s.block_m, s.block_n} <= declared for s in specs), [s.summary() for s in specs]


def test_cute_dsl_small_m_keeps_its_smallest_tiles_and_spans_tile_sizes():
    rules = RulesProposer(backends=("cute_dsl",))
    for shape in ("7x16384x3072", "1x4096x4096", "16x8192x8192"):
        specs = [x.spec for x in rules.propose(GemmProblem.parse(shape), [], n=8)]
        assert all(s.block_m == 64 for s in specs), (shape, [s.summary() for s in specs])  # the kernel's fewest rows
    # every tile of 7x16384x3072 sits at the DRAM floor; the size classes keep the list from being 256, 240,
    # 224, ... wide: it spans the sizes the old list had (256 down to 32)
    specs = [x.spec for x in rules.propose(GemmProblem.parse("7x16384x3072"), [], n=8)]
    assert min(s.block_n for s in specs) <= 64 and max(s.block_n for s in specs) == 256, [s.summary() for s in specs]
