"""``fit``/``partial_fit`` on Dask collections: the protocol, one partition at a time.

One-shot estimators (FederatedRidge, FederatedRidgeCV, ProjectedFederatedRidge,
and any estimator whose client role splits its answer into ``_summarize`` /
``_merge`` / ``_finish``) run their own server and client roles, exactly as
``fit`` on arrays does, except for where a site's answer is computed:

1. the server plans the round for the sites named by ``clients`` (one site,
   labelled 0, without ``clients``: partitions are then blocks of that one
   site's rows, as ``fit(X, y)`` treats all rows as one site);
2. every partition is validated and each site's rows in it are summarized by
   the client role, where the partition lives;
3. the summaries are merged by a tree reduction (a fixed tree, partitions in
   order, so every run gives the same bits); only the merged summaries travel
   back, and the site role finishes each site's answer from its summary;
4. the server reads and applies the answers with the same code as every
   other run.

IncrementalFederatedRidge treats a collection as a stream: one round
(``partial_fit``) per partition, in order, the next partition read while the
current round runs.
"""

from concurrent.futures import ThreadPoolExecutor

import dask
import dask.threaded
import numpy as np
from dask.base import get_scheduler
from sklearn import config_context, get_config
from threadpoolctl import threadpool_limits

from .._clients import group_rows_by_client
from .._compat import validate_data
from ..protocol import BlockwiseClient, atomic, label_key
from ..protocol._simulate import deliver_reply, deliver_task
from ._partitions import Partitions

__all__ = ["fit_collection"]

#: Partition summaries merged per node of the reduction tree.
SPLIT_EVERY = 8
#: The site of every row when ``clients`` is None (as in ``group_rows_by_client``).
ONLY_SITE = 0


def fit_collection(estimator, method, X, y=None, sample_weight=None, clients=None):
    """Run ``estimator.<method>`` (``"fit"`` or ``"partial_fit"``) on Dask collections.

    Called by the estimators' ``fit``/``partial_fit`` when an argument is a
    Dask collection (see :class:`~sklearn_fed._dask_dispatch.DaskDispatchMixin`).
    """
    if not get_config()["skip_parameter_validation"]:
        estimator._validate_params()
    from ..linear_model import FederatedRidgeCV, IncrementalFederatedRidge

    if isinstance(estimator, FederatedRidgeCV):
        _check_cv_on_collection(estimator, clients)
    parts = Partitions(X, y, sample_weight, clients)
    with config_context(skip_parameter_validation=True):
        if isinstance(estimator, IncrementalFederatedRidge):
            return _stream(estimator, method, parts)
        return _one_shot(estimator, method, parts)


def _check_cv_on_collection(estimator, clients):
    if estimator.cv is not None:
        raise ValueError(
            "FederatedRidgeCV on a Dask collection holds out clients; cv must be None "
            f"(got cv={estimator.cv!r}): give each fold's rows their own clients label."
        )
    if clients is None:
        raise ValueError(
            "FederatedRidgeCV on a Dask collection needs clients (leave-one-client-out from "
            "the clients' messages); leave-one-sample-out would keep one result per row in "
            "memory. clients=sklearn_fed.dask.partition_labels(X) holds out one partition "
            "at a time."
        )


# ----------------------------------------------------------------- one-shot
@atomic
def _one_shot(estimator, method, parts):
    if estimator._server_role is None:
        raise TypeError(
            f"{type(estimator).__name__} does not run through protocol roles, so it cannot "
            "fit a Dask collection."
        )
    warm_start = method == "partial_fit" and hasattr(estimator, "n_features_in_")
    validate_data(estimator, parts.stand_in, "no_validation", reset=not warm_start,
                  skip_check_array=True)
    names = getattr(estimator, "feature_names_in_", None)
    names = None if names is None else [str(name) for name in names]
    labels = _site_labels(parts)
    server = estimator.make_server(feature_names=names, warm_start=warm_start)
    client = estimator.make_client()
    frames = server._next_frames(labels)
    while frames:
        replies, sizes = _answer_round(parts, server, client, frames, names)
        server._receive_frames(replies, sizes)
        frames = server._next_frames(labels)
    return estimator


def _site_labels(parts):
    """Every site label in ``clients``, ordered as ``fit`` on arrays orders them."""
    clients = parts.inputs["clients"]
    if clients is None:
        return [ONLY_SITE]
    per_partition = _compute(*[
        dask.delayed(_labels_in, pure=True)(i, block) for i, block in enumerate(clients.blocks)
    ])
    present = [labels for labels in per_partition if len(labels)]
    if not present:
        raise ValueError("clients has no rows.")
    # Labels of each partition in order of first appearance, concatenated: the
    # grouping of arrays then gives the same order (sorted, or first appearance).
    labels, _ = group_rows_by_client(np.concatenate(present), sum(map(len, present)))
    return [label.item() if isinstance(label, np.generic) else label for label in labels]


def _labels_in(i, clients):
    clients = np.asarray(clients)
    if clients.ndim == 2 and clients.shape[1] == 1:
        clients = clients[:, 0]
    try:
        labels, rows = group_rows_by_client(clients, clients.shape[0]) if len(clients) else (
            clients[:0], [])
    except ValueError as exc:
        raise ValueError(f"partition {i}: {exc}") from exc
    first = np.argsort([r.start if isinstance(r, slice) else r[0] for r in rows], kind="stable")
    return labels[first]


