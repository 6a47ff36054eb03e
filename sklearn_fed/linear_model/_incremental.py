"""IncrementalFederatedRidge: FedDelta rounds as a streaming protocol, solved by low-rank updates.

Each round, every site with enough new rows sends a compact message (its
means, centered moment and either the ``R`` of a QR of its centered rows or
its packed Gram); the server merges the messages into the exact statistics
of all rows so far and keeps the round's update to the Gram as stacked rows
``V`` (``G_new = G + V^T V``). The ridge system ``P = G + alpha I`` is solved
when the model is first used after a round, by a low-rank update of the
previous solution when that is cheaper, else by a Cholesky factorization of
the exact statistics.
"""

import contextlib
import copy
import functools
import math
import threading
import time
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy import linalg
from scipy.linalg.lapack import dgeqrf as _geqrf

from .._clients import label_array
from .._compat import Interval, StrOptions, _fit_context
from ..protocol import (
    Client,
    InvalidClientMessage,
    Server,
    SymmetricMatrix,
    atomic,
    label_key,
    run_simulation,
    sorted_labels,
)
from ..protocol._threads import blas_libraries
from ..simulation import elect_leader
from ..statistics import ClientStatistics
from ..statistics._kernels import drop_direction as _drop_direction
from ..statistics._validation import MAX_MEAN as _MAX_MEAN
from ..statistics._validation import MAX_SECOND as _MAX_SECOND
from ..statistics._validation import MAX_WEIGHT as _MAX_WEIGHT
from ._base import BaseFederatedRidge, solve_ridge, task_field

__all__ = ["IncrementalFederatedRidge"]

# The solve, and a round of at most d rows, run on one BLAS thread up to this
# many features: their triangular solves, small QRs and products are too small
# for a second thread to pay for waking it, and when another library's threads
# hold the other core they wait for it. Measured on 2 cores
# (benchmarks/bench_incremental.py, model read every round): pinned / unpinned
# 0.12 at d = 128, 0.40 at 1,000 (21.9 ms against 8.3 ms per solve on a quiet
# machine), 0.55 at 4,000; at d = 100, 1.02-1.06 on a quiet machine but 0.5 ms
# against 8 ms per round beside scikit-learn-intelex's busy thread pool. Above
# it (where many cores may pay) not measured: BLAS decides.
_ONE_THREAD_MAX_FEATURES = 4000
# Woodbury is chosen when the pending update has at most d / _AUTO_RANK_RATIO
# rows (measured crossover, see benchmarks/bench_incremental.py).
_AUTO_RANK_RATIO = 8
# A merged Gram whose diagonal exceeds this could overflow in the solve (a
# backstop: the per-message caps already keep any real stream far below it).
_MAX_MAGNITUDE = np.finfo(np.float64).max / 64
_CONTRIBUTION_FIELDS = {"n_samples", "weight_sum", "centered", "single_target"}
_FACTOR_ARRAYS = {"x_mean", "y_mean", "factor", "moment", "target_ss"}
_GRAM_ARRAYS = {"x_mean", "y_mean", "gram", "moment", "target_ss"}


# --------------------------------------------------------------------- messages
def _site_statistics(X, y, sample_weight, centered):
    """A site's message for its pending rows: ``(fields, arrays)``.

    The Gram travels as the ``R`` of a QR of the site's (sqrt-weighted,
    centered) rows when that is smaller than its packed triangle, i.e. with
    fewer than ``(d + 1) / 2`` rows; ``R^T R`` is the Gram and ``R`` is fixed
    by the Gram up to signs, so it tells the server nothing more. Centered
    rows ``C`` satisfy ``sqrt(w)^T C = 0``, so they have rank ``n - 1``: the
    QR of ``[sqrt(w), C]`` puts that direction in its first row, and the
    remaining ``n - 1`` rows of ``R`` (past the first column) factor the Gram.
    """
    n, d = X.shape
    if 2 * (n - centered) >= d + 1:
        return ClientStatistics.from_data(X, y, sample_weight, centered=centered).to_payload()
    X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    y2 = np.asarray(y, dtype=np.float64).reshape(n, -1)
    if sample_weight is None:
        weight_sum, root = float(n), None
        x_mean, y_mean = X.sum(axis=0) / n, y2.sum(axis=0) / n  # np.mean, without its overhead
    else:
        w = np.asarray(sample_weight, dtype=np.float64)
        weight_sum = float(w.sum())
        denom = weight_sum if weight_sum > 0 else 1.0
        x_mean, y_mean = (w @ X) / denom, (w @ y2) / denom
        root = np.sqrt(w)
    # [sqrt(w), sqrt(w) (x - mean)], in Fortran order so LAPACK works on it in place
    stacked = np.empty((n, d + 1), order="F")
    Xs = stacked[:, 1:]
    if centered:
        np.subtract(X, x_mean, out=Xs)
        ys = y2 - y_mean
    else:
        Xs[:] = X
        ys = y2
    if root is not None:
        Xs *= root[:, None]
        ys = ys * root[:, None]
    moment = Xs.T @ ys
    target_ss = np.einsum("ij,ij->j", ys, ys)
    if centered:
        stacked[:, 0] = 1.0 if root is None else root
        factor = _upper_part(_geqrf(stacked, overwrite_a=True)[0][1:, 1:])
    else:
        factor = _upper_part(_geqrf(np.asfortranarray(Xs))[0][: min(n, d)]) if n else np.zeros(
            (0, d))
    fields = {
        "n_samples": int(n),
        "weight_sum": weight_sum,
        "centered": bool(centered),
        "single_target": y.ndim == 1,
    }
    arrays = {
        "x_mean": x_mean,
        "y_mean": y_mean,
        "factor": factor,
        "moment": moment,
        "target_ss": target_ss,
    }
    return fields, arrays


@functools.lru_cache(maxsize=64)
def _upper_mask(shape):
    mask = np.triu(np.ones(shape, dtype=bool))
    mask.flags.writeable = False
    return mask


def _upper_part(matrix):
    """``np.triu(matrix)``, each shape's mask built once (rounds repeat shapes)."""
    return np.where(_upper_mask(matrix.shape), matrix, 0.0)


class _SiteReply:
    """One site's validated message of one round (the Gram as ``factor`` or ``gram``)."""

    __slots__ = ("site", "n_samples", "weight_sum", "x_mean", "y_mean", "factor", "gram",
                 "moment", "target_ss", "single_target", "gram_diagonal")

    def __init__(self, site, fields, arrays):
        self.site = site
        self.n_samples = fields["n_samples"]
        self.weight_sum = float(fields["weight_sum"])
        self.single_target = fields["single_target"]
        self.x_mean, self.y_mean = arrays["x_mean"], arrays["y_mean"]
        self.moment, self.target_ss = arrays["moment"], arrays["target_ss"]
        self.factor = arrays.get("factor")
        gram = arrays.get("gram")
        self.gram = gram.matrix if isinstance(gram, SymmetricMatrix) else gram
        if self.factor is None:
            self.gram_diagonal = np.diag(self.gram).copy()
        else:
            with np.errstate(all="ignore"):  # numbers not checked yet: _factor_failures
                self.gram_diagonal = np.einsum("ij,ij->j", self.factor, self.factor)


