"""Communication ledger: what a protocol sent, counted from real message sizes."""

from dataclasses import dataclass, field

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


@dataclass
class CommunicationLedger:
    """Bytes a federated fit moved, per client and in total.

    Attributes
    ----------
    uplink_bytes_per_client : dict
        Client label -> bytes that client uploaded (all rounds).
    downlink_bytes : int
        Bytes the server sent (model broadcasts), all clients and rounds.
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
    downlink_bytes: int = 0
    rounds: int = 0
    n_parameters: int = 0

    @property
    def uplink_bytes(self):
        """Total bytes uploaded by all clients."""
        return sum(self.uplink_bytes_per_client.values())

    def record_upload(self, client, n_bytes):
        """Add ``n_bytes`` to what ``client`` uploaded."""
        key = client.item() if hasattr(client, "item") else client
        self.uplink_bytes_per_client[key] = (
            self.uplink_bytes_per_client.get(key, 0) + int(n_bytes)
        )

    def record_broadcast(self, n_clients, n_values, itemsize=_FLOAT64):
        """Count one round in which the model is sent to ``n_clients`` clients."""
        self.downlink_bytes += int(n_clients) * int(n_values) * int(itemsize)
        self.rounds += 1

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
            "rounds": self.rounds,
        }
