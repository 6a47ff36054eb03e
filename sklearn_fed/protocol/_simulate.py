"""``fit(X, y, clients=...)``: the protocol run in one process.

:func:`run_simulation` drives exactly the roles a deployment uses
(:meth:`Server._plan`, :meth:`Client._compute`, :meth:`Server._read_reply`,
:meth:`Server._apply`) on every site's rows of one ``X``. By default the
frames are handed over as objects (their sizes, counted in the ledger, are
computed exactly without serializing); inside :func:`simulate_through_bytes`
every task and reply is encoded to bytes and decoded again, as on a network.
Both paths carry the same float64 values, so they give identical models.
For a server that folds replies as it reads them (:meth:`Server._reply_fold`),
each site's reply is computed only when the server reads it, so a round
never holds every site's reply at once.
"""

import contextlib
import functools
import threading

import numpy as np

from ._roles import FramesOnDemand
from ._wire import decode, encode, label_key

__all__ = ["atomic", "run_simulation", "simulate_through_bytes"]

_config = threading.local()


@contextlib.contextmanager
def simulate_through_bytes(enabled=True):
    """Within this block, every simulated message is serialized and parsed.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FederatedRidge
    >>> X, y = np.arange(12.0).reshape(6, 2), np.arange(6.0)
    >>> with simulate_through_bytes():
    ...     model = FederatedRidge().fit(X, y, clients=[0, 0, 1, 1, 2, 2])
    >>> model.n_clients_
    3
    """
    previous = getattr(_config, "through_bytes", False)
    _config.through_bytes = enabled
    try:
        yield
    finally:
        _config.through_bytes = previous


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
    labels = [label.item() if isinstance(label, np.generic) else label for label in labels]
    if hasattr(X, "_run_partitions"):  # rows in Dask partitions (sklearn_fed.dask)
        return X._run_partitions(server, clients, labels, names)
    position = {label_key(label): i for i, label in enumerate(labels)}
    per_site = isinstance(clients, dict)

    def role(site):
        return clients[site] if per_site else clients

    tasks = server._next_frames(labels)
    while tasks:
        tasks = {site: deliver_task(server, role(site), site, task) for site, task in tasks.items()}
        site_rows = {site: rows[position[label_key(site)]] for site in tasks}
        sizes = {}
        if server._reply_fold() is not None:
            # The server folds each reply as soon as it reads it: compute it
            # then, so a round holds one site's reply at a time, not all.
            def reply_of(site, tasks=tasks, site_rows=site_rows, sizes=sizes):
                reply = role(site)._reply(tasks[site], X, y, sample_weight, site_rows[site], names)
                return deliver_reply(server, role(site), site, reply, sizes)

            replies = FramesOnDemand(tasks, reply_of)
        else:
            if per_site:
                replies = {
                    site: clients[site]._reply(task, X, y, sample_weight, site_rows[site], names)
                    for site, task in tasks.items()
                }
            else:  # one role for every site: it may compute them together
                replies = clients._reply_many(tasks, X, y, sample_weight, site_rows, names)
            replies = {
                site: deliver_reply(server, role(site), site, reply, sizes)
                for site, reply in replies.items()
            }
        server._receive_frames(replies, sizes)
        tasks = server._next_frames(labels)
    return server


def deliver_task(server, client, site, task):
    """A task frame as the site receives it: through bytes inside :func:`simulate_through_bytes`."""
    if not getattr(_config, "through_bytes", False):
        return task
    task = decode(encode(task, key=server._key(site)), key=client.key, client="server")
    client._check_task(task)
    return task


def deliver_reply(server, client, site, reply, sizes):
    """A reply frame as the server receives it; records its byte size in ``sizes`` when encoded."""
    if not getattr(_config, "through_bytes", False):
        return reply
    data = encode(reply, key=client.key)
    sizes[site] = len(data)
    return decode(data, key=server._key(site), client=site, max_bytes=server.max_message_bytes)


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
