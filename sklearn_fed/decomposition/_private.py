"""PrivateFederatedPCA: PCA from one differentially private release of each site's Gram."""

import math
import types
from numbers import Real

import numpy as np
import scipy.sparse as sp

from .._compat import Interval
from ..preprocessing._base import OneRoundServer, TransformerClient
from ..preprocessing._private import (
    _PRIVACY_CONSTRAINTS,
    PrivateReleaseMixin,
    _stream,
    privacy_task_fields,
    read_privacy_task,
)
from ..privacy._releases import gaussian_release
from ..protocol import InvalidClientMessage, sorted_labels
from ._pca import FederatedPCA

__all__ = ["PrivateFederatedPCA"]


def _gram_sensitivity(bound):
    """L2 sensitivity of ``(n, sum of rows, upper triangle of X^T X)`` for ``||x|| <= bound``."""
    return math.sqrt(1.0 + bound**2 + bound**4)


class PrivatePCAClient(TransformerClient):
    """A site of :class:`PrivateFederatedPCA`: noisy count, sum and Gram of its clipped rows."""

    protocol = "decomposition.private_pca"

    def compute(self, task, X, y, sample_weight, rows):
        epsilon, delta, calibration, _ = read_privacy_task(task)
        bound = task.fields.get("feature_bound")
        if not (isinstance(bound, float) and 0 < bound < 1e6):
            raise InvalidClientMessage("server: malformed feature_bound in the task.", "server")
        X, _ = self._site_rows(X, None, rows)
        X = np.asarray(X, dtype=np.float64)
        norms = np.linalg.norm(X, axis=1)
        X = X * np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]  # clip each row
        upper = np.triu_indices(X.shape[1])
        total = np.concatenate([[X.shape[0]], X.sum(axis=0), (X.T @ X)[upper]])
        generator = _stream(self.estimator.random_state, task.site, self.protocol)
        noisy, _, _ = gaussian_release(total, _gram_sensitivity(bound), epsilon, delta,
                                       calibration, generator)
        return {}, {"sums": noisy}


class PrivatePCAServer(OneRoundServer):
    """Server of :class:`PrivateFederatedPCA`: sum the releases, center, eigendecompose."""

    protocol = "decomposition.private_pca"

    def _task_fields(self):
        fields = privacy_task_fields(self.estimator, self.warm_start)
        fields["feature_bound"] = float(self.estimator.feature_bound)
        return fields

    def read_reply(self, site, frame):
        d = frame.schema["n_features"]
        sums = frame.arrays.get("sums")
        size = 1 + d + d * (d + 1) // 2
        if frame.fields or set(frame.arrays) != {"sums"} or not (
                isinstance(sums, np.ndarray) and sums.dtype == np.float64
                and sums.shape == (size,) and np.all(np.isfinite(sums))
                and np.all(np.abs(sums) < 2.0**60)):
            self._fail(site, f"a private PCA reply is one finite float64 vector of {size}.")
        return sums

    def _model(self, replies):
        estimator = self.estimator
        d = self.schema.n_features
        total = sum(replies[site] for site in sorted_labels(replies))
        # post-processing: at least two rows, a symmetric Gram; negative eigenvalues
        # of the noisy covariance are set to zero by PCA's own computation
        n = max(2.0, total[0])
        mean = total[1 : 1 + d] / n
        gram = np.zeros((d, d))
        gram[np.triu_indices(d)] = total[1 + d :]
        gram = gram + np.triu(gram, 1).T
        centered = gram - n * np.outer(mean, mean)
        aggregate = types.SimpleNamespace(n_samples=round(n), n_features=d,
                                          gram=centered, x_mean=mean)
        fitted = estimator._fitted_from(aggregate, np.float64)
        return {**fitted, **estimator._privacy_after(self)}, d * fitted["n_components_"]


class PrivateFederatedPCA(PrivateReleaseMixin, FederatedPCA):
    """:class:`FederatedPCA` from one (epsilon, delta)-differentially private Gram per site.

    Each site scales every row to L2 norm at most ``feature_bound`` (a
    data-independent bound: state the features' ranges up front, e.g. with
    :class:`~sklearn_fed.privacy.RangeScaler`), and sends its row count, the
    sum of its rows and the upper triangle of their Gram ``X^T X``, once,
    with Gaussian noise (L2 sensitivity ``sqrt(1 + B^2 + B^4)``). The server
    sums the releases, centers the Gram and runs PCA's own
    ``covariance_eigh`` computation (negative eigenvalues of the noisy
    covariance set to zero: post-processing). See :doc:`/disclosure`.

    Parameters
    ----------
    n_components : int, float or "mle", default=None
    whiten, copy
        As in :class:`~sklearn.decomposition.PCA`.
    feature_bound : float, default=1.0
        Rows are clipped to this L2 norm.
    epsilon : float, default=1.0
    delta : float, default=1e-5
    calibration : {"analytic", "classic"}, default="analytic"
    random_state : None or int, default=None

    Attributes
    ----------
    components_, explained_variance_, mean_, n_components_, privacy_spent_, ...
        As :class:`FederatedPCA`'s, from the noisy Gram.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.decomposition import PrivateFederatedPCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(20000, 3)) * [0.3, 0.1, 0.02]
    >>> pca = PrivateFederatedPCA(n_components=1, epsilon=1.0, random_state=0)
    >>> pca = pca.fit(X, clients=np.arange(20000) % 4)
    >>> bool(abs(pca.components_[0, 0]) > 0.99), pca.privacy_spent_[1]
    (True, 1e-05)
    """

    _parameter_constraints: dict = {
        **FederatedPCA._parameter_constraints, **_PRIVACY_CONSTRAINTS,
        "feature_bound": [Interval(Real, 0, None, closed="neither")],
    }
    _server_role = PrivatePCAServer
    _client_role = PrivatePCAClient
    _exact_federation = False

    def __init__(self, n_components=None, *, feature_bound=1.0, epsilon=1.0, delta=1e-5,
                 calibration="analytic", random_state=None, copy=True, whiten=False):
        super().__init__(n_components=n_components, copy=copy, whiten=whiten)
        self.feature_bound = feature_bound
        self.epsilon = epsilon
        self.delta = delta
        self.calibration = calibration
        self.random_state = random_state

    def _validate_rows(self, X, *, reset):
        if sp.issparse(X):
            raise TypeError("PrivateFederatedPCA takes dense rows only.")
        return super()._validate_rows(X, reset=reset)
