"""IncrementalFederatedRidge: FedDelta rounds with low-rank updates of the solver.

One call to ``partial_fit`` is one aggregation round. The exact merged
statistics (Chan update, see :mod:`sklearn_fed.statistics`) stay the source of
truth; the solver state for ``P = G + alpha I`` is updated cheaply when the
round's update has low rank, and rebuilt from the exact statistics when that is
cheaper or when a residual check against them fails.
"""

import copy
import hashlib
import struct
import time
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy import linalg
from scipy.linalg.blas import dsyrk
from sklearn.utils import check_random_state

from .._clients import label_array
from .._compat import Interval, StrOptions, _fit_context
from ..simulation import elect_leader
from ..statistics import ClientStatistics
from ._base import BaseFederatedRidge, solve_ridge

__all__ = ["IncrementalFederatedRidge"]

# Wire sizes, matching the layout of ClientStatistics.to_bytes (header + checksum).
_HEADER_BYTES = 36
_CHECKSUM_BYTES = 32
_FLOAT = 8


# --------------------------------------------------------------------- messages
class _Contribution:
    """One client's message for one round.

    ``factor`` (p x d, upper trapezoidal R of a QR of the client's
    sqrt-weighted centered rows, so ``R^T R`` is its centered Gram) is sent
    when the client has fewer rows than features; otherwise the packed Gram.
    """

    __slots__ = ("n_samples", "weight_sum", "x_mean", "y_mean", "factor", "gram", "moment",
                 "target_ss")

    def __init__(self, n_samples, weight_sum, x_mean, y_mean, factor, gram, moment, target_ss):
        self.n_samples = n_samples
        self.weight_sum = weight_sum
        self.x_mean = x_mean
        self.y_mean = y_mean
        self.factor = factor
        self.gram = gram
        self.moment = moment
        self.target_ss = target_ss

    def to_bytes(self):
        """Wire form: header, float64 payload (the upper trapezoid of ``factor``
        or the packed ``gram``), SHA-256; ``len(to_bytes()) == nbytes``."""
        d, t = self.moment.shape
        p = -1 if self.factor is None else self.factor.shape[0]
        header = struct.pack("<8sHhIIQd", b"SKFEDRND", 1, p, d, t, self.n_samples,
                             self.weight_sum)
        if self.factor is not None:
            matrix = self.factor[np.triu_indices(p, m=d)]
        else:
            matrix = self.gram[np.triu_indices(d)]
        payload = np.concatenate(
            [self.x_mean, self.y_mean, matrix, self.moment.ravel(), self.target_ss]
        ).astype("<f8")
        body = header + payload.tobytes()
        return body + hashlib.sha256(body).digest()

    @property
    def nbytes(self):
        d, t = self.moment.shape
        if self.factor is not None:
            p = self.factor.shape[0]
            matrix = p * d - p * (p - 1) // 2  # upper trapezoid
        else:
            matrix = d * (d + 1) // 2  # packed triangle
        return _HEADER_BYTES + _FLOAT * (d + t + matrix + d * t + t) + _CHECKSUM_BYTES


def _drop_direction(M, s):
    """Rows with the Gram of ``M`` minus one, given ``s @ M == 0``.

    A Householder reflection maps ``s`` to a multiple of ``e_1``; the reflected
    first row is ``(s/|s|) @ M = 0``, so it is dropped. Keeps the rank count
    of a centered block honest (``r`` centered rows have rank ``r - 1``).
    """
    norm = np.linalg.norm(s)
    if M.shape[0] <= 1 or norm == 0:
        return M[:0]
    v = s / norm
    v[0] += 1.0 if v[0] >= 0 else -1.0
    reflected = M - np.outer(v, (v @ M) * (2.0 / (v @ v)))
    return reflected[1:]


