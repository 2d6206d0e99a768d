"""Compiling ahead (cudal2.tuner.precompile, `cudal2 precompile`): what is planned, how it is
compiled, and what a user sees. CPU only; one test compiles a real CuTe DSL kernel for sm_90a."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudal2.ir import GemmProblem, KernelSpec
from cudal2.tuner.precompile import Planner, precompile
from cudal2.proposers.proposal import Proposal

ROOT = Path(__file__).resolve().parent.parent
DSL = dict(backend="cute_dsl", arch="sm_90a", block_m=128, block_n=128, block_k=64, num_warps=8,
           warp_specialization="cooperative", stages=4, load_path="tma", persistent=True)


def compile_unit(problem, spec):
    from cudal2.codegen import get_backend

    return get_backend(spec.backend).compile_unit(problem, spec)


def _spec(**fields) -> KernelSpec:
    return KernelSpec(**{**DSL, **fields})


class ListedProposer:
    """Proposes the same list for every problem, and records what it was asked."""

    name = "listed"

    def __init__(self, specs):
        self.specs, self.asked = specs, []

    def propose(self, problem, history, n, *, pending=()):
        self.asked.append((problem.label(), tuple(history), n))
        return [Proposal(spec=s, source="listed") for s in self.specs[:n]]


def test_the_plan_takes_each_shape_generic_kernel_once_and_leaves_out_kernels_of_one_shape():
    a = _spec()
    proposer = ListedProposer([
        a,                                              # auto: measured as its shape-generic kernel
        a.replace(shape_specialization="dynamic"),       # the same kernel, named
        _spec(block_n=64, shape_specialization="static"),  # compiled for one shape: serves no other
        KernelSpec(backend="triton", arch="sm_90a"),     # a backend this run does not compile
        _spec(stages=3),
    ])
    planner = Planner(proposer, ("cute_dsl",), per_shape=5)
    first, second = GemmProblem.parse("1000x4096x4096", layout="NT"), GemmProblem.parse("64x4096x4096", layout="NT")
    units = planner.units(first)
    assert [u.key() for u in units] == [a.replace(shape_specialization="dynamic").key(),
                                         _spec(stages=3, shape_specialization="dynamic").key()]
    assert all(u.shape_specialization == "dynamic" for u in units)
    assert planner.units(second) == []  # one compile serves both token counts
    assert proposer.asked == [(first.label(), (), 5), (second.label(), (), 5)]  # nothing measured, per_shape each
    other_class = GemmProblem.parse("64x4096x4096", layout="NT", dtype="bfloat16")
    assert len(planner.units(other_class)) == 2  # another dtype is another kernel


def test_a_split_k_kernel_is_planned_once_per_variant():
    # a shape-generic split-K kernel is compiled per reduction width and tile evenness
    spec = _spec(decomposition="split_k", split_k=4, split_k_reduction="workspace", shape_specialization="dynamic")
    even, odd = GemmProblem.parse("128x4096x4096", layout="NT"), GemmProblem.parse("100x4100x4096", layout="NT")
    assert compile_unit(even, spec) is not None
    planner = Planner(ListedProposer([spec]), ("cute_dsl",))
    assert planner.units(even) == [spec]
    assert planner.units(even.replace(m=256)) == []  # the same variant
    assert compile_unit(odd, spec) != compile_unit(even, spec)  # tiles not whole: another variant
    assert planner.units(odd) == [spec]


def test_precompile_compiles_every_unit_through_the_pool_and_counts_failures():
    from cheats.slow_compile import die_on_block_m_16
    from cudal2.bench.compile_pool import CompilePool

    specs = [KernelSpec(block_m=b, arch="sm_80", shape_specialization="dynamic") for b in (32, 16, 64)]
    problems = [GemmProblem.parse(s) for s in ("64x64x64", "128x64x64", "64x128x128")]
    planner = Planner(ListedProposer(specs), ("triton",), per_shape=3)
    seen = []
    pool = CompilePool(workers=2, timeout_s=60, task=die_on_block_m_16)
    try:
        done = precompile(problems, planner, pool, on_progress=lambda *a: seen.append(a))
    finally:
        pool.close()
    # the first two shapes select one variant of each kernel (Triton's: K is one BLOCK_K step), the
    # third another: six compiles, and the two whose compile kills its process fail alone
    assert (done.shapes, done.units, done.ready) == (3, 6, 4)
    assert len(done.failed) == 2 and all("died on this spec twice" in reason for _, reason in done.failed)
    assert seen[-1] == (3, 6, 6)  # (shapes planned, units done, units planned)
    assert [s[0] for s in seen] == sorted(s[0] for s in seen)
    assert done.wall_s > 0 and "4 of 6 kernels ready for 3 shapes, 2 refused or failed" in done.line()


def test_precompile_refuses_an_llm_proposer_and_a_bad_shape_set():
    import cudal2

    with pytest.raises(ValueError, match="asked once a shape"):
        cudal2.precompile("64x64x64", proposer="llm")
    with pytest.raises(ValueError, match="not a shape set"):
        cudal2.precompile("nonsense")


def _cli(*args, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDAL2_CACHE_DIR": str(cache), "CUTE_DSL_ARCH": "sm_90a"}
    return subprocess.run([sys.executable, "-m", "cudal2.cli", "precompile", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_cli_precompiles_a_cute_dsl_kernel_to_disk_and_a_second_run_loads_it(tmp_path):
    pytest.importorskip("cutlass")
    args = ("64x4096x4096-NT", "-b", "cute_dsl", "--per-shape", "1", "--workers", "1", "--proposer", "rules")
    first = _cli(*args, cache=tmp_path)
    assert first.returncode == 0, first.stderr
    import torch

    if not torch.cuda.is_available():  # compiled without the GPU it is for: said, on one line
        warnings = [ln for ln in first.stderr.splitlines() if ln.startswith("warning:")]
        assert len(warnings) == 1 and "no GPU here" in warnings[0], first.stderr
    assert "1 of 1 kernels ready for 1 shapes" in first.stdout
    objects = sorted((tmp_path / "cute_dsl").glob("*.o"))
    assert len(objects) == 1
    stamp = objects[0].stat().st_mtime_ns
    again = _cli(*args, cache=tmp_path)
    assert again.returncode == 0 and "1 of 1 kernels ready" in again.stdout
    assert [p.stat().st_mtime_ns for p in (tmp_path / "cute_dsl").glob("*.o")] == [stamp]  # loaded, not rebuilt


@pytest.mark.parametrize("args, says", [
    (("nonsense",), "is not a shape set, a file or a list of shapes"),
    (("64x64x64", "--proposer", "llm"), "not 'llm'"),
    (("64x64x64", "--per-shape", "0"), "--per-shape"),
])
def test_cli_bad_input_is_one_line(tmp_path, args, says):
    got = _cli(*args, cache=tmp_path)
    assert got.returncode == 2
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], got.stderr


def test_planning_processes_plan_the_same_units_as_one_process():
    # the rules' first proposals for a few shapes of two classes, planned here and in two processes
    from cheats.slow_compile import report_niceness
    from cudal2.bench.compile_pool import CompilePool
    from cudal2.ir import DeviceProfile
    from cudal2.tuner.precompile import Recipe

    problems = [GemmProblem.parse(s, layout="NT") for s in ("64x4096x4096", "1000x4096x4096", "7x14336x4096")]
    problems += [GemmProblem.parse("1000x4096x4096", layout="NN", dtype="bfloat16")]
    recipe = Recipe("rules", ("cute_dsl",), "sm_90a", DeviceProfile.of_arch("sm_90a"), per_shape=6)
    here = Planner(recipe.planner().proposer, recipe.backends, recipe.per_shape)
    expected = [[s.key() for s in here.units(p)] for p in problems]
    assert sum(map(len, expected)) > len(expected[0]) > 0  # later shapes add units of their own

    submitted = []

    class Recording(CompilePool):
        def submit_all(self, problem, specs):
            submitted.append([s.key() for s in specs])
            return super().submit_all(problem, specs)

    pool = Recording(workers=1, timeout_s=60, task=report_niceness)
    try:
        done = precompile(problems, Planner(None, recipe.backends, recipe.per_shape), pool, recipe=recipe,
                          plan_processes=2)
    finally:
        pool.close()
    assert submitted == [keys for keys in expected if keys]
    assert done.units == done.ready == sum(map(len, expected))


def test_cli_dry_run_plans_and_counts_without_compiling(tmp_path):
    got = _cli("64x4096x4096-NT,1000x4096x4096-NT", "-b", "cute_dsl", "--per-shape", "4", "--dry-run",
               "--plan-processes", "0", cache=tmp_path)
    assert got.returncode == 0, got.stderr
    assert "kernels planned for 2 shapes" in got.stdout and "(none compiled)" in got.stdout
    assert not list(tmp_path.rglob("*.o"))


def test_a_dry_run_reports_each_kernel_done_as_it_is_planned():
    specs = [KernelSpec(block_m=b, arch="sm_80", shape_specialization="dynamic") for b in (32, 16, 64)]
    problems = [GemmProblem.parse(s) for s in ("64x64x64", "128x64x64", "64x128x128")]
    seen = []
    done = precompile(problems, Planner(ListedProposer(specs), ("triton",), per_shape=3), None,
                      on_progress=lambda *a: seen.append(a))
    assert done.planned_only and done.units == 6
    assert seen[-1] == (3, 6, 6)  # (shapes planned, units done, units planned): the bar full at the end
    assert [s[1] for s in seen] == sorted(s[1] for s in seen) and seen[0][1] == 3  # it moved with the first shape
