"""The cuda_cpp backend's toolchain: CUDA C++ in, a loaded kernel out.

- Headers: CuTe/CUTLASS C++ from the `nvidia-cutlass` wheel (its `cutlass_library/source/include`
  tree, found without importing the package), or $CUDAL2_CUTLASS_INCLUDE.
- Compiler: nvcc (`$CUDAL2_NVCC`, else PATH, else $CUDA_HOME/bin). NVRTC is not used: the CuTe
  headers want the host compiler's C++ library, and neither this project's CPU machines nor the GPU
  machine ship libnvrtc, while both have nvcc.
- Cache: one folder per (source, target arch, nvcc version, flags, headers), holding the cubin,
  the PTX and ptxas's resource report (`-Xptxas -v`: registers, spills, stack per kernel). A unit
  that several processes want at once is compiled by one of them (a lock file per folder).
- Errors: a failed compile raises CudaCompileError with the first compiler lines; the search
  records it as a compile error of that candidate.
- Loading and launching: the CUDA driver API through cuda-python (`cuda.bindings.driver`), per
  device, on the caller's stream; imported only when a kernel is first launched on a GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

from cudal2.file_lock import exclusive
from cudal2.settings import settings

NVCC_FLAGS = ("-O3", "-std=c++17", "--expt-relaxed-constexpr", "-Xptxas", "-v", "-lineinfo",
              "-DNDEBUG", "-DCUTE_DISABLE_PRINT_LATEX")
COMPILE_TIMEOUT_S = 600
ERROR_LINES = 12  # compiler lines a CudaCompileError quotes


class CudaCompileError(RuntimeError):
    """nvcc refused a rendered kernel (or ran out of time). `log` holds everything it printed."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


class ToolchainMissing(RuntimeError):
    """nvcc or the CUTLASS headers are not installed."""


@dataclass(frozen=True)
class Resources:
    """ptxas's report for one kernel."""

    registers: int = 0
    spill_stores: int = 0  # bytes
    spill_loads: int = 0  # bytes
    stack: int = 0  # bytes of stack frame
    smem: int = 0  # bytes of static shared memory


@dataclass
class Binary:
    """A compiled translation unit."""

    target: str  # "sm_80", "sm_90", ...
    cubin: bytes
    ptx: str
    resources: dict[str, Resources] = field(default_factory=dict)
    log: str = ""
    path: Path | None = None  # the cache folder
    from_cache: bool = False


# ---- finding the tools --------------------------------------------------------------------------
def cutlass_include_dir() -> Path:
    """The CUTLASS/CuTe include folder: $CUDAL2_CUTLASS_INCLUDE, else the nvidia-cutlass wheel's."""
    env = settings().cutlass_include
    candidates = [Path(env)] if env else []
    spec = find_spec("cutlass_library")  # locates the package without running its __init__
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "source" / "include" for p in spec.submodule_search_locations]
    for path in candidates:
        if (path / "cute" / "tensor.hpp").is_file():
            return path
    raise ToolchainMissing("CuTe/CUTLASS C++ headers not found: pip install 'nvidia-cutlass>=4.2' "
                           "(or set CUDAL2_CUTLASS_INCLUDE to a CUTLASS include folder)")


def find_nvcc() -> Path:
    env = settings().nvcc
    found = [env] if env else []
    found.append(shutil.which("nvcc"))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            found.append(str(Path(home) / "bin" / "nvcc"))
    for path in found:
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return Path(path)
    raise ToolchainMissing("nvcc not found: install the CUDA toolkit's compiler, put it on PATH, or set CUDAL2_NVCC")


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    """'nvcc-13.0.88' from `nvcc --version` (part of every cache key)."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return f"nvcc-{m.group(1)}" if m else "nvcc-unknown"


def find_binary_tool(name: str) -> Path | None:
    """cuobjdump or nvdisasm: PATH, beside nvcc, or a pip wheel's nvidia/cu*/bin (None if absent)."""
    hit = shutil.which(name)
    if hit:
        return Path(hit)
    dirs = []
    try:
        dirs.append(find_nvcc().parent)
    except ToolchainMissing:
        pass
    nvidia = find_spec("nvidia")
    if nvidia is not None and nvidia.submodule_search_locations:
        for root in nvidia.submodule_search_locations:
            dirs += sorted(Path(root).glob("*/bin"))
    for d in dirs:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return d / name
    return None


