"""FederatedRidgeCV: alpha chosen by leave-one-client-out CV from the messages alone."""

from numbers import Real

import numpy as np
from scipy import linalg
from sklearn.model_selection import check_cv
from sklearn.utils.extmath import safe_sparse_dot

from .._clients import label_array
from .._compat import Interval, _fit_context
from ..protocol import CommunicationLedger, InvalidClientMessage, atomic, sorted_labels
from ..statistics import ClientStatistics, merge_statistics, most_extreme_client
from ._base import BaseFederatedRidge, StatisticsClient, StatisticsServer, solve_ridge

__all__ = ["FederatedRidgeCV"]


class FederatedRidgeCVServer(StatisticsServer):
    """Server of :class:`FederatedRidgeCV`: leave-one-client-out from the replies alone."""

    def _apply(self, replies, ledger):
        if len(replies) < 2:
            raise ValueError(
                "leave-one-client-out CV needs at least 2 clients; got "
                f"{len(replies)}. Pass clients=None for leave-one-sample-out CV."
            )
        self._merged(replies)  # checks the merge once (finite, PSD) before any solve
        labels = sorted_labels(replies)
        statistics = [replies[label] for label in labels]
        self.estimator._fit_leave_one_client_out(
            labels, statistics, self._dtype_of_round(), ledger, self.schema
        )



