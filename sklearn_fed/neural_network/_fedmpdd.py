"""FedMPDDClassifier: a skorch network trained by the FedMPDD protocol.

``fit`` runs the protocol's roles (:mod:`._roles`) in process, and the server's
``apply`` runs **one skorch epoch per round** whose single "batch" is the round's
decoded replies (:meth:`FedMPDDClassifier._train_round`, and the user guide's
"Epochs, rounds and skorch"). A hand-driven run of ``make_server``/``make_client``
goes through exactly the same code.
"""

import copy
import inspect
import math
import numbers
import sys

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from skorch import NeuralNetClassifier
from skorch.callbacks import Callback, EpochTimer, PassthroughScoring, PrintLog
from skorch.history import History

from .._clients import group_rows_by_client, label_array
from .._compat import (
    Interval,
    StrOptions,
    _check_sample_weight,
    validate_data,
    validate_parameter_constraints,
)
from ..base import FederatedEstimatorMixin, fit_method
from ..protocol import label_key
from ..simulation._partition import (
    partition_dirichlet,
    partition_iid,
    partition_label_shards,
)
from ..utils._warnings import warn
from ._codecs import UPLINKS, derive_seed
from ._modules import MLP
from ._roles import SERVER_STREAM, FedMPDDClient, FedMPDDServer, Round, seeded_torch

__all__ = ["CommunicationLog", "FedMPDDClassifier"]


class CommunicationLog(Callback):
    """Records each round's bytes in ``net.history``, from the protocol's ledger.

    Columns: ``round``, ``participants``, ``uplink_bytes`` (this round),
    ``uplink_bytes_total``, ``downlink_bytes``, ``downlink_bytes_total``
    (totals include the first round, in which sites report their labels).
    """

    def on_batch_end(self, net, batch=None, training=None, **kwargs):
        if not isinstance(batch, Round):
            return
        net.history.record("round", batch.index)
        net.history.record("participants", len(batch))
        for name in ("uplink_bytes", "downlink_bytes"):
            total, before = getattr(batch.ledger, name), getattr(batch.previous, name, 0)
            net.history.record(name, total - before)
            net.history.record(f"{name}_total", total)


class _PrintLog(PrintLog):
    """skorch's table, coloured only when it goes to a terminal (no ANSI codes in log files)."""

    def format_row(self, row, key, color):
        if not (self.sink is print and sys.stdout.isatty()):
            row = {k: v for k, v in row.items() if k != key + "_best"}
        return super().format_row(row, key, color)


def _short_repr(value):
    """``repr`` without memory addresses: classes by name, components by their parameters."""
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, (list, tuple)):
        items = ", ".join(_short_repr(item) for item in value)
        if isinstance(value, list):
            return f"[{items}]"
        return f"({items}{',' if len(value) == 1 else ''})"
    if type(value).__repr__ is object.__repr__:
        params = value.get_params() if hasattr(value, "get_params") else {}
        inner = ", ".join(f"{k}={_short_repr(v)}" for k, v in params.items())
        return f"{type(value).__name__}({inner})"
    return repr(value)


