"""What every ridge estimator shares: the solver and the statistics-based base class."""

import warnings
from numbers import Real

import numpy as np
import scipy.sparse as sp
from scipy import linalg
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils.extmath import safe_sparse_dot

from .._clients import group_rows_by_client, label_array, take_clients
from .._compat import Interval, _check_sample_weight, check_is_fitted, validate_data
from ..protocol import (
    Client,
    CommunicationLedger,
    FederatedMixin,
    InvalidClientMessage,
    Server,
    label_key,
    run_simulation,
    sorted_labels,
)
from ._robust import RobustAggregation, check_rows_within_bounds
from ..statistics import (
    ClientStatistics,
    check_aggregate,
    merge_statistics,
    most_extreme_client,
)

__all__ = ["StatisticsClient", "StatisticsServer", "solve_ridge", "task_field"]


def solve_ridge(gram, moment, alpha):
    """Solve ``(gram + alpha I) w = moment`` for each target.

    Cholesky on the symmetric positive definite system; if it fails or the
    system is numerically singular (possible only with ``alpha`` near 0), a
    :class:`~scipy.linalg.LinAlgWarning` is issued and a minimum-norm
    least-squares solution is returned instead.

    Parameters
    ----------
    gram : ndarray of shape (n_features, n_features)
        Symmetric positive semi-definite matrix.
    moment : ndarray of shape (n_features, n_targets)
        Right-hand sides.
    alpha : float or ndarray of shape (n_targets,)
        Non-negative regularization, one per target or shared.

    Returns
    -------
    coef : ndarray of shape (n_targets, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> solve_ridge(np.eye(2), np.array([[2.0], [4.0]]), 1.0)
    array([[1., 2.]])
    """
    d, t = moment.shape
    alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (t,))
    coef = np.empty((t, d))
    for value in np.unique(alpha):  # one factorization per distinct alpha
        targets = np.flatnonzero(alpha == value)
        system = gram + value * np.eye(d)
        coef[targets] = _solve_spd(system, moment[:, targets]).T
    return coef


def _solve_spd(system, rhs):
    try:
        factor = linalg.cho_factor(system, lower=False, check_finite=False)
        pivots = np.abs(np.diag(factor[0]))
        # cond(system) ~ (max pivot / min pivot)^2 for a Cholesky factor.
        if pivots.min() > np.sqrt(np.finfo(float).eps * system.shape[0]) * pivots.max():
            return linalg.cho_solve(factor, rhs, check_finite=False)
    except linalg.LinAlgError:
        pass
    warnings.warn(
        "The regularized Gram matrix is singular or ill-conditioned; using a "
        "least-squares solution instead of Cholesky. Increase alpha to avoid this.",
        linalg.LinAlgWarning,
        stacklevel=3,
    )
    return linalg.lstsq(system, rhs, lapack_driver="gelsd", check_finite=False)[0]


def task_field(task, name, kind):
    """A field of a task, checked for type at the site (tasks are untrusted too)."""
    value = task.fields.get(name)
    if kind is float and type(value) is int:
        value = float(value)
    if type(value) is not kind:
        raise InvalidClientMessage(
            f"server: task field {name!r} must be {kind.__name__}, got {value!r}.", "server"
        )
    return value


class StatisticsClient(Client):
    """A site of the statistics protocol: it sends its :class:`~sklearn_fed.ClientStatistics`.

    The task says whether to center (``fit_intercept``); the reply is the
    site's row count, weight sum, means, Gram, moment and target sums of
    squares (see :meth:`ClientStatistics.to_payload
    <sklearn_fed.ClientStatistics.to_payload>`).
    """

    protocol = "ridge.statistics"

    def _compute(self, task, X, y, sample_weight, rows):
        centered = task_field(task, "centered", bool)
        if "feature_bound" in task.fields or "target_bound" in task.fields:
            site_rows = slice(None) if rows is None else rows
            check_rows_within_bounds(task.fields, X[site_rows], y[site_rows], task.site)
        stats = ClientStatistics.from_data(
            X, y, sample_weight, centered=centered, rows=rows, check_input=False
        )
        return stats.to_payload()


