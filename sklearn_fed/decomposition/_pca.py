"""FederatedPCA: PCA (``svd_solver="covariance_eigh"``) from the merged centered Gram."""

from typing import ClassVar

import numpy as np
from sklearn.base import TransformerMixin
from sklearn.decomposition import PCA
from sklearn.utils.extmath import svd_flip

from .._compat import (
    _check_feature_names_in,
    _infer_dimension,
    check_is_fitted,
    validate_data,
)
from ..preprocessing._base import (
    FederatedTransformerMixin,
    OneRoundServer,
    TransformerClient,
)
from ..protocol import BlockwiseClient
from ..protocol._threads import MIN_ROWS_PER_THREAD
from ..statistics import (
    ClientStatistics,
    StreamingMerge,
    check_aggregate,
    most_extreme_client,
)
from ..statistics._validation import parts_within_caps

__all__ = ["FederatedPCA"]


class PCAClient(TransformerClient, BlockwiseClient):
    """A site of :class:`FederatedPCA`: its row count, mean and centered Gram (no targets)."""

    protocol = "decomposition.pca"

    def summarize(self, task, X, y, sample_weight, rows):
        return ClientStatistics.from_data(X, None, rows=rows, check_input=False)

    def merge(self, first, second):  # two blocks of one site's rows (Chan et al.)
        return first.merge(second)

    def finish(self, task, summary):
        return summary.to_payload()

    def replies_are_independent(self, tasks):
        return True  # a reply reads only its task and rows: simulated sites may use threads

    def fields_of_rows(self, fields, n_rows):
        return dict(fields, n_samples=n_rows, weight_sum=float(n_rows))


class PCAServer(OneRoundServer):
    """Server of :class:`FederatedPCA`: merge the Grams exactly, eigendecompose once."""

    protocol = "decomposition.pca"

    def read_reply(self, site, frame):
        stats = ClientStatistics.from_payload(
            frame.fields, frame.arrays, client=site, psd=False, n_targets=0
        )
        if stats.n_features != frame.schema["n_features"] or not stats.centered:
            self._fail(site, "statistics must be centered, one entry per feature.")
        return stats

    def reply_fold(self):
        # apply reads the replies only through their merge: fold them as they come
        # (the tree of merge_statistics, so the same bits)
        return StreamingMerge(owned=True)

    def pools_round(self, fields):
        return fields is None or fields == {}

    def pooled_fold(self, site, reply, fewest_rows):
        # The merged Gram is the pooled rows' (Chan et al.), so the model equals the
        # per-site run's to round-off. Only where that pays: a smaller fit runs per
        # site, and gives exactly the bits of the sites' own messages.
        stats = self.read_reply(site, reply)
        if stats.n_samples < MIN_ROWS_PER_THREAD or not parts_within_caps(stats, fewest_rows):
            return None
        fold = self.reply_fold()
        fold.add(stats)
        return fold

    def _model(self, replies):
        aggregate = self._merged(replies)
        check_aggregate(aggregate, replies)
        dtype = self.round_dtype.type
        with np.errstate(over="ignore", invalid="ignore"):
            fitted = self.estimator._fitted_from(aggregate, dtype)
        if any(np.isinf(value).any() for value in fitted.values()
               if np.asarray(value).dtype.kind == "f"):
            # statistics within every cap can still overflow the model, in float32 above all
            label = most_extreme_client(replies)
            self._fail(label, "its statistics overflow the model (they hold the most extreme "
                              f"values) in {np.dtype(dtype)}; nothing was applied.")
        return fitted, (fitted["n_components_"] + 1) * aggregate.n_features