def headers_version(include: Path) -> str:
    """CUTLASS's version macros (part of the cache key: other headers, other code)."""
    try:
        text = (include / "cutlass" / "version.h").read_text()
    except OSError:
        return "unknown"
    parts = [re.search(rf"#define CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)


# ---- compiling ----------------------------------------------------------------------------------
def parse_ptxas(log: str) -> dict[str, Resources]:
    """Per-kernel registers, spills, stack and static shared memory from `ptxas -v` output."""
    out: dict[str, Resources] = {}
    current = None
    values: dict[str, int] = {}
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'|Function properties for (\S+)", line)
        if m:
            if current is not None:
                out[current] = Resources(**values)
            current, values = m.group(1) or m.group(2), {}
            continue
        if current is None:
            continue
        if (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            values.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        if (m := re.search(r"Used (\d+) registers", line)):
            values["registers"] = int(m.group(1))
            if (s := re.search(r"(\d+) bytes smem", line)):
                values["smem"] = int(s.group(1))
    if current is not None:
        out[current] = Resources(**values)
    return out


def cache_key(text: str, target: str, nvcc: Path, include: Path, flags: tuple[str, ...]) -> str:
    parts = [text, target, nvcc_version(str(nvcc)), headers_version(include), " ".join(flags)]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]


def compile_cuda(text: str, target: str, cache_root: Path, flags: tuple[str, ...] = NVCC_FLAGS) -> Binary:
    """The cubin of `text` for `target` (e.g. "sm_80"), from the cache or from nvcc."""
    nvcc, include = find_nvcc(), cutlass_include_dir()
    folder = cache_root / cache_key(text, target, nvcc, include, flags)
    cached = _read_cached(folder, target)
    if cached is not None:
        return cached
    # One process compiles a unit that several want at once; the others wait for it and read its cache
    # instead of each running nvcc for minutes (without flock, not POSIX, each compiles, and the rename
    # in _write_cached keeps one copy).
    with exclusive(folder.with_name(folder.name + ".lock")):
        cached = _read_cached(folder, target)  # another process compiled it while this one waited
        if cached is not None:
            return cached
        binary = _run_nvcc(text, target, nvcc, include, flags)
        _write_cached(folder, binary)
    return binary


def _run_nvcc(text: str, target: str, nvcc: Path, include: Path, flags: tuple[str, ...]) -> Binary:
    with tempfile.TemporaryDirectory(prefix="cudal2-nvcc-") as tmp:
        work = Path(tmp)
        (work / "kernel.cu").write_text(text)
        cmd = [str(nvcc), "-cubin", f"-arch={target}", *flags, "-I", str(include), "--keep", "--keep-dir",
               str(work), "-o", str(work / "kernel.cubin"), str(work / "kernel.cu")]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, cwd=work)
        except subprocess.TimeoutExpired as e:
            raise CudaCompileError(f"nvcc did not finish within {COMPILE_TIMEOUT_S} s for {target}",
                                   str(e.stderr or "")) from None
        log = (run.stdout or "") + (run.stderr or "")
        if run.returncode != 0 or not (work / "kernel.cubin").is_file():
            raise CudaCompileError(f"nvcc failed for {target} (exit {run.returncode}):\n{first_errors(log)}", log)
        ptx = next(iter(sorted(work.glob("*.ptx"))), None)
        return Binary(target=target, cubin=(work / "kernel.cubin").read_bytes(),
                      ptx=ptx.read_text() if ptx else "", resources=parse_ptxas(log), log=log)


def first_errors(log: str, n: int = ERROR_LINES) -> str:
    """The first lines that say what went wrong (error lines first), for an exception message."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    picked = (errors or lines)[:n]
    return "\n".join(picked) + (f"\n... ({len(lines) - len(picked)} more lines)" if len(lines) > len(picked) else "")


def _read_cached(folder: Path, target: str) -> Binary | None:
    try:
        meta = json.loads((folder / "meta.json").read_text())
        return Binary(target=target, cubin=(folder / "kernel.cubin").read_bytes(),
                      ptx=(folder / "kernel.ptx").read_text(),
                      resources={k: Resources(**v) for k, v in meta["resources"].items()},
                      log=meta.get("log", ""), path=folder, from_cache=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cached(folder: Path, binary: Binary) -> None:
    """Write into a temporary sibling, then rename: a concurrent reader sees all of it or none."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f"{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "kernel.cubin").write_bytes(binary.cubin)
    (tmp / "kernel.ptx").write_text(binary.ptx)
    meta = {"target": binary.target, "resources": {k: asdict(v) for k, v in binary.resources.items()},
            "log": binary.log}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    try:
        os.replace(tmp, folder)
    except OSError:  # another process got there first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    binary.path = folder


def disassemble(binary: Binary) -> str | None:
    """The SASS of a cubin (cuobjdump --dump-sass, else nvdisasm), or None when neither exists."""
    with tempfile.TemporaryDirectory(prefix="cudal2-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(binary.cubin)
        for tool, args in (("cuobjdump", ["--dump-sass"]), ("nvdisasm", [])):
            exe = find_binary_tool(tool)
            if exe is None:
                continue
            run = subprocess.run([str(exe), *args, str(path)], capture_output=True, text=True, timeout=120)
            if run.returncode == 0:
                return run.stdout
    return None


# ---- loading and launching (GPU only) -------------------------------------------------------------
def visible_gpu_arch(ordinal: int = 0) -> str | None:
    """'sm_90' for an H100: the compute capability of a visible GPU, asked of the driver (cuInit
    and attribute queries create no context, so compile-pool processes stay off the GPU's memory);
    None without a driver or a GPU."""
    try:
        from cuda.bindings import driver as cu

        _check(cu.cuInit(0), "cuInit")
        dev = _check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        attr = cu.CUdevice_attribute
        major = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "major")
        minor = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "minor")
        return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001 - no cuda-python, no libcuda, no GPU: the caller decides
        return None