def _read_contribution(site, frame, *, n_features, n_targets, centered):
    """Parse and check one site's statistics; raise InvalidClientMessage naming it."""

    def fail(reason):
        raise InvalidClientMessage(f"client {site!r}: {reason}", site)

    fields, arrays = frame.fields, frame.arrays
    if fields.keys() != _CONTRIBUTION_FIELDS:
        fail(f"statistics fields must be {sorted(_CONTRIBUTION_FIELDS)}; got {sorted(fields)}.")
    n, weight_sum = fields["n_samples"], fields["weight_sum"]
    if not (type(n) is int and 0 < n < 2**53):
        fail(f"n_samples must be a positive integer, got {n!r}.")
    if not (type(weight_sum) in (int, float) and 0 <= weight_sum <= _MAX_WEIGHT):
        fail(f"weight_sum must be a finite non-negative number, got {weight_sum!r}.")
    if fields["centered"] is not centered:
        fail(f"statistics are {'' if fields['centered'] else 'un'}centered, but the task "
             f"asked for centered={centered}.")
    if type(fields["single_target"]) is not bool or (fields["single_target"] and n_targets != 1):
        fail("single_target must be a boolean, and true only with one target.")
    d, t = n_features, n_targets
    # (shape, magnitude cap): the caps of ClientStatistics.validate, which make
    # merging and solving overflow-free; a factor's entries are square roots of
    # second moments.
    shapes = {"x_mean": ((d,), _MAX_MEAN), "y_mean": ((t,), _MAX_MEAN),
              "moment": ((d, t), _MAX_SECOND), "target_ss": ((t,), _MAX_SECOND)}
    if arrays.keys() == _GRAM_ARRAYS:
        gram = arrays["gram"]
        arrays = dict(arrays, gram=gram.matrix if isinstance(gram, SymmetricMatrix) else gram)
        shapes["gram"] = ((d, d), _MAX_SECOND)
    elif arrays.keys() == _FACTOR_ARRAYS:
        factor = arrays["factor"]
        p = factor.shape[0] if getattr(factor, "ndim", 0) == 2 else -1
        if not 0 <= p < d:
            fail(f"factor must have fewer rows than the {d} features.")
        shapes["factor"] = ((p, d), None)  # its numbers: _factor_failures
    else:
        fail("statistics arrays must be x_mean, y_mean, moment, target_ss and one of "
             f"factor or gram; got {sorted(arrays)}.")
    for name, (shape, cap) in shapes.items():
        array = arrays[name]
        if not (type(array) is np.ndarray and array.dtype == np.float64):
            fail(f"{name} must be a float64 array.")
        if array.shape != shape:
            fail(f"{name} has shape {array.shape}, expected {shape}.")
        full_gram = "gram" in shapes  # (factor replies: _factor_failures)
        if full_gram and not np.abs(array).max(initial=0.0) <= cap:  # False for NaN
            fail(_beyond_cap(name, cap))
    contribution = _SiteReply(site, fields, arrays)
    if contribution.gram is None:  # the numbers of a factor reply: _factor_failures
        return contribution
    stats = ClientStatistics(  # a full Gram must look like one
        n, float(weight_sum), contribution.x_mean, contribution.y_mean,
        contribution.gram, contribution.moment, contribution.target_ss,
        centered=centered, single_target=contribution.single_target,
    )
    stats.validate(client=site)
    if not contribution.gram_diagonal.max(initial=0.0) <= _MAX_SECOND:
        fail(_SECOND_MOMENTS_TOO_LARGE)
    return contribution


def _beyond_cap(name, cap):
    return (f"{name} contains NaN or infinity or entries beyond {cap:g} in magnitude "
            "(no real data does: its rows hold huge values). Nothing was applied.")


_SECOND_MOMENTS_TOO_LARGE = (
    f"its second moments exceed {_MAX_SECOND:g} (no real data does: its rows hold huge "
    "values). Nothing was applied."
)


def _factor_failures(contributions):
    """The numeric checks of a round's factor replies, all sites at once.

    Checked one by one they would be some twenty numpy calls on tiny arrays
    per site, the largest cost of a round of small sites; stacked, the same
    checks take the same few calls for any number of sites, and when every
    value of the round passes them (the usual case) they are checked over
    the whole stack at once, without finding out which site failed. Returns
    ``{site: InvalidClientMessage}`` with each failing site's first failed
    check: entries within the caps of
    :meth:`ClientStatistics.validate` (which keep merging and solving free of
    overflow; a factor's entries are square roots of second moments), then
    ``|moment_ij| <= |column i| |target j|`` (Cauchy-Schwarz; the factor's
    column norms miss the row dropped by centering, a rounding error of order
    ``eps |x_mean| sqrt(W)``), then the second moments' cap. A factor's
    ``R^T R`` is positive semi-definite by construction.
    """
    if not contributions:
        return {}
    # (shapes were checked per reply, so np.array stacks: faster than np.stack)
    rows = np.concatenate([c.factor for c in contributions])
    x_mean = np.array([c.x_mean for c in contributions])
    y_mean = np.array([c.y_mean for c in contributions])
    moment = np.array([c.moment for c in contributions])
    target_ss = np.array([c.target_ss for c in contributions])
    diagonal = np.array([c.gram_diagonal for c in contributions])
    roots = np.sqrt([c.weight_sum for c in contributions])
    with np.errstate(all="ignore"):  # refused replies may hold inf or NaN
        column = np.sqrt(diagonal) + 1e-8 * roots[:, None] * np.abs(x_mean)
        bound = column[:, :, None] * np.sqrt(target_ss)[:, None, :] * (1 + 1e-6)
        caps = (
            ("x_mean", x_mean, _MAX_MEAN),
            ("y_mean", y_mean, _MAX_MEAN),
            ("moment", moment, _MAX_SECOND),
            ("target_ss", target_ss, _MAX_SECOND),
            ("factor", rows, math.sqrt(_MAX_SECOND)),
        )
        if (  # False for NaN: the site-by-site checks below then name the site
            all(np.abs(values).max(initial=0.0) <= cap for _, values, cap in caps)
            and (np.abs(moment) <= bound).all() and target_ss.min(initial=0.0) >= 0
            and diagonal.max(initial=0.0) <= _MAX_SECOND
        ):
            return {}
        failed = {}

        def flag(bad, reason):
            for i in np.flatnonzero(bad):
                failed.setdefault(int(i), reason)

        n_rows = np.array([c.factor.shape[0] for c in contributions])
        factor_max = np.zeros(len(contributions))
        some = n_rows > 0  # sites whose factor has rows (reduceat needs non-empty runs)
        if some.any():
            starts = np.concatenate([[0], np.cumsum(n_rows[some])[:-1]])
            factor_max[some] = np.maximum.reduceat(np.abs(rows).max(axis=1), starts)
        for name, values, cap in caps:
            if name == "factor":
                values = factor_max
            else:
                values = np.abs(values).reshape(len(values), -1).max(axis=1, initial=0.0)
            flag(~(values <= cap), _beyond_cap(name, cap))
        flag((target_ss < 0).any(axis=1) | (np.abs(moment) > bound).any(axis=(1, 2)),
             "moment violates the Cauchy-Schwarz bound of its factor and target_ss.")
        too_large = ~(diagonal.max(axis=1, initial=0.0) <= _MAX_SECOND)
        flag(too_large, _SECOND_MOMENTS_TOO_LARGE)
    return {
        contributions[i].site: InvalidClientMessage(
            f"client {contributions[i].site!r}: {reason}", contributions[i].site)
        for i, reason in sorted(failed.items())
    }


