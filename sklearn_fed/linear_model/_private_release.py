"""One release of :class:`~sklearn_fed.PrivateFederatedRidge`: clipped sums, layout, noise.

What each site releases (per row ``x`` clipped to ``||x|| <= B_x`` and target
``y`` clipped to ``||y|| <= B_y``, summed with sample weights):

* with an intercept, the raw sums of the augmented vector ``(1, x, y)``:
  ``[sum 1, sum x, sum y, upper(sum x x^T), sum x y^T]``; the server derives
  the means and centered statistics from them;
* without one, ``[upper(sum x x^T), sum x y^T]``.

Adding or removing one row (weight 1) changes that vector by
``[1, x, y, upper(x x^T), x y^T]``, whose squared norm is at most

    1 + B_x^2 + B_y^2 + B_x^4 + B_x^2 B_y^2

because ``||upper(x x^T)||^2 = sum_{i<=j} x_i^2 x_j^2 <= ||x||^4`` (equality
for ``x`` along an axis, where every term is at its maximum simultaneously, so
the bound is attained). That square root is the single joint L2 sensitivity of
everything released; one Gaussian mechanism calibrated to it covers Gram,
moment, counts and sums together (the paper's Algorithm 2 instead spends the
full epsilon on the Gram and again on the moment).

:func:`clipped_sums` is a site's vector, :func:`released_sums` its layout
(:func:`_unpack` the server's inverse), :class:`ReleasePlan` the grid and
noise that both the site and the server derive from a task.
"""

import functools
import math

import numpy as np
import scipy.sparse as sp

from ..privacy import gaussian_noise_std
from ..privacy._noise import discretized_sensitivity, grid_exponent
from ..statistics._kernels import _blocks
from ..statistics._kernels import rows_times as _rows_times

__all__ = [
    "ReleasePlan",
    "clip_rows",
    "clipped_sums",
    "joint_sensitivity",
    "n_released",
    "released_sums",
]

# Rows per block of the clipped products: one float64 work block of about
# this size (the rows are scaled into it, never copied as a whole).
_BLOCK_BYTES = 4 * 2**20
# A block read in place corrects its clipped rows with a gather and a GEMM
# (twice syrk's work per row); scaling it into the work array costs a pass
# over the block. Measured crossover (d = 20 to 1,000): about a fifth of the
# rows clipped, so blocks with more than an eighth are scaled.
_MAX_CORRECTED_SHARE = 1 / 8


def clip_rows(X, y, feature_bound, target_bound):
    """Scale each row so ``||x||_2 <= feature_bound`` and ``||y_row||_2 <= target_bound``.

    Rows already inside the bounds are unchanged; ``y`` of one target is
    clipped to ``[-target_bound, target_bound]``. Returns new arrays (a
    reference for tests: sites clip block by block without a copy).
    """
    cx = _clip_factors(X, feature_bound)
    y = np.asarray(y, dtype=np.float64)
    cy = _clip_factors(y.reshape(y.shape[0], -1), target_bound)
    if sp.issparse(X):
        X = sp.csr_matrix(sp.diags(cx) @ sp.csr_matrix(X, dtype=np.float64))
    else:
        X = np.asarray(X, dtype=np.float64) * cx[:, None]
    return X, (y * cy if y.ndim == 1 else y * cy[:, None])


def _clip_factors(A, bound):
    """Per-row factors ``min(1, bound / ||row||)`` (1 for a zero row)."""
    if sp.issparse(A):
        squares = np.asarray(A.multiply(A).sum(axis=1), dtype=np.float64).ravel()
    elif A.dtype == np.float64 and hasattr(np, "vecdot"):  # numpy >= 2: ~30% faster
        squares = np.vecdot(A, A)
    else:
        squares = np.einsum("ij,ij->i", A, A, dtype=np.float64)
    norms = np.sqrt(squares)
    factors = np.ones_like(norms)
    outside = norms > bound
    factors[outside] = bound / norms[outside]
    return factors


def joint_sensitivity(feature_bound, target_bound, fit_intercept=True):
    """L2 sensitivity of the whole released vector under add/remove-one-row.

    ``sqrt(1 + B_x^2 + B_y^2 + B_x^4 + B_x^2 B_y^2)`` with an intercept,
    ``sqrt(B_x^4 + B_x^2 B_y^2)`` without (see the module docstring).
    """
    bx2, by2 = feature_bound**2, target_bound**2
    squared = bx2 * bx2 + bx2 * by2
    if fit_intercept:
        squared += 1.0 + bx2 + by2
    return math.sqrt(squared)


