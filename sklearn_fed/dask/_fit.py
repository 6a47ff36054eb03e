"""``fit``/``partial_fit`` on Dask collections: the estimator's protocol, partition by partition.

An estimator whose ``_dask_rows`` is ``"partitions"`` (FederatedRidge,
FederatedRidgeCV, ProjectedFederatedRidge, PrivateFederatedRidge) runs its
own roles and server through the fit template, :class:`PartitionedRows` as
its rows; only where a site's answer is computed changes, as a transport of
the one round loop (:func:`~sklearn_fed.protocol.run_rounds`):

1. :meth:`PartitionedRows.validate` checks the feature names and count on the
   collection's metadata and finds the sites in ``clients`` (one site,
   labelled 0, without ``clients``: partitions are then blocks of that one
   site's rows, as ``fit(X, y)`` treats all rows as one site);
2. :class:`PartitionsTransport` answers every round: each partition is
   validated and each site's rows in it are summarized by the client role
   (``BlockwiseClient.summarize``) where the partition lives;
3. the summaries are merged by a tree reduction (a fixed tree, partitions in
   order, so every run gives the same bits); only the merged summaries travel
   back, and the site role finishes each site's answer from its summary;
4. the server reads and applies the answers with the same code as every
   other run.

IncrementalFederatedRidge (``"stream"``) treats a collection as a stream: one round
(``fit`` then ``partial_fit``) per partition, in order, the next partition
read while the current round runs.
"""

from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.threaded
import numpy as np
from dask.base import get_scheduler
from threadpoolctl import threadpool_limits

from .._clients import group_rows_by_client
from .._compat import validate_data
from ..protocol import RowsElsewhere, Transport, atomic, label_key
from ..protocol._simulate import deliver_reply, deliver_task
from ._partitions import Partitions

__all__ = ["PartitionedRows", "PartitionsTransport", "collection_rows"]

#: Partition summaries merged per node of the reduction tree.
SPLIT_EVERY = 8
#: The site of every row when ``clients`` is None (as in ``group_rows_by_client``).
ONLY_SITE = 0


def collection_rows(estimator, X, y, sample_weight, clients, *, partial):
    """The rows of the fit template (:class:`PartitionedRows`), or None once streamed.

    The estimator's ``_dask_rows`` says how (or whether) it takes Dask collections.
    """
    mode = estimator._dask_rows
    if mode is None:
        raise TypeError(
            f"{type(estimator).__name__} cannot fit Dask collections: its sites' replies "
            "are not sums over blocks of rows, or its site roles keep state between calls "
            "that copies sent to the workers would not carry back. Compute the collections "
            "first (X.compute()) or use an estimator of the ridge family."
        )
    if mode == "stream":
        _stream(estimator, partial, Partitions(X, y, sample_weight, clients))
        return None
    estimator._check_collection()
    return PartitionedRows(X, y, sample_weight, clients)


class PartitionedRows(RowsElsewhere):
    """``X`` as an estimator's protocol run receives it from Dask collections.

    It is never an array: the simulation asks it for the transport that
    answers each round partition by partition (:meth:`transport`).
    """

    def __init__(self, X, y, sample_weight, clients):
        self._inputs = (X, y, sample_weight, clients)
        self.parts = None

    @property
    def columns(self):
        """The columns of a DataFrame ``X`` (for messages about them)."""
        return self._inputs[0].columns

    @property
    def shape(self):
        """``(None, n_features)``: the number of rows is not known without reading them."""
        return None, self.parts.n_features

    def __array__(self, *args, **kwargs):
        raise TypeError(
            "rows in Dask partitions cannot be used as one array; this estimator computes "
            "something from X outside its protocol roles."
        )

    def validate(self, estimator, *, reset):
        """Check the features on the collections' metadata.

        Returns ``(y_like, None, labels, None)``, the template's ``y``,
        ``sample_weight``, ``labels`` and ``rows``: ``y_like`` has no rows (only
        its shape says how many targets); the partitions carry the rows,
        weights and labels.
        """
        parts = self.parts = Partitions(*self._inputs)
        validate_data(estimator, parts.stand_in, "no_validation", reset=reset,
                      skip_check_array=True)
        y_like = np.empty((0,) if parts.n_targets is None else (0, parts.n_targets))
        return y_like, None, _site_labels(parts), None

    def row_positions(self):
        """``{site: positions of its rows in X}``, read from ``clients`` (None: one site)."""
        clients = self.parts.inputs["clients"]
        if clients is None:
            return None  # the one site's rows are X's rows, in order
        grouped = _compute(*[
            dask.delayed(_grouped, pure=True)(i, block) for i, block in enumerate(clients.blocks)
        ])
        found, offset = {}, 0
        for labels, rows, n in grouped:
            everything = np.arange(offset, offset + n)
            for label, site_rows in zip(labels, rows):
                found.setdefault(label_key(label), []).append(everything[site_rows])
            offset += n
        return {key: np.concatenate(parts) for key, parts in found.items()}

    def transport(self, clients, labels, names):
        return PartitionsTransport(self.parts, clients, names)


