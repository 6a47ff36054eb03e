"""ProjectedFederatedRidge: one-shot ridge on randomly projected features."""

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.random_projection import (
    GaussianRandomProjection,
    SparseRandomProjection,
    johnson_lindenstrauss_min_dim,
)
from sklearn.utils import check_random_state

from .._compat import Interval, StrOptions
from ..base import set_federation_attributes
from ..protocol._fields import reply_keys, reply_number, server_error
from ..protocol._schema import count_rows
from ..statistics import ClientStatistics
from ._base import (
    BaseFederatedRidge,
    StatisticsClient,
    StatisticsServer,
    fit_method,
    task_field,
    task_step,
)
from ._solver import solve_ridge

__all__ = ["ProjectedFederatedRidge", "shared_projection"]

_STEPS = ("count", "statistics")


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


# Rows per block: one block of X (and its projection) of about this size.
_BLOCK_BYTES = 8 * 2**20


# A sparse R of at most this many entries is multiplied as a dense matrix.
_DENSE_ENTRIES = 2**21


def projector(projection):
    """``projection.transform`` of rows the site has validated already.

    Dense float rows are multiplied by ``R^T`` directly, without
    ``transform``'s validation of each block (a pass over it); other inputs
    go through ``transform``. A sparse ``R`` of at most 2**21 entries is
    multiplied as a dense matrix: BLAS beats the sparse product even at the
    sparse projection's density of ``1/sqrt(d)``, and runs on every BLAS thread.
    """
    components = projection.components_
    if sp.issparse(components) and np.prod(components.shape) <= _DENSE_ENTRIES:
        components = components.toarray()
    transposed = components.T

    def project(block):
        if isinstance(block, np.ndarray) and block.dtype.type in (np.float64, np.float32):
            return np.asarray(block @ transposed)
        return projection.transform(block)

    return project


