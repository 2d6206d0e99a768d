"""cudal2.matmul and cudal2.linear: run the tuned kernel for a shape, or torch where none is tuned.

Never slower: a tuned kernel is used only where the table records a measured speedup over
torch.matmul above 1 on this GPU and, for an eager call, a saving above its launch path's cost on this
host (the backend's launcher and how many kernels a call launches, measured at that path's first launch:
cudal2.bench.launch_cost; less, and the op's host time would cost a host-bound model more than the
kernel saves). CuTe DSL and Triton kernels are
launched (op_backends). Everything else (CPU tensors, dtypes other than fp16/bf16, batched or strided
operands, shapes never tuned, shapes the IR refuses, operands not 16-byte aligned) runs torch.matmul /
torch.nn.functional.linear. Shapes called without a tuned kernel are remembered (untuned_problems());
cudal2.tune_untuned() measures the learned model's pick for each and the table then serves those where
it won.

Per-call cost. The first call of a (shape, strides, dtype, device, bias) builds a launcher (table
lookup, compile or disk-cache load, workspace) and keeps it in a dict; every later call is that
one dict access, an output allocation and the launch (TVM-FFI for CuTe DSL kernels: plain ints,
about a microsecond). A call whose row count no table entry serves for its weight (matmul's b) shape,
in any mode, goes to torch after two element counts, one dict and one set lookup (_torch_counts),
its key built only on its first call; a linear weight whose calls of that row count run torch in every
mode is kept by identity after its first call, and its later calls go to torch after one dict lookup,
before the grad test (_torch_weights), in C: cudal2.linear is the C front (op_front) over _python_linear
where that builds; a layer route_linears routed (RoutedLinear) does the row test
itself, before any of the op's Python.
The eager path calls no torch op of its own: a dispatcher round trip into Python costs more than the
whole launch.

torch.compile. The decision is made while tracing, where the shapes are known: a shape the table
does not serve, or whose kernel saves less GPU time than the custom op costs the host inside a
compiled graph (TRACED_MIN_SAVING_US), traces to plain F.linear / torch.matmul (inductor's own code,
nothing of ours at run time); a served one to a custom op registered with a fake implementation so
the graph stays whole: cudal2::linear_slot / cudal2::matmul_slot where the kernel has a TVM-FFI
function and the C++ launch path builds (native_launch: no Python per call), else cudal2::linear /
cudal2::matmul, whose kernel is this module's Python. Gradients go through an autograd.Function whose backward
calls cudal2::matmul (so training shapes are served too), and CUDA-graph capture records the
launches like any other kernel's (build launchers by calling once before capture).

CUDA graphs. A call made while a graph captures pays the op's host time once, at capture; replays pay
none. So there the op takes any kernel that beats torch (GRAPH_MIN_SAVING_US), also where an eager
call would keep torch's. Such a kernel is built outside the capture, by route_linears(graphs=True) or
by the call key's first eager call (the warm-up torch.cuda.graph asks for anyway): building allocates and zeroes
memory, which a capture would record. A captured call whose kernel was not built runs torch.
"""

from __future__ import annotations

import os
import weakref
from threading import Lock
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from cudal2.bench.launch_cost import LaunchCosts, path_name
from cudal2.settings import settings
from cudal2.codegen import native_launch
from cudal2 import op_front
from .ir import Epilogue, GemmProblem, SpecError
from .ir.footprint import workspace_bytes
from cudal2.store.table import TunedTable
from .codegen import get_backend
from .codegen.cute_dsl import tvm_ffi_version
from .codegen.operands import torch_dtype

_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
# torch's linear, bound here: torch.compile guards a module object that two modules' globals both reach
# (this one's F and nn.Linear's) with a Python guard function, run on every call of the compiled model
_F_linear = F.linear
_lock = Lock()
_table: TunedTable | None = None
_UNSEEN = object()
# call key (see _matmul_key, _linear_key) -> launcher(a, b, bias) -> output or None, or None for torch
_launchers: dict[tuple, Optional[Callable]] = {}
_untuned: dict[str, GemmProblem] = {}  # problem key -> problem called with no tuned kernel, first-seen order
# The fallback's fast path: a call whose B operand (matmul's b, linear's weight) has a shape no table
# entry serves, or a row count no served entry of that shape has, runs torch without building its call
# key (which costs more than the rest of the op's Python): _plans, and before them _torch_counts. Its
# first call still goes through _bind, which records an untuned problem.
# "linear": {(n, k): fewest rows m served} of servable entries (route_linears' row test), "linear_graph": the
# same at GRAPH_MIN_SAVING_US, for calls while a CUDA graph captures; "mm_numels", "linear_numels" and their
# "_graph" twins: {B's shape: A's element counts (m * k) served}; "served_numels": {B's element count (k * n):
# A's element counts} of every servable entry, eager or while a CUDA graph captures (_torch_counts' guard),
# "eager_numels" the same of those an eager call may take (_graph_only_counts' guard); "grad_served": whether
# any servable entry has a layout other than linear's, NT (_torch_weights' guard); {} = not read yet
_b_shapes: dict = {}
# The eager paths' plan per B operand shape (b.shape, weight.shape), read off _b_shapes on its first call
# (_Plan). A's element count is m * k, one int per row count, cheaper to read than a.shape. A call of a
# count served in neither mode runs torch without a call key or problem once its first call was bound
# (which records a GPU call without a tuned kernel: untuned_problems); one served only in graphs also asks
# whether a capture is underway.
_plans: dict[str, dict] = {"mm": {}, "linear": {}}
_mm_plans, _linear_plans = _plans["mm"], _plans["linear"]  # (the same dicts, bound for the eager paths)
# The miss path, in matmul() and linear() themselves: B's element count (b.numel(), weight.numel()) -> the
# element counts of A whose calls run torch in every mode, each added at the first call of its pair (which
# _run_matmul / _run_linear bind). Counts, not shapes: two numel() calls cost less than one tensor.shape,
# which builds a torch.Size. A pair is added only where no servable entry has it (served_numels), so no
# call a kernel serves is ever sent to torch here; a call of another shape with the same two counts runs
# torch from its first call, without being recorded in untuned_problems.
_torch_counts: dict[str, dict[int, set]] = {"mm": {}, "linear": {}}
_mm_torch_counts, _linear_torch_counts = _torch_counts["mm"], _torch_counts["linear"]
# The same for calls a kernel serves only while a CUDA graph captures: B's element count -> A's element
# counts whose calls run torch unless a capture is underway, each added at the first call of its pair. A
# pair is added only where no entry an eager call may take has it (eager_numels), so no call a kernel
# serves eagerly is sent to torch here.
_graph_only_counts: dict[str, dict[int, set]] = {"mm": {}, "linear": {}}
_mm_graph_only_counts, _linear_graph_only_counts = _graph_only_counts["mm"], _graph_only_counts["linear"]
# The fallback's fastest path, before the grad checks and the weight's element count: per linear weight, the
# calls that run torch in every mode, with or without gradients. Kept only for a contiguous weight and where every
# servable entry has linear's layout, NT: backward's GEMMs are then of layouts NN and TN, which none serves. (The
# weight gradient's GEMM is NT only where x and its gradient are both column-major views; such a call's weight
# gradient then runs torch's GEMM, as it would through F.linear.)
# id(weight) -> _EVERY_CALL where no servable entry has the weight's shape (then not even x's element count is
# read); _UNLESS_CAPTURED where entries serve its shape only while a CUDA graph captures and each such count's
# kernel was built (a call of any count runs torch unless a capture can record it: the count is not read);
# else the _Plan of its shape (x's element counts served in no mode, or only while a CUDA graph captures; both
# grow as calls are bound). _torch_weight_refs keeps a weak reference to each weight, whose
# callback drops its id when the weight dies, before the id can name another tensor. (A weight whose shape
# changes in place, through .data, keeps its old entry: a call it names runs torch, which is never wrong.)
# Filled at a weight's first call (_run_linear), and for a Parameter at a call _torch_counts sends to torch, so
# that a plain tensor made anew for every call is not kept. With the checks it skips (grad mode, requires_grad,
# two element counts and their lookups) the op's Python cost 318 ns a call on this project's CPU, without them 98
# (benchmarks/op_fallback_python.py, 2026-11-29).
_torch_weights: dict[int, object] = {}
_torch_weight_refs: dict[int, weakref.ref] = {}
_EVERY_CALL = object()
_UNLESS_CAPTURED = object()
_Parameter = torch.nn.Parameter
# each launch path's cost on this host (cudal2.bench.launch_cost): an eager call takes a kernel only where its
# saving exceeds its path's cost, measured at the first launch of that path
_launch_costs = LaunchCosts()
# Entries an eager call declined because their own launch path costs more than they save (_eager_launcher),
# by (problem key, GPU, spec key). The fast path's plans leave them out (_eager_entries): otherwise a count the
# backend's plain path would serve, but whose kernel's path (a split-K kernel's two launches) does not, would
# build its call key on every call only to find torch there (7 us a call more than F.linear on an H200 host,
# 1x3072x3072, 2026-11-30).
_declined_eager: set[tuple] = set()
# CUDA graph capture (see GRAPH_MIN_SAVING_US): (problem key, device) -> the kernel's bound run(a, b, d, bias)
# (or None for torch), built outside any capture; call key -> launcher of a call made while capturing
_graph_runs: dict[tuple, Optional[Callable]] = {}
_graph_launchers: dict[tuple, Optional[Callable]] = {}


