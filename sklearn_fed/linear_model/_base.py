"""What every ridge estimator shares: the statistics roles and the base class."""

import math
from numbers import Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils import assert_all_finite
from sklearn.utils.extmath import safe_sparse_dot

from .._compat import (
    Interval,
    _check_sample_weight,
    check_is_fitted,
    validate_data,
)
from ..base import FederatedEstimatorMixin, fit_method, set_federation_attributes
from ..protocol import (
    BlockwiseClient,
    FoldedReplies,
    InvalidClientMessage,
    Server,
    run_simulation,
    sorted_labels,
)
from ..protocol._fields import reply_error, server_error, task_field
from ..statistics import (
    FORMS,
    ClientStatistics,
    StreamingMerge,
    check_aggregate,
    merge_statistics,
    most_extreme_client,
)
from ..statistics._validation import parts_within_caps as _parts_within_caps
from ._robust import RobustAggregation, check_rows_within_bounds

__all__ = [
    "StatisticsClient",
    "StatisticsServer",
    "fit_method",
    "task_field",
    "task_step",
    "validate_regression",
]


def validate_regression(estimator, X, y, *, reset, ensure_all_finite=True):
    """``(X, y)`` of a linear regressor's ``fit``, checked as scikit-learn's ``Ridge`` does."""
    return validate_data(
        estimator,
        X,
        y,
        accept_sparse=["csr", "csc", "coo"],
        dtype=[np.float64, np.float32],
        multi_output=True,
        y_numeric=True,
        reset=reset,
        ensure_all_finite=ensure_all_finite,
    )


def ridge_attributes(aggregate, coef, dtype, fit_intercept):
    """``(coef_, intercept_)`` of the solution ``coef`` (one row per target), as sklearn's Ridge.

    ``coef_`` is ``(n_features,)`` for one target (also when ``y`` had
    shape ``(n, 1)``); ``intercept_``, from the means of ``aggregate``, is a
    scalar for one-dimensional ``y``, an array ``(n_targets,)`` otherwise,
    and the float ``0.0`` without an intercept; both in ``dtype``.
    """
    intercept = 0.0
    if fit_intercept:
        intercept = (aggregate.y_mean - coef @ aggregate.x_mean).astype(dtype)
        intercept = intercept[0] if aggregate.single_target else intercept
    coef = coef.astype(dtype, copy=False)
    return coef[0] if coef.shape[0] == 1 else coef, intercept


def rows_and_weights(X, sample_weight):
    """Validated ``X`` as CSR when sparse (each site's rows are sliced out of it), and
    ``sample_weight`` checked as scikit-learn's ``fit`` checks it."""
    if sp.issparse(X):
        X = X.tocsr()
    if sample_weight is not None:
        sample_weight = _check_sample_weight(
            sample_weight, X, dtype=np.float64, ensure_non_negative=True
        )
    return X, sample_weight


class StatisticsClient(BlockwiseClient):
    """A site of the statistics protocol: it sends its :class:`~sklearn_fed.ClientStatistics`.

    The task says whether to center (``centered``, from ``fit_intercept``)
    and, in its optional field ``form``, whether to send the Gram form (the
    default: row count, weight sum, means, Gram, moment and target sums of
    squares) or the factor form (the triangular factor of a QR of the
    site's rows instead of the Gram, moment and sums of squares); see
    :meth:`ClientStatistics.to_payload <sklearn_fed.ClientStatistics.to_payload>`.
    """

    protocol = "ridge.statistics"

    def replies_are_independent(self, tasks):
        # Statistics of the site's own rows, nothing shared. Subclasses answer in
        # turn unless they say so too (a projection role caches its matrix).
        return type(self) is StatisticsClient

    # The reply is finish(summarize(rows)): statistics are a reduction over
    # rows, so a site's rows may come in blocks (see BlockwiseClient).
    def summarize(self, task, X, y, sample_weight, rows):
        centered = task_field(task, "centered", bool)
        if "feature_bound" in task.fields or "target_bound" in task.fields:
            site_rows = slice(None) if rows is None else rows
            check_rows_within_bounds(task.fields, X[site_rows], y[site_rows], task.site)
        return ClientStatistics.from_data(
            X, y, sample_weight, centered=centered, rows=rows, check_input=False,
            factor=requested_form(task) == "factor",
        )

    def merge(self, first, second):
        return first.merge(second)

    def finish(self, task, summary):
        return summary.to_payload()

    def fields_of_rows(self, fields, n_rows):
        return dict(fields, n_samples=n_rows, weight_sum=float(n_rows))