# ------------------------------------------------------------------------ merge
def _merge_round(previous, contributions, centered):
    """Exact statistics after the round, and its update of the Gram as rows.

    ``previous`` is the last :class:`_Model` (or None). Returns the merged
    ``(n_samples, weight_sum, x_mean, y_mean, moment, target_ss)``, the
    update as a list of row ``blocks`` (the sites' factors and the Chan
    mean-shift rows, reduced by one, see the User Guide; stacked only when
    solved), the sum ``dense`` of any full Grams, so that
    ``G_new = G + sum(B^T B for B in blocks) + dense``, and the diagonal of
    that update (from the diagonals the replies' checks computed).
    """
    groups = ([previous] if previous is not None else []) + list(contributions)
    d = contributions[0].moment.shape[0]
    weights = np.array([g.weight_sum for g in groups])
    total = float(weights.sum())
    factors = [c.factor for c in contributions if c.factor is not None and c.factor.shape[0]]
    grams = [c.gram for c in contributions if c.gram is not None]
    moment = sum(c.moment for c in contributions)
    target_ss = sum(c.target_ss for c in contributions)
    diagonal = np.array([c.gram_diagonal for c in contributions]).sum(axis=0)
    x_ref, y_ref = groups[0].x_mean, groups[0].y_mean
    dx = np.array([g.x_mean for g in groups]) - x_ref  # (np.stack, without its overhead)
    dy = np.array([g.y_mean for g in groups]) - y_ref
    if total > 0:
        shift_x, shift_y = weights @ dx / total, weights @ dy / total
    else:
        shift_x, shift_y = np.zeros(d), np.zeros(dy.shape[1])
    if centered:
        # Chan: every group's mean offset from the pooled mean adds w dx dx^T.
        root = np.sqrt(weights)
        mx = (dx - shift_x) * root[:, None]
        my = (dy - shift_y) * root[:, None]
        moment = moment + mx.T @ my
        target_ss = target_ss + np.einsum("ij,ij->j", my, my)
        shift_rows = _drop_direction(mx, root)
        if shift_rows.shape[0]:
            factors.append(shift_rows)
            diagonal += np.einsum("ij,ij->j", shift_rows, shift_rows)
    dense = None
    if grams:
        dense = grams[0].copy()
        for gram in grams[1:]:
            dense += gram
    n_samples = sum(c.n_samples for c in contributions)
    if previous is not None:
        moment = previous.moment + moment
        target_ss = previous.target_ss + target_ss
        n_samples += previous.n_samples
    merged = (n_samples, total, x_ref + shift_x, y_ref + shift_y, moment,
              np.maximum(target_ss, 0.0))
    return merged, factors, dense, diagonal


def _gram_of(rows):
    """``rows^T rows`` (numpy runs BLAS syrk for ``A.T @ A`` and mirrors the triangle)."""
    return rows.T @ rows


# ------------------------------------------------------------------ solver state
class _FactorState:
    """``P = P_base + V^T V``: Cholesky of ``P_base`` and the update since then.

    ``Z = P_base^{-1} V^T`` and the Cholesky of the capacitance
    ``S = I + V Z`` give ``P^{-1} h = y - Z S^{-1} V y`` with
    ``y = P_base^{-1} h`` (Sherman-Morrison-Woodbury), all in O(d^2 (m + t)).
    """

    kind = "factor"

    def __init__(self, alpha, chol, d):
        self.alpha = alpha
        self.chol = chol
        self.V = np.zeros((0, d))
        self.Z = np.zeros((d, 0))
        self.S = np.zeros((0, 0))
        self.S_chol = None
        self.rounds = 0

    @property
    def rank(self):
        return self.V.shape[0]

    def update(self, rows):
        new = _FactorState.__new__(_FactorState)
        new.alpha, new.chol = self.alpha, self.chol
        Zn = linalg.cho_solve((self.chol, False), rows.T, check_finite=False)
        cross = self.V @ Zn
        corner = np.eye(rows.shape[0]) + rows @ Zn
        new.S = np.block([[self.S, cross], [cross.T, (corner + corner.T) / 2]])
        new.S_chol = linalg.cholesky(new.S, lower=False, check_finite=False)
        new.V = np.vstack([self.V, rows])
        new.Z = np.hstack([self.Z, Zn])
        new.rounds = self.rounds + 1
        return new

    def solve(self, moment):
        y = linalg.cho_solve((self.chol, False), moment, check_finite=False)
        if self.rank:
            y = y - self.Z @ linalg.cho_solve((self.S_chol, False), self.V @ y,
                                              check_finite=False)
        return y


class _InverseState:
    """Explicit ``P^{-1}`` updated by the paper's spectral route (Eq. 16-17)."""

    kind = "inverse"

    def __init__(self, alpha, inverse):
        self.alpha = alpha
        self.inverse = inverse
        self.rounds = 0

    def update(self, update_matrix, new_alpha):
        """SMW with ``U = Q diag(sigma) Q^T`` (zero eigenvalues dropped)."""
        sigma, Q = linalg.eigh(update_matrix, check_finite=False)
        keep = np.abs(sigma) > np.finfo(float).eps * len(sigma) * max(np.abs(sigma).max(), 0)
        sigma, Q = sigma[keep], Q[:, keep]
        new = _InverseState(new_alpha, self.inverse)
        new.rounds = self.rounds + 1
        if sigma.size:
            PQ = self.inverse @ Q
            capacitance = np.diag(1.0 / sigma) + Q.T @ PQ
            inverse = self.inverse - PQ @ linalg.solve(capacitance, PQ.T, assume_a="sym",
                                                       check_finite=False)
            new.inverse = (inverse + inverse.T) / 2
        return new

    def solve(self, moment):
        return self.inverse @ moment


