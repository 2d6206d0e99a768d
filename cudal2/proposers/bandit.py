"""Picking the next specs to measure on one shape: a contextual bandit over the cost model.

The model's prediction mu is the prior mean of each candidate's log speedup. What the search
measures on this shape corrects it: the residuals (measured minus predicted) are a Gaussian process
over the candidates whose kernel is the model's own notion of likeness, the share of trees in which
two specs fall in the same leaf. A measured spec moves the estimate of the specs the model treats
like it, and leaves the others alone. The next batch goes by the upper confidence bound (mean plus
beta standard deviations), one pick at a time; each pick is believed at its mean before the next, so
a batch spreads out instead of taking near-twins.

Every log speedup here is up to one constant per shape (the torch time, which a search need not
know): the constant is the mean residual, and only differences matter for the choice.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

NOISE_SD = 0.03  # a measurement's own spread, as a log: about 3 %
BETA = 1.0


def likeness(leaves_a: np.ndarray, leaves_b: np.ndarray) -> np.ndarray:
    """(a, b) share of trees in which row i of a and row j of b reach the same leaf."""
    if leaves_a.size == 0 or leaves_b.size == 0:
        return np.zeros((leaves_a.shape[0], leaves_b.shape[0]))
    return (leaves_a[:, None, :] == leaves_b[None, :, :]).mean(axis=2)


def choose(mu: np.ndarray, leaves: np.ndarray, measured: Sequence[int], y: Sequence[float], n: int, *,
           prior_sd: float, beta: float = BETA, exclude: Sequence[int] = ()) -> list[int]:
    """Indices of up to n candidates to measure next, best first.
    mu: (C,) predicted log speedups; leaves: (C, trees) leaf of each candidate in each tree;
    measured: candidate indices measured on this shape, with y their measured log speed (any one
    constant off); exclude: indices never to pick (measured, failed, or already queued)."""
    c = mu.size
    blocked = np.zeros(c, bool)
    blocked[list(exclude)] = True
    blocked[list(measured)] = True
    obs_idx, obs_y = list(measured), list(y)
    picks: list[int] = []
    k_all = likeness(leaves, leaves[obs_idx]) if obs_idx else np.zeros((c, 0))
    for _ in range(min(n, int((~blocked).sum()))):
        mean, sd = _posterior(mu, k_all, obs_idx, np.asarray(obs_y, float), prior_sd)
        score = np.where(blocked, -np.inf, mean + beta * sd)
        i = int(np.argmax(score))
        picks.append(i)
        blocked[i] = True
        # believe the pick at its mean: later picks see its neighbourhood as explored
        obs_idx.append(i)
        obs_y.append(float(mean[i]))
        k_all = np.hstack([k_all, likeness(leaves, leaves[[i]])])
    return picks


def _posterior(mu: np.ndarray, k_all: np.ndarray, obs: list[int], y: np.ndarray,
               prior_sd: float) -> tuple[np.ndarray, np.ndarray]:
    if not obs:
        return mu, np.full(mu.size, prior_sd)
    resid = y - mu[obs]
    offset = resid.mean()  # the shape's constant (its torch time)
    var = prior_sd ** 2
    k_oo = var * k_all[obs] + NOISE_SD ** 2 * np.eye(len(obs))
    k_co = var * k_all
    alpha = np.linalg.solve(k_oo, resid - offset)
    mean = mu + offset + k_co @ alpha
    v = np.linalg.solve(k_oo, k_co.T)
    sd = np.sqrt(np.clip(var - np.einsum("ij,ji->i", k_co, v), 0.0, None))
    return mean, sd
