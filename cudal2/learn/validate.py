"""How well a cost model ranks, judged only on shapes it was not fitted to.

- `top1_ratios`: per shape, the speed of the model's first choice among the measured specs over
  the best measured one (1.0: it picked the winner). What `cudal2.matmul` gets for a shape it never
  searched, and the first proposal of a search.
- `cross_validate`: the same over folds of the training shapes (every shape's pairs in one fold),
  so that a choice among settings never looks at the validation split.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cudal2.proposers.cost_model import PARAMS, fit, training_matrix
from ..ir import DeviceProfile
from ..proposers.sample import Sample
from cudal2.proposers import bandit

# The settings `cudal2 train` chooses among by cross-validation on the training shapes.
PARAM_GRID = ({"num_leaves": 15}, {"num_leaves": 31}, {"num_leaves": 15, "min_data_in_leaf": 30},
              {"num_leaves": 63, "min_data_in_leaf": 5})


def by_shape(samples: Sequence[Sample]) -> dict[str, list[Sample]]:
    """The samples of each shape on each GPU (pairs of one group share a torch time), keyed by the
    shape's label, followed by " on <GPU>" where the samples come from several GPUs."""
    several = len({s.gpu for s in samples}) > 1
    out: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        out[f"{s.group} on {s.gpu}" if several else s.group].append(s)
    return dict(out)


def _predict(model, group: Sequence[Sample]) -> np.ndarray:
    """The model's predictions for one group, each pair with the GPU it was measured on."""
    return model.predict_rows(training_matrix(group, model.device))


def top1_ratios(model, samples: Sequence[Sample]) -> dict[str, float]:
    """shape -> speed of the predicted best over the measured best (of the shape's samples)."""
    out = {}
    for label, group in by_shape(samples).items():
        pred = _predict(model, group)
        y = np.array([s.log_speedup for s in group])
        out[label] = float(math.exp(y[int(np.argmax(pred))] - y.max()))
    return out


def centered_residuals(model, samples: Sequence[Sample]) -> list[float]:
    """Measured minus predicted log speedup, less each shape's mean: the model's error in ranking
    one shape's specs (its prior spread in the bandit)."""
    out: list[float] = []
    for group in by_shape(samples).values():
        r = np.array([s.log_speedup for s in group]) - _predict(model, group)
        out.extend((r - r.mean()).tolist())
    return out


def replay(model, group: Sequence[Sample], budget: int, *, batch: int = 4, prior_sd: float | None = None,
           beta: float | None = None) -> list[float]:
    """The bandit's search of one shape, replayed over its measured specs only: after each
    evaluation, the best speed found over the best measured (a curve of `budget` points)."""
    x = training_matrix(group, model.device)
    mu, leaves = model.predict_with_leaves(x)
    y = np.array([s.log_speedup for s in group])
    sd = prior_sd if prior_sd is not None else float(model.info.get("residual_sd", 0.3))
    measured: list[int] = []
    while len(measured) < min(budget, len(group)):
        picks = bandit.choose(mu, leaves, measured, y[measured], min(batch, budget - len(measured)), prior_sd=sd,
                              beta=bandit.BETA if beta is None else beta)
        measured.extend(picks)
    best = y.max()
    return [float(math.exp(y[measured[:i + 1]].max() - best)) for i in range(len(measured))]


def random_replay(group: Sequence[Sample], budget: int, *, seeds: int = 32) -> list[float]:
    """Uniform random search over the same measured specs, averaged over seeds (geomean per step)."""
    y = np.array([s.log_speedup for s in group])
    logs = np.zeros(min(budget, len(group)))
    for seed in range(seeds):
        order = np.random.default_rng(seed).permutation(len(group))[:logs.size]
        logs += np.maximum.accumulate(y[order]) - y.max()
    return np.exp(logs / seeds).tolist()


@dataclass(frozen=True)
class Score:
    geomean: float  # of the top-1 ratios
    within5: float  # share of shapes whose top-1 ratio is at least 0.95
    shapes: int
    residual_sd: float = float("nan")  # of the centered residuals on held-out shapes

    def __str__(self) -> str:
        return f"top-1 {self.geomean:.3f} of the best (geomean), within 5% on {self.within5:.0%} of {self.shapes} shapes"


def score(ratios: dict[str, float]) -> Score:
    v = list(ratios.values())
    if not v:
        return Score(float("nan"), float("nan"), 0)
    return Score(math.exp(sum(math.log(r) for r in v) / len(v)), sum(r >= 0.95 for r in v) / len(v), len(v))


def cross_validate(samples: Sequence[Sample], device: DeviceProfile, params: dict, *, folds: int = 5,
                   seed: int = 0) -> Score:
    groups = sorted({s.group for s in samples})  # a shape's pairs on every GPU in one fold
    random.Random(seed).shuffle(groups)
    fold_of = {g: i % folds for i, g in enumerate(groups)}
    ratios: dict[str, float] = {}
    residuals: list[float] = []
    for f in range(min(folds, len(groups))):
        train = [s for s in samples if fold_of[s.group] != f]
        held = [s for s in samples if fold_of[s.group] == f]
        if train and held:
            model = fit(train, device, seed=seed, params=params)
            ratios.update(top1_ratios(model, held))
            residuals.extend(centered_residuals(model, held))
    s = score(ratios)
    return Score(s.geomean, s.within5, s.shapes, float(np.std(residuals)) if residuals else float("nan"))


def choose_params(samples: Sequence[Sample], device: DeviceProfile, grid=PARAM_GRID, *, seed: int = 0,
                  on_score=lambda params, s: None) -> tuple[dict, Score]:
    """The grid's settings with the best cross-validated top-1 geomean on these (training) samples,
    and that score."""
    best, best_score = dict(PARAMS), None
    for params in grid:
        s = cross_validate(samples, device, params, seed=seed)
        on_score(params, s)
        if best_score is None or s.geomean > best_score.geomean:
            best, best_score = dict(params), s
    return best, best_score