def task_step(task, steps):
    """The ``step`` field of a task, one of ``steps`` (tasks are untrusted)."""
    step = task_field(task, "step", str)
    if step not in steps:
        raise InvalidClientMessage(f"server: unknown task step {step!r}.", "server")
    return step


def requested_form(task):
    """The statistics form a task asks for: its ``form`` field, ``"gram"`` if absent."""
    form = task.fields.get("form", "gram")
    if form not in FORMS:
        server_error(f"task field 'form' must be one of {list(FORMS)}, got {form!r}.")
    return form


class StatisticsServer(Server):
    """Rounds in which every site sends its statistics; subclasses solve.

    The first round asks for the Gram form (the factor form with
    ``solver="svd"``, or when a streaming model is already in factor form);
    ``apply`` may call :meth:`request_round` to ask for one more round,
    e.g. of factors, otherwise the protocol ends after one round. Replies
    are merged in the order of their site labels (not of arrival), so any
    run over the same sites gives the same aggregate, bit for bit. A site
    may answer a factor task with Gram statistics (as sites of earlier
    releases do): they are accepted, and the merged aggregate is then in
    Gram form.
    """

    protocol = "ridge.statistics"
    #: Whether ``apply`` reads the round's replies only through :meth:`_merged_and_owned`
    #: (and to name a culprit), so they can be folded as they are read, and a
    #: Gram round may be pooled in simulation (:meth:`pools_round`): their
    #: merge equals the statistics of the pooled rows.
    _merges_replies = False

    def __init__(self, estimator, *, robust=None, **kwargs):
        super().__init__(estimator, **kwargs)
        if robust is not None and not isinstance(robust, RobustAggregation):
            raise TypeError(f"robust must be a RobustAggregation; got {robust!r}.")
        self.robust = robust
        previous = self._previous()
        solver = getattr(estimator, "solver", "cholesky")
        factored = solver == "svd" or (
            solver == "auto" and previous is not None and previous.factor is not None
        )
        self.form = "factor" if factored else "gram"
        # The fields of the tasks of round _next_round; no tasks in any other round.
        self._next, self._next_round = {"form": self.form}, 0

    def request_round(self, **fields):
        """Ask for one more round (called from ``apply``); ``fields`` go into its tasks."""
        self._next, self._next_round = dict(fields), self.round + 1
        self.form = fields.get("form", "gram")

    def _may_ask_factors(self):
        """Whether ``solver="auto"`` may still follow this Gram round with one of factors."""
        return (getattr(self.estimator, "solver", None) == "auto" and self.form == "gram"
                and (self.max_rounds is None or self.round + 1 < self.max_rounds))

    def plan(self, sites):
        if self._next_round != self.round:
            return {}
        fields = {"centered": bool(self.estimator.fit_intercept)}
        if self.robust is not None:
            fields.update(self.robust.task_fields())
        fields.update((k, v) for k, v in self._next.items() if (k, v) != ("form", "gram"))
        return dict.fromkeys(sites, (fields, {}))  # one task for all: frames never change it

    def cross_check(self, replies):
        return {} if self.robust is None else self.robust.cross_check(replies)

    def _previous(self):
        """The aggregate this round adds to (warm start), or None."""
        return getattr(self.estimator, "_aggregate", None) if self.warm_start else None

    def read_reply(self, site, frame):
        # O(d^2) checks per message; the PSD test runs once on the merge (_merged_and_owned).
        stats = ClientStatistics.from_payload(frame.fields, frame.arrays, client=site, psd=False)
        self._check_statistics(site, stats, frame)
        previous = self._previous()
        if previous is not None and stats.n_targets != previous.n_targets:
            reply_error(site, f"has {stats.n_targets} targets but earlier rounds had "
                              f"{previous.n_targets}.")
        return stats

    def _check_statistics(self, site, stats, frame):
        """Refuse statistics of another width or centering than the task's; robust limits."""
        expected = self._expected_features(frame)
        if stats.n_features != expected:
            reply_error(site, f"statistics have {stats.n_features} features, expected "
                              f"{expected}.")
        if stats.centered != bool(self.estimator.fit_intercept):
            centered = "centered" if stats.centered else "uncentered"
            reply_error(site, f"statistics are {centered} but the task asked for "
                              f"fit_intercept={self.estimator.fit_intercept}.")
        if self.robust is not None:
            self.robust.check(site, stats)

    def _check_model(self, coef, aggregate, replies):
        """Refuse a non-finite model: statistics within every cap can still overflow it,
        in float64 or in the round's dtype (float32 sites get a float32 model, and a
        target mean of 1e50 is finite in float64 but not there)."""
        dtype = self.round_dtype
        with np.errstate(over="ignore", invalid="ignore"):
            intercept = aggregate.y_mean - coef @ aggregate.x_mean if aggregate.centered else 0
            finite = all(np.all(np.isfinite(np.asarray(value, dtype=np.float64)))
                         and np.all(np.isfinite(np.asarray(value).astype(dtype)))
                         for value in (coef, intercept))
        if finite:
            return
        label = most_extreme_client(replies)
        reply_error(label, "the statistics give a non-finite model (this client's "
                           "message holds the most extreme values); nothing was applied.")

    def _expected_features(self, frame):
        """Number of features the statistics of a reply must have."""
        return frame.schema["n_features"]

    def pools_round(self, fields):
        if not (self._merges_replies and self.robust is None):
            return False
        return fields is None or set(fields) == {"centered"}

    def pooled_fold(self, site, reply, fewest_rows):
        stats = self.read_reply(site, reply)
        if not _parts_within_caps(stats, fewest_rows):
            return None
        fold = self.reply_fold()
        fold.add(stats)
        return fold

    def reply_fold(self):
        # A server whose apply reads the replies only through _merged_and_owned folds
        # them as they come (the same tree as merge_statistics, so the same
        # bits); robust aggregation compares every reply, so it keeps them.
        if not self._merges_replies or self.robust is not None:
            return None
        return StreamingMerge(owned=True)  # replies parsed here: no one else reads them

    def _merged_and_owned(self, replies):
        """``(merged, owned)``: statistics of all replies of the round (exact tree merge,
        label order), checked, and whether no one else holds their arrays (a merge of two
        or more replies, or of replies this server parsed), so that the Gram may lend work
        space to the checks and the solve.

        ``replies`` may be the :class:`~sklearn_fed.protocol.FoldedReplies`
        of :meth:`reply_fold`: merged already; single replies are then
        parsed again only if the merge fails its check, to name the culprit.
        """
        if isinstance(replies, FoldedReplies):
            fold = replies.fold
            merged = fold.result()
            owned = getattr(fold, "owns_result", False)
        else:
            merged = merge_statistics(replies[site] for site in sorted_labels(replies))
            owned = len(replies) > 1
        check_aggregate(merged, replies, in_place=owned)
        return merged, owned


