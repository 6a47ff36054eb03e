"""The FedMPDD protocol: what a site computes and what the server does with it.

Round 0 (``"describe"``, only for a new model): every reachable site sends
the labels it holds; the server takes their union as the classes, learns the
feature schema from the replies, and builds the network.

Every later round (``"train"``) the server samples participants and sends
each one task: the network's parameters (float32), the class list, the
per-client minibatch size, a seed for the site's minibatch, and the codec's
settings with, for MPDD, the seed of the site's directions. The site builds
the network from the estimator's configuration
(:meth:`FedMPDDClassifier.make_client`), loads the parameters, computes its
minibatch gradient on its own rows and replies with the codec's message and
its minibatch loss. The server checks every reply, decodes and averages
them, and lets the skorch optimizer take one step (one skorch epoch).

Three sites, driven by hand with bytes (what a deployment runs; ``fit`` runs
the same code in process):

>>> from sklearn.datasets import load_iris
>>> from sklearn.preprocessing import scale
>>> from sklearn_fed.neural_network import FedMPDDClassifier
>>> X, y = load_iris(return_X_y=True)
>>> X = scale(X)
>>> data = {site: (X[i::3], y[i::3]) for i, site in enumerate(["a", "b", "c"])}
>>> net = FedMPDDClassifier(n_directions=20, max_epochs=30, random_state=0)
>>> server = net.make_server()
>>> from sklearn_fed.protocol import SitePolicy
>>> # 259 parameters from 50 rows a site: the default policy (0.33 per row) refuses it
>>> policy = SitePolicy(max_parameters_per_row=None)
>>> sites = {site: net.make_client(policy=policy) for site in data}  # each on its machine
>>> tasks = server.next_tasks(list(data))                  # {site: bytes}
>>> while tasks:
...     replies = {s: sites[s].respond(task, *data[s]) for s, task in tasks.items()}
...     server.receive(replies)                            # checks all, then applies
...     tasks = server.next_tasks(list(data))
>>> net.n_rounds_, net.classes_.tolist(), net.score(X, y) > 0.8
(30, [0, 1, 2], True)
"""

import contextlib
import copy
import functools
import math
import secrets
from dataclasses import dataclass
from numbers import Integral

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..protocol import (
    Client,
    CountedLabels,
    Frame,
    Server,
    label_key,
    plain_label,
    sorted_labels,
)
from ..protocol._errors import failing, server_error
from ._codecs import codec_from_settings, derive_seed, make_codec

__all__ = ["FedMPDDClient", "FedMPDDServer"]

PROTOCOL = "nn.fedmpdd"
#: Pseudo client index of the server's own randomness (participant sampling, init).
SERVER_STREAM = (1 << 32) - 1
#: Streams of :func:`derive_seed` for the seeds a task carries.
_DIRECTIONS, _MINIBATCH, _LOCAL = 0, 1, 2
#: At and above this many rows per client, one vmap call is slower than a loop.
VMAP_MAX_BATCH = 64
#: Most class labels a task or a describe reply may hold.
MAX_CLASSES = 1 << 16


def per_sample_loss(criterion, logits, y):
    """The criterion's loss of every row (``reduction="none"``)."""
    if isinstance(criterion, torch.nn.CrossEntropyLoss) and criterion.weight is None:
        return F.cross_entropy(logits, y, reduction="none",
                               label_smoothing=criterion.label_smoothing)
    criterion = copy.copy(criterion)
    criterion.reduction = "none"
    if isinstance(criterion, torch.nn.NLLLoss):
        logits = torch.log(logits + torch.finfo(logits.dtype).eps)
    return criterion(logits, y)


def _label_kind(label):
    for kind, types in (("bool", bool), ("number", (int, float)), ("str", str)):
        if isinstance(label, types):  # bool first: a bool is an int too
            return kind
    return None


def classes_array(labels):
    """Labels of one kind (numbers, strings or booleans) as a sorted ndarray."""
    return np.unique(np.asarray(list(labels)))


