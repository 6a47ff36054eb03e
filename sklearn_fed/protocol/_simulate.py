"""``fit(X, y, clients=...)``: the protocol run in one process.

:func:`run_simulation` drives exactly the roles a deployment uses
(:meth:`Server.plan`, :meth:`Client.compute`, :meth:`Server.read_reply`,
:meth:`Server.apply`) on every site's rows of one ``X``. By default the
frames are handed over as objects (their sizes, counted in the ledger, are
computed exactly without serializing); inside :func:`simulate_through_bytes`
every task and reply is encoded to bytes and decoded again, as on a network.
Both paths carry the same float64 values, so they give identical models.
For a server that folds replies as it reads them (:meth:`Server.reply_fold`),
each site's reply is computed only when the server reads it, so a round
never holds every site's reply at once.

A round whose result is provably a reduction of the pooled rows (a server
that opts in with :meth:`Server.pools_round`: one-shot statistics are
additive, Theorem 2 of the one-shot paper) is **pooled** outside
:func:`simulate_through_bytes`: one reply is computed from every site's rows
together and folded, and each site's task and reply sizes are counted
exactly as the per-site run would (:func:`~sklearn_fed.protocol._wire.frame_sizes`).
The ledger is then the per-site run's byte for byte and the model equals it
to round-off (the sums are added in another order); ``fit`` costs one pass
over ``X`` plus O(1) per site. Anything the pooled reply cannot vouch for
(a check fails, a site's message could exceed a cap the pooled one keeps)
falls back to the per-site run, which then raises what it raises.
"""

import contextlib
import functools
import gc
import itertools
import operator
from collections.abc import Mapping

import numpy as np

from ._errors import InvalidClientMessage
from ._roles import FoldedReplies, FramesOnDemand
from ._runtime import RowsElsewhere, Transport, run_rounds
from ._threads import (
    MIN_ROWS_PER_THREAD,
    blas_libraries,
    blas_threads,
    simulate_through_bytes,
    site_threads,
    through_bytes,
)
from ._wire import (
    decode,
    encode,
    frame_sizes,
    json_length,
    label_key,
    label_keys,
    sorted_labels,
)

__all__ = ["atomic", "run_simulation", "simulate_through_bytes"]


