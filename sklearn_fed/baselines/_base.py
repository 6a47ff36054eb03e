"""The protocol shared by the gradient-based baselines: setup, then model rounds.

Round 0 (*setup*): every site announces its total sample weight ``S_k``
(and, to fit an intercept, its weighted means; for ``learning_rate="auto"``,
a bound on its curvature). Each later round the server samples
participants and sends each one the global model and the local training
parameters (scaled ``alpha``, step, epochs, batch size, proximal weight and a
seed for the site's minibatch shuffling); each site trains on its own rows
and replies with its local model (and its number of local steps, and the
loss of the model it received); the server aggregates (FedAvg: weighted mean;
FedNova: normalized; DP-FedAvg: clipped, noised updates).

The simulation computes sites with the same number of rows together: their
rows are stacked into one ``(G, n, d)`` array so that a local step of all of
them is one batched product. Each slice of a batched product is the same BLAS
call as for one site alone, so every reply is bit for bit the one the site
would compute by itself (checked by the shared federated checks).
"""

import copy
import math
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.extmath import safe_sparse_dot

from .._compat import Interval, StrOptions
from ..base import FederatedEstimatorMixin, fit_method, set_federation_attributes
from ..linear_model._base import (
    BaseFederatedRidge,
    rows_and_weights,
    validate_regression,
)
from ..protocol import (
    Client,
    Server,
    label_key,
    sorted_labels,
)
from ..protocol._errors import failing, server_error
from ..protocol._fields import reply_array, reply_keys, reply_number, task_field
from ..protocol._schema import count_rows
from ..utils._warnings import warn

__all__ = ["BaseFederatedSGD", "SGDClient", "SGDServer"]

# A reported training MSE this many times the first one means divergence.
_DIVERGENCE_FACTOR = 10.0
# Larger values in a reply are refused: products and sums of accepted values
# cannot overflow, and an honest model this large has diverged anyway.
_MAX_VALUE = 1e150


def _bounded(values, site):
    largest = float(np.max(np.abs(values), initial=0.0))
    if largest > _MAX_VALUE:
        failing(site)(f"a value of magnitude {largest:.3g} (more than {_MAX_VALUE:g}): its "
                      "training diverged (reduce learning_rate) or it is not honest.")
    return values


# ---------------------------------------------------------------- local training
def _site_rows(X, y, sample_weight, rows):
    """One site's rows as float64: ``X`` (dense or CSR), ``y`` (n, t), weights (n,)."""
    take = slice(None) if rows is None else rows
    Xk = X[take]
    Xk = Xk.astype(np.float64) if sp.issparse(Xk) else np.asarray(Xk, dtype=np.float64)
    yk = np.asarray(y[take], dtype=np.float64).reshape(Xk.shape[0], -1)
    sk = (np.ones(Xk.shape[0]) if sample_weight is None
          else np.asarray(sample_weight[take], dtype=np.float64))
    return Xk, yk, sk


def _training_rows(Xk, yk, x_mean, y_mean, augment):
    """The dense rows a site trains on: centered on the global means, or with a 1 column."""
    if x_mean is not None:
        Xk, yk = Xk - x_mean, yk - y_mean
    if augment:  # the last coordinate of the model is the intercept
        Xk = np.hstack([Xk, np.ones((Xk.shape[0], 1))])
    return Xk, yk