class StatisticsServer(Server):
    """One round in which every site sends its statistics; subclasses solve.

    Replies are merged in the order of their site labels (not of arrival),
    so any run over the same sites gives the same aggregate, bit for bit.
    """

    protocol = "ridge.statistics"

    def __init__(self, estimator, *, robust=None, **kwargs):
        super().__init__(estimator, **kwargs)
        if robust is not None and not isinstance(robust, RobustAggregation):
            raise TypeError(f"robust must be a RobustAggregation; got {robust!r}.")
        self.robust = robust

    def _plan(self, sites):
        if self.round > 0:
            return {}
        fields = {"centered": bool(self.estimator.fit_intercept)}
        if self.robust is not None:
            fields.update(self.robust.task_fields())
        return {site: (dict(fields), {}) for site in sites}

    def _cross_check(self, replies):
        return {} if self.robust is None else self.robust.cross_check(replies)

    def _previous(self):
        """The aggregate this round adds to (warm start), or None."""
        return getattr(self.estimator, "_aggregate", None) if self.warm_start else None

    def _read_reply(self, site, frame):
        # O(d^2) checks per message; the PSD test runs once on the merge (_merged).
        stats = ClientStatistics.from_payload(frame.fields, frame.arrays, client=site, psd=False)
        expected = self._expected_features(frame)
        if stats.n_features != expected:
            raise InvalidClientMessage(
                f"client {site!r}: statistics have {stats.n_features} features, expected "
                f"{expected}.",
                site,
            )
        if stats.centered != bool(self.estimator.fit_intercept):
            raise InvalidClientMessage(
                f"client {site!r}: statistics are "
                f"{'centered' if stats.centered else 'uncentered'} but the task asked "
                f"for fit_intercept={self.estimator.fit_intercept}.",
                site,
            )
        if self.robust is not None:
            self.robust.check(site, stats)
        previous = self._previous()
        if previous is not None and stats.n_targets != previous.n_targets:
            raise InvalidClientMessage(
                f"client {site!r}: has {stats.n_targets} targets but earlier rounds had "
                f"{previous.n_targets}.",
                site,
            )
        return stats

    @staticmethod
    def _check_model(coef, aggregate, replies):
        """Refuse a non-finite model: statistics within every cap can still overflow it."""
        with np.errstate(over="ignore", invalid="ignore"):
            intercept = aggregate.y_mean - coef @ aggregate.x_mean if aggregate.centered else 0
        if np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept)):
            return
        label = most_extreme_client(replies)
        raise InvalidClientMessage(
            f"client {label!r}: the statistics give a non-finite model (this client's "
            "message holds the most extreme values); nothing was applied.",
            label,
        )

    def _expected_features(self, frame):
        """Number of features the statistics of a reply must have."""
        return frame.schema["n_features"]

    def _merged(self, replies):
        """Statistics of all replies of the round (exact tree merge, label order), checked."""
        merged = merge_statistics(replies[site] for site in sorted_labels(replies))
        check_aggregate(merged, replies)
        return merged

    def _dtype_of_round(self):
        return np.float32 if self._dtype == "float32" else np.float64