def tuned_table() -> TunedTable:
    """The table in use: set_table()'s, else $CUDAL2_TABLE, else the default store (read once)."""
    global _table
    with _lock:
        if _table is None:
            try:
                _table = TunedTable.default()
            except Exception as e:  # noqa: BLE001 - any table or store that cannot be read: say so once, then torch
                _warn(f"cudal2: {str(e).splitlines()[0] if str(e) else type(e).__name__}; cudal2.matmul/linear run "
                      "torch until set_table() is given a valid table")
                _table = TunedTable()
        return _table


def set_table(table: TunedTable | str | os.PathLike | None) -> None:
    """Use this table (or JSON file) from now on; None reloads the default on next use. Graphs
    torch.compile traced before keep the choices they were traced with."""
    global _table
    with _lock:
        _table = TunedTable.load(table) if isinstance(table, (str, os.PathLike)) else table
        native_launch.forget()
        _launchers.clear()
        _declined_eager.clear()
        _forget_plans()
        _graph_runs.clear()
        _graph_launchers.clear()


def _forget_plans() -> None:
    """Drop what the eager fast path knew of the table (the table, or a backend's launch cost, changed)."""
    _b_shapes.clear()
    _plans["mm"].clear()
    _plans["linear"].clear()
    for counts in (*_torch_counts.values(), *_graph_only_counts.values()):
        counts.clear()
    _torch_weights.clear()
    _torch_weight_refs.clear()


def _remember_torch_weight(weight: torch.Tensor, counts) -> None:
    """Send weight's later calls that counts (_EVERY_CALL, or its shape's _Plan) names to torch at once (see
    _torch_weights)."""
    if not weight.is_contiguous():  # (see _torch_weights)
        return
    key = id(weight)
    if key not in _torch_weight_refs:
        def forget(_ref, key=key):
            _torch_weights.pop(key, None)
            _torch_weight_refs.pop(key, None)
        _torch_weight_refs[key] = weakref.ref(weight, forget)
    _torch_weights[key] = counts


def _table_b_shapes() -> dict:
    """The B operand shapes of the table's entries the op could serve (the op's own rule, on any GPU),
    per op, each with the fewest rows (M) it is served at (see _b_shapes); eager, and while a CUDA
    graph captures."""
    shapes = _b_shapes
    if not shapes:
        found: dict = {"served_numels": {}, "eager_numels": {}}
        found["grad_served"] = False  # (see _torch_weights)
        for name, margin in (("", None), ("_graph", GRAPH_MIN_SAVING_US)):
            problems = sorted(_servable_problems(margin), key=lambda p: -p.m)  # (the fewest rows last: they win)
            found["grad_served"] = found["grad_served"] or any(p.layout != "NT" for p in problems)
            for p in problems:
                found["served_numels"].setdefault(p.k * p.n, set()).add(p.m * p.k)
                if not name:
                    found["eager_numels"].setdefault(p.k * p.n, set()).add(p.m * p.k)
            found["linear" + name] = {(p.n, p.k): p.m for p in problems}
            for op, b_shape in (("mm", lambda p: (p.k, p.n)), ("linear", lambda p: (p.n, p.k))):
                numels: dict[tuple, set] = {}  # B shape -> A's element counts served (m * k)
                for p in problems:
                    numels.setdefault(b_shape(p), set()).add(p.m * p.k)
                found[op + "_numels" + name] = numels
        with _lock:
            shapes.update(found)
    return shapes


def _servable_problems(min_saving_us: float | None = None) -> list[GemmProblem]:
    """The table's problems the op would serve on some GPU with min_saving_us (see _op_entry)."""
    distinct = {e.problem.key(): e.problem for e in tuned_table()}
    return [p for p in distinct.values() if _op_entry(p, None, min_saving_us) is not None]


def untuned_problems() -> list[GemmProblem]:
    """GEMM problems cudal2.matmul/linear ran on a GPU without a tuned kernel (torch served them)."""
    return list(_untuned.values())


# ---- from a call to its problem and launcher (once per call key) -------------------------------------
def _layout_letter(t: torch.Tensor) -> str | None:
    if t.is_contiguous():
        return "N"
    if t.dim() == 2 and t.t().is_contiguous():
        return "T"
    return None


def _call_class(a: torch.Tensor, b_layout: str | None, m: int, n: int, k: int, other: tuple,
                bias: torch.Tensor | None) -> tuple | None:
    """What of a call picks its kernel, as plain values: (m, n, k, dtype, layout, bias, device type,
    device index); or None where torch must serve it: another dtype, mixed devices or dtypes, a
    layout or bias the kernels do not take, an empty product. (Plain values, so that torch.compile,
    while tracing, can compare them with _served_classes' constants.)"""
    if a.dtype not in _DTYPES or any(t.dtype != a.dtype or t.device != a.device for t in other):
        return None
    if bias is not None and (bias.dim() != 1 or not bias.is_contiguous() or bias.shape[0] != n):
        return None
    a_layout = _layout_letter(a) if a.dim() == 2 else ("N" if a.is_contiguous() else None)
    if a_layout is None or b_layout is None or min(m, n, k) < 1:
        return None
    return (m, n, k, _DTYPES[a.dtype], a_layout + b_layout, bias is not None, a.device.type, a.device.index)