def _answer_round(parts, server, client, frames, names):
    """Every tasked site's reply frame, computed partition by partition."""
    sites = {label_key(site): site for site in frames}
    tasks = {key: deliver_task(server, client, site, frames[site]) for key, site in sites.items()}
    answers = dask.delayed(SiteAnswers(client, tasks, parts.spec()), pure=True)
    nodes = [
        dask.delayed(_summarize_partition, pure=True)(answers, i, *parts.delayed(i))
        for i in range(parts.n_partitions)
    ]
    while len(nodes) > 1:
        nodes = [
            dask.delayed(_combine, pure=True)(answers, *nodes[i : i + SPLIT_EVERY])
            for i in range(0, len(nodes), SPLIT_EVERY)
        ]
    # Only the merged summaries come back; the site role finishes them here,
    # where its state (e.g. keys kept between rounds) lives.
    finished = SiteAnswers(client, tasks, parts.spec()).finish(_compute(nodes[0])[0])
    # The reply's schema is read from these shapes and dtype, as from a site's rows.
    X_like = np.empty((0, parts.n_features), dtype=parts.dtype)
    y_like = np.empty((0,) if parts.n_targets is None else (0, parts.n_targets))
    replies, sizes = {}, {}
    for key, site in sites.items():  # in the order of the tasks, as in memory
        if key not in finished:
            continue  # no rows of this site: dropout
        fields, arrays = finished[key]
        frame = client._reply_frame(tasks[key], fields, arrays, X_like, y_like, names)
        replies[site] = deliver_reply(server, client, site, frame, sizes)
    return replies, sizes


def _compute(*collections):
    """``dask.compute``; on the local threaded scheduler, one BLAS thread per task.

    Partitions are summarized in parallel threads already: letting each
    BLAS call start one thread per core as well oversubscribes the cores
    (scikit-learn's KMeans limits BLAS the same way around its parallel loop).
    """
    if get_scheduler(collections=collections) is dask.threaded.get:
        with threadpool_limits(limits=1, user_api="blas"):
            return dask.compute(*collections)
    return dask.compute(*collections)


def _summarize_partition(answers, i, X, y, sample_weight, clients):
    return answers.summarize(i, X, y, sample_weight, clients)


def _combine(answers, *nodes):
    return answers.combine(nodes)


class _Piece:
    """A site's summary of its rows in some partitions (listed, for error messages)."""

    __slots__ = ("site", "summary", "partitions")

    def __init__(self, site, summary, partitions):
        self.site = site
        self.summary = summary
        self.partitions = partitions


class SiteAnswers:
    """The client role applied to the sites' rows of one round, block by block.

    For a :class:`~sklearn_fed.protocol.BlockwiseClient`, a site's rows may
    span partitions. For any other client role each site's reply is
    ``_compute`` of its rows, which must then lie in one partition: a reply is
    not in general a sum (noise, for instance, is drawn once per reply).
    """

    def __init__(self, client, tasks, spec):
        self.client = client
        self.tasks = tasks
        self.spec = spec
        self.blockwise = _answers_from_blocks(type(client))

    def summarize(self, i, X, y, sample_weight, clients):
        checked = self.spec.check(i, X, y, sample_weight, clients)
        if checked is None:
            return {}
        X, y, sample_weight, labels, rows = checked
        if labels is None:
            labels, rows = [ONLY_SITE], [None]
        pieces = {}
        for label, site_rows in zip(labels, rows):
            label = label.item() if isinstance(label, np.generic) else label
            key = label_key(label)
            task = self.tasks.get(key)
            if task is None:  # the server did not ask this site this round
                continue
            if self.blockwise:
                summary = self.client._summarize(task, X, y, sample_weight, site_rows)
            else:
                summary = self.client._compute(task, X, y, sample_weight, site_rows)
            pieces[key] = _Piece(label, summary, (i,))
        return pieces

    def combine(self, nodes):
        merged = {}
        for node in nodes:
            for key, piece in node.items():
                first = merged.get(key)
                merged[key] = piece if first is None else self._merge(key, first, piece)
        return merged

    def _merge(self, key, first, second):
        partitions = first.partitions + second.partitions
        if not self.blockwise:
            raise ValueError(
                f"site {first.site!r} has rows in partitions {list(partitions)}, but "
                f"{type(self.client).__name__} is not a BlockwiseClient: its reply cannot "
                "be assembled from parts. Put each site's rows in one partition."
            )
        summary = self.client._merge(first.summary, second.summary)
        return _Piece(first.site, summary, partitions)

    def finish(self, node):
        if not self.blockwise:
            return {key: piece.summary for key, piece in node.items()}
        return {
            key: self.client._finish(self.tasks[key], piece.summary) for key, piece in node.items()
        }


def _answers_from_blocks(role):
    """Whether ``role`` answers blockwise: a BlockwiseClient whose ``_compute`` is not replaced."""
    return issubclass(role, BlockwiseClient) and _owner(role, "_compute") is BlockwiseClient


def _owner(cls, name):
    return next(base for base in cls.__mro__ if name in base.__dict__)


# ------------------------------------------------------------------- stream
@atomic
def _stream(estimator, method, parts):
    """One round per partition, in order; the next partition is read meanwhile."""
    spec = parts.spec()
    first_round = method == "fit"
    rounds = 0
    with ThreadPoolExecutor(max_workers=1) as reader:
        pending = reader.submit(_read_partition, parts, 0)
        for i in range(parts.n_partitions):
            X, y, sample_weight, clients = pending.result()
            if i + 1 < parts.n_partitions:
                pending = reader.submit(_read_partition, parts, i + 1)
            if spec.check(i, X, y, sample_weight, clients) is None:
                continue  # a partition without rows brings no round
            step = estimator.fit if first_round and rounds == 0 else estimator.partial_fit
            step(X, y, sample_weight=sample_weight, clients=clients)
            rounds += 1
    if rounds == 0:
        raise ValueError("X has no rows.")
    return estimator



def _read_partition(parts, i):
    return dask.compute(*parts.delayed(i))