class BaseFederatedRidge(FederatedMixin, MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Shared machinery of the ridge estimators fitted from client statistics.

    Subclasses implement ``fit``; this class validates input, turns rows into
    per-client :class:`~sklearn_fed.statistics.ClientStatistics`, validates
    untrusted messages, sets ``coef_``/``intercept_`` from an aggregate, and
    predicts.
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="left"), np.ndarray],
        "fit_intercept": ["boolean"],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    # ---------------------------------------------------------------- inputs
    def _validate_rows(self, X, y, sample_weight, clients, *, reset):
        """Validate one batch of rows; returns arrays and per-client row groups."""
        clients = take_clients(self, X, clients)
        X, y = validate_data(
            self,
            X,
            y,
            accept_sparse=["csr", "csc", "coo"],
            dtype=[np.float64, np.float32],
            multi_output=True,
            y_numeric=True,
            reset=reset,
        )
        if sp.issparse(X):
            X = X.tocsr()  # each client's rows are sliced out of X
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, ensure_non_negative=True
            )
        labels, rows = group_rows_by_client(clients, X.shape[0])
        return X, y, sample_weight, labels, rows

    def _validate_more_rows(self, X, y, sample_weight, clients, *, seen):
        """:meth:`_validate_rows` for ``partial_fit``.

        ``seen`` is ``(n_targets, centered)`` of the earlier calls, or ``None``
        on the first call (which then sets ``n_features_in_``). A batch with a
        different number of targets, or a changed ``fit_intercept``, is refused.
        """
        X, y, sample_weight, labels, rows = self._validate_rows(
            X, y, sample_weight, clients, reset=seen is None
        )
        if seen is not None:
            n_targets_seen, centered_seen = seen
            n_targets = 1 if y.ndim == 1 else y.shape[1]
            if n_targets != n_targets_seen:
                raise ValueError(
                    f"y has {n_targets} targets but earlier calls had {n_targets_seen}."
                )
            if centered_seen != self.fit_intercept:
                raise ValueError(
                    "fit_intercept changed since the first partial_fit; call fit to restart."
                )
        return X, y, sample_weight, labels, rows

    def _run_protocol(self, X, y, sample_weight, labels, rows, *, warm_start=False):
        """``fit``/``partial_fit``: the protocol run in process over these rows."""
        # The server is made as a user would make it: told the feature names
        # when X has them, so tasks and replies have the same bytes.
        names = getattr(self, "feature_names_in_", None)
        names = None if names is None else [str(name) for name in names]
        server = self.make_server(feature_names=names, warm_start=warm_start)
        run_simulation(server, self.make_client(), X, y, sample_weight, labels, rows, names)
        return self

    def _set_schema(self, schema, n_features):
        """``n_features_in_`` and ``feature_names_in_`` from the server's schema."""
        self.n_features_in_ = n_features
        if schema.feature_names is not None:
            self.feature_names_in_ = np.asarray(schema.feature_names, dtype=object)
        else:
            self.__dict__.pop("feature_names_in_", None)

    @staticmethod
    def _known_labels(previous_labels, new_labels):
        """Labels of every client so far, in order of first appearance."""
        known = list(previous_labels)
        seen = {label_key(label) for label in known}
        for label in new_labels:
            if label_key(label) not in seen:
                seen.add(label_key(label))
                known.append(label)
        return label_array(known)

    def _statistics_by_client(self, X, y, sample_weight, labels, rows):
        """Compute each client's statistics from its own rows (one at a time)."""
        for label, client_rows in zip(labels, rows):
            yield label, ClientStatistics.from_data(
                X, y, sample_weight, centered=self.fit_intercept, rows=client_rows,
                check_input=False,
            )

    def _checked_alpha(self, n_targets, name="alpha"):
        alpha = np.asarray(self.alpha, dtype=np.float64)
        if alpha.ndim > 1 or (alpha.ndim == 1 and alpha.shape[0] not in (1, n_targets)):
            raise ValueError(
                f"{name} must be a scalar or have one value per target "
                f"({n_targets}); got shape {alpha.shape}."
            )
        if np.any(~np.isfinite(alpha)) or np.any(alpha < 0):
            raise ValueError(f"{name} must be finite and non-negative; got {self.alpha!r}.")
        return alpha

    def _read_messages(self, messages):
        """Parse and validate untrusted client messages, all before using any.

        ``messages`` is a list (client labels 0..K-1) or a dict label ->
        message; a message is a ClientStatistics or its bytes. Each is
        validated once, in O(d^2); the PSD test runs on their merge.
        """
        if isinstance(messages, dict):
            items = list(messages.items())
        else:
            items = list(enumerate(messages))
        if not items:
            raise ValueError("fit_statistics needs at least one client message.")
        parsed = []
        first = None
        for label, message in items:
            if isinstance(message, ClientStatistics):
                stats = message
            elif isinstance(message, (bytes, bytearray, memoryview)):
                stats = ClientStatistics.from_bytes(message, client=label, validate=False)
            else:
                raise InvalidClientMessage(
                    f"client {label!r}: expected ClientStatistics or bytes, got "
                    f"{type(message).__name__}.",
                    label,
                )
            expected = (None, None) if first is None else (first.n_features, first.n_targets)
            stats.validate(client=label, n_features=expected[0], n_targets=expected[1],
                           psd=False)
            first = stats if first is None else first
            if stats.centered != self.fit_intercept:
                raise InvalidClientMessage(
                    f"client {label!r}: statistics are "
                    f"{'centered' if stats.centered else 'uncentered'} but "
                    f"fit_intercept={self.fit_intercept}.",
                    label,
                )
            parsed.append((label, stats))
        return parsed

    # ---------------------------------------------------------------- outputs
    def _set_coef(self, aggregate, coef, dtype):
        """Set ``coef_`` and ``intercept_`` shaped and typed like sklearn's Ridge."""
        if self.fit_intercept:
            intercept = (aggregate.y_mean - coef @ aggregate.x_mean).astype(dtype)
            self.intercept_ = intercept[0] if aggregate.single_target else intercept
        else:
            self.intercept_ = 0.0
        coef = coef.astype(dtype, copy=False)
        self.coef_ = coef[0] if aggregate.single_target else coef

    def _n_parameters(self, n_features, n_targets):
        return (n_features + self.fit_intercept) * n_targets

    def _new_ledger(self, n_features, n_targets):
        # Transitional: for estimators whose fit does not run the protocol roles yet.
        return CommunicationLedger(n_parameters=self._n_parameters(n_features, n_targets))

    def predict(self, X):
        """Predict with the fitted linear model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_targets)
        """
        check_is_fitted(self)
        X = validate_data(
            self, X, accept_sparse=["csr", "csc", "coo"], dtype=[np.float64, np.float32], reset=False
        )
        return safe_sparse_dot(X, np.asarray(self.coef_).T, dense_output=True) + self.intercept_