def projected_statistics(X, y, sample_weight, rows, project, centered):
    """Statistics of ``X[rows] R`` computed block by block (never a copy of X).

    Each block of rows is projected (``n_b x m``) and reduced to
    :class:`~sklearn_fed.statistics.ClientStatistics`; blocks are merged
    exactly (Chan et al.), so the result does not depend on the block size
    beyond round-off, and neither a site's rows nor ``X R`` exist whole.
    """
    n_samples = X.shape[0]
    positions = range(n_samples) if rows is None else (
        range(n_samples)[rows] if isinstance(rows, slice) else rows)
    block = max(1, _BLOCK_BYTES // (8 * X.shape[1]))
    statistics = None
    for start in range(0, len(positions), block):
        take = positions[start : start + block]
        if isinstance(take, range):
            take = slice(take.start, take.stop)  # a view of X, not a gather
        part = ClientStatistics.from_data(
            project(X[take]), y[take], None if sample_weight is None else sample_weight[take],
            centered=centered, check_input=False,
        )
        statistics = part if statistics is None else statistics.merge(part)
    return statistics


class ProjectedClient(StatisticsClient):
    """A site of :class:`ProjectedFederatedRidge`.

    A ``"count"`` task (only for ``n_components="auto"``) asks for the row
    count; a ``"statistics"`` task gives the projection's seed, kind and
    ``m``, and the site sends the statistics of ``X R`` (of ``X`` when
    ``m >= n_features``).
    """

    protocol = "ridge.projected"

    def summarize(self, task, X, y, sample_weight, rows):
        step = task_step(task, _STEPS)
        if step == "count":
            return int(count_rows(X.shape[0], rows))
        centered = task_field(task, "centered", bool)
        seed = task_field(task, "seed", int)
        m = task_field(task, "n_components", int)
        kind = task_field(task, "projection", str)
        if not (0 <= seed < 2**32 and m > 0 and kind in ("gaussian", "sparse")):
            server_error("malformed projection task.")
        if m < X.shape[1]:
            # Every site of a simulated federation rebuilds the same R: build it once.
            identity = (seed, X.shape[1], m, kind)
            cached = getattr(self, "_projection", None)
            if cached is None or cached[0] != identity:
                cached = self._projection = (identity, projector(shared_projection(*identity)))
            return projected_statistics(X, y, sample_weight, rows, cached[1], centered)
        return ClientStatistics.from_data(
            X, y, sample_weight, centered=centered, rows=rows, check_input=False
        )

    def merge(self, first, second):
        return first + second if isinstance(first, int) else first.merge(second)

    def finish(self, task, summary):
        if task_step(task, _STEPS) == "count":
            return {"n_samples": summary}, {}
        return summary.to_payload()


class ProjectedServer(StatisticsServer):
    """Server of :class:`ProjectedFederatedRidge`: broadcast a seed, solve in the projection.

    With ``n_components="auto"`` a first round collects the sites' row
    counts, since the Johnson-Lindenstrauss dimension depends on the total.
    """

    protocol = "ridge.projected"
    # apply reads the statistics round only through _merged_and_owned; every site projects
    # with the same R, so their statistics add up to those of all rows projected.
    _merges_replies = True

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        if self.robust is not None and (self.robust.feature_bound or self.robust.target_bound):
            raise ValueError(
                "ProjectedFederatedRidge cannot enforce feature_bound or target_bound: "
                "sites send statistics of projected rows."
            )
        previous = self._previous()
        if previous is not None:  # partial_fit: the same projection
            self.seed, self.m = estimator.projection_seed_, estimator.n_components_
        else:
            rng = check_random_state(estimator.random_state)
            self.seed = int(rng.randint(np.iinfo(np.int32).max))
            n_components = estimator.n_components
            self.m = None if n_components == "auto" else int(n_components)
        self._done = False

    def plan(self, sites):
        if self._done:
            return {}
        if self.m is None:
            return {site: ({"step": "count"}, {}) for site in sites}
        fields = {
            "step": "statistics",
            "centered": bool(self.estimator.fit_intercept),
            "seed": self.seed,
            "n_components": self.m,
            "projection": self.estimator.projection,
        }
        return {site: (dict(fields), {}) for site in sites}

    def read_reply(self, site, frame):
        if self.m is not None:
            return super().read_reply(site, frame)
        reply_keys(frame, site, fields=["n_samples"])
        return reply_number(frame, "n_samples", site, low=1, high=2**63 - 1, integer=True)

    def _expected_features(self, frame):
        return min(self.m, frame.schema["n_features"])

    def reply_fold(self):
        return None if self.m is None else super().reply_fold()  # row counts are summed

    def pools_round(self, fields):
        if fields is None or fields.get("step") != "statistics":
            return fields is None and super().pools_round(None)
        return super().pools_round({"centered": fields["centered"]})

    def apply(self, replies, ledger):
        if self.m is None:  # the count round: now m is known
            total = sum(replies.values())
            self.m = int(johnson_lindenstrauss_min_dim(total, eps=self.estimator.eps))
            return
        estimator = self.estimator
        previous = self._previous()
        d = self.schema.n_features
        batch = self._merged_and_owned(replies)[0]
        aggregate = batch if previous is None else previous.merge(batch)
        n_targets = aggregate.n_targets
        coef_projected = solve_ridge(
            aggregate.gram, aggregate.moment, estimator._checked_alpha(n_targets)
        )
        self._check_model(coef_projected, aggregate, replies)
        m = min(self.m, d)
        projection = shared_projection(self.seed, d, m, estimator.projection) if m < d else None
        ledger.n_parameters = estimator._n_parameters(d, n_targets)
        earlier = () if previous is None else estimator.clients_
        dtype = self.round_dtype.type
        # commit: nothing above touched the estimator
        estimator._aggregate = aggregate
        estimator.projection_seed_ = self.seed
        estimator.projected_ = projection is not None
        estimator.n_components_ = m
        estimator.components_ = None if projection is None else projection.components_
        full, reduced = d * (d + 1) // 2 + d, m * (m + 1) // 2 + m
        estimator.uplink_values_ = {"projected": reduced, "full": full, "ratio": full / reduced}
        set_federation_attributes(estimator, self.schema, ledger, replies,
                                  previous_clients=earlier, n_features=d)
        # The intercept is y_mean - (x_mean R) w~: computed from the projected
        # means and coefficients; coef_ = R w~ is reported in feature space.
        estimator._set_coef(aggregate, coef_projected, dtype)
        if projection is not None:
            coef = np.asarray(projection.components_.T @ coef_projected.T).T.astype(dtype)
            estimator.coef_ = coef[0] if aggregate.single_target else coef
        self._done = True


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

    _server_role = ProjectedServer
    _client_role = ProjectedClient
    _exact_federation = True  # any partition gives the same projected ridge

    _dask_rows = "partitions"

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

    @fit_method
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit on the projected statistics of every client."""
        return self._fit(X, y, sample_weight, clients)

    @fit_method(partial=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Add rows with the same projection (same seed) and refit exactly."""
        return self._fit(X, y, sample_weight, clients, partial=True)