class PartitionsTransport(Transport):
    """Every round answered partition by partition: summaries merged by a tree, finished here."""

    def __init__(self, parts, clients, names):
        self.parts, self.clients, self.names = parts, clients, names

    def exchange(self, server, frames):
        parts, clients = self.parts, self.clients
        sites = {label_key(site): site for site in frames}
        roles = {key: clients[site] if isinstance(clients, dict) else clients
                 for key, site in sites.items()}
        tasks = {key: deliver_task(server, roles[key], site, frames[site])
                 for key, site in sites.items()}
        answers = SiteAnswers(roles, tasks, parts.spec())
        if any(answers.reads_rows(key) for key in tasks):
            # Only the merged summaries come back; the site roles finish them here,
            # where their state (e.g. keys kept between rounds) lives.
            merged = _compute(_reduction(parts, roles, tasks))[0]
        else:  # e.g. a key exchange: no partition is read
            merged = {key: _Piece(site, roles[key].summarize(tasks[key], None, None, None, None),
                                  ()) for key, site in sites.items()}
        finished = answers.finish(merged)
        return (*_replies(parts, server, roles, sites, tasks, finished, self.names), {}, ())


def _site_labels(parts):
    """Every site label in ``clients``, ordered as ``fit`` on arrays orders them."""
    clients = parts.inputs["clients"]
    if clients is None:
        return np.array([ONLY_SITE])
    per_partition = _compute(*[
        dask.delayed(_labels_in, pure=True)(i, block) for i, block in enumerate(clients.blocks)
    ])
    present = [labels for labels in per_partition if len(labels)]
    if not present:
        raise ValueError("clients has no rows.")
    # Labels of each partition in order of first appearance, concatenated: the
    # grouping of arrays then gives the same order (sorted, or first appearance).
    labels, _ = group_rows_by_client(np.concatenate(present), sum(map(len, present)))
    return labels


def _grouped(i, clients):
    """``(labels, rows, n_rows)`` of one partition of ``clients``, as ``group_rows_by_client``."""
    clients = np.asarray(clients)
    if clients.ndim == 2 and clients.shape[1] == 1:
        clients = clients[:, 0]
    if not len(clients):
        return clients, [], 0
    try:
        labels, rows = group_rows_by_client(clients, clients.shape[0])
    except ValueError as exc:
        raise ValueError(f"partition {i}: {exc}") from exc
    return labels, rows, clients.shape[0]


def _labels_in(i, clients):
    labels, rows, _ = _grouped(i, clients)
    first = np.argsort([r.start if isinstance(r, slice) else r[0] for r in rows], kind="stable")
    return labels[first]


def _reduction(parts, roles, tasks):
    """The delayed tree: each partition's summaries, merged eight at a time, in order."""
    # Workers get site roles rebuilt from the estimator alone: a role's key and
    # the state it keeps between rounds (a masking key) never leave this process.
    rebuilt = {}
    fresh = {key: rebuilt.setdefault(id(role), type(role)(role.estimator))
             for key, role in roles.items()}
    shared = dask.delayed(SiteAnswers(fresh, tasks, parts.spec()), pure=True)
    nodes = [
        dask.delayed(SiteAnswers.summarize, pure=True)(shared, i, *parts.delayed(i))
        for i in range(parts.n_partitions)
    ]
    while len(nodes) > 1:
        nodes = [
            dask.delayed(SiteAnswers.combine, pure=True)(shared, nodes[i : i + SPLIT_EVERY])
            for i in range(0, len(nodes), SPLIT_EVERY)
        ]
    return nodes[0]


