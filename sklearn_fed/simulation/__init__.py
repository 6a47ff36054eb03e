"""Simulating federated clients: partitions of rows, dropout, communication ledgers."""

from ._ledger import CommunicationLedger, fedavg_bytes

__all__ = ["CommunicationLedger", "fedavg_bytes"]

from ._gossip import GossipElection, elect_leader  # noqa: E402

__all__ += ["GossipElection", "elect_leader"]