def _linear_class(x, weight, bias) -> tuple | None:
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        return None
    n, k = weight.shape
    m = 1
    for extent in x.shape[:-1]:  # (not numel(), which torch.compile's tracer holds as a symbol)
        m *= extent
    w_layout = "T" if weight.is_contiguous() else ("N" if weight.t().is_contiguous() else None)  # B = weight.T
    return _call_class(x, w_layout, m, n, k, (weight,) + ((bias,) if bias is not None else ()), bias)


def _matmul_class(a, b) -> tuple | None:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        return None
    return _call_class(a, _layout_letter(b), a.shape[0], b.shape[1], a.shape[1], (b,), None)


def _problem_of(call: tuple | None) -> GemmProblem | None:
    """The GEMM problem of a CUDA call's class, or None (CPU tensors; a shape the IR refuses, which
    cudal2 never tuned)."""
    if call is None or call[6] != "cuda":
        return None
    m, n, k, dtype, layout, bias = call[:6]
    try:
        return GemmProblem(m=m, n=n, k=k, dtype=dtype, layout=layout, epilogue=Epilogue(bias=bias))
    except SpecError:
        return None


ENV_OP_BACKENDS = "CUDAL2_OP_BACKENDS"
# The backends whose compiled kernels have a bound launch path (kernel.bind: run(a, b, d, bias), nothing
# checked per call), which the op's launchers and CUDA-graph captures call
LAUNCHABLE_BACKENDS = frozenset({"cute_dsl", "triton"})


def op_backends() -> frozenset[str]:
    """The backends whose kernels the op launches: those with a bound launch path (LAUNCHABLE_BACKENDS).
    Where each is served depends on the call: while a CUDA graph captures, any kernel that beats torch
    (its launch cost is paid once, at capture); an eager call, one whose saving exceeds its backend's
    launch cost on this host (_eager_margin_us). $CUDAL2_OP_BACKENDS (a comma list) narrows or names
    them, e.g. to keep one backend's kernels out of a model."""
    named = settings().op_backends
    if named is not None:
        return frozenset(b.strip() for b in named.split(",") if b.strip())
    return LAUNCHABLE_BACKENDS


# Where no launch can be timed (no CUDA device: the call is torch's anyway, or a test's CPU stand-in for
# a GPU), an eager call takes a kernel only where it saves this much GPU time a call: what a call through
# the op cost a host-bound decoder layer more than nn.Linear's on an H100 host (8 to 13 us;
# benchmarks/layer_host_time.py). On a GPU each backend's own measured cost replaces it
# (cudal2.bench.launch_cost). (Calls made while a CUDA graph captures follow GRAPH_MIN_SAVING_US instead.)
EAGER_MIN_SAVING_US = 10.0
# While a CUDA graph captures, the op's host time is spent once, at capture: a replay launches the
# recorded kernels with no host work. So a call made then takes any kernel whose measured GPU time
# beats torch's (the table's own rule, a confirmed speedup above 1), however little it saves.
GRAPH_MIN_SAVING_US = 0.0
# Whatever the path, a kernel is served only where its measured speedup over torch clears the noise of
# that measurement. In chain mode (the objective) the eight smallest validation winners' ratios over
# torch moved by 0.9% (one standard deviation) between two runs on one H200, and the 30 winners' by a
# median 0.8% over four H200s (benchmarks/results/crosscheck_winners_chain_*, 2026-11-29); in layer mode
# 0.45% on one H200 and 1-1.4% between H200s. A kernel measured 1.000x was served and ran 0.988x of
# F.linear (op_served_h200_2026-11-29). So the table's win must exceed about two standard deviations.
MIN_SERVED_SPEEDUP = 1.02


def _saving_us(entry) -> float:
    """GPU time the entry's kernel saves a call against torch.matmul (0 where torch was not timed)."""
    torch_ms = entry.baselines_ms.get("torch")
    return (torch_ms - entry.kernel_ms) * 1e3 if torch_ms is not None else 0.0


def _eager_margin_us(backend: str) -> float:
    """What an eager call's kernel of backend must save before it is bound: the cost of the backend's plain
    launch path (one kernel through its fastest launcher, the cheapest a kernel of it can take), where
    measured; the kernel's own path is known, and measured where it is new, when _eager_launcher binds it,
    which decides again. Before the plain path is measured on a GPU, nothing; where nothing can be
    measured, EAGER_MIN_SAVING_US."""
    known = _launch_costs.known(backend)
    if known is not None:
        return known
    return 0.0 if _launch_costs.can_measure(torch.device("cuda")) else EAGER_MIN_SAVING_US


def _eager_entries(problem: GemmProblem, gpu: str | None) -> list:
    """The table's entries for problem on this GPU that an eager call may take, best speedup first: one
    per backend the op launches, whose saving exceeds that backend's margin (_eager_margin_us)."""
    table, found = tuned_table(), []
    for backend in sorted(op_backends()):
        entry = table.lookup(problem, gpu=gpu, backends=(backend,), min_speedup=MIN_SERVED_SPEEDUP)
        if entry is not None and _saving_us(entry) > _eager_margin_us(backend) \
                and _entry_id(entry) not in _declined_eager:
            found.append(entry)
    return sorted(found, key=lambda e: -(e.speedup("torch") or 0.0))


def _entry_id(entry) -> tuple:
    """What names a table entry in _declined_eager."""
    return entry.problem.key(), entry.gpu, entry.spec.key()


def _op_entry(problem: GemmProblem, gpu: str | None, min_saving_us: float | None = None):
    """The table's entry for problem on this GPU of a backend the op launches whose kernel saves at least
    min_saving_us a call, else None; min_saving_us None: an eager call's (see _eager_entries)."""
    if min_saving_us is None:
        entries = _eager_entries(problem, gpu)
        return entries[0] if entries else None
    entry = tuned_table().lookup(problem, gpu=gpu, backends=op_backends(), min_speedup=MIN_SERVED_SPEEDUP)
    if entry is None:
        return None
    return entry if _saving_us(entry) >= min_saving_us else None


def tuned_kernel(problem: GemmProblem, gpu: str | None, min_saving_us: float | None = None):
    """The compiled tuned kernel for problem on this GPU, or None when the table has none that
    beats torch by min_saving_us a call (default: an eager call's margin, its backend's launch cost;
    of a backend the op launches: op_backends). A kernel that fails to build falls back to torch too
    (with a warning)."""
    entry = _op_entry(problem, gpu, min_saving_us)
    return _compiled(entry, problem) if entry is not None else None


def _compiled(entry, problem: GemmProblem):
    """entry's kernel for problem, compiled (or loaded), or None with a warning where it cannot be built."""
    try:
        backend = get_backend(entry.spec.backend)
        return backend.compile(backend.render(problem, entry.spec))
    except Exception as e:  # noqa: BLE001 - the table may name a backend this install cannot build
        _warn(f"cudal2: tuned kernel for {problem.label()} could not be built ({e}); using torch")
        return None


def launch_costs() -> dict[str, float]:
    """Each launch path's cost measured on this host so far (cudal2.bench.launch_cost.path_name: "triton",
    "triton x2", ...), in microseconds beyond torch's call."""
    return dict(_launch_costs.items())


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, RuntimeWarning, stacklevel=4)


