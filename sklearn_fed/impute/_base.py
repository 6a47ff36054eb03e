"""FederatedSimpleImputer: column means, modes or constants from per-site aggregates."""

import numpy as np
import scipy.sparse as sp
from sklearn.impute import SimpleImputer

from .._compat import StrOptions, _encode, _get_mask, _unique
from ..preprocessing._base import (
    FederatedTransformerMixin,
    OneRoundServer,
    TransformerClient,
)
from ..protocol import (
    CountedColumns,
    CountedValues,
    decode_state,
    encode_values,
    sorted_labels,
)
from ..protocol._fields import (
    reply_dtype,
    reply_value_counts,
    reply_within_dtype,
    server_error,
)
from ..statistics import ColumnMoments

__all__ = ["FederatedSimpleImputer"]


class SimpleImputerClient(TransformerClient):
    """A site of :class:`FederatedSimpleImputer`: per column, what its strategy merges."""

    protocol = "impute.simple_imputer"
    # A column mean of fewer rows than the site policy's min_count is not sent
    # (the column counts as missing there); most_frequent's values counted fewer
    # times are left out of its histogram.
    disclosure = (CountedColumns("n_samples", ("weight_sum", "mean")),
                  CountedValues("values", counts="k{i}"))

    def compute(self, task, X, y, sample_weight, rows):
        estimator = self.estimator
        X, _ = self._site_rows(X, None, rows)
        order = 1 if estimator.strategy == "mean" else 0
        moments = ColumnMoments.from_data(X, order=order, missing_values=estimator.missing_values)
        fields, arrays = moments.to_payload()
        fields.update(n_samples=int(X.shape[0]), dtype=X.dtype.str, sparse=sp.issparse(X))
        if estimator.strategy == "most_frequent":
            fields["values"] = []
            for i in range(X.shape[1]):
                values, counts = estimator._value_counts(X, i)
                fields["values"].append(encode_values(values, f"v{i}", arrays))
                arrays[f"k{i}"] = counts
        return fields, arrays


class SimpleImputerServer(OneRoundServer):
    """Server of :class:`FederatedSimpleImputer`: merge counts, means or value counts."""

    protocol = "impute.simple_imputer"

    def read_reply(self, site, frame):
        def fail(reason):
            self._fail(site, reason)

        estimator = self.estimator
        fields = dict(frame.fields)
        mode = estimator.strategy == "most_frequent"
        expected = {"order", "n_samples", "dtype", "sparse"} | ({"values"} if mode else set())
        n, sparse = fields.get("n_samples"), fields.get("sparse")
        if set(fields) != expected or not (type(n) is int and 0 < n < 2**63) or (
                type(sparse) is not bool):
            fail(f"malformed imputer reply (fields {sorted(fields)}).")
        dtype = self._read_dtype(fields["dtype"], frame, fail)
        d = frame.schema["n_features"]
        names = {"n_samples", "weight_sum", "mean"} if estimator.strategy == "mean" else {
            "n_samples", "weight_sum"}
        moments = ColumnMoments.from_payload(
            {"order": fields["order"]}, {k: v for k, v in frame.arrays.items() if k in names},
            client=site, n_features=d, order=1 if estimator.strategy == "mean" else 0,
        )
        if moments.mean is not None:
            reply_within_dtype(frame, "mean", moments.mean, site)
        if np.any(moments.n_samples > n) or not np.array_equal(
                moments.weight_sum, moments.n_samples.astype(np.float64)):
            fail("its counts exceed its rows, or its weights are not its counts.")
        counts = None
        if mode:
            counts = self._read_value_counts(fields["values"], frame, moments, site, dtype, fail)
        elif set(frame.arrays) != names:
            fail(f"unexpected arrays {sorted(set(frame.arrays) - names)}.")
        return n, dtype, sparse, moments, counts

    def _read_dtype(self, text, frame, fail):
        """The dtype of the site's rows: what SimpleImputer keeps for this strategy, and
        for floats exactly the reply schema's (the server's reference, not the site's word).

        ``mean`` validates to floats, so only the schema's float dtype; the other
        strategies keep integer and object columns, which the schema writes as float64.
        """
        rows = reply_dtype(frame)
        allowed = {rows.str}
        if self.estimator.strategy != "mean" and rows == np.float64:
            allowed |= {"<i8", "<i4", "<u8", "<u4", "|O"}
        if not (isinstance(text, str) and text in allowed):
            fail(f"dtype {text!r} is not one of {sorted(allowed)} (its rows are {rows}).")
        return np.dtype(text)

    def _read_value_counts(self, descriptors, frame, moments, site, dtype, fail):
        d = moments.n_features
        if not (isinstance(descriptors, list) and len(descriptors) == d):
            fail(f"must give the value counts of {d} columns.")
        parsed = []
        for i, descriptor in enumerate(descriptors):
            # counts below the present rows when the site's policy suppressed rare values
            values, counts = reply_value_counts(frame, descriptor, f"k{i}", site, i,
                                                at_most=moments.n_samples[i])
            # values of the declared dtype (text exactly when it is object), never a
            # missing value or an infinity (neither is counted at a site)
            if (values.dtype.kind == "O") != (dtype.kind == "O") or (
                    dtype.kind != "O" and values.dtype != dtype):
                fail(f"column {i}: values of dtype {values.dtype}, the rows are {dtype}.")
            if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
                fail(f"column {i}: values must be finite.")
            if np.any(_get_mask(values, self.estimator.missing_values)):
                fail(f"column {i}: a missing value is counted as a value.")
            parsed.append((values, counts))
        return parsed

    def _model(self, replies):
        estimator = self.estimator
        labels = sorted_labels(replies)
        parts = [replies[site] for site in labels]
        n_rows = sum(part[0] for part in parts)
        dtype = np.result_type(*[part[1] for part in parts])
        sparse = all(part[2] for part in parts)
        moments = self._merged({site: replies[site][3] for site in labels})
        value_counts = None
        if estimator.strategy == "most_frequent":
            value_counts = [[part[4][i] for part in parts] for i in range(moments.n_features)]
        fitted = estimator._fitted_from(n_rows, moments, value_counts, dtype, sparse)
        return fitted, moments.n_features


