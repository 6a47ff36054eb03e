"""Differentially private federated scaler and one-hot encoder.

Each site releases its statistics once per ``fit`` with Gaussian noise
(:mod:`sklearn_fed.privacy._releases`), calibrated by the package's one
calibration from the task's ``epsilon`` and ``delta`` (so a server cannot ask
for less noise than the epsilon it announces, and a site's
``SitePolicy(max_epsilon=...)`` applies), and the server records the release
in the one accountant: ``privacy_spent_`` as in
:class:`~sklearn_fed.PrivateFederatedRidge`, composed by a
:class:`~sklearn_fed.pipeline.FederatedPipeline` with its other steps.
"""

import math
from numbers import Real

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from .._compat import Interval, StrOptions, _unique
from ..privacy import PrivacyLedger, gaussian_noise_std, noise_generator
from ..privacy._releases import (
    check_bounds,
    moments_from_noisy_sums,
    moments_noise_std,
    noisy_column_moments,
    noisy_value_counts,
)
from ..protocol import InvalidClientMessage, encode_values, sorted_labels
from ..protocol._fields import reply_value_counts, task_field
from ._base import OneRoundServer, TransformerClient
from ._data import FederatedStandardScaler
from ._encoders import FederatedOneHotEncoder, OneHotEncoderServer

__all__ = ["PrivateFederatedOneHotEncoder", "PrivateFederatedStandardScaler"]

_PRIVACY_CONSTRAINTS = {
    "epsilon": [Interval(Real, 0, None, closed="neither")],
    "delta": [Interval(Real, 0, 1, closed="neither")],
    "calibration": [StrOptions({"analytic", "classic"})],
    "random_state": ["random_state"],
}


def privacy_task_fields(estimator, warm_start):
    """The fields of a private release's task: its budget, calibration and release number."""
    ledger = estimator.__dict__.get("_privacy") if warm_start else None
    return {"epsilon": float(estimator.epsilon), "delta": float(estimator.delta),
            "calibration": str(estimator.calibration),
            "release": 0 if ledger is None else len(ledger)}


def read_privacy_task(task):
    """A private task's budget, checked at the site (the task is untrusted)."""
    epsilon = task_field(task, "epsilon", float)
    delta = task_field(task, "delta", float)
    calibration = task_field(task, "calibration", str)
    release = task_field(task, "release", int)
    if not (0 < epsilon < math.inf and 0 < delta < 1 and calibration in ("analytic", "classic")
            and 0 <= release < 2**32):
        raise InvalidClientMessage("server: malformed privacy budget in the task.", "server")
    return epsilon, delta, calibration, release


def _stream(random_state, site, protocol):
    """``generator_for(*released)``: the site's noise stream, keyed on what it releases."""
    return lambda *released: noise_generator(random_state, site, protocol, *released)


class PrivateReleaseMixin:
    """``privacy_spent_`` and the ledger commit of an estimator whose fit is one private release."""

    @property
    def privacy_spent_(self):
        """``(epsilon, delta)`` of every release of this estimator so far."""
        ledger = self.__dict__.get("_privacy")
        if ledger is None:
            raise AttributeError("privacy_spent_ is set by fit.")
        return ledger.epsilon(self.delta_), self.delta_

    def _selects_values(self):
        """Whether the release selects values by a noisy threshold (half of delta for it)."""
        return False

    def _planned_release(self):
        """``(noise_multiplier, extra_delta)`` of one fit, known from the parameters."""
        if self._selects_values():
            return gaussian_noise_std(self.epsilon, self.delta / 2, 1.0,
                                      calibration=self.calibration), self.delta / 2
        return gaussian_noise_std(self.epsilon, self.delta, 1.0,
                                  calibration=self.calibration), 0.0

    def _privacy_after(self, server):
        """The privacy attributes after this release: the ledger (recorded on a copy),
        the delta it reports and the epsilon of one release."""
        noise_multiplier, extra_delta = self._planned_release()
        previous = self.__dict__.get("_privacy") if server.warm_start else None
        ledger = PrivacyLedger() if previous is None else previous.copy()
        ledger.record(noise_multiplier, extra_delta=extra_delta)
        # The Gaussian releases compose exactly (GDP) at any delta; the selections'
        # deltas add up: one release is (epsilon, delta), k of them report
        # delta + (k - 1) extra deltas.
        return {"_privacy": ledger, "epsilon_": float(self.epsilon),
                "delta_": float(self.delta) + ledger.extra_delta - extra_delta}