def _bind(key: tuple, problem: GemmProblem | None, out_shape: tuple, device, operands: tuple | None = None,
          torch_call: Callable | None = None) -> Optional[Callable]:
    """Build and keep the launcher of one call key: run(a, b, bias) -> output, or None where a call's
    operands are not 16-byte aligned (then torch serves that call). Never called while a CUDA graph
    captures (see _captured): building allocates memory. operands and torch_call: the call's own, with
    which the first launch of a backend measures its launch cost (_eager_launcher)."""
    with _lock:
        if key in _launchers:
            return _launchers[key]
    launcher = None
    if problem is not None:
        gpu = torch.cuda.get_device_name(device)
        launcher = _eager_launcher(problem, gpu, out_shape, device, operands, torch_call, key[0])
        if launcher is None:
            if tuned_table().lookup(problem, gpu=gpu, backends=op_backends()) is None:  # (not: a win too small)
                _untuned.setdefault(problem.key(), problem)
            else:  # a win too small for eager calls may still serve captured ones
                _ready_for_graphs(problem, device)
    with _lock:
        _launchers[key] = launcher
    return launcher


def _eager_launcher(problem: GemmProblem, gpu: str, out_shape: tuple, device, operands: tuple | None,
                    torch_call: Callable | None, op: str = "linear") -> Optional[Callable]:
    """The launcher of the best entry an eager call takes (_eager_entries), or None. Each candidate is
    launched once with this call's operands, which tells its launch path (the bound run's launch_path,
    known after a first call: how many kernels, through which launcher); a path launched here for the
    first time on a GPU has its cost measured against torch_call. Where the kernel's saving does not
    exceed its path's cost, the next entry (another backend's) is tried. The cost timed is the served
    call's own beyond the launch: its call key (op: "mm" or "linear"), which the eager path builds before
    it finds the launcher (1.5 us a call on one H200 host, 2026-11-29). Two kernels of one backend may
    cost differently: a Triton split-K kernel whose reduction is a second kernel launches twice."""
    key_of = (lambda a, b, bias: _matmul_key(a, b)) if op == "mm" else _linear_key
    for entry in _eager_entries(problem, gpu):
        kernel = _compiled(entry, problem)
        launcher = _launcher(kernel, problem, out_shape, device) if kernel is not None else None
        if launcher is None:
            continue
        if operands is not None and torch_call is not None and _launch_costs.can_measure(device) \
                and not _captured_now(operands[0]) \
                and launcher(*operands) is not None:  # (None: operands off alignment, nothing launched)
            path = path_name(entry.spec.backend, getattr(launcher.run, "launch_path", None))
            cost = _launch_costs.known(path)
            measured = cost is None
            if measured:
                cost = _launch_costs.measure(path, lambda: (key_of(*operands), launcher(*operands)), torch_call)
            declined = _saving_us(entry) <= cost
            if declined:
                with _lock:
                    _declined_eager.add(_entry_id(entry))
            if measured or declined:
                # the fast path's plans assumed no cost for this path, or took this entry for an eager call's
                _forget_plans()
            if declined:
                continue
        return launcher
    return None


def _ready_for_graphs(problem: GemmProblem, device) -> None:
    """Build, outside any capture, what a call of problem made while a CUDA graph captures launches
    (see GRAPH_MIN_SAVING_US): the kernel (compiled or loaded) and its workspace, bound. Building it
    during the capture would allocate and zero memory there, which the capture would record into the
    graph; so a captured call whose kernel is not ready runs torch. Once per problem and device."""
    where = (problem.key(), device)
    if where in _graph_runs:
        return
    kernel = tuned_kernel(problem, torch.cuda.get_device_name(device), GRAPH_MIN_SAVING_US)
    run = _bound_run(kernel, problem, device) if kernel is not None else None
    if run is not None:
        _warm(run, problem, device)
    with _lock:
        _graph_runs[where] = run


def _warm(run: Callable, problem: GemmProblem, device) -> None:
    """Launch run once on zeros, outside any capture: a backend that loads its module at the first
    launch (Triton's JIT) would load it while a graph captures, which invalidates the capture."""
    m, n, k = problem.shape
    dtype, c_dtype = torch_dtype(problem.dtype), torch_dtype(problem.c_dtype)
    zeros = lambda size, dt: torch.zeros(size, dtype=dt, device=device)  # noqa: E731
    run(zeros(m * k, dtype), zeros(k * n, dtype), zeros(m * n, c_dtype),
        zeros(n, c_dtype) if problem.epilogue.bias else None)


def _bound_run(kernel, problem: GemmProblem, device) -> Optional[Callable]:
    """kernel.bind for problem on device: run(a, b, d, bias), or None (with a warning) where it cannot."""
    try:
        run = kernel.bind(problem.m, problem.n, problem.k, device)
        try:  # which backend a launcher runs, for whoever asks which kernel served a call
            run.backend = kernel.source.backend
        except AttributeError:
            pass
        return run
    except torch.OutOfMemoryError as e:  # its split-K workspace, say: torch needs none of ours
        _warn(f"cudal2: the tuned kernel for {problem.label()} ran out of device memory "
              f"({str(e).splitlines()[0][:200]}); using torch")
    except ValueError as e:
        _warn(f"cudal2: the tuned kernel for {problem.label()} cannot run it ({e}); using torch")
    return None


def _launcher(kernel, problem: GemmProblem, out_shape: tuple, device) -> Optional[Callable]:
    """launch(a, b, bias) -> output of kernel's calls of out_shape, or None where it cannot run them."""
    run = _bound_run(kernel, problem, device)
    return _launch_of(run, problem, out_shape, device) if run is not None else None


def _launch_of(run: Callable, problem: GemmProblem, out_shape: tuple, device) -> Callable:
    """launch(a, b, bias) -> output of out_shape, through a bound run (kernel.bind's)."""
    dtype, empty = torch_dtype(problem.c_dtype), torch.empty

    def launch(a, b, bias):
        if (a.data_ptr() | b.data_ptr()) & 15:  # TMA loads need 16-byte aligned operands
            return None
        d = empty(out_shape, dtype=dtype, device=device)
        run(a, b, d, bias)
        return d
    launch.backend, launch.run = getattr(run, "backend", None), run
    return launch


# ---- the eager paths ---------------------------------------------------------------------------------
def _matmul_key(a, b) -> tuple:
    return ("mm", a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.get_device(), b.get_device())


def _linear_key(x, weight, bias) -> tuple:
    return ("linear", x.shape, x.stride(), weight.shape, weight.stride(), x.dtype, weight.dtype, x.get_device(),
            weight.get_device(), None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device()))


