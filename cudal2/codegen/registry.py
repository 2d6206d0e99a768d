"""Backend registry. Built-in and third-party backends alike are found through the
entry-point group `cudal2.backends` (name -> "module:Class"); the built-ins are also listed
here so a source checkout that was never pip-installed still finds them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from threading import RLock

from ..ir import Capabilities, capabilities as ir_capabilities
from .base import Backend

ENTRY_POINT_GROUP = "cudal2.backends"
BUILTIN = {
    "triton": "cudal2.codegen.triton:TritonBackend",
    "cute_dsl": "cudal2.codegen.cute_dsl:CuteDslBackend",
    "cuda_cpp": "cudal2.codegen.cuda_cpp:CudaCppBackend",
}

_lock = RLock()
_targets: dict[str, str] | None = None  # name -> "module:attr"
_instances: dict[str, Backend] = {}


def _discover() -> dict[str, str]:
    global _targets
    with _lock:
        if _targets is None:
            found = dict(BUILTIN)
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                found[ep.name] = ep.value
            _targets = found
        return _targets


def refresh() -> None:
    """Forget what was discovered (after installing a backend package at run time)."""
    global _targets
    with _lock:
        _targets = None
        _instances.clear()


def register(name: str, target: str | type[Backend]) -> None:
    """Register a backend by "module:Class" or by class, without an entry point."""
    with _lock:
        _discover()
        if isinstance(target, str):
            _targets[name] = target
        else:
            _targets[name] = f"{target.__module__}:{target.__qualname__}"
            _instances[name] = target()


def available_backends() -> list[str]:
    return sorted(_discover())


@dataclass(frozen=True)
class BackendStatus:
    """Whether a registered backend can take part in a search on an arch here, and if not, why and
    what installs what it lacks."""

    name: str
    ready: bool
    reason: str = ""  # why not ready
    install: str = ""  # the command that installs what it lacks, where a package is what it lacks


def backend_status(name: str, arch: str) -> BackendStatus:
    try:
        backend = get_backend(name)
    except Exception as e:  # noqa: BLE001 - a broken third-party backend is reported, not fatal
        return BackendStatus(name, False, f"does not load: {type(e).__name__}: {e}".splitlines()[0][:300])
    archs = backend.capabilities.allowed("arch", arch)
    if archs is not None and arch not in archs:
        return BackendStatus(name, False, f"declares no {arch} code ({', '.join(sorted(archs))} only)")
    ok, why = backend.usable()
    if not ok:
        return BackendStatus(name, False, why, backend.install_line())
    return BackendStatus(name, True)


def backend_statuses(arch: str) -> list[BackendStatus]:
    """Every registered backend's status on arch, in registration order (the built-ins first)."""
    return [backend_status(name, arch) for name in _discover()]


def default_backends(arch: str) -> tuple[str, ...]:
    """Every registered backend that declares arch and can compile here, in registration order (the
    built-ins first): what a search covers unless told otherwise. Triton where none can."""
    return tuple(s.name for s in backend_statuses(arch) if s.ready) or ("triton",)


def get_backend(name: str) -> Backend:
    with _lock:
        if name in _instances:
            return _instances[name]
        targets = _discover()
        if name not in targets:
            raise KeyError(f"unknown backend {name!r}; available: {', '.join(sorted(targets))}. "
                           f"A third-party backend registers an entry point in group {ENTRY_POINT_GROUP!r}.")
        module, _, attr = targets[name].partition(":")
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        backend = obj() if isinstance(obj, type) else obj
        if not isinstance(backend, Backend) or backend.name != name:
            raise TypeError(f"{targets[name]} is not a cudal2 Backend named {name!r}")
        _instances[name] = backend
        return backend


def capabilities_of(name: str) -> Capabilities | None:
    try:
        return get_backend(name).capabilities
    except KeyError:
        return None


ir_capabilities.set_resolver(capabilities_of, available_backends)
