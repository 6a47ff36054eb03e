"""FedMPDDClassifier: skorch-wrapped federated training with tiny uplinks.

How skorch's loop maps onto the protocol
-----------------------------------------
One skorch **epoch is one communication round**, so ``max_epochs`` is the
number of rounds and ``net.history`` has one row per round. In a round the
training iterator (:meth:`FedMPDDClassifier.get_iterator`) yields a single
"batch": the minibatches of the sampled participants, stacked and padded.
:meth:`FedMPDDClassifier.train_step` then

1. computes every participant's stochastic gradient at the current model
   (``torch.func.vmap(grad)`` over clients, or a per-client loop),
2. encodes each with the uplink codec (the client side) and decodes it with
   the seed alone (the server side),
3. averages the decoded estimates, writes them into ``.grad`` and lets the
   skorch optimizer take its step,
4. records the round's ledger in ``history``: ``uplink_bytes``,
   ``uplink_bytes_total``, ``downlink_bytes``, ``downlink_bytes_total``,
   ``participants``, ``round``.
"""

import copy
import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F
from skorch import NeuralNetClassifier
from skorch.utils import TeeGenerator
from sklearn.exceptions import NotFittedError
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils import check_random_state

from .._clients import group_rows_by_client, take_clients
from .._compat import (
    Interval,
    StrOptions,
    _check_sample_weight,
    validate_data,
    validate_parameter_constraints,
)
from ..protocol import CommunicationLedger
from ._codecs import UPLINKS, derive_seed, make_codec
from ._modules import MLP

__all__ = ["FedMPDDClassifier"]

_SERVER = (1 << 32) - 1  # pseudo client index for the server's own randomness


class _RoundIterator:
    """Yields one padded batch per round: the sampled participants' minibatches."""

    def __init__(self, net, X, y, client_rows, sample_weight=None):
        self.net, self.X, self.y = net, X, y
        self.sample_weight = sample_weight
        self.client_rows = [r for r in client_rows if len(r)]

    def __len__(self):
        return 1

    def __iter__(self):
        net = self.net
        round_index = len(net.history) - 1
        rng = np.random.default_rng(derive_seed(net.seed_, round_index, _SERVER))
        n = len(self.client_rows)
        n_part = max(1, math.ceil(net.client_fraction * n - 1e-12))
        participants = np.sort(rng.choice(n, n_part, replace=False))
        picks = []
        for c in participants:
            rows = self.client_rows[c]
            full = net.batch_size in (-1, None) or net.batch_size >= len(rows)
            picks.append(rows if full else np.sort(rng.choice(rows, net.batch_size,
                                                              replace=False)))
        width = max(len(p) for p in picks)
        Xb = torch.zeros((n_part, width) + tuple(self.X.shape[1:]), dtype=self.X.dtype)
        yb = torch.zeros((n_part, width), dtype=self.y.dtype)
        wb = torch.zeros((n_part, width), dtype=torch.float32)
        for i, p in enumerate(picks):
            idx = torch.as_tensor(p)
            Xb[i, :len(p)] = self.X[idx]
            yb[i, :len(p)] = self.y[idx]
            sw = self.sample_weight
            wb[i, :len(p)] = 1.0 if sw is None else sw[idx]
        counts = torch.as_tensor([len(p) for p in picks], dtype=torch.float32)
        yield Xb, yb, wb, counts, torch.as_tensor(participants)