def _parse_labels(value, fail):
    if not (isinstance(value, list) and len(value) <= MAX_CLASSES):
        fail(f"the class list must be a list of at most {MAX_CLASSES} labels.")
    kinds = {_label_kind(label) for label in value}
    if None in kinds or len(kinds) > 1:
        fail("class labels must all be numbers, all strings or all booleans.")
    if any(isinstance(label, float) and not math.isfinite(label) for label in value):
        fail("class labels must be finite.")
    if len(set(value)) != len(value):  # one kind: 1 and 1.0 are the same class
        fail("class labels must be distinct.")
    return value


def _task_classes(value):
    """The class list of a task, checked, as a sorted array (the same list every round)."""
    if isinstance(value, list):
        try:  # typed, so that True, 1 and 1.0 are different keys
            return _checked_classes(tuple((type(v), v) for v in value))
        except TypeError:  # unhashable entries: not labels
            pass
    _parse_labels(value, server_error)  # raises, naming what is wrong


@functools.lru_cache(maxsize=8)
def _checked_classes(typed):
    labels = _parse_labels([v for _, v in typed], server_error)
    if not labels:
        server_error("the task names no classes.")
    classes = classes_array(labels)
    classes.setflags(write=False)  # shared between the tasks of every round
    return classes


@dataclass
class TrainTask:
    """A training task as a site reads it (every field checked: tasks are untrusted)."""

    params: np.ndarray
    classes: np.ndarray
    batch_size: int
    minibatch_seed: int
    seed: object
    codec: object
    site: object = None

    @classmethod
    def read(cls, task):
        fields = task.fields
        try:
            codec = codec_from_settings(fields)
        except ValueError as exc:
            server_error(f"malformed codec settings in task ({exc}).")
        expected = {"step", "classes", "batch_size", "minibatch_seed", *codec.settings()}
        if codec.seeded:
            expected.add("seed")
        if set(fields) != expected:
            server_error(f"a training task has the fields {sorted(expected)}, got "
                         f"{sorted(fields)}.")
        seeds = [fields["minibatch_seed"], fields.get("seed", 0)]
        if not all(type(s) is int and 0 <= s < 2**63 for s in seeds):
            server_error("task seeds must be integers in [0, 2**63).")
        batch = fields.get("batch_size")
        if not (type(batch) is int and (batch == -1 or 1 <= batch < 2**31)):
            server_error(f"batch_size must be -1 or a positive integer, got {batch!r}.")
        classes = _task_classes(fields.get("classes"))
        params = task.arrays.get("params")
        if set(task.arrays) != {"params"} or not (
            isinstance(params, np.ndarray) and params.dtype == np.float32 and params.ndim == 1
        ):
            server_error("a training task must carry the parameters as one float32 vector.")
        if not np.isfinite(params).all():
            server_error("the task's parameters are not finite.")
        return cls(params, classes, batch, seeds[0], fields.get("seed"), codec, task.site)


def minibatch(n_rows, batch_size, seed):
    """A site's minibatch: sorted local row positions drawn without replacement."""
    if batch_size == -1 or batch_size >= n_rows:
        return np.arange(n_rows)
    return np.sort(np.random.default_rng(seed).choice(n_rows, batch_size, replace=False))


