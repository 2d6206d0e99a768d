"""The cost model: predicts a spec's log speedup over torch.matmul on a shape.

The interface is TVM MetaSchedule's: `update(samples)` learns from measurements, `predict(problem,
specs)` scores candidates; `Trainer` implements it by refitting on everything it was given.
`TreeModel`, what a fit makes, is gradient-boosted trees, trained with LightGBM and kept as
plain arrays in a JSON file (`cudal2 train --out model.json`), so that scoring needs numpy alone:
the op and the proposer load a model without LightGBM installed.

Training is seeded and deterministic (LightGBM's deterministic mode, one thread): the same samples
give the same model. The objective is a regression on the log speedup: it ranks within a shape and
also says whether a kernel beats torch at all, which a ranking objective cannot.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..ir import GemmProblem, KernelSpec
from ..ir import DeviceProfile
from .features import FEATURE_VERSION, feature_names, matrix
from .sample import Sample, provenance
from ..ir.hardware import DEFAULT_ARCH, known_part

MODEL_FORMAT = "cudal2-cost-model"
# Feature versions whose every feature is one of this version's, under the same name and with the
# same meaning: a model of one of them is scored with its own columns, picked by name.
READABLE_VERSIONS = (1, FEATURE_VERSION)
# Fixed, not tuned on any validation shape: a small model that a few thousand pairs can fit.
PARAMS = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 10,
          "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0,
          "verbose": -1, "deterministic": True, "force_row_wise": True, "num_threads": 1}
ROUNDS = 300


class ModelError(ValueError):
    """A model file that cannot be used: missing, corrupt, or made for other features."""


class CostModel(Protocol):
    def update(self, samples: Sequence[Sample]) -> None:
        """Learn from these measurements (in addition to what it learned before)."""

    def predict(self, problem: GemmProblem, specs: Sequence[KernelSpec]) -> np.ndarray:
        """Predicted log speedup over torch.matmul of each spec on problem."""


@dataclass
class TreeModel:
    """Boosted regression trees as flat arrays: node i of the forest splits on feature[i] at
    threshold[i] (go left when x <= threshold) or, where feature[i] < 0, is a leaf of value[i]."""

    feature: np.ndarray  # int32 per node; -1 for a leaf
    threshold: np.ndarray  # float64
    left: np.ndarray  # int32 node index
    right: np.ndarray
    value: np.ndarray  # float64 leaf value
    roots: np.ndarray  # int32: each tree's root node
    base: float = 0.0
    device: DeviceProfile = field(default_factory=lambda: DeviceProfile.of_arch(DEFAULT_ARCH))  # trained on
    info: dict = field(default_factory=dict)  # provenance: samples, GPUs, dates, versions, params
    depth: int = 0
    # the features it was trained on, by name: a model of an older feature version reads its own
    # columns of today's rows
    features: tuple[str, ...] = field(default_factory=feature_names)
    feature_version: int = FEATURE_VERSION

    def __post_init__(self):
        current = feature_names()
        self.features = tuple(self.features)
        self.columns = None if self.features == current else np.array([current.index(n) for n in self.features])

    # --- scoring ---------------------------------------------------------------------------------
    def leaves(self, x: np.ndarray) -> np.ndarray:
        """(rows, trees) leaf node reached by each row in each tree. The (row, tree) pairs still at an
        inner node step down together, and only those: trees of very different depths (leaf-wise
        growth) then cost what their paths cost, not the deepest tree's depth for every pair.
        Splits on a column that holds one value in every row (the shape's own features, when one
        problem's candidates are scored) go the same way for all of them: they are taken once,
        before the walk (33 of 57 columns, 0.18 s -> 0.14 s for 3816 candidates on this project's
        CPU). x holds today's feature_names() columns; a model of an older version reads its own."""
        if self.columns is not None and x.shape[1] == len(feature_names()):
            x = x[:, self.columns]
        x = np.ascontiguousarray(x, dtype=float)
        n, width, trees = x.shape[0], x.shape[1], self.roots.size
        left, right, roots = self._taken(x[0], np.flatnonzero((x == x[0]).all(axis=0))) if n else \
            (self.left, self.right, self.roots)
        flat = x.ravel()
        node = np.tile(roots, n)  # flat: row-major (row, tree)
        start = np.repeat(np.arange(n) * width, trees)  # each pair's row in flat
        active = np.flatnonzero(self.feature[node] >= 0)
        while active.size:
            at = node[active]
            go_left = flat[start[active] + self.feature[at]] <= self.threshold[at]
            node[active] = at = np.where(go_left, left[at], right[at])
            active = active[self.feature[at] >= 0]
        return node.reshape(n, trees)

    def _taken(self, row: np.ndarray, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(left, right, roots) with every split on `columns` taken as `row` takes it: each child
        and root pointer skips past such nodes to the first node that splits on another column, or
        a leaf."""
        step = np.arange(self.feature.size)
        fixed = np.flatnonzero(np.isin(self.feature, columns))
        step[fixed] = np.where(row[self.feature[fixed]] <= self.threshold[fixed], self.left[fixed], self.right[fixed])
        while True:  # pointer jumping: chains of fixed splits collapse in log(depth) rounds
            further = step[step]
            if np.array_equal(further, step):
                break
            step = further
        return step[self.left], step[self.right], step[self.roots]

    def predict_rows(self, x: np.ndarray) -> np.ndarray:
        return self.predict_with_leaves(x)[0]

    def predict_with_leaves(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(predictions, leaves) from one walk down the trees."""
        leaves = self.leaves(x)
        return self.base + self.value[leaves].sum(axis=1), leaves

    def predict(self, problem: GemmProblem, specs: Sequence[KernelSpec],
                device: DeviceProfile | None = None) -> np.ndarray:
        return self.predict_rows(matrix(problem, specs, device or self.device))

    # --- files -------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"format": MODEL_FORMAT, "feature_version": self.feature_version, "features": list(self.features),
                "device": {"arch": self.device.arch, "sm_count": self.device.sm_count,
                           "l2_bytes": self.device.l2_bytes},
                "info": self.info, "base": self.base, "depth": self.depth, "roots": self.roots.tolist(),
                "nodes": {"feature": self.feature.tolist(), "left": self.left.tolist(), "right": self.right.tolist(),
                          "threshold": [_short(t) for t in self.threshold], "value": [_short(v) for v in self.value]}}

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n")
        tmp.replace(path)

    @classmethod
    def from_json(cls, d: dict, where: str = "model") -> "TreeModel":
        if not isinstance(d, dict) or d.get("format") != MODEL_FORMAT:
            raise ModelError(f"{where} is not a cudal2 cost model; train one with 'cudal2 train'")
        names = d.get("features")
        version = d.get("feature_version")
        if (version not in READABLE_VERSIONS or not isinstance(names, list)
                or (version == FEATURE_VERSION and names != list(feature_names()))
                or not set(names) <= set(feature_names()) or len(set(names)) != len(names)):
            raise ModelError(f"{where} was trained on other features (version {version}, this "
                             f"cudal2 has {FEATURE_VERSION}); train it again with 'cudal2 train'")
        try:
            nodes, dev = d["nodes"], d["device"]
            model = cls(feature=np.asarray(nodes["feature"], np.int32), threshold=np.asarray(nodes["threshold"], float),
                        left=np.asarray(nodes["left"], np.int32), right=np.asarray(nodes["right"], np.int32),
                        value=np.asarray(nodes["value"], float), roots=np.asarray(d["roots"], np.int32),
                        base=float(d["base"]), depth=int(d["depth"]), info=dict(d.get("info") or {}),
                        features=tuple(names), feature_version=int(version),
                        device=dataclasses.replace(DeviceProfile.of_arch(dev["arch"]), sm_count=int(dev["sm_count"]),
                                                   l2_bytes=int(dev["l2_bytes"])))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"{where} is corrupt ({type(e).__name__}: {e}); train it again with 'cudal2 train'") from None
        why = _malformed(model, len(names))
        if why:
            raise ModelError(f"{where} is corrupt ({why}); train it again with 'cudal2 train', or unset "
                             "CUDAL2_COST_MODEL to use the model cudal2 ships")
        return model

    @classmethod
    def load(cls, path: Path) -> "TreeModel":
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except OSError as e:
            raise ModelError(f"cannot read the cost model {path}: {e.strerror or e}") from None
        except ValueError:
            raise ModelError(f"{path} is not JSON: a corrupt cost model; train it again with 'cudal2 train'") from None
        return cls.from_json(d, where=str(path))