def _refactor(gram, alpha, kind):
    """Rebuild the solver state from the exact statistics; None if not SPD."""
    d = gram.shape[0]
    system = gram.copy()
    system.flat[:: d + 1] += alpha
    try:
        chol = linalg.cholesky(system, lower=False, check_finite=False)
    except linalg.LinAlgError:
        return None
    pivots = np.abs(np.diag(chol))
    if pivots.min() <= np.sqrt(np.finfo(float).eps * d) * pivots.max():
        return None  # ill-conditioned: let solve_ridge warn and use lstsq
    if kind == "inverse":
        inverse = linalg.cho_solve((chol, False), np.eye(d), check_finite=False)
        return _InverseState(alpha, (inverse + inverse.T) / 2)
    return _FactorState(alpha, chol, d)


def _backward_error(gram, alpha, coef_t, moment):
    """Normwise backward error of ``(G + alpha I) w = h`` (trace bounds ||G||)."""
    residual = gram @ coef_t + alpha * coef_t - moment
    scale = (np.trace(gram) + alpha * gram.shape[0]) * np.linalg.norm(coef_t) + np.linalg.norm(
        moment
    )
    return np.linalg.norm(residual) / scale if scale > 0 else 0.0


def _choose(mode, refactor_every, old, rows, dense, d, value):
    """The route that updates ``old`` for one alpha value."""
    if mode == "refactor" or old is None:
        return "refactor"
    if refactor_every is not None and old.rounds + 1 >= refactor_every:
        return "refactor"
    if mode == "spectral":
        return "spectral" if old.kind == "inverse" else "refactor"
    if old.kind != "factor" or old.alpha != value or dense is not None:
        return "refactor"  # delta_lambda I or a dense Gram is full rank: refactor
    m = rows.shape[0]
    if mode == "woodbury":
        return "woodbury" if old.rank + m <= d else "refactor"
    # auto: SMW costs ~4 d^2 m against d^3 / 3 for Cholesky; keep the
    # accumulated rank small so each solve stays O(d^2).
    return "woodbury" if m <= d / _AUTO_RANK_RATIO and old.rank + m <= d / 2 else "refactor"


# ------------------------------------------------------------------------ model
class _Model:
    """The exact statistics after a round, and their ridge solution, solved on first use.

    The Gram is kept as ``gram`` (the one the solver states belong to) plus
    the update since then, ``pending`` row blocks and a ``dense`` sum, so a
    round costs ``O(m d)`` and the ``O(d^2 m)`` or ``O(d^3)`` solve is paid
    only when the model is used (like scikit-learn-intelex's IncrementalRidge).
    Everything is replaced, never changed, except the memo of the solution.
    """

    def __init__(self, merged, *, gram, pending, dense, diagonal, solvers, alpha, options,
                 centered, single_target, dtype, record):
        (self.n_samples, self.weight_sum, self.x_mean, self.y_mean, self.moment,
         self.target_ss) = merged
        self.gram, self.pending, self.dense, self.diagonal = gram, pending, dense, diagonal
        self.solvers, self.alpha, self.options = solvers, alpha, options
        self.centered, self.single_target, self.dtype = centered, single_target, dtype
        self.record = record
        self._solution = None

    @property
    def n_features(self):
        return self.x_mean.shape[0]

    @classmethod
    def after_round(cls, previous, contributions, *, alpha, options, centered, single_target,
                    dtype, record):
        merged, blocks, dense, diagonal = _merge_round(previous, contributions, centered)
        d = merged[2].shape[0]
        record["rank"] = d if dense is not None else sum(block.shape[0] for block in blocks)
        if previous is None:
            gram, pending, solvers = None, (), {}
        elif previous._solution is not None:  # continue from the solved system
            gram, solvers = previous._solution["gram"], previous._solution["solvers"]
            pending = ()
            diagonal += previous.diagonal
        else:
            gram, solvers = previous.gram, previous.solvers
            pending, dense = previous.pending, _add(previous.dense, dense)
            diagonal += previous.diagonal
        pending = pending + tuple(blocks)
        if sum(block.shape[0] for block in pending) > d:  # more rows than a Gram: fold them
            dense = _add(dense, _gram_of(np.vstack(pending)))
            pending = ()
        model = cls(merged, gram=gram, pending=pending, dense=dense, diagonal=diagonal,
                    solvers=solvers, alpha=alpha, options=options, centered=centered,
                    single_target=single_target, dtype=dtype, record=record)
        model._check_finite(contributions)
        return model

    def _check_finite(self, contributions):
        values = (self.x_mean, self.y_mean, self.moment, self.target_ss)
        if all(math.isfinite(v.sum()) for v in values) and (
            self.diagonal.max(initial=0.0) <= _MAX_MAGNITUDE  # False for NaN, too
        ):
            return
        with np.errstate(over="ignore"):  # ranking huge values: inf is a fine rank
            site = max(contributions, key=_magnitude).site
        raise InvalidClientMessage(
            f"client {site!r}: merging its statistics overflows float64 (its rows hold values "
            "too large for ridge statistics). Nothing was applied.",
            site,
        )

    @property
    def coef(self):
        return self._solve()["coef"]

    @property
    def intercept(self):
        return self._solve()["intercept"]

    def _solve(self):
        if self._solution is not None:
            return self._solution
        with _one_blas_thread(self.n_features):
            return self._solve_now()

    def _solve_now(self):
        start = time.perf_counter()
        d, t = self.moment.shape
        rows = np.vstack(self.pending) if self.pending else np.zeros((0, d))
        update = _add(self.dense, _gram_of(rows) if rows.shape[0] else None)
        if self.gram is None:
            gram = update if update is not None else np.zeros((d, d))
        else:
            gram = self.gram if update is None else self.gram + update
        mode, refactor_every, tol = self.options
        alpha = np.broadcast_to(self.alpha, (t,))
        values = np.unique(alpha)
        coef = np.empty((t, d))
        solvers, routes = {}, set()
        single_old = len(self.solvers) == 1
        for value in values:
            value = float(value)
            targets = np.flatnonzero(alpha == value)
            old = self.solvers.get(value)
            if old is None and mode == "spectral" and single_old and len(values) == 1:
                old = next(iter(self.solvers.values()))  # alpha changed: Eq. 13-14
            route = _choose(mode, refactor_every, old, rows, self.dense, d, value)
            if route == "woodbury":
                solver = old.update(rows)
            elif route == "spectral":
                change = (value - old.alpha) * np.eye(d)
                solver = old.update(change if update is None else update + change, value)
            else:
                solver = _refactor(gram, value, "inverse" if mode == "spectral" else "factor")
            moment = self.moment[:, targets]
            if solver is not None:
                solution = solver.solve(moment)
                if route != "refactor" and tol is not None and (
                    _backward_error(gram, value, solution, moment) > tol
                ):
                    route = "refactor"
                    solver = _refactor(gram, value, solver.kind)
                    solution = None if solver is None else solver.solve(moment)
            if solver is None:  # singular system: solve_ridge warns and falls back
                coef[targets] = solve_ridge(gram, moment, value)
                route = "lstsq"
            else:
                coef[targets] = solution.T
                solvers[value] = solver
            routes.add(route)
        if self.centered:
            intercept = (self.y_mean - coef @ self.x_mean).astype(self.dtype)
            intercept = intercept[0] if self.single_target else intercept
        else:
            intercept = 0.0
        coef = coef.astype(self.dtype, copy=False)
        self._solution = {
            "coef": coef[0] if self.single_target else coef,
            "intercept": intercept,
            "gram": gram,
            "solvers": solvers,
        }
        self.record["update"] = "+".join(sorted(routes))
        self.record["solve_seconds"] = time.perf_counter() - start
        return self._solution