class _Plan:
    """What the eager paths know of one B operand shape, by A's element count (m * k)."""

    __slots__ = ("eager", "graph", "bound", "bound_graph_only", "served", "to_torch", "eager_served",
                 "to_torch_eager", "torch_weight")

    def __init__(self, eager, graph, served, to_torch: set, eager_served, to_torch_eager: set):
        self.eager = eager  # counts a kernel serves eager calls of
        self.graph = graph  # counts a kernel serves calls of while a CUDA graph captures
        self.bound: set = set()  # counts served in neither mode, their first call bound
        self.bound_graph_only: set = set()  # counts served only in graphs, a call outside a capture bound
        self.served = served  # counts any servable entry of this B element count has (served_numels)
        self.to_torch = to_torch  # this B element count's _torch_counts set
        self.eager_served = eager_served  # counts an eager call's entry of this B element count has
        self.to_torch_eager = to_torch_eager  # this B element count's _graph_only_counts set
        self.torch_weight = None  # linear: what _torch_weights holds for a weight of this shape (or None)

    def bound_once(self, numel: int, bound: set) -> bool:
        """Whether a call of numel, served by no kernel in this call's mode, was bound before (then it
        runs torch at once); else record it as bound, and send its later calls to torch before any of the
        eager paths' Python where no kernel can ever serve them: matmul() and linear() read to_torch
        (served in no mode) and to_torch_eager (served only while a CUDA graph captures)."""
        if numel in bound:
            return True
        bound.add(numel)
        if bound is self.bound and numel not in self.served:
            self.to_torch.add(numel)
        elif bound is self.bound_graph_only and numel not in self.eager_served:
            self.to_torch_eager.add(numel)
            if self.torch_weight is self and not self.eager and self.graph <= bound:
                # served only in graphs, and the kernel of every such count built (its first call's, which
                # follows): a weight of this shape need not have x's count read outside a capture
                self.torch_weight = _UNLESS_CAPTURED
        return False


def _plan(op: str, b_shape) -> _Plan:
    """The eager paths' plan for B operands of b_shape (see _plans), made on its first call."""
    shapes = _b_shapes or _table_b_shapes()
    key = tuple(b_shape)
    b_numel = key[0] * key[1]
    plan = _Plan(shapes[op + "_numels"].get(key, frozenset()), shapes[op + "_numels_graph"].get(key, frozenset()),
                 shapes["served_numels"].get(b_numel, frozenset()), _torch_counts[op].setdefault(b_numel, set()),
                 shapes["eager_numels"].get(b_numel, frozenset()), _graph_only_counts[op].setdefault(b_numel, set()))
    if op == "linear" and not shapes["grad_served"]:  # (see _torch_weights)
        plan.torch_weight = _EVERY_CALL if not plan.eager and not plan.graph else plan
        if torch.cuda.is_available():  # the C front's row test asks it, and its torch calls go through it
            op_front.attach_probe()
    _plans[op][b_shape] = plan
    return plan


def _remember_parameter(weight: torch.Tensor) -> None:
    """Keep a model's weight (a Parameter) whose call ran torch in _torch_weights, where its shape's plan allows."""
    if weight.dim() == 2 and not _b_shapes.get("grad_served", True):
        plan = _linear_plans.get(weight.shape) or _plan("linear", weight.shape)
        if plan.torch_weight is not None:
            _remember_torch_weight(weight, plan.torch_weight)


def _run_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    plan = _mm_plans.get(b.shape) or _plan("mm", b.shape)
    numel = a.numel()
    if numel not in plan.eager:  # no kernel serves an eager call of this many rows
        bound = plan.bound
        if numel in plan.graph:
            if _captured_now(a):
                return _captured(_matmul_key(a, b), lambda: _matmul_class(a, b), (a, b, None),
                                 (a.shape[0], b.shape[1]), lambda: torch.matmul(a, b))
            bound = plan.bound_graph_only
        if plan.bound_once(numel, bound):
            return torch.matmul(a, b)
    key = _matmul_key(a, b)
    launch = _launchers.get(key, _UNSEEN)
    if launch is _UNSEEN:
        launch = _bind(key, _problem_of(_matmul_class(a, b)), (a.shape[0], b.shape[1]), a.device, (a, b, None),
                       lambda: torch.matmul(a, b))
    if launch is None and numel in plan.graph and _captured_now(a):  # no eager kernel (its launch costs more than
        # it saves), but a capture pays the launch once
        return _captured(key, lambda: _matmul_class(a, b), (a, b, None), (a.shape[0], b.shape[1]),
                         lambda: torch.matmul(a, b))
    out = launch(a, b, None) if launch is not None else None
    return out if out is not None else torch.matmul(a, b)


def _run_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    plan = _linear_plans.get(weight.shape) or _plan("linear", weight.shape)
    numel = x.numel()
    if numel not in plan.eager:  # no kernel serves an eager call of this many rows
        bound = plan.bound
        if numel in plan.graph:
            if _captured_now(x):
                return _captured(_linear_key(x, weight, bias), lambda: _linear_class(x, weight, bias),
                                 (x, weight, bias), (*x.shape[:-1], weight.shape[0]),
                                 lambda: _F_linear(x, weight, bias))
            bound = plan.bound_graph_only
        bound_before = plan.bound_once(numel, bound)
        if plan.torch_weight is not None:  # (here, not on a served call's path: a served call needs no entry)
            _remember_torch_weight(weight, plan.torch_weight)
        if bound_before:
            return _F_linear(x, weight, bias)
    key = _linear_key(x, weight, bias)
    launch = _launchers.get(key, _UNSEEN)
    if launch is _UNSEEN:
        launch = _bind(key, _problem_of(_linear_class(x, weight, bias)), (*x.shape[:-1], weight.shape[0]), x.device,
                       (x, weight, bias), lambda: _F_linear(x, weight, bias))
    if launch is None and numel in plan.graph and _captured_now(x):  # as in _run_matmul
        return _captured(key, lambda: _linear_class(x, weight, bias), (x, weight, bias),
                         (*x.shape[:-1], weight.shape[0]), lambda: _F_linear(x, weight, bias))
    out = launch(x, weight, bias) if launch is not None else None
    return out if out is not None else _F_linear(x, weight, bias)


def _call_launcher(key: tuple, graphs: bool) -> Optional[Callable]:
    """The launcher the op runs for the call of this key (_linear_key, _matmul_key), as its last call of the
    key decided: the eager one, which a capture takes too, else (graphs) the one a capture took; None where
    the op has not seen the key or sends it to torch."""
    launch = _launchers.get(key)
    return _graph_launchers.get(key) if launch is None and graphs else launch


def _serves(key: tuple, graphs: bool) -> bool:
    """Whether the op runs a tuned kernel for the call of this key (see _call_launcher)."""
    return _call_launcher(key, graphs) is not None


def _captured(key: tuple, call_class: Callable, operands: tuple, out_shape: tuple, torch_call: Callable):
    """A call made while a CUDA graph captures, of a shape no kernel serves eager calls of: its graph
    launcher, made from the run an earlier call outside the capture built (_ready_for_graphs: a
    routed layer's at route_linears, any other call key's at its first eager call), else torch.
    (Host time spent here is spent once, at capture: hence the closures.)"""
    launch = _graph_launchers.get(key, _UNSEEN)
    if launch is _UNSEEN:
        problem, device = _problem_of(call_class()), operands[0].device
        run = _graph_runs.get((problem.key(), device)) if problem is not None else None
        if run is None:  # (not built before this capture: not remembered, so a later capture may use it)
            return torch_call()
        launch = _launch_of(run, problem, out_shape, device)
        with _lock:
            _graph_launchers[key] = launch
    out = launch(*operands) if launch is not None else None
    return out if out is not None else torch_call()