class FederatedPCA(FederatedTransformerMixin, PCA):
    """:class:`~sklearn.decomposition.PCA` (``svd_solver="covariance_eigh"``) from site Grams.

    Each site sends its row count, mean and centered Gram
    (:class:`~sklearn_fed.statistics.ClientStatistics` without targets:
    ``d(d+3)/2 + 2`` values); the server merges them exactly (Chan et al.),
    and does what PCA's ``covariance_eigh`` solver does with the pooled
    covariance: its eigendecomposition, negative round-off eigenvalues
    clipped, components ordered by decreasing variance and signed by
    :func:`~sklearn.utils.extmath.svd_flip` (largest entry of each
    component positive), ``explained_variance_`` with the ``n - 1``
    denominator, ``n_components`` as an int, a variance fraction or
    ``"mle"``, and ``noise_variance_``. ``transform`` (with ``whiten``),
    ``inverse_transform``, ``score`` and ``get_covariance`` are PCA's own;
    ``get_feature_names_out`` gives PCA's names (``pca0``, ...).

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    n_components : int, float, "mle" or None, default=None
    copy : bool, default=True
    whiten : bool, default=False
        As in :class:`~sklearn.decomposition.PCA`.

    Attributes
    ----------
    components_, explained_variance_, explained_variance_ratio_, singular_values_, \
mean_, n_components_, n_samples_, noise_variance_, n_features_in_, feature_names_in_
        As in :class:`~sklearn.decomposition.PCA`, for the pooled rows.
    clients_ : ndarray of shape (`n_clients_`,)
    n_clients_ : int
    communication_ : CommunicationLedger

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.decomposition import PCA
    >>> from sklearn_fed.decomposition import FederatedPCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(40, 3)) @ [[2.0, 0, 0], [1.0, 1.0, 0], [0, 0, 0.1]]
    >>> fed = FederatedPCA(n_components=2).fit(X, clients=np.arange(40) % 4)
    >>> pca = PCA(n_components=2, svd_solver="covariance_eigh").fit(X)
    >>> bool(np.allclose(fed.components_, pca.components_))
    True
    >>> fed.get_feature_names_out().tolist()
    ['pca0', 'pca1']
    """

    _parameter_constraints: ClassVar[dict] = {
        name: PCA._parameter_constraints[name] for name in ("n_components", "copy", "whiten")}
    _server_role = PCAServer
    _client_role = PCAClient
    _broadcast_attributes = (
        "components_", "explained_variance_", "explained_variance_ratio_", "singular_values_",
        "mean_", "n_components_", "n_samples_", "noise_variance_",
    )
    # The solver is fixed: what the merged Gram gives. PCA's methods read these.
    svd_solver = "covariance_eigh"
    tol = 0.0
    iterated_power = "auto"
    n_oversamples = 10
    power_iteration_normalizer = "auto"
    random_state = None

    def __init__(self, n_components=None, *, copy=True, whiten=False):
        self.n_components = n_components
        self.copy = copy
        self.whiten = whiten

    def _validate_rows(self, X, *, reset):
        return validate_data(
            self, X, dtype=[np.float64, np.float32], accept_sparse=("csr", "csc"),
            ensure_2d=True, reset=reset,
        )

    def _fitted_from(self, aggregate, dtype):
        """PCA's ``covariance_eigh`` computation on the merged statistics."""
        n_samples, n_features = aggregate.n_samples, aggregate.n_features
        if n_samples < 2:
            raise ValueError(
                f"n_samples={n_samples}: a covariance (and so PCA) needs at least 2 samples."
            )
        n_components = min(n_samples, n_features) if self.n_components is None else (
            self.n_components)
        if n_components == "mle":
            if n_samples < n_features:
                raise ValueError("n_components='mle' is only supported if n_samples >= n_features")
        elif not 0 <= n_components <= min(n_samples, n_features):
            raise ValueError(
                f"n_components={n_components} must be between 0 and "
                f"min(n_samples, n_features)={min(n_samples, n_features)} with "
                "svd_solver='covariance_eigh'"
            )
        covariance = aggregate.gram / (n_samples - 1)
        eigenvalues, eigenvectors = np.linalg.eigh(covariance)
        eigenvalues, eigenvectors = eigenvalues[::-1].copy(), eigenvectors[:, ::-1]
        eigenvalues[eigenvalues < 0.0] = 0.0
        explained_variance = eigenvalues
        singular_values = np.sqrt(eigenvalues * (n_samples - 1))
        _, components = svd_flip(None, eigenvectors.T.copy(), u_based_decision=False)
        ratio = explained_variance / np.sum(explained_variance)
        if n_components == "mle":
            n_components = _infer_dimension(explained_variance, n_samples)
        elif 0 < n_components < 1.0:
            n_components = np.searchsorted(np.cumsum(ratio), n_components, side="right") + 1
        if n_components < min(n_features, n_samples):
            noise_variance = dtype(np.mean(explained_variance[n_components:]))
        else:
            noise_variance = 0.0
        return {
            "_fit_svd_solver": "covariance_eigh",
            "mean_": aggregate.x_mean.astype(dtype),
            "noise_variance_": noise_variance,
            "n_samples_": n_samples,
            "n_components_": n_components,
            "components_": components[:n_components].astype(dtype),
            "explained_variance_": explained_variance[:n_components].astype(dtype),
            "explained_variance_ratio_": ratio[:n_components].astype(dtype),
            "singular_values_": singular_values[:n_components].astype(dtype),
        }

    def get_feature_names_out(self, input_features=None):
        """Output feature names, as PCA names them: ``pca0``, ``pca1``, ...

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Only checked against ``feature_names_in_``.

        Returns
        -------
        feature_names_out : ndarray of str objects
        """
        check_is_fitted(self, "_n_features_out")
        _check_feature_names_in(self, input_features, generate_names=False)
        return np.asarray([f"pca{i}" for i in range(self._n_features_out)], dtype=object)

    # PCA's own runs PCA's private fit on the rows: fit the protocol, then transform
    fit_transform = TransformerMixin.fit_transform