class BaseFederatedRidge(
    FederatedEstimatorMixin, MultiOutputMixin, RegressorMixin, BaseEstimator
):
    """Shared machinery of the ridge estimators fitted from client statistics.

    Subclasses declare their roles and ``fit``; this class validates input and
    untrusted messages, sets ``coef_``/``intercept_`` from an aggregate, and
    predicts. ``fit`` and ``partial_fit`` on Dask collections run the same
    roles partition by partition (:mod:`sklearn_fed.dask`).
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
    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        X, y = self._validate_X_y(X, y, reset=reset)
        X, sample_weight = rows_and_weights(X, sample_weight)
        if self._finite_from_statistics:
            # The rows whose squares no statistic sums: stored entries of a sparse X,
            # rows of zero weight (the sites skip them).
            if sp.issparse(X):
                assert_all_finite(X.data, input_name="X", estimator_name=type(self).__name__)
            elif sample_weight is not None and not np.all(sample_weight > 0):
                assert_all_finite(X[sample_weight == 0], input_name="X",
                                  estimator_name=type(self).__name__)
        return X, y, sample_weight

    #: Whether ``fit`` leaves the NaN/inf check of a dense ``X`` to the statistics:
    #: every site sums the squares of its rows' entries (a site refuses to send
    #: non-finite sums, or the server refuses them), and a finite sum of squares
    #: has finite terms, so a run that succeeds proves ``X`` finite and saves one
    #: pass over it (a tenth of the fit at 100 features); a run that fails checks
    #: ``X`` then, to raise scikit-learn's error (:meth:`_simulate`). Only for
    #: families where NaN provably reaches every sum (not a sparse projection).
    _finite_from_statistics = False

    def _validate_X_y(self, X, y, *, reset):
        """Validate ``X`` and ``y`` with scikit-learn (a subclass may take a shortcut)."""
        return validate_regression(
            self, X, y, reset=reset, ensure_all_finite=not self._finite_from_statistics
        )

    def _fitted_state(self):
        """``(n_targets, centered)`` of the statistics ``partial_fit`` continues, or None."""
        aggregate = getattr(self, "_aggregate", None)
        return None if aggregate is None else (aggregate.n_targets, aggregate.centered)

    def _check_more_rows(self, X, y):
        self._check_seen(y, self._fitted_state())

    def _check_seen(self, y, seen):
        """A batch with another number of targets, or a changed ``fit_intercept``, is refused.

        ``seen`` is ``(n_targets, centered)`` of the earlier calls.
        """
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

    def _simulate(self, server, client, X, y, sample_weight, labels, rows, names):
        """:func:`run_simulation`, and scikit-learn's error if it failed on a non-finite ``X``.

        See ``_finite_from_statistics``: the run's failure is what proves ``X``
        not finite, so ``X`` is only scanned then.
        """
        try:
            # inf - inf in a site's sums is no news: the error below says what is wrong.
            with np.errstate(invalid="ignore" if self._finite_from_statistics else None):
                run_simulation(server, client, X, y, sample_weight, labels, rows, names)
        except Exception as exc:
            if self._finite_from_statistics and isinstance(X, np.ndarray):
                try:
                    assert_all_finite(X, input_name="X", estimator_name=type(self).__name__)
                except ValueError as not_finite:
                    raise not_finite from exc
            raise

    def _checked_alpha(self, n_targets):
        """``alpha`` as a float64 scalar or vector, checked with Ridge's messages."""
        if type(self.alpha) in (float, int) and 0 <= self.alpha < math.inf:  # the usual case
            return np.float64(self.alpha)
        alpha = np.asarray(self.alpha, dtype=np.float64).ravel()
        if alpha.size not in (1, n_targets):
            raise ValueError(
                "Number of targets and number of penalties do not correspond: "
                f"{alpha.size} != {n_targets} (alpha has {alpha.size} values, y has "
                f"{n_targets} targets)."
            )
        if np.any(~np.isfinite(alpha)) or np.any(alpha < 0):
            raise ValueError(f"alpha must be finite and non-negative; got {self.alpha!r}.")
        return alpha[0] if alpha.size == 1 else alpha

    def _read_messages(self, messages, *, keep_bytes=False):
        """Parse and validate untrusted client messages, all before using any.

        ``messages`` is a list (client labels 0..K-1) or a dict label ->
        message; a message is a ClientStatistics or its bytes. Each is
        validated once, in O(d^2); the PSD test runs on their merge. With
        ``keep_bytes``, a message given as bytes is returned as its bytes
        (parsed again when read): a server then never
        holds every message unpacked at once.
        """
        items = list(messages.items() if isinstance(messages, dict) else enumerate(messages))
        if not items:
            raise ValueError("fit_statistics needs at least one client message.")
        parsed, expected = [], {}  # widths of the first message, which every other matches
        for label, message in items:
            if isinstance(message, ClientStatistics):
                stats = message
            elif isinstance(message, (bytes, bytearray, memoryview)):
                stats = ClientStatistics.from_bytes(message, client=label, validate=False)
            else:
                reply_error(label, "expected ClientStatistics or bytes, got "
                                   f"{type(message).__name__}.")
            stats.validate(client=label, psd=False, **expected)
            expected = {"n_features": stats.n_features, "n_targets": stats.n_targets}
            if stats.centered != self.fit_intercept:
                reply_error(label, "statistics are "
                                   f"{'centered' if stats.centered else 'uncentered'} but "
                                   f"fit_intercept={self.fit_intercept}.")
            parsed.append((label, message if keep_bytes and stats is not message else stats))
        return parsed

    # ---------------------------------------------------------------- outputs
    def _set_coef(self, aggregate, coef, dtype):
        """Set ``coef_`` and ``intercept_`` (:func:`ridge_attributes`)."""
        self.coef_, self.intercept_ = ridge_attributes(aggregate, coef, dtype, self.fit_intercept)

    def _commit_solution(self, server, aggregate, coef, solver, ledger, clients,
                         previous_clients=()):
        """Set the fitted state from a server's final round (after every check passed)."""
        ledger.n_parameters = self._n_parameters(aggregate.n_features, aggregate.n_targets)
        self.solver_ = solver
        set_federation_attributes(self, server.schema, ledger, clients,
                                  previous_clients=previous_clients,
                                  n_features=aggregate.n_features)
        self._set_coef(aggregate, coef, server.round_dtype.type)

    def _n_parameters(self, n_features, n_targets):
        return (n_features + self.fit_intercept) * n_targets

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