def _one_blas_thread(n_features):
    """A context in which BLAS runs on one thread, for a solve of this size.

    Entered only when BLAS has more than one thread: limiting costs ~10 us
    (threadpoolctl reads every library's info), checking ~1 us.
    """
    if n_features <= _ONE_THREAD_MAX_FEATURES:
        libraries = blas_libraries()
        if any(lib.get_num_threads() != 1 for lib in libraries.lib_controllers):
            return libraries.limit(limits=1)
    return contextlib.nullcontext()


def _magnitude(contribution):
    """How much a contribution adds to the Gram's diagonal, its own and through its mean."""
    return np.max(contribution.gram_diagonal, initial=0.0) + contribution.weight_sum * np.max(
        contribution.x_mean**2, initial=0.0
    )


def _add(a, b):
    if a is None:
        return b
    return a if b is None else a + b


# ------------------------------------------------------------------------ roles
class IncrementalClient(Client):
    """A site of :class:`IncrementalFederatedRidge`: it answers every round from its new rows.

    Rows it does not send yet (fewer than the task's ``min_samples``, or a
    round it sits out) stay with the site, in this object, and are sent with
    a later round's rows: one client object per site, kept across rounds.
    """

    protocol = "ridge.incremental"
    accepts_no_rows = True

    def __init__(self, estimator, *, key=None, policy=None, site=None):
        super().__init__(estimator, key=key, policy=policy, site=site)
        self._pending = ()  # (X, y, sample_weight) blocks not sent yet

    @property
    def n_pending(self):
        """Rows this site holds, not sent yet."""
        return sum(block[0].shape[0] for block in self._pending)

    def compute(self, task, X, y, sample_weight, rows):
        centered = task_field(task, "centered", bool)
        min_samples = task_field(task, "min_samples", int)
        hold = task_field(task, "hold", bool)
        if min_samples < 1:
            raise InvalidClientMessage("server: min_samples must be at least 1.", "server")
        if rows is not None:
            X, y = X[rows], y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        n_pending = self.n_pending + X.shape[0]
        if hold or n_pending < min_samples:
            if X.shape[0]:  # keep a copy: the caller may reuse its arrays
                block = (X.copy(), np.array(y), None if sample_weight is None else
                         np.array(sample_weight))
                self._pending = self._pending + (block,)
            return {"held": int(n_pending)}, {}
        if self._pending:
            X, y, sample_weight = _stack(self._pending + ((X, y, sample_weight),))
        payload = _site_statistics(X, y, sample_weight, centered)
        self._pending = ()
        return payload


def _stack(blocks):
    Xs, ys, weights = zip(*blocks)
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs)
    y = np.concatenate(ys)
    weight = None
    if any(w is not None for w in weights):
        weight = np.concatenate(
            [np.ones(x.shape[0]) if w is None else w for x, w in zip(Xs, weights)]
        )
    return X, y, weight


class _Roster:
    """The nodes that may lead a round: those seen so far, then this round's new ones,
    less the leaders that dropped out (a sequence view; nothing is copied)."""

    def __init__(self, known, new, excluded):
        self.known, self.new = known, new
        self.excluded = sorted(excluded)

    def __len__(self):
        return len(self.known) + len(self.new) - len(self.excluded)

    def index(self, i):
        for skipped in self.excluded:  # the i-th node that was not excluded
            if i >= skipped:
                i += 1
        return i

    def __getitem__(self, i):
        i = self.index(i)
        n = len(self.known)
        label = self.known[i] if i < n else self.new[i - n]
        return label.item() if isinstance(label, np.generic) else label


