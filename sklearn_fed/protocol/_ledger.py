"""Communication ledger: what a protocol sent, counted from real message sizes."""

from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["CommunicationLedger", "fedavg_bytes"]

_FLOAT64 = 8


def fedavg_bytes(n_parameters, n_rounds, n_clients, itemsize=_FLOAT64):
    """Bytes R rounds of FedAvg would move (Theorem 4 of the one-shot paper).

    Each round every client downloads the model and uploads its update: ``R d``
    values each way per client, for ``d = n_parameters``.

    Parameters
    ----------
    n_parameters : int
        Model size ``d`` in values (coefficients plus intercepts).
    n_rounds : int
        Number of rounds ``R``.
    n_clients : int
        Number of participating clients ``K``.
    itemsize : int, default=8
        Bytes per value (float64).

    Returns
    -------
    dict
        ``uplink_bytes`` and ``downlink_bytes`` summed over clients.

    Examples
    --------
    >>> fedavg_bytes(n_parameters=101, n_rounds=200, n_clients=20)
    {'uplink_bytes': 3232000, 'downlink_bytes': 3232000}
    """
    total = int(n_parameters) * int(n_rounds) * int(n_clients) * int(itemsize)
    return {"uplink_bytes": total, "downlink_bytes": total}


_PLAIN = frozenset({int, str, float, bool, tuple, type(None)})
_INT = frozenset({int})


def _add(counts, client, n_bytes):
    key = client.item() if isinstance(client, np.generic) else client
    counts[key] = counts.get(key, 0) + int(n_bytes)


@dataclass
class CommunicationLedger:
    """Bytes a federated fit moved, per client and in total.

    The protocol's server records every message it sends (a task: downlink)
    and receives (a reply: uplink) by its length in bytes, so these are the
    sizes of real messages, not estimates.

    Attributes
    ----------
    uplink_bytes_per_client : dict
        Client label -> bytes that client sent (all rounds).
    downlink_bytes_per_client : dict
        Client label -> bytes the server sent to that client (all rounds).
    rounds : int
        Communication rounds.
    n_parameters : int
        Size of the model in values, used by :meth:`fedavg_equivalent`.

    Examples
    --------
    >>> ledger = CommunicationLedger(n_parameters=3)
    >>> ledger.record_upload("a", 100); ledger.record_upload("b", 50)
    >>> ledger.uplink_bytes
    150
    """

    uplink_bytes_per_client: dict = field(default_factory=dict)
    downlink_bytes_per_client: dict = field(default_factory=dict)
    rounds: int = 0
    n_parameters: int = 0

    @property
    def uplink_bytes(self):
        """Total bytes sent by all clients."""
        return sum(self.uplink_bytes_per_client.values())

    @property
    def downlink_bytes(self):
        """Total bytes the server sent."""
        return sum(self.downlink_bytes_per_client.values())

    def record_upload(self, client, n_bytes):
        """Add ``n_bytes`` to what ``client`` sent."""
        _add(self.uplink_bytes_per_client, client, n_bytes)

    def record_download(self, client, n_bytes):
        """Add ``n_bytes`` to what the server sent to ``client``."""
        _add(self.downlink_bytes_per_client, client, n_bytes)

    def record_round(self, downloads, uploads):
        """Count one round: ``{client: bytes}`` sent to and received from clients."""
        for counts, new in ((self.downlink_bytes_per_client, downloads),
                            (self.uplink_bytes_per_client, uploads)):
            plain = _PLAIN.issuperset(map(type, new)) and _INT.issuperset(map(type, new.values()))
            if not counts and plain:  # the first round, plain labels and sizes: a copy
                counts.update(new)
                continue
            for client, n_bytes in new.items():
                _add(counts, client, n_bytes)
        self.rounds += 1

    def copy(self):
        """An independent copy (a round is recorded on a copy, then committed)."""
        return replace(self, uplink_bytes_per_client=dict(self.uplink_bytes_per_client),
                       downlink_bytes_per_client=dict(self.downlink_bytes_per_client))

    def fedavg_equivalent(self, n_rounds):
        """What ``n_rounds`` of FedAvg over the same clients would have moved.

        See :func:`fedavg_bytes`.
        """
        return fedavg_bytes(self.n_parameters, n_rounds, len(self.uplink_bytes_per_client))

    def as_dict(self):
        """Plain-dict view, convenient for printing and tables."""
        return {
            "uplink_bytes": self.uplink_bytes,
            "uplink_bytes_per_client": dict(self.uplink_bytes_per_client),
            "downlink_bytes": self.downlink_bytes,
            "downlink_bytes_per_client": dict(self.downlink_bytes_per_client),
            "rounds": self.rounds,
        }
