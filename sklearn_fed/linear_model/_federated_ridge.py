"""FederatedRidge: one-shot ridge from aggregated client statistics."""

from .._compat import StrOptions
from ..protocol import CommunicationLedger
from ..protocol._roles import FramesOnDemand
from ..statistics import ClientStatistics
from ._base import (
    BaseFederatedRidge,
    StatisticsClient,
    StatisticsServer,
    fit_method,
)
from ._solver import _solve_gram, solve_ridge_factor

__all__ = ["FederatedRidge"]


class FederatedRidgeServer(StatisticsServer):
    """Server of :class:`FederatedRidge`: merge every site's statistics, solve once.

    With ``solver="auto"``, a Gram aggregate too ill-conditioned for the
    Cholesky solve (see :data:`~sklearn_fed.linear_model.GRAM_MAX_CONDITION`)
    is not used: a second round asks every site for the factor form instead.
    """

    _merges_replies = True

    def apply(self, replies, ledger):
        estimator = self.estimator
        previous = self._previous()
        batch, owned = self._merged_and_owned(replies)
        aggregate = batch if previous is None else previous.merge(batch)  # a merge is new
        alpha = estimator._checked_alpha(aggregate.n_targets)
        if aggregate.factor is not None:
            coef, solver = solve_ridge_factor(aggregate.factor, aggregate.n_features, alpha), "svd"
        else:
            # "auto" escalates once, and only when factors can help: rows
            # merged earlier in Gram form would keep the aggregate in Gram form.
            escalate = self._may_ask_factors() and (previous is None or previous.factor is not None)
            coef, solver = _solve_gram(
                aggregate.gram, aggregate.moment, alpha, cholesky_only=escalate,
                in_place=owned or previous is not None,
            )
            if coef is None:
                self.request_round(form="factor")
                return
        self._check_model(coef, aggregate, replies)
        # commit: nothing above touched the estimator
        earlier = () if previous is None else estimator.clients_
        estimator._aggregate = aggregate
        estimator._commit_solution(self, aggregate, coef, solver, ledger, replies, earlier)


