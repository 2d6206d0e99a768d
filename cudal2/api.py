"""The public entry point of the search: cudal2.search(shape, ...) -> SearchResult.

Everything heavy (optuna, torch, the evaluator, the proposers) is imported here lazily, so that
`import cudal2` stays cheap.
"""

from __future__ import annotations

from typing import Any, Sequence

from .bench.results import DEFAULT_MODE  # plain data, no heavy imports
from .ir import GemmProblem
from cudal2.tuner.confirm import Confirm  # plain data, no heavy imports

from cudal2.tuner.resolve import (  # noqa: F401 - cudal2.api's names since before the tuner had them
    DEFAULT_ARCH,
    gpu_available,
    default_arch,
    default_runner,
    target_memory,
    check_problem_fits,
    resolve_proposer,
    resolve_store,
    names,
    count,
    check_search_arguments,
)
from .bench.compile_pool import CompilePool
from .codegen import get_backend
from .codegen.registry import default_backends
from .dataset import cluster as dask_cluster
from .ir import DeviceProfile
from cudal2.tuner import precompile as ahead


def search(shape, dtype: str = "float16", layout: str = "NN", backends: Sequence[str] | None = None,
           proposer: Any = "auto", budget: int | str = 64, modes: Sequence[str] = (DEFAULT_MODE,),
           store: Any = None, runner: Any = None, *, arch: str | None = None, sampler: str = "tpe",
           n_proposals: int | None = None, seed: int | None = None, progress: bool = True, tag: str = "",
           batch_size: int = 4, confirm: Confirm | None = Confirm(), cluster: Any = None,
           shape_generic: bool = True, lookahead: bool | int = True, **problem_fields):
    """Search kernels for one GEMM and return a SearchResult.

    shape: (m, n, k), "MxNxK" or a GemmProblem. budget: GPU measurements (64) or GPU time
    ("120s"). modes: timing modes ("chain", "mlp_chain", "layer", "offline", "server", "sustained"); the
    objective is the first of them, "chain" (each call after the work a model's layer does before it, between
    two GEMMs of its input) by default (docs/evaluation.md).
    backends: the codegen backends searched together (default: every backend that declares the arch
    and can compile on this machine: triton and cute_dsl on Hopper; cudal2.codegen.default_backends).
    store: a Store, a SQLAlchemy URL or a file path (default: the user cache store, or
    $CUDAL2_STORE). runner: an evaluator, "gpu" (default: cudal2.bench's GPU evaluator) or "recorded"
    (synthetic numbers from a model, for trying the search on a CPU; never GPU measurements; by
    default into their own store, recorded.db in the cache folder, never the default store).
    problem_fields: further GemmProblem fields (accumulator, out_dtype, epilogue).
    batch_size: specs evaluated per runner call (compiled in parallel by the evaluator).
    confirm: a cudal2.tuner.confirm.Confirm (Confirm(mode="sustained") ranks the leaders at the
    clock their own power draw sets; default: in the objective's mode, the 3 leaders timed 3 more times, the
    winner named by the median of those rounds; None: the best search trial's own figures).
    shape_generic: measure each spec's shape-generic kernel where its backend has one (one compile
    serves every shape of the problem's dtype, layout and epilogue, so the next shape's search finds
    them compiled); False: kernels compiled for this one shape (the backends' "auto").
    lookahead: ask for the next batch while one is measured and compile it meanwhile
    (cudal2.tuner.loop.run_search), so the GPU waits less for the compiler.
    The search resumes a study of the same problem and backends found in the store.
    A problem whose operands and output do not fit the target GPU's free memory (with no GPU,
    the target arch's largest part) is refused first: MemoryFitError, a SpecError.
    cluster: run the search on a worker of a Dask cluster (`pip install 'cudal2[dask]'`): a
    distributed.Client, a scheduler address ("tcp://host:8786"), or "auto" / a number (a local
    cluster, one worker per GPU, started for this call). The worker times on its own GPU (with
    runner=..., a copy of that runner) and writes the trials into the store, which it must reach
    (SQLite on one host, PostgreSQL across hosts). One search runs on one GPU; to search many
    shapes on all of them at once, cudal2.dataset.cluster.run_searches. docs/scale_out.md.
    """
    from cudal2.tuner.loop import run_search

    modes, batch_size, n_proposals = check_search_arguments(budget, modes, batch_size, n_proposals)
    if isinstance(shape, GemmProblem) and not problem_fields:
        problem = shape
    else:
        problem = GemmProblem.parse(shape, dtype=dtype, layout=layout, **problem_fields)
    if backends is None:
        from .codegen.registry import default_backends

        backends = default_backends(arch or default_arch())
    backends = names(backends, "backends")
    if runner == "recorded":  # as the CLI's --runner recorded: synthetic numbers, for trying things on a CPU
        from cudal2.tuner.recorded import RecordedRunner

        runner = RecordedRunner()
    elif runner == "gpu":
        runner = None
    elif isinstance(runner, str):
        raise ValueError(f"runner={runner!r}: give 'gpu', 'recorded' or a Runner object (cudal2.bench.results.Runner)")
    if cluster is not None:
        return _search_on_cluster(problem, cluster, runner, store, backends=backends, proposer=proposer, arch=arch,
                                  budget=budget, modes=tuple(modes), n_proposals=n_proposals, sampler=sampler,
                                  seed=seed, tag=tag, batch_size=batch_size, confirm=confirm,
                                  shape_generic=shape_generic, lookahead=lookahead)
    arch = arch or default_arch()
    own_runner = runner is None
    runner = default_runner() if own_runner else runner
    try:
        check_problem_fits(problem, arch, runner)
        return run_search(problem, backends=backends, arch=arch,
                          proposer=resolve_proposer(proposer, backends, arch), runner=runner,
                          store=resolve_store(store, runner), budget=budget, modes=tuple(modes), n_proposals=n_proposals,
                          sampler=sampler, seed=seed, tag=tag, progress=progress, batch_size=batch_size,
                          confirm=confirm, shape_generic=shape_generic, lookahead=lookahead)
    finally:
        if own_runner and hasattr(runner, "close"):
            runner.close()  # the GPU worker and compile pool we started


