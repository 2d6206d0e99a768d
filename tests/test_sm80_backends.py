"""benchmarks/sm80_backends.py on a CPU with the recorded runner: the pools (the same rule for both
backends, shape-generic sm_80 specs), the flow (both backends' pairs, the confirmation with
Triton's winner also rendered static, the report and its JSON), a spec that crashed not run on
later shapes, a second run on the same store measuring nothing new, the results reader, and the
scan of Triton's cache that tells sm_80 code from Hopper code."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHAPES = "512x1024x2048,1024x512x256-NT,64x4096x1024,2048x2048x512-NT"


@pytest.fixture(autouse=True)
def _environment():
    """The script sets TRITON_OVERRIDE_ARCH and TRITON_CACHE_DIR for itself: put them back."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _module(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_pools_are_drawn_alike_and_shape_generic():
    from cudal2.dataset import resolve_shapes

    sm80 = _module("cudal2_bench_sm80_pools", "sm80_backends.py")
    problems = resolve_shapes(SHAPES)
    profile = sm80.rules_profile(132, 50)
    for backend in sm80.BACKENDS:
        pool, info = sm80.rules_pool(backend, problems, 6, 8, profile)
        again, _ = sm80.rules_pool(backend, problems, 6, 8, profile)
        assert [s.key() for s in pool] == [s.key() for s in again]  # deterministic: a CPU draws the GPU's pool
        assert 0 < len(pool) <= 6 and len({s.key() for s in pool}) == len(pool)
        assert all(s.backend == backend and s.arch == "sm_80" and s.shape_specialization == "dynamic" for s in pool)
        families = {s.replace(raster_group=8, raster_order="along_m").key() for s in pool}
        assert len(families) == len(pool)  # rasterization alone does not make another pool entry
        assert set(info) == {s.key() for s in pool} and all(v["shapes"] >= 1 for v in info.values())


def test_recorded_flow_crash_resume_and_reader(tmp_path):
    from cudal2.dataset import resolve_shapes
    from cudal2.tuner.recorded import RecordedRunner

    sm80 = _module("cudal2_bench_sm80_flow", "sm80_backends.py")
    pool, _ = sm80.rules_pool("cuda_cpp", resolve_shapes(SHAPES), 4, 8, sm80.rules_profile(132, 50))
    crashing = pool[0]
    runner = RecordedRunner(rows=[(crashing.to_dict(), "crash")])
    out = tmp_path / "sm80.md"
    argv = [str(out), "--shapes", SHAPES, "--specs", "4", "--triton-cache", str(tmp_path / "triton")]
    assert sm80.main(argv, runner=runner) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert len(doc["rows"]) == 4 and not doc["unfinished"]
    crashed = [c for c in runner.calls if c.key() == crashing.key()]
    assert len(crashed) == 1  # crashed on the first shape, not run on the three after it
    assert crashing.key() in doc["broken"]["cuda_cpp"]
    for row in doc["rows"]:
        assert row["figures"] == "confirmed" and row["ratio"] and row["torch_ms"]
        assert set(row["confirm"]) >= {"cuda_cpp", "triton", "triton_static", "torch_ms"}
        assert row["triton"]["pairs"] == 4 and row["cuda_cpp"]["pairs"] == 4
    assert doc["aggregates"]["all"]["shapes"] == 4
    text = out.read_text()
    assert "Triton/cuda_cpp" in text and "not run after a hang or crash" in text

    measured = len(runner.calls)
    assert sm80.main(argv, runner=runner) == 0  # the same store: every pair and confirmation is there
    assert len(runner.calls) == measured

    report = _module("cudal2_results_report_sm80", "report.py")
    head, body, _ = report.read_sm80_backends(out.with_suffix(".json"))
    assert "Triton-sm80" in head and sum(line.startswith("| ") for line in body) == 5


def test_triton_cache_scan_tells_sm80_from_hopper_code(tmp_path):
    sm80 = _module("cudal2_bench_sm80_scan", "sm80_backends.py")
    for i, (arch, ptx) in enumerate((("sm80", "mma.sync.aligned.m16n8k16"), ("sm90", "wgmma.mma_async"))):
        d = tmp_path / f"k{i}"
        d.mkdir()
        (d / "matmul_kernel.json").write_text(json.dumps({"name": "matmul_kernel", "arch": arch,
                                                          "target": {"backend": "cuda", "arch": 90}}))
        (d / "matmul_kernel.ptx").write_text(f".target sm_90a\n{ptx}\n")
        (d / "__grp__matmul_kernel.json").write_text("{}")
    got = sm80.TritonCacheScan(tmp_path).update()
    assert got["matmul_kernels"] == 2 and got["lowered_for"] == {"sm80": 1, "sm90": 1}
    assert got["matmul_ptx_with_wgmma"] == 1 and got["matmul_ptx_with_mma_sync"] == 1
