"""cudal2.linear's front in C: a call the op sends to torch without deciding anything pays no Python frame.

Why. The op's fastest fallback, a weight whose every call runs torch (ops._torch_weights), is three tests
and F.linear. Written in Python, those tests cost 0.2 to 0.4 us a call in situ on the lent H200 hosts
(benchmarks/op_fallback_parts.py, 2026-11-29), where the bar for the whole fallback is 0.3 us over
F.linear; in C the same path read +0.09 us (benchmarks/op_overhead.py, three processes, 2026-11-30).
op_front.c does the same tests in C: the trace flag, then id(weight) in the kept dict, and for a weight kept
with its shape's plan (a kernel serves that shape at other row counts), x.numel() in the plan's counts that
run torch, or in those that run torch unless a CUDA graph captures, where none captures now. On a hit it
calls torch's linear; any other positional call goes on to the op's eager path with what the dict holds for
the weight (ops._eager_linear), and a call with keywords, or while the flag is set, to the op's Python front.

torch.compile. Dynamo cannot look into a C function, so front() registers the Python front as its
substitute while tracing (torch.compiler.substitute_in_graph): a trace sees exactly the Python op's code.

Where the extension cannot be built (no C compiler or Python headers, $CUDAL2_NATIVE_FRONT=0, a torch
without substitute_in_graph), front() returns the Python front itself: the same results, its host cost.
The library is compiled once per source, Python and compiler (a fraction of a second of cc), under
cache_dir()/op_front.

The probe. Reading x's element count, and whether a graph captures, through torch's Python bindings costs
the row test 0.15 to 0.3 us a question in situ. op_front_probe.cpp reads them from torch's C++ objects
instead: in situ that took 0.24 us off a call whose count is read and 0.17 to 0.39 us off one that tests for a
capture (benchmarks/op_fallback_paths.py, two H200 hosts, 2026-11-30). It is C++ against torch's headers, a
compile of about 15 s, so attach_probe() builds it in a thread of its own (once per source, torch and
compiler, in the same folder; one build at a time across processes) and binds it when it loads. The op
starts that on the first plan of a CUDA process's weight shape. Until it is bound, or where it cannot be built,
the front asks the bindings: the same answers, their host cost.

The probe also runs the calls the front sends to torch: at::linear, as F.linear's binding calls it, less the
binding's argument parse (op_front_probe.cpp says where it leaves a call to F.linear). In situ on an H200 host
that took the C front's cost over F.linear from +0.33 to +0.06 us for a weight kept for every call, and from
+0.49 to +0.20 for one served at other row counts (benchmarks/op_fallback_paths.py, 2026-11-30).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Callable

import torch

from cudal2 import file_lock, native_build, paths
from cudal2.settings import settings

SOURCE = Path(__file__).with_name("op_front.c")
PROBE_SOURCE = Path(__file__).with_name("op_front_probe.cpp")
MODULE = "cudal2_op_front"  # (the C source's PyInit_ name)
# seconds the compiler may take (it takes a fraction of one); past them the op keeps its Python front, so that a
# compiler that hangs never holds up `import cudal2.ops`
BUILD_TIMEOUT_S = 60.0
# the same for the probe (about 15 s of g++ on a CI machine's core; it runs in a thread, the front unaffected)
PROBE_BUILD_TIMEOUT_S = 300.0


def _build() -> Path:
    """The extension's shared library, compiled where this source, Python and compiler have none yet."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) on PATH")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        raise RuntimeError(f"no Python.h under {include} (install the Python development headers)")
    return native_build.library(SOURCE, compiler, ["-O2", "-shared", "-fPIC", "-w", f"-I{include}"], [],
                                [sys.version], paths.cache_dir() / "op_front", MODULE,
                                sysconfig.get_config_var("EXT_SUFFIX") or ".so", BUILD_TIMEOUT_S)


def _build_probe() -> Path:
    """The probe's shared library (op_front_probe.cpp against this torch), compiled where there is none yet; one
    process compiles at a time, the others then find its library."""
    cflags, ldflags = native_build.torch_extension_flags("c++17", ["c10", "torch_cpu", "torch_python"])
    cflags.append(f"-I{sysconfig.get_paths()['include']}")  # (Python.h: torch's Python bindings' headers need it)
    folder = paths.cache_dir() / "op_front"
    with file_lock.exclusive(folder / "probe.lock"):
        return native_build.library(PROBE_SOURCE, native_build.cxx(), cflags, ldflags, [torch.__version__, sys.version],
                                    folder, "cudal2_op_front_probe", ".so", PROBE_BUILD_TIMEOUT_S)


