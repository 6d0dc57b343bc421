"""Predicted final accuracy from a partial validation-accuracy curve (SPEC section 5).

Warm-up rounds train for fewer epochs than later ones, so models are ranked by
the accuracy they would reach after `final_epoch` epochs. Fitted model, per
epoch e (1-based)::

    acc(e) = a - b * exp(-c * (e - 1))      a in [0, 1], b >= 0, c > 0

a saturating exponential: monotone, bounded by `a`, and with three parameters
it fits 3+ points; for one or two points there is too little information and
the prediction is the best observed value (two points: their trend, damped
and capped at half the remaining headroom, see `_two_points`). The prediction is clamped: never below
the best observed accuracy, never above 1. It ranks models and feeds the tuner;
it never enters a score.
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import numpy as np

log = logging.getLogger(__name__)

# With two points, only half the observed per-epoch gain is carried forward,
# decaying geometrically: a straight line would overshoot any saturating curve.
_TWO_POINT_DECAY = 0.5
_TWO_POINT_HEADROOM = 0.5


def predict_final_accuracy(accuracies: Sequence[float], final_epoch: int) -> float:
    """Predicted validation accuracy after `final_epoch` epochs.

    `accuracies[i]` is the validation accuracy after epoch i+1. Non-finite
    values are ignored. Returns 0.0 for an empty curve. The result lies in
    [max(observed), 1].
    """
    ys = np.asarray([float(a) for a in accuracies if a is not None and math.isfinite(float(a))])
    if ys.size == 0:
        return 0.0
    if np.any(ys < 0) or np.any(ys > 1):
        raise ValueError("accuracies must lie in [0, 1]")
    best = float(ys.max())
    n = len(accuracies)
    if final_epoch <= n:  # nothing to extrapolate
        return best
    if ys.size == 1:
        prediction = best
    elif ys.size == 2:
        prediction = _two_points(ys, final_epoch - 2)
    else:
        prediction = _fit_exponential(ys, final_epoch)
    return float(min(1.0, max(best, prediction)))


def _two_points(ys: np.ndarray, remaining: int) -> float:
    gain = float(ys[1] - ys[0])
    if gain <= 0:
        return float(ys[1])
    # Sum of gain*d + gain*d^2 + ... over the remaining epochs, but at most half
    # the remaining headroom: a first epoch near chance (batch-norm statistics
    # not settled yet) makes the first gain far larger than the later ones.
    d = _TWO_POINT_DECAY
    extra = gain * d * (1 - d ** remaining) / (1 - d)
    return float(ys[1] + min(extra, _TWO_POINT_HEADROOM * (1.0 - ys[1])))


def _fit_exponential(ys: np.ndarray, final_epoch: int) -> float:
    """Least-squares fit of a - b*exp(-c*(e-1)); c by grid search, a and b linear."""
    e = np.arange(len(ys), dtype=float)
    best_fit: tuple[float, float, float] | None = None
    best_err = math.inf
    # c on a log grid: time constants from a fraction of an epoch to ~100 epochs.
    for c in np.geomspace(0.01, 5.0, 120):
        basis = np.exp(-c * e)
        A = np.column_stack([np.ones_like(e), -basis])
        (a, b), *_ = np.linalg.lstsq(A, ys, rcond=None)
        # Constrained least squares (a <= 1, b >= 0): on a boundary, refit the other.
        if a > 1.0:
            a = 1.0
            b = float(basis @ (1.0 - ys) / (basis @ basis))
        if b < 0:  # a decreasing curve: the model's shape does not fit, use a flat line
            a, b = float(ys.mean()), 0.0
        err = float(np.sum((a - b * basis - ys) ** 2))
        if err < best_err - 1e-15:
            best_err, best_fit = err, (float(a), float(b), float(c))
    if best_fit is None:  # pragma: no cover - the grid is never empty
        return float(ys.max())
    a, b, c = best_fit
    prediction = a - b * math.exp(-c * (final_epoch - 1))
    log.debug("learning curve fit a=%.4f b=%.4f c=%.4f -> %.4f at epoch %d", a, b, c, prediction, final_epoch)
    return prediction