def precompile(shapes: Any = "serving:train", dtype: str = "float16", backends: Sequence[str] | None = None,
               proposer: str = "auto", *, arch: str | None = None, per_shape: int | None = None,
               workers: int | None = None, plan_processes: int | None = None, dry_run: bool = False,
               progress: bool = True):
    """Compile ahead the kernels that searches try first, so that a search of a shape never seen
    finds most of them compiled (cudal2.tuner.precompile). Returns a Precompiled.

    shapes: a shape set of cudal2.shapes ("serving:train", the default; "serving", "grid", "all",
    each optionally :train or :validation), a file of shapes, "MxNxK[,MxNxK...]" (layout NN unless a
    shape ends in -NT, -TN or -TT), or a list of shapes or GemmProblems. For each shape the search's
    own proposer (proposer: "auto", "learned" or "rules") is asked for its first per_shape proposals
    (default 32), nothing measured; each shape-generic kernel among them is compiled once into the
    disk caches, in a pool of `workers` processes (default: one a core, less two, up to 16).
    Run it on the machine that will search: the caches are keyed by the toolchain, and CuTe DSL
    kernels carry the GPU's persistent grid. Run again, it loads what is there and compiles the
    rest. Compile failures are counted in the result, never raised. plan_processes: processes that
    ask the proposer beside the compiles (default: a quarter of the cores, up to 4; 0 on fewer than
    8 cores). dry_run: plan and count the kernels, compile nothing."""
    ahead.check_proposer(proposer)
    per_shape = count(per_shape, "per_shape", 1, none_ok=True)
    workers = count(workers, "workers", 1, none_ok=True)
    plan_processes = count(plan_processes, "plan_processes", 0, none_ok=True)
    backends = names(backends, "backends") if backends is not None else ()
    problems = resolve_problems(shapes, dtype)
    arch = arch or default_arch()
    backends = backends or tuple(default_backends(arch))
    recipe = ahead.Recipe(proposer, backends, arch, DeviceProfile.live(arch), per_shape or ahead.PER_SHAPE)
    planner = recipe.planner()  # here too: a proposer that cannot be built fails before any process starts
    if gpu_available() and not dry_run:
        for name in backends:  # what the compile processes read about this GPU (the CuTe DSL's grid)
            get_backend(name).record_device_facts("cuda:0")
    pool = None if dry_run else CompilePool(workers)
    processes = ahead.planning_processes() if plan_processes is None else plan_processes
    try:
        with ahead.Bar(len(problems), progress, "planning" if dry_run else "compiling ahead") as bar:
            return ahead.precompile(problems, planner, pool, on_progress=bar.update, recipe=recipe,
                                    plan_processes=processes)
    finally:
        if pool is not None:
            pool.close()


def resolve_problems(shapes: Any, dtype: str) -> list[GemmProblem]:
    """GemmProblems from a shape set's name, a file, a comma list (cudal2.dataset.resolve_shapes) or
    a list of shapes."""
    if isinstance(shapes, str):
        from .dataset.sweep import resolve_shapes

        return resolve_shapes(shapes, dtype)
    return [s if isinstance(s, GemmProblem) else GemmProblem.parse(s, dtype=dtype) for s in shapes]


def _search_on_cluster(problem: GemmProblem, cluster: Any, runner: Any, store: Any, **options):
    """cudal2.search on one worker of a cluster (see search's cluster argument)."""
    import functools

    dask_cluster.require_dask("cluster=")
    from .dataset.cluster_worker import given_runner, gpu_runner

    make_runner = functools.partial(given_runner, runner) if runner is not None else gpu_runner
    with dask_cluster.open_cluster(cluster, gpus=runner is None, what="cluster=") as client:
        return dask_cluster.run_searches([problem], client, make_runner, resolve_store(store, runner).url,
                                         **options)[0]