class FederatedRidgeCV(BaseFederatedRidge):
    """Federated ridge with alpha chosen by leave-one-client-out cross-validation.

    With ``clients`` given, this is the federated CV of Proposition 5 of the
    one-shot paper, computed entirely from the K client messages: for each
    held-out client k the server merges the other clients' statistics, and the
    held-out squared error of client k is evaluated from client k's *own*
    statistics (``sum w (y - b - x^T w)^2`` expands into its Gram, moment,
    target sum of squares and means), so no second round and no raw data are
    needed. One eigendecomposition per held-out client makes each alpha cost
    ``O(d^2)``. The complement of each client is built by a divide-and-conquer
    of exact merges (never by subtracting a client from the total, which
    would cancel digits), using ``O(d^2 log K)`` memory.

    The criterion is ``sum_k SSE_k(alpha) / (n * n_targets)``: the total
    held-out squared error over all rows (weighted by ``sample_weight``, then
    divided by its sum), i.e. leave-one-group-out MSE pooled over rows.

    With ``clients=None`` it is leave-one-*sample*-out CV on the rows, computed
    in closed form, and agrees with :class:`sklearn.linear_model.RidgeCV`.

    With ``cv`` given (an int, a splitter such as
    :class:`~sklearn.model_selection.GroupKFold`, or an iterable of
    ``(train, test)`` index pairs), the folds are the held-out groups instead:
    each fold's test rows are scored from their own statistics against a model
    built from the fold's training statistics; ``clients`` is passed to the
    splitter as ``groups``.

    Read more in the :ref:`User Guide <federated_ridge_cv>`.

    Parameters
    ----------
    alphas : array-like of shape (n_alphas,), default=(0.1, 1.0, 10.0)
        Positive candidate penalties.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    cv : int, cross-validation generator, iterable or None, default=None
        ``None``: leave-one-client-out (or leave-one-sample-out when
        ``clients=None``). Otherwise the folds to hold out, as in
        :func:`~sklearn.model_selection.check_cv`.

    Attributes
    ----------
    alpha_ : float
        Selected penalty.
    best_score_ : float
        Negative criterion at ``alpha_`` (like RidgeCV's default scoring).
    cv_results_ : ndarray of shape (n_groups, n_alphas) or (n_groups, n_targets, n_alphas)
        Held-out squared error of each client (sum over its rows, weighted), of
        each row when ``clients=None``, or of each fold when ``cv`` is given,
        for each alpha.
    coef_, intercept_, n_features_in_, feature_names_in_, clients_, n_clients_, communication_
        As in :class:`FederatedRidge`, for the final fit with ``alpha_``.

    See Also
    --------
    FederatedRidge : The same model with a fixed alpha.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FederatedRidgeCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(90, 4))
    >>> y = X @ [1.0, -2.0, 0.0, 0.5] + 0.1 * rng.normal(size=90)
    >>> cv = FederatedRidgeCV(alphas=[0.01, 1.0, 100.0]).fit(X, y, clients=np.arange(90) % 3)
    >>> float(cv.alpha_), cv.cv_results_.shape
    (0.01, (3, 3))
    """

    _parameter_constraints: dict = {
        "alphas": ["array-like", Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "cv": ["cv_object"],
    }

    _server_role = FederatedRidgeCVServer
    _client_role = StatisticsClient

    @property
    def _without_clients(self):  # what fit does without clients (MissingClientsWarning)
        if self.cv is None:
            return "alpha is chosen by leave-one-sample-out CV, not leave-one-client-out"
        return None  # the folds come from cv, and the refit is exact

    def __init__(self, alphas=(0.1, 1.0, 10.0), *, fit_intercept=True, cv=None):
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.cv = cv

    def _checked_alphas(self):
        alphas = np.atleast_1d(np.asarray(self.alphas, dtype=np.float64))
        if alphas.ndim != 1 or alphas.size == 0:
            raise ValueError(f"alphas must be a non-empty 1-D sequence; got {self.alphas!r}.")
        if np.any(~np.isfinite(alphas)) or np.any(alphas <= 0):
            raise ValueError(f"alphas must be finite and positive; got {self.alphas!r}.")
        return alphas

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Select alpha by leave-one-client-out CV, then fit on all rows.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights.
        clients : array-like of shape (n_samples,), default=None
            Client label of each row; at least two distinct clients. ``None``:
            leave-one-sample-out CV, like RidgeCV.

        Returns
        -------
        self : FederatedRidgeCV
        """
        alphas = self._checked_alphas()
        X, y, sample_weight, labels, rows = self._validate_rows(
            X, y, sample_weight, clients, reset=True
        )
        if self.cv is not None:
            self._fit_folds(X, y, sample_weight, clients, labels, rows, alphas)
            return self
        if clients is None:
            self._fit_leave_one_sample_out(X, y, sample_weight, alphas)
            return self
        return self._run_protocol(X, y, sample_weight, labels, rows)

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit_statistics(self, messages):
        """Select alpha and fit from client messages alone (no raw rows).

        Parameters
        ----------
        messages : list or dict
            At least two clients' :class:`~sklearn_fed.statistics.ClientStatistics`
            or their bytes; see :meth:`FederatedRidge.fit_statistics`.

        Returns
        -------
        self : FederatedRidgeCV
        """
        self._checked_alphas()
        if self.cv is not None:
            raise ValueError(
                "fit_statistics holds out one client at a time; cv must be None "
                f"(got cv={self.cv!r})."
            )
        parsed = self._read_messages(messages)
        ledger = CommunicationLedger()
        ledger.record_round({}, {label: stats.nbytes for label, stats in parsed})
        self.make_server()._apply(dict(parsed), ledger)
        return self

    # ------------------------------------------------------------ internals
    def _fit_leave_one_client_out(self, labels, statistics, dtype, ledger, schema):
        alphas = self._checked_alphas()
        sse = np.stack(
            [
                _held_out_sse(held, rest, alphas)
                for held, rest in zip(statistics, _complements(statistics))
            ]
        )  # (n_clients, n_targets, n_alphas)
        total_weight = sum(stats.weight_sum for stats in statistics)
        self._set_schema(schema, statistics[0].n_features)
        self._finish(sse, total_weight, labels, statistics, alphas, dtype, ledger)

    @staticmethod
    def _local_ledger(statistics, labels):
        """Ledger of the modes computed from rows: each client's statistics message."""
        ledger = CommunicationLedger()
        ledger.record_round({}, {label: s.nbytes for label, s in zip(labels, statistics)})
        return ledger

    def _fit_folds(self, X, y, sample_weight, clients, labels, rows, alphas):
        """Hold out the test rows of each fold given by ``cv``."""
        groups = None
        if clients is not None:  # the clients, as checked and aligned, are the groups
            groups = np.empty(X.shape[0], dtype=np.intp)
            for index, client_rows in enumerate(rows):
                groups[client_rows] = index
        splits = list(check_cv(self.cv).split(X, y, groups=groups))

        def stats(index):
            return ClientStatistics.from_data(
                X, y, sample_weight, centered=self.fit_intercept, rows=index,
                check_input=False,
            )

        sse = np.stack([_held_out_sse(stats(test), stats(train), alphas) for train, test in splits])
        held_out_weight = sum(
            len(test) if sample_weight is None else sample_weight[test].sum() for _, test in splits
        )
        statistics = [s for _, s in self._statistics_by_client(X, y, sample_weight, labels, rows)]
        ledger = self._local_ledger(statistics, labels)
        self._finish(sse, held_out_weight, list(labels), statistics, alphas, X.dtype, ledger)

    def _fit_leave_one_sample_out(self, X, y, sample_weight, alphas):
        """Closed-form LOO: e_i = r_i / (1 - h_ii) for every alpha at once."""
        if X.shape[0] < 2:
            raise ValueError(
                f"leave-one-out cross-validation needs at least 2 samples; got "
                f"{X.shape[0]} sample."
            )
        stats = ClientStatistics.from_data(
            X, y, sample_weight, centered=self.fit_intercept, check_input=False
        )
        eigenvalues, Q = _eigh_psd(stats.gram)
        w = np.ones(X.shape[0]) if sample_weight is None else sample_weight
        Z = safe_sparse_dot(X, Q, dense_output=True) - stats.x_mean @ Q  # (X - mean) Q
        y2 = np.asarray(y, dtype=np.float64).reshape(X.shape[0], -1) - stats.y_mean
        inverse = 1.0 / (eigenvalues[:, None] + alphas)  # (d, n_alphas)
        residual = y2[:, :, None] - np.einsum(
            "nd,dt,da->nta", Z, Q.T @ stats.moment, inverse
        )
        leverage = w[:, None] * ((Z * Z) @ inverse)  # (n, n_alphas)
        if self.fit_intercept:
            leverage += (w / stats.weight_sum)[:, None]
        loo = residual / (1.0 - leverage[:, None, :])
        squared = w[:, None, None] * loo**2  # squared errors in sqrt(w)-scaled space, as RidgeCV
        self._finish(
            squared, X.shape[0], [0], [stats], alphas, X.dtype, self._local_ledger([stats], [0])
        )

    def _finish(self, errors, denominator, labels, statistics, alphas, dtype, ledger):
        """Pick alpha from held-out errors, refit on all statistics, set attributes."""
        aggregate = merge_statistics(statistics)
        criterion = errors.sum(axis=(0, 1)) / (denominator * aggregate.n_targets)
        messages = dict(zip(labels, statistics))
        if not np.all(np.isfinite(criterion)):
            label = most_extreme_client(messages)
            raise InvalidClientMessage(
                f"client {label!r}: the held-out errors are not finite (this client's "
                "message holds the most extreme values); nothing was applied.",
                label,
            )
        best = int(np.argmin(criterion))
        coef = solve_ridge(aggregate.gram, aggregate.moment, alphas[best])
        StatisticsServer._check_model(coef, aggregate, messages)
        ledger.n_parameters = self._n_parameters(aggregate.n_features, aggregate.n_targets)
        self.alpha_ = float(alphas[best])
        self.best_score_ = float(-criterion[best])
        self.cv_results_ = errors[:, 0, :] if aggregate.single_target else errors
        self.communication_ = ledger
        self.clients_ = label_array(labels)
        self.n_clients_ = len(labels)
        self._set_coef(aggregate, coef, dtype)


def _eigh_psd(gram):
    eigenvalues, Q = linalg.eigh(gram, check_finite=False)
    return np.maximum(eigenvalues, 0.0), Q


def _held_out_sse(held, rest, alphas):
    """Weighted SSE on ``held``'s rows of ridge fitted on ``rest``, per (target, alpha).

    ``SSE = S_yy - 2 w^T h + w^T C w + W c^2`` in the held-out client's own
    centered statistics, where ``c`` is the gap between its mean target and
    the prediction at its mean feature vector.
    """
    eigenvalues, Q = _eigh_psd(rest.gram)
    projected = (Q.T @ rest.moment)[:, :, None] / (eigenvalues[:, None, None] + alphas)
    coef = np.einsum("ij,jta->ita", Q, projected)  # (d, n_targets, n_alphas)
    gram_coef = np.einsum("ij,jta->ita", held.gram, coef)
    sse = (
        held.target_ss[:, None]
        - 2 * np.einsum("it,ita->ta", held.moment, coef)
        + np.einsum("ita,ita->ta", coef, gram_coef)
    )
    if held.centered:
        gap = (held.y_mean - rest.y_mean)[:, None] - np.einsum(
            "i,ita->ta", held.x_mean - rest.x_mean, coef
        )
        sse += held.weight_sum * gap**2
    return np.maximum(sse, 0.0)


def _complements(statistics):
    """For each client, the merged statistics of all the others, in order.

    Divide and conquer: the complement of a half is the complement of the
    whole merged with the other half. Every step is an exact merge.
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
