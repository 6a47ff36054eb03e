"""FederatedStandardScaler and FederatedMinMaxScaler: one message of per-column aggregates."""

import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import MinMaxScaler, StandardScaler

from .._compat import (
    FLOAT_DTYPES,
    _handle_zeros_in_scale,
    _is_constant_feature,
    validate_data,
)
from ..base import fit_method
from ..protocol import ColumnExtremes, CountedColumns, sorted_labels
from ..protocol._fields import reply_values, reply_within_dtype
from ..statistics import ColumnMoments
from ._base import FederatedTransformerMixin, OneRoundServer, TransformerClient

__all__ = ["FederatedMinMaxScaler", "FederatedStandardScaler"]


# ----------------------------------------------------------------- standard
class StandardScalerClient(TransformerClient):
    """A site of :class:`FederatedStandardScaler`: its :class:`~sklearn_fed.ColumnMoments`."""

    protocol = "preprocessing.standard_scaler"
    # Column moments of fewer rows than the site policy's min_count are not sent.
    disclosure = (CountedColumns("n_samples", ("weight_sum", "mean", "m2")),)

    def compute(self, task, X, y, sample_weight, rows):
        order = self.estimator._moments_order()
        moments = ColumnMoments.from_data(X, sample_weight, order=order, rows=rows)
        fields, arrays = moments.to_payload()
        fields.update(sparse=bool(sp.issparse(X)), weighted=sample_weight is not None)
        return fields, arrays

    def replies_are_independent(self, tasks):
        return True  # a reply reads only its task and rows: simulated sites may use threads


class StandardScalerServer(OneRoundServer):
    """Server of :class:`FederatedStandardScaler`: merge moments, set the scaler's attributes."""

    protocol = "preprocessing.standard_scaler"

    def read_reply(self, site, frame):
        sparse, weighted = frame.fields.get("sparse"), frame.fields.get("weighted")
        if set(frame.fields) != {"order", "sparse", "weighted"} or not (
                type(sparse) is bool and type(weighted) is bool):
            self._fail(site, f"fields {sorted(frame.fields)}: expected order and the booleans "
                             "sparse and weighted.")
        moments = ColumnMoments.from_payload(
            {"order": frame.fields["order"]}, frame.arrays, client=site,
            n_features=frame.schema["n_features"], order=self.estimator._moments_order(),
        )
        if moments.mean is not None:
            reply_within_dtype(frame, "mean", moments.mean, site)
        return moments, sparse, weighted

    def _model(self, replies):
        estimator = self.estimator
        # the merged moments of earlier calls (partial_fit), or None
        previous = getattr(estimator, "_aggregate", None) if self.warm_start else None
        labels = sorted_labels(replies)
        batch = self._merged({site: replies[site][0] for site in labels})
        moments = batch if previous is None else previous.merge(batch)
        sparse = all(replies[site][1] for site in labels)
        weighted = any(replies[site][2] for site in labels)
        if previous is not None:
            weighted = weighted or estimator._weighted
        attributes = estimator._attributes_from(moments, sparse, weighted, self.round_dtype.type)
        return dict(attributes, _aggregate=moments, _weighted=weighted), 2 * moments.n_features