class FederatedSimpleImputer(FederatedTransformerMixin, SimpleImputer):
    """:class:`~sklearn.impute.SimpleImputer` (mean, most_frequent, constant) from site aggregates.

    Each site sends, per column, how many values are present, and for
    ``strategy="mean"`` their mean (merged exactly, Chan et al.), for
    ``"most_frequent"`` how often each distinct value occurs (summed by the
    server; ties go to the smallest value, as SimpleImputer). The server
    sets ``statistics_`` and the ``indicator_`` of ``add_indicator=True``
    (columns with a missing value) as SimpleImputer on the pooled rows.
    ``"median"`` is not offered: an exact pooled median needs the sites'
    values, not a fixed-size aggregate. A deployed site's
    :class:`~sklearn_fed.protocol.SitePolicy` leaves out of its histogram the
    values it holds fewer than ``min_count`` times, and the mean of a column
    with fewer values (see :doc:`/disclosure`).

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    missing_values : int, float, str, np.nan, None or pandas.NA, default=np.nan
    strategy : {"mean", "most_frequent", "constant"}, default="mean"
    fill_value : str or numerical value, default=None
    copy : bool, default=True
    add_indicator : bool, default=False
    keep_empty_features : bool, default=False
        As in :class:`~sklearn.impute.SimpleImputer`.

    Attributes
    ----------
    statistics_, indicator_, n_features_in_, feature_names_in_
        As in :class:`~sklearn.impute.SimpleImputer`, for the pooled rows.
    clients_ : ndarray of shape (`n_clients_`,)
    n_clients_ : int
    communication_ : CommunicationLedger

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.impute import FederatedSimpleImputer
    >>> X = np.array([[1.0, np.nan], [np.nan, 4.0], [3.0, 6.0]])
    >>> imp = FederatedSimpleImputer().fit(X, clients=["a", "b", "b"])
    >>> imp.statistics_, imp.transform([[np.nan, np.nan]])
    (array([2., 5.]), array([[2., 5.]]))
    """

    _parameter_constraints: dict = {
        **SimpleImputer._parameter_constraints,
        "strategy": [StrOptions({"mean", "most_frequent", "constant"})],
    }
    _server_role = SimpleImputerServer
    _client_role = SimpleImputerClient
    _broadcast_attributes = ("statistics_", "_fit_dtype", "_fill_dtype")

    def _validate_rows(self, X, *, reset):
        return self._validate_input(X, in_fit=True)

    def _value_counts(self, X, i):
        """Distinct present values of column ``i`` (sorted as scikit-learn sorts) and counts."""
        if sp.issparse(X):  # CSC: the column's stored values, and its implicit zeros
            column = X.data[X.indptr[i] : X.indptr[i + 1]]
            zeros = X.shape[0] - column.shape[0]
        else:
            column, zeros = X[:, i], 0
        column = column[~_get_mask(column, self.missing_values)]
        if zeros:
            column = np.concatenate([column, np.zeros(zeros, dtype=column.dtype)])
        if column.size == 0:
            return column, np.zeros(0, dtype=np.int64)
        values, counts = _unique(column, return_counts=True)
        return values, np.asarray(counts, dtype=np.int64)

    def _fitted_from(self, n_rows, moments, value_counts, dtype, sparse):
        """SimpleImputer's fitted attributes from the merged aggregates."""
        present = moments.n_samples
        empty = present == 0
        if self.fill_value is None:
            fill_value = 0 if dtype.kind in "iuf" else "missing_value"
        else:
            fill_value = self.fill_value
        if self.strategy == "constant":
            if sparse:  # SimpleImputer's sparse fit keeps float statistics
                statistics = np.empty(len(present))
                statistics.fill(fill_value)
            else:
                statistics = np.full(len(present), fill_value, dtype=object)
            if not self.keep_empty_features:
                statistics[empty] = np.nan
        elif self.strategy == "mean":
            statistics = np.where(empty, 0.0 if self.keep_empty_features else np.nan,
                                  moments.mean)
        else:
            statistics = np.empty(len(present), dtype=object if dtype.kind == "O" else None)
            for i, parts in enumerate(value_counts):
                statistics[i] = self._most_frequent(i, parts, empty[i])
        return {
            "statistics_": statistics,
            "_fit_dtype": dtype,
            "_fill_dtype": dtype,
            "indicator_": self._indicator(n_rows > present),
        }

    def _most_frequent(self, column, parts, empty):
        """The most frequent value of the merged counts; ties: the smallest, as SimpleImputer."""
        if empty:
            return 0 if self.keep_empty_features else np.nan
        # a site without a present value in this column sends an empty array (of
        # a numeric dtype, even for object columns): nothing to count, and its
        # empty encoding would be a float index
        parts = [(values, counts) for values, counts in parts if values.size]
        if not parts:
            # the column has present values, but the sites' disclosure control
            # suppressed every one of them: there is no mode to take
            raise ValueError(
                f"column {column}: most_frequent: no site released a value of a column with "
                "present values (each was seen fewer times than the sites' disclosure "
                "threshold min_count); use strategy='mean' or 'constant' for it, or fit "
                "with sites that hold more rows of each value.")
        values = np.concatenate([v for v, _ in parts])
        union = _unique(values)
        total = np.zeros(union.shape[0], dtype=np.int64)
        for site_values, counts in parts:
            np.add.at(total, _encode(site_values, uniques=union, check_unknown=False), counts)
        return union[int(np.argmax(total))]  # union is sorted: the first maximum is the smallest

    def _indicator(self, has_missing):
        """The fitted MissingIndicator of ``add_indicator``: the columns with a missing value."""
        scratch = SimpleImputer(missing_values=self.missing_values,
                                add_indicator=self.add_indicator)
        scratch._fit_indicator(np.asarray(has_missing, dtype=bool)[None, :])
        return scratch.indicator_

    def _broadcast_state(self):
        fields, arrays = super()._broadcast_state()
        if self.indicator_ is not None:
            fields["indicator_features"] = {"values": encode_values(
                self.indicator_.features_, "indicator_features", arrays)}
        return fields, arrays

    def _load_broadcast_state(self, fields, arrays):
        fields = dict(fields)
        features = fields.pop("indicator_features", None)
        super()._load_broadcast_state(fields, arrays)
        has_missing = np.zeros(self.n_features_in_, dtype=bool)
        if features is not None:
            index = decode_state({"f": features}, arrays, ["f"], server_error)["f"]
            if index.dtype.kind not in "iu" or np.any(index < 0) or np.any(
                    index >= self.n_features_in_):
                server_error("malformed indicator features.")
            has_missing[index] = True
        self.indicator_ = self._indicator(has_missing)
        return self
