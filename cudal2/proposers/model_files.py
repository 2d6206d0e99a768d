"""Where the learned proposer's cost model comes from, in order of precedence:

1. the file $CUDAL2_COST_MODEL names;
2. the user's model for the live GPU: what `cudal2 train --store` wrote, without --out, to
   `<cache>/models/<arch>-<gpu>.json` (cudal2.paths.cache_dir()), from the user's own measurements;
3. the model shipped for the arch (cudal2/data/models/<arch>.json).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..ir import DeviceProfile
from ..paths import cache_dir
from ..settings import settings

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


@dataclass(frozen=True)
class ModelSource:
    path: Path
    kind: str  # "environment", "user" or "shipped"

    def __str__(self) -> str:
        what = {"environment": "named by $CUDAL2_COST_MODEL", "user": "trained on this GPU's measurements",
                "shipped": "shipped with cudal2"}[self.kind]
        return f"{self.path} ({what})"


def shipped_model_path(arch: str) -> Path:
    return MODELS / f"{arch}.json"


def gpu_slug(gpu_name: str) -> str:
    """A GPU name as a file name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "unnamed"


def user_model_path(arch: str, gpu_name: str) -> Path:
    """Where `cudal2 train` keeps the user's model of one GPU model."""
    return cache_dir() / "models" / f"{arch}-{gpu_slug(gpu_name)}.json"


def find_model(arch: str, device: DeviceProfile | None = None) -> ModelSource | None:
    """The model the learned proposer uses for arch on device (the live GPU where None), by the
    precedence above; None where none exists."""
    named = settings().cost_model
    if named:
        return ModelSource(Path(named), "environment")
    device = device or DeviceProfile.live(arch)
    if device.arch == arch and device.name != DeviceProfile.of_arch(arch).name:  # a GPU, not the reference
        mine = user_model_path(arch, device.name)
        if mine.is_file():
            return ModelSource(mine, "user")
    shipped = shipped_model_path(arch)
    return ModelSource(shipped, "shipped") if shipped.is_file() else None
