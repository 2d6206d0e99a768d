"""Learning from measurements: the cost model that predicts a spec's speed on a shape, its
features, its training and validation, and the bandit that picks a search's next batch from it.

    features.py    (problem, spec, device) -> numbers
    samples.py     measured pairs from a store or an export
    cost_model.py  the CostModel interface; TreeModel (LightGBM-trained, numpy-scored JSON)
    validate.py    top-1 ratios, cross-validation, replayed searches
    train.py       `cudal2 train`: choose settings on train shapes, fit, score on validation
    bandit.py      the next batch: upper confidence over the model, corrected by what was measured
"""

from .cost_model import CostModel, ModelError, TreeModel, fit
from .features import feature_names
from .samples import Sample

__all__ = ["CostModel", "ModelError", "Sample", "TreeModel", "feature_names", "fit"]
