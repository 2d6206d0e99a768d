"""The spec catalogs of a dataset sweep: each a fixed, finite list of specs per backend and arch,
the product of a few axes held as data, less every combination the IR or the backend refuses.

`cudal2 sweep --specs all` measures every spec of a catalog on every shape; `--specs N` measures N
of them, drawn with a fixed seed, so that two sweeps of one store with the same N measure the same
specs. Every spec is shape-generic (shape_specialization="dynamic"): one compile per spec serves
each shape of a problem class.

The axes span what the backend declares, not what won on some shapes: the sweep is where a
learned model sees the space, so it must not inherit a hand-fitted preference.

Catalogs (`--catalog`): "base" spans each backend's tile widths from 64 up (Triton's from 16); a
catalog is added, never changed, so that a count drawn from it keeps meaning the same specs.
"narrow" holds the CuTe DSL kernel's tiles narrower than 64 along N with deep pipelines, block_k
128 and split-K up to 16: what small outputs over a deep K need (cuBLAS runs 64x32 tiles with up
to 16 stages there), which "base" cannot express. "deep" holds each of base's CuTe DSL tile,
warp, cluster and swap arrangements once, at the deepest pipeline that fits. The learned proposer
ranks the catalogs its model was trained on (cudal2.proposers.sample.provenance records them).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..ir import KernelSpec, SpecError, capabilities
from ..ir.hardware import DEFAULT_ARCH
from ..codegen import get_backend
from ..ir import GemmProblem

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
    # Hopper warp-specialized kernels: the widths the hardware's MMA takes (quack's and cuBLAS's among
    # them), every warp arrangement, clusters of one and two, swap_ab, both epilogues. "warps" is
    # (num_warps, warp_specialization); "cluster" is (cluster_m, cluster_n).
    "cute_dsl": {
        "tile": ((64, 64), (64, 128), (64, 256), (128, 64), (128, 128), (128, 160), (128, 192), (128, 208),
                 (128, 224), (128, 256), (192, 128), (192, 192), (256, 128), (256, 160), (256, 192), (256, 208)),
        "warps": ((8, "cooperative"), (12, "cooperative"), (16, "cooperative"), (12, "pingpong")),
        "cluster": ((1, 1), (1, 2), (2, 1)),
        "block_k": (64,),
        "stages": (3, 4, 5, 6),
        "epilogue_path": ("tma_store", "registers"),
        "swap_ab": (False, True),
        "raster_group": (1, 8),
        "split_k": (1, 4),
        "load_path": ("tma",),
        "persistent": (True,),
    },
}
# Small outputs over a deep K: one consumer warpgroup (cooperative) or two taking turns (ping-pong)
# on tiles of 64 or 128 rows and 16 to 48 columns. (swap_ab would put those widths along the
# kernel's M, which it cuts in rows of 64: none would be valid, so it is not an axis.)
NARROW_AXES: dict[str, dict[str, tuple]] = {
    "cute_dsl": {
        "tile": ((64, 16), (64, 32), (64, 48), (128, 16), (128, 32), (128, 48)),
        "warps": ((8, "cooperative"), (12, "pingpong")),
        "cluster": ((1, 1), (1, 2), (2, 1)),
        "block_k": (64, 128),
        "stages": (4, 6, 8, 12),
        "epilogue_path": ("tma_store", "registers"),
        "raster_group": (1, 8),
        "split_k": (1, 4, 8, 16),
        "load_path": ("tma",),
        "persistent": (True,),
    },
}
# Every tile, warp arrangement, cluster and swap of "base" once, at the deepest pipeline that fits (up
# to DEEPEST_STAGES): base draws its stage count at random, so a draw of 100 of its 2358 specs holds
# few of these arrangements at a good depth (6 of quack's 44 configs, all at 3 or 4 stages, in
# the validation sweep of 2026-11-27), while the pipeline that fits is what both CUTLASS
# (StageCountAutoCarveout) and quack give a config. TMA-store epilogue, raster group 8, no split-K.
DEEPEST = "deepest"
DEEPEST_STAGES = 8
DEEP_AXES: dict[str, dict[str, tuple | str]] = {
    "cute_dsl": {
        "tile": AXES["cute_dsl"]["tile"],
        "warps": AXES["cute_dsl"]["warps"],
        "cluster": AXES["cute_dsl"]["cluster"],
        "swap_ab": (False, True),
        "block_k": (64,),
        "stages": DEEPEST,
        "epilogue_path": ("tma_store",),
        "raster_group": (8,),
        "load_path": ("tma",),
        "persistent": (True,),
    },
}
# Catalogs may share specs ("deep" holds base specs whose drawn depth was the deepest).
CATALOGS: dict[str, dict[str, dict]] = {"base": AXES, "narrow": NARROW_AXES, "deep": DEEP_AXES}
# A spec the backend refuses on this problem (large, every extent aligned) is refused on any: it is
# not in the catalog.
REFERENCE_PROBLEM = "4096x4096x4096"
SEED = 20261125


# Every catalog's split-K reduction: the one each backend declares (deterministic: a fixed summation order).
# Fixed, as the catalogs are; the learned proposer runs a spec's twin of the reduction the rules rank first.
CATALOG_SPLIT_K_REDUCTION = "workspace"


def _spec(backend: str, arch: str, values: dict[str, Any]) -> KernelSpec | None:
    (bm, bn) = values.pop("tile")
    split = values.pop("split_k", 1)
    if "warps" in values:
        values["num_warps"], values["warp_specialization"] = values.pop("warps")
    if "cluster" in values:
        values["cluster_m"], values["cluster_n"] = values.pop("cluster")
    fields = dict(backend=backend, arch=arch, block_m=bm, block_n=bn, shape_specialization="dynamic", **values)
    if split > 1:
        if fields.get("persistent") and backend == "triton":
            return None  # one decomposition at a time: Triton's split-K tiles are not persistent
        fields.update(decomposition="split_k", split_k=split, split_k_reduction=CATALOG_SPLIT_K_REDUCTION)
    try:
        return KernelSpec(**fields)
    except SpecError:
        return None


def catalog(backend: str = "triton", arch: str = DEFAULT_ARCH, name: str = "base") -> list[KernelSpec]:
    """Every valid spec of the named catalog's axes for backend on arch, in a fixed order (each once)."""
    if name not in CATALOGS:
        raise ValueError(f"no spec catalog named {name!r}; there are {', '.join(CATALOGS)}")
    if backend not in CATALOGS[name]:
        raise ValueError(f"catalog {name!r} has no specs for backend {backend!r}; it has "
                         f"{', '.join(CATALOGS[name])}")
    return list(_catalog(backend, arch, name))