def _malformed(m: TreeModel, n_features: int) -> str:
    """Why the node arrays cannot be walked safely, or "": sizes that disagree, a feature or child
    index out of range, a non-finite threshold, leaf or base, a node reached twice from the roots (a
    cycle would hang the walk). Vectorised: each node is visited once."""
    n = m.feature.size
    if not (m.threshold.size == m.left.size == m.right.size == m.value.size == n) or m.roots.ndim != 1:
        return "its node arrays disagree in size"
    if not math.isfinite(m.base):
        return f"base {m.base} is not finite"
    if m.roots.size and (m.roots.min() < 0 or m.roots.max() >= n):
        return f"a tree's root is outside its {n} nodes"
    inner = m.feature >= 0
    bad = np.flatnonzero((m.feature < -1) | (m.feature >= n_features))
    if bad.size:
        return f"node {bad[0]} splits on feature {m.feature[bad[0]]}, outside 0..{n_features - 1}"
    bad = np.flatnonzero(inner & ((m.left < 0) | (m.left >= n) | (m.right < 0) | (m.right >= n)))
    if bad.size:
        return f"node {bad[0]} has a child outside its {n} nodes ({m.left[bad[0]]}, {m.right[bad[0]]})"
    bad = np.flatnonzero(inner & ~np.isfinite(m.threshold))
    if bad.size:
        return f"node {bad[0]} has threshold {m.threshold[bad[0]]}"
    bad = np.flatnonzero(~inner & ~np.isfinite(m.value))
    if bad.size:
        return f"leaf {bad[0]} has value {m.value[bad[0]]}"
    seen = np.zeros(n, bool)
    frontier = m.roots.astype(np.int64)
    while frontier.size:
        twice = np.flatnonzero(seen[frontier])
        if twice.size or np.unique(frontier).size != frontier.size:
            node = frontier[twice[0]] if twice.size else frontier[np.argmax(np.bincount(frontier))]
            return f"node {node} is reached twice from the roots (a cycle or a shared subtree)"
        seen[frontier] = True
        frontier = frontier[inner[frontier]]
        frontier = np.concatenate([m.left[frontier], m.right[frontier]]).astype(np.int64)
    return ""