class FedMPDDClient(Client):
    """A site of :class:`FedMPDDClassifier`: its minibatch gradient, encoded, and nothing else.

    It builds the network from the estimator's configuration (``module``,
    ``module__*``, ``criterion``) once, and loads the parameters each task
    carries. Its own rows never leave it; its reply is the codec's message
    (e.g. ``m`` directional derivatives and their seed) and the minibatch loss.
    A site whose gradient is not finite refuses to answer
    (:class:`FloatingPointError`).
    """

    protocol = PROTOCOL
    accept_sparse = False
    y_numeric = False

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self._network = None
        self._local = secrets.randbits(63)  # the site's own randomness (local noise)

    #: The describe step names the site's labels; the policy refuses a rare one.
    disclosure = (CountedLabels("class_rows"),)

    def released_parameters(self, task, frame):
        """The network's parameters (every one the task carries), for the parameters-per-row
        rule; the describe step fits nothing."""
        params = task.arrays.get("params") if task.fields.get("step") == "train" else None
        return int(params.shape[0]) if isinstance(params, np.ndarray) else None

    # -------------------------------------------------------------- answers
    def compute(self, task, X, y, sample_weight, rows):
        step = task.fields.get("step")
        if step == "train":
            return self._train({0: TrainTask.read(task)}, X, y, sample_weight, {0: rows})[0]
        if step != "describe":
            server_error(f"unknown task step {step!r}.")
        if set(task.fields) != {"step"} or task.arrays:
            server_error("malformed describe task.")
        try:
            labels, counts = np.unique(np.asarray(y if rows is None else y[rows]),
                                       return_counts=True)
        except TypeError as exc:
            raise ValueError(f"site {task.site!r}: its labels cannot be ordered "
                             f"({exc}).") from exc
        return {"classes": [plain_label(label) for label in labels]}, {"class_rows": counts}

    def reply_many(self, tasks, X, y, sample_weight, rows, names):
        # The simulation's training round: every site's gradient as it computes
        # it alone, then all encoded in one call (the same bytes as one by one).
        if any(task.fields.get("step") != "train" for task in tasks.values()):
            return super().reply_many(tasks, X, y, sample_weight, rows, names)
        answers = self._train({site: TrainTask.read(task) for site, task in tasks.items()},
                              X, y, sample_weight, rows)
        policy = self.policy_in_force()
        return {site: self.screen(policy, tasks[site],
                                  self.reply_frame(tasks[site], X, y, names, *answers[site]),
                                  X, rows[site])
                for site in tasks}

    def _train(self, tasks, X, y, sample_weight, rows):
        """Gradients of every site's minibatch, encoded in one call per codec."""
        batches, positions = {}, np.arange(X.shape[0])
        for site, task in tasks.items():
            own = positions if rows[site] is None else positions[rows[site]]
            if len(own) == 0:
                raise ValueError(f"site {task.site!r}: it has no rows to train on.")
            index = own[minibatch(len(own), task.batch_size, task.minibatch_seed)]
            weight = None if sample_weight is None else sample_weight[index]
            labels = self._class_index(y[index], task.classes, task.site)
            batches[site] = (X[index], labels, weight)
        results = self._gradients(tasks, batches)
        answers = {}
        for sites in _by_codec(tasks).values():
            codec = tasks[sites[0]].codec
            seeds = [self._codec_seed(tasks[site]) for site in sites]
            messages = codec.encode_many(np.stack([results[s][0] for s in sites]), seeds)
            for site, (fields, arrays) in zip(sites, messages):
                answers[site] = {**fields, "loss": results[site][1]}, arrays
        return answers

    def _codec_seed(self, task):
        if task.codec.seeded:  # the directions: the server chose them
            return task.seed
        # Rounding and local noise are the site's own: a server that knew this
        # seed could subtract the noise. An integer random_state makes it
        # reproducible for simulations (and known to whoever knows the state).
        state = self.estimator.random_state
        secret = int(state) if isinstance(state, Integral) else self._local
        return derive_seed(secret, task.minibatch_seed, 0, stream=_LOCAL)

    @staticmethod
    def _class_index(labels, classes, site):
        labels = np.asarray(labels)
        try:
            position = np.minimum(np.searchsorted(classes, labels), len(classes) - 1)
            known = np.asarray(classes[position] == labels, dtype=bool)
        except (TypeError, ValueError):
            known = np.zeros(len(labels), dtype=bool)
        if known.shape != labels.shape or not known.all():
            raise ValueError(
                f"site {site!r}: it holds labels that are not among the task's classes "
                f"{classes.tolist()}."
            )
        return position

    # ------------------------------------------------------------ gradients
    def _net(self, task, n_features):
        """The site's module (built once), with the task's parameters loaded."""
        key = (n_features, len(task.classes), task.params.shape[0])
        if self._network is None or self._network[0] != key:
            module, criterion = self.estimator._build_network(n_features, len(task.classes))
            n_params = sum(p.numel() for p in module.parameters())
            if n_params != task.params.shape[0]:
                server_error(
                    f"the task's model has {task.params.shape[0]} parameters, but this site's "
                    f"module has {n_params}: site and server must use the same module settings."
                )
            module.train(True)
            self._network = (key, module, criterion, None)
        _, module, criterion, loaded = self._network
        if loaded is not task.params:
            vector_to_parameters(torch.from_numpy(np.array(task.params)), module.parameters())
            self._network = self._network[:3] + (task.params,)
        return module, [p for p in module.parameters() if p.requires_grad], criterion

    def _gradients(self, tasks, batches):
        """``{site: (float32 gradient, loss)}``, each as its site computes it alone."""
        with one_torch_thread():
            results = self._vectorized(tasks, batches)
            for site, task in tasks.items():
                if site not in results:
                    x, y, w = batches[site]
                    module, params, criterion = self._net(task, x.shape[1])
                    with seeded_torch(task.minibatch_seed):  # dropout, if any
                        results[site] = site_gradient(module, params, criterion, x, y, w)
        for site, task in tasks.items():
            g, loss = results[site]
            if not (np.isfinite(g).all() and math.isfinite(loss)):
                raise FloatingPointError(
                    f"site {task.site!r}: its gradient is not finite; scale the features (e.g. "
                    "StandardScaler) or lower lr."
                )
        return results

    def _vectorized(self, tasks, batches):
        """Opt-in (``vectorize``): participants with small minibatches in one vmap call.

        Faster below :data:`VMAP_MAX_BATCH` rows per client, but a batched
        kernel rounds differently from a site's own computation, so these
        replies equal a deployment's only to float32 round-off.
        """
        mode = self.estimator.vectorize
        if mode is False or getattr(self, "_vmap_failed", False) or len(tasks) < 2:
            return {}
        groups = {}
        for site, (x, _, _) in batches.items():
            if x.shape[0] < VMAP_MAX_BATCH:
                groups.setdefault(x.shape[0], []).append(site)
        out = {}
        for sites in groups.values():
            if len(sites) < 2:
                continue
            task = tasks[sites[0]]
            if any(tasks[s].params is not task.params and not np.array_equal(
                    tasks[s].params, task.params) for s in sites):
                continue
            try:
                with seeded_torch(task.minibatch_seed):  # dropout, if any
                    out.update(self._vmap(task, sites, batches))
            except Exception:
                if mode is True:
                    raise
                self._vmap_failed = True  # e.g. in-place ops in the module
                return {}
        return out

    def _vmap(self, task, sites, batches):
        from torch.func import functional_call, grad_and_value, vmap

        x0 = batches[sites[0]][0]
        module, params, criterion = self._net(task, x0.shape[1])
        named = dict(module.named_parameters())
        trainable = {k: p.detach() for k, p in named.items() if p.requires_grad}
        fixed = {k: p.detach() for k, p in named.items() if not p.requires_grad}
        fixed.update(module.named_buffers())
        X = torch.from_numpy(np.stack([np.asarray(batches[s][0], np.float32) for s in sites]))
        Y = torch.from_numpy(np.stack([batches[s][1] for s in sites]))
        W = torch.from_numpy(np.stack([
            np.ones(Y.shape[1], np.float32) if batches[s][2] is None
            else np.asarray(batches[s][2], np.float32) for s in sites
        ]))

        def loss_fn(weights, x, y, w):
            logits = functional_call(module, (weights, fixed), (x,))
            return (per_sample_loss(criterion, logits, y) * w).sum() / x.shape[0]

        grads, loss = vmap(grad_and_value(loss_fn), in_dims=(None, 0, 0, 0),
                           randomness="different")(trainable, X, Y, W)
        flat = torch.cat([grads[k].reshape(len(sites), -1) for k in trainable], 1)
        return {s: (flat[i].numpy(), float(loss[i])) for i, s in enumerate(sites)}


