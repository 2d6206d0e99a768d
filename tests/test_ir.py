"""The kernel IR: validation with clear errors, exact JSON round-trips, stable keys, schema."""

import json
import subprocess
import sys

import pytest

from cudal2.ir import ARCHS, Epilogue, GemmProblem, KernelSpec, SpecError, check_compatible


def violation_fields(exc: SpecError) -> list[str]:
    return exc.fields


# ---- GemmProblem ------------------------------------------------------------------------------

@pytest.mark.parametrize("dims", [(0, 64, 64), (64, -1, 64), (64, 64, 0)])
def test_problem_rejects_non_positive_sizes(dims):
    with pytest.raises(SpecError) as e:
        GemmProblem(m=dims[0], n=dims[1], k=dims[2])
    msg = str(e.value)
    assert "must be a positive integer" in msg and "fix:" in msg
    bad = [name for name, v in zip("mnk", dims) if v <= 0]
    assert violation_fields(e.value) == bad


def test_problem_rejects_unknown_dtype_and_layout():
    with pytest.raises(SpecError) as e:
        GemmProblem(m=8, n=8, k=8, dtype="float64", layout="XY")
    assert set(violation_fields(e.value)) == {"dtype", "layout"}


def test_problem_parse_forms():
    p = GemmProblem.parse("4096x1024x512", dtype="bfloat16", layout="NT")
    assert (p.m, p.n, p.k, p.dtype, p.layout) == (4096, 1024, 512, "bfloat16", "NT")
    assert GemmProblem.parse((1, 2, 3)).shape == (1, 2, 3)
    with pytest.raises(SpecError, match="three integers"):
        GemmProblem.parse("4096x4096")


def test_problem_leading_dims_follow_layout():
    p = GemmProblem(m=10, n=20, k=30, layout="TT")
    assert p.leading_dims() == {"a": 10, "b": 30, "c": 20}
    p = GemmProblem(m=10, n=20, k=30, layout="NN")
    assert p.leading_dims() == {"a": 30, "b": 20, "c": 20}


def test_problem_round_trip_and_key():
    p = GemmProblem(m=67, n=45, k=129, dtype="bfloat16", layout="TN",
                    epilogue=Epilogue(alpha=0.5, beta=1.25, bias=True, activation="gelu"))
    again = GemmProblem.from_json(p.to_json())
    assert again == p and again.key() == p.key()
    assert p.key() != p.replace(k=130).key()


def test_problem_is_immutable():
    p = GemmProblem(m=1, n=1, k=1)
    with pytest.raises(Exception):
        p.m = 2


# ---- KernelSpec ---------------------------------------------------------------------------------

def test_default_spec_is_valid_and_round_trips():
    s = KernelSpec()
    assert KernelSpec.from_json(s.to_json()) == s
    # the canonical form is the dict, less the fields added later while they hold their default
    assert json.loads(s.to_json()) == {k: v for k, v in s.to_dict().items()
                                       if k not in ("swap_ab", "shape_specialization")}


def test_fields_added_later_keep_earlier_keys():
    # the key every store and tuned table already holds for the default spec (IR_VERSION 1,
    # before swap_ab existed): it must not move
    assert KernelSpec().key() == "d867f541bc923406"
    plain = KernelSpec(backend="cute_dsl", num_warps=12, load_path="tma", warp_specialization="cooperative",
                       persistent=True)
    swapped = plain.replace(swap_ab=True)
    assert swapped.key() != plain.key()
    assert json.loads(swapped.to_json())["swap_ab"] is True
    assert KernelSpec.from_json(swapped.to_json()) == swapped
    assert KernelSpec.from_json(plain.to_json()).swap_ab is False
    with pytest.raises(SpecError, match="swap_ab=True: backend 'triton'"):
        KernelSpec(swap_ab=True)  # the Triton templates compute A @ B as written


def test_round_trip_exact_for_every_field_changed():
    s = KernelSpec(block_m=64, block_n=256, block_k=32, num_warps=8, stages=5, raster_group=4,
                   raster_order="along_n", decomposition="split_k", split_k=4, split_k_reduction="atomic",
                   persistent=True, arch="sm_80")
    text = s.to_json()
    assert KernelSpec.from_json(text).to_json() == text
    s = KernelSpec(load_path="tma", persistent=True, raster_group=16, stages=2)
    assert KernelSpec.from_json(text).to_json() == text