class FedMPDDClassifier(NeuralNetClassifier):
    """Federated classifier whose clients upload m directional derivatives (FedMPDD).

    Rows are split into simulated clients (``partition`` or an explicit
    ``clients`` array). Each round (= one skorch epoch) the server samples
    ``ceil(client_fraction * n_clients)`` clients; each computes a minibatch
    gradient ``g`` at the current model, draws ``m`` directions ``U`` from a
    seed derived from ``(random_state, round, client)`` and uploads ``U^T g``
    plus the seed. The server regenerates ``U``, decodes ``(1/m) U U^T g``,
    averages over participants and takes the optimizer step.
    ``n_directions=1`` is FedPDD. ``uplink`` switches to the baselines
    (FedSGD, QSGD, top-k, FedSGD with Gaussian/Laplace noise) in the same loop.

    Parameters
    ----------
    module : torch module class or instance, default=None
        ``None`` uses :class:`~sklearn_fed.neural_network.MLP`, whose
        ``n_features`` and ``n_classes`` are inferred at fit. The module must
        return logits for the default criterion.
    n_clients : int, default=100
        Number of simulated clients when ``clients`` is not given to ``fit``.
    client_fraction : float in (0, 1], default=0.5
        Fraction ``beta`` of clients taking part in each round.
    n_directions : int, default=400
        Directions ``m`` per client and round (``uplink="mpdd"``).
    direction : {"rademacher", "gaussian"}, default="rademacher"
    partition : {"iid", "shards", "dirichlet"}, default="iid"
        How rows are split into ``n_clients`` clients; ``"shards"`` gives each
        client exactly two classes (the paper's non-iid setting).
    uplink : {"mpdd", "full", "qsgd", "topk", "gaussian", "laplace"}, default="mpdd"
    quantization_levels : int, default=255
        QSGD levels ``s`` (``uplink="qsgd"``).
    topk : int, default=400
        Entries kept by ``uplink="topk"``.
    noise_scale : float, default=0.1
        Std (Gaussian) or scale (Laplace) of the local noise.
    dirichlet_alpha : float, default=0.5
        Concentration for ``partition="dirichlet"``.
    vectorize : {"auto", True, False}, default="auto"
        Compute participants' gradients with ``vmap(grad)``; ``"auto"`` falls
        back to a per-client loop when the module cannot be vmapped.
    random_state : int, RandomState or None, default=None
        Seeds the module initialization, partition, client sampling and the
        directions.
    criterion, optimizer, lr, batch_size, max_epochs, train_split, verbose, **kwargs
        As in :class:`skorch.NeuralNetClassifier`; ``batch_size`` is the
        per-client minibatch (-1: all the client's rows) and ``max_epochs``
        the number of rounds.

    Attributes
    ----------
    classes_ : ndarray
    n_features_in_ : int
    clients_ : ndarray
        Client labels, in the order of :attr:`client_rows_`.
    client_rows_ : list of ndarray
        Row indices of each client.
    communication_ : CommunicationLedger
        Bytes uploaded per client and broadcast, over all rounds.
    history : skorch History
        One row per round with the ledger columns.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.preprocessing import scale
    >>> X, y = load_iris(return_X_y=True)
    >>> net = FedMPDDClassifier(n_clients=10, n_directions=20, max_epochs=30,
    ...                         lr=0.5, random_state=0).fit(scale(X), y)
    >>> net.history[-1, "uplink_bytes"] == 5 * (4 * 20 + 8)
    True
    >>> net.score(scale(X), y) > 0.6
    True
    """

    _fed_constraints = {
        "n_clients": [Interval(numbers.Integral, 1, None, closed="left")],
        "client_fraction": [Interval(numbers.Real, 0, 1, closed="right")],
        "n_directions": [Interval(numbers.Integral, 1, None, closed="left")],
        "direction": [StrOptions({"rademacher", "gaussian"})],
        "partition": [StrOptions({"iid", "shards", "dirichlet"})],
        "uplink": [StrOptions(set(UPLINKS))],
        "quantization_levels": [Interval(numbers.Integral, 1, None, closed="left")],
        "topk": [Interval(numbers.Integral, 1, None, closed="left")],
        "noise_scale": [Interval(numbers.Real, 0, None, closed="left")],
        "dirichlet_alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "vectorize": [StrOptions({"auto"}), "boolean"],
        "random_state": ["random_state"],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left"),
                       StrOptions({"-1"}), None],
    }

    @property
    def _without_clients(self):  # what fit does without clients (MissingClientsWarning)
        return (f"its rows are split into n_clients={self.n_clients} simulated clients "
                f"(partition={self.partition!r}); to simulate on purpose, pass the split, "
                f"e.g. clients=sklearn_fed.simulation.partition_iid(len(X), {self.n_clients})")

    def __init__(
        self,
        module=None,
        *,
        n_clients=100,
        client_fraction=0.5,
        n_directions=400,
        direction="rademacher",
        partition="iid",
        uplink="mpdd",
        quantization_levels=255,
        topk=400,
        noise_scale=0.1,
        dirichlet_alpha=0.5,
        vectorize="auto",
        random_state=None,
        criterion=torch.nn.CrossEntropyLoss,
        optimizer=torch.optim.SGD,
        lr=0.1,
        batch_size=32,
        max_epochs=100,
        train_split=None,
        verbose=0,
        **kwargs,
    ):
        super().__init__(
            module,
            criterion=criterion,
            optimizer=optimizer,
            lr=lr,
            batch_size=batch_size,
            max_epochs=max_epochs,
            train_split=train_split,
            verbose=verbose,
            **kwargs,
        )
        self.n_clients = n_clients
        self.client_fraction = client_fraction
        self.n_directions = n_directions
        self.direction = direction
        self.partition = partition
        self.uplink = uplink
        self.quantization_levels = quantization_levels
        self.topk = topk
        self.noise_scale = noise_scale
        self.dirichlet_alpha = dirichlet_alpha
        self.vectorize = vectorize
        self.random_state = random_state

    # ------------------------------------------------------------------ tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        return tags

    # ----------------------------------------------------------- validation
    def _check_fed_params(self):
        params = {k: getattr(self, k) for k in self._fed_constraints}
        if params["batch_size"] == -1:
            params["batch_size"] = "-1"
        validate_parameter_constraints(
            self._fed_constraints, params, type(self).__name__
        )

    def _validate_X(self, X, reset):
        X = validate_data(self, X, reset=reset, dtype=np.float32, ensure_min_samples=1)
        return X

    def _client_partition(self, y_enc, clients, n_samples, seed):
        if clients is not None:
            clients = np.asarray(clients)
            if clients.shape != (n_samples,):
                raise ValueError(
                    f"clients must have one label per row: got shape {clients.shape} for "
                    f"{n_samples} samples"
                )
            labels, rows = group_rows_by_client(clients, n_samples)
            # contiguous clients come as slices; the round iterator needs index arrays
            return np.asarray(labels), [np.arange(n_samples)[r] for r in rows]
        if self.n_clients > n_samples:
            raise ValueError(
                f"n_clients={self.n_clients} exceeds n_samples={n_samples}: every simulated "
                "client needs at least one row; lower n_clients or pass `clients`."
            )
        from ..simulation._partition import (
            partition_dirichlet,
            partition_iid,
            partition_label_shards,
        )

        if self.partition == "iid":
            assign = partition_iid(n_samples, self.n_clients, random_state=seed)
        elif self.partition == "shards":
            assign = partition_label_shards(y_enc, self.n_clients, classes_per_client=2,
                                            random_state=seed)
        else:
            assign = partition_dirichlet(
                y_enc, self.n_clients, alpha=self.dirichlet_alpha, random_state=seed
            )
        assign = np.asarray(assign)
        labels = np.unique(assign)
        return labels, [np.flatnonzero(assign == c) for c in labels]

    # ------------------------------------------------------------------- fit
    def fit(self, X, y, sample_weight=None, clients=None, **fit_params):
        """Train for ``max_epochs`` rounds from a fresh model (unless ``warm_start``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Per-row weights: a client's loss is the mean of its rows'
            weighted losses.
        clients : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` partitions rows by ``partition``.
        **fit_params
            Passed on to skorch.

        Returns
        -------
        self
        """
        reset = not (self.warm_start and self.initialized_)
        return self._fit(X, y, sample_weight, clients, reset, fit_params)

    def partial_fit(
        self, X, y, classes=None, sample_weight=None, clients=None, **fit_params
    ):
        """Run ``max_epochs`` more rounds, continuing from the current model.

        Parameters are as in :meth:`fit`; ``classes`` lists every label when
        the first call does not see them all.
        """
        reset = not self.initialized_
        return self._fit(
            X, y, sample_weight, clients, reset, fit_params, classes=classes
        )

    def _fit(self, X, y, sample_weight, clients, reset, fit_params, classes=None):
        self._check_fed_params()
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, "
                "but the target y is None."
            )
        clients = take_clients(self, X, clients)
        X, y = validate_data(
            self, X, y, reset=reset, dtype=np.float32, ensure_min_samples=1
        )
        check_classification_targets(y)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float32)
        if reset:
            encoder = LabelEncoder().fit(y if classes is None else classes)
            classes_ = encoder.classes_
        else:
            classes_ = self.classes_
            unknown = np.setdiff1d(np.unique(y), classes_)
            if len(unknown):
                raise ValueError(
                    f"y has labels {unknown.tolist()} not seen at the first fit"
                )
        y_enc = np.searchsorted(classes_, y).astype(np.int64)
        if reset:
            rs = self.random_state
            seed = (int(rs) if isinstance(rs, numbers.Integral)
                    else int(check_random_state(rs).randint(np.iinfo(np.int32).max)))
        else:
            seed = self.seed_
        labels, rows = self._client_partition(y_enc, clients, X.shape[0], seed)
        # all checks passed: now touch state
        self.seed_ = seed
        self.classes_inferred_ = classes_
        self.clients_ = labels
        self.client_rows_ = rows
        self.sample_weight_ = sample_weight
        if reset:
            self.communication_ = None
            self.initialize()
        self._n_classes_ = len(classes_)
        try:
            super().partial_fit(X, y_enc, **fit_params)
        finally:
            self.sample_weight_ = None  # do not keep a copy of the data weights
        self.classes_inferred_ = classes_
        return self

    def check_data(self, X, y):
        # classes_ are set by _fit from the original labels, not the encoded ones
        if y is None:
            super().check_data(X, y)

    def initialize_module(self):
        kwargs = self.get_params_for("module")
        module = MLP if self.module is None else self.module
        if module is MLP:
            if not hasattr(self, "n_features_in_"):
                raise ValueError(
                    "the default module infers its input size at fit; call fit first or "
                    "pass module__n_features and module__n_classes"
                )
            kwargs.setdefault("n_features", self.n_features_in_)
            kwargs.setdefault("n_classes", len(self.classes_inferred_))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(getattr(self, "seed_", 0), 0, _SERVER - 1))
            self.module_ = self.initialized_instance(module, kwargs)
        return self

    def initialize_criterion(self):
        super().initialize_criterion()
        return self

    # ------------------------------------------------------------ the round
    def get_iterator(self, dataset, training=False):
        """Per-round participant batches when training, skorch's DataLoader otherwise."""
        if not training:
            return super().get_iterator(dataset, training=False)
        base, keep = dataset, None
        if isinstance(dataset, torch.utils.data.Subset):
            base, keep = dataset.dataset, np.asarray(dataset.indices)
        X = torch.as_tensor(np.asarray(base.X), dtype=torch.float32)
        y = torch.as_tensor(np.asarray(base.y), dtype=torch.int64)
        rows = self.client_rows_
        if keep is not None:
            rows = [np.intersect1d(r, keep) for r in rows]
        sw = self.sample_weight_
        if sw is not None:
            sw = torch.as_tensor(sw, dtype=torch.float32)
        return _RoundIterator(self, X, y, rows, sw)

    def _codec(self):
        return make_codec(
            self.uplink, n_directions=self.n_directions, direction=self.direction,
            levels=self.quantization_levels, k=self.topk, noise_scale=self.noise_scale,
        )

    def _per_sample_loss(self, logits, y):
        crit = self.criterion_
        if isinstance(crit, torch.nn.CrossEntropyLoss) and crit.weight is None:
            return F.cross_entropy(logits, y, reduction="none",
                                   label_smoothing=crit.label_smoothing)
        crit = copy.copy(crit)
        crit.reduction = "none"
        if isinstance(crit, torch.nn.NLLLoss):
            logits = torch.log(logits + torch.finfo(logits.dtype).eps)
        return crit(logits, y)

    def _params(self):
        return [(k, p) for k, p in self.module_.named_parameters() if p.requires_grad]

    def _gradients_vmap(self, Xb, yb, wb, nb):
        from torch.func import functional_call, grad_and_value, vmap

        names = [k for k, _ in self._params()]
        params = {k: p.detach() for k, p in self._params()}
        buffers = dict(self.module_.named_buffers())
        module = self.module_

        def loss_fn(params, x, y, w, n):
            logits = functional_call(module, (params, buffers), (x,))
            return (self._per_sample_loss(logits, y) * w).sum() / n

        g, loss = vmap(grad_and_value(loss_fn), in_dims=(None, 0, 0, 0, 0))(
            params, Xb, yb, wb, nb)
        return torch.cat([g[k].reshape(Xb.shape[0], -1) for k in names], 1), loss

    def _gradients_loop(self, Xb, yb, wb, nb):
        params = [p for _, p in self._params()]
        grads, losses = [], []
        for x, y, w, n in zip(Xb, yb, wb, nb):
            k = int(n)  # rows past n are padding
            logits = self.module_(x[:k])
            loss = (self._per_sample_loss(logits, y[:k]) * w[:k]).sum() / n
            gs = torch.autograd.grad(loss, params)
            grads.append(torch.cat([g.reshape(-1) for g in gs]))
            losses.append(loss.detach())
        return torch.stack(grads), torch.stack(losses)

    def client_gradients(self, Xb, yb, wb, nb):
        """Each participant's minibatch gradient, flat: shape ``(n_participants, d)``.

        ``Xb``, ``yb``, ``wb`` are padded to a common minibatch width; ``nb``
        holds each participant's true number of rows.
        """
        mode = self.vectorize
        if mode is False or getattr(self, "_vmap_failed_", False):
            return self._gradients_loop(Xb, yb, wb, nb)
        try:
            return self._gradients_vmap(Xb, yb, wb, nb)
        except Exception:
            if mode is True:
                raise
            # e.g. in-place ops or data-dependent control flow in the module
            self._vmap_failed_ = True
            return self._gradients_loop(Xb, yb, wb, nb)

    def train_step(self, batch, **fit_params):
        """One communication round: gradients, encode, decode, average, step, ledger."""
        Xb, yb, wb, nb, participants = batch
        self._set_training(True)
        Xb, yb, wb, nb = (t.to(self.device) for t in (Xb, yb, wb, nb))
        grads, losses = self.client_gradients(Xb, yb, wb, nb)
        grads = grads.detach().to("cpu", torch.float32)
        n_part, d = grads.shape
        round_index = len(self.history) - 1
        bad = ~torch.isfinite(grads).all(1)
        if bad.any():
            who = self.clients_[participants[bad].tolist()[0]]
            raise FloatingPointError(
                f"client {who!r} computed a non-finite gradient in round {round_index}; "
                "lower lr or scale the features (e.g. StandardScaler)."
            )
        codec = self._codec()
        messages = [  # each client encodes its own gradient
            codec.encode(g, seed=derive_seed(self.seed_, round_index, c))
            for g, c in zip(grads, participants.tolist())
        ]
        estimate = codec.decode_mean(messages, d)  # the server, from the messages alone
        if self.communication_ is None:
            self.communication_ = CommunicationLedger(n_parameters=d)
        for message, c in zip(messages, participants.tolist()):
            self.communication_.record_upload(self.clients_[c], message.nbytes)
        uplink = sum(message.nbytes for message in messages)
        self.communication_.record_broadcast(n_part, d, itemsize=4)

        self._zero_grad_optimizer()
        offset = 0
        for _, p in self._params():
            n = p.numel()
            chunk = estimate[offset:offset + n].view_as(p)
            p.grad = chunk.to(p.device, p.dtype).clone()
            offset += n
        # callbacks such as skorch's GradientNormClipping see the decoded average
        learnable = TeeGenerator(self.get_all_learnable_params())
        self.notify("on_grad_computed", named_parameters=learnable, batch=batch,
                    training=True)
        self._step_optimizer(None)
        self._record_ledger(round_index, n_part, uplink, n_part * d * 4)
        return {"loss": losses.mean(), "y_pred": None}

    def _record_ledger(self, round_index, n_part, uplink, downlink):
        previous = self.history[-2] if len(self.history) > 1 else {}
        h = self.history
        h.record("round", round_index)
        h.record("participants", n_part)
        h.record("uplink_bytes", int(uplink))
        up_total = previous.get("uplink_bytes_total", 0) + uplink
        h.record("uplink_bytes_total", int(up_total))
        h.record("downlink_bytes", int(downlink))
        h.record("downlink_bytes_total",
                 int(previous.get("downlink_bytes_total", 0) + downlink))

    # -------------------------------------------------------------- predict
    def predict_proba(self, X):
        """Class probabilities (softmax of the module's logits)."""
        if not self.initialized_ or not hasattr(self, "classes_inferred_"):
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet; call 'fit' first."
            )
        X = self._validate_X(X, reset=False)
        return super().predict_proba(X)

    def predict(self, X):
        """Predicted class labels."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]

    def _get_param_names(self):
        # skorch keeps its bookkeeping set `_params_to_validate` in __dict__;
        # it is rebuilt from the keyword arguments, so it is not a parameter.
        return [k for k in super()._get_param_names() if k != "_params_to_validate"]