class FedMPDDClassifier(FederatedEstimatorMixin, NeuralNetClassifier):
    """Federated classifier whose clients upload m directional derivatives (FedMPDD).

    Rows are split into clients (an explicit ``clients`` array, or
    ``partition`` into ``n_clients``). Each round (= one skorch epoch) the
    server samples ``ceil(client_fraction * n_clients)`` clients and sends
    each the model and a seed; each computes a minibatch gradient ``g`` on
    its own rows, draws ``m`` Rademacher directions ``U`` from the seed and
    replies ``U^T g`` (``m`` numbers). The server regenerates ``U``, decodes
    ``(1/m) U U^T g``, averages over participants and takes the optimizer
    step. ``n_directions=1`` is FedPDD. ``uplink`` switches to the baselines
    (FedSGD, QSGD, top-k, FedSGD with Gaussian/Laplace noise) in the same
    protocol. ``fit`` runs the protocol's client and server roles in process
    (:meth:`make_server`, :meth:`make_client`): the same code, and the same
    bytes, as separate sites and a server would run.

    Read more in the :ref:`User Guide <fedmpdd>`.

    Parameters
    ----------
    module : torch module class or instance, default=None
        ``None`` uses :class:`~sklearn_fed.neural_network.MLP`, whose
        ``n_features`` and ``n_classes`` are inferred at fit. The module must
        return logits for the default criterion. Sites build the same module
        from this configuration; only parameters travel.
    n_clients : int, default=10
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
        Std (Gaussian) or scale (Laplace) of the local noise. The noise comes
        from the site's own randomness: from the operating system unless
        ``random_state`` is an integer (reproducible, so not private from
        whoever knows it).
    dirichlet_alpha : float, default=0.5
        Concentration for ``partition="dirichlet"``.
    vectorize : {False, True, "auto"}, default=False
        ``False``: every participant's gradient is computed as its site
        computes it, so a simulated round has the bytes of a deployed one.
        ``True``/``"auto"``: participants whose minibatch has fewer than 64
        rows share one ``vmap(grad)`` call (faster for small minibatches);
        a batched kernel rounds differently, so their replies equal a
        site's only to float32 round-off. ``"auto"`` falls back to the exact
        path for modules ``vmap`` cannot handle.
    random_state : int, RandomState or None, default=None
        Seeds the module initialization, partition, client sampling, the
        directions and the sites' minibatches.
    criterion, optimizer, lr, batch_size, max_epochs, verbose, **kwargs
        As in :class:`skorch.NeuralNetClassifier`. The optimizer is the
        server's: it steps with the decoded average gradient. The default,
        Adam with ``lr=0.01`` (as in FedAdam), trains well on raw and
        standardized features alike; the paper's FedMPDD is plain SGD
        (``optimizer=torch.optim.SGD, lr=0.1``). ``batch_size`` is the
        per-client minibatch (-1: all the client's rows) and ``max_epochs``
        the number of rounds per call.
    train_split : None, default=None
        Must be ``None``: a federated server holds no validation rows (score a
        held-out set after ``fit`` instead).

    Attributes
    ----------
    classes_ : ndarray
        Class labels (the union of the labels the sites reported).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        When ``X`` has string column names.
    clients_ : ndarray
        Labels of the sites that took part in the federation.
    client_rows_ : list of ndarray
        Rows of the last call's ``X`` held by each client of ``clients_``
        (``fit``/``partial_fit`` only).
    n_rounds_ : int
        Training rounds run so far (over every call).
    seed_ : int
        The seed every random choice of the protocol derives from.
    communication_ : CommunicationLedger
        Bytes of every task and reply, per client, over all rounds.
    history : skorch History
        One row per round, with the :class:`CommunicationLog` columns.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.preprocessing import scale
    >>> X, y = load_iris(return_X_y=True)
    >>> net = FedMPDDClassifier(n_clients=10, n_directions=20, max_epochs=30,
    ...                         random_state=0).fit(scale(X), y)
    >>> net.history[-1, "participants"], net.score(scale(X), y) > 0.8
    (5, True)
    """

    _server_role = FedMPDDServer
    _client_role = FedMPDDClient

    _fed_constraints = {
        "n_clients": [Interval(numbers.Integral, 1, None, closed="left")],
        "client_fraction": [Interval(numbers.Real, 0, 1, closed="right")],
        "n_directions": [Interval(numbers.Integral, 1, 1 << 24, closed="both")],
        "direction": [StrOptions({"rademacher", "gaussian"})],
        "partition": [StrOptions({"iid", "shards", "dirichlet"})],
        "uplink": [StrOptions(set(UPLINKS))],
        "quantization_levels": [Interval(numbers.Integral, 1, 1 << 16, closed="left")],
        "topk": [Interval(numbers.Integral, 1, None, closed="left")],
        "noise_scale": [Interval(numbers.Real, 0, None, closed="left")],
        "dirichlet_alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "vectorize": [StrOptions({"auto"}), "boolean"],
        "random_state": ["random_state"],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left"),
                       StrOptions({"-1"}), None],
        "max_epochs": [Interval(numbers.Integral, 0, None, closed="left")],
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
        n_clients=10,
        client_fraction=0.5,
        n_directions=400,
        direction="rademacher",
        partition="iid",
        uplink="mpdd",
        quantization_levels=255,
        topk=400,
        noise_scale=0.1,
        dirichlet_alpha=0.5,
        vectorize=False,
        random_state=None,
        criterion=torch.nn.CrossEntropyLoss,
        optimizer=torch.optim.Adam,
        lr=0.01,
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

    # ----------------------------------------------------- sklearn and skorch
    @property
    def _default_callbacks(self):
        return [
            ("epoch_timer", EpochTimer()),
            ("train_loss", PassthroughScoring(name="train_loss", on_train=True)),
            ("communication", CommunicationLog()),
            ("print_log", _PrintLog()),
        ]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        return tags

    def __repr__(self):
        """The parameters that differ from their defaults, as scikit-learn shows them.

        (skorch's repr shows only the module.) Defaults come from this class's
        signature and from skorch's, whose arguments it passes on.
        """
        defaults = {}
        for cls in reversed(type(self).__mro__):
            init = cls.__dict__.get("__init__")
            if init is not None and cls is not object:
                defaults.update(
                    (name, p.default) for name, p in inspect.signature(init).parameters.items()
                    if p.default is not inspect.Parameter.empty
                )
        shown = []
        for name, value in self.get_params(deep=False).items():
            default = defaults.get(name, inspect.Parameter.empty)
            if value is default or (
                type(value) is type(default) and not hasattr(value, "__array__")
                and repr(value) == repr(default)
            ):
                continue
            shown.append(f"{name}={_short_repr(value)}")
        return f"{type(self).__name__}({', '.join(shown)})"

    def set_params(self, **params):
        """Set parameters; callbacks are built from them at the next fit.

        skorch builds the callbacks from the *old* list before storing a new
        one, so one unusable value (say ``callbacks=np.inf``) would break
        every later call; here the values are stored first and checked when
        they are used.
        """
        callbacks = {k: v for k, v in params.items() if k.startswith("callbacks")}
        super().set_params(**{k: v for k, v in params.items() if k not in callbacks})
        if callbacks:
            vars(self).update(callbacks)
            self._params_to_validate.update(k for k in callbacks if k != "callbacks")
            if self.initialized_:
                self._initialize_callbacks()
        return self

    def _get_param_names(self):
        # skorch keeps its bookkeeping set `_params_to_validate` in __dict__;
        # it is rebuilt from the keyword arguments, so it is not a parameter.
        return [k for k in super()._get_param_names() if k != "_params_to_validate"]

    # ------------------------------------------------------------ validation
    def _validate_params(self):
        # Called by scikit-learn's _fit_context and by skorch's initialize:
        # the constraints of our parameters, then skorch's check of prefixed
        # names (module__..., optimizer__...), which needs the modules built.
        self._check_fed_params()
        if self._modules:
            super()._validate_params()

    def _check_fed_params(self):
        params = {k: getattr(self, k) for k in self._fed_constraints}
        if params["batch_size"] == -1:
            params["batch_size"] = "-1"
        validate_parameter_constraints(self._fed_constraints, params, type(self).__name__)
        if self.train_split is not None:
            raise ValueError(
                "train_split must be None: a federated server holds no validation rows "
                "(score a held-out set after fit instead)."
            )

    def _new_seed(self):
        state = self.random_state
        if isinstance(state, numbers.Integral):
            return int(state)
        return int(check_random_state(state).randint(np.iinfo(np.int32).max))

    def _is_trained(self):
        return bool(self.initialized_) and hasattr(self, "n_rounds_")

    # ------------------------------------------------------------------- fit
    @fit_method(
        X=("array-like of shape (n_samples, n_features)", "Training rows."),
        y=("array-like of shape (n_samples,)", "Class labels."),
        sample_weight="Per-row weights: a client's loss is the mean of its rows' weighted "
                      "losses.",
        clients="Client label of each row; ``None`` partitions rows by ``partition``.",
        fit_params="Not supported: nothing but the protocol's tasks reaches a site.",
    )
    def fit(self, X, y, sample_weight=None, clients=None, **fit_params):
        """Train for ``max_epochs`` rounds from a fresh model (unless ``warm_start``)."""
        # skorch's warm_start: fit continues a trained model, as partial_fit does
        return self._fit(X, y, sample_weight, clients, partial=bool(self.warm_start),
                         fit_params=fit_params)

    @fit_method(partial=True, classes=("array-like, default=None",
                                       "Every label, when the first call does not see them all."))
    def partial_fit(self, X, y, classes=None, sample_weight=None, clients=None, **fit_params):
        """Run ``max_epochs`` more rounds, continuing from the current model.

        A call that raises leaves the estimator as it was.
        """
        return self._fit(X, y, sample_weight, clients, partial=True, classes=classes,
                         fit_params=fit_params)

    # ------------------------------------------------------- the fit's hooks
    def _fit(self, X, y, sample_weight=None, clients=None, *, partial=False, fit_params=None,
             **server_kwargs):
        """The template's ``_fit``, after refusing what skorch takes but no site could use."""
        if fit_params:
            raise TypeError(
                f"{type(self).__name__}.fit takes no extra fit parameters (got "
                f"{sorted(fit_params)}): a site receives only the protocol's tasks."
            )
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target "
                             "y is None.")
        return super()._fit(X, y, sample_weight, clients, partial=partial, **server_kwargs)

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        X, y = validate_data(self, X, y, reset=reset, dtype=np.float32, ensure_min_samples=1)
        check_classification_targets(y)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float32)
        if not reset:  # the labels, like the features, must be the trained model's
            unknown = np.setdiff1d(np.unique(y), self.classes_)
            if len(unknown):
                raise ValueError(f"y has labels {unknown.tolist()} not seen at the first fit")
        return X, y, sample_weight

    def _fitted_state(self):
        """The trained module that ``partial_fit`` (or ``fit`` with ``warm_start``) continues."""
        return self.module_ if self._is_trained() else None

    def _client_rows(self, clients, X, y, *, reset):
        """Without ``clients``: ``n_clients`` simulated clients, split by ``partition``."""
        if clients is not None:
            return super()._client_rows(clients, X, y, reset=reset)
        n_samples = X.shape[0]
        if self.n_clients > n_samples:
            raise ValueError(
                f"n_clients={self.n_clients} exceeds n_samples={n_samples}: every simulated "
                "client needs at least one row; lower n_clients or pass `clients`."
            )
        seed = self._new_seed() if reset else self.seed_
        if self.partition == "iid":
            assign = partition_iid(n_samples, self.n_clients, random_state=seed)
        elif self.partition == "shards":
            assign = partition_label_shards(y, self.n_clients, classes_per_client=2,
                                            random_state=seed)
        else:
            assign = partition_dirichlet(y, self.n_clients, alpha=self.dirichlet_alpha,
                                         random_state=seed)
        return group_rows_by_client(np.asarray(assign), n_samples)

    def _run_sites(self, X, y, sample_weight, labels, rows, *, warm_start=False,
                   **server_kwargs):
        if warm_start:  # train copies: a call that raises leaves the originals as they were
            self._copy_training_state()
        server, client = super()._run_sites(X, y, sample_weight, labels, rows,
                                            warm_start=warm_start, **server_kwargs)
        where = {label_key(label): r for label, r in zip(labels, rows)}
        self.client_rows_ = [
            np.arange(X.shape[0])[where[label_key(c)]] if label_key(c) in where
            else np.empty(0, dtype=np.intp)
            for c in self.clients_
        ]
        return server, client

    def _copy_training_state(self):
        names = [n for n in ("module_", "criterion_", "optimizer_", "history_", "callbacks_")
                 if n in self.__dict__]
        try:  # one deepcopy keeps the optimizer (and schedulers) tied to the copied module
            copies = copy.deepcopy([self.__dict__[n] for n in names])
        except Exception:  # a callback that cannot be copied (an open writer...) is shared
            names.remove("callbacks_")
            copies = copy.deepcopy([self.__dict__[n] for n in names])
        self.__dict__.update(zip(names, copies))

    # -------------------------------------------------------- the network
    def _build_network(self, n_features, n_classes):
        """A module and criterion built from this configuration (what a site runs)."""
        with seeded_torch(0):  # its parameters are overwritten by the server's
            module = self._new_module(n_features, n_classes)
        criterion = self.initialized_instance(self.criterion, self.get_params_for("criterion"))
        return module, criterion

    def _new_module(self, n_features, n_classes):
        kwargs = self.get_params_for("module")
        module = MLP if self.module is None else self.module
        if module is MLP:
            kwargs.setdefault("n_features", n_features)
            kwargs.setdefault("n_classes", n_classes)
        instance = self.initialized_instance(module, kwargs)
        if instance is self.module:  # an instance passed by the user is theirs
            instance = copy.deepcopy(instance)
        if any(p.dtype != torch.float32 for p in instance.parameters()):
            raise ValueError("the module's parameters must be float32.")
        return instance

    def initialize_module(self):
        """The server's module, initialized from ``seed_``."""
        if not hasattr(self, "n_features_in_") or not hasattr(self, "classes_inferred_"):
            raise NotFittedError(
                "the module is built when the protocol starts (its input size and classes "
                "come from the sites); call fit first."
            )
        with seeded_torch(derive_seed(self.seed_, 0, SERVER_STREAM - 1)):
            self.module_ = self._new_module(self.n_features_in_, len(self.classes_inferred_))
        return self

    def initialize_history(self):
        self.history_ = History()  # replaced, not cleared: a failed fit restores the old one
        return self

    def _start(self, seed, classes, schema, sites, ledger):
        """The server's first round is applied: build the network (commit)."""
        self.seed_ = seed
        self.classes_inferred_ = classes
        self.n_features_in_ = schema.n_features
        if schema.feature_names is not None:
            self.feature_names_in_ = np.asarray(schema.feature_names, dtype=object)
        else:
            self.__dict__.pop("feature_names_in_", None)
        self.initialize()
        self.clients_, self._client_keys = label_array([]), frozenset()
        self._commit_round(ledger, sites, 0)

    def _parameters(self):
        return [p for p in self.module_.parameters() if p.requires_grad]

    def _n_trainable(self):
        return sum(p.numel() for p in self._parameters())

    # --------------------------------------------------------- one round
    def _train_round(self, batch):
        """Run one round as a skorch epoch; returns True when a callback stopped training.

        A round that raises is undone: the parameters and optimizer state here, which
        change in place; the server's savepoint puts back the rest (history included).
        """
        params = [p.detach().clone() for p in self.module_.parameters()]
        optimizer_state = copy.deepcopy(self.optimizer_.state_dict())
        stop = False
        try:
            if batch.first:
                self.notify("on_train_begin", X=None, y=None)
            self.notify("on_epoch_begin", dataset_train=None, dataset_valid=None)
            try:
                self.run_single_epoch([batch], training=True, prefix="train",
                                      step_fn=self.train_step)
                self.notify("on_epoch_end", dataset_train=None, dataset_valid=None)
            except KeyboardInterrupt:  # skorch's way to stop early (EarlyStopping)
                stop = True
            if stop or batch.last:
                self.notify("on_train_end", X=None, y=None)
        except BaseException:
            with torch.no_grad():
                for p, saved in zip(self.module_.parameters(), params):
                    p.copy_(saved)
            self.optimizer_.load_state_dict(optimizer_state)
            raise
        return stop

    def train_step_single(self, batch, **fit_params):
        """The server's half of a round: the decoded average gradient becomes ``.grad``.

        skorch's ``train_step`` calls this after zeroing the gradients, then runs the
        ``on_grad_computed`` callbacks (``GradientNormClipping``) and the optimizer's step.
        """
        self._set_training(True)
        params = self._parameters()
        for p, g in zip(params, batch.estimate.split([p.numel() for p in params])):
            p.grad = g.view_as(p).to(p.device, p.dtype).clone()
        return {"loss": torch.tensor(batch.loss), "y_pred": None}

    def _step_optimizer(self, step_fn):
        super()._step_optimizer(step_fn)
        if not all(torch.isfinite(p).all() for p in self.module_.parameters()):
            raise FloatingPointError(
                f"round {self.n_rounds_}: the optimizer's step made the model non-finite; "
                "lower lr or scale the features (e.g. StandardScaler)."
            )

    def _commit_round(self, ledger, sites, n_rounds):
        """A round is applied: its ledger, the rounds run, the sites seen for the first time."""
        ledger.n_parameters = sum(p.numel() for p in self.module_.parameters())
        self.communication_ = ledger
        self.n_rounds_ = n_rounds
        new = [s for s in sites if label_key(s) not in self._client_keys]
        if new:
            self.clients_ = label_array(list(self.clients_) + new)
            self._client_keys = self._client_keys | {label_key(s) for s in new}

    def _warn_if_stalled(self, losses, fresh):
        """A ConvergenceWarning when a new model ends no better than it started.

        The reference is the first round's loss, or, for cross-entropy, the
        loss ``ln K`` of guessing uniformly among K classes if that is lower:
        a model whose last rounds stay above 90% of it has learnt (almost)
        nothing, or diverged.
        """
        if not fresh or len(losses) < 10:
            return
        reference = losses[0]
        n_classes = len(self.classes_)
        if isinstance(self.criterion_, torch.nn.CrossEntropyLoss) and n_classes > 1:
            reference = min(reference, math.log(n_classes))
        end = float(np.mean(losses[-max(1, len(losses) // 10):]))
        if reference > 1e-6 and not end < 0.9 * reference:
            warn(
                f"{type(self).__name__}: training did not progress: the loss is {end:.3g} "
                f"after {len(losses)} rounds (it started at {losses[0]:.3g}). Scale the "
                "features (e.g. make_pipeline(StandardScaler(), FedMPDDClassifier())), "
                "tune lr, or run more rounds.",
                ConvergenceWarning,
            )

    # -------------------------------------------------------------- predict
    def predict_proba(self, X):
        """Class probabilities (softmax of the module's logits)."""
        if not self._is_trained():
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet; call 'fit' first."
            )
        X = validate_data(self, X, reset=False, dtype=np.float32, ensure_min_samples=1)
        return super().predict_proba(X)

    def predict(self, X):
        """Predicted class labels."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]
