"""The device a cost model sees: the live GPU's figures (or a known part's by name), as features, so
that one model learns from several GPUs; and models of the older feature version read by name."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from cudal2.ir import DeviceProfile, GemmProblem
from cudal2.ir.hardware import KNOWN_PARTS, known_part
from cudal2.learn import ModelError, TreeModel, feature_names
from cudal2.proposers.features import matrix

DATA = Path(__file__).parent / "data" / "sweep_h100_sample.csv.gz"


def _props(**over):
    p = dict(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, L2_cache_size=60 * 2**20,
             total_memory=143 * 10**9, clock_rate=1_980_000, memory_clock_rate=3_201_000, memory_bus_width=6144,
             shared_memory_per_block_optin=227 * 1024)
    p.update(over)
    return SimpleNamespace(**{k: v for k, v in p.items() if v is not None})


def test_the_live_device_reports_its_memory_bandwidth_clocks_and_shared_memory():
    d = DeviceProfile.from_properties(_props(), "sm_90a", power_w=650.0)
    assert d.name == "NVIDIA H200" and d.l2_bytes == 60 * 2**20 and d.mem_bytes == 143 * 10**9
    assert d.dram_tbps == pytest.approx(4.917, abs=1e-3)  # 2 x 3201 MHz x 6144 bits
    assert (d.clock_mhz, d.mem_clock_mhz, d.bus_width_bits, d.power_w) == (1980, 3201, 6144, 650.0)
    assert d.smem_per_block == 227 * 1024


def test_figures_a_torch_lacks_or_reports_as_zero_come_from_the_known_part():
    # CUDA 13 reports the deprecated clocks as 0; an older torch has no memory_bus_width
    d = DeviceProfile.from_properties(_props(memory_clock_rate=0, clock_rate=0, memory_bus_width=None,
                                             total_memory=None), "sm_90a")
    assert (d.dram_tbps, d.clock_mhz, d.power_w) == (4.8, 1980, 700)
    assert d.mem_bytes == 141 * 2**30 and d.mem_clock_mhz is None
    unknown = DeviceProfile.from_properties(_props(name="NVIDIA X9", memory_clock_rate=0), "sm_90a")
    assert unknown.dram_tbps == DeviceProfile.of_arch("sm_90a").dram_tbps  # the arch's reference


def test_known_parts_match_the_most_specific_name():
    assert known_part("NVIDIA H200").dram_tbps == 4.8 and known_part("NVIDIA H20").dram_tbps == 4.0
    assert known_part("NVIDIA H100 80GB HBM3").dram_tbps == 3.35 and known_part("NVIDIA H100 NVL").mem_gib == 94
    assert known_part("NVIDIA H100 PCIe").sm_count == 114 and known_part("NVIDIA A100-SXM4-80GB").mem_gib == 80
    assert known_part("NVIDIA A100-SXM4-40GB").dram_tbps == 1.555 and known_part("Tesla V100") is None
    assert {"H100 PCIe", "H100 NVL", "H100", "H200", "H20"} <= set(KNOWN_PARTS)
    assert DeviceProfile.of_part("NVIDIA H100 PCIe").sm_count == 114


def test_a_live_gpu_is_read_through_torch(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: _props())
    d = DeviceProfile.live("sm_90a")
    assert d.name == "NVIDIA H200" and d.dram_tbps > 4.5 and d.mem_bytes == 143 * 10**9
    assert DeviceProfile.live("sm_80").name == "reference part of sm_80"  # another arch: its reference
    assert DeviceProfile.of_arch("sm_90a").name == "reference part of sm_90a"


def test_the_features_tell_an_h200_from_an_h100():
    names = feature_names()
    for n in ("device.dram_tbps", "device.mem_gib", "device.clock_mhz", "device.power_w",
              "device.smem_per_block_kib", "device.sm_count", "device.l2_mib"):
        assert n in names
    from cudal2.proposers.catalog import catalog

    p, specs = GemmProblem(m=3000, n=8192, k=8192, layout="NT"), catalog("triton", "sm_90a", "base")[:3]
    h100, h200 = (matrix(p, specs, DeviceProfile.of_part(g)) for g in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"))
    col = {n: i for i, n in enumerate(names)}
    assert (h200[:, col["device.dram_tbps"]] == 4.8).all() and (h100[:, col["device.dram_tbps"]] == 3.35).all()
    assert (h200[:, col["device.mem_gib"]] > h100[:, col["device.mem_gib"]]).all()
    # the reference part has every figure too: a model's inputs are never NaN
    assert np.isfinite(matrix(p, specs, DeviceProfile.of_arch("sm_90a"))).all()


def test_a_model_of_the_older_features_is_scored_with_its_own_columns(tmp_path):
    from cudal2.proposers.catalog import catalog
    from cudal2.proposers.model_files import shipped_model_path

    d = json.loads(shipped_model_path("sm_90a").read_text())
    old = TreeModel.from_json(d)
    assert old.feature_version in (1, 2) and set(old.features) <= set(feature_names())
    p, specs = GemmProblem(m=512, n=4096, k=4096, layout="NT"), catalog("triton", "sm_90a", "base")[:40]
    x = matrix(p, specs, DeviceProfile.of_arch("sm_90a"))
    own = x[:, [feature_names().index(n) for n in old.features]]
    np.testing.assert_allclose(old.predict_rows(x), old.predict_rows(own))
    # a version-1 model: its 57 columns, by name, whichever order today's features have
    v1 = {**d, "feature_version": 1, "features": list(feature_names()[:57])} if d["feature_version"] == 2 else d
    m1 = TreeModel.from_json(v1)
    assert m1.features == feature_names()[:57] and m1.predict_rows(x).shape == (40,)
    m1.save(tmp_path / "v1.json")
    assert json.loads((tmp_path / "v1.json").read_text())["feature_version"] == 1  # saved as what it is
    for bad in ({**v1, "features": v1["features"][:-1] + ["shape.nonsense"]},  # a name this cudal2 lacks
                {**v1, "feature_version": 2}):  # today's version with other columns: shifted
        with pytest.raises(ModelError, match="other features"):
            TreeModel.from_json(bad)


def test_one_model_learns_from_two_gpus_and_tells_them_apart():
    pytest.importorskip("lightgbm")
    from dataclasses import replace

    from cudal2.learn.samples import from_csv
    from cudal2.learn.train import distinct_devices
    from cudal2.learn import fit

    h100 = [s for s in from_csv(DATA)][:600]
    # the same pairs on an H200, measured 20 % faster against the same torch
    h200 = [replace(s, gpu="NVIDIA H200", log_speedup=s.log_speedup + 0.2) for s in h100]
    ref = DeviceProfile.of_arch("sm_90a")
    model = fit(h100 + h200, ref, seed=0, rounds=60, params={"num_leaves": 7})
    p, specs = h100[0].problem, [s.spec for s in h100 if s.problem == h100[0].problem]
    gap = model.predict(p, specs, DeviceProfile.of_part("NVIDIA H200")) - model.predict(
        p, specs, DeviceProfile.of_part("NVIDIA H100 80GB HBM3"))
    assert 0.1 < gap.mean() < 0.25 and (gap > 0).all()  # shrunk by the learning rate, never reversed
    assert set(distinct_devices(h100 + h200, ref)) == {"NVIDIA H200", h100[0].gpu}
    with pytest.raises(ValueError, match="same device figures.*--gpu NAME"):
        distinct_devices([replace(s, gpu="GPU X") for s in h100[:2]] + [replace(s, gpu="GPU Y") for s in h100[:2]],
                         ref)
