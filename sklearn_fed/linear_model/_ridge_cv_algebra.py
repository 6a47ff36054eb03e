"""FederatedRidgeCV's algebra, free of the protocol: held-out sums and scores, ridge paths.

Robust aggregation's outlier test uses the held-out sums and complements too,
and the servers' base class uses robust aggregation, so this module imports
neither (only ``_solver``).
"""

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.metrics import (
    explained_variance_score,
    mean_squared_error,
    r2_score,
    root_mean_squared_error,
)

from .._compat import scorer_parts
from ..statistics import merge_statistics
from ._solver import factor_range, numerical_range

# Scorers whose value on a set of rows follows from sums over those rows.
_DECOMPOSABLE = {
    mean_squared_error: "mse",
    root_mean_squared_error: "rmse",
    r2_score: "r2",
    explained_variance_score: "explained_variance",
}
#: Value of ``criterion`` for the one-shot paper's pooled criterion.
POOLED = "pooled_squared_error"
_MEAN = "mean_fold_score"


# ------------------------------------------------------------------ scoring
class _IdentityRegressor(RegressorMixin, BaseEstimator):
    """Scores held-out predictions with a scorer: ``predict(P)`` returns ``P``."""

    def fit(self, X, y=None):
        return self

    def predict(self, X):
        return X


def _scorer_kind(scorer):
    """``"default"``, a decomposable kind (``"mse"``, ...) or None for any other scorer."""
    if scorer is None:
        return "default"
    score_func, _, kwargs, response = scorer_parts(scorer)
    kind = _DECOMPOSABLE.get(score_func)
    if kind is None or response != "predict" or set(kwargs) - {"multioutput"}:
        return None
    if kwargs.get("multioutput", "uniform_average") != "uniform_average":
        return None
    return kind


class _Sums:
    """Sums over held-out rows from which decomposable scores follow.

    ``count`` rows, ``weight`` their weight; per target and alpha ``e1`` the
    weighted sum and ``e2`` the weighted sum of squares of the residuals;
    per target ``sst`` the weighted sum of squares of the targets around
    their (weighted) mean.
    """

    def __init__(self, count, weight, e1, e2, sst):
        self.count, self.weight = int(count), float(weight)
        self.e1, self.e2, self.sst = e1, e2, sst

    def __add__(self, other):  # rows of both sets; sst needs the pooled mean
        return _Sums(self.count + other.count, self.weight + other.weight,
                     self.e1 + other.e1, self.e2 + other.e2, self.sst + other.sst)

    def scores(self, kind, sign, per_target):
        """Scores of shape (n_targets, n_alphas), or (n_alphas,) averaged over targets.

        As scikit-learn's metrics with ``multioutput="uniform_average"``, and
        their conventions for constant targets (``force_finite``) and for
        R^2 on fewer than two rows (NaN).
        """
        W = self.weight
        if kind == "mse":
            values = self.e2 / W
        elif kind == "row_mse":  # the mean over rows of w e^2 (RidgeCV's leave-one-out)
            values = self.e2 / self.count
        elif kind == "rmse":
            values = np.sqrt(self.e2 / W)
        else:
            numerator = self.e2 if kind == "r2" else self.e2 - self.e1**2 / W
            denominator = np.broadcast_to(self.sst[:, None], numerator.shape)
            values = np.ones_like(numerator)
            valid = (denominator != 0) & (numerator != 0)
            values[valid] = 1 - numerator[valid] / denominator[valid]
            values[(numerator != 0) & (denominator == 0)] = 0.0
            if kind == "r2" and self.count < 2:
                values = np.full_like(numerator, np.nan)
        return sign * (values if per_target else values.mean(axis=0))


