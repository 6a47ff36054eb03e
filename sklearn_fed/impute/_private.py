"""PrivateFederatedSimpleImputer: column means or modes from differentially private releases."""

import types

import numpy as np
import scipy.sparse as sp
from sklearn.impute import SimpleImputer

from .._compat import StrOptions
from ..preprocessing._base import OneRoundServer, TransformerClient
from ..preprocessing._private import (
    _PRIVACY_CONSTRAINTS,
    PrivateReleaseMixin,
    _stream,
    privacy_task_fields,
    read_privacy_task,
)
from ..privacy._releases import (
    check_bounds,
    moments_from_noisy_sums,
    noisy_column_moments,
    noisy_value_counts,
)
from ..protocol import InvalidClientMessage, encode_values, sorted_labels
from ..protocol._fields import reply_value_counts
from ._base import FederatedSimpleImputer

__all__ = ["PrivateFederatedSimpleImputer"]


class PrivateSimpleImputerClient(TransformerClient):
    """A site of :class:`PrivateFederatedSimpleImputer`: noisy sums or noisy value counts."""

    protocol = "impute.private_simple_imputer"

    def compute(self, task, X, y, sample_weight, rows):
        estimator = self.estimator
        epsilon, delta, calibration, _ = read_privacy_task(task)
        X, _ = self._site_rows(X, None, rows)
        generator = _stream(estimator.random_state, task.site, self.protocol)
        fields = {"dtype": X.dtype.str}
        if estimator.strategy == "mean":
            try:
                low, high = check_bounds(task.fields.get("bounds"), X.shape[1])
            except ValueError as exc:
                raise InvalidClientMessage(f"server: {exc}", "server") from exc
            missing = estimator.missing_values
            values = np.asarray(X, dtype=np.float64)
            if not (isinstance(missing, float) and np.isnan(missing)):
                values = np.where(values == missing, np.nan, values)
            sums, _, _ = noisy_column_moments(values, low, high, 1, epsilon, delta,
                                              calibration, generator)
            return fields, {"sums": sums}
        counted = [estimator._value_counts(X, i) for i in range(X.shape[1])]
        policy = self.policy_in_force()
        released, _, _, _ = noisy_value_counts(
            counted, epsilon, delta, calibration, generator,
            min_count=None if policy is None else policy.min_count)
        fields["values"], arrays = [], {}
        for i, (values, counts) in enumerate(released):
            fields["values"].append(encode_values(values, f"v{i}", arrays))
            arrays[f"k{i}"] = counts.astype(np.int64)
        return fields, arrays


class PrivateSimpleImputerServer(OneRoundServer):
    """Server of :class:`PrivateFederatedSimpleImputer`."""

    protocol = "impute.private_simple_imputer"

    def _task_fields(self):
        fields = privacy_task_fields(self.estimator, self.warm_start)
        if self.estimator.strategy == "mean":
            fields["bounds"] = np.asarray(self.estimator.bounds, dtype=np.float64).tolist()
        return fields

    def read_reply(self, site, frame):
        def fail(reason):
            self._fail(site, reason)

        d = frame.schema["n_features"]
        fields = frame.fields
        try:
            dtype = np.dtype(fields.get("dtype"))
        except (TypeError, ValueError):
            fail("malformed dtype.")
        if dtype.kind not in "iufO":
            fail(f"dtype {dtype} is not one SimpleImputer accepts.")
        if self.estimator.strategy == "mean":
            sums = frame.arrays.get("sums")
            if set(fields) != {"dtype"} or set(frame.arrays) != {"sums"} or not (
                    isinstance(sums, np.ndarray) and sums.dtype == np.float64
                    and sums.shape == (2, d) and np.all(np.isfinite(sums))
                    and np.all(np.abs(sums) < 2.0**60)):
                fail(f"a private mean reply is one finite (2, {d}) float64 array.")
            return dtype, sums
        descriptors = fields.get("values")
        if set(fields) != {"dtype", "values"} or not (
                isinstance(descriptors, list) and len(descriptors) == d):
            fail(f"a private most_frequent reply gives the values of {d} columns.")
        return dtype, [reply_value_counts(frame, descriptor, f"k{i}", site, i)
                       for i, descriptor in enumerate(descriptors)]

    def _model(self, replies):
        estimator = self.estimator
        labels = sorted_labels(replies)
        d = self.schema.n_features
        dtype = np.result_type(*[replies[site][0] for site in labels])
        if estimator.strategy == "mean":
            low, high = check_bounds(estimator.bounds, d)
            total = sum(replies[site][1] for site in labels)
            count, mean, _ = moments_from_noisy_sums(total, low, high)
            present = np.where(total[0] >= 1, np.rint(count), 0).astype(np.int64)
            moments = types.SimpleNamespace(n_samples=present, mean=mean, n_features=d)
            value_counts = None
        else:
            value_counts = [[replies[site][1][i] for site in labels] for i in range(d)]
            present = np.array([sum(int(c.sum()) for _, c in column) for column in value_counts],
                               dtype=np.int64)
            moments = types.SimpleNamespace(n_samples=present, n_features=d)
        fitted = estimator._fitted_from(int(present.max(initial=0)), moments, value_counts,
                                        dtype, False)
        return {**fitted, **estimator._privacy_after(self)}, d