class IncrementalServer(Server):
    """Server of :class:`IncrementalFederatedRidge`: one round per ``receive``, forever.

    ``max_rounds`` bounds it (``fit`` runs one round, ``partial_fit`` one more
    with ``warm_start=True``). Each round it simulates the FedDelta election
    of the node that aggregates (recorded in ``leaders_``), collects every
    site's statistics, and merges them when at least ``min_clients`` sites
    contributed; otherwise it keeps them and merges them with the next round
    that reaches quorum (the model is the same as if the sites had waited).
    """

    protocol = "ridge.incremental"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        state = getattr(estimator, "_stream", None) if self.warm_start else None
        if state is None:
            state = _fresh_state(estimator, self.federation)
        else:  # the next round of the same federation: partial_fit == a long-lived server
            self.federation = state["federation"]
            self.round = len(state["leaders"])
        self._state = state

    def _round_rng(self):
        """This round's randomness: derived from the seed and the round index, so a
        failed round draws nothing twice and no generator is copied."""
        return _philox(self._state["seed"], self.round)

    def plan(self, sites):
        estimator, state = self.estimator, self._state
        if state["centered"] != bool(estimator.fit_intercept):
            raise ValueError("fit_intercept changed since the first round; call fit to restart.")
        rng = self._round_rng()
        known = _known_positions(state)
        site_keys = [label_key(site) for site in sites]
        new = [site for site, key in zip(sites, site_keys) if key not in known]
        new_position = {key: i for i, key in enumerate(k for k in site_keys if k not in known)}
        dropped, excluded, leader, converged = [], [], None, 0.0
        roster = _Roster(state["nodes"], new, excluded)
        while len(roster):
            election = elect_leader(roster, fanout=estimator.gossip_fanout,
                                    n_rounds=estimator.gossip_rounds, random_state=rng)
            if estimator.leader_dropout > 0 and rng.random() < estimator.leader_dropout:
                key = label_key(election.leader)
                position = known.get(key)
                if position is None:
                    position = len(state["nodes"]) + new_position[key]
                dropped.append(election.leader)
                roster = _Roster(state["nodes"], new, excluded + [position])
                excluded = roster.excluded
                continue
            leader, converged = election.leader, election.converged_fraction
            break
        self._round = {
            "leader": leader,
            "dropped": dropped,
            "converged": converged,
            "new": new,
            "options": (estimator.update, estimator.refactor_every, estimator.tol),
        }
        fields = {"centered": state["centered"], "min_samples": int(estimator.min_samples)}
        sitting_out = {label_key(site) for site in dropped}
        return {
            site: (dict(fields, hold=key in sitting_out), {})
            for site, key in zip(sites, site_keys)
        }

    def read_reply(self, site, frame):
        if set(frame.fields) == {"held"}:
            held = frame.fields["held"]
            if frame.arrays or not (type(held) is int and 0 <= held < 2**53):
                raise InvalidClientMessage(f"client {site!r}: malformed held-rows reply.", site)
            return held
        n_targets = frame.schema.get("n_targets")
        state = self._state
        if state["n_targets"] is not None and n_targets != state["n_targets"]:
            raise InvalidClientMessage(
                f"client {site!r}: has {n_targets} targets but earlier rounds had "
                f"{state['n_targets']}.",
                site,
            )
        if not (type(n_targets) is int and n_targets > 0):
            raise InvalidClientMessage(f"client {site!r}: the reply names no targets.", site)
        return _read_contribution(
            site, frame, n_features=frame.schema["n_features"], n_targets=n_targets,
            centered=self._state["centered"],
        )

    def cross_check(self, replies):
        return _factor_failures([reply for reply in replies.values()
                                 if isinstance(reply, _SiteReply) and reply.factor is not None])

    def apply(self, replies, ledger):
        estimator, state, plan = self.estimator, self._state, self._round
        sites = sorted_labels(replies)
        arrived = [replies[site] for site in sites if isinstance(replies[site], _SiteReply)]
        waiting = state["waiting"] + tuple(arrived)
        site_pending = dict(state["site_pending"])
        for site in sites:
            if isinstance(replies[site], int):
                site_pending[label_key(site)] = (site, replies[site])
            else:
                site_pending.pop(label_key(site), None)
        contributors = list({label_key(c.site): c.site for c in waiting}.values())
        n_targets = state["n_targets"]
        if arrived:
            n_targets = arrived[0].moment.shape[1]
        skipped = plan["leader"] is None or len(contributors) < estimator.min_clients
        record = {
            "leader": plan["leader"],
            "dropped_leaders": plan["dropped"],
            "contributors": [] if skipped else contributors,
            "skipped": skipped,
            "update": None,
            "rank": 0,
            "uplink_bytes": _round_bytes(ledger.uplink_bytes_per_client, self._ledger, "up",
                                         replies),
            "downlink_bytes": _round_bytes(ledger.downlink_bytes_per_client, self._ledger,
                                           "down", list(self._open.values())),
            "gossip_converged": plan["converged"],
            "merge_seconds": 0.0,
            "solve_seconds": 0.0,
        }
        model = state["model"]
        if not skipped:
            start = time.perf_counter()
            alpha = estimator._checked_alpha(n_targets)
            single = waiting[-1].single_target if model is None else model.single_target
            model = _Model.after_round(
                model, waiting, alpha=alpha, options=plan["options"],
                centered=state["centered"], single_target=single,
                dtype=self._dtype_of_round(), record=record,
            )
            record["merge_seconds"] = time.perf_counter() - start
            waiting = ()
        d = self.schema.n_features
        ledger.n_parameters = estimator._n_parameters(d, n_targets or 1)
        new_state = dict(
            state,
            model=model,
            waiting=waiting,
            site_pending=site_pending,
            n_targets=n_targets,
            leaders=state["leaders"] + [plan["leader"]],
            skipped=state["skipped"] + ([len(state["leaders"])] if skipped else []),
            history=state["history"] + [record],
        )
        if plan["new"]:
            new_state["node_keys"] = _add_positions(state, plan["new"])
            new_state["nodes"] = _append_labels(state["nodes"], plan["new"])
        # commit: nothing above touched the estimator
        self._state = new_state
        estimator._commit(new_state, self.schema, ledger)

    def _dtype_of_round(self):
        return self.round_dtype.type


_THREAD = threading.local()


def _philox(key, counter):
    """``Generator(Philox(key=key, counter=counter))``, reusing this thread's generator.

    Building a Philox bit generator costs more than all of a small round's
    draws; setting the key and counter of one kept per thread gives the
    same stream (a fresh generator's buffers are empty, as set here).
    """
    if not (0 <= key < 2**64 and 0 <= counter < 2**64):
        return np.random.Generator(np.random.Philox(key=key, counter=counter))
    kept = getattr(_THREAD, "philox", None)
    if kept is None:
        kept = _THREAD.philox = np.random.Generator(np.random.Philox())
    kept.bit_generator.state = {
        "bit_generator": "Philox",
        "state": {"counter": np.array([counter, 0, 0, 0], dtype=np.uint64),
                  "key": np.array([key, 0], dtype=np.uint64)},
        "buffer": np.zeros(4, dtype=np.uint64), "buffer_pos": 4,
        "has_uint32": 0, "uinteger": 0,
    }
    return kept


def _round_bytes(totals, previous_ledger, direction, sites):
    """Bytes this round moved in one direction (from the ledger's per-site totals)."""
    before = {} if previous_ledger is None else (
        previous_ledger.uplink_bytes_per_client if direction == "up"
        else previous_ledger.downlink_bytes_per_client
    )
    return int(sum(totals.get(site, 0) - before.get(site, 0) for site in sites))


def _append_labels(labels, new):
    """``labels`` (an array) followed by ``new``, keeping each label's type."""
    new = label_array(new)
    if labels.dtype.kind == new.dtype.kind and labels.dtype.kind in "iub":
        return np.concatenate([labels, new])
    if labels.dtype.kind == new.dtype.kind == "U":
        return np.concatenate([labels, new])
    if labels.size == 0:
        return new
    both = np.empty(labels.size + new.size, dtype=object)
    both[: labels.size] = labels.astype(object)
    both[labels.size :] = new.astype(object)
    return both


class _KnownPositions:
    """The node positions a state knows: its index's entries below its node count."""

    def __init__(self, index, n_nodes):
        self.index, self.n_nodes = index, n_nodes

    def get(self, key):
        position = self.index.get(key)
        return position if position is not None and position < self.n_nodes else None

    def __contains__(self, key):
        return self.get(key) is not None


def _known_positions(state):
    return _KnownPositions(state["node_keys"], len(state["nodes"]))


def _add_positions(state, new_sites):
    """The index of ``state``'s nodes followed by ``new_sites``.

    States share one append-only index (label key -> position), each reading
    only the positions below its own node count, so a round that adds sites
    costs O(new sites), not a copy of every node seen. The index is copied
    only when another state already went on from this one (a copy of the
    estimator, or a round that failed after adding).
    """
    index, n_nodes = state["node_keys"], len(state["nodes"])
    if len(index) != n_nodes:
        index = {key: position for key, position in index.items() if position < n_nodes}
    for site in new_sites:
        index[label_key(site)] = len(index)
    return index