# ---------------------------------------------------------------- scaler
class PrivateStandardScalerClient(TransformerClient):
    """A site of :class:`PrivateFederatedStandardScaler`: noisy clipped column sums."""

    protocol = "preprocessing.private_standard_scaler"

    def compute(self, task, X, y, sample_weight, rows):
        if sample_weight is not None:
            raise ValueError(f"site {task.site!r}: a private scaler takes no sample weights "
                             "(a weight would change a row's sensitivity).")
        epsilon, delta, calibration, _ = read_privacy_task(task)
        try:
            low, high = check_bounds(task.fields.get("bounds"), X.shape[1])
        except ValueError as exc:
            raise InvalidClientMessage(f"server: {exc}", "server") from exc
        X, _ = self._site_rows(X, None, rows)
        generator = _stream(self.estimator.random_state, task.site, self.protocol)
        sums, _, _ = noisy_column_moments(X, low, high, 2, epsilon, delta, calibration,
                                          generator)
        return {}, {"sums": sums}


class PrivateStandardScalerServer(OneRoundServer):
    """Server of :class:`PrivateFederatedStandardScaler`: sum the noisy sums, post-process."""

    protocol = "preprocessing.private_standard_scaler"

    def _task_fields(self):
        fields = privacy_task_fields(self.estimator, self.warm_start)
        # as given (one pair, or one per column): each site checks them against its columns
        fields["bounds"] = np.asarray(self.estimator.bounds, dtype=np.float64).tolist()
        return fields

    def read_reply(self, site, frame):
        d = frame.schema["n_features"]
        sums = frame.arrays.get("sums")
        if frame.fields or set(frame.arrays) != {"sums"} or not (
                isinstance(sums, np.ndarray) and sums.dtype == np.float64
                and sums.shape == (3, d) and np.all(np.isfinite(sums))
                and np.all(np.abs(sums) < 2.0**60)):
            self._fail(site, f"a private scaler reply is one finite (3, {d}) float64 array.")
        return sums

    def _model(self, replies):
        estimator = self.estimator
        d = self.schema.n_features
        low, high = check_bounds(estimator.bounds, d)
        total = sum(replies[site] for site in sorted_labels(replies))
        if self.warm_start and getattr(estimator, "_noisy_sums", None) is not None:
            total = total + estimator._noisy_sums  # released sums add up
        site_std = moments_noise_std(d, 2, estimator.epsilon, estimator.delta,
                                     estimator.calibration)
        count, mean, variance = moments_from_noisy_sums(
            total, low, high, site_std * math.sqrt(len(replies)))
        seen = np.rint(count).astype(np.int64)
        scale = None
        if estimator.with_std:
            scale = np.sqrt(variance)
            scale[scale == 0] = 1.0
        return {
            "_noisy_sums": total,
            "n_samples_seen_": seen[0] if np.all(seen == seen[0]) else seen,
            "mean_": mean if estimator.with_mean or estimator.with_std else None,
            "var_": variance if estimator.with_std else None,
            "scale_": scale,
            **estimator._privacy_after(self),
        }, 2 * d