# ---- the custom ops: what a traced graph calls for a shape the table serves ------------------------
_lib = torch.library.Library("cudal2", "DEF")
_lib.define("matmul(Tensor a, Tensor b) -> Tensor")
_lib.define("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
_lib.impl("matmul", _run_matmul, "CompositeExplicitAutograd")
_lib.impl("linear", _run_linear, "CompositeExplicitAutograd")


@torch.library.register_fake("cudal2::matmul")
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("cudal2::linear")
def _(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


# What a traced graph calls where the kernel has a C++ launch path (cudal2.codegen.native_launch, which
# implements them once loaded): the slot names the kernel bound for the call while tracing.
_lib.define("linear_slot(Tensor x, Tensor weight, Tensor? bias, int slot) -> Tensor")
_lib.define("matmul_slot(Tensor a, Tensor b, int slot) -> Tensor")


@torch.library.register_fake("cudal2::matmul_slot")
def _(a, b, slot):
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("cudal2::linear_slot")
def _(x, weight, bias, slot):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


class _Matmul(torch.autograd.Function):
    @staticmethod
    def forward(a, b):
        return torch.ops.cudal2.matmul(a, b)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        ga = torch.ops.cudal2.matmul(grad, b.t()) if ctx.needs_input_grad[0] else None
        gb = torch.ops.cudal2.matmul(a.t(), grad) if ctx.needs_input_grad[1] else None
        return ga, gb


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(x, weight, bias):
        return torch.ops.cudal2.linear(x, weight, bias)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias = inputs
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        gx = torch.ops.cudal2.matmul(g, weight).reshape(x.shape) if ctx.needs_input_grad[0] else None
        gw = torch.ops.cudal2.matmul(g.t(), x.reshape(-1, x.shape[-1])) if ctx.needs_input_grad[1] else None
        gb = g.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb


# Bound once: the eager paths below run on every call, where a module attribute lookup costs as much
# as the check. (torch.compile still recognizes is_compiling: it is the same function object.)
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_torch_matmul = torch.matmul


class _IsCompiling:
    """Where torch keeps no _is_compiling_flag: torch.compiler.is_compiling() itself, read as that flag."""

    @property
    def _is_compiling_flag(self) -> bool:
        return _is_compiling()


# What _is_compiling() answers, as the eager paths ask it: `_dynamo_compiling() or _compile_state._is_compiling_flag`,
# one Python call where is_compiling() makes two. While Dynamo traces, it folds is_dynamo_compiling() to True
# (so the flag is never traced); Python that a compile or torch.export runs outside Dynamo (non-strict export)
# sees the flag that is_compiling() returns, whose other case, TorchScript, never runs this module's Python.
_dynamo_compiling = torch.compiler.is_dynamo_compiling
_compile_state = torch.compiler if hasattr(torch.compiler, "_is_compiling_flag") else _IsCompiling()
# Whether a CUDA graph captures on the current stream: a CUDA runtime call (cudaStreamGetCaptureInfo; a
# CPU-only torch has a stub that raises, the real one creates no CUDA context). A capture never runs on
# the legacy default stream (raw handle 0), where eager calls run unless the caller chose another
# stream; so the eager paths ask _raw_stream first, a read of torch's own state, and only off that
# stream the runtime.
_capturing = torch._C._cuda_isCurrentStreamCapturing if torch.backends.cuda.is_built() else (lambda: False)
_raw_stream = torch._C._cuda_getCurrentRawStream if torch.backends.cuda.is_built() else (lambda device: 0)


def _captured_now(t: torch.Tensor) -> bool:
    """Whether a CUDA graph is capturing the calls on t's device now (see _capturing)."""
    return t.is_cuda and _raw_stream(t.get_device()) != 0 and _capturing()


def _needs_grad(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    return _grad_enabled() and (a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad))


def _autograd_takes(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Whether an eager call that needs gradients goes through _Matmul / _Linear (whose backward calls
    the op, so that training shapes are served too): only one the kernels could take, of their dtypes,
    no empty operand, a bias of one value per output column (b is linear's weight). Any other is
    torch's own autograd: a complex gradient is conjugated, a broadcast bias's is summed to its shape."""
    return (a.dtype in _DTYPES and a.numel() > 0 and b.numel() > 0
            and (bias is None or (bias.dim() == 1 and bias.shape[0] == b.shape[0])))


def _visible_gpus() -> list[tuple[str, int | None, str]]:
    """(device type, index, GPU name) of every GPU this process sees."""
    if not torch.cuda.is_available():
        return []
    return [("cuda", i, torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]


# A compiled graph reaches the custom op through the dispatcher and back into Python (_run_linear),
# which costs host time that inductor's own GEMM call does not. Measured on an H100 host, 2026-11-26
# (docs/results.md): +7 us a call for one compiled layer (benchmarks/op_overhead.py), and 25 to 30 us
# a call inside the compiled decoder layer, whose k/v GEMMs the kernel made 0.9 us faster: the layer
# ran 13% slower. So a traced graph takes the op only where the kernel saves at least this much
# GPU time a call; elsewhere it keeps torch's GEMM.
TRACED_MIN_SAVING_US = 25.0
# Through the C++ launch path (native_launch) a compiled call alone costs less host time than inductor's
# own GEMM call: 4.9 to 27 us less on four served shapes (H100 host, 2026-11-26, op_overhead_native_*).
# Inside the compiled decoder layer it still cost more: with q, k, v and o served by kernels that each
# saved about a microsecond, the layer ran 3.8% and 6.0% slower at 1 and 16 tokens (about 9 us a call;
# e2e_decoder_native_h100_2026-11-26). So a kernel must save what an eager call must.
NATIVE_TRACED_MIN_SAVING_US = 10.0


def _native_path(problem: GemmProblem, spec) -> bool:
    """Whether a traced graph launches this kernel through the C++ slot (cudal2.codegen.native_launch): a
    CuTe DSL kernel with no workspace, where the extension can be had. A kernel with a workspace takes the
    Python op, whose launcher makes the stream of each launch wait for the workspace's previous stream
    (cudal2.codegen.workspace); the C++ slot does not, and two streams of a compiled model would race on it."""
    return (spec.backend == "cute_dsl" and workspace_bytes(problem, spec) == 0 and bool(tvm_ffi_version())
            and native_launch.library() is not None)


def _traced_min_saving_us(entry) -> float:
    """The GPU time an entry's kernel must save a call for a traced graph to take it: its launch path's
    host cost inside a compiled graph."""
    if _native_path(entry.problem, entry.spec):
        return NATIVE_TRACED_MIN_SAVING_US
    # the Python op launches through the eager launcher, whose launch path's own cost may be the larger (the
    # costliest of the backend's measured paths: which one this kernel takes is known once it is bound)
    return max([TRACED_MIN_SAVING_US, *_launch_costs.of_backend(entry.spec.backend)])


@torch.compiler.assume_constant_result
def _served_classes() -> tuple:
    """Every call class (see _call_class) the table serves on a visible GPU inside a traced graph (a
    measured win of at least _traced_min_saving_us a call). torch.compile runs this while tracing and
    keeps the answer as a constant of the graph."""
    table, served = tuned_table(), []
    for device_type, index, name in _visible_gpus():
        for entry in table:
            p = entry.problem
            call = (p.m, p.n, p.k, p.dtype, p.layout, p.epilogue.bias, "cuda", index)
            if entry.gpu in (name, "") and _problem_of(call) == p:  # the op's own problems
                if _op_entry(p, name, _traced_min_saving_us(entry)) is not None:  # a measured win, large enough
                    served.append(call[:6] + (device_type, index))
    return tuple(served)


def _traced_weight_shapes() -> set[tuple[int, int]]:
    """(N, K) weight shapes of the linear calls a traced graph would serve on a visible GPU."""
    return {(served[1], served[2]) for served in _served_classes() if served[4][1] == "T"}  # B = weight.T


def _served_when_traced(class_of: Callable, *tensors) -> tuple | None:
    """While torch.compile traces: the served class (a constant) of this call, or None where the table
    does not serve it. Each served class is compared in turn: with dynamic shapes an extent is a
    symbol, and a comparison makes the graph guard on its value (another value traces again), since
    the table's answer holds for one shape."""
    call = class_of(*tensors)
    if call is None:
        return None
    for served in _served_classes():
        if all(a == b for a, b in zip(call, served)):
            return served
    return None


@torch.compiler.assume_constant_result
def _native_slot(served: tuple) -> int:
    """While tracing a served call: the slot of its kernel's C++ launch path (cudal2.codegen.native_launch),
    or -1 where the graph calls the Python op instead (no TVM-FFI function, no C++ compiler, a workspace: see
    _native_path). Binding builds the kernel's launcher now (compile or disk load), once per class and process."""
    problem = _problem_of(served)
    gpu = next((name for device_type, index, name in _visible_gpus() if (device_type, index) == served[6:8]), None)
    # (_served_classes applied the traced path's margin already; the eager one is not this path's)
    entry = _op_entry(problem, gpu, 0.0) if problem is not None and gpu is not None else None
    if entry is None or not _native_path(problem, entry.spec):
        return -1
    native_args = getattr(_compiled(entry, problem), "native_args", None)
    if native_args is None:
        return -1
    device = torch.device(served[6], served[7]) if served[7] is not None else torch.device(served[6])
    try:
        args = native_args(problem.m, problem.n, problem.k, device)
    except (ValueError, torch.OutOfMemoryError):  # the Python op says why, once, and runs torch
        return -1
    slot = native_launch.bind(served, torch_dtype(problem.c_dtype), args, device)
    return -1 if slot is None else slot


# ---- the public functions ------------------------------------------------------------------------
class RoutedLinear(torch.nn.Linear):
    """What route_linears makes an nn.Linear: the same module (its class swapped, its parameters and
    state untouched) whose forward sends to the op: F.linear for inputs of fewer rows than any served
    kernel of this weight shape has (one size comparison: a host-bound call, few tokens, pays nothing
    more than nn.Linear's), else linear() with its eager checks inlined. While a CUDA graph captures,
    the fewest rows are those served in graphs (one more test, for layers a kernel serves there only).
    Row counts that check_routes found losing inside the model (_cudal2_declined) run F.linear.

    A class, not a forward set on each instance: torch.compile guards a module's own bound method
    with a Python guard function that runs on every call of the compiled model (measured on this
    project's 2-core CPU, 2026-11-26: 3 routed layers cost a compiled model 9.5 us a call that way,
    and nothing as a class; the decoder layer on an H100 ran 3 to 5% slower compiled)."""

    _cudal2_min_numel: float = float("inf")
    _cudal2_graph_numel: float = float("inf")
    _cudal2_declined: frozenset = frozenset()  # x element counts check_routes found losing inside the model

    def forward(self, x):
        weight, bias = self.weight, self.bias
        if _dynamo_compiling() or _compile_state._is_compiling_flag:  # traced: linear() decides (_served_classes)
            if self._cudal2_declined and x.numel() in self._cudal2_declined:
                return _F_linear(x, weight, bias)
            return linear(x, weight, bias)
        numel = x.numel()
        if numel < self._cudal2_min_numel:
            if numel >= self._cudal2_graph_numel and _captured_now(x) and numel not in self._cudal2_declined:
                return linear(x, weight, bias)  # (GRAPH_MIN_SAVING_US)
            return _F_linear(x, weight, bias)
        if numel in self._cudal2_declined:  # (on served counts only: fewer rows never get here)
            return _F_linear(x, weight, bias)
        if _needs_grad(x, weight, bias):
            return linear(x, weight, bias)
        plan = _linear_plans.get(weight.shape)
        if plan is not None and numel not in plan.eager:
            # route_linears read the table before any launch was timed; this count's kernel has since been declined
            # for eager calls (its launch path costs more than it saves: _eager_launcher). linear() sends such a call
            # to torch in C, with the capture test a graph-only count needs; _run_linear would redo both in Python
            # on every call (1 to 9 us a call more than nn.Linear's in a Llama's eager decode step on an H200 host,
            # 2026-11-30)
            return linear(x, weight, bias)
        return _run_linear(x, weight, bias)


def _served_counts(m: RoutedLinear) -> set[int]:
    """The x element counts the table serves a routed layer at, by its weight shape: eager calls', those of calls
    while a CUDA graph captures where route_linears routed it for them, and traced calls' (check_routes puts a layer
    that declined them all back to nn.Linear: its routed forward's Python would cost every call for nothing)."""
    shapes, shape = _table_b_shapes(), (m.out_features, m.in_features)
    counts = set(shapes["linear_numels"].get(shape, ()))
    if m._cudal2_graph_numel != float("inf"):
        counts |= shapes["linear_numels_graph"].get(shape, set())
    return counts | {c[0] * c[2] for c in _served_classes() if (c[1], c[2]) == shape and c[4][1] == "T"}


def route_linears(model: torch.nn.Module, enable: bool = True, graphs: bool = False) -> list[str]:
    """Send the nn.Linear layers of model whose weight shape has a kernel in the table (one of a backend
    the op launches, that beat torch by its path's margin, eager or in a compiled graph) through
    cudal2.linear, by making them RoutedLinear; leave the others as they are. Why not every layer: in a
    host-bound model (eager, few tokens) the op's Python costs a microsecond or more per call even where
    it runs torch, and a layer no entry can serve would pay it for nothing. Only layers of class
    nn.Linear itself are routed: a subclass's forward may do more than F.linear (an adapter, a quantized
    weight).

    graphs=True also routes the layers a kernel serves only in captured CUDA graphs (a win smaller than
    an eager call's margin: GRAPH_MIN_SAVING_US) and builds those kernels now, for a model that runs
    inside CUDA graphs. Their eager calls then run torch after a test for a capture, which cost a
    host-bound decoder layer on an H100 about 2% (e2e_decoder_graph_routed_eager_h100_2026-11-27); hence not by
    default. Call it after tune_model or set_table (again when the table grows, or to change graphs);
    enable=False puts every routed layer back. Returns the names of the layers routed (or put back)."""
    served = _table_b_shapes()["linear"] if enable else {}
    captured = _table_b_shapes()["linear_graph"] if enable and graphs else {}
    graph_problems = _servable_problems(GRAPH_MIN_SAVING_US) if captured else []
    traced = _traced_weight_shapes() if enable else set()
    changed = []
    for name, m in model.named_modules():
        routed = type(m) is RoutedLinear
        if not routed and type(m) is not torch.nn.Linear:
            continue
        shape = (m.out_features, m.in_features)
        rows = served.get(shape)  # the fewest rows an eager call is served at
        graph_rows = captured.get(shape)  # ... a call made while a CUDA graph captures
        serve = rows is not None or graph_rows is not None or shape in traced
        if serve:  # (again where routed: the table may have grown). Served only traced: eager runs torch
            m._cudal2_declined = frozenset()  # (check_routes' findings were for the kernels of before)
            m._cudal2_min_numel = rows * m.in_features if rows is not None else float("inf")
            m._cudal2_graph_numel = graph_rows * m.in_features if graph_rows is not None else float("inf")
            if graph_rows is not None and m.weight.is_cuda:  # built now: a capture must not allocate
                for p in graph_problems:
                    if (p.n, p.k, p.layout, p.epilogue.bias) == (*shape, "NT", m.bias is not None):
                        _ready_for_graphs(p, m.weight.device)
        if serve and not routed:
            m.__class__ = RoutedLinear
            changed.append(name)
        elif routed and not serve:
            m.__class__ = torch.nn.Linear
            del m._cudal2_min_numel, m._cudal2_graph_numel
            m.__dict__.pop("_cudal2_declined", None)
            changed.append(name)
    return changed


def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b with the tuned kernel where one beats torch.matmul, else torch.matmul. out: as torch.matmul's
    (written in place, resized to the product's shape; torch's own errors where it refuses one)."""
    if out is not None:
        if a.dim() != 2 or b.dim() != 2 or _needs_grad(a, b) or out.dtype != torch.result_type(a, b):
            return torch.matmul(a, b, out=out)
        product = matmul(a, b)
        if out.shape != product.shape:
            out.resize_(product.shape)
        return out.copy_(product)
    if _dynamo_compiling() or _compile_state._is_compiling_flag:  # (_is_compiling(), inlined)
        if a.dim() != 2 or b.dim() != 2:
            return torch.matmul(a, b)
        served = _served_when_traced(_matmul_class, a, b)
        if served is None:
            return torch.matmul(a, b)
        if _needs_grad(a, b):
            return _Matmul.apply(a, b)
        slot = _native_slot(served)
        return torch.ops.cudal2.matmul_slot(a, b, slot) if slot >= 0 else torch.ops.cudal2.matmul(a, b)
    if _grad_enabled() and (a.requires_grad or b.requires_grad):  # (_needs_grad, inlined: every call runs it)
        return _Matmul.apply(a, b) if a.dim() == 2 and b.dim() == 2 and _autograd_takes(a, b) \
            else torch.matmul(a, b)
    b_numel, a_numel = b.numel(), a.numel()  # (each read once: 0.13 us a read on an H200 machine's host)
    counts = _mm_torch_counts.get(b_numel)
    if counts is not None and a_numel in counts:  # served in no mode, bound once (see _torch_counts)
        return _torch_matmul(a, b)
    counts = _mm_graph_only_counts.get(b_numel)
    if counts is not None and a_numel in counts and not _captured_now(a):  # (see _graph_only_counts)
        return _torch_matmul(a, b)
    if a.dim() != 2 or b.dim() != 2:
        return torch.matmul(a, b)
    return _run_matmul(a, b)


def _python_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T + bias (nn.Linear) with the tuned kernel where one beats torch, else F.linear."""
    # linear() in Python: the C front (op_front) calls it for every call it does not send to torch itself, and
    # torch.compile traces it in the C front's place. Its first lines are the C front's tests, for where that
    # cannot be built. The fallback's fastest path, a weight whose every call runs torch (_torch_weights), is in
    # a function of its own: the same test inside a function of all the eager paths cost 0.10 to 0.17 us more
    # a call than this short one, in situ between F.linear calls on an H200 host (2026-11-29). The test for a
    # trace comes first: a traced id() of a tensor that is not a module's parameter would make torch.compile
    # guard on that tensor's identity and trace again for every new one.
    if _dynamo_compiling() or _compile_state._is_compiling_flag:  # (_is_compiling(), inlined)
        return _traced_linear(x, weight, bias)
    known = _torch_weights.get(id(weight))  # torch's calls of this weight, gradients too (see _torch_weights)
    if known is _EVERY_CALL or (known is _UNLESS_CAPTURED and not _captured_now(x)):
        return _F_linear(x, weight, bias)
    return _eager_linear(x, weight, bias, known)


def _traced_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """linear() while torch.compile or torch.export traces it: the custom op where the table serves the call."""
    if weight.dim() != 2 or x.dim() == 0:  # a 1-D weight (a dot product per row) is F.linear's alone
        return _F_linear(x, weight, bias)
    served = _served_when_traced(_linear_class, x, weight, bias)
    if served is None:
        return _F_linear(x, weight, bias)
    if _needs_grad(x, weight, bias):
        return _Linear.apply(x, weight, bias)
    slot = _native_slot(served)
    return torch.ops.cudal2.linear_slot(x, weight, bias, slot) if slot >= 0 else \
        torch.ops.cudal2.linear(x, weight, bias)


def _eager_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, known,
                  x_numel: int | None = None) -> torch.Tensor:
    """linear() of an eager call past its fastest path; known: what _torch_weights holds for the weight (its
    shape's _Plan, _UNLESS_CAPTURED for a call a capture may record, or None); x_numel: x.numel() where the caller
    read it (the C front, for a known weight)."""
    if known is not None and known is not _UNLESS_CAPTURED:
        if x_numel is None:
            x_numel = x.numel()
        if x_numel in known.to_torch or (x_numel in known.to_torch_eager and not _captured_now(x)):
            return _F_linear(x, weight, bias)
    if _grad_enabled() and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)):
        return _Linear.apply(x, weight, bias) if weight.dim() == 2 and x.dim() != 0 \
            and _autograd_takes(x, weight, bias) else _F_linear(x, weight, bias)
    w_numel, x_numel = weight.numel(), x.numel()  # (each read once, as in matmul)
    counts = _linear_torch_counts.get(w_numel)
    if counts is not None and x_numel in counts:  # served in no mode, bound once (see _torch_counts)
        if type(weight) is _Parameter:  # a model's weight: its next call skips all this
            _remember_parameter(weight)
        return _F_linear(x, weight, bias)
    counts = _linear_graph_only_counts.get(w_numel)
    if counts is not None and x_numel in counts and not _captured_now(x):  # (see _graph_only_counts)
        if type(weight) is _Parameter:
            _remember_parameter(weight)
        return _F_linear(x, weight, bias)
    if weight.dim() != 2 or x.dim() == 0:
        return _F_linear(x, weight, bias)
    return _run_linear(x, weight, bias)


# cudal2.linear: the C front over _python_linear (op_front: a kept weight's call runs torch with no Python frame
# of this module's), or _python_linear itself where the front cannot be built. _rebind_front(torch_linear=...)
# points the C front at another torch call (a benchmark's stub), or None without a C front. Its capture test is
# _captured_now's, in C (capture_test=f binds a Python one instead: tests that take CPU calls for captured ones).
linear, _rebind_front = op_front.front(_python_linear, _eager_linear, _torch_weights, _EVERY_CALL,
                                       _UNLESS_CAPTURED, _F_linear, _compile_state, "_is_compiling_flag", "to_torch",
                                       "to_torch_eager", _raw_stream, _capturing)
