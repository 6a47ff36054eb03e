"""FederatedRidge: one-shot ridge from aggregated client statistics."""

import numpy as np

from .._compat import _fit_context
from ..protocol import CommunicationLedger, atomic
from ._base import BaseFederatedRidge, StatisticsClient, StatisticsServer, solve_ridge

__all__ = ["FederatedRidge"]


class FederatedRidgeServer(StatisticsServer):
    """Server of :class:`FederatedRidge`: merge every site's statistics, solve once."""

    def _apply(self, replies, ledger):
        estimator = self.estimator
        previous = self._previous()
        batch = self._merged(replies)
        aggregate = batch if previous is None else previous.merge(batch)
        alpha = estimator._checked_alpha(aggregate.n_targets)
        coef = solve_ridge(aggregate.gram, aggregate.moment, alpha)
        self._check_model(coef, aggregate, replies)
        ledger.n_parameters = estimator._n_parameters(aggregate.n_features, aggregate.n_targets)
        labels = estimator._known_labels(
            estimator.clients_ if previous is not None else [], replies
        )
        # commit: nothing above touched the estimator
        estimator._aggregate = aggregate
        estimator.communication_ = ledger
        estimator.clients_ = labels
        estimator.n_clients_ = len(labels)
        estimator._set_schema(self.schema, aggregate.n_features)
        estimator._set_coef(aggregate, coef, self._dtype_of_round())

class FederatedRidge(BaseFederatedRidge):
    """Ridge regression fitted in one round from per-client sufficient statistics.

    Each client reduces its rows to a :class:`~sklearn_fed.statistics.ClientStatistics`
    (weight sum, means, centered Gram, centered moment); the server merges them
    and solves ``(G + alpha I) w = h`` by Cholesky, with intercept
    ``y_mean - x_mean @ w`` (Algorithm 1, "one-shot sigma-fusion", of the
    one-shot federated ridge paper). Because the merged statistics equal those
    of the pooled rows, the result equals :class:`sklearn.linear_model.Ridge`
    on all rows, for any partition of rows into clients (Theorem 2), and for
    any subset of clients that actually report (dropout, Theorem 8).

    Read more in the :ref:`User Guide <federated_ridge>`.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Non-negative L2 penalty, one per target or shared, as in
        :class:`~sklearn.linear_model.Ridge`.
    fit_intercept : bool, default=True
        Whether to fit an (unpenalized) intercept. Clients then send centered
        statistics.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients, in the dtype of ``X`` (float32 or float64).
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept; ``0.0`` when ``fit_intercept=False``.
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
        ``downlink_bytes`` (model broadcast), ``rounds``, and
        ``fedavg_equivalent(R)`` for what R rounds of FedAvg would cost.

    See Also
    --------
    FederatedRidgeCV : Chooses alpha by leave-one-client-out cross-validation.
    sklearn_fed.statistics.ClientStatistics : The message each client sends.

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
    >>> fed.n_clients_, fed.communication_.uplink_bytes_per_client["a"]
    (3, 553)
    """

    _server_role = FederatedRidgeServer
    _client_role = StatisticsClient
    _exact_federation = True  # any partition into clients gives Ridge on all rows

    def __init__(self, alpha=1.0, *, fit_intercept=True):
        self.alpha = alpha
        self.fit_intercept = fit_intercept

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit on rows split among clients by ``clients``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights.
        clients : array-like of shape (n_samples,), default=None
            Client label of each row (any hashable). ``None``: one client.

        Returns
        -------
        self : FederatedRidge
        """
        X, y, sample_weight, labels, rows = self._validate_rows(
            X, y, sample_weight, clients, reset=True
        )
        return self._run_protocol(X, y, sample_weight, labels, rows)

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Add rows (from existing or new clients) and refit, exactly.

        The result after any sequence of calls equals ``Ridge`` fitted on all
        rows seen. A call that raises leaves the estimator unchanged.

        Parameters
        ----------
        X, y, sample_weight, clients
            As in :meth:`fit`.

        Returns
        -------
        self : FederatedRidge
        """
        aggregate = getattr(self, "_aggregate", None)
        X, y, sample_weight, labels, rows = self._validate_more_rows(
            X, y, sample_weight, clients,
            seen=None if aggregate is None else (aggregate.n_targets, aggregate.centered),
        )
        return self._run_protocol(
            X, y, sample_weight, labels, rows, warm_start=aggregate is not None
        )

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit_statistics(self, messages):
        """Fit from client messages alone: the deployment path.

        Every message is parsed and validated before any is aggregated, so a
        bad message raises :class:`~sklearn_fed.statistics.InvalidClientMessage`
        naming its client and leaves the estimator unchanged.

        Parameters
        ----------
        messages : list or dict
            :class:`~sklearn_fed.statistics.ClientStatistics` objects or their
            bytes (:meth:`~sklearn_fed.statistics.ClientStatistics.to_bytes`).
            A dict maps client labels to messages; a list labels them 0..K-1.

        Returns
        -------
        self : FederatedRidge
        """
        parsed = self._read_messages(messages)
        ledger = CommunicationLedger()
        ledger.record_round({}, {label: stats.nbytes for label, stats in parsed})
        server = self.make_server()
        server._apply(dict(parsed), ledger)
        return self
