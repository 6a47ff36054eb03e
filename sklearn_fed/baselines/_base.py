"""The round loop shared by the gradient-based baselines, vectorized across clients.

Every participating client's rows live in one zero-padded array of shape
``(n_clients, n_max, n_features)``, so one local SGD step of all clients is one
batched matmul; clients differ only through masks (padded rows have weight 0,
clients whose shorter data is exhausted in an epoch take no step).
"""

import copy
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils import check_random_state

from .._clients import group_rows_by_client, take_clients
from .._compat import (
    Interval,
    _check_sample_weight,
    _fit_context,
    check_is_fitted,
    validate_data,
)

_FLOAT64 = 8  # every value sent is a float64


@dataclass
class _Clients:
    """Clients' rows stacked and zero-padded: the layout of the vectorized step."""

    labels: np.ndarray  # (K,)
    X: np.ndarray  # (K, n_max, d)
    y: np.ndarray  # (K, n_max, t)
    weights: np.ndarray  # (K, n_max); 0 on padding
    n_rows: np.ndarray  # (K,) real rows per client
    weight_sums: np.ndarray  # (K,) S_k
    x_mean: np.ndarray  # (d,) global weighted means (zeros without intercept)
    y_mean: np.ndarray  # (t,)

    def subset(self, index):
        if index.shape[0] == self.labels.shape[0]:
            return self  # full participation: no copy
        return _Clients(
            self.labels[index],
            self.X[index],
            self.y[index],
            self.weights[index],
            self.n_rows[index],
            self.weight_sums[index],
            self.x_mean,
            self.y_mean,
        )


def _stack_clients(X, y, sample_weight, labels, rows, fit_intercept):
    """Stack clients' rows; with an intercept, center them on the global means.

    The global weighted means equal what the server gets by averaging the
    clients' announced means weighted by ``S_k`` (the setup exchange).
    """
    if fit_intercept:
        x_mean = np.average(X, axis=0, weights=sample_weight)
        y_mean = np.average(y, axis=0, weights=sample_weight)
        X, y = X - x_mean, y - y_mean
    else:
        x_mean, y_mean = np.zeros(X.shape[1]), np.zeros(y.shape[1])
    n_rows = np.array([np.arange(X.shape[0])[r].shape[0] for r in rows])
    K, n_max, d, t = len(rows), int(n_rows.max()), X.shape[1], y.shape[1]
    Xs = np.zeros((K, n_max, d))
    ys = np.zeros((K, n_max, t))
    ws = np.zeros((K, n_max))
    for k, r in enumerate(rows):  # one copy of the data, not per step
        Xs[k, : n_rows[k]] = X[r]
        ys[k, : n_rows[k]] = y[r]
        ws[k, : n_rows[k]] = 1.0 if sample_weight is None else sample_weight[r]
    return _Clients(np.asarray(labels), Xs, ys, ws, n_rows, ws.sum(axis=1), x_mean, y_mean)


def _safe(values):
    """Denominators: a client with no weight contributes nothing, not NaN."""
    return np.where(values > 0, values, 1.0)