def _returned_unchanged(estimator, X, y):
    """Whether ``validate_data(estimator, X, y, reset=False)`` returns them as is."""
    return (
        type(X) is np.ndarray and type(y) is np.ndarray
        and X.dtype.type in (np.float64, np.float32) and y.dtype.kind == "f"
        and X.ndim == 2 and (y.ndim == 1 or (y.ndim == 2 and y.shape[1] >= 1))
        and 1 <= X.shape[0] == y.shape[0]
        and X.shape[1] == getattr(estimator, "n_features_in_", None)
        and not hasattr(estimator, "feature_names_in_")  # validation would warn
        and math.isfinite(X.sum()) and math.isfinite(y.sum())  # else: its NaN errors
    )


def _fresh_state(estimator, federation):
    """The state of a new stream (``fit``, or a server made without ``warm_start``)."""
    return {
        "federation": federation,
        "model": None,
        "waiting": (),
        "site_pending": {},
        "nodes": np.empty(0, dtype=np.int64),
        "node_keys": {},
        "seed": estimator._draw_seed(),
        "centered": bool(estimator.fit_intercept),
        "n_targets": None,
        "leaders": [],
        "skipped": [],
        "history": [],
    }


# ---------------------------------------------------------------------- estimator
class IncrementalFederatedRidge(BaseFederatedRidge):
    """Federated ridge built round by round (FedDelta) with low-rank solver updates.

    A streaming protocol: every call to :meth:`partial_fit` is one round
    (``make_server`` runs as many as it is given). Each site with enough new
    rows sends a compact message (its means, centered moment and either the
    ``R`` of a QR of its centered rows, when it has fewer rows than features,
    or its packed Gram); if at least ``min_clients`` sites contributed, the
    server merges them into the exact statistics of all rows so far. A leader
    among the known nodes is elected each round by a simulated push-pull
    gossip of bids (FedDelta's rotating aggregator, recorded in ``leaders_``).
    After every round ``coef_`` and ``intercept_`` equal
    :class:`sklearn.linear_model.Ridge` with that round's ``alpha`` fitted on
    all rows aggregated so far; the ridge system is solved when the model is
    first used after the round, by a low-rank update when that is cheaper.

    Read more in the :ref:`User Guide <incremental_ridge>`.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Non-negative L2 penalty. May be changed between rounds with
        ``set_params``; the next round then solves with the new value exactly.
    fit_intercept : bool, default=True
        Whether to fit an (unpenalized) intercept.
    min_clients : int, default=1
        Quorum: in a round with fewer contributing sites the server keeps
        their statistics and merges them in the next round that reaches quorum.
    min_samples : int, default=1
        A site with fewer pending rows than this holds them for later.
    update : {"auto", "woodbury", "spectral", "refactor"}, default="auto"
        How the solver follows ``G``. ``"woodbury"``: keep a Cholesky factor
        of ``P`` at some earlier round plus the low-rank update since then
        (SMW on the stacked client factors, ``O(d^2 m)`` for an update of rank
        ``m``). ``"spectral"``: the paper's route, an explicit ``P^{-1}``
        updated through an eigendecomposition of the update matrix
        ``U = A + delta_lambda I``. ``"refactor"``: Cholesky of ``G + alpha I``
        at every solve. ``"auto"``: woodbury when the update's rank is small
        against ``d`` (see the User Guide), otherwise refactor.
    refactor_every : int or None, default=None
        Rebuild the woodbury/spectral state from the exact statistics every
        this many solves. ``None``: only when the residual check fails (or,
        for woodbury, when the accumulated rank reaches ``d / 2``).
    tol : float or None, default=1e-11
        After a low-rank update, the normwise backward error of the solution
        against the exact statistics is checked; above ``tol`` the state is
        rebuilt. ``None`` disables the check (to measure drift).
    gossip_fanout : int, default=3
        Peers each node contacts per gossip round in the leader election.
    gossip_rounds : int, default=3
        Gossip rounds per election.
    leader_dropout : float, default=0.0
        Probability that an elected leader drops out of the round; another
        is then elected among the remaining nodes, and the dropped node sits
        the round out, holding its rows for a later round.
    random_state : int, RandomState instance or None, default=None
        Seeds the elections and leader dropouts (each round's draws are
        derived from this seed and the round's index).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients after the last aggregated round.
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept; ``0.0`` when ``fit_intercept=False``.
    n_features_in_ : int
        Number of features.
    feature_names_in_ : ndarray of shape (n_features,)
        Feature names, when ``X`` has string column names.
    clients_ : ndarray of shape (n_clients,)
        Labels of all nodes seen so far (the candidates for leader).
    n_clients_ : int
        Number of nodes.
    n_rounds_ : int
        Rounds run, skipped ones included.
    leaders_ : list
        Elected leader of each round.
    skipped_rounds_ : list of int
        Indices (0-based) of the rounds skipped for lack of quorum.
    n_samples_seen_ : int
        Rows aggregated into the model.
    n_samples_pending_ : int
        Rows not in the model yet: held by sites (``min_samples``, leader
        dropout) or sent in rounds that missed the quorum.
    communication_ : CommunicationLedger
        Bytes of every task and reply, from the messages' wire sizes.
    round_history_ : list of dict
        One dict per round: ``leader``, ``dropped_leaders``, ``contributors``
        (sites whose statistics were merged), ``skipped``, ``rank`` (rows of
        the round's Gram update), ``uplink_bytes``, ``downlink_bytes``,
        ``gossip_converged`` (fraction of nodes that heard the winning bid),
        ``merge_seconds``, and, once the round's model has been used,
        ``update`` (the solver route) and ``solve_seconds``. A round whose
        model was never used (another round came first) keeps ``update=None``.

    See Also
    --------
    FederatedRidge : One-shot fit from the same statistics.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn_fed import IncrementalFederatedRidge
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(90, 4)), rng.normal(size=90)
    >>> model = IncrementalFederatedRidge(alpha=0.5, random_state=0)
    >>> for batch in np.split(np.arange(90), 3):
    ...     _ = model.partial_fit(X[batch], y[batch], clients=batch % 5)
    >>> bool(np.allclose(model.coef_, Ridge(alpha=0.5).fit(X, y).coef_, rtol=1e-10))
    True
    >>> model.n_rounds_, len(model.leaders_), model.n_samples_seen_
    (3, 3, 90)

    The same rounds deployed: three sites, each with its own client object
    kept across rounds, and a server that runs one round per ``receive``:

    >>> estimator = IncrementalFederatedRidge(alpha=0.5, random_state=0)
    >>> server = estimator.make_server()
    >>> sites = {s: estimator.make_client(site=s) for s in ("a", "b", "c")}
    >>> for batch in np.split(np.arange(90), 3):       # new rows arrive at every site
    ...     tasks = server.next_tasks(list(sites))     # {site: bytes}
    ...     replies = {s: sites[s].respond(tasks[s], X[batch][i::3], y[batch][i::3])
    ...                for i, s in enumerate(tasks)}
    ...     server.receive(replies)
    >>> bool(np.allclose(estimator.coef_, model.coef_, rtol=1e-10))
    True
    """

    _parameter_constraints: dict = {
        **BaseFederatedRidge._parameter_constraints,
        "min_clients": [Interval(Integral, 1, None, closed="left")],
        "min_samples": [Interval(Integral, 1, None, closed="left")],
        "update": [StrOptions({"auto", "woodbury", "spectral", "refactor"})],
        "refactor_every": [Interval(Integral, 1, None, closed="left"), None],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "gossip_fanout": [Interval(Integral, 1, None, closed="left")],
        "gossip_rounds": [Interval(Integral, 0, None, closed="left")],
        "leader_dropout": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    _server_role = IncrementalServer
    _client_role = IncrementalClient
    _protocol_rounds_in_fit = 1  # a streaming protocol: fit is one round

    @property
    def _without_clients(self):  # what fit does without clients (MissingClientsWarning)
        if self.min_clients > 1:
            return f"one node can never reach the quorum min_clients={self.min_clients}"
        if self.min_samples > 1 or self.leader_dropout > 0:
            return "all rows sit on one node, which holds or sends them all at once"
        return None  # every round aggregates every row: the same model for any split

    _dask_rows = "stream"

    def __init__(
        self,
        alpha=1.0,
        *,
        fit_intercept=True,
        min_clients=1,
        min_samples=1,
        update="auto",
        refactor_every=None,
        tol=1e-11,
        gossip_fanout=3,
        gossip_rounds=3,
        leader_dropout=0.0,
        random_state=None,
    ):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.min_clients = min_clients
        self.min_samples = min_samples
        self.update = update
        self.refactor_every = refactor_every
        self.tol = tol
        self.gossip_fanout = gossip_fanout
        self.gossip_rounds = gossip_rounds
        self.leader_dropout = leader_dropout
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Forget everything, then run one round on the given rows.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights.
        clients : array-like of shape (n_samples,), default=None
            Client label of each row. ``None``: one client.

        Returns
        -------
        self : IncrementalFederatedRidge
        """
        return self._fit(X, y, sample_weight, clients)

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Run one aggregation round with these new rows.

        A call that raises leaves the estimator unchanged.

        Parameters
        ----------
        X, y, sample_weight, clients
            As in :meth:`fit`; ``clients`` may name new or known clients, and
            known clients may be absent (those holding rows still take part).

        Returns
        -------
        self : IncrementalFederatedRidge
        """
        return self._fit(X, y, sample_weight, clients, partial=True)

    def _fitted_state(self):
        return getattr(self, "_stream", None)

    def _check_more_rows(self, X, y):
        if self._stream["n_targets"] is not None:
            self._check_seen(y, (self._stream["n_targets"], self._stream["centered"]))

    def _run_sites(self, X, y, sample_weight, labels, rows, *, warm_start=False, clients=None):
        if not warm_start:
            self._sites = {}
        self._run_round(X, y, sample_weight, labels, rows, warm_start=warm_start)

    def _validate_X_y(self, X, y, *, reset):
        # A round is small: scikit-learn's validation would cost about a third
        # of it. A batch that validation returns unchanged (finite float
        # ndarrays of the fitted width, without feature names) is checked
        # here; any other batch takes the full path and its usual errors.
        if not reset and _returned_unchanged(self, X, y):
            return X, y
        return super()._validate_X_y(X, y, reset=reset)

    def _run_round(self, X, y, sample_weight, labels, rows, *, warm_start):
        """One round of the protocol in process: each label's simulated site answers."""
        names = getattr(self, "feature_names_in_", None)
        names = None if names is None else [str(name) for name in names]
        labels = [label.item() if isinstance(label, np.generic) else label for label in labels]
        rows = list(rows)
        clients = {label: self.make_client(site=label) for label in labels}
        held = getattr(self, "_sites", {})
        if held:  # sites holding rows take part, with no new rows if they have none
            position = {label_key(label): label for label in labels}
            for key, client in held.items():
                label = position.get(key)
                if label is None:
                    label = client.site
                    labels.append(label)
                    rows.append(slice(0, 0))
                # a copy: the stored client stays as it was if the round fails
                clients[label] = copy.copy(client)
        server = self.make_server(feature_names=names, warm_start=warm_start, max_rounds=1)
        # A streaming round (at most d new rows) is small BLAS work too: the
        # sites' QRs and the merge's products and folds run on one thread.
        n_rows, n_features = getattr(X, "shape", (1, 0))  # (Dask partitions: no shape)
        with _one_blas_thread(n_features) if n_rows <= n_features else contextlib.nullcontext():
            run_simulation(server, clients, X, y, sample_weight, labels, rows, names)
        self._sites = {
            label_key(label): client for label, client in clients.items() if client._pending
        }
        return self

    def _draw_seed(self):
        """The seed of a new stream: from ``random_state``, or from OS entropy."""
        if self.random_state is None:
            return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
        rng = self.random_state
        if isinstance(rng, Integral):
            return int(rng)
        from sklearn.utils import check_random_state

        return int(check_random_state(rng).randint(np.iinfo(np.int32).max))

    def _commit(self, state, schema, ledger):
        """Set the fitted attributes from the server's state after a round."""
        self._stream = state
        self.communication_ = ledger
        self.clients_ = state["nodes"]
        self.n_clients_ = len(state["nodes"])
        self.n_rounds_ = len(state["leaders"])
        self.leaders_ = state["leaders"]
        self.skipped_rounds_ = state["skipped"]
        self.round_history_ = state["history"]
        model = state["model"]
        self.n_samples_seen_ = 0 if model is None else int(model.n_samples)
        self.n_samples_pending_ = int(
            sum(n for _, n in state["site_pending"].values())
            + sum(c.n_samples for c in state["waiting"])
        )
        self._set_schema(schema, schema.n_features)

    # The model of the latest round, solved on first use.
    @property
    def coef_(self):
        model = self._fitted_model()
        return model.coef

    @property
    def intercept_(self):
        return self._fitted_model().intercept

    def _fitted_model(self):
        stream = self.__dict__.get("_stream")
        model = None if stream is None else stream["model"]
        if model is None:
            raise AttributeError("IncrementalFederatedRidge has no model yet; coef_ is set "
                                 "by the first round that reaches quorum.")
        return model

    def __sklearn_is_fitted__(self):
        # Rounds may run (and be skipped for lack of quorum) before any model exists.
        stream = self.__dict__.get("_stream")
        return stream is not None and stream["model"] is not None
