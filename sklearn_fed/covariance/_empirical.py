"""FederatedEmpiricalCovariance: the maximum likelihood covariance from per-site statistics.

This module is the worked example of the developers' guide (``docs/developers.rst``
includes its roles verbatim): a federated estimator written against the public
API only, :mod:`sklearn_fed.protocol` for the roles, :mod:`sklearn_fed.statistics`
for the message and :class:`sklearn_fed.base.FederatedEstimatorMixin` for ``fit``.
"""

import warnings

import numpy as np
from sklearn.covariance import EmpiricalCovariance
from sklearn.utils.validation import validate_data

from ..base import FederatedEstimatorMixin, fit_method, set_federation_attributes
from ..protocol import BlockwiseClient, InvalidClientMessage, Server
from ..statistics import ClientStatistics, StreamingMerge

__all__ = ["FederatedEmpiricalCovariance"]


class EmpiricalCovarianceClient(BlockwiseClient):
    """A site: its row count, mean and centered (or raw) Gram; no targets."""

    protocol = "covariance.empirical"  # tasks and replies are "<protocol>/task", "/reply"
    needs_y = False
    targets_in_reply = False  # check_rows leaves y out
    accept_sparse = False

    def check_rows(self, X, y, sample_weight, schema, site):
        # the default checks (finite numbers, the task's features) are EmpiricalCovariance's;
        # it takes no targets and no weights: they are left out of the reply
        return super().check_rows(X, None, None, schema, site)

    def summarize(self, task, X, y, sample_weight, rows):
        centered = task.fields.get("centered")
        if type(centered) is not bool:
            raise InvalidClientMessage("server: the task's 'centered' must be a bool.", "server")
        return ClientStatistics.from_data(X, None, centered=centered, rows=rows,
                                          check_input=False)

    def merge(self, first, second):  # two blocks of one site's rows (Chan et al.)
        return first.merge(second)

    def finish(self, task, summary):
        return summary.to_payload()

    def replies_are_independent(self, tasks):
        return True  # a reply reads only its task and rows: simulated sites may use threads


class EmpiricalCovarianceServer(Server):
    """The server: one round, the replies merged exactly, the covariance of the merge."""

    protocol = "covariance.empirical"

    def plan(self, sites):
        if self.round > 0:  # one round, then done
            return {}
        task = {"centered": not self.estimator.assume_centered}
        return {site: (dict(task), {}) for site in sites}

    def read_reply(self, site, frame):
        stats = ClientStatistics.from_payload(  # types, shapes, caps, counts, symmetric PSD
            frame.fields, frame.arrays, client=site, psd=True, n_targets=0)
        if (stats.n_features != frame.schema["n_features"]
                or stats.centered == self.estimator.assume_centered
                or stats.weight_sum != stats.n_samples):  # unweighted rows
            raise InvalidClientMessage(
                f"client {site!r}: statistics of the wrong features, centering or weight.", site)
        return stats

    def reply_fold(self):
        return StreamingMerge()  # replies merged as they are read, in label order

    def apply(self, replies, ledger):
        estimator, merged = self.estimator, replies.fold.result()  # finite and PSD
        n_samples, dtype = merged.n_samples, self.round_dtype
        if n_samples == 1:
            warnings.warn("Only one sample available. You may want to reshape your data array")
        if estimator.assume_centered:  # as EmpiricalCovariance: X.T @ X / n in X's dtype
            location = np.zeros(merged.n_features)
            covariance = (merged.gram / n_samples).astype(dtype)
        else:  # np.cov(X.T, bias=1): float64 whatever X's dtype; the mean in X's dtype
            location = merged.x_mean.astype(dtype)
            covariance = merged.gram / n_samples
        # commit: nothing above changed the estimator
        estimator._set_covariance(covariance)  # covariance_ and precision_, as scikit-learn
        estimator.location_ = location
        ledger.n_parameters = merged.n_features * (merged.n_features + 3) // 2
        set_federation_attributes(estimator, self.schema, ledger, replies)


class FederatedEmpiricalCovariance(FederatedEstimatorMixin, EmpiricalCovariance):
    """:class:`~sklearn.covariance.EmpiricalCovariance` fitted from per-site statistics.

    Each site sends one message: its row count, the mean of its rows and
    their centered Gram matrix (a :class:`~sklearn_fed.ClientStatistics`
    without targets, ``d (d + 3) / 2 + 2`` values; raw products with
    ``assume_centered=True``). The server merges them exactly and stably
    (the pairwise update of Chan, Golub & LeVeque) and sets ``location_``,
    ``covariance_`` and ``precision_`` as EmpiricalCovariance does on the
    pooled rows, with the same dtypes. ``score``, ``mahalanobis``,
    ``error_norm`` and ``get_precision`` are EmpiricalCovariance's own.

    This estimator is the worked example of :doc:`/developers`.

    Parameters
    ----------
    store_precision : bool, default=True
        Whether to store the (pseudo-)inverse of the covariance.
    assume_centered : bool, default=False
        If True, the rows are not centered: sites send raw products and
        ``location_`` is zero.

    Attributes
    ----------
    location_ : ndarray of shape (n_features,)
        The mean of the pooled rows (zero with ``assume_centered=True``).
    covariance_ : ndarray of shape (n_features, n_features)
        The maximum likelihood covariance of the pooled rows.
    precision_ : ndarray of shape (n_features, n_features) or None
        Its pseudo-inverse, when ``store_precision`` is True.
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during ``fit``, when ``X`` had string
        column names.
    clients_ : ndarray of shape (`n_clients_`,)
        Labels of the sites that sent statistics.
    n_clients_ : int
        Number of sites.
    communication_ : CommunicationLedger
        Bytes actually sent and received.

    See Also
    --------
    sklearn.covariance.EmpiricalCovariance : The estimator on pooled rows.
    sklearn_fed.FederatedPCA : PCA from the same per-site statistics.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.covariance import EmpiricalCovariance
    >>> from sklearn_fed.covariance import FederatedEmpiricalCovariance
    >>> rng = np.random.RandomState(0)
    >>> X = rng.multivariate_normal([5.0, -3.0], [[0.8, 0.3], [0.3, 0.4]], size=500)
    >>> fed = FederatedEmpiricalCovariance().fit(X, clients=np.arange(500) % 4)
    >>> fed.covariance_.round(4)
    array([[0.7569, 0.2819],
           [0.2819, 0.3929]])
    >>> bool(np.allclose(fed.covariance_, EmpiricalCovariance().fit(X).covariance_,
    ...                  rtol=1e-12, atol=0))
    True
    >>> fed.n_clients_, fed.location_.round(2), fed.mahalanobis(X[:2]).round(2)
    (4, array([ 5.06, -2.98]), array([3.73, 6.34]))
    """

    _server_role = EmpiricalCovarianceServer
    _client_role = EmpiricalCovarianceClient
    _exact_federation = True  # any split of the rows into sites gives the same model

    @fit_method(X=("array-like of shape (n_samples, n_features)",
                   "The rows, as EmpiricalCovariance's ``fit`` takes them."),
                clients="Site label of each row. ``None``: one site.")
    def fit(self, X, y=None, clients=None):
        """Fit on rows split among sites by ``clients``: one message per site."""
        return self._fit(X, None, None, clients)

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        # EmpiricalCovariance's validation; integers become float64, as its results are
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=reset)
        return X, None, None
