"""The model of IncrementalFederatedRidge: exact statistics of all rows, solved on first use.

Each round the server merges every site's validated
:class:`~sklearn_fed.statistics.ClientStatistics` (its rows' Gram as rows
``R_x`` of its factor, or its Gram) into the exact statistics of all rows so
far (:func:`_merge_round`, the Chan update) and keeps the round's update to
the Gram as stacked rows ``V`` (``G_new = G + V^T V``) in a new
:class:`_Model`. The ridge system ``P = G + alpha I`` is solved when the
model is first used after a round, by a low-rank update of a solver state
when that is cheaper (:func:`_choose`), else by a Cholesky factorization of
the exact statistics (:func:`_refactor`). :class:`_FactorState` keeps a
Cholesky factor of an earlier ``P`` and updates the solution by
Sherman-Morrison-Woodbury on ``V``; :class:`_InverseState` keeps ``P^{-1}``
and updates it by the paper's spectral route (FedDelta, Eq. 13-17).
"""

import contextlib
import math
import time

import numpy as np
from scipy import linalg

from ..protocol._fields import reply_error
from ..protocol._threads import blas_libraries
from ..statistics._kernels import drop_direction as _drop_direction
from ._base import ridge_attributes
from ._solver import solve_ridge

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
# A merged Gram whose diagonal exceeds this could overflow in the solve (a
# backstop: the per-message caps already keep any real stream far below it).
_MAX_MAGNITUDE = np.finfo(np.float64).max / 64
# Woodbury is chosen when the pending update has at most d / _AUTO_RANK_RATIO
# rows (measured crossover, see benchmarks/bench_incremental.py).
_AUTO_RANK_RATIO = 8


# ------------------------------------------------------------------------ merge
def _merge_round(previous, contributions, centered):
    """Exact statistics after the round, and its update of the Gram as rows.

    ``previous`` is the last :class:`_Model` (or None), ``contributions`` the
    round's :class:`~sklearn_fed.statistics.ClientStatistics`. Returns the merged
    ``(n_samples, weight_sum, x_mean, y_mean, moment, target_ss)``, the
    update as a list of row ``blocks`` (the sites' rows ``R_x``, stacked, and
    the Chan mean-shift rows, reduced by one, see the User Guide; stacked
    only when solved), the sum ``dense`` of any full Grams, so that
    ``G_new = G + sum(B^T B for B in blocks) + dense``, and the diagonal of
    that update.
    """
    groups = ([previous] if previous is not None else []) + list(contributions)
    d, t = contributions[0].x_mean.shape[0], contributions[0].n_targets
    weights = np.array([g.weight_sum for g in groups])
    total = float(weights.sum())
    factors = [c.factor for c in contributions if c.factor is not None]
    grams = [c for c in contributions if c.factor is None]  # (a factor's gram is derived)
    blocks = []
    if factors:  # the round's factors stacked: a few products, whatever the number of sites
        stacked = factors[0] if len(factors) == 1 else np.concatenate(factors)
        rows = stacked[:, :d]
        if rows.shape[0]:
            blocks.append(rows)
        moment = rows.T @ stacked[:, d:]
        squares = np.einsum("ij,ij->j", stacked, stacked)  # the diagonal of R^T R
        diagonal, target_ss = squares[:d], squares[d:]
    else:
        moment, target_ss, diagonal = np.zeros((d, t)), np.zeros(t), np.zeros(d)
    for c in grams:
        moment += c.moment
        target_ss += c.target_ss
        diagonal += np.diag(c.gram)
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
        moment += mx.T @ my
        target_ss += np.einsum("ij,ij->j", my, my)
        shift_rows = _drop_direction(mx, root)
        if shift_rows.shape[0]:
            blocks.append(shift_rows)
            diagonal += np.einsum("ij,ij->j", shift_rows, shift_rows)
    dense = None
    if grams:
        dense = grams[0].gram.copy()
        for c in grams[1:]:
            dense += c.gram
    n_samples = sum(c.n_samples for c in contributions)
    if previous is not None:
        moment = previous.moment + moment
        target_ss = previous.target_ss + target_ss
        n_samples += previous.n_samples
    merged = (n_samples, total, x_ref + shift_x, y_ref + shift_y, moment,
              np.maximum(target_ss, 0.0))
    return merged, blocks, dense, diagonal


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
        """The model after merging ``contributions``, the round's ``(site, statistics)``."""
        merged, blocks, dense, diagonal = _merge_round(
            previous, [stats for _, stats in contributions], centered)
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
            rows = np.vstack(pending)
            dense = _add(dense, rows.T @ rows)  # (numpy runs BLAS syrk for A.T @ A)
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
            site = max(contributions, key=lambda contribution: _magnitude(contribution[1]))[0]
        reply_error(site, "merging its statistics overflows float64 (its rows hold values "
                          "too large for ridge statistics). Nothing was applied.")

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
        update = _add(self.dense, rows.T @ rows if rows.shape[0] else None)
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
        coef, intercept = ridge_attributes(self, coef, self.dtype, self.centered)
        self._solution = {
            "coef": coef,
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


def _magnitude(stats):
    """How much a site's statistics add to the Gram's diagonal, their own and through
    their mean."""
    if stats.factor is None:
        diagonal = np.diag(stats.gram)
    else:
        rows = stats.factor[:, : stats.n_features]
        diagonal = np.einsum("ij,ij->j", rows, rows)
    return np.max(diagonal, initial=0.0) + stats.weight_sum * np.max(stats.x_mean**2, initial=0.0)


def _add(a, b):
    if a is None:
        return b
    return a if b is None else a + b


# ---------------------------------------------------------------- solver states
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