def names_for(backend: str) -> list[str]:
    """The catalogs that hold specs for backend."""
    return [name for name, axes in CATALOGS.items() if backend in axes]


# The catalogs of DEFAULT_ARCH as _build makes them, kept beside the code. Building them validates about
# 22,000 combinations of axes: 1.8 s a process on a 2-core CPU, over half of a recorded CLI search's
# 5.3 s; loading them takes a tenth of a second. The file is used only while the code that decides a
# catalog (this module, the IR, the backends) is what made it (inputs_digest); a CPU test checks that
# it is current, and `python -m cudal2.proposers.catalog` writes it again.
_PACKAGE = Path(__file__).resolve().parent.parent
SHIPPED = _PACKAGE / "data" / "catalogs.json.gz"


def inputs_digest() -> str:
    """A digest of the source that decides the catalogs: this module, cudal2/ir and cudal2/codegen."""
    h = hashlib.sha256()
    files = [Path(__file__).resolve(), *(_PACKAGE / "ir").rglob("*.py"), *(_PACKAGE / "codegen").rglob("*.py")]
    for path in sorted(files):
        h.update(path.relative_to(_PACKAGE).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


@lru_cache(maxsize=1)
def _shipped() -> dict[str, list[dict]]:
    """The shipped catalogs by "backend/arch/name", or nothing where the file is missing, unreadable or
    made by other code (then each catalog is built)."""
    try:
        data = json.loads(gzip.decompress(SHIPPED.read_bytes()))
        return data["catalogs"] if data.get("digest") == inputs_digest() else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError):
        return {}


def write_shipped(path: Path = SHIPPED) -> Path:
    """Build every catalog of DEFAULT_ARCH and write them, with the digest of the code that built them."""
    catalogs = {f"{backend}/{DEFAULT_ARCH}/{name}": [spec.to_dict() for spec in _build(backend, DEFAULT_ARCH, name)]
                for name, axes in CATALOGS.items() for backend in axes}
    text = json.dumps({"digest": inputs_digest(), "catalogs": catalogs}, sort_keys=True, separators=(",", ":"))
    path.write_bytes(gzip.compress(text.encode(), mtime=0))
    return path


@lru_cache(maxsize=None)
def _catalog(backend: str, arch: str, name: str) -> tuple[KernelSpec, ...]:
    rows = _shipped().get(f"{backend}/{arch}/{name}")
    if rows is None:
        return _build(backend, arch, name)
    # built and validated by _build from this very code (the digest): constructed without validating again
    return tuple(KernelSpec.model_construct(**row) for row in rows)


def _build(backend: str, arch: str, name: str) -> tuple[KernelSpec, ...]:
    axes = dict(CATALOGS[name][backend])
    caps = capabilities.resolve(backend)
    be = get_backend(backend)
    reference = GemmProblem.parse(REFERENCE_PROBLEM)
    depths = (tuple(range(DEEPEST_STAGES, 1, -1)) if axes.get("stages") == DEEPEST  # the first that fits
              else None)
    if depths:
        del axes["stages"]
    names = list(axes)
    out: dict[str, KernelSpec] = {}
    for combo in itertools.product(*(axes[n] for n in names)):
        for stages in depths or (None,):
            values = dict(zip(names, combo), **({"stages": stages} if stages else {}))
            spec = _spec(backend, arch, values)
            if spec is None or (caps is not None and _refused(caps, spec, arch)) or not be.supports(reference, spec):
                continue
            out.setdefault(spec.key(), spec)
            break
    return tuple(out.values())


def _refused(caps, spec: KernelSpec, arch: str) -> bool:
    fields = spec.to_dict()
    return any((allowed := caps.allowed(name, arch)) is not None and fields[name] not in allowed
               for name in fields if name not in ("backend", "arch"))


def sample(count: int | str, backend: str = "triton", arch: str = DEFAULT_ARCH, seed: int = SEED,
           name: str = "base") -> list[KernelSpec]:
    """count specs of the named catalog ("all" or a number), drawn with seed; the same count and
    seed always give the same specs, and a larger count keeps the smaller one's specs first."""
    specs = catalog(backend, arch, name)
    if count == "all":
        return specs
    n = int(count)
    if n < 1:
        raise ValueError(f"--specs {count}: give 'all' or a positive number")
    order = list(range(len(specs)))
    random.Random(seed).shuffle(order)
    return [specs[i] for i in order[:n]]


if __name__ == "__main__":
    print(f"wrote {write_shipped()}")
