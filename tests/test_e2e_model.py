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
    # cudal2.check_routes ran on both phases: a group that lost the prefill is not checked again, and what
    # was timed routed is what survived both
    checks = result["route_checks"]["eager"]
    assert {c["phase"] for c in checks} <= {"prefill", "decode"} and any(c["phase"] == "prefill" for c in checks)
    lost = {tuple(c["weight_shape"]) for c in checks if c["phase"] == "prefill" and not c["kept"]}
    assert not lost & {tuple(c["weight_shape"]) for c in checks if c["phase"] == "decode"}
    kept = {name for c in checks if c["phase"] == "decode" and c["kept"] for name in c["layers"]}
    assert set(result["routed_per_mode"]["eager"]) == {n for n in kept}
    assert "timed inside the model" in stem.with_suffix(".md").read_text()
