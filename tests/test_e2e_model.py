"""benchmarks/e2e_model.py --smoke: a transformers Llama (tiny config, CPU) tuned with the recorded runner,
its layers routed, prefill and decode timed against the untouched model, the results files written."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import e2e_model  # noqa: E402
from cudal2 import ops  # noqa: E402


@pytest.fixture(autouse=True)
def _own_table(monkeypatch):
    monkeypatch.delenv(ops.ENV_OP_BACKENDS, raising=False)
    yield
    ops.set_table(None)


def test_the_smoke_run_tunes_routes_and_times_a_llama_on_the_cpu(tmp_path):
    stem = e2e_model.main(["--smoke", "--out-dir", str(tmp_path)])
    result = json.loads(stem.with_suffix(".json").read_text())
    routed = result["routed"]["eager"] + result["routed"]["graphs_only"]
    assert routed and all(name == "lm_head" or name.startswith("model.layers.") for name in routed)  # tune_model's wins
    assert result["rel_error"] == 0.0  # on the CPU the op runs torch
    for phase in ("prefill", "decode"):
        both = result["modes"]["eager"][phase]
        assert both["torch"]["tokens_per_s"] > 0 and both["cudal2"]["tokens_per_s"] > 0 and both["ratio"] > 0
    assert "| eager | decode |" in stem.with_suffix(".md").read_text()
    # cudal2.check_routes ran on both phases. On the CPU the op serves no call, so no group is timed (the
    # forward runs the same kernels either way), none declines a row count, and every routed layer stays routed
    checks = result["route_checks"]["eager"]
    assert {c["phase"] for c in checks} == {"prefill", "decode"}
    assert all(not c["served"] and c["kept"] and not c["declined_rows"] for c in checks)
    assert set(result["routed_per_mode"]["eager"]) == {name for c in checks for name in c["layers"]}
    assert result["declined_rows_per_mode"]["eager"] == {}
    assert "timed inside the model" in stem.with_suffix(".md").read_text()


def test_the_aa_run_times_the_untouched_model_against_an_untouched_copy(tmp_path):
    stem = e2e_model.main(["--smoke", "--aa", "--out-dir", str(tmp_path)])
    assert stem.name.startswith("e2e_model_aa_")
    result = json.loads(stem.with_suffix(".json").read_text())
    assert result["aa"] and result["routed"] == {"eager": [], "graphs_only": []}
    assert result["routed_per_mode"]["eager"] == [] and result["route_checks"]["eager"] == []  # nothing routed
    both = result["modes"]["eager"]["decode"]
    assert both["torch"]["tokens_per_s"] > 0 and both["cudal2"]["tokens_per_s"] > 0
    assert "A/A run" in stem.with_suffix(".md").read_text()


def test_a_qwen2_with_biased_projections_is_tuned_and_routed_too(tmp_path):
    stem = e2e_model.main(["--smoke", "--model", "qwen2.5-7b", "--out-dir", str(tmp_path)])
    assert stem.name.startswith("e2e_model_qwen2_5-7b_") and stem.with_suffix(".json").exists()
    result = json.loads(stem.with_suffix(".json").read_text())
    assert result["model"] == "qwen2.5-7b"
    routed = result["routed"]["eager"] + result["routed"]["graphs_only"]
    assert any(name.endswith("self_attn.q_proj") for name in routed)  # a projection with a bias, routed
    assert result["rel_error"] == 0.0
    md = stem.with_suffix(".md").read_text()
    assert md.startswith("# A transformers Qwen2,") and "| eager | decode |" in md