class FederatedRidge(BaseFederatedRidge):
    """Ridge regression fitted from per-client sufficient statistics.

    Each client reduces its rows to a :class:`~sklearn_fed.statistics.ClientStatistics`
    (weight sum, means, centered Gram, centered moment); the server merges
    them and solves ``(G + alpha I) w = h``, with intercept
    ``y_mean - x_mean @ w`` (Algorithm 1, "one-shot sigma-fusion", of the
    one-shot federated ridge paper). Because the merged statistics equal those
    of the pooled rows, the result equals :class:`sklearn.linear_model.Ridge`
    on all rows, for any partition of rows into clients (Theorem 2), and for
    any subset of clients that actually report (dropout, Theorem 8).

    How it is solved is the ``solver`` parameter, as in ``Ridge``: from the
    Gram (one round, Cholesky) or from triangular factors of the clients'
    rows (one round, an SVD, as accurate as ``Ridge(solver="svd")``), or
    ``"auto"``: the Gram round, and a second round of factors only when the
    aggregated Gram is too ill-conditioned to give the answer to about 1e-11
    (small ``alpha`` on rank-deficient data, features with large offsets
    and no intercept, ...).

    Read more in the :ref:`User Guide <federated_ridge>` and on the
    :ref:`numerical accuracy <numerical_accuracy>` page.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Non-negative L2 penalty, one per target or shared, as in
        :class:`~sklearn.linear_model.Ridge`.
    fit_intercept : bool, default=True
        Whether to fit an (unpenalized) intercept. Clients then send centered
        statistics.
    solver : {"auto", "cholesky", "svd"}, default="auto"
        ``"cholesky"``: sites send the Gram form; the server solves by
        Cholesky, or, when ``G + alpha I`` is too ill-conditioned for it, by
        an eigendecomposition restricted to the numerical range of ``G``
        (minimum-norm as ``alpha -> 0``). ``"svd"``: sites send the factor
        form (a QR of their rows; about twice the site's floating-point work
        of the Gram); the server stacks the factors (TSQR) and solves by an
        SVD, never squaring the condition number. ``"auto"``: the Gram round,
        then, only if the condition number of ``G + alpha I`` exceeds
        :data:`~sklearn_fed.linear_model.GRAM_MAX_CONDITION`, a second round
        of factors. ``solver_`` tells which path gave the model.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients, in the dtype of ``X`` (float32 or float64); shaped like
        ``Ridge``'s (``(n_features,)`` also for ``y`` of shape ``(n, 1)``).
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept; ``0.0`` when ``fit_intercept=False``.
    solver_ : {"cholesky", "eigen", "svd"}
        How the model was solved: Cholesky of the Gram, eigendecomposition
        of the Gram, or SVD of the stacked factors.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.
    clients_ : ndarray of shape (`n_clients_`,)
        Labels of the clients whose statistics were aggregated.
    n_clients_ : int
        Number of clients.
    communication_ : CommunicationLedger
        Bytes actually sent: ``uplink_bytes`` (total), ``uplink_bytes_per_client``,
        ``downlink_bytes`` (tasks), ``rounds``, and
        ``fedavg_equivalent(R)`` for what R rounds of FedAvg would cost.

    See Also
    --------
    FederatedRidgeCV : Chooses alpha by cross-validation, with RidgeCV's interface.
    sklearn_fed.statistics.ClientStatistics : The message each client sends.

    Notes
    -----
    ``fit(X, y, clients=...)`` pools the Gram round: every site's statistics
    add up to those of all rows, so the simulation computes them once from
    all rows and counts each site's message size exactly as the per-site run
    sends it (same ledger, model equal to round-off; see
    :ref:`deploying`). Inside
    :func:`~sklearn_fed.protocol.simulate_through_bytes`, with sample
    weights, or when the pooled statistics cannot vouch for every site's
    message, every site's message is computed and checked.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn_fed import FederatedRidge
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(60, 3)), rng.normal(size=60)
    >>> clients = np.repeat(["a", "b", "c"], 20)
    >>> fed = FederatedRidge(alpha=1.0).fit(X, y, clients=clients)
    >>> bool(np.allclose(fed.coef_, Ridge(alpha=1.0).fit(X, y).coef_))
    True
    >>> fed.n_clients_, fed.communication_.uplink_bytes_per_client["a"], fed.solver_
    (3, 553, 'cholesky')

    Near-singular statistics take the second round of factors:

    >>> X_wide = rng.normal(size=(10, 30))
    >>> wide = FederatedRidge(alpha=1e-12).fit(X_wide, X_wide[:, 0], clients=[0, 1] * 5)
    >>> wide.solver_, wide.communication_.rounds
    ('svd', 2)
    """

    _parameter_constraints: dict = {
        **BaseFederatedRidge._parameter_constraints,
        "solver": [StrOptions({"auto", "cholesky", "svd"})],
    }

    _server_role = FederatedRidgeServer
    _client_role = StatisticsClient
    _exact_federation = True  # any partition into clients gives Ridge on all rows

    _finite_from_statistics = True

    _dask_rows = "partitions"

    def __init__(self, alpha=1.0, *, fit_intercept=True, solver="auto"):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver

    @fit_method
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit on rows split among clients by ``clients``."""
        return self._fit(X, y, sample_weight, clients)

    @fit_method(partial=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Add rows (from existing or new clients) and refit, exactly.

        The result after any sequence of calls equals ``Ridge`` fitted on all
        rows seen. A call that raises leaves the estimator unchanged.
        """
        return self._fit(X, y, sample_weight, clients, partial=True)

    @fit_method(messages=("list or dict", (
        ":class:`~sklearn_fed.statistics.ClientStatistics` objects or their bytes "
        "(:meth:`~sklearn_fed.statistics.ClientStatistics.to_bytes`). A dict maps client "
        "labels to messages; a list labels them 0..K-1.")))
    def fit_statistics(self, messages):
        """Fit from client messages alone: the deployment path.

        Every message is parsed and validated before any is aggregated, so a
        bad message raises :class:`~sklearn_fed.statistics.InvalidClientMessage`
        naming its client and leaves the estimator unchanged. Messages may be
        in Gram or factor form; there is no second round, so Gram messages
        are solved by the Gram path (``solver_`` is ``"cholesky"`` or
        ``"eigen"``) and factor messages by the SVD (``"svd"``).
        """
        # Bytes are parsed when the merge reads them: it unpacks O(log K) messages at a time.
        items = dict(self._read_messages(messages, keep_bytes=True))
        packed = {label: not isinstance(m, ClientStatistics) for label, m in items.items()}
        replies = FramesOnDemand(items, lambda label: ClientStatistics.from_bytes(
            items[label], client=label, validate=False) if packed[label] else items[label])
        ledger = CommunicationLedger()
        ledger.record_round({}, {label: memoryview(m).nbytes if packed[label] else m.nbytes
                                 for label, m in items.items()})
        server = self.make_server(max_rounds=1)
        server.apply(replies, ledger)
        return self