def _probe_bindings(path: Path) -> dict[str, int]:
    """The front's probe bindings: the addresses of the library's functions."""
    library = ctypes.PyDLL(str(path))  # (kept loaded for the process: the front calls into it)
    _probe["library"] = library
    return {"numel_probe": ctypes.cast(library.cudal2_probe_numel, ctypes.c_void_p).value,
            "capture_probe": ctypes.cast(library.cudal2_probe_uncaptured, ctypes.c_void_p).value,
            "linear_probe": ctypes.cast(library.cudal2_probe_linear, ctypes.c_void_p).value}


def attach_probe(wait: bool = False) -> dict[str, int] | None:
    """Build the probe (op_front_probe.cpp) in a thread, once a process, and bind it to the C front when it
    loads. wait: block until that ends. Returns the front's probe bindings (numel_probe, capture_probe: the
    functions' addresses) once bound, else None: still building, no C front, $CUDAL2_NATIVE_FRONT=0, or a build
    that failed (probe_state() says which)."""
    with _probe_lock:
        thread = _probe.get("thread")
        if thread is None and _made is not None:
            thread = _probe["thread"] = threading.Thread(target=_attach, name="cudal2-op-front-probe", daemon=True)
            _probe["state"] = "building"
            thread.start()
    if wait and thread is not None:
        thread.join()
    return _probe.get("bindings")


def probe_state() -> str:
    """The probe's state in this process: "not started", "no C front", "building", "bound", or "failed: WHY"."""
    if _made is None:
        return "no C front"
    return _probe.get("state", "not started")


def _attach() -> None:
    try:
        bindings = _probe_bindings(_build_probe())
        _made[1](**bindings)
        _probe["bindings"], _probe["state"] = bindings, "bound"
    except Exception as e:  # noqa: BLE001 - the front keeps asking torch's bindings: the same answers
        _probe["state"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _load(path: Path):
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def front(python_front: Callable, eager_rest: Callable, kept: dict, every_call: object, unless_captured: object,
          torch_linear: Callable, flag_owner: object, flag_name: str, counts_name: str, eager_counts_name: str,
          raw_stream: Callable[[int], int], capturing: Callable[[], bool]) -> tuple[Callable, Callable | None]:
    """(linear, rebind): the C front bound to these objects, and a function that binds it to others
    (rebind(torch_linear=...)); where it cannot be had, (python_front, None).

    The C linear(x, weight, bias=None), called with positional arguments while getattr(flag_owner, flag_name)
    is false, runs torch_linear(x, weight[, bias]) where kept.get(id(weight)) is every_call, or is unless_captured
    while no CUDA graph can record the call, or an entry whose attribute counts_name holds x.numel(), or whose
    eager_counts_name does while no CUDA graph can record the call (as ops._captured_now: x on the CPU, or
    raw_stream(x.get_device()) == 0, the legacy default stream, or capturing() false; where that cannot be told,
    the eager path asks); else it runs eager_rest(x, weight, bias, kept.get(id(weight)), x.numel() where it was
    read, else None). Any other call runs python_front as it was called. Where the probe is bound
    (attach_probe), it reads x's count and whether a graph can record the call before the bindings are asked.
    One front a process (the C function's bindings are the library's): the op's, made when cudal2.ops loads."""
    global _made
    if not settings().native_front:
        return python_front, None
    if _made is not None:
        raise RuntimeError("cudal2.op_front.front() was made already in this process (the op's)")
    try:
        module = _load(_build())
        bound = dict(kept=kept, every_call=every_call, unless_captured=unless_captured, torch_linear=torch_linear,
                     eager_rest=eager_rest, python_front=python_front, flag_owner=flag_owner, flag_name=flag_name,
                     counts_name=counts_name, eager_counts_name=eager_counts_name, raw_stream=raw_stream,
                     capturing=capturing, capture_test=None, numel_probe=0, capture_probe=0, linear_probe=0)

        def rebind(**changes) -> None:
            unknown = set(changes) - set(bound)
            if unknown:
                raise TypeError(f"rebind: no binding named {sorted(unknown)}; the front binds {list(bound)}")
            bound.update(changes)
            module.bind(*bound.values())

        rebind()
        # pickled by reference where the Python front lives (the op's module binds the front under that name):
        # the extension's own module name is not importable in another process
        module.linear.__module__ = python_front.__module__
        # a trace runs the Python front: Dynamo cannot inline C, and a graph break would split every model
        torch.compiler.substitute_in_graph(module.linear)(python_front)
        _made = module.linear, rebind
        return _made
    except Exception:  # noqa: BLE001 - any failure keeps the Python front: the same results, its host cost
        return python_front, None


_made: tuple[Callable, Callable] | None = None
_probe: dict = {}  # thread, state, library, bindings (see attach_probe)
_probe_lock = threading.Lock()
