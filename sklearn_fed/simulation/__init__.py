"""Simulating federated clients: partitions of rows, dropout, communication ledgers."""

from ._ledger import CommunicationLedger, fedavg_bytes

__all__ = ["CommunicationLedger", "fedavg_bytes"]