class FederatedStandardScaler(FederatedTransformerMixin, StandardScaler):
    """:class:`~sklearn.preprocessing.StandardScaler` fitted from per-site column moments.

    Each site sends, per column, its count of non-missing values, their
    weight sum, weighted mean and centered sum of squares
    (:class:`~sklearn_fed.statistics.ColumnMoments`, ``4 d`` values); the
    server merges them exactly (Chan et al.) and sets ``mean_``, ``var_``,
    ``scale_`` and ``n_samples_seen_`` as StandardScaler would on the pooled
    rows: NaN skipped per column, sample weights, sparse input
    (``with_mean=False``), near-constant features given a unit scale, the
    same dtypes. ``transform``, ``inverse_transform``,
    ``get_feature_names_out`` and ``set_output`` are StandardScaler's own.

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    copy, with_mean, with_std : bool, default=True
        As in :class:`~sklearn.preprocessing.StandardScaler`.

    Attributes
    ----------
    scale_, mean_, var_, n_samples_seen_, n_features_in_, feature_names_in_
        As in :class:`~sklearn.preprocessing.StandardScaler`, for the pooled
        rows of every site (and every ``partial_fit`` call).
    clients_ : ndarray of shape (`n_clients_`,)
        Labels of the sites that sent moments.
    n_clients_ : int
    communication_ : CommunicationLedger
        Bytes actually sent and received.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklearn_fed.preprocessing import FederatedStandardScaler
    >>> X = np.array([[0.0, 1.0], [2.0, np.nan], [4.0, 5.0], [6.0, 3.0]])
    >>> fed = FederatedStandardScaler().fit(X, clients=[0, 0, 1, 1])
    >>> fed.mean_, fed.n_samples_seen_
    (array([3., 3.]), array([4., 3.]))
    >>> bool(np.allclose(fed.transform(X), StandardScaler().fit(X).transform(X), equal_nan=True))
    True
    """

    _server_role = StandardScalerServer
    _client_role = StandardScalerClient
    _broadcast_attributes = ("n_samples_seen_", "mean_", "var_", "scale_")

    def _moments_order(self):
        return 2 if self.with_mean or self.with_std else 0

    def _validate_rows(self, X, *, reset):
        X = validate_data(
            self, X, accept_sparse=("csr", "csc"), dtype=FLOAT_DTYPES,
            ensure_all_finite="allow-nan", reset=reset,
        )
        if sp.issparse(X) and self.with_mean:
            raise ValueError(
                "Cannot center sparse matrices: pass `with_mean=False` "
                "instead. See docstring for motivation and alternatives."
            )
        return X

    def _attributes_from(self, moments, sparse, weighted, dtype):
        """StandardScaler's fitted attributes for merged moments, with its dtype conventions."""
        if self._moments_order() == 0:
            # StandardScaler then counts non-missing values (weights only when sparse)
            seen = moments.weight_sum if sparse and weighted else moments.n_samples
            seen = seen.astype(dtype if weighted else np.int64)
            mean = var = scale = None
        else:
            seen = moments.weight_sum if weighted else moments.n_samples
            seen = seen.astype(dtype if sparse else np.float64)
            empty = moments.weight_sum == 0
            mean = np.where(empty, np.nan, moments.mean)
            with np.errstate(invalid="ignore", divide="ignore"):
                var = np.where(empty, np.nan, moments.m2 / moments.weight_sum)
            if not self.with_std:
                var = None
        if self.with_std:
            constant = _is_constant_feature(var, mean, seen)
            scale = _handle_zeros_in_scale(np.sqrt(var), copy=False, constant_mask=constant)
        else:
            scale = None
        if np.max(seen) == np.min(seen):  # one count for all columns: a scalar, as sklearn
            seen = seen[0]
        return {"n_samples_seen_": seen, "mean_": mean, "var_": var, "scale_": scale}

    @fit_method
    def fit(self, X, y=None, sample_weight=None, clients=None):
        """Fit on rows split among sites by ``clients``: one message per site."""
        return self._fit(X, None, sample_weight, clients)

    @fit_method(partial=True)
    def partial_fit(self, X, y=None, sample_weight=None, clients=None):
        """Add rows (from any sites): the result equals StandardScaler on all rows so far."""
        return self._fit(X, None, sample_weight, clients, partial=True)

    def _fitted_state(self):
        return getattr(self, "_aggregate", None)


# ------------------------------------------------------------------ min-max
class MinMaxScalerClient(TransformerClient):
    """A site of :class:`FederatedMinMaxScaler`: per column, its minimum and maximum value."""

    protocol = "preprocessing.minmax_scaler"
    # Extremes are single rows' values: exact only where the site's policy opts in.
    disclosure = (ColumnExtremes("data_min", "data_max"),)

    def compute(self, task, X, y, sample_weight, rows):
        X, _ = self._site_rows(X, None, rows)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: NaN, as sklearn
            data_min, data_max = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
        return {"n_samples": int(X.shape[0])}, {"data_min": data_min, "data_max": data_max}

    def replies_are_independent(self, tasks):
        return True  # a reply reads only its task and rows: simulated sites may use threads


