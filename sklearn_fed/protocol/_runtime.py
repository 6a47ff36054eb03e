"""The one round loop, and the transports that carry a round's tasks and replies.

As Flower separates a ``Strategy`` from the ``Grid`` that moves its messages,
a :class:`~sklearn_fed.protocol.Server` never knows how its tasks reach the
sites. :func:`run_rounds` drives every protocol run of the package::

    tasks = server.open_round(sites)
    while tasks:
        replies, sizes, failures, gone = transport.exchange(server, tasks)
        server.receive_frames(replies, sizes, failures)   # checks all, applies all or nothing
        transport.close_round()
        tasks = server.open_round(sites without gone)

and a :class:`Transport` is what differs: frames handed over in process
(:class:`~sklearn_fed.protocol.run_simulation`'s), bytes to client roles in
this process (:class:`BytesTransport`), Dask partitions
(:mod:`sklearn_fed.dask`), or messages through a Flower grid
(:mod:`sklearn_fed.flower`).
"""

import time
from abc import ABC, abstractmethod

from ._wire import encode

__all__ = ["BytesTransport", "RowsElsewhere", "Transport", "run_rounds"]


class Transport(ABC):
    """Carries one round's tasks to the sites and their replies back to the server.

    Subclasses implement :meth:`exchange`; :meth:`close_round` releases what a
    round held, and :meth:`apply_round` is an optional shortcut for a transport
    that can apply a round itself (the simulation's pooled rounds).
    """

    @abstractmethod
    def exchange(self, server, tasks):
        """Deliver ``tasks`` (``{site: Frame}``) and collect the replies.

        Returns
        -------
        replies : mapping
            ``{site: Frame}`` of the sites that answered (may compute each
            frame when it is read, see :class:`~sklearn_fed.protocol.FoldedReplies`).
        sizes : dict
            ``{site: bytes}`` of replies whose encoded size is known (the
            ledger counts the others from their frames).
        failures : dict
            ``{site: InvalidClientMessage}`` of replies that could not be read.
        gone : set
            Sites unreachable from now on (dropout); they get no further task.
        """

    def close_round(self):
        """Release what :meth:`exchange` holds for the round (e.g. site threads); called
        once the server has read the replies, whether or not it applied them."""

    def apply_round(self, server, sites):
        """Apply the server's next round without :meth:`exchange`, if this transport can.

        Returns True when a round was applied. By default never.
        """
        return False


def run_rounds(server, transport, sites):
    """Run ``server`` with ``sites`` through ``transport`` until it has no more tasks.

    Parameters
    ----------
    server : Server
    transport : Transport
    sites : sequence of hashable
        The labels of the sites reachable at the start.

    Returns
    -------
    server : Server
        Its ``estimator`` is fitted.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FederatedRidge
    >>> rng = np.random.default_rng(0)
    >>> data = {s: (rng.normal(size=(20, 3)), rng.normal(size=20)) for s in "abc"}
    >>> est = FederatedRidge()
    >>> transport = BytesTransport({s: est.make_client() for s in data}, data)
    >>> run_rounds(est.make_server(), transport, list(data)).estimator.n_clients_
    3
    """
    sites = list(sites)
    verbose = server.reports_rounds and bool(getattr(server.estimator, "verbose", 0))
    while True:
        started = _Progress(server) if verbose else None
        if transport.apply_round(server, sites):
            if verbose:
                started.report(len(sites))
            continue
        tasks = server.open_round(sites)
        if not tasks:
            return server
        try:
            replies, sizes, failures, gone = transport.exchange(server, tasks)
            server.receive_frames(replies, sizes, failures)
        finally:
            transport.close_round()
        if verbose:
            started.report(len(replies) - len(set(failures) & set(replies)), len(failures))
        if gone:
            sites = [site for site in sites if site not in gone]


class _Progress:
    """One line per applied round for an estimator with ``verbose`` set (as scikit-learn's
    iterative estimators print their iterations): sites, bytes each way, seconds."""

    def __init__(self, server):
        self.server, self.start = server, time.perf_counter()
        ledger = server._ledger
        self.up = 0 if ledger is None else ledger.uplink_bytes
        self.down = 0 if ledger is None else ledger.downlink_bytes

    def report(self, answered, dropped=0):
        ledger = self.server._ledger
        if ledger is None:
            return
        name = type(self.server.estimator).__name__
        left = f", {dropped} dropped" if dropped else ""
        print(
            f"[{name}] round {self.server.rounds_applied}: {answered} site(s) answered{left}, "
            f"{ledger.uplink_bytes - self.up} B up, {ledger.downlink_bytes - self.down} B "
            f"down, {time.perf_counter() - self.start:.2f} s",
            flush=True,
        )


class BytesTransport(Transport):
    """Sites in this process answering through bytes, exactly as deployed sites do.

    Every task is encoded (signed with the site's key), handed to the site's
    client role :meth:`~sklearn_fed.protocol.Client.respond`, and its reply
    decoded by the server (:meth:`~sklearn_fed.protocol.Server.decode_replies`).

    Parameters
    ----------
    clients : dict
        ``{site: Client}``.
    data : dict
        ``{site: (X, y)}`` or ``{site: (X, y, sample_weight)}``: each site's rows.
    tamper : callable, default=None
        ``tamper(site, reply_bytes) -> bytes``, applied to every reply (tests of
        hostile sites).

    Attributes
    ----------
    sent : dict
        ``{"tasks": {site: bytes}, "replies": {site: bytes}}`` summed over rounds.
    """

    def __init__(self, clients, data, *, tamper=None):
        self.clients = clients
        self.data = data
        self.tamper = tamper
        self.sent = {"tasks": {}, "replies": {}}

    def exchange(self, server, tasks):
        replies = {}
        for site, frame in tasks.items():
            task = encode(frame, key=server.key_of(site))
            reply = self.clients[site].respond(task, *self.data[site])
            if self.tamper is not None:
                reply = self.tamper(site, reply)
            replies[site] = reply
            for kind, message in (("tasks", task), ("replies", reply)):
                self.sent[kind][site] = self.sent[kind].get(site, 0) + len(message)
        return (*server.decode_replies(replies), set())



class RowsElsewhere(ABC):
    """Rows a fit does not hold in memory (e.g. Dask partitions), passed where ``X`` goes.

    :func:`~sklearn_fed.protocol.run_simulation` then runs the rounds through
    :meth:`transport`, which computes each site's reply where its rows are
    stored; everything else (roles, checks, the server) is unchanged.
    """

    @abstractmethod
    def transport(self, clients, labels, names):
        """The :class:`Transport` answering for sites ``labels`` with client role(s) ``clients``."""

    @abstractmethod
    def row_positions(self):
        """``{label key: positions of the site's rows}`` in the collection, or None for one site.

        For per-row results a fit must return in the rows' order; never sent to a server.
        """
