"""Training a cost model from measurements: the pipeline behind `cudal2 train`.

1. Samples come from a store or from export files; those of validation shapes are set aside (the
   split kept in cudal2/data/shapes/split.json): they are scored, never fitted to.
2. The model's settings are chosen among validate.PARAM_GRID by cross-validation over the training
   shapes (every shape in one fold).
3. The chosen settings are fitted to every training sample, seeded; the model keeps the residual
   spread measured in cross-validation (the bandit's prior) and where its data came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from cudal2.proposers.cost_model import TreeModel, fit
from ..ir import DeviceProfile
from ..proposers.cost_model import sample_device
from ..proposers.sample import Sample
from .validate import Score, choose_params, score, top1_ratios
from ..dataset.export import _split_of


@dataclass
class TrainReport:
    model: TreeModel
    params: dict
    cross_validation: Score  # on the training shapes
    validation: Score | None  # on the validation shapes in the data, if any
    train_pairs: int
    validation_pairs: int


def split_samples(samples: Sequence[Sample]) -> tuple[list[Sample], list[Sample]]:
    """(train, validation) by the repository's split; a shape in neither set trains."""
    where = _split_of()
    train, held = [], []
    for s in samples:
        (held if where.get(s.group, ("", ""))[1] == "validation" else train).append(s)
    return train, held


def distinct_devices(samples: Sequence[Sample], device: DeviceProfile) -> dict[str, DeviceProfile]:
    """The device each GPU model of the samples is to the features. Several GPU models train one
    model only where their devices differ: two unknown parts would both read as `device`, and the
    model would learn the mean of two GPUs' speeds as either's (ValueError, naming them and the fix)."""
    devices = {gpu: sample_device(s, device) for s in samples if (gpu := s.gpu)}
    seen: dict[DeviceProfile, str] = {}
    for gpu, dev in sorted(devices.items()):
        key = dev.figures_key()
        if key in seen:
            raise ValueError(f"the measurements come from {len(devices)} GPU models and {seen[key]!r} and {gpu!r} "
                             "have the same device figures (cudal2.ir.hardware.KNOWN_PARTS names neither); "
                             "train on one: export it alone with 'cudal2 dataset export --gpu NAME' and give that file")
        seen[key] = gpu
    return devices


def train(samples: Sequence[Sample], device: DeviceProfile, *, seed: int = 0,
          say: Callable[[str], None] = lambda line: None) -> TrainReport:
    distinct_devices(samples, device)  # ValueError for GPUs the features cannot tell apart
    train_set, held = split_samples(samples)
    if len({s.group for s in train_set}) < 2:
        raise ValueError(f"{len(train_set)} training pairs on {len({s.group for s in train_set})} shape(s): "
                         "cross-validation needs at least two training shapes; measure more with 'cudal2 sweep'")
    params, cv = choose_params(train_set, device, seed=seed,
                               on_score=lambda p, s: say(f"cross-validated {p}: {s}"))
    model = fit(train_set, device, seed=seed, params=params)
    model.info["residual_sd"] = round(cv.residual_sd, 4)
    model.info["cross_validation"] = {"top1_geomean": round(cv.geomean, 4), "top1_within5": round(cv.within5, 4),
                                      "shapes": cv.shapes}
    validation = score(top1_ratios(model, held)) if held else None
    if validation is not None:
        model.info["validation"] = {"top1_geomean": round(validation.geomean, 4),
                                    "top1_within5": round(validation.within5, 4), "shapes": validation.shapes}
    return TrainReport(model, params, cv, validation, len(train_set), len(held))