class _Training:
    """The local training parameters of one round, read from the task."""

    def __init__(self, task):
        self.alpha = task_field(task, "alpha", float)
        self.learning_rate = task_field(task, "learning_rate", float)
        self.local_epochs = task_field(task, "local_epochs", int)
        batch = task.fields.get("batch_size")
        self.batch_size = None if batch is None else task_field(task, "batch_size", int)
        self.mu = task_field(task, "proximal_mu", float)
        self.seed = task_field(task, "seed", int)
        self.augment = task_field(task, "intercept_coordinate", bool)
        if not (
            math.isfinite(self.alpha) and self.alpha >= 0
            and math.isfinite(self.learning_rate) and self.learning_rate > 0
            and 1 <= self.local_epochs <= 100_000
            and (self.batch_size is None or self.batch_size >= 1)
            and math.isfinite(self.mu) and self.mu >= 0
            and 0 <= self.seed < 2**63
        ):
            server_error("malformed local training parameters.")

    def steps(self, n):
        """Local steps of a site with ``n`` rows: per epoch, and in total."""
        batch = self.batch_size
        per_epoch = 1 if batch is None or batch >= n else -(-n // batch)
        return per_epoch, per_epoch * self.local_epochs

    def penalty(self, n_coef):
        """``alpha`` on every coefficient, 0 on an intercept coordinate."""
        penalty = np.full((n_coef, 1), self.alpha)
        if self.augment:
            penalty[-1] = 0.0
        return penalty


def _step(W, grad, coef, penalty, params):
    """One local step on ``W``, in place: ``grad`` (the data term) plus ridge and proximal terms."""
    grad += penalty * W
    if params.mu:
        grad += params.mu * (W - coef)
    W -= params.learning_rate * grad


# Local training runs quietly: a site checks its model is finite, and says so.
@np.errstate(over="ignore", invalid="ignore")
def _train_dense(X, y, s, weight_sums, coef, params, seeds):
    """Local SGD of ``G`` sites with the same number of rows, all at once.

    ``X`` (G, n, d), ``y`` (G, n, t), ``s`` (G, n): the sites' training rows
    and row weights; ``weight_sums`` (G,): their ``S_k``; ``coef`` (d, t):
    the global model. Returns the local models (G, d, t), the local steps per
    site and the weighted squared error of ``coef`` on each site's rows (G,).
    """
    G, n, _ = X.shape
    per_epoch, steps = params.steps(n)
    full_batch = per_epoch == 1
    penalty = params.penalty(coef.shape[0])
    residual = X @ coef - y
    # (1, n) @ (n, 1) per site: each slice of a batched product is one site's own
    losses = np.matmul((residual**2).sum(axis=2)[:, None, :], s[:, :, None])[:, 0, 0]
    W = np.repeat(coef[None], G, axis=0)
    rngs = None if full_batch else [np.random.default_rng(seed) for seed in seeds]
    offsets = n * np.arange(G)[:, None]
    for epoch in range(params.local_epochs):
        if full_batch:
            Xe, ye, se = X, y, s
        else:  # each site reshuffles its own rows, from its own seed
            order = np.stack([rng.permutation(n) for rng in rngs]) + offsets
            Xe = np.take(X.reshape(G * n, -1), order, axis=0)
            ye = np.take(y.reshape(G * n, -1), order, axis=0)
            se = np.take(s.reshape(-1), order)
        for j in range(per_epoch):
            batch = params.batch_size
            rows = slice(None) if full_batch else slice(j * batch, (j + 1) * batch)
            Xb, sb = Xe[:, rows], se[:, rows]
            if full_batch and epoch == 0:
                r = residual  # the loss's residual: W is still coef
            else:
                r = Xb @ W - ye[:, rows]
            r = r * sb[:, :, None]
            # Unbiased for the site's gradient: the batch sum times n / (rows * S_k).
            grad = np.matmul(Xb.transpose(0, 2, 1), r)
            grad /= (Xb.shape[1] * (weight_sums / n))[:, None, None]
            _step(W, grad, coef, penalty, params)
    return W, steps, losses


@np.errstate(over="ignore", invalid="ignore")
def _train_sparse(X, y, s, weight_sum, coef, params, x_mean):
    """Local SGD of one site with sparse rows, centered implicitly on ``x_mean``.

    ``y`` is already centered; ``x_mean`` is None without an intercept.
    Same algorithm and return values as :func:`_train_dense` for one site.
    """
    n = X.shape[0]
    per_epoch, steps = params.steps(n)
    penalty = params.penalty(coef.shape[0])

    def residual(Xb, yb, W):
        r = safe_sparse_dot(Xb, W, dense_output=True) - yb
        return r if x_mean is None else r - x_mean @ W

    loss = (residual(X, y, coef) ** 2).sum(axis=1) @ s
    W = coef.copy()
    rng = np.random.default_rng(params.seed)
    for _ in range(params.local_epochs):
        order = None if per_epoch == 1 else rng.permutation(n)
        for j in range(per_epoch):
            idx = slice(None) if order is None else order[j * params.batch_size:
                                                          (j + 1) * params.batch_size]
            Xb, yb, sb = X[idx], y[idx], s[idx]
            r = residual(Xb, yb, W) * sb[:, None]
            grad = safe_sparse_dot(Xb.T, r, dense_output=True)
            if x_mean is not None:
                grad -= np.outer(x_mean, r.sum(axis=0))
            grad /= Xb.shape[0] * (weight_sum / n)
            _step(W, grad, coef, penalty, params)
    return W, steps, loss


def _without_seed(task):
    """What a training task says besides its seed, as a hashable key.

    Arrays by identity: a simulated round's tasks share their arrays (tasks
    decoded from bytes do not, and are then trained one group per site).
    """
    fields = tuple((k, v) for k, v in task.fields.items() if k != "seed")
    return fields, tuple((name, id(a)) for name, a in task.arrays.items())


# ---------------------------------------------------------------- roles
class SGDClient(Client):
    """A site of a gradient baseline: the setup and training tasks of the module docstring."""

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self.protocol = estimator._protocol  # the roles are shared by the four baselines
        self._stacks = {}  # simulation: sites' training rows, reused across rounds

    def compute(self, task, X, y, sample_weight, rows):
        step = task_field(task, "step", str)
        if step == "setup":
            return self._setup(task, *_site_rows(X, y, sample_weight, rows), np.ndim(y))
        if step != "train":
            server_error(f"unknown task step {step!r}.")
        if not sp.issparse(X):  # a group of one site (see reply_many)
            return self._train_group({task.site: task}, X, y, sample_weight, {task.site: rows},
                                     {}, {})[0]
        Xk, yk, sk = _site_rows(X, y, sample_weight, rows)
        params, coef, x_mean, y_mean = self._read_train_task(task, Xk.shape[1], yk.shape[1])
        weight_sum = self._weight_sum(task, sk)
        if params.augment:  # the intercept coordinate: a column of ones
            Xk = sp.hstack([Xk, np.ones((Xk.shape[0], 1))], format="csr")
        W, steps, loss = _train_sparse(
            Xk, yk if y_mean is None else yk - y_mean, sk, weight_sum, coef, params, x_mean
        )
        return self._train_reply(task, coef, W, steps, loss)

    def reply_many(self, tasks, X, y, sample_weight, rows, names):
        # Sites with as many rows as each other and the same task but for the
        # seed train together (see the module docstring); the rest one by one.
        groups, alone = {}, {}
        for site, task in tasks.items():
            if task.fields.get("step") != "train" or sp.issparse(X):
                alone[site] = task
                continue
            n = count_rows(X.shape[0], rows[site])
            groups.setdefault((n, _without_seed(task)), {})[site] = task
        replies = super().reply_many(alone, X, y, sample_weight, rows, names)
        stacks, self._stacks = self._stacks, {}
        for group in groups.values():
            answers = self._train_group(group, X, y, sample_weight, rows, stacks, self._stacks)
            for (site, task), answer in zip(group.items(), answers):
                replies[site] = self.reply_frame(task, X, y, names, *answer)
        return replies

    def _train_group(self, tasks, X, y, sample_weight, rows, stacks, kept):
        """Replies ``(fields, arrays)`` of sites that train together; ``kept`` keeps their rows."""
        d, t = X.shape[1], 1 if np.ndim(y) == 1 else y.shape[1]
        params, coef, x_mean, y_mean = self._read_train_task(next(iter(tasks.values())), d, t)
        key = (tuple(label_key(site) for site in tasks), params.augment,
               None if x_mean is None else (x_mean.tobytes(), y_mean.tobytes()))
        if key not in stacks:  # else: the same sites and means as last round
            sites = [_site_rows(X, y, sample_weight, rows[site]) for site in tasks]
            prepared = [_training_rows(Xk, yk, x_mean, y_mean, params.augment)
                        for Xk, yk, _ in sites]
            stacks[key] = (
                np.stack([Xt for Xt, _ in prepared]),
                np.stack([yt for _, yt in prepared]),
                np.stack([sk for _, _, sk in sites]),
            )
        Xs, ys, ss = kept[key] = stacks[key]
        weight_sums = np.array([self._weight_sum(task, s) for task, s in zip(tasks.values(), ss)])
        seeds = [task_field(task, "seed", int) for task in tasks.values()]
        W, steps, losses = _train_dense(Xs, ys, ss, weight_sums, coef, params, seeds)
        return [self._train_reply(task, coef, W[g], steps, losses[g])
                for g, task in enumerate(tasks.values())]

    # ------------------------------------------------------------ task parts
    def _setup(self, task, Xk, yk, sk, y_ndim):
        centered = task_field(task, "centered", bool)
        curvature = task_field(task, "curvature", bool)
        weight_sum = float(np.sum(sk))
        fields = {"weight_sum": weight_sum, "y_ndim": int(y_ndim)}
        arrays = {}
        if centered or curvature:
            x_mean = (np.asarray(safe_sparse_dot(sk, Xk)).ravel() / weight_sum
                      if weight_sum > 0 else np.zeros(Xk.shape[1]))
        if centered:
            arrays = {"x_mean": x_mean, "y_mean": (sk @ yk) / weight_sum if weight_sum > 0
                      else np.zeros(yk.shape[1])}
        if curvature:  # mean squared norm of the rows around the site's centre
            if sp.issparse(Xk):  # sparse features rarely carry large offsets
                squares = np.asarray(Xk.multiply(Xk).sum(axis=1)).ravel()
                shift = float(x_mean @ x_mean) if centered else 0.0
            else:
                centre = x_mean if centered else 0.0
                squares, shift = ((Xk - centre) ** 2).sum(axis=1), 0.0
            fields["curvature"] = max(
                float(sk @ squares) / weight_sum - shift if weight_sum > 0 else 0.0, 0.0
            )
        return fields, arrays

    def _read_train_task(self, task, d, t):
        params = _Training(task)
        rows = d + params.augment
        coef = task.arrays.get("coef")
        if not (isinstance(coef, np.ndarray) and coef.shape == (rows, t)
                and coef.dtype == np.float64 and np.all(np.isfinite(coef))):
            server_error(f"the task's model must be a finite ({rows}, {t}) float64 array.")
        if task_field(task, "centered", bool):
            x_mean, y_mean = task.arrays.get("x_mean"), task.arrays.get("y_mean")
            if not (isinstance(x_mean, np.ndarray) and x_mean.shape == (d,)
                    and isinstance(y_mean, np.ndarray) and y_mean.shape == (t,)):
                server_error("malformed global means in the task.")
            return params, coef, x_mean, y_mean
        return params, coef, None, None

    def _weight_sum(self, task, sk):
        weight_sum = float(np.sum(sk))
        if not weight_sum > 0:
            raise ValueError(
                f"site {task.site!r} has total sample weight 0: it cannot train."
            )
        return weight_sum

    def _train_reply(self, task, coef, W, steps, loss):
        """``(fields, arrays)`` of a training reply (DP-FedAvg overrides it)."""
        if not (np.all(np.abs(W) <= _MAX_VALUE) and math.isfinite(loss)):  # NaN fails too
            raise ValueError(
                f"site {task.site!r}: local training diverged in round "
                f"{task.fields.get('round')}: its model exceeded {_MAX_VALUE:g}. Reduce "
                f"learning_rate (now {task.fields.get('learning_rate'):.4g}) or use "
                "learning_rate='auto'."
            )
        return {"steps": int(steps), "loss": float(loss)}, {"coef": W}


class SGDServer(Server):
    """Server of a gradient baseline: setup round, then ``n_rounds`` model rounds.

    ``fit`` runs ``n_rounds`` rounds after the setup; ``partial_fit``
    (``warm_start``) one, continuing from the estimator's model and random
    state. Subclass hooks: :meth:`_aggregate` (the new global model) and the
    DP-FedAvg additions of :class:`DPFedAvgRegressor`.
    """

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self.protocol = estimator._protocol
        state = getattr(estimator, "_sgd_state", None) if self.warm_start else None
        if state is None:  # a new model
            state = {"coef": None, "rng": check_random_state(estimator.random_state),
                     "history": []}
        # copies: a failed round must leave the estimator's state alone
        self._coef = state["coef"]
        self._rng = copy.deepcopy(state["rng"])
        self._history = list(state["history"])
        self._setup = None
        self._warned = False
        # an intercept: an augmented coordinate of the model, or centering on the global means
        self._augment = bool(estimator.fit_intercept) and estimator._intercept_coordinate
        self._centered = bool(estimator.fit_intercept) and not self._augment
        self._auto_step = isinstance(estimator.learning_rate, str)  # "auto"
        ledger = self._ledger
        self._mark = (0, 0) if ledger is None else (ledger.uplink_bytes, ledger.downlink_bytes)

    # ------------------------------------------------------------ plan
    def plan(self, sites):
        estimator = self.estimator
        if self._setup is None:
            fields = {
                "step": "setup",
                "centered": self._centered,
                "curvature": self._auto_step,
                **self._private_fields("setup"),
            }
            return {site: (dict(fields), {}) for site in sites}
        if self.rounds_applied > (1 if self.warm_start else int(estimator.n_rounds)):
            return {}  # the setup and every model round are applied
        sizes = self._setup["sizes"]
        eligible = sorted_labels(s for s in sites if sizes.get(label_key(s), 0.0) > 0)
        if not eligible:
            raise ValueError("no reachable site with a positive weight took part in the setup.")
        if estimator.client_fraction < 1:
            m = max(1, int(round(estimator.client_fraction * len(eligible))))
            index = np.sort(self._rng.choice(len(eligible), size=m, replace=False))
            eligible = [eligible[i] for i in index]
        seeds = self._rng.randint(0, 2**32, size=len(eligible), dtype=np.int64)
        arrays = {"coef": self._coef}
        if self._centered:
            arrays.update(x_mean=self._setup["x_mean"], y_mean=self._setup["y_mean"])
        fields = {
            "step": "train",
            "round": len(self._history) + 1,
            "centered": self._centered,
            "intercept_coordinate": self._augment,
            "alpha": float(estimator.alpha) / self._setup["total"],
            "learning_rate": self._setup["learning_rate"],
            "local_epochs": int(estimator.local_epochs),
            "batch_size": None if estimator.batch_size is None else int(estimator.batch_size),
            "proximal_mu": float(getattr(estimator, "mu", 0.0)),  # FedProx's, else none
            **self._private_fields("train"),
        }
        return {site: ({**fields, "seed": int(seed)}, dict(arrays))
                for site, seed in zip(eligible, seeds)}

    def _private_fields(self, step):
        """Fields of differentially private tasks (DP-FedAvg); none otherwise."""
        return {}

    # ------------------------------------------------------------ read
    def read_reply(self, site, frame):
        d, t = frame.schema["n_features"], frame.schema["n_targets"]
        if self._setup is None:
            return self._read_setup(site, frame, d, t)
        return self._read_train(site, frame, d + self._augment, t)

    def _read_setup(self, site, frame, d, t):
        fields = ["weight_sum", "y_ndim"]
        if self._auto_step:
            fields.append("curvature")
        reply_keys(frame, site, fields=fields,
                   arrays=["x_mean", "y_mean"] if self._centered else [])
        y_ndim = frame.fields["y_ndim"]
        if y_ndim not in (1, 2) or type(y_ndim) is not int or (y_ndim == 1 and t != 1):
            failing(site)(f"malformed y_ndim {y_ndim!r}.")
        reply = {
            "weight_sum": self._read_weight(site, frame),
            "y_ndim": y_ndim,
            "n_targets": t,
            "curvature": reply_number(frame, "curvature", site, high=1e300)
            if "curvature" in fields else None,
        }
        if self._centered:
            reply["x_mean"] = _bounded(reply_array(frame, "x_mean", (d,), site), site)
            reply["y_mean"] = _bounded(reply_array(frame, "y_mean", (t,), site), site)
        return reply

    def _read_weight(self, site, frame):
        return reply_number(frame, "weight_sum", site, high=_MAX_VALUE)

    def _read_train(self, site, frame, rows, t):
        reply_keys(frame, site, fields=["steps", "loss"], arrays=["coef"])
        return {
            "steps": reply_number(frame, "steps", site, low=1, high=2**40, integer=True),
            "loss": reply_number(frame, "loss", site, high=math.inf),
            "coef": _bounded(reply_array(frame, "coef", (rows, t), site), site),
        }

    # ------------------------------------------------------------ apply
    def _apply_setup(self, replies):
        estimator = self.estimator
        order = sorted_labels(replies)
        y_ndim = replies[order[0]]["y_ndim"]
        if any(replies[site]["y_ndim"] != y_ndim for site in order):
            # 1-D targets or one column: nothing declares which, so no site is more right
            # than another (as check_agreement: refuse the round and blame none)
            shapes = {site: replies[site]["y_ndim"] for site in order}
            raise ValueError(
                f"the sites' replies disagree on their targets' dimensions ({shapes}): "
                "every site must give 1-D y, or every site 2-D y.")
        sizes = {label_key(site): max(replies[site]["weight_sum"], 0.0) for site in order}
        total = math.fsum(sizes.values())
        if not total > 0:
            raise ValueError("the sites' total sample weight is 0: there is nothing to fit.")
        d = self.schema.n_features
        t = replies[order[0]]["n_targets"]
        setup = {"sizes": sizes, "total": total, "labels": order, "single": y_ndim == 1}
        if self._centered:
            weights = np.array([sizes[label_key(s)] for s in order]) / total
            setup["x_mean"] = weights @ np.stack([replies[s]["x_mean"] for s in order])
            setup["y_mean"] = weights @ np.stack([replies[s]["y_mean"] for s in order])
        lr = estimator.learning_rate
        if self._auto_step:  # 1 / (a bound on every site's curvature)
            spread = [replies[s]["curvature"] + (
                float(np.sum((replies[s]["x_mean"] - setup["x_mean"]) ** 2))
                if self._centered else 0.0) for s in order if sizes[label_key(s)] > 0]
            lr = 1.0 / (max(spread) + float(estimator.alpha) / total
                        + float(getattr(estimator, "mu", 0.0)))
        setup["learning_rate"] = float(lr)
        if self._coef is None:
            self._coef = np.zeros((d + self._augment, t))
        elif self._coef.shape != (d + self._augment, t) or (
                estimator._sgd_state["single"] != setup["single"]):
            failing(order[0])("its targets differ from the model's (partial_fit continues the "
                              "same model).")
        self._setup = setup

    def apply(self, replies, ledger):
        if self._setup is None:  # the setup round
            return self._apply_setup(replies)
        estimator = self.estimator
        order = sorted_labels(replies)
        weights = np.array([self._setup["sizes"][label_key(s)] for s in order])
        p = weights / math.fsum(weights)
        steps = np.array([replies[s]["steps"] for s in order], dtype=np.float64)
        coef = self._aggregate(self._coef, [replies[s] for s in order], p, steps)
        round_number = len(self._history) + 1
        if not np.all(np.isfinite(coef)):
            raise ValueError(
                f"{type(estimator).__name__} diverged in round {round_number}: the model "
                f"became non-finite. Reduce learning_rate (now "
                f"{self._setup['learning_rate']:.4g}) or use learning_rate='auto'."
            )
        mse = self._reported_mse(replies, order, weights)
        self._check_progress(mse, round_number)
        history = [*self._history, {
            "round": round_number,
            "train_mse": mse,
            "uplink_bytes": ledger.uplink_bytes - self._mark[0],
            "downlink_bytes": ledger.downlink_bytes - self._mark[1],
            "n_participants": len(order),
        }]
        ledger.n_parameters = (self.schema.n_features + bool(estimator.fit_intercept)) * (
            coef.shape[1])
        state = {"coef": coef, "rng": self._rng, "history": history,
                 "single": self._setup["single"], "fit_intercept": bool(estimator.fit_intercept)}
        self._commit(state, ledger)
        # the server goes on from the committed state (copies for the next round)
        self._coef, self._history = coef, history
        self._rng = copy.deepcopy(self._rng)
        self._mark = (ledger.uplink_bytes, ledger.downlink_bytes)

    def _reported_mse(self, replies, order, weights):
        """MSE of the model sent this round on the participants' rows (as they report it)."""
        total = math.fsum(replies[s]["loss"] for s in order)
        return total / (math.fsum(weights) * self._coef.shape[1])

    def _check_progress(self, mse, round_number):
        first = self._history[0]["train_mse"] if self._history else mse
        if (not self._warned and mse is not None and first is not None
                and mse > _DIVERGENCE_FACTOR * first):
            self._warned = True
            warn(
                f"{type(self.estimator).__name__} is diverging: the training MSE of the "
                f"global model grew from {first:.3g} to {mse:.3g} in {round_number - 1} "
                f"rounds. Reduce "
                f"learning_rate (now {self._setup['learning_rate']:.4g}), or use "
                "learning_rate='auto'; standardize the features.",
                ConvergenceWarning,
            )

    def _aggregate(self, coef, replies, p, steps):
        """New global model from the participants' replies (FedAvg: weighted mean)."""
        return np.tensordot(p, np.stack([reply["coef"] for reply in replies]), axes=1)

    def _commit(self, state, ledger):
        estimator = self.estimator
        coef = state["coef"]
        d = self.schema.n_features
        dtype = self.round_dtype.type
        if self._augment:
            weights, intercept = coef[:d], coef[d]
        elif self._centered:
            weights = coef
            intercept = self._setup["y_mean"] - self._setup["x_mean"] @ coef
        else:
            weights, intercept = coef, np.zeros(coef.shape[1])
        single = state["single"]
        # commit: nothing above touched the estimator
        estimator._sgd_state = state
        estimator.coef_ = (weights.T[0] if single else weights.T).astype(dtype)
        if single:
            estimator.intercept_ = float(intercept[0]) if estimator.fit_intercept else 0.0
        else:
            estimator.intercept_ = intercept.astype(dtype)
        estimator.learning_rate_ = self._setup["learning_rate"]
        estimator.history_ = state["history"]
        estimator.n_rounds_ = len(state["history"])
        set_federation_attributes(estimator, self.schema, ledger, self._setup["labels"])


# ---------------------------------------------------------------- estimator
class BaseFederatedSGD(FederatedEstimatorMixin, MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Shared protocol of FedAvg, FedProx, FedNova and DP-FedAvg for linear models.

    The global objective is ridge's, divided by ``2 S`` (``S`` = total sample
    weight) so that a learning rate means the same for any data size::

        F(w, b) = (1 / 2S) * (sum_i s_i (y_i - x_i w - b)^2 + alpha ||w||^2)
                = sum_k p_k F_k(w, b),   p_k = S_k / S,
        F_k(w, b) = (1 / 2S_k) sum_{i in k} s_i (y_i - x_i w - b)^2
                    + (alpha / 2S) ||w||^2.

    Its minimizer is :class:`~sklearn.linear_model.Ridge` ``(alpha)``'s solution.
    The intercept is unpenalized: in the setup round sites announce their
    weight ``S_k`` and weighted means, every site centers its rows on the
    global means, rounds then optimize ``w`` alone (for a fixed ``w`` the best
    ``b`` is ``y_mean - x_mean w``, which turns ``F`` into the centered
    problem), and ``intercept_ = y_mean - x_mean @ coef_``. Subclasses set the
    protocol name, the proximal weight (a ``mu`` parameter) and the server's
    aggregation.
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "local_epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "n_rounds": [Interval(Integral, 1, None, closed="left")],
        "client_fraction": [Interval(Real, 0, 1, closed="right")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    _protocol = None
    _server_role = SGDServer
    _client_role = SGDClient
    # DP-FedAvg learns the intercept as a model coordinate instead of
    # centering on announced means (which it would have to noise).
    _intercept_coordinate = False

    # what fit does without clients (MissingClientsWarning)
    _without_clients = "each round is gradient descent on one client holding every row"

    # FedAvg and FedNova take exactly these; subclasses with more define their own.
    def __init__(
        self,
        alpha=1.0,
        *,
        fit_intercept=True,
        learning_rate="auto",
        local_epochs=5,
        batch_size=None,
        n_rounds=100,
        client_fraction=1.0,
        random_state=None,
        verbose=0,
    ):
        self._set_constructor_arguments(locals())

    def _set_constructor_arguments(self, arguments):
        """Store each parameter of ``__init__`` unchanged (``fit`` validates them)."""
        for name in self._get_param_names():
            setattr(self, name, arguments[name])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    # ---------------------------------------------------------------- public
    @fit_method(
        sample_weight="Non-negative row weights; a client's aggregation weight is the sum "
                      "of its rows' weights.",
        clients="Client label of each row (any hashable). ``None``: all rows belong to one "
                "client (then FedAvg is plain local gradient descent).",
    )
    def fit(self, X, y, sample_weight=None, clients=None):
        """Run the setup round and ``n_rounds`` rounds from a zero model."""
        return self._fit(X, y, sample_weight, clients)

    @fit_method(partial=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Run the setup round and exactly one more model round on the rows given.

        The first call starts from a zero model. Later calls continue from the
        current model and random state, so ``fit`` with ``n_rounds=R`` followed
        by one ``partial_fit`` on the same rows equals ``fit`` with
        ``n_rounds=R + 1``. Each call is one run of the protocol: sites
        announce their weights and means for the rows of this call (pass the
        same rows to continue training), then train one round. A call that
        raises leaves the estimator unchanged.
        """
        # the setup round and one model round, on the first call too
        return self._fit(X, y, sample_weight, clients, partial=True, max_rounds=2)

    # the same linear model as the ridge family's: ``coef_`` and ``intercept_`` shaped as Ridge's
    predict = BaseFederatedRidge.predict

    # ---------------------------------------------------------------- internals
    def _check_before_rows(self, *, partial):
        if partial:  # sklearn skips this once fitted; set_params may have changed them
            self._validate_params()

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        X, y = validate_regression(self, X, y, reset=reset)
        X, sample_weight = rows_and_weights(X, sample_weight)
        return X, y, sample_weight

    def _fitted_state(self):
        """The model, random state and history ``partial_fit`` continues, or None."""
        return getattr(self, "_sgd_state", None)

    def _check_more_rows(self, X, y):
        state = self._sgd_state
        t = 1 if y.ndim == 1 else y.shape[1]
        if t != state["coef"].shape[1]:
            raise ValueError(
                f"y has {t} targets but earlier calls had {state['coef'].shape[1]}."
            )
        if (y.ndim == 1) != state["single"]:
            raise ValueError("y changed between 1-D and 2-D since the first call.")
        if self.fit_intercept != state["fit_intercept"]:
            raise ValueError(
                "fit_intercept changed since the first partial_fit; call fit to restart."
            )
