"""ProjectedFederatedRidge: one-shot ridge on randomly projected features.

The server broadcasts one integer seed; every client builds the same random
matrix ``R`` (d x m) from it with :mod:`sklearn.random_projection`, and sends
the sufficient statistics of ``X R`` (m x m Gram instead of d x d). The
server solves ridge in the projected space, ``w~``, and reports
``coef_ = R w~`` so that ``predict(X) = X coef_ + intercept_ = (X R) w~ + b``.
"""

import copy
from numbers import Integral, Real

import numpy as np
from sklearn.random_projection import (
    GaussianRandomProjection,
    SparseRandomProjection,
    johnson_lindenstrauss_min_dim,
)
from sklearn.utils import check_random_state

from .._compat import Interval, StrOptions, _fit_context
from ..statistics import ClientStatistics
from ._base import BaseFederatedRidge, solve_ridge

__all__ = ["ProjectedFederatedRidge", "shared_projection"]


def shared_projection(seed, n_features, n_components, kind="gaussian"):
    """The fitted random projection every client rebuilds from the broadcast seed.

    ``"gaussian"``: entries ``N(0, 1/m)``
    (:class:`~sklearn.random_projection.GaussianRandomProjection`);
    ``"sparse"``: Achlioptas/Li sparse entries
    (:class:`~sklearn.random_projection.SparseRandomProjection`, density
    ``1/sqrt(d)``). Only the shape of the dummy input is used, never data.
    """
    cls = GaussianRandomProjection if kind == "gaussian" else SparseRandomProjection
    projection = cls(n_components=n_components, random_state=int(seed))
    return projection.fit(np.zeros((1, n_features)))