def _held_out_sums(held, coef, intercept):
    """:class:`_Sums` of a model (per alpha) on the rows of ``held`` (statistics).

    ``coef`` is (n_features, n_targets, n_alphas), ``intercept`` (n_targets,
    n_alphas). Centered statistics: ``sum w e^2 = SSE around the held-out
    means + W gap^2`` with ``gap`` the mean residual; the SSE is
    ``|R_x c - R_y|^2`` from a factor, ``S_yy - 2 c.h + c^T G c`` from a Gram.
    """
    W = held.weight_sum
    d, t, n_alphas = coef.shape
    flat = coef.reshape(d, t * n_alphas)  # matrix products (BLAS), not einsum loops
    mean_residual = held.y_mean[:, None] - intercept - (held.x_mean @ flat).reshape(t, n_alphas)
    if held.factor is not None:
        residual = (held.factor[:, :d] @ flat).reshape(-1, t, n_alphas) - held.factor[:, d:, None]
        spread = np.sum(residual * residual, axis=0)
    else:
        spread = (
            held.target_ss[:, None]
            - 2 * np.sum(held.moment[:, :, None] * coef, axis=0)
            + np.sum(flat * (held.gram @ flat), axis=0).reshape(t, n_alphas)
        )
    if held.centered:
        e2 = spread + W * mean_residual**2
        sst = held.target_ss
    else:  # raw statistics (fit_intercept=False): the intercept is 0
        e2 = spread
        sst = held.target_ss - W * held.y_mean**2
    return _Sums(held.n_samples, W, W * mean_residual, np.maximum(e2, 0.0), np.maximum(sst, 0.0))


# ------------------------------------------------------------------ algebra
def _spectrum(stats):
    """``(eigenvalues, basis, projected)`` of ridge on ``stats``, for any number of alphas.

    ``coef(alpha) = basis @ (projected / (eigenvalues + alpha))``: from the
    numerical range of the Gram, or from the SVD of a factor (eigenvalues
    ``s^2``, ``projected = s U^T R_y``, never squaring ``X``'s condition).
    """
    if stats.factor is not None:
        s, Vt, projected = factor_range(stats.factor, stats.n_features)
        return s * s, Vt.T, s[:, None] * projected
    eigenvalues, Q = numerical_range(stats.gram)
    return eigenvalues, Q, Q.T @ stats.moment


def _ridge_path(stats, alphas):
    """Ridge on ``stats`` for every alpha, from one :func:`_spectrum`: ``(coef, intercept)``
    of shapes (n_features, n_targets, n_alphas) and (n_targets, n_alphas)."""
    eigenvalues, basis, projected = _spectrum(stats)
    scaled = projected[:, :, None] / (eigenvalues[:, None, None] + alphas)
    # explicit sizes: the spectrum is empty when every column is constant (k = 0)
    k, t, n_alphas = scaled.shape
    coef = (basis @ scaled.reshape(k, t * n_alphas)).reshape(basis.shape[0], t, n_alphas)
    if not stats.centered:
        return coef, np.zeros(coef.shape[1:])
    return coef, stats.y_mean[:, None] - (stats.x_mean @ coef.reshape(coef.shape[0], -1)).reshape(
        coef.shape[1:])


def _complements(statistics):
    """For each client, the merged statistics of all the others, in order.

    Divide and conquer: the complement of a half is the complement of the
    whole merged with the other half. Every step is an exact merge, never a
    subtraction, in ``O(d^2 log K)`` memory.
    """

    def recurse(lo, hi, outside):
        if hi - lo == 1:
            yield outside
            return
        mid = (lo + hi) // 2
        left = merge_statistics(statistics[lo:mid])
        right = merge_statistics(statistics[mid:hi])
        yield from recurse(lo, mid, right if outside is None else outside.merge(right))
        yield from recurse(mid, hi, left if outside is None else outside.merge(left))

    yield from recurse(0, len(statistics), None)


def _through_spectrum(Z, projected, inverse):
    """``sum_k Z[n, k] projected[k, t] inverse[k, a]`` as one matrix product: (n, t, a)."""
    k, t = projected.shape
    # explicit sizes: k is 0 when every column is constant (no -1 to infer from size 0)
    weights = (projected[:, :, None] * inverse[:, None, :]).reshape(k, t * inverse.shape[1])
    return (Z @ weights).reshape(Z.shape[0], t, inverse.shape[1])


def _first_best(scores):
    """The first alpha whose score no later one beats (RidgeCV's rule; NaN never wins)."""
    best = 0
    for i in range(1, len(scores)):
        if scores[i] > scores[best]:
            best = i
    return best

