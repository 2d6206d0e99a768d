"""The spec catalog of a dataset sweep: a fixed, finite list of specs per backend and arch, the
product of a few axes held as data, less every combination the IR or the backend refuses.

`cudal2 sweep --specs all` measures every spec of it on every shape; `--specs N` measures N of
them, drawn with a fixed seed, so that two sweeps of one store with the same N measure the same
specs. Every spec is shape-generic (shape_specialization="dynamic"): one compile per spec serves
each shape of a problem class.

The axes span what the backend declares, not what won on some shapes: the sweep is where a
learned model sees the space, so it must not inherit a hand-fitted preference.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from ..ir import KernelSpec, SpecError, capabilities

# Per backend: field -> values; "tile" is (block_m, block_n). Products larger than the GPU's
# shared memory or registers are dropped by the IR's own validation.
AXES: dict[str, dict[str, tuple]] = {
    "triton": {
        "tile": ((16, 64), (32, 64), (32, 128), (64, 32), (64, 64), (64, 128), (64, 256), (128, 32), (128, 64),
                 (128, 128), (128, 256), (256, 64), (256, 128)),
        "block_k": (32, 64, 128),
        "num_warps": (4, 8),
        "stages": (2, 3, 4, 5),
        "load_path": ("pointer", "tma"),
        "persistent": (False, True),
        "raster_group": (1, 8),
        "split_k": (1, 4),
    },
}
SEED = 20261125


def _spec(backend: str, arch: str, values: dict[str, Any]) -> KernelSpec | None:
    (bm, bn) = values.pop("tile")
    split = values.pop("split_k", 1)
    fields = dict(backend=backend, arch=arch, block_m=bm, block_n=bn, shape_specialization="dynamic", **values)
    if split > 1:
        if fields.get("persistent"):
            return None  # one decomposition at a time: split-K tiles are not persistent here
        fields.update(decomposition="split_k", split_k=split, split_k_reduction="workspace")
    try:
        return KernelSpec(**fields)
    except SpecError:
        return None


def catalog(backend: str = "triton", arch: str = "sm_90a") -> list[KernelSpec]:
    """Every valid spec of the backend's axes on arch, in a fixed order (each once)."""
    axes = AXES.get(backend)
    if axes is None:
        raise ValueError(f"no spec catalog for backend {backend!r}; the sweep knows {', '.join(AXES)}")
    caps = capabilities.resolve(backend)
    names = list(axes)
    out: dict[str, KernelSpec] = {}
    for combo in itertools.product(*(axes[n] for n in names)):
        spec = _spec(backend, arch, dict(zip(names, combo)))
        if spec is None or (caps is not None and _refused(caps, spec, arch)):
            continue
        out.setdefault(spec.key(), spec)
    return list(out.values())


def _refused(caps, spec: KernelSpec, arch: str) -> bool:
    fields = spec.to_dict()
    return any((allowed := caps.allowed(name, arch)) is not None and fields[name] not in allowed
               for name in fields if name not in ("backend", "arch"))


def sample(count: int | str, backend: str = "triton", arch: str = "sm_90a", seed: int = SEED) -> list[KernelSpec]:
    """count specs of the catalog ("all" or a number), drawn with seed; the same count and seed
    always give the same specs, and a larger count keeps the smaller one's specs first."""
    specs = catalog(backend, arch)
    if count == "all":
        return specs
    n = int(count)
    if n < 1:
        raise ValueError(f"--specs {count}: give 'all' or a positive number")
    order = list(range(len(specs)))
    random.Random(seed).shuffle(order)
    return [specs[i] for i in order[:n]]
