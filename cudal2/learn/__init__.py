"""Training the cost model from measurements: the samples read from a store or an export, the
training that chooses its settings on train shapes and scores on validation, and the validation
itself (top-1 ratios, cross-validation, replayed searches). The model and its features live with the
learned proposer that uses them (cudal2.proposers.cost_model, cudal2.proposers.features).

    samples.py     measured pairs from a store or an export
    train.py       `cudal2 train`: choose settings on train shapes, fit, score on validation
    validate.py    top-1 ratios, cross-validation, replayed searches
"""

from ..proposers.cost_model import CostModel, ModelError, TreeModel, fit
from ..proposers.features import feature_names
from ..proposers.sample import Sample

__all__ = ["CostModel", "ModelError", "Sample", "TreeModel", "feature_names", "fit"]
