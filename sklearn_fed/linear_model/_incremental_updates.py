"""The solver states of IncrementalFederatedRidge: low-rank updates of a ridge system.

The system after a round is ``P = G + alpha I`` with the round's update to
the Gram as stacked rows ``V`` (``G_new = G + V^T V``). A solver state
follows ``P`` from one solve to the next: :class:`_FactorState` keeps a
Cholesky factor of an earlier ``P`` and updates the solution by
Sherman-Morrison-Woodbury on ``V``; :class:`_InverseState` keeps ``P^{-1}``
and updates it by the paper's spectral route (FedDelta, Eq. 13-17).
:func:`_refactor` rebuilds either from the exact statistics,
:func:`_backward_error` tells when to, and :func:`_choose` picks the route
of a solve. The exact statistics and the lazy solve that uses these states
are in :mod:`~sklearn_fed.linear_model._incremental_model`.
"""

import numpy as np
from scipy import linalg

# Woodbury is chosen when the pending update has at most d / _AUTO_RANK_RATIO
# rows (measured crossover, see benchmarks/bench_incremental.py).
_AUTO_RANK_RATIO = 8


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