class MinMaxScalerServer(OneRoundServer):
    """Server of :class:`FederatedMinMaxScaler`: the smallest minimum, the largest maximum."""

    protocol = "preprocessing.minmax_scaler"

    def read_reply(self, site, frame):
        n = frame.fields.get("n_samples")
        if set(frame.fields) != {"n_samples"} or not (type(n) is int and 0 < n < 2**63):
            self._fail(site, "malformed row count.")
        if set(frame.arrays) != {"data_min", "data_max"}:
            self._fail(site, f"arrays must be data_min and data_max; got {sorted(frame.arrays)}.")
        d = frame.schema["n_features"]
        # of the dtype of the site's rows (its schema's): float32 rows cannot have a
        # minimum of -1e300, which the server's float32 model would make -inf
        low, high = (reply_values(frame, name, (d,), site, allow_nan=True)
                     for name in ("data_min", "data_max"))
        if not np.array_equal(np.isnan(low), np.isnan(high)) or np.any(low > high):
            self._fail(site, "data_min exceeds data_max, or only one of them is NaN.")
        return n, low, high

    def _model(self, replies):
        estimator = self.estimator
        labels = sorted_labels(replies)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            low = np.nanmin([replies[site][1] for site in labels], axis=0)
            high = np.nanmax([replies[site][2] for site in labels], axis=0)
        n = sum(replies[site][0] for site in labels)
        dtype = self.round_dtype.type
        low, high = low.astype(dtype), high.astype(dtype)
        if self.warm_start and hasattr(estimator, "data_min_"):
            # as MinMaxScaler.partial_fit combines batches (NaN-propagating)
            low = np.minimum(estimator.data_min_, low)
            high = np.maximum(estimator.data_max_, high)
            n += estimator.n_samples_seen_
        return dict(estimator._attributes_from(low, high), n_samples_seen_=n), 2 * low.shape[0]


class FederatedMinMaxScaler(FederatedTransformerMixin, MinMaxScaler):
    """:class:`~sklearn.preprocessing.MinMaxScaler` fitted from per-site column extremes.

    Each site sends, per column, the minimum and maximum of its values (NaN
    skipped); the server keeps the smallest and the largest and sets
    ``data_min_``, ``data_max_``, ``data_range_``, ``scale_`` and ``min_``
    exactly as MinMaxScaler on the pooled rows. Unlike moments, an extreme
    is the value of one row: the model itself is made of such values, so
    a federated MinMaxScaler cannot hide them (use
    :class:`FederatedStandardScaler` where that matters). A deployed site
    sends them only if its :class:`~sklearn_fed.protocol.SitePolicy` has
    ``exact_extremes=True``; by default it sends its ``min_count``-th smallest
    and largest values rounded outward (see :doc:`/disclosure`).

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    feature_range : tuple (min, max), default=(0, 1)
    copy : bool, default=True
    clip : bool, default=False
        As in :class:`~sklearn.preprocessing.MinMaxScaler`.

    Attributes
    ----------
    min_, scale_, data_min_, data_max_, data_range_, n_samples_seen_, n_features_in_, \
feature_names_in_
        As in :class:`~sklearn.preprocessing.MinMaxScaler`, for the pooled rows.
    clients_ : ndarray of shape (`n_clients_`,)
    n_clients_ : int
    communication_ : CommunicationLedger

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.preprocessing import FederatedMinMaxScaler
    >>> X = np.array([[0.0, 10.0], [2.0, 30.0], [4.0, 20.0]])
    >>> fed = FederatedMinMaxScaler().fit(X, clients=["a", "b", "b"])
    >>> fed.data_min_, fed.transform([[1.0, 25.0]])
    (array([ 0., 10.]), array([[0.25, 0.75]]))
    """

    _server_role = MinMaxScalerServer
    _client_role = MinMaxScalerClient
    _broadcast_attributes = (
        "n_samples_seen_", "scale_", "min_", "data_min_", "data_max_", "data_range_",
    )

    def _validate_rows(self, X, *, reset):
        if sp.issparse(X):
            raise TypeError(
                "MinMaxScaler does not support sparse input. "
                "Consider using MaxAbsScaler instead."
            )
        return validate_data(
            self, X, reset=reset, dtype=FLOAT_DTYPES, ensure_all_finite="allow-nan"
        )

    def _attributes_from(self, data_min, data_max):
        """MinMaxScaler's formulas, applied to the merged extremes."""
        low, high = self.feature_range
        if low >= high:
            raise ValueError(
                "Minimum of desired feature range must be smaller than maximum. "
                f"Got {self.feature_range}."
            )
        low = np.asarray(low, dtype=data_min.dtype)
        high = np.asarray(high, dtype=data_min.dtype)
        data_range = data_max - data_min
        scale = (high - low) / _handle_zeros_in_scale(data_range, copy=True)
        return {"scale_": scale, "min_": low - data_min * scale, "data_min_": data_min,
                "data_max_": data_max, "data_range_": data_range}

    def _check_before_rows(self, *, partial):
        self._attributes_from(np.zeros(1), np.zeros(1))  # checks feature_range before any round

    @fit_method(partial=True)
    def partial_fit(self, X, y=None, clients=None):
        """Add rows (from any sites), as MinMaxScaler.partial_fit does."""
        return self._fit(X, None, None, clients, partial=True)

    def _fitted_state(self):
        return getattr(self, "n_samples_seen_", None)