class GemmParams(ctypes.Structure):
    """The kernels' only argument; the same struct as GemmParams in templates/cuda_cpp/_config.cuh.j2
    (which static_asserts its size)."""

    _fields_ = [("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("c", ctypes.c_void_p), ("d", ctypes.c_void_p),
                ("bias", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("lda", ctypes.c_longlong), ("ldb", ctypes.c_longlong), ("ldw", ctypes.c_longlong),
                ("m", ctypes.c_int), ("n", ctypes.c_int), ("k", ctypes.c_int), ("reserved", ctypes.c_int)]


assert ctypes.sizeof(GemmParams) == 88


def _check(result, what: str):
    """Unpack a cuda-python (error, values...) tuple; raise with the driver's own words."""
    from cuda.bindings import driver as cu

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        raise RuntimeError(f"{what} failed: {name.decode() if name else err}: {text.decode() if text else ''}")
    return rest[0] if len(rest) == 1 else rest


class LoadedModule:
    """A cubin loaded into the current context of each device that runs it (one CUmodule each)."""

    def __init__(self, binary: Binary, functions: tuple[str, ...], smem_bytes: dict[str, int]):
        self.binary = binary
        self.names = functions
        self.smem_bytes = smem_bytes
        self._per_device: dict[int, dict] = {}
        self._lock = threading.Lock()

    def functions(self, device_index: int) -> dict:
        """{name: CUfunction} in the current context of the device (torch's primary context)."""
        with self._lock:
            found = self._per_device.get(device_index)
            if found is not None:
                return found
            from cuda.bindings import driver as cu

            _check(cu.cuInit(0), "cuInit")
            ctx = _check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
            if not int(ctx):  # no current context on this thread: the device's primary one (torch's)
                dev = _check(cu.cuDeviceGet(device_index), "cuDeviceGet")
                ctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                _check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            module = _check(cu.cuModuleLoadData(self.binary.cubin), "cuModuleLoadData")
            funcs = {}
            for name in self.names:
                fn = _check(cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
                smem = self.smem_bytes.get(name, 0)
                if smem > 48 * 1024:  # past the default, a kernel has to opt in
                    attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                    _check(cu.cuFuncSetAttribute(fn, attr, smem), f"cuFuncSetAttribute({name}, {smem} bytes)")
                funcs[name] = fn
            self._per_device[device_index] = {"module": module, **funcs}
            return self._per_device[device_index]

    def launch(self, device_index: int, name: str, grid: tuple[int, int, int], block: int, stream: int,
               params: GemmParams) -> None:
        from cuda.bindings import driver as cu

        fn = self.functions(device_index)[name]
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(params))  # void*[1] -> the struct
        _check(cu.cuLaunchKernel(fn, *grid, block, 1, 1, self.smem_bytes.get(name, 0), cu.CUstream(stream),
                                 ctypes.addressof(argv), 0), f"cuLaunchKernel({name})")