@contextlib.contextmanager
def one_torch_thread():
    """Within this block torch computes on one thread.

    A site's gradient is a small computation: one thread is faster than a
    pool (whose barriers cost more than the work on a busy machine), and a
    site's reply then does not depend on its machine's thread count (a
    multithreaded reduction may add in another order).
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@contextlib.contextmanager
def seeded_torch(seed):
    """Within this block torch's global generator is seeded with ``seed``; restored after.

    (The generator's own methods: ``torch.random.fork_rng`` costs 50x more.)
    """
    generator = torch.default_generator
    state = generator.get_state()
    generator.manual_seed(seed)
    try:
        yield
    finally:
        generator.set_state(state)


def site_gradient(module, params, criterion, x, y, w):
    """A site's gradient of its mean (weighted) minibatch loss: float32 vector and loss."""
    x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    y = torch.from_numpy(np.asarray(y, dtype=np.int64))
    loss_rows = per_sample_loss(criterion, module(x), y)
    if w is not None:
        loss_rows = loss_rows * torch.from_numpy(np.asarray(w, dtype=np.float32))
    loss = loss_rows.sum() / x.shape[0]
    grads = torch.autograd.grad(loss, params, materialize_grads=True)  # unused ones: zeros
    flat = torch.cat([g.reshape(-1) for g in grads])
    return flat.numpy(), float(loss.detach())


def _by_codec(tasks):
    groups = {}
    for site, task in tasks.items():
        key = tuple(sorted(task.codec.settings().items()))
        groups.setdefault(key, []).append(site)
    return groups


@dataclass
class Round:
    """One training round as skorch's loop sees it: a single "batch".

    Attributes
    ----------
    estimate : torch.Tensor
        The decoded average gradient (float32, trainable parameters in order).
    losses : list of float
        The participants' reported minibatch losses.
    participants : list
        Their labels, in the order they were processed.
    index : int
        Training round number (over every fit and partial_fit call).
    first, last : bool
        Whether it is the first or last round of this run.
    ledger, previous : CommunicationLedger
        The ledger after this round, and before it.
    """

    estimate: torch.Tensor
    losses: list
    participants: list
    index: int
    first: bool
    last: bool
    ledger: object
    previous: object = None

    def __len__(self):
        return len(self.participants)

    @property
    def loss(self):
        return float(np.mean(self.losses))


class FedMPDDServer(Server):
    """Server of :class:`FedMPDDClassifier`: sample sites, send the model, average their messages.

    Parameters
    ----------
    estimator : FedMPDDClassifier
    classes : array-like, default=None
        Labels to include besides those the sites report (``partial_fit``'s
        ``classes``).
    **kwargs
        See :class:`~sklearn_fed.protocol.Server`.
    """

    protocol = PROTOCOL

    def __init__(self, estimator, *, classes=None, **kwargs):
        super().__init__(estimator, **kwargs)
        estimator._check_fed_params()
        self.codec = make_codec(
            estimator.uplink, n_directions=estimator.n_directions, direction=estimator.direction,
            levels=estimator.quantization_levels, k=estimator.topk,
            noise_scale=estimator.noise_scale,
        )
        self.extra_classes = None if classes is None else list(classes)
        # ready: a warm start continues the trained model (no describe round)
        self.ready = bool(self.warm_start) and estimator._is_trained()
        self.seed = estimator.seed_ if self.ready else estimator._new_seed()
        self.first_round = estimator.n_rounds_ if self.ready else 0
        if self.ready and self.extra_classes is not None:
            unknown = np.setdiff1d(np.asarray(self.extra_classes), estimator.classes_)
            if len(unknown):
                raise ValueError(f"classes {unknown.tolist()} were not seen at the first fit.")
        self.trained = 0
        self.stopped = False
        self.losses = []
        self._seeds = {}

    # ---------------------------------------------------------------- plan
    def plan(self, sites):
        if not self.ready:
            return {site: ({"step": "describe"}, {}) for site in sites}
        estimator = self.estimator
        if self.stopped or self.trained >= estimator.max_epochs:
            return {}
        round_index = self.first_round + self.trained
        ordered = sorted_labels(sites)
        rng = np.random.default_rng(derive_seed(self.seed, round_index, SERVER_STREAM))
        n_part = max(1, math.ceil(estimator.client_fraction * len(ordered) - 1e-12))
        chosen = np.sort(rng.choice(len(ordered), n_part, replace=False))
        # every parameter of the module (trainable or not), flat: what a task carries
        params = parameters_to_vector(estimator.module_.parameters()).detach().cpu().numpy()
        common = {
            "step": "train",
            "classes": [plain_label(c) for c in estimator.classes_],
            "batch_size": -1 if estimator.batch_size in (-1, None) else int(estimator.batch_size),
            **self.codec.settings(),
        }
        plan, self._seeds = {}, {}
        for j in chosen.tolist():
            site = ordered[j]
            fields = {**common,
                      "minibatch_seed": derive_seed(self.seed, round_index, j, stream=_MINIBATCH)}
            if self.codec.seeded:
                fields["seed"] = derive_seed(self.seed, round_index, j, stream=_DIRECTIONS)
                self._seeds[label_key(site)] = fields["seed"]
            plan[site] = (fields, {"params": params})
        return plan

    # --------------------------------------------------------------- replies
    def read_reply(self, site, frame):
        fail = failing(site)
        if not self.ready:
            if set(frame.fields) != {"classes"} or frame.arrays:
                fail("a describe reply holds exactly the field 'classes'.")
            return _parse_labels(frame.fields["classes"], fail)
        loss = frame.fields.get("loss")
        if not (type(loss) in (int, float) and math.isfinite(loss)):
            fail(f"its loss must be a finite number, got {loss!r}.")
        message = Frame(kind=self.codec.kind, round=frame.round, site=frame.site,
                        fields={k: v for k, v in frame.fields.items() if k != "loss"},
                        arrays=frame.arrays)
        self.codec.read(message, self.estimator._n_trainable(), client=site)
        if self.codec.seeded and message.fields["seed"] != self._seeds[label_key(site)]:
            fail("its directions' seed is not the one its task gave.")
        return float(loss), message

    # ----------------------------------------------------------------- apply
    def _start(self, replies, ledger):
        estimator = self.estimator
        ordered = sorted_labels(replies)
        kinds = {}
        for site in ordered:
            for label in replies[site]:
                kinds.setdefault(_label_kind(label), site)
        if len(kinds) > 1:
            first, *_, site = kinds.values()
            failing(site)(f"its labels are not of the same kind (numbers, strings, booleans) "
                          f"as site {first!r}'s.")
        labels = [label for site in ordered for label in replies[site]]
        if estimator.classes is not None:  # skorch's `classes`: the order is the user's
            classes = np.asarray(estimator.classes)
            missing = np.setdiff1d(classes_array(labels), classes) if labels else []
            if len(missing):
                raise ValueError(f"the sites hold labels {missing.tolist()} that are not in "
                                 f"`classes`.")
        else:
            classes = classes_array(labels + (self.extra_classes or []))
        estimator._start(self.seed, classes, self.schema, ordered, ledger)
        self.ready = True

    def apply(self, replies, ledger):
        if not self.ready:  # the describe round
            return self._start(replies, ledger)
        estimator = self.estimator
        ordered = sorted_labels(replies)
        messages = [replies[site][1] for site in ordered]
        d = estimator._n_trainable()
        estimate = self.codec.decode_mean(messages, d)
        if not torch.isfinite(estimate).all():
            self._culprit(ordered, messages, d)
        last = self.trained + 1 >= estimator.max_epochs
        batch = Round(estimate, [replies[site][0] for site in ordered], ordered,
                      self.first_round + self.trained, self.trained == 0, last, ledger,
                      self._ledger)
        stop = estimator._train_round(batch)
        estimator._commit_round(batch.ledger, batch.participants, batch.index + 1)
        self.trained += 1
        self.losses.append(batch.loss)
        self.stopped = stop
        if stop or last:
            estimator._warn_if_stalled(self.losses, fresh=self.first_round == 0)

    def _culprit(self, ordered, messages, d):
        """Blame the site whose message makes the average non-finite (the largest one)."""
        sizes = [float(self.codec.decode(message, d).abs().max()) for message in messages]
        site = ordered[int(np.nanargmax(np.nan_to_num(sizes, nan=np.inf)))]
        failing(site)("its message decodes to a gradient too large for float32.")
