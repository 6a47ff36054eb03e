"""FESCRidge: one-shot averaging of local ridge models, weighted by sample size (FESC).

The protocol ``ridge.fesc``: what a site sends is what the FESC paper's clients
send, nothing more (its rounds are in the roles' docstrings).
"""

import collections
import math
from numbers import Real

import numpy as np

from .._compat import Interval, StrOptions
from ..base import set_federation_attributes
from ..protocol import Client, InvalidClientMessage, Server, label_key, sorted_labels
from ..protocol._fields import reply_array, reply_error, reply_keys, reply_number
from ..protocol._schema import count_rows
from ..statistics import ClientStatistics
from ._base import BaseFederatedRidge, fit_method, task_field, task_step
from ._solver import solve_ridge

__all__ = ["FESCRidge", "fesc_weights"]


def fesc_weights(n_samples):
    """FESC weights of clients with ``n_samples`` rows each (Eq. 9-10 of the FESC paper).

    The weights minimize the upper bound ``sum_i w_i**2 / n_i + w_i / n_i**2``
    of the mean squared error of ``sum_i w_i theta_i`` subject to
    ``sum_i w_i = 1`` and ``w_i >= 0``. With clients sorted by decreasing size,
    the ``K`` largest receive ``w_i = n_i * lam / 2 - 1 / (2 n_i)`` with
    ``lam = (2 + sum_{j<=K} 1/n_j) / sum_{j<=K} n_j``, the others 0, where
    ``K`` is the largest ``k`` with ``1 / n_(k)**2 <= lam_k`` (Eq. 10).

    Clients of equal size always receive equal weights, so the result does not
    depend on how ties are ordered.

    Parameters
    ----------
    n_samples : array-like of shape (n_clients,)
        Positive client sizes (row counts, or total sample weights).

    Returns
    -------
    weights : ndarray of shape (n_clients,)
        Non-negative weights in the input order, summing to 1.

    Examples
    --------
    >>> from sklearn_fed.linear_model import fesc_weights
    >>> fesc_weights([1, 100, 100]).round(4).tolist()
    [0.0, 0.5, 0.5]
    >>> fesc_weights([4, 4]).tolist()
    [0.5, 0.5]
    """
    n = np.asarray(n_samples, dtype=np.float64)
    if n.ndim != 1 or n.shape[0] == 0:
        raise ValueError(f"n_samples must be a non-empty 1d array, got shape {n.shape}.")
    bad = np.flatnonzero(~np.isfinite(n) | (n <= 0))
    if bad.size:
        raise ValueError(
            f"every client needs a positive, finite size: client {int(bad[0])} has "
            f"{n[bad[0]]!r}."
        )
    order = np.argsort(-n, kind="stable")
    sorted_n = n[order]
    lam = (2.0 + np.cumsum(1.0 / sorted_n)) / np.cumsum(sorted_n)
    # Eq. 10: K is the largest k whose condition holds (k = 1 always holds).
    holds = 1.0 / sorted_n**2 <= lam
    K = int(np.flatnonzero(holds)[-1]) + 1
    w_sorted = np.zeros_like(sorted_n)
    w_sorted[:K] = np.maximum(sorted_n[:K] * lam[K - 1] / 2.0 - 1.0 / (2.0 * sorted_n[:K]), 0.0)
    w_sorted /= math.fsum(w_sorted)  # remove round-off so the weights sum to 1
    weights = np.empty_like(w_sorted)
    weights[order] = w_sorted
    return weights


def _combination_weights(sizes, weighting):
    if weighting == "fesc":
        return fesc_weights(sizes)
    if weighting == "proportional":
        return sizes / math.fsum(sizes)
    return np.full(sizes.shape[0], 1.0 / sizes.shape[0])


#: What a simulated site keeps of its rows between ``partial_fit`` calls: its size
#: and the sufficient statistics of all its rows so far, enough to refit its local
#: ridge on all of them. It stands in for the data a real site holds; it never
#: crosses the wire.
_SiteRows = collections.namedtuple("_SiteRows", ["size", "statistics"])