class PrivateFederatedStandardScaler(PrivateReleaseMixin, FederatedStandardScaler):
    """:class:`FederatedStandardScaler` from (epsilon, delta)-differentially private column sums.

    Each site clips every column to the stated ``bounds`` (known in advance,
    never read from the rows), maps it onto ``[-1, 1]`` and sends, per
    column, its count of values, their sum and sum of squares, once, with
    Gaussian noise for (epsilon, delta)-DP of every row (L2 sensitivity
    ``sqrt(3 d)``: a row changes each of the ``3 d`` numbers by at most 1).
    The server sums the sites' releases and derives ``mean_`` and ``var_``
    (post-processing: a count below one is one, the mean is kept inside the
    bounds and the variance non-negative). Missing values (NaN) are left out
    of their column, as StandardScaler does. See :doc:`/disclosure`.

    Parameters
    ----------
    bounds : tuple (low, high) or array-like of shape (n_features, 2)
        Data-independent range of every column (or of each).
    epsilon : float, default=1.0
    delta : float, default=1e-5
    calibration : {"analytic", "classic"}, default="analytic"
        The Gaussian calibration (:func:`~sklearn_fed.privacy.gaussian_noise_std`).
    random_state : None or int, default=None
        ``None`` for privacy; an int gives reproducible noise (see
        :func:`~sklearn_fed.privacy.noise_generator`).
    copy, with_mean, with_std : bool, default=True
        As in :class:`~sklearn.preprocessing.StandardScaler`.

    Attributes
    ----------
    mean_, var_, scale_, n_samples_seen_
        As StandardScaler's, from the noisy sums (``n_samples_seen_`` is the
        noisy count).
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` of every release so far (``partial_fit`` adds one).
    clients_, n_clients_, communication_, n_features_in_, feature_names_in_

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.preprocessing import PrivateFederatedStandardScaler
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, size=(3000, 2))
    >>> scaler = PrivateFederatedStandardScaler(bounds=(0, 10), epsilon=1.0, random_state=0)
    >>> scaler = scaler.fit(X, clients=np.arange(3000) % 3)
    >>> bool(np.all(np.abs(scaler.mean_ - 5) < 0.3)), scaler.privacy_spent_[1]
    (True, 1e-05)
    """

    _parameter_constraints: dict = {**StandardScaler._parameter_constraints,
                                    **_PRIVACY_CONSTRAINTS, "bounds": ["array-like"]}
    _server_role = PrivateStandardScalerServer
    _client_role = PrivateStandardScalerClient
    _exact_federation = False

    def __init__(self, bounds, *, epsilon=1.0, delta=1e-5, calibration="analytic",
                 random_state=None, copy=True, with_mean=True, with_std=True):
        super().__init__(copy=copy, with_mean=with_mean, with_std=with_std)
        self.bounds = bounds
        self.epsilon = epsilon
        self.delta = delta
        self.calibration = calibration
        self.random_state = random_state

    def _validate_rows(self, X, *, reset):
        if sp.issparse(X):
            raise TypeError("PrivateFederatedStandardScaler takes dense rows only.")
        X = super()._validate_rows(X, reset=reset)
        check_bounds(self.bounds, X.shape[1])
        return X

    def _fitted_state(self):
        return getattr(self, "_noisy_sums", None)


# ---------------------------------------------------------------- encoder
class PrivateOneHotEncoderClient(TransformerClient):
    """A site of :class:`PrivateFederatedOneHotEncoder`: categories above a noisy threshold."""

    protocol = "preprocessing.private_onehot_encoder"

    def compute(self, task, X, y, sample_weight, rows):
        epsilon, delta, calibration, _ = read_privacy_task(task)
        X, _ = self._site_rows(X, None, rows)
        columns, _, _ = self.estimator._check_X(X, ensure_all_finite="allow-nan")
        counted = [_unique(column, return_counts=True) for column in columns]
        policy = self.policy_in_force()
        generator = _stream(self.estimator.random_state, task.site, self.protocol)
        released, _, _, _ = noisy_value_counts(
            counted, epsilon, delta, calibration, generator,
            min_count=None if policy is None else policy.min_count)
        fields, arrays = {"columns": []}, {}
        for i, (values, counts) in enumerate(released):
            fields["columns"].append(encode_values(values, f"c{i}", arrays))
            arrays[f"n{i}"] = counts.astype(np.int64)
        return fields, arrays


