"""The package's shape: its layers (import-linter's contract in pyproject.toml), the public function's
signature, the targets it knows, and the cost model's backend columns."""

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_imports_only_the_layers_below_it():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    run = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "1 kept, 0 broken" in run.stdout


def test_cudal2_search_is_a_function_with_its_real_signature():
    import cudal2

    assert inspect.isfunction(cudal2.search)
    params = inspect.signature(cudal2.search).parameters
    assert {"shape", "budget", "backends", "proposer", "store", "runner", "modes"} <= set(params)


@pytest.mark.parametrize("capability", [(10, 0), (12, 0), (8, 6), (8, 9), (7, 0)])
def test_an_unknown_gpu_is_refused_in_one_line_never_mapped_to_a_known_target(capability):
    from cudal2.ir import arch_from_capability

    with pytest.raises(ValueError, match=rf"compute capability {capability[0]}\.{capability[1]} is not a target") as e:
        arch_from_capability(*capability)
    assert "\n" not in str(e.value)


def test_the_known_targets_come_from_their_records():
    from cudal2.ir import ARCHS, arch_from_capability

    assert arch_from_capability(9, 0) == "sm_90a" and arch_from_capability(8, 0) == "sm_80"
    for name, limits in ARCHS.items():
        for cap in limits.capabilities:
            assert arch_from_capability(*cap) == name


def test_each_cost_model_backend_column_names_a_registered_backend():
    from cudal2.codegen import available_backends
    from cudal2.codegen.registry import BUILTIN
    from cudal2.proposers.features import BACKEND_CODES, feature_names

    assert set(BACKEND_CODES) <= set(available_backends())
    assert list(BACKEND_CODES) == list(BUILTIN)  # every built-in backend has its column, in order
    assert [n for n in feature_names() if n.startswith("spec.backend_")] == [f"spec.backend_{b}" for b in BUILTIN]


def test_the_shipped_cost_model_loads_with_these_columns():
    from cudal2.proposers.learned import load_model

    assert load_model(arch="sm_90a") is not None


def test_no_import_circle_remains():
    import grimp  # import-linter's graph builder

    graph = grimp.build_graph("cudal2", cache_dir=None)
    circles = [(m, n) for m in sorted(graph.modules) for n in graph.find_modules_directly_imported_by(m)
               if graph.find_shortest_chain(importer=n, imported=m)]
    assert not circles, f"{circles[0][0]} and {circles[0][1]} import each other (directly or through others)"