@contextlib.contextmanager
def collection_paused():
    """Pause CPython's cyclic garbage collector for a block (as Mercurial's ``util.nogc``).

    A run over K sites makes O(K) small acyclic objects that live to its end
    (row slices, ledger entries, open tasks); with the collector on, every
    few ten thousand of them set off a scan of the whole heap, which made 40%
    of a pooled fit over 100,000 sites. Cycles made in the block are
    collected after it, as usual.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class MadeWhenRead:
    """A container (a mixin of ``Mapping`` or ``Sequence``) of ``length`` items that
    ``make()`` makes on first read, with the collector paused (one object per site)."""

    def __init__(self, length, make):
        self._length, self._make, self._made = length, make, None

    def _all(self):
        if self._made is None:
            with collection_paused():
                self._made = self._make()
            self._make = None
        return self._made

    def __getitem__(self, key):
        return self._all()[key]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return self._length


def run_simulation(server, clients, X, y, sample_weight, labels, rows, names=None):
    """Run ``server`` with one simulated site per label until it has no more tasks.

    Parameters
    ----------
    server : Server
    clients : Client or dict
        One client role for every site, or ``{label: Client}``.
    X, y, sample_weight : arrays
        All sites' rows, already validated (as ``fit`` does once for all).
    labels : sequence
        Site labels.
    rows : list of (slice or ndarray)
        Each site's rows of ``X``.
    names : list of str, default=None
        Feature names, when ``X`` had them.

    Returns
    -------
    server : Server
    """
    with collection_paused():
        if isinstance(labels, np.ndarray) and labels.dtype != object:
            labels = labels.tolist()  # plain ints and strings, as the wire carries them
        else:
            labels = [label.item() if isinstance(label, np.generic) else label
                      for label in labels]
        if isinstance(X, RowsElsewhere):  # e.g. Dask partitions: answered where they are
            transport = X.transport(clients, labels, names)
        else:
            transport = InProcessTransport(clients, X, y, sample_weight, labels, rows, names)
        return run_rounds(server, transport, labels)


class InProcessTransport(Transport):
    """Simulated sites that share one validated ``X``: frames handed over as objects.

    Inside :func:`simulate_through_bytes` every task and reply is encoded and
    decoded on the way. A server that folds replies reads each site's reply
    when it is computed (or a few computed ahead on threads); a round the
    server lets pool (:meth:`Server.pools_round`) is applied from all rows at
    once by :meth:`apply_round`.
    """

    def __init__(self, clients, X, y, sample_weight, labels, rows, names):
        self.clients, self.X, self.y, self.sample_weight = clients, X, y, sample_weight
        self.labels, self.rows, self.names = labels, rows, names
        self.per_site = isinstance(clients, dict)
        self.pools = not (through_bytes() or self.per_site)
        self._position = None
        self._ahead = contextlib.ExitStack()

    def role(self, site):
        return self.clients[site] if self.per_site else self.clients

    def apply_round(self, server, sites):
        return self.pools and pool_round(server, self.clients, self.X, self.y,
                                          self.sample_weight, self.labels, self.rows, self.names)

    def exchange(self, server, tasks):
        if self._position is None:
            self._position = {label_key(label): i for i, label in enumerate(self.labels)}
        X, y, sample_weight, names, role = (
            self.X, self.y, self.sample_weight, self.names, self.role)
        tasks = {site: deliver_task(server, role(site), site, task)
                 for site, task in tasks.items()}
        site_rows = {site: self.rows[self._position[label_key(site)]] for site in tasks}
        sizes = {}

        def reply_of(site):
            reply = role(site).reply(tasks[site], X, y, sample_weight, site_rows[site], names)
            return deliver_reply(server, role(site), site, reply, sizes)

        if server.reply_fold() is not None:
            # The server folds each reply as soon as it reads it: compute it
            # then, so a round holds one site's reply at a time, not all.
            workers = 1 if self.per_site else self.clients.site_workers(tasks, X, site_rows)
            if workers > 1:  # or a few at once, each on one BLAS thread (see reply_many)
                replies = self._ahead.enter_context(_sites_ahead(tasks, reply_of, workers))
            else:
                replies = FramesOnDemand(tasks, reply_of)
        elif self.per_site:
            replies = {site: reply_of(site) for site in tasks}
        else:  # one role for every site: it may compute them together
            replies = self.clients.reply_many(tasks, X, y, sample_weight, site_rows, names)
            replies = {site: deliver_reply(server, self.clients, site, reply, sizes)
                       for site, reply in replies.items()}
        return replies, sizes, {}, ()

    def close_round(self):
        self._ahead.close()


@contextlib.contextmanager
def _sites_ahead(tasks, reply_of, workers):
    """Frames on demand that ``workers`` threads compute ahead of the server's reading.

    The server reads them in label order; each thread runs BLAS on one
    thread until the last reply is read (then the server's own work, the
    solve, has every thread again), so at most ``workers`` replies wait.
    """
    limiter = blas_libraries().limit(limits=1)
    pool = site_threads(workers)
    try:
        yield FramesOnDemand(tasks, reply_of, ahead=(
            pool, workers, sorted_labels(tasks), limiter.restore_original_limits))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        limiter.restore_original_limits()


class PoolingDeclined(Exception):
    """A pooled round needs a single site's reply (e.g. to name a culprit): run per site."""


class _OpenSites(MadeWhenRead, Mapping):
    """A pooled round's open sites, ``{label key: site}``, made only if read.

    No pooled server reads them (a single reply's header is never checked),
    and at K = 100,000 making the dict was an eighth of a fit.
    """


def _no_single_frame(site):
    """A pooled round's frames: its sites, but no single site's frame."""
    raise PoolingDeclined(site)


