"""CuTe DSL backend on the CPU, its search space: shape-generic kernels (one module per problem class,
the calls each can serve, the grouped tile walk), and the tile widths and register budgets the hardware
allows (every quack sm90 config expressible, the new tile families compiled for sm_90a without spills)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

# test_cute_dsl sets the DSL's target for a machine without a GPU before anything imports the DSL
from test_cute_dsl import BASE, KEEP_PTX, needs_dsl, spec

from cudal2.codegen.cute_dsl import CuteDslBackend, gemm_config
from cudal2.ir import Epilogue, GemmProblem, KernelSpec, SpecError


@pytest.fixture(scope="module")
def backend(cute_dsl_backend):
    return cute_dsl_backend


# ---- shape-generic kernels ------------------------------------------------------------------------------
DYN = dict(shape_specialization="dynamic")


def test_a_shape_generic_module_is_one_per_problem_class():
    b = CuteDslBackend()
    s = spec(**DYN)
    one, two = GemmProblem(m=33, n=4096, k=4096, layout="NT"), GemmProblem(m=3001, n=1024, k=512, layout="NT")
    assert b.render(one, s).text == b.render(two, s).text
    assert b.shape_key(one, s) == b.shape_key(two, s) == one.class_key()
    assert b.render(one, s).text != b.render(one.replace(layout="NN"), s).text
    assert "MxNxK-float16-NT" in b.render(one, s).text and "m=None," in b.render(one, s).text
    assert b.shape_key(one, spec()) == one.key()  # a static kernel's is the problem itself


def test_shape_generic_split_k_is_compiled_per_variant():
    b = CuteDslBackend()
    s = spec(decomposition="split_k", split_k=4, epilogue_path="registers", **DYN)
    whole, edge = GemmProblem(m=512, n=512, k=8192), GemmProblem(m=520, n=504, k=8192)
    assert b.variant_key(whole, s) != b.variant_key(edge, s)
    assert gemm_config(whole, s).whole_tiles and not gemm_config(edge, s).whole_tiles
    assert b.variant_key(whole, spec(**DYN)) == ""  # data-parallel: one binary for the class


def test_split_k_overhanging_cluster_takes_the_predicated_variant():
    # a cluster of two CTAs across a single column (or row) of tiles: one CTA holds a tile wholly
    # outside the output, whose partial must not leave unpredicated (it wrote past the workspace on
    # the H100 and overwrote other buffers)
    s = spec(decomposition="split_k", split_k=4, epilogue_path="registers", **DYN)
    assert not gemm_config(GemmProblem(m=4096, n=128, k=4096), s.replace(cluster_n=2)).whole_tiles
    assert not gemm_config(GemmProblem(m=128, n=4096, k=4096), s.replace(cluster_m=2)).whole_tiles
    assert not gemm_config(GemmProblem(m=384, n=4096, k=4096), s.replace(cluster_m=2)).whole_tiles  # 3 rows
    assert gemm_config(GemmProblem(m=256, n=4096, k=4096), s.replace(cluster_m=2)).whole_tiles
    from cudal2.codegen.cute_sm90.kernel import shape_refusal

    cfg = gemm_config(GemmProblem(m=256, n=4096, k=4096), s.replace(cluster_m=2))
    assert "overhanging cluster" in shape_refusal(cfg, 128, 4096, 4096)
    assert shape_refusal(cfg, 512, 4096, 4096) == ""


def test_shape_generic_stream_k_is_refused():
    ok = CuteDslBackend().supports(GemmProblem(m=256, n=4096, k=4096), spec(decomposition="stream_k", **DYN))
    assert not ok and "one shape" in ok.reason and "static" in ok.reason


@pytest.mark.parametrize("m, n, k, skw, words", [
    (64, 4100, 4096, dict(layout="NT"), ("multiples of 8", "n")),  # B column-major: its rows are K; D's are N
    (64, 4096, 4100, dict(layout="NT"), ("multiples of 8", "k")),
    (0, 4096, 4096, dict(layout="NT"), ("empty",)),
    (512, 512, 128, dict(decomposition="split_k", split_k=4, epilogue_path="registers"), ("k-tiles",)),
    (520, 504, 8192, dict(decomposition="split_k", split_k=4, epilogue_path="registers"), ("edge tiles",)),
])
def test_a_shape_generic_kernel_says_which_shapes_it_cannot_serve(m, n, k, skw, words):
    from cudal2.codegen.cute_sm90.kernel import shape_refusal

    layout = skw.pop("layout", "NN")
    compiled_for = GemmProblem(m=512, n=512, k=8192, layout=layout)  # whole tiles, every extent aligned
    why = shape_refusal(gemm_config(compiled_for, spec(**DYN, **skw)), m, n, k)
    assert why and all(w in why for w in words), why
    assert not shape_refusal(gemm_config(compiled_for, spec(**DYN, **skw)), 512, 512, 8192)


DYNAMIC_VARIANTS = [
    ("NT-pingpong-c1x2-tma", dict(layout="NT"), dict(warp_specialization="pingpong", stages=5, cluster_n=2)),
    ("NN-coop-c2x1-regs-bias", dict(layout="NN", epilogue=Epilogue(bias=True, activation="relu")),
     dict(cluster_m=2, epilogue_path="registers")),
    ("TN-bf16-192-16warps-raster-n", dict(layout="TN", dtype="bfloat16"),
     dict(block_m=192, num_warps=16, raster_order="along_n", raster_group=4)),
    ("TT-64x96-8warps-s6", dict(layout="TT"), dict(block_m=64, block_n=96, num_warps=8, stages=6)),
    ("NT-swap-192-beta-tma", dict(layout="NT", epilogue=Epilogue(alpha=0.5, beta=0.25)),
     dict(swap_ab=True, block_m=192, stages=4)),
    ("NN-split3-edge", dict(m=520, n=504, k=4096, layout="NN"),
     dict(decomposition="split_k", split_k=3, epilogue_path="registers", num_warps=8, block_m=64)),
    ("NT-split4-whole-gelu", dict(m=512, n=512, k=8192, layout="NT", epilogue=Epilogue(bias=True, activation="gelu")),
     dict(decomposition="split_k", split_k=4, epilogue_path="registers")),
]


@needs_dsl
@pytest.mark.parametrize("pkw, skw", [v[1:] for v in DYNAMIC_VARIANTS], ids=[v[0] for v in DYNAMIC_VARIANTS])
def test_shape_generic_kernels_compile_for_sm90a(backend, pkw, skw):
    p = GemmProblem(**{"m": 1000, "n": 4096, "k": 1024, **pkw})
    s = spec(**DYN, **skw)
    assert backend.supports(p, s), backend.supports(p, s).reason
    kernel = backend.compile(backend.render(p, s))
    assert kernel.dynamic and kernel.source.problem == p


@needs_dsl
def test_shape_generic_kernel_checks_each_calls_shape(backend):
    p = GemmProblem(m=1000, n=4096, k=1024, layout="NT")
    kernel = backend.compile(backend.render(p, spec(**DYN)))
    a = torch.randn(33, 1024, dtype=torch.float16)
    with pytest.raises(ValueError, match="multiples of 8"):
        kernel(a, torch.randn(4100, 1024, dtype=torch.float16).t())  # N=4100: D's rows are not 16-byte
    with pytest.raises(ValueError, match="GPU"):  # a shape it serves gets as far as the device check
        kernel(a, torch.randn(4096, 1024, dtype=torch.float16).t())


# ---- the widths and register budgets the hardware allows -------------------------------------------------
def test_register_splits_ptxas_rejects_and_single_stage_pipelines_are_refused():
    base = dict(backend="cute_dsl", arch="sm_90a", load_path="tma", warp_specialization="cooperative",
                persistent=True, num_warps=12)
    KernelSpec(**base, producer_registers=40, consumer_registers=232)  # the defaults, spelled out
    for bad in (dict(producer_registers=200), dict(stages=1)):
        with pytest.raises(SpecError) as e:
            KernelSpec(**base, **bad)
        assert next(iter(bad)) in str(e.value)


def _peer_specs():
    """quack's 44 sm90 configs as this backend's spec fields (less stages)."""
    from cudal2.bench.peers import quack_sm90_configs

    return [{k: v for k, v in c.to_spec_fields().items() if k not in BASE or v != BASE[k]} for c in quack_sm90_configs()]


def _deepest(backend, problem, fields):
    """The spec with the most stages that this backend takes for problem, or None."""
    for stages in range(8, 1, -1):
        try:
            s = spec(**{**fields, "stages": stages})
        except SpecError:
            continue
        if backend.supports(problem, s):
            return s
    return None


@pytest.mark.parametrize("shape", ["4096x4096x4096-NT", "8192x8192x4096-NN", "13824x5120x640-NT",
                                   "5120x5120x5120-NT", "3000x8192x8192-TN"])
def test_every_peer_config_is_expressible_without_opting_in(shape):
    dims, layout = shape.split("-")
    p = GemmProblem.parse(dims, layout=layout)
    b = CuteDslBackend()
    configs = _peer_specs()
    assert len(configs) == len({str(sorted(c.items())) for c in configs}) == 44
    missing = [c for c in configs if _deepest(b, p, c) is None]
    assert not missing, missing


@pytest.mark.parametrize("fields, producer, consumer", [
    (dict(block_m=128, block_n=208, warp_specialization="pingpong"), 24, 240),  # 208 accumulators
    (dict(block_m=256, block_n=208), 24, 240),
    (dict(block_m=128, block_n=192, warp_specialization="pingpong"), 40, 232),  # 192 fit beside 40/232
    (dict(block_m=128, block_n=128), 40, 232),
    (dict(block_m=192, block_n=128, num_warps=16), 40, 152),  # three consumer warpgroups keep 40
])
def test_tiles_get_the_registers_their_accumulators_need(fields, producer, consumer):
    from cudal2.codegen.cute_dsl import default_consumer_registers, default_producer_registers

    s = spec(**fields, stages=3)
    assert (default_producer_registers(s), default_consumer_registers(s)) == (producer, consumer)
    assert CuteDslBackend().supports(GemmProblem(m=4096, n=4096, k=4096), s)


def test_a_tile_past_the_largest_register_budget_is_refused_with_the_budget():
    b, p = CuteDslBackend(), GemmProblem(m=4096, n=4096, k=4096)
    ok = b.supports(p, spec(block_m=128, block_n=256, warp_specialization="pingpong", stages=3))  # 256 > 240 - 32
    assert not ok and "ping-pong gives each consumer warpgroup a whole tile" in ok.reason and "256" in ok.reason
    ok = b.supports(p, spec(block_m=128, block_n=208, warp_specialization="pingpong", stages=3,
                            producer_registers=40, consumer_registers=232))  # the spec's own counts are kept
    assert not ok and "producer_registers=24 with consumer_registers=240" in ok.reason


def test_widths_step_by_sixteen_and_pieces_divide_them():
    from cudal2.codegen.cute_dsl import CAPABILITIES, KERNEL_WIDTHS, epilogue_piece_width

    assert KERNEL_WIDTHS == list(range(16, 257, 16))
    assert CAPABILITIES.allowed("block_n", "sm_90a") == frozenset(KERNEL_WIDTHS)
    for w in KERNEL_WIDTHS:
        assert w % epilogue_piece_width(w) == 0
    assert (epilogue_piece_width(208), epilogue_piece_width(192), epilogue_piece_width(16)) == (16, 32, 16)
    with pytest.raises(SpecError):
        spec(block_n=200)  # a WGMMA width, but not one the epilogue stores in whole pieces


NEW_FAMILIES = [  # (id, spec fields): the tiles the widths and register budgets add, as the kernel sees them
    ("pingpong-128x160", dict(block_m=128, block_n=160, warp_specialization="pingpong")),
    ("pingpong-128x192", dict(block_m=128, block_n=192, warp_specialization="pingpong")),
    ("pingpong-128x208-regs", dict(block_m=128, block_n=208, warp_specialization="pingpong",
                                   epilogue_path="registers")),
    ("pingpong-192x128", dict(block_m=192, block_n=128, warp_specialization="pingpong")),
    ("coop-256x208", dict(block_m=256, block_n=208)),
    ("coop-128x224-c2x1", dict(block_m=128, block_n=224, cluster_m=2)),
    ("coop-swap-160x256", dict(block_m=160, block_n=256, swap_ab=True)),  # the kernel's tile: 256x160
    ("coop-128x80-8warps", dict(block_m=128, block_n=80, num_warps=8)),
]


@needs_dsl
@pytest.mark.parametrize("fields", [f for _, f in NEW_FAMILIES], ids=[i for i, _ in NEW_FAMILIES])
def test_new_tile_families_compile_without_spills(tmp_path, fields):
    """Each compiles for sm_90a; where ptxas is on the PATH, its report of the kernel's PTX shows no
    spills (setmaxnreg hands the consumers the registers the accumulators need)."""
    import shutil

    p = GemmProblem(m=4096, n=4096, k=4096, layout="NT")
    s = _deepest(CuteDslBackend(), p, {**fields, "stages": 3})
    assert s is not None, fields
    script = KEEP_PTX + textwrap.dedent(f"""
        from cudal2.codegen.cute_dsl import CuteDslBackend
        from cudal2.ir import GemmProblem, KernelSpec
        be = CuteDslBackend()
        be.compile(be.render(GemmProblem.parse("4096x4096x4096", layout="NT"), KernelSpec.from_json({s.to_json()!r})))
        keep_ptx(0)
    """)
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path),
           "CUDAL2_CACHE_DIR": str(tmp_path / "cache"), "CUDAL2_CUTE_DSL_DISK_CACHE": "0"}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=600)
    if shutil.which("ptxas") is None:
        pytest.skip("compiled; ptxas is not on the PATH to report spills")
    report = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "kernel0.ptx"), "-o", os.devnull],
                            capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in report.stderr, report.stderr[-2000:]


def test_peer_configs_map_to_specs_and_back():
    from cudal2.bench.peers import PeerConfig, quack_sm90_configs

    for c in quack_sm90_configs():
        s = _deepest(CuteDslBackend(), GemmProblem(m=4096, n=4096, k=4096), c.to_spec_fields())
        assert s is not None and PeerConfig.from_spec(s) == c
    swapped = PeerConfig(256, 160, False, 2, 1, True).to_spec_fields()
    assert (swapped["block_m"], swapped["block_n"], swapped["cluster_m"], swapped["cluster_n"]) == (160, 256, 1, 2)
    assert PeerConfig.from_spec(spec(decomposition="split_k", split_k=2, epilogue_path="registers")) is None


def test_quack_is_forced_to_its_own_sm90_config_not_the_bare_defaults(monkeypatch):
    """quack's GemmConfig defaults to its dynamic persistent scheduler, which its own sm90 list turns
    off: the peer kernel must run the config quack's autotuner would run."""
    import sys
    import types
    from dataclasses import asdict, dataclass

    from cudal2.bench.peers import quack_config, quack_sm90_configs

    @dataclass
    class FakeConfig:
        tile_m: int = 128
        tile_n: int = 192
        pingpong: bool = True
        cluster_m: int = 2
        cluster_n: int = 1
        swap_ab: bool = False
        is_dynamic_persistent: bool = True
        device_capacity: int = 9

    listed = [FakeConfig(**asdict(c), is_dynamic_persistent=False) for c in quack_sm90_configs()]
    module = types.SimpleNamespace(get_all_configs=lambda: [FakeConfig(device_capacity=10)] + listed)
    monkeypatch.setitem(sys.modules, "quack", types.ModuleType("quack"))
    monkeypatch.setitem(sys.modules, "quack.gemm_config", module)
    want = quack_sm90_configs()[5]
    got = quack_config(FakeConfig, asdict(want))
    assert got in listed and not got.is_dynamic_persistent and got.device_capacity == 9
    assert (got.tile_m, got.tile_n, got.swap_ab) == (want.tile_m, want.tile_n, want.swap_ab)
    module.get_all_configs = lambda: []  # a quack without that config: built with the sm90 flags
    built = quack_config(FakeConfig, asdict(want))
    assert not built.is_dynamic_persistent and built.device_capacity == 9