class FESCClient(Client):
    """A site of :class:`FESCRidge`: answers with its size, then its local ridge model.

    A ``"count"`` task asks for the size ``n_i`` (rows, or total sample
    weight); a ``"model"`` task gives ``alpha`` and ``centered``, and the
    site replies ``n_i``, the coefficients of ridge fitted on its rows and
    (with ``centered``) the intercept.

    In a deployment a site passes all its rows to :meth:`respond` every time.
    The simulation of :meth:`FESCRidge.partial_fit` gives each site only its
    new rows and keeps its earlier ones as ``sites`` (label -> running
    statistics, updated with each model round).
    """

    protocol = "ridge.fesc"

    def __init__(self, estimator, *, key=None, policy=None, site=None, sites=None):
        super().__init__(estimator, key=key, policy=policy, site=site)
        self.sites = sites

    def compute(self, task, X, y, sample_weight, rows):
        step = task_step(task, ("count", "model"))
        earlier = None if self.sites is None else self.sites.get(label_key(task.site))
        n = count_rows(X.shape[0], rows)
        take = slice(None) if rows is None else rows
        size = float(n if sample_weight is None else np.sum(sample_weight[take]))
        if earlier is not None:
            size += earlier.size
        if not size > 0:
            raise ValueError(
                f"site {task.site!r} has total sample weight 0: it has no rows to fit a "
                "local model on."
            )
        if step == "count":
            return {"size": size}, {}
        alpha = task_field(task, "alpha", float)
        centered = task_field(task, "centered", bool)
        if not (math.isfinite(alpha) and alpha >= 0):
            raise InvalidClientMessage(f"server: alpha must be >= 0, got {alpha!r}.", "server")
        stats = None if n == 0 else ClientStatistics.from_data(  # rows checked at the site
            X, y, sample_weight, centered=centered, rows=rows, check_input=False
        )
        if earlier is not None:
            if earlier.statistics.centered != centered:
                raise ValueError("fit_intercept changed since the first partial_fit; call fit.")
            stats = earlier.statistics if stats is None else earlier.statistics.merge(stats)
        if self.sites is not None:
            self.sites[label_key(task.site)] = _SiteRows(size, stats)
        coef = solve_ridge(stats.gram, stats.moment, alpha)  # (t, d)
        arrays = {"coef": coef[0] if stats.single_target else coef}
        if centered:
            intercept = stats.y_mean - coef @ stats.x_mean
            arrays["intercept"] = np.asarray(intercept[0] if stats.single_target else intercept)
        return {"size": size}, arrays


class FESCServer(Server):
    """Server of :class:`FESCRidge`: (count round,) model round, combine.

    With ``warm_start`` (``partial_fit``) the sites that do not reply keep
    the model they sent before; with ``alpha="auto"`` their earlier sizes
    count in ``N``.
    """

    protocol = "ridge.fesc"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self.alpha = None if estimator.alpha == "auto" else float(estimator.alpha)
        self._counted = None  # label key -> size, from the count round
        self._done = False

    def _earlier(self):
        """``{label key: (label, size, coef, intercept)}`` of the fitted model (warm start)."""
        estimator = self.estimator
        if not (self.warm_start and hasattr(estimator, "local_coefs_")):
            return {}
        models = zip(estimator.clients_.tolist(), estimator.client_sizes_,
                     estimator.local_coefs_, estimator.local_intercepts_)
        return {label_key(model[0]): model for model in models}

    def plan(self, sites):
        if self._done:
            return {}
        if self.alpha is None:
            return {site: ({"step": "count"}, {}) for site in sites}
        if self._counted is not None:
            sites = [site for site in sites if label_key(site) in self._counted]
        fields = {"step": "model", "alpha": self.alpha,
                  "centered": bool(self.estimator.fit_intercept)}
        return {site: (dict(fields), {}) for site in sites}

    def read_reply(self, site, frame):
        centered = bool(self.estimator.fit_intercept)
        arrays = () if self.alpha is None else ("coef", "intercept") if centered else ("coef",)
        reply_keys(frame, site, fields=["size"], arrays=arrays)  # a count round has no arrays
        size = reply_number(frame, "size", site, high=2.0**63)
        if self.alpha is None:
            return size
        counted = None if self._counted is None else self._counted.get(label_key(site))
        if counted is not None and size != counted:
            reply_error(site, f"sent size {size} in the model round but {counted} in the "
                              "count round.")
        if not size > 0:
            reply_error(site, "size must be positive.")
        d, t = frame.schema["n_features"], frame.schema["n_targets"]
        shape = (d,) if frame.arrays["coef"].ndim == 1 and t == 1 else (t, d)
        coef = reply_array(frame, "coef", shape, site)
        intercept = (reply_array(frame, "intercept", shape[:-1], site) if centered
                     else np.zeros(shape[:-1]))
        return size, coef, intercept

    def apply(self, replies, ledger):
        earlier = self._earlier()
        if self.alpha is None:  # the count round: now N, hence alpha, is known
            self._counted = {label_key(site): size for site, size in replies.items()}
            kept = [size for key, (_, size, _, _) in earlier.items() if key not in self._counted]
            total = math.fsum([*(replies[s] for s in sorted_labels(replies)), *kept])
            self.alpha = 1.0 / math.sqrt(total)
            return
        estimator = self.estimator
        models = dict(earlier)
        for site in sorted_labels(replies):
            models[label_key(site)] = (site, *replies[site])
        ndim = next(iter(models.values()))[2].ndim
        for site in sorted_labels(replies):
            if replies[site][1].ndim != ndim:
                reply_error(site, f"its targets are {replies[site][1].ndim}-D, the other "
                                  f"sites' {ndim}-D.")
        labels, sizes, coefs, intercepts = zip(*models.values())
        sizes, coefs, intercepts = np.array(sizes), np.stack(coefs), np.stack(intercepts)
        weights = _combination_weights(sizes, estimator.weighting)
        coef = np.tensordot(weights, coefs, axes=1)
        intercept = weights @ intercepts
        n_features = coefs.shape[-1]
        n_targets = 1 if coefs.ndim == 2 else coefs.shape[1]
        ledger.n_parameters = estimator._n_parameters(n_features, n_targets)
        dtype = self.round_dtype.type
        # commit: nothing above touched the estimator
        estimator.alpha_ = self.alpha
        estimator._centered = bool(estimator.fit_intercept)
        estimator.client_sizes_ = sizes
        estimator.client_weights_ = weights
        estimator.n_selected_clients_ = int(np.count_nonzero(weights))
        estimator.local_coefs_ = coefs
        estimator.local_intercepts_ = intercepts
        set_federation_attributes(estimator, self.schema, ledger, labels,
                                  n_features=n_features)
        estimator.coef_ = coef.astype(dtype)
        if estimator.fit_intercept:
            estimator.intercept_ = float(intercept) if coefs.ndim == 2 else intercept.astype(dtype)
        else:
            estimator.intercept_ = 0.0 if coefs.ndim == 2 else np.zeros(n_targets, dtype)
        self._done = True


