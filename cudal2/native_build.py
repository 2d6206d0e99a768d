"""A shared library compiled once from one source file and kept in a folder: the op's C front and its probe
(cudal2.op_front) and the C++ launch path of compiled graphs (cudal2.codegen.native_launch).

The library is named by a digest of the source, what else its bytes depend on (the caller's key parts:
versions of what it links), the compiler and its flags; a process finds it there or compiles it to a file of
its own and renames that into place, so processes that build at once never read a half-written library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Sequence


def library(source: Path, compiler: str, cflags: Sequence[str], ldflags: Sequence[str], key_parts: Sequence[str],
            folder: Path, stem: str, suffix: str, timeout_s: float | None = None) -> Path:
    """The library compiled from source (`compiler *cflags source -o LIB *ldflags`) as folder/stem_DIGEST suffix,
    compiled where it is not there yet. Raises RuntimeError naming the compiler and the last line it wrote
    where it fails, or where it cannot run or takes over timeout_s."""
    digest = hashlib.sha256("\0".join([source.read_text(), *key_parts, compiler, *cflags, *ldflags]).encode())
    out = folder / f"{stem}_{digest.hexdigest()[:16]}{suffix}"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    _drop_orphans(out)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    name = Path(compiler).name
    try:
        run = subprocess.run([compiler, *cflags, str(source), "-o", str(tmp), *ldflags], capture_output=True,
                             text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{name} took over {timeout_s:g} s on {source.name}") from None
    except OSError as e:  # (no such compiler, not executable)
        raise RuntimeError(f"{name} could not run: {e.strerror or e}") from None
    if run.returncode != 0:
        tmp.unlink(missing_ok=True)
        last = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{name} failed on {source.name}: {last[:300]}")
    os.replace(tmp, out)  # (another process may have built it too: the same bytes)
    return out


def cxx() -> str:
    """The C++ compiler: $CXX, else g++ or c++ on PATH. Raises RuntimeError where there is none."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (g++) on PATH; install one or set $CXX")
    return compiler


def torch_extension_flags(std: str, libraries: Sequence[str]) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) for a library against this torch's C++ headers (C++ standard std, torch's
    C++ ABI) that links the named libraries of torch's lib folder (found there at run time too)."""
    import torch
    from torch.utils import cpp_extension

    torch_lib = Path(torch.__file__).parent / "lib"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cflags = ["-O2", f"-std={std}", "-shared", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
              *(f"-I{p}" for p in cpp_extension.include_paths())]
    return cflags, [f"-L{torch_lib}", *(f"-l{name}" for name in libraries), f"-Wl,-rpath,{torch_lib}"]


def _drop_orphans(out: Path) -> None:
    """Remove the files out.PID.tmp of processes that no longer run: a process that ended while its compiler ran
    (the op front's probe builds in a daemon thread) leaves the compiler's output there, never renamed."""
    for tmp in out.parent.glob(f"{out.name}.*.tmp"):
        pid = tmp.name[len(out.name) + 1:-len(".tmp")]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:  # (alive, another user's)
            pass