def test_key_is_stable_across_processes():
    s = KernelSpec(block_m=64, stages=4)
    code = ("import cudal2; from cudal2.ir import KernelSpec; "
            "print(KernelSpec(block_m=64, stages=4).key())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert out.stdout.strip() == s.key()


def test_key_is_pinned():
    # The key is the store's primary key: changing it orphans every stored measurement.
    # If this fails on purpose, bump IR_VERSION and write a migration note.
    assert KernelSpec().key() == "d867f541bc923406"


def test_unknown_extra_key_in_json_is_rejected():
    data = KernelSpec().to_dict()
    data["unroll"] = 4
    with pytest.raises(SpecError) as e:
        KernelSpec.from_json(json.dumps(data))
    assert violation_fields(e.value) == ["unroll"]
    assert "unknown key" in str(e.value)


def test_malformed_json_is_a_spec_error():
    with pytest.raises(SpecError, match="not valid JSON"):
        KernelSpec.from_json("{block_m: 64")
    with pytest.raises(SpecError, match="JSON object"):
        KernelSpec.from_json("[1, 2]")


def test_shared_memory_overflow_names_the_limit_and_fix():
    with pytest.raises(SpecError) as e:
        KernelSpec(block_m=256, block_n=128, block_k=128, num_warps=8, stages=4)
    msg = str(e.value)
    assert "stages" in violation_fields(e.value)
    assert "384.0 KiB exceeds 227 KiB of shared memory on sm_90a" in msg
    assert "use at most 2 stages" in msg


def test_shared_memory_limit_depends_on_arch():
    ok = KernelSpec(arch="sm_90a", block_m=128, block_n=256, block_k=64, num_warps=8, stages=4)  # 192 KiB
    assert ok.smem_bytes() == 4 * 384 * 64 * 2
    with pytest.raises(SpecError, match="163 KiB of shared memory on sm_80"):
        KernelSpec(arch="sm_80", block_m=128, block_n=256, block_k=64, num_warps=8, stages=4)


def test_register_overflow():
    with pytest.raises(SpecError) as e:
        KernelSpec(block_m=256, block_n=256, block_k=32, num_warps=4, stages=2)
    assert "accumulator registers" in str(e.value)


def test_hopper_features_rejected_on_ampere():
    with pytest.raises(SpecError) as e:
        KernelSpec(arch="sm_80", load_path="tma", block_k=32)
    assert "TMA does not exist on sm_80" in str(e.value)


def test_split_k_consistency():
    with pytest.raises(SpecError, match="needs decomposition='split_k'"):
        KernelSpec(split_k=4)
    with pytest.raises(SpecError, match="needs split_k >= 2"):
        KernelSpec(decomposition="split_k")


def test_unknown_backend():
    with pytest.raises(SpecError) as e:
        KernelSpec(backend="no_such_backend")
    assert violation_fields(e.value) == ["backend"]
    assert "triton" in str(e.value)  # the message lists the known backends


def test_field_backend_does_not_support():
    # Triton cannot express warp specialization or clusters; the backend's declaration says so.
    with pytest.raises(SpecError) as e:
        KernelSpec(backend="triton", cluster_m=2)
    assert violation_fields(e.value) == ["cluster_m"]
    assert "backend 'triton'" in str(e.value)


def test_all_violations_reported_at_once():
    with pytest.raises(SpecError) as e:
        KernelSpec(arch="sm_80", load_path="tma", split_k=3, block_m=256, block_n=256, stages=8)
    assert len(e.value.violations) >= 3


def test_replace_revalidates():
    s = KernelSpec()
    with pytest.raises(SpecError):
        s.replace(stages=8, block_m=256, block_n=256, num_warps=8)
    assert s.replace(stages=2).stages == 2


# ---- problem x spec ----------------------------------------------------------------------------

def test_tma_needs_aligned_leading_dimension():
    spec = KernelSpec(load_path="tma")
    with pytest.raises(SpecError) as e:
        check_compatible(GemmProblem(m=64, n=64, k=129, layout="NN"), spec)  # A row-major: lead = K
    assert "16-byte aligned" in str(e.value) and "load_path='pointer'" in str(e.value)
    # K=129 is fine when A is column-major and B row-major: the leading dims are M and N.
    check_compatible(GemmProblem(m=64, n=64, k=129, layout="TN"), spec)
    check_compatible(GemmProblem(m=64, n=64, k=129, layout="NN"), KernelSpec(load_path="pointer"))


def test_split_k_deeper_than_k():
    spec = KernelSpec(decomposition="split_k", split_k=8, block_k=64)
    with pytest.raises(SpecError, match="only 2 block"):
        check_compatible(GemmProblem(m=64, n=64, k=128), spec)


# ---- schema --------------------------------------------------------------------------------------

def test_json_schema_matches_fields_and_forbids_extras():
    schema = KernelSpec.json_schema()
    assert set(schema["properties"]) == set(KernelSpec.model_fields)
    assert schema.get("additionalProperties") is False
    assert schema["properties"]["block_m"]["enum"] == list(range(16, 257, 8))  # every MMA width (hardware.TILE_WIDTHS)
    assert "description" in schema["properties"]["load_path"]


def test_hardware_table_has_the_limits():
    for arch in ("sm_80", "sm_90a"):
        hw = ARCHS[arch]
        assert hw.smem_per_block > 0 and hw.sm_count > 0 and hw.regs_per_thread == 255
    assert ARCHS["sm_90a"].has_wgmma and not ARCHS["sm_90"].has_wgmma


def test_summary_names_what_departs_from_a_plain_kernel():
    assert KernelSpec(block_m=64, block_n=64, block_k=32, num_warps=4, stages=2).summary() == "64x64x32 w4 s2 pointer"
    ws = dict(backend="cute_dsl", num_warps=12, load_path="tma", warp_specialization="cooperative", persistent=True)
    assert KernelSpec(**ws, stages=3, cluster_m=2).summary() == "128x128x64 w12 s3 tma cooperative cluster2x1 persistent"
    assert KernelSpec(**ws, decomposition="stream_k").summary().endswith("streamk persistent")
    assert "splitk4/workspace" in KernelSpec(**ws, decomposition="split_k", split_k=4,
                                             epilogue_path="registers").summary()