def _client_contribution(X, y, sw, centered):
    """What a client sends for its pending rows (X dense or sparse, y 2-D)."""
    n, d = X.shape
    if n - centered >= d:  # as many rows as features: the Gram is as small as R
        stats = ClientStatistics.from_data(X, y, sw, centered=centered)
        return _Contribution(n, stats.weight_sum, stats.x_mean, stats.y_mean, None,
                             stats.gram, stats.moment, stats.target_ss)
    X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones(n) if sw is None else sw
    weight_sum = float(w.sum())
    denom = weight_sum if weight_sum > 0 else 1.0
    x_mean = (w @ X) / denom
    y_mean = (w @ y) / denom
    root = np.sqrt(w)[:, None]
    if centered:
        Xs = (X - x_mean) * root
        ys = (y - y_mean) * root
        rows = _drop_direction(Xs, root[:, 0])
    else:
        Xs, ys = X * root, y * root
        rows = Xs
    moment = Xs.T @ ys
    target_ss = np.einsum("ij,ij->j", ys, ys)
    if rows.shape[0]:
        factor = linalg.qr(rows, mode="r", check_finite=False)[0]
        factor = factor[: min(factor.shape[0], d)]
    else:
        factor = np.zeros((0, d))
    return _Contribution(n, weight_sum, x_mean, y_mean, factor, None, moment, target_ss)


def _gram_of(rows):
    """``rows^T rows``; BLAS syrk (half the flops of a product) for many rows."""
    if rows.shape[0] < 64:
        return rows.T @ rows
    upper = dsyrk(1.0, np.asfortranarray(rows.T), trans=0, lower=0)
    return np.triu(upper) + np.triu(upper, 1).T


def _aggregate_round(aggregate, contributions, centered, single_target):
    """Exact statistics after the round, and the round's update of ``G``.

    Returns ``(new_aggregate, rows, dense)``: ``G_new = G + rows^T rows +
    dense`` where ``rows`` stacks the clients' factors and the (reduced)
    mean-shift rows of the Chan merge, and ``dense`` sums any full Grams.
    """
    groups = ([aggregate] if aggregate is not None else []) + list(contributions)
    d = contributions[0].moment.shape[0]
    weights = np.array([g.weight_sum for g in groups])
    total = float(weights.sum())
    factors = [c.factor for c in contributions if c.factor is not None and c.factor.shape[0]]
    grams = [c.gram for c in contributions if c.gram is not None]
    moment = sum(c.moment for c in contributions)
    target_ss = sum(c.target_ss for c in contributions)
    x_ref, y_ref = groups[0].x_mean, groups[0].y_mean
    dx = np.array([g.x_mean - x_ref for g in groups])
    dy = np.array([g.y_mean - y_ref for g in groups])
    if total > 0:
        shift_x, shift_y = weights @ dx / total, weights @ dy / total
    else:
        shift_x, shift_y = np.zeros(d), np.zeros(dy.shape[1])
    x_mean, y_mean = x_ref + shift_x, y_ref + shift_y
    if centered:
        # Chan: every group's mean offset from the pooled mean adds w dx dx^T.
        root = np.sqrt(weights)
        mx = (dx - shift_x) * root[:, None]
        my = (dy - shift_y) * root[:, None]
        moment = moment + mx.T @ my
        target_ss = target_ss + np.einsum("ij,ij->j", my, my)
        factors.append(_drop_direction(mx, root))
    rows = np.vstack(factors) if factors else np.zeros((0, d))
    dense = sum(grams) if grams else None
    if aggregate is not None:
        gram = aggregate.gram + _gram_of(rows)
        moment = aggregate.moment + moment
        target_ss = aggregate.target_ss + target_ss
        n = aggregate.n_samples
    else:
        gram = _gram_of(rows)
        n = 0
    if dense is not None:
        gram = gram + dense
    new = ClientStatistics(
        n + sum(c.n_samples for c in contributions), total, x_mean, y_mean, gram, moment,
        np.maximum(target_ss, 0.0), centered=centered, single_target=single_target,
    )
    return new, rows, dense


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
        new = copy.copy(self)
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
    system = gram + alpha * np.eye(d)
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


def _copy_rng(rng):
    new = np.random.RandomState()
    new.set_state(rng.get_state())
    return new