def n_released(n_features, n_targets, fit_intercept):
    """Length ``p`` of the released vector."""
    d, t = n_features, n_targets
    return (1 + d + t if fit_intercept else 0) + d * (d + 1) // 2 + d * t


@functools.lru_cache(maxsize=4)
def _upper_positions(d):
    """Flat positions of a ``d x d`` upper triangle, in ``np.triu_indices`` order.

    Cached: ``gram.take(positions)`` is ~30x faster than
    ``gram[np.triu_indices(d)]``, which each site would rebuild for each release.
    """
    positions = np.flatnonzero(np.triu(np.ones((d, d), dtype=bool)))
    positions.flags.writeable = False
    return positions


def _upper(matrix):
    """The upper triangle of a square C-ordered matrix, row by row."""
    return np.ascontiguousarray(matrix).take(_upper_positions(matrix.shape[0]))


def released_sums(stats, fit_intercept):
    """Pack uncentered :class:`~sklearn_fed.statistics.ClientStatistics` into the released vector."""
    parts = [_upper(stats.gram), stats.moment.ravel()]
    if fit_intercept:
        w = stats.weight_sum
        parts = [[w], w * stats.x_mean, w * stats.y_mean] + parts
    return np.concatenate(parts)


def clipped_sums(X, y, sample_weight, rows, feature_bound, target_bound, fit_intercept):
    """A site's released vector from its clipped rows, and how many rows were clipped.

    Dense rows are read block by block, and ``X`` is never copied. BLAS
    ``syrk`` (numpy's ``B.T @ B``, into one reused ``d x d`` buffer) gives
    each block's ``sum c_x^2 w x x^T`` and one product with
    ``[c_y y, 1] c_x w`` gives the other sums. Scattered rows are first
    gathered into one reused block. An unweighted float64 block is read where
    it is and only its clipped rows are corrected (``(c_x^2 - 1) x x^T``)
    when they are few; other blocks are scaled first (a gathered block where
    it is, a view of ``X`` into one small work array).

    Returns
    -------
    vector : ndarray of shape (p,)
        As :func:`released_sums` lays it out.
    n_clipped : int
        Rows whose features or targets were scaled onto the bounds.
    """
    y = np.asarray(y)
    y2 = y.reshape(y.shape[0], -1)
    rows = slice(0, X.shape[0]) if rows is None else rows
    d, t = X.shape[1], y2.shape[1]
    if sp.issparse(X):
        return _sparse_sums(X, y2, sample_weight, rows, feature_bound, target_bound,
                            fit_intercept)
    gram = np.zeros((d, d))  # sum c_x^2 w x x^T
    products = np.empty((d, d))  # one block's share of it
    side = np.zeros((t + 1, d))  # rows: sum c_x c_y w y_j x per target, then sum c_x w x
    side_block = np.empty((t + 1, d))
    target_sums = np.zeros(t + 1)  # [sum c_y w y, sum w]
    n_clipped = 0
    block = max(1, _BLOCK_BYTES // (8 * (d + t + 1)))
    work_memory = gathered = None
    for take in _blocks(rows, X.shape[0], block):
        if isinstance(take, slice) or not isinstance(X, np.ndarray):  # a slice: a view
            Xb, copied = X[take], False
        else:  # into one reused block: np.take is ~1.6x faster than X[take] here
            if gathered is None:
                gathered = np.empty((min(block, len(rows)), d), dtype=X.dtype)
            Xb, copied = np.take(X, take, axis=0, out=gathered[: len(take)], mode="clip"), True
        yb = y2[take]
        cx = _clip_factors(Xb, feature_bound)
        cy = _clip_factors(yb, target_bound)
        n_clipped += int(np.count_nonzero((cx < 1) | (cy < 1)))
        root = None if sample_weight is None else np.sqrt(sample_weight[take])
        targets = np.empty((t + 1, Xb.shape[0]))  # rows: c_y y per target, then 1 (times sqrt(w))
        np.multiply(yb.T, cy, out=targets[:t])
        targets[t] = 1.0
        if root is not None:
            targets *= root
        target_sums += targets.sum(axis=1) if root is None else targets @ root
        clipped = np.flatnonzero(cx < 1)
        if (root is None and Xb.dtype == np.float64 and Xb.flags.c_contiguous
                and clipped.size <= _MAX_CORRECTED_SHARE * Xb.shape[0]):
            # Read in place; the few clipped rows are corrected afterwards.
            # numpy runs syrk on the view (faster here than scipy's dsyrk).
            gram += np.matmul(Xb.T, Xb, out=products)
            if clipped.size:
                Xc = Xb[clipped]
                gram += (Xc * (cx[clipped] ** 2 - 1)[:, None]).T @ Xc
                targets *= cx
            side += _rows_times(targets, Xb, out=side_block)
            continue
        if copied and Xb.dtype == np.float64:
            scaled = Xb  # a copy of the site's rows: scaled where it is (the same bits)
        else:
            if work_memory is None:  # every later block is no longer than this one
                work_memory = np.empty(Xb.shape[0] * d)
            scaled = work_memory[: Xb.shape[0] * d].reshape(Xb.shape[0], d)
        np.multiply(Xb, (cx if root is None else cx * root)[:, None], out=scaled)
        gram += np.matmul(scaled.T, scaled, out=products)
        side += _rows_times(targets, scaled, out=side_block)
    parts = [_upper(gram), side[:t].T.ravel()]
    if fit_intercept:
        parts = [[target_sums[t]], side[t], target_sums[:t]] + parts
    return np.concatenate(parts), n_clipped


def _sparse_sums(X, y, sample_weight, rows, feature_bound, target_bound, fit_intercept):
    """:func:`clipped_sums` of sparse rows (the site's rows, scaled, stay sparse)."""
    Xs, ys = sp.csr_matrix(X[rows], dtype=np.float64), y[rows]
    cx = _clip_factors(Xs, feature_bound)
    cy = _clip_factors(ys, target_bound)
    n_clipped = int(np.count_nonzero((cx < 1) | (cy < 1)))
    w = np.ones(Xs.shape[0]) if sample_weight is None else sample_weight[rows]
    Xc = sp.csr_matrix(sp.diags(cx) @ Xs)
    Xw = sp.csr_matrix(sp.diags(w) @ Xc)
    yc = ys * cy[:, None]
    gram = (Xw.T @ Xc).toarray()
    parts = [_upper(gram), np.asarray(Xw.T @ yc).ravel()]
    if fit_intercept:
        parts = [[w.sum()], np.asarray(Xw.sum(axis=0)).ravel(), w @ yc] + parts
    return np.concatenate(parts), n_clipped


def _unpack(vector, d, t, fit_intercept):
    """Inverse of :func:`released_sums`: (W, sum x, sum y, sum xx^T, sum xy^T)."""
    start = 0
    w, sx, sy = None, None, None
    if fit_intercept:
        w, sx, sy = vector[0], vector[1 : 1 + d], vector[1 + d : 1 + d + t]
        start = 1 + d + t
    n_upper = d * (d + 1) // 2
    gram = np.zeros(d * d)
    gram[_upper_positions(d)] = vector[start : start + n_upper]
    gram = gram.reshape(d, d)
    gram = gram + np.triu(gram, 1).T  # the noise was drawn once per pair, then mirrored
    moment = vector[start + n_upper :].reshape(d, t)
    return w, sx, sy, gram, moment


class ReleasePlan:
    """What one release adds, as both the site and the server compute it from a task.

    Everything follows from public parameters (the task's ``fields``: bounds,
    epsilon, delta, calibration; the number of released values ``p`` and of
    sites sharing the noise), so the site does not need to trust a noise level
    sent by the server.
    """

    def __init__(self, fields, *, n_values, n_sharing):
        sensitivity = joint_sensitivity(fields["feature_bound"], fields["target_bound"],
                                        fields["fit_intercept"])
        epsilon = fields["epsilon"]
        noisy = epsilon != math.inf
        self.exponent = grid_exponent(sensitivity, n_values, noisy)
        self.sensitivity = (
            discretized_sensitivity(sensitivity, n_values, self.exponent) if noisy
            else sensitivity
        )
        #: Noise std on the aggregate (distributed) or on each message (local).
        self.noise_std = gaussian_noise_std(epsilon, fields["delta"], self.sensitivity,
                                            calibration=fields["calibration"])
        self.site_std = self.noise_std / math.sqrt(n_sharing)
        self.noise_multiplier = self.noise_std / self.sensitivity