class PrivateFederatedSimpleImputer(PrivateReleaseMixin, FederatedSimpleImputer):
    """:class:`FederatedSimpleImputer` (mean, most_frequent) from differentially private releases.

    ``strategy="mean"``: each site clips its present values to ``bounds``
    (known in advance) and sends, per column, the noisy count and sum of
    its present values (L2 sensitivity ``sqrt(2 d)``); the server's mean is
    their ratio, kept inside the bounds. ``"most_frequent"``: each site sends
    the values of each column whose noisy count reaches a threshold, with
    their noisy counts (as :class:`~sklearn_fed.preprocessing.PrivateFederatedOneHotEncoder`);
    the server imputes the value of largest summed noisy count. Either is
    (epsilon, delta)-DP per row, recorded in ``privacy_spent_``. A column with
    no value released is treated as empty (``keep_empty_features``).
    ``add_indicator`` is not offered (which columns have missing values is
    itself a count). See :doc:`/disclosure`.

    Parameters
    ----------
    strategy : {"mean", "most_frequent"}, default="mean"
    bounds : tuple (low, high) or array-like of shape (n_features, 2), default=None
        Data-independent range of the columns; required for ``"mean"``.
    epsilon : float, default=1.0
    delta : float, default=1e-5
    calibration : {"analytic", "classic"}, default="analytic"
    random_state : None or int, default=None
    missing_values, fill_value, copy, keep_empty_features
        As in :class:`~sklearn.impute.SimpleImputer`.

    Attributes
    ----------
    statistics_, privacy_spent_, clients_, n_clients_, communication_

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.impute import PrivateFederatedSimpleImputer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, size=(4000, 1))
    >>> X[::10] = np.nan
    >>> imp = PrivateFederatedSimpleImputer(bounds=(0, 10), random_state=0)
    >>> imp = imp.fit(X, clients=np.arange(4000) % 4)
    >>> bool(abs(imp.statistics_[0] - 5) < 0.3), imp.privacy_spent_[1]
    (True, 1e-05)
    """

    _parameter_constraints: dict = {
        **SimpleImputer._parameter_constraints, **_PRIVACY_CONSTRAINTS,
        "strategy": [StrOptions({"mean", "most_frequent"})],
        "bounds": ["array-like", None],
    }
    _server_role = PrivateSimpleImputerServer
    _client_role = PrivateSimpleImputerClient
    _exact_federation = False

    def __init__(self, *, strategy="mean", bounds=None, epsilon=1.0, delta=1e-5,
                 calibration="analytic", random_state=None, missing_values=np.nan,
                 fill_value=None, copy=True, keep_empty_features=False):
        super().__init__(missing_values=missing_values, strategy=strategy,
                         fill_value=fill_value, copy=copy, add_indicator=False,
                         keep_empty_features=keep_empty_features)
        self.bounds = bounds
        self.epsilon = epsilon
        self.delta = delta
        self.calibration = calibration
        self.random_state = random_state

    def _selects_values(self):
        return self.strategy == "most_frequent"

    def _validate_rows(self, X, *, reset):
        if sp.issparse(X):
            raise TypeError("PrivateFederatedSimpleImputer takes dense rows only.")
        X = super()._validate_rows(X, reset=reset)
        if self.strategy == "mean":
            if self.bounds is None:
                raise ValueError("strategy='mean' needs bounds=(low, high): the range of the "
                                 "values known in advance, never read from the rows.")
            check_bounds(self.bounds, X.shape[1])
        return X