class ProjectedFederatedRidge(BaseFederatedRidge):
    """Federated ridge on a shared random projection of the features.

    Clients upload ``m(m+1)/2 + m`` statistics values instead of
    ``d(d+1)/2 + d`` (Sec. IV-F of the one-shot federated ridge paper).
    ``R`` is drawn from a seed the server broadcasts (one integer of
    downlink), so every client uses the same ``R``. The model is reported in
    the original feature space. With ``m >= d`` no projection is made and the
    result equals :class:`FederatedRidge`. Read more in the
    :ref:`User Guide <private_projected>`.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Non-negative L2 penalty on the projected coefficients ``w~``.
    n_components : int or "auto", default="auto"
        Projected dimension ``m`` (>= 1). ``"auto"``:
        :func:`~sklearn.random_projection.johnson_lindenstrauss_min_dim`
        of the number of rows and ``eps``.
    projection : {"gaussian", "sparse"}, default="gaussian"
        Entries ``N(0, 1/m)``, or the sparse Achlioptas/Li projection.
    eps : float, default=0.1
        JL distortion used when ``n_components="auto"``, in (0, 1).
    fit_intercept : bool, default=True
    random_state : int, RandomState instance or None, default=None
        Draws the broadcast seed.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        ``R w~`` in the original feature space.
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept; ``0.0`` when ``fit_intercept=False``.
    n_components_ : int
        ``m`` actually used (``n_features`` when no projection was made).
    projected_ : bool
        Whether a projection was made (``m < d``).
    projection_seed_ : int
        The broadcast seed.
    components_ : ndarray or sparse matrix of shape (m, n_features)
        ``R^T``; ``None`` when not projected.
    uplink_values_ : dict
        Per client: ``"projected"`` ``m(m+1)/2 + m`` values (Gram triangle and
        feature sums), ``"full"`` ``d(d+1)/2 + d``, and their ``"ratio"``.
    communication_ : CommunicationLedger
        Actual bytes: each client's m-dimensional statistics message; the
        downlink counts the seed (8 bytes per client) and the model.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during fit, when ``X`` has string column names.
    clients_ : ndarray of shape (n_clients,)
        Labels of the clients whose statistics were aggregated.
    n_clients_ : int
        Number of clients.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import ProjectedFederatedRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 50)) @ rng.normal(size=(50, 50)) / 7
    >>> y = X[:, 0] + rng.normal(scale=0.1, size=200)
    >>> model = ProjectedFederatedRidge(n_components=20, random_state=0)
    >>> model = model.fit(X, y, clients=np.repeat([0, 1], 100))
    >>> model.coef_.shape, model.n_components_
    ((50,), 20)
    >>> model.uplink_values_["projected"], model.uplink_values_["full"]
    (230, 1325)
    """

    _parameter_constraints: dict = {
        **BaseFederatedRidge._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "projection": [StrOptions({"gaussian", "sparse"})],
        "eps": [Interval(Real, 0, 1, closed="neither")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        alpha=1.0,
        *,
        n_components="auto",
        projection="gaussian",
        eps=0.1,
        fit_intercept=True,
        random_state=None,
    ):
        self.alpha = alpha
        self.n_components = n_components
        self.projection = projection
        self.eps = eps
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # A fixed m < d keeps only an m-dimensional random subspace of the
        # coefficients: for isotropic features about (1 - m/d) of the signal is
        # lost whatever the data, so no R^2 floor can be promised. "auto"
        # picks m from the JL bound (distances kept within eps), so it can.
        tags.regressor_tags.poor_score = self.n_components != "auto"
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit on the projected statistics of every client.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None
        clients : array-like of shape (n_samples,), default=None
            Client label of each row. ``None``: one client.

        Returns
        -------
        self : ProjectedFederatedRidge
        """
        X, y, sample_weight, labels, rows = self._validate_rows(
            X, y, sample_weight, clients, reset=True
        )
        d = X.shape[1]
        if self.n_components == "auto":
            m = int(johnson_lindenstrauss_min_dim(X.shape[0], eps=self.eps))
        else:
            m = int(self.n_components)
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        projection = shared_projection(seed, d, m, self.projection) if m < d else None
        return self._absorb(X, y, sample_weight, labels, rows, None, projection, seed)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Add rows with the same projection (same seed) and refit exactly.

        Parameters
        ----------
        X, y, sample_weight, clients
            As in :meth:`fit`.

        Returns
        -------
        self : ProjectedFederatedRidge
        """
        if getattr(self, "_aggregate", None) is None:
            return self.fit(X, y, sample_weight=sample_weight, clients=clients)
        X, y, sample_weight, labels, rows = self._validate_more_rows(
            X, y, sample_weight, clients,
            seen=(self._aggregate.n_targets, self._aggregate.centered),
        )
        return self._absorb(
            X, y, sample_weight, labels, rows, self._aggregate, self._projection,
            self.projection_seed_,
        )

    def _absorb(self, X, y, sample_weight, labels, rows, previous, projection, seed):
        """Project, aggregate and solve; assign state only at the end."""
        d = X.shape[1]
        n_targets = 1 if y.ndim == 1 else y.shape[1]
        alpha = self._checked_alpha(n_targets)
        Z = X if projection is None else projection.transform(X)
        if previous is None:
            ledger = self._new_ledger(d, n_targets)
            known = []
        else:
            ledger = copy.deepcopy(self.communication_)
            known = list(self.clients_)
        aggregate = previous
        for label, client_rows in zip(labels, rows):
            stats = ClientStatistics.from_data(
                Z, y, sample_weight, centered=self.fit_intercept, rows=client_rows
            )
            ledger.record_upload(label, stats.nbytes)
            aggregate = stats if aggregate is None else aggregate.merge(stats)
        ledger.downlink_bytes += 8 * len(labels)  # the broadcast seed
        ledger.record_broadcast(len(labels), ledger.n_parameters)
        coef_projected = solve_ridge(aggregate.gram, aggregate.moment, alpha)
        m = d if projection is None else projection.n_components_
        if projection is None:
            coef, x_mean = coef_projected, aggregate.x_mean
        else:
            # coef = R w~ with R = components_.T; x_mean . coef = (x_mean R) . w~
            coef = np.asarray(projection.components_.T @ coef_projected.T).T
            x_mean = None
        seen = set(known)
        known += [label for label in labels if label not in seen]

        self._aggregate = aggregate
        self._projection = projection
        self.projection_seed_ = seed
        self.projected_ = projection is not None
        self.n_components_ = m
        self.components_ = None if projection is None else projection.components_
        full, reduced = d * (d + 1) // 2 + d, m * (m + 1) // 2 + m
        self.uplink_values_ = {"projected": reduced, "full": full, "ratio": full / reduced}
        self.communication_ = ledger
        self.clients_ = np.asarray(known)
        self.n_clients_ = len(known)
        if x_mean is None:
            # The intercept is y_mean - (x_mean R) w~, which _set_coef computes
            # from the projected means and projected coefficients.
            self._set_coef(aggregate, coef_projected, X.dtype)
            self.coef_ = coef.astype(X.dtype, copy=False)
            if aggregate.single_target:
                self.coef_ = self.coef_[0]
        else:
            self._set_coef(aggregate, coef, X.dtype)
        return self