class PrivateOneHotEncoderServer(OneHotEncoderServer):
    """Server of :class:`PrivateFederatedOneHotEncoder`: union of released categories."""

    protocol = "preprocessing.private_onehot_encoder"

    def _task_fields(self):
        return privacy_task_fields(self.estimator, self.warm_start)

    def read_reply(self, site, frame):
        def fail(reason):
            self._fail(site, reason)

        columns = frame.fields.get("columns")
        d = frame.schema["n_features"]
        if set(frame.fields) != {"columns"} or not (isinstance(columns, list)
                                                    and len(columns) == d):
            fail(f"a private encoder reply describes {d} columns.")
        expected = {f"c{i}" for i, c in enumerate(columns) if isinstance(c, dict) and "array" in c}
        if set(frame.arrays) != expected | {f"n{i}" for i in range(d)}:
            fail("its arrays do not match its columns.")
        parsed = [reply_value_counts(frame, descriptor, f"n{i}", site, i)
                  for i, descriptor in enumerate(columns)]
        # the site's noisy row count (post-processing): its first column's released counts
        n = max(1, int(parsed[0][1].sum())) if parsed else 1
        return n, parsed

    def _model(self, replies):
        fitted, n_parameters = super()._model(replies)
        return {**fitted, **self.estimator._privacy_after(self)}, n_parameters


class PrivateFederatedOneHotEncoder(PrivateReleaseMixin, FederatedOneHotEncoder):
    """:class:`FederatedOneHotEncoder` whose categories are selected by noisy counts.

    Each site counts its categories per column, adds Gaussian noise to the
    counts and releases only the categories whose noisy count reaches a
    threshold (``1 + sigma Phi^-1(1 - delta / (2 d))``, and at least the
    site policy's ``min_count``), with their noisy counts: a category of one
    row is released with probability at most ``delta / 2``, and the release
    is (epsilon, delta)-DP (half of ``delta`` for the noise, half for the
    selection; Gopi et al. 2020). Categories not released are unknown to the
    fitted encoder: use ``handle_unknown="ignore"`` or
    ``"infrequent_if_exist"`` to encode them. See :doc:`/disclosure`.

    Parameters
    ----------
    epsilon : float, default=1.0
    delta : float, default=1e-5
    calibration : {"analytic", "classic"}, default="analytic"
    random_state : None or int, default=None
    categories, drop, sparse_output, dtype, handle_unknown, min_frequency, \
max_categories, feature_name_combiner
        As in :class:`~sklearn.preprocessing.OneHotEncoder` (``min_frequency``
        and ``max_categories`` read the noisy counts).

    Attributes
    ----------
    categories_, privacy_spent_, clients_, n_clients_, communication_

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.preprocessing import PrivateFederatedOneHotEncoder
    >>> X = np.array([["a"]] * 600 + [["b"]] * 400 + [["rare"]], dtype=object)
    >>> enc = PrivateFederatedOneHotEncoder(handle_unknown="ignore", random_state=0)
    >>> enc.fit(X, clients=np.arange(1001) % 2).categories_
    [array(['a', 'b'], dtype=object)]
    """

    _parameter_constraints: dict = {**OneHotEncoder._parameter_constraints,
                                    **_PRIVACY_CONSTRAINTS}
    _server_role = PrivateOneHotEncoderServer
    _client_role = PrivateOneHotEncoderClient
    _exact_federation = False

    def __init__(self, *, epsilon=1.0, delta=1e-5, calibration="analytic", random_state=None,
                 categories="auto", drop=None, sparse_output=True, dtype=np.float64,
                 handle_unknown="error", min_frequency=None, max_categories=None,
                 feature_name_combiner="concat"):
        super().__init__(categories=categories, drop=drop, sparse_output=sparse_output,
                         dtype=dtype, handle_unknown=handle_unknown,
                         min_frequency=min_frequency, max_categories=max_categories,
                         feature_name_combiner=feature_name_combiner)
        self.epsilon = epsilon
        self.delta = delta
        self.calibration = calibration
        self.random_state = random_state

    def _needs_counts(self):
        return True  # noisy counts always travel: they are what is released

    def _selects_values(self):
        return True