class BaseFederatedSGD(MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Shared round loop of FedAvg, FedProx, FedNova and DP-FedAvg for linear models.

    The global objective is ridge's, divided by ``2 S`` (``S`` = total sample
    weight) so that a learning rate means the same for any data size::

        F(w, b) = (1 / 2S) * (sum_i s_i (y_i - x_i w - b)^2 + alpha ||w||^2)
                = sum_k p_k F_k(w, b),   p_k = S_k / S,
        F_k(w, b) = (1 / 2S_k) sum_{i in k} s_i (y_i - x_i w - b)^2
                    + (alpha / 2S) ||w||^2.

    Its minimizer is :class:`~sklearn.linear_model.Ridge` ``(alpha)``'s solution.
    The intercept is unpenalized: clients first announce their weight ``S_k``
    and weighted means once, every client centers its rows on the global
    means, rounds then optimize ``w`` alone (for a fixed ``w`` the best ``b``
    is ``y_mean - x_mean w``, which turns ``F`` into the centered problem),
    and ``intercept_ = y_mean - x_mean @ coef_``. Subclasses set the proximal
    weight (``_proximal_mu``), the server's aggregation (``_aggregate``) and
    any extra uplink values (``_extra_uplink_values``).
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "local_epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "n_rounds": [Interval(Integral, 1, None, closed="left")],
        "client_fraction": [Interval(Real, 0, 1, closed="right")],
        "random_state": ["random_state"],
    }

    # Values a client sends per round besides its model update (FedNova: its steps).
    _extra_uplink_values = 0

    # what fit does without clients (MissingClientsWarning)
    _without_clients = "each round is gradient descent on one client holding every row"

    # FedAvg and FedNova take exactly these; subclasses with more define their own.
    def __init__(
        self,
        alpha=1.0,
        *,
        fit_intercept=True,
        learning_rate=0.01,
        local_epochs=5,
        batch_size=None,
        n_rounds=100,
        client_fraction=1.0,
        random_state=None,
    ):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.learning_rate = learning_rate
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.n_rounds = n_rounds
        self.client_fraction = client_fraction
        self.random_state = random_state

    # ---------------------------------------------------------------- hooks
    def _proximal_mu(self):
        return 0.0

    def _aggregate(self, coef, local_coef, p, steps, rng):
        """New global model from participants' local models (FedAvg: weighted mean).

        ``coef`` (d, t) is the model sent this round, ``local_coef`` (K, d, t)
        the participants' local models, ``p`` (K,) their weights (summing to
        1), ``steps`` (K,) their numbers of local steps.
        """
        return np.einsum("k,kdt->dt", p, local_coef)

    # ---------------------------------------------------------------- public
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None, clients=None):
        """Run ``n_rounds`` rounds from a zero model on rows split by ``clients``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights; a client's aggregation weight is the sum
            of its rows' weights.
        clients : array-like of shape (n_samples,), default=None
            Client label of each row (any hashable). ``None``: all rows belong
            to one client (then FedAvg is plain local gradient descent).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        data, single_target, dtype = self._validate(X, y, sample_weight, clients, reset=True)
        rng = check_random_state(self.random_state)
        t, d = data.y.shape[2], data.X.shape[2]
        state = {
            "coef": np.zeros((d, t)),
            "history": [],
            "announced": set(),
            "rng": rng,
        }
        for _ in range(self.n_rounds):
            self._round(state, data)
        self._commit(state, data, single_target, dtype)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Run exactly one more round on the rows given.

        The first call starts from a zero model. Later calls continue from the
        current model and random state, so ``fit`` with ``n_rounds=R`` followed
        by one ``partial_fit`` on the same rows equals ``fit`` with
        ``n_rounds=R + 1``. Client weights and the centering means are taken
        from the rows of each call (pass the same rows to continue training);
        a client's setup bytes are counted the first time its label is seen.
        A call that raises leaves the estimator unchanged.

        Parameters
        ----------
        X, y, sample_weight, clients
            As in :meth:`fit`.

        Returns
        -------
        self : object
            Updated estimator.
        """
        first_call = not hasattr(self, "_state")
        data, single_target, dtype = self._validate(
            X, y, sample_weight, clients, reset=first_call
        )
        if first_call:
            t, d = data.y.shape[2], data.X.shape[2]
            state = {
                "coef": np.zeros((d, t)),
                "history": [],
                "announced": set(),
                "rng": check_random_state(self.random_state),
            }
        else:
            if data.y.shape[2] != self._state["coef"].shape[1]:
                raise ValueError(
                    f"y has {data.y.shape[2]} targets but earlier calls had "
                    f"{self._state['coef'].shape[1]}."
                )
            if single_target != self._state["single_target"]:
                raise ValueError("y changed between 1-D and 2-D since the first call.")
            if self.fit_intercept != self._state["fit_intercept"]:
                raise ValueError(
                    "fit_intercept changed since the first partial_fit; call fit to restart."
                )
            state = copy.deepcopy(self._state)  # a failed round must not touch it
        self._round(state, data)
        self._commit(state, data, single_target, dtype)
        return self

    def predict(self, X):
        """Predict with the global model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to predict.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_targets)
            Predictions.
        """
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return X @ np.asarray(self.coef_).T + self.intercept_

    # ---------------------------------------------------------------- internals
    def _validate(self, X, y, sample_weight, clients, *, reset):
        clients = take_clients(self, X, clients)
        X, y = validate_data(
            self,
            X,
            y,
            dtype=[np.float64, np.float32],
            multi_output=True,
            y_numeric=True,
            reset=reset,
        )
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, ensure_non_negative=True
            )
        labels, rows = group_rows_by_client(clients, X.shape[0])
        y2 = np.asarray(y, dtype=np.float64).reshape(X.shape[0], -1)
        data = _stack_clients(
            np.asarray(X, dtype=np.float64), y2, sample_weight, labels, rows, self.fit_intercept
        )
        return data, y.ndim == 1, X.dtype

    def _round(self, state, data):
        """One round: sample clients, train locally (all at once), aggregate, log."""
        rng = state["rng"]
        K = data.labels.shape[0]
        if self.client_fraction < 1:
            m = max(1, int(round(self.client_fraction * K)))
            index = np.sort(rng.choice(K, size=m, replace=False))
        else:
            index = np.arange(K)
        part = data.subset(index)
        # alpha / S uses the total weight of all clients: the global objective's.
        alpha_scaled = self.alpha / data.weight_sums.sum()
        with np.errstate(over="ignore", invalid="ignore"):
            local_coef, steps = self._local_train(part, state["coef"], alpha_scaled, rng)
            p = part.weight_sums / _safe(part.weight_sums.sum())
            coef = self._aggregate(state["coef"], local_coef, p, steps, rng)
            mse = self._train_mse(data, coef)
        if not np.all(np.isfinite(coef)):
            raise ValueError(
                f"{type(self).__name__} diverged in round {len(state['history']) + 1}: "
                f"the model became non-finite. Reduce learning_rate "
                f"(now {self.learning_rate})."
            )
        n_values = coef.size
        new = [label for label in data.labels.tolist() if label not in state["announced"]]
        # Setup, once per client: it announces S_k (and its weighted means when
        # fitting an intercept); the server answers with S (and the global means).
        setup = len(new) * (1 + self.fit_intercept * (data.x_mean.size + data.y_mean.size))
        uplink = part.labels.shape[0] * (n_values + self._extra_uplink_values) + setup
        downlink = part.labels.shape[0] * n_values + setup
        state["announced"].update(new)
        state["coef"] = coef
        state["history"].append(
            {
                "round": len(state["history"]) + 1,
                "train_mse": mse,
                "uplink_bytes": uplink * _FLOAT64,
                "downlink_bytes": downlink * _FLOAT64,
                "n_participants": int(part.labels.shape[0]),
            }
        )

    def _local_train(self, part, coef, alpha_scaled, rng):
        """``local_epochs`` epochs of minibatch SGD for every participant at once.

        Returns local coefficients (K, d, t) and the number
        of local steps each client took (K,).
        """
        K, n_max, d = part.X.shape
        n = part.n_rows
        batch = n_max if self.batch_size is None else min(self.batch_size, n_max)
        full_batch = batch >= n_max  # one step per epoch on all rows, no shuffle
        steps_per_epoch = -(-n // batch)
        n_steps = int(steps_per_epoch.max())
        mean_weight = part.weight_sums / n
        mu = self._proximal_mu()
        eta = self.learning_rate
        W = np.repeat(coef[None], K, axis=0)
        padding = np.arange(n_max)[None, :] >= n[:, None]
        offsets = n_max * np.arange(K)[:, None]
        flat_X = part.X.reshape(K * n_max, d)
        flat_y = part.y.reshape(K * n_max, -1)
        flat_w = part.weights.reshape(-1)
        for _ in range(self.local_epochs):
            if full_batch:
                X, y, s = part.X, part.y, part.weights
            else:  # a fresh permutation per client, padding sorted last
                keys = rng.random_sample((K, n_max)) + padding
                order = np.argsort(keys, axis=1) + offsets
                # np.take on flat rows: much faster than take_along_axis here.
                X = np.take(flat_X, order, axis=0)
                y = np.take(flat_y, order, axis=0)
                s = np.take(flat_w, order)
            for j in range(n_steps):
                rows = slice(j * batch, (j + 1) * batch)
                Xb, sb = X[:, rows], s[:, rows]
                residual = Xb @ W - y[:, rows]
                residual *= sb[:, :, None]
                # Unbiased for the client's full gradient: scale the batch sum by
                # n_k / (rows in batch * S_k); full batch gives 1 / S_k exactly.
                in_batch = np.clip(n - j * batch, 0, batch)
                denominator = _safe(in_batch * mean_weight)
                step = eta * (in_batch > 0)  # exhausted clients wait
                grad = np.matmul(Xb.transpose(0, 2, 1), residual)
                grad /= denominator[:, None, None]
                grad += alpha_scaled * W
                if mu:
                    grad += mu * (W - coef)
                W -= step[:, None, None] * grad
        return W, self.local_epochs * steps_per_epoch

    @staticmethod
    def _train_mse(data, coef):
        """Weighted training MSE of the global model (a simulation diagnostic, not sent).

        Rows are centered, so the residual of the model with its intercept
        ``y_mean - x_mean @ coef`` is simply ``X_c @ coef - y_c``.
        """
        residual = data.X @ coef - data.y
        return float(
            np.einsum("knt,kn->", residual**2, data.weights)
            / (data.weights.sum() * coef.shape[1])
        )

    def _commit(self, state, data, single_target, X_dtype):
        self._state = state
        state["single_target"] = single_target
        state["fit_intercept"] = self.fit_intercept
        coef = state["coef"].T.astype(X_dtype)
        intercept = (data.y_mean - data.x_mean @ state["coef"]).astype(X_dtype)
        if single_target:
            self.coef_ = coef[0]
            self.intercept_ = float(intercept[0]) if self.fit_intercept else 0.0
        else:
            self.coef_ = coef
            self.intercept_ = intercept
        self.history_ = list(state["history"])
        self.n_rounds_ = len(state["history"])
        self.clients_ = data.labels
        self.n_clients_ = int(data.labels.shape[0])