def _replies(parts, server, roles, sites, tasks, finished, names):
    """The reply frames of the finished answers, as the server receives them."""
    # The reply's schema is read from these shapes and dtype, as from a site's rows.
    X_like = np.empty((0, parts.n_features), dtype=parts.dtype)
    y_like = np.empty((0,) if parts.n_targets is None else (0, parts.n_targets))
    replies, sizes = {}, {}
    for key, site in sites.items():  # in the order of the tasks, as in memory
        if key not in finished:
            continue  # no rows of this site: dropout
        fields, arrays = finished[key]
        role = roles[key]
        frame = role.reply_frame(tasks[key], X_like, y_like, names, fields, arrays)
        replies[site] = deliver_reply(server, role, site, frame, sizes)
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


#: A site's summary of its rows in some partitions (listed, for error messages).
_Piece = namedtuple("_Piece", ["site", "summary", "partitions"])


class SiteAnswers:
    """The client roles applied to the sites' rows of one round, block by block.

    For a :class:`~sklearn_fed.protocol.BlockwiseClient`, a site's rows may
    span partitions. For any other client role each site's reply is
    ``compute`` of its rows, which must then lie in one partition: a reply is
    not in general a sum (noise, for instance, is drawn once per reply).
    """

    def __init__(self, roles, tasks, spec):
        self.roles = roles
        self.tasks = tasks
        self.spec = spec

    def reads_rows(self, key):
        role = self.roles[key]
        return not role.answers_from_blocks() or role.reads_rows(self.tasks[key])

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
            role = self.roles[key]
            if role.answers_from_blocks():
                summary = role.summarize(task, X, y, sample_weight, site_rows)
            else:
                summary = role.compute(task, X, y, sample_weight, site_rows)
            pieces[key] = _Piece(label, summary, (i,))
        return pieces

    def combine(self, nodes):
        merged = {}
        for node in nodes:
            for key, piece in node.items():
                first = merged.get(key)
                merged[key] = piece if first is None else self.merge(key, first, piece)
        return merged

    def merge(self, key, first, second):
        role = self.roles[key]
        partitions = first.partitions + second.partitions
        if not role.answers_from_blocks():
            raise ValueError(
                f"site {first.site!r} has rows in partitions {list(partitions)}, but "
                f"{type(role).__name__} is not a BlockwiseClient: its reply cannot be "
                "assembled from parts. Put each site's rows in one partition."
            )
        return _Piece(first.site, role.merge(first.summary, second.summary), partitions)

    def finish(self, node):
        finished = {}
        for key, piece in node.items():
            role = self.roles[key]
            finished[key] = (
                role.finish(self.tasks[key], piece.summary)
                if role.answers_from_blocks() else piece.summary
            )
        return finished


# ------------------------------------------------------------------- stream
@atomic
def _stream(estimator, partial, parts):
    """One round per partition, in order; the next partition is read meanwhile."""
    spec = parts.spec()
    rounds = 0
    with ThreadPoolExecutor(max_workers=1) as reader:
        pending = reader.submit(dask.compute, *parts.delayed(0))
        for i in range(parts.n_partitions):
            X, y, sample_weight, clients = pending.result()
            if i + 1 < parts.n_partitions:
                pending = reader.submit(dask.compute, *parts.delayed(i + 1))
            if spec.check(i, X, y, sample_weight, clients) is None:
                continue  # a partition without rows brings no round
            step = estimator.partial_fit if partial or rounds else estimator.fit
            step(X, y, sample_weight=sample_weight, clients=clients)
            rounds += 1
    if rounds == 0:
        raise ValueError("X has no rows.")
    return estimator