def _short(x: float) -> float:
    return float(f"{x:.7g}")  # a JSON a few times smaller; predictions move by < 1e-6


def sample_device(sample: Sample, default: DeviceProfile) -> DeviceProfile:
    """The GPU a sample was measured on as the features see it: the known part its GPU name names
    (DeviceProfile.of_part), else `default` (a sample with no GPU name, or the recorded runner's)."""
    if sample.gpu and known_part(sample.gpu) is not None:
        return DeviceProfile.of_part(sample.gpu, default.arch)
    return default


def training_matrix(samples: Sequence[Sample], device: DeviceProfile) -> np.ndarray:
    """One row per sample, each with the device it was measured on (sample_device)."""
    devices = {gpu: sample_device(s, device) for s in samples if (gpu := s.gpu) is not None}
    return np.vstack([matrix(s.problem, [s.spec], devices[s.gpu]) for s in samples])


def fit(samples: Sequence[Sample], device: DeviceProfile, *, seed: int = 0, rounds: int = ROUNDS,
        params: dict | None = None) -> TreeModel:
    """A TreeModel fitted to samples (LightGBM, seeded); each sample's features see the GPU it was
    measured on where its name is a known part, else `device`."""
    try:
        import lightgbm as lgb
    except ImportError:
        raise RuntimeError("training a cost model needs LightGBM: pip install 'cudal2[learn]'") from None
    if len(samples) < 2:
        raise ValueError(f"{len(samples)} measured pairs: too few to train on; measure more with 'cudal2 sweep'")
    x = training_matrix(samples, device)
    y = np.array([s.log_speedup for s in samples])
    p = {**PARAMS, **(params or {}), "seed": seed}
    booster = lgb.train(p, lgb.Dataset(x, y, feature_name=[_lgb_name(n) for n in feature_names()],
                                        params={"verbose": -1}), num_boost_round=rounds)
    model = _from_lightgbm(booster.dump_model(), device)
    model.info = {"trained": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "seed": seed, "rounds": rounds,
                  "params": {k: v for k, v in p.items() if k not in ("verbose", "num_threads")},
                  "lightgbm": lgb.__version__, "data": provenance(list(samples))}
    return model


def _lgb_name(name: str) -> str:
    return name.replace(".", "__")  # LightGBM refuses some characters in feature names


def _from_lightgbm(dump: dict, device: DeviceProfile) -> TreeModel:
    feature, threshold, left, right, value, roots = [], [], [], [], [], []
    depth = 0

    def add(node: dict, level: int) -> int:
        nonlocal depth
        depth = max(depth, level)
        i = len(feature)
        feature.append(-1), threshold.append(0.0), left.append(i), right.append(i), value.append(0.0)
        if "leaf_value" in node:
            value[i] = float(node["leaf_value"])
            return i
        if node.get("decision_type", "<=") != "<=":
            raise ModelError(f"unsupported split {node.get('decision_type')!r} in the trained trees")
        feature[i], threshold[i] = int(node["split_feature"]), float(node["threshold"])
        left[i] = add(node["left_child"], level + 1)
        right[i] = add(node["right_child"], level + 1)
        return i

    for tree in dump["tree_info"]:
        roots.append(add(tree["tree_structure"], 0))
    return TreeModel(feature=np.asarray(feature, np.int32), threshold=np.asarray(threshold, float),
                     left=np.asarray(left, np.int32), right=np.asarray(right, np.int32),
                     value=np.asarray(value, float), roots=np.asarray(roots, np.int32), depth=depth, device=device)


class Trainer:
    """A CostModel that keeps its samples and refits on update: what a store-backed retrain does."""

    def __init__(self, device: DeviceProfile, samples: Sequence[Sample] = (), seed: int = 0):
        self.device, self.seed = device, seed
        self.samples: list[Sample] = list(samples)
        self.model: TreeModel | None = fit(self.samples, device, seed=seed) if len(self.samples) >= 2 else None

    def update(self, samples: Sequence[Sample]) -> None:
        self.samples.extend(samples)
        self.model = fit(self.samples, self.device, seed=self.seed)

    def predict(self, problem: GemmProblem, specs: Sequence[KernelSpec]) -> np.ndarray:
        if self.model is None:
            return np.zeros(len(specs))
        return self.model.predict(problem, specs)
