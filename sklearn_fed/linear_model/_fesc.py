"""FESCRidge: one-shot averaging of local ridge models, weighted by sample size (FESC)."""

import copy
import math
from numbers import Real

import numpy as np

from .._clients import label_array
from .._compat import Interval, StrOptions, _fit_context
from ._base import BaseFederatedRidge, solve_ridge

__all__ = ["FESCRidge", "fesc_weights"]

_FLOAT64 = 8


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

    Read more in the :ref:`User Guide <fesc>`.

    Parameters
    ----------
    alpha : "auto" or float, default="auto"
        L2 penalty of every local ridge fit. ``"auto"`` is the FESC paper's
        ``1 / sqrt(N)``, with ``N`` the total number of rows (total sample
        weight) of all clients; in a real deployment the server broadcasts
        ``N`` before clients fit.
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
        Local ridge coefficients ``theta_i``.
    local_intercepts_ : ndarray of shape (n_clients,) or (n_clients, n_targets)
        Local intercepts.
    communication_ : CommunicationLedger
        Bytes of the messages ``(n_i, theta_i, intercept_i)`` (float64 each)
        and of the model broadcast.
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
    """

    _parameter_constraints: dict = {
        "alpha": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
        "weighting": [StrOptions({"fesc", "proportional", "uniform"})],
        "fit_intercept": ["boolean"],
    }

    # what fit does without clients (MissingClientsWarning)
    _without_clients = "there is one local model and nothing to weigh (plain ridge on all rows)"

    def __init__(self, alpha="auto", *, weighting="fesc", fit_intercept=True):
        self.alpha = alpha
        self.weighting = weighting
        self.fit_intercept = fit_intercept

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit one local ridge per client and combine them.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights; a client's size ``n_i`` is then its total
            weight.
        clients : array-like of shape (n_samples,), default=None
            Client label of each row (any hashable). ``None``: one client.

        Returns
        -------
        self : FESCRidge
        """
        X, y, sample_weight, labels, rows = self._validate_rows(
            X, y, sample_weight, clients, reset=True
        )
        return self._absorb(X, y, sample_weight, labels, rows, reset=True)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Add rows of existing or new clients and refit the affected local models.

        Per-client sufficient statistics (not rows) are kept, so after any
        sequence of calls the model equals :meth:`fit` on all rows seen, with
        the same client labels. With ``alpha="auto"`` the penalty depends on
        the total size, so every local model is re-solved; with a fixed alpha
        only the clients that received rows are. A call that raises leaves the
        estimator unchanged.

        Parameters
        ----------
        X, y, sample_weight, clients
            As in :meth:`fit`.

        Returns
        -------
        self : FESCRidge
        """
        first_call = getattr(self, "_statistics", None) is None
        X, y, sample_weight, labels, rows = self._validate_more_rows(
            X, y, sample_weight, clients,
            seen=None if first_call else (self._n_targets, self._centered),
        )
        return self._absorb(X, y, sample_weight, labels, rows, reset=first_call)

    # ------------------------------------------------------------- internals
    def _absorb(self, X, y, sample_weight, labels, rows, *, reset):
        """Merge a batch into per-client statistics, re-solve, assign at the end."""
        previous = None if reset else self._statistics
        statistics = {} if previous is None else dict(previous)
        local = {} if previous is None else dict(self._local)
        touched = []
        for label, stats in self._statistics_by_client(X, y, sample_weight, labels, rows):
            key = label.item() if hasattr(label, "item") else label
            statistics[key] = stats if key not in statistics else statistics[key].merge(stats)
            touched.append(key)
        order = list(statistics) if previous is None else list(self._order)
        known = set(order)
        order += [key for key in touched if key not in known]
        sizes = np.array([statistics[key].weight_sum for key in order])
        empty = np.flatnonzero(sizes <= 0)
        if empty.size:
            raise ValueError(
                f"client {order[empty[0]]!r} has total sample weight 0: it has no "
                "rows to fit a local model on."
            )
        alpha = self._resolve_alpha(math.fsum(sizes))
        if previous is None or self.alpha == "auto" or alpha != self.alpha_:
            refit = order
        else:
            refit = touched
        for key in refit:
            local[key] = self._local_fit(statistics[key], alpha)

        weights = _combination_weights(sizes, self.weighting)
        coefs = np.stack([local[key][0] for key in order])  # (m, t, d)
        intercepts = np.stack([local[key][1] for key in order])  # (m, t)
        coef = np.einsum("m,mtd->td", weights, coefs)
        intercept = weights @ intercepts

        n_targets, n_features = coefs.shape[1], coefs.shape[2]
        if previous is None:
            ledger = self._new_ledger(n_features, n_targets)
        else:
            ledger = copy.deepcopy(self.communication_)
        message_bytes = _FLOAT64 * (1 + n_targets * (n_features + 1))
        for key in refit:
            ledger.record_upload(key, message_bytes)
        ledger.record_broadcast(len(order), ledger.n_parameters)

        # Commit: nothing above touched self.
        single = next(iter(statistics.values())).single_target
        dtype = X.dtype
        self._statistics = statistics
        self._local = local
        self._order = order
        self._n_targets = n_targets
        self._centered = self.fit_intercept
        self.alpha_ = alpha
        self.clients_ = label_array(order)
        self.n_clients_ = len(order)
        self.client_sizes_ = sizes
        self.client_weights_ = weights
        self.n_selected_clients_ = int(np.count_nonzero(weights))
        self.communication_ = ledger
        if single:
            self.coef_ = coef[0].astype(dtype)
            self.intercept_ = float(intercept[0]) if self.fit_intercept else 0.0
            self.local_coefs_ = coefs[:, 0, :]
            self.local_intercepts_ = intercepts[:, 0]
        else:
            self.coef_ = coef.astype(dtype)
            self.intercept_ = intercept.astype(dtype)
            self.local_coefs_ = coefs
            self.local_intercepts_ = intercepts
        return self

    def _resolve_alpha(self, total_size):
        if isinstance(self.alpha, str):  # "auto": the FESC paper's 1 / sqrt(N)
            return 1.0 / math.sqrt(total_size)
        alpha = float(self.alpha)
        if not math.isfinite(alpha):
            raise ValueError(f"alpha must be finite, got {self.alpha!r}.")
        return alpha

    def _local_fit(self, stats, alpha):
        """One client's ridge: coefficients (t, d) and intercept (t,)."""
        coef = solve_ridge(stats.gram, stats.moment, alpha)
        if self.fit_intercept:
            intercept = stats.y_mean - coef @ stats.x_mean
        else:
            intercept = np.zeros(stats.n_targets)
        return coef, intercept