# ---------------------------------------------------------------------- estimator
class IncrementalFederatedRidge(BaseFederatedRidge):
    """Federated ridge built round by round (FedDelta) with low-rank solver updates.

    Each call to :meth:`partial_fit` is one aggregation round. A leader is
    elected among the known nodes by a simulated push-pull gossip of bids;
    each client with enough pending rows sends a compact message (its means,
    centered moment and either the ``R`` of a QR of its centered rows, when it
    has fewer rows than features, or its packed Gram); if at least
    ``min_clients`` clients contribute, the leader merges them into the exact
    statistics, updates the regularized system ``P = G + alpha I`` and
    broadcasts the round's update so that every node can lead the next round.
    After every round ``coef_`` and ``intercept_`` equal
    :class:`sklearn.linear_model.Ridge` with the current ``alpha`` fitted on all
    rows aggregated so far.

    Read more in the :ref:`User Guide <incremental_ridge>`.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Non-negative L2 penalty. May be changed between rounds with
        ``set_params``; the next round then solves with the new value exactly.
    fit_intercept : bool, default=True
        Whether to fit an (unpenalized) intercept.
    min_clients : int, default=1
        Quorum: a round with fewer contributing clients is skipped and every
        pending row is kept for the next round that reaches quorum.
    min_samples : int, default=1
        A client with fewer pending rows than this holds them for later.
    update : {"auto", "woodbury", "spectral", "refactor"}, default="auto"
        How the solver follows ``G``. ``"woodbury"``: keep a Cholesky factor
        of ``P`` at some earlier round plus the low-rank update since then
        (SMW on the stacked client factors, ``O(d^2 m)`` for an update of rank
        ``m``). ``"spectral"``: the paper's route, an explicit ``P^{-1}``
        updated through an eigendecomposition of the round's update matrix
        ``U = A + delta_lambda I``. ``"refactor"``: Cholesky of ``G + alpha I``
        every round. ``"auto"``: woodbury when the round's rank is small
        against ``d`` (see the User Guide), otherwise refactor.
    refactor_every : int or None, default=None
        Rebuild the woodbury/spectral state from the exact statistics every
        this many rounds. ``None``: only when the residual check fails (or,
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
        is then elected among the remaining nodes, and the dropped node's
        pending rows wait for a later round.
    random_state : int, RandomState instance or None, default=None
        Bids, gossip contacts, tie-breaks and leader dropouts.

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
        Rows held by clients, waiting for a round (``min_samples``, quorum or
        leader dropout).
    communication_ : CommunicationLedger
        Total uplink and downlink bytes, from the messages' wire sizes.
    round_history_ : list of dict
        One dict per round: ``leader``, ``dropped_leaders``, ``contributors``,
        ``skipped``, ``update`` (route used), ``rank`` (rows of the round's
        update factor), ``uplink_bytes``, ``broadcast_bytes``,
        ``gossip_converged`` (fraction of nodes that heard the winning bid),
        ``leader_seconds`` (time the leader spent merging and solving).

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

    @property
    def _without_clients(self):  # what fit does without clients (MissingClientsWarning)
        if self.min_clients > 1:
            return f"one node can never reach the quorum min_clients={self.min_clients}"
        if self.min_samples > 1 or self.leader_dropout > 0:
            return "all rows sit on one node, which holds or sends them all at once"
        return None  # every round aggregates every row: the same model for any split

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
        X, y, sample_weight, labels, rows = self._validate_rows(
            X, y, sample_weight, clients, reset=True
        )
        state = self._initial_state()
        return self._round(state, X, y, sample_weight, labels, rows)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Run one aggregation round with these new rows.

        A call that raises leaves the estimator unchanged.

        Parameters
        ----------
        X, y, sample_weight, clients
            As in :meth:`fit`; ``clients`` may name new or known clients, and
            known clients may be absent.

        Returns
        -------
        self : IncrementalFederatedRidge
        """
        state = getattr(self, "_state", None)
        first_call = state is None
        X, y, sample_weight, labels, rows = self._validate_more_rows(
            X, y, sample_weight, clients,
            seen=None if first_call else (state["n_targets"], state["centered"]),
        )
        if first_call:
            state = self._initial_state()
        return self._round(state, X, y, sample_weight, labels, rows)

    def __sklearn_is_fitted__(self):
        # Rounds may run (and be skipped for lack of quorum) before any model exists.
        return hasattr(self, "coef_")

    # ------------------------------------------------------------------ rounds
    def _initial_state(self):
        return {
            "aggregate": None,
            "solvers": {},
            "pending": {},
            "nodes": [],
            "rng": check_random_state(self.random_state),
            "ledger": None,
            "leaders": [],
            "skipped": [],
            "history": [],
            "n_targets": None,
            "centered": self.fit_intercept,
            "single_target": None,
        }

    def _round(self, previous, X, y, sample_weight, labels, rows):
        """One round, computed on copies; the state is assigned only at the end."""
        y2 = y.reshape(y.shape[0], -1)
        n_targets = y2.shape[1]
        alpha = self._checked_alpha(n_targets)
        d = X.shape[1]
        state = dict(previous)
        state["rng"] = _copy_rng(previous["rng"])
        state["pending"] = {k: list(v) for k, v in previous["pending"].items()}
        state["nodes"] = list(previous["nodes"])
        state["leaders"] = list(previous["leaders"])
        state["skipped"] = list(previous["skipped"])
        state["history"] = list(previous["history"])
        state["n_targets"] = n_targets
        state["single_target"] = y.ndim == 1
        ledger = self._new_ledger(d, n_targets)
        if previous["ledger"] is not None:
            ledger = previous["ledger"].copy()
        rng = state["rng"]
        if sp.issparse(X):
            X = sp.csr_matrix(X)  # row slicing per client
        known = set(state["nodes"])
        for label, client_rows in zip(labels, rows):
            key = label.item() if hasattr(label, "item") else label
            if key not in known:
                known.add(key)
                state["nodes"].append(key)
            sw = None if sample_weight is None else sample_weight[client_rows]
            block = (X[client_rows], y2[client_rows], sw)
            state["pending"].setdefault(key, []).append(block)

        # Leader election, with re-election when the leader drops out.
        candidates = list(state["nodes"])
        dropped = []
        leader, converged = None, 0.0
        while candidates:
            election = elect_leader(
                candidates,
                fanout=self.gossip_fanout,
                n_rounds=self.gossip_rounds,
                random_state=rng,
            )
            if self.leader_dropout > 0 and rng.uniform() < self.leader_dropout:
                dropped.append(election.leader)
                candidates.remove(election.leader)
                continue
            leader, converged = election.leader, election.converged_fraction
            break

        ready = [
            key
            for key, blocks in state["pending"].items()
            if key not in dropped and sum(b[0].shape[0] for b in blocks) >= self.min_samples
        ]
        round_index = len(state["leaders"])
        state["leaders"].append(leader)
        record = {
            "leader": leader,
            "dropped_leaders": dropped,
            "contributors": ready,
            "skipped": False,
            "update": None,
            "rank": 0,
            "uplink_bytes": 0,
            "broadcast_bytes": 0,
            "gossip_converged": converged,
            "leader_seconds": 0.0,
        }
        if leader is None or len(ready) < self.min_clients:
            record["skipped"] = True
            record["contributors"] = []
            state["skipped"].append(round_index)
            state["history"].append(record)
            self._commit(state, ledger, X.dtype, coef=None)
            return self

        contributions = []
        for key in ready:
            blocks = state["pending"].pop(key)
            Xc = sp.vstack([b[0] for b in blocks]) if sp.issparse(blocks[0][0]) else (
                np.concatenate([b[0] for b in blocks]))
            yc = np.concatenate([b[1] for b in blocks])
            swc = None
            if any(b[2] is not None for b in blocks):
                swc = np.concatenate(
                    [np.ones(b[0].shape[0]) if b[2] is None else b[2] for b in blocks]
                )
            contribution = _client_contribution(Xc, yc, swc, self.fit_intercept)
            contributions.append(contribution)
            ledger.record_upload(key, contribution.nbytes)
            record["uplink_bytes"] += contribution.nbytes

        start = time.perf_counter()
        aggregate, update_rows, dense = _aggregate_round(
            state["aggregate"], contributions, self.fit_intercept, y.ndim == 1
        )
        rank = d if dense is not None else update_rows.shape[0]
        record["rank"] = rank
        coef, solvers, route = self._solve(
            previous["solvers"], aggregate, update_rows, dense, alpha, previous["aggregate"]
        )
        record["update"] = route
        record["leader_seconds"] = time.perf_counter() - start
        # Broadcast: the round's update (factor rows or packed dense part),
        # the changes of means/moment, and the model, to every node.
        matrix = d * (d + 1) // 2 if dense is not None else update_rows.size
        n_values = matrix + d + n_targets + d * n_targets + n_targets + 2
        n_values += ledger.n_parameters
        ledger.record_broadcast(len(state["nodes"]), n_values)
        record["broadcast_bytes"] = len(state["nodes"]) * n_values * _FLOAT
        state["history"].append(record)
        state["aggregate"] = aggregate
        state["solvers"] = solvers
        self._commit(state, ledger, X.dtype, coef=coef)
        return self

    def _solve(self, solvers, aggregate, rows, dense, alpha, old_aggregate):
        """Coefficients (t, d) for the new statistics, and the new solver states."""
        gram, moment = aggregate.gram, aggregate.moment
        d, t = moment.shape
        coef = np.empty((t, d))
        new_solvers = {}
        routes = set()
        values = np.unique(np.broadcast_to(alpha, (t,)))
        single_old = len(solvers) == 1
        for value in values:
            value = float(value)
            targets = np.flatnonzero(np.broadcast_to(alpha, (t,)) == value)
            old = solvers.get(value)
            if old is None and self.update == "spectral" and single_old and len(values) == 1:
                old = next(iter(solvers.values()))  # alpha changed: Eq. 13-14
            route, solver = self._choose(old, rows, dense, d, value)
            if route == "woodbury":
                solver = old.update(rows)
            elif route == "spectral":
                update_matrix = rows.T @ rows
                if dense is not None:
                    update_matrix = update_matrix + dense
                update_matrix = update_matrix + (value - old.alpha) * np.eye(d)
                solver = old.update(update_matrix, value)
            else:
                solver = _refactor(gram, value, "inverse" if self.update == "spectral" else
                                   "factor")
            if solver is not None:
                sol = solver.solve(moment[:, targets])
                if route != "refactor" and self.tol is not None and (
                    _backward_error(gram, value, sol, moment[:, targets]) > self.tol
                ):
                    route = "refactor"
                    solver = _refactor(gram, value, solver.kind)
                    sol = None if solver is None else solver.solve(moment[:, targets])
            if solver is None:  # singular system: solve_ridge warns and falls back
                coef[targets] = solve_ridge(gram, moment[:, targets], value)
                route = "lstsq"
            else:
                coef[targets] = sol.T
                new_solvers[value] = solver
            routes.add(route)
        return coef, new_solvers, "+".join(sorted(routes))

    def _choose(self, old, rows, dense, d, value):
        """Pick the route for one alpha value; returns (route, None)."""
        mode = self.update
        if mode == "refactor" or old is None:
            return "refactor", None
        if self.refactor_every is not None and old.rounds + 1 >= self.refactor_every:
            return "refactor", None
        if mode == "spectral":
            return ("spectral", None) if old.kind == "inverse" else ("refactor", None)
        if old.kind != "factor" or old.alpha != value or dense is not None:
            return "refactor", None  # delta_lambda I is full rank: refactor
        m = rows.shape[0]
        if mode == "woodbury":
            return ("woodbury", None) if old.rank + m <= d else ("refactor", None)
        # auto: SMW costs ~4 d^2 m against d^3 / 3 for Cholesky; keep the
        # accumulated rank small so each solve stays O(d^2).
        if m <= d / _AUTO_RANK_RATIO and old.rank + m <= d / 2:
            return "woodbury", None
        return "refactor", None

    def _commit(self, state, ledger, dtype, coef):
        state["ledger"] = ledger
        self._state = state
        self.communication_ = ledger
        self.clients_ = label_array(state["nodes"])
        self.n_clients_ = len(state["nodes"])
        self.n_rounds_ = len(state["leaders"])
        self.leaders_ = list(state["leaders"])
        self.skipped_rounds_ = list(state["skipped"])
        self.round_history_ = list(state["history"])
        aggregate = state["aggregate"]
        self.n_samples_seen_ = 0 if aggregate is None else int(aggregate.n_samples)
        self.n_samples_pending_ = int(
            sum(b[0].shape[0] for blocks in state["pending"].values() for b in blocks)
        )
        if coef is not None:
            self._set_coef(aggregate, coef, dtype)
        elif aggregate is None:  # fit() whose only round was skipped: not fitted
            for name in ("coef_", "intercept_"):
                self.__dict__.pop(name, None)


# Woodbury is chosen when the round's update has at most d / _AUTO_RANK_RATIO
# rows (measured crossover, see benchmarks/bench_incremental.py).
_AUTO_RANK_RATIO = 8