def pool_round(server, client, X, y, sample_weight, labels, rows, names):
    """Apply the server's next round from all sites' rows at once, if that is provably its result.

    Returns True when the round was applied (the server may ask for another,
    run per site); False, with nothing applied and no round open, when the
    round must run site by site.
    """
    if not (isinstance(X, np.ndarray) and sample_weight is None and client.key is None
            and client.policy_in_force() is None and not server.keys and len(labels) > 1):
        return False
    plan = server.next_plan(labels) if server.pools_round(None) else {}
    if not plan:
        return False
    first = labels[0]
    same = plan[first]
    fields, arrays = same

    def same_task(entry):  # equal fields, the very same arrays
        return entry[0] == fields and entry[1].keys() == arrays.keys() and all(
            entry[1][name] is value for name, value in arrays.items())

    if not server.pools_round(fields) or (
        not all(map(operator.is_, plan.values(), itertools.repeat(same)))  # one task for all
        and not all(map(same_task, plan.values()))
    ):
        return False
    task = server.task_frame(first, fields, arrays)
    counts = getattr(rows, "counts", None)  # group_rows_by_client's: no row index made
    if counts is None:
        whole = range(X.shape[0])
        counts = [len(whole[r]) if isinstance(r, slice) else len(r) for r in rows]
    counts = np.asarray(counts)
    try:
        # The reply of one site holding every row (the fold of all replies).
        reply = pooled_reply(client, task, X, y, names)
        fold = server.pooled_fold(first, reply, int(counts.min()))
    except (InvalidClientMessage, ValueError, ArithmeticError):
        return False
    if fold is None:
        return False
    # A site's reply differs from the pooled one in its label and the fields
    # its row count sets: sizes per distinct count, then per site.
    if counts.min() == counts.max():  # sites of one size: one length
        distinct, which = counts[:1], 0
    else:
        distinct, which = np.unique(counts, return_inverse=True)
    own_fields = [client.fields_of_rows(reply.fields, int(n)) for n in distinct]
    if any(own is None for own in own_fields):
        return False
    fields_lengths = np.array([json_length(own) for own in own_fields])[which]
    keys = label_keys(labels)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    uplink = frame_sizes(reply, lengths, fields_lengths)
    if uplink.max() > server.max_message_bytes:
        return False
    restore = server.savepoint()
    server.open_planned_round(_OpenSites(len(labels), lambda: dict(zip(keys, labels))),
                              dict(zip(labels, frame_sizes(task, lengths).tolist())))
    folded = FoldedReplies(server, FramesOnDemand(labels, _no_single_frame), dict.fromkeys(labels, reply.schema),
                           dict(zip(labels, uplink.tolist())), fold)
    try:
        server.commit_round(None, folded, {}, {})
    except PoolingDeclined:  # apply asked for one site's reply: run the round per site
        restore()
        return False
    return True


# At most _POOLED_PARTS parts, each holding its own (d + t)^2 statistics:
# together at most 1/20 of X. Parts depend on the shape only, so the bits do
# not depend on how many threads compute them.
_POOLED_PARTS = 8


def pooled_reply(client, task, X, y, names):
    """The reply of one site holding every row of ``X``, computed on every BLAS thread.

    A :class:`BlockwiseClient`'s reply is a reduction over its rows, so the
    rows are cut into contiguous parts summarized concurrently (each on one
    BLAS thread; as many at once as BLAS has threads) and merged in order:
    the per-block work of a site (its matrix-vector products, its chunked
    O(d^2) updates) runs on every core, not only its BLAS products.
    """
    n_targets = 0 if y is None else 1 if y.ndim == 1 else y.shape[1]
    n, p = X.shape[0], X.shape[1] + n_targets
    n_parts = int(min(_POOLED_PARTS, n // MIN_ROWS_PER_THREAD,
                      X.nbytes // (20 * 8 * p * p)))
    if n_parts < 2 or not client.answers_from_blocks() or not client.reads_rows(task):
        return client.reply(task, X, y, None, None, names)
    edges = np.linspace(0, n, n_parts + 1).astype(int).tolist()
    parts = [slice(a, b) for a, b in itertools.pairwise(edges)]

    summarize = functools.partial(client.summarize, task, X, y, None)
    workers = min(n_parts, blas_threads())
    if workers > 1:
        with blas_libraries().limit(limits=1), site_threads(workers) as pool:
            summaries = list(pool.map(summarize, parts))
    else:
        summaries = [summarize(rows) for rows in parts]
    fields, arrays = client.finish(task, functools.reduce(client.merge, summaries))
    return client.reply_frame(task, X, y, names, fields, arrays)


def deliver_task(server, client, site, task):
    """A task frame as the site receives it: through bytes inside :func:`simulate_through_bytes`."""
    if not through_bytes():
        return task
    task = decode(encode(task, key=server.key_of(site)), key=client.key, client="server")
    client.check_task(task)
    return task


def deliver_reply(server, client, site, reply, sizes):
    """A reply frame as the server receives it; records its byte size in ``sizes`` when encoded."""
    if not through_bytes():
        return reply
    data = encode(reply, key=client.key)
    sizes[site] = len(data)
    return decode(data, key=server.key_of(site), client=site, max_bytes=server.max_message_bytes)


def atomic(method):
    """Decorator: a ``fit``/``partial_fit`` that raises leaves the estimator as it was.

    Fitted state is only ever replaced (never mutated in place), so restoring
    the attribute dict taken before the call undoes everything.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        saved = dict(self.__dict__)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise

    return wrapper