class FESCRidge(BaseFederatedRidge):
    """One-shot model averaging of local ridge fits, weighted by client size (FESC).

    Each client fits ridge regression on its own rows and sends only its size
    ``n_i``, its coefficients ``theta_i`` and its intercept; the server returns
    the convex combination ``sum_i w_i theta_i`` (and likewise for the
    intercepts). Unlike :class:`FederatedRidge`, which is exact, this is the
    classical one-shot averaging estimator; the FESC weights of Garin et al.
    correct it for clients with few rows by minimizing an upper bound of its
    mean squared error (see :func:`fesc_weights`), dropping the smallest
    clients entirely.

    The fitted model keeps exactly what the clients sent (``client_sizes_``,
    ``local_coefs_``, ``local_intercepts_``), never their statistics. With
    ``alpha="auto"`` the protocol has two rounds (sizes, then models), since
    ``alpha`` depends on the total size. Read more in the
    :ref:`User Guide <fesc>`.

    Parameters
    ----------
    alpha : "auto" or float, default="auto"
        L2 penalty of every local ridge fit. ``"auto"`` is the FESC paper's
        ``1 / sqrt(N)``, with ``N`` the total number of rows (total sample
        weight) of all clients, which the clients announce in a first round.
    weighting : {"fesc", "proportional", "uniform"}, default="fesc"
        How local models are combined: ``"fesc"`` (Eq. 9-10 of the FESC
        paper), ``"proportional"`` (``w_i = n_i / N``, the plain federated
        estimator of Eq. 8), or ``"uniform"`` (``w_i = 1 / n_clients``).
    fit_intercept : bool, default=True
        Whether every local model fits an (unpenalized) intercept.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Combined coefficients ``sum_i w_i theta_i``.
    intercept_ : float or ndarray of shape (n_targets,)
        Combined intercept; ``0.0`` when ``fit_intercept=False``.
    alpha_ : float
        The penalty used by the local fits.
    clients_ : ndarray of shape (n_clients,)
        Client labels, sorted in :meth:`fit`; :meth:`partial_fit` appends new ones.
    n_clients_ : int
        Number of clients.
    client_sizes_ : ndarray of shape (n_clients,)
        ``n_i`` of every client: its row count, or its total sample weight when
        ``sample_weight`` is given.
    client_weights_ : ndarray of shape (n_clients,)
        Combination weights ``w_i`` in ``clients_`` order: non-negative, sum 1.
    n_selected_clients_ : int
        Number of clients with a positive weight (``K`` of Eq. 10 for FESC).
    local_coefs_ : ndarray of shape (n_clients, n_features) or \
            (n_clients, n_targets, n_features)
        Local ridge coefficients ``theta_i``, as sent.
    local_intercepts_ : ndarray of shape (n_clients,) or (n_clients, n_targets)
        Local intercepts, as sent (zeros when ``fit_intercept=False``).
    communication_ : CommunicationLedger
        Bytes of every task and reply (``rounds`` is 2 with ``alpha="auto"``).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    FederatedRidge : Exact one-shot ridge from sufficient statistics.
    fesc_weights : The FESC weights alone.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FESCRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(130, 3))
    >>> y = X @ [1.0, 2.0, 3.0] + rng.normal(size=130)
    >>> clients = np.repeat([0, 1, 2], [100, 28, 2])
    >>> est = FESCRidge().fit(X, y, clients=clients)
    >>> est.client_weights_.round(3).tolist(), est.n_selected_clients_
    ([0.794, 0.206, 0.0], 2)
    >>> bool(np.abs(est.coef_ - [1.0, 2.0, 3.0]).max() < 0.2)
    True
    >>> est.communication_.rounds  # sizes, then local models
    2
    """

    _parameter_constraints: dict = {
        "alpha": [StrOptions({"auto"}), Interval(Real, 0, math.inf, closed="left")],
        "weighting": [StrOptions({"fesc", "proportional", "uniform"})],
        "fit_intercept": ["boolean"],
    }

    _server_role = FESCServer
    _client_role = FESCClient
    # what fit does without clients (MissingClientsWarning)
    _without_clients = "there is one local model and nothing to weigh (plain ridge on all rows)"

    def __init__(self, alpha="auto", *, weighting="fesc", fit_intercept=True):
        self.alpha = alpha
        self.weighting = weighting
        self.fit_intercept = fit_intercept

    def __getstate__(self):
        # The simulated sites' rows (partial_fit) are not part of the model:
        # a saved model holds only what the protocol sent.
        state = dict(super().__getstate__())
        state.pop("_site_states", None)
        return state

    @fit_method(sample_weight="Non-negative row weights; a client's size ``n_i`` is then "
                              "its total weight.")
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit one local ridge per client and combine them."""
        return self._fit(X, y, sample_weight, clients)

    @fit_method(partial=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Add rows of existing or new clients; those clients refit on all their rows.

        Each simulated client keeps its rows so far (as running statistics,
        the way a site keeps its data; they are not part of the model and
        are not pickled), so after any sequence of calls the model equals
        :meth:`fit` on all rows seen, with the same client labels. Each call
        is one run of the protocol: the clients with new rows send a new
        ``(n_i, theta_i, b_i)``; with ``alpha="auto"`` ``N`` changed, so every
        client announces its size and refits. A call that raises leaves the
        estimator unchanged.
        """
        return self._fit(X, y, sample_weight, clients, partial=True)

    # ------------------------------------------------------------- internals
    def _check_before_rows(self, *, partial):
        if partial:
            self._validate_params()  # sklearn skips this once fitted; set_params may have changed them
            if hasattr(self, "coef_") and not hasattr(self, "_site_states"):
                raise ValueError(
                    "this FESCRidge was unpickled: the simulated clients' rows are not saved "
                    "with a model (only what the protocol sent is), so partial_fit cannot "
                    "refit them. Call fit on all rows."
                )

    def _fitted_state(self):
        if not hasattr(self, "coef_"):
            return None
        return 1 if self.local_coefs_.ndim == 2 else self.local_coefs_.shape[1], self._centered

    def _check_more_rows(self, X, y):
        super()._check_more_rows(X, y)
        if (np.ndim(y) == 1) != (self.local_coefs_.ndim == 2):
            raise ValueError("y changed between 1-D and 2-D since the first call.")

    def _run_sites(self, X, y, sample_weight, labels, rows, *, warm_start=False, clients=None):
        if self.alpha == "auto" and warm_start:  # N changed: every client refits
            new = {label_key(label) for label in labels}
            earlier = [label for label in self.clients_.tolist() if label_key(label) not in new]
            labels = [*earlier, *labels]
            rows = [np.zeros(0, dtype=np.intp)] * len(earlier) + list(rows)
        server, client = super()._run_sites(X, y, sample_weight, labels, rows,
                                            warm_start=warm_start)
        self._site_states = client.sites
        return server, client

    def _simulated_client(self, *, warm_start):
        # simulated sites keep their rows' running statistics between calls, as sites do
        return self._client_role(self, sites=dict(self._site_states) if warm_start else {})

