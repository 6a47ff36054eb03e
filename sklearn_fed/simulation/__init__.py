"""Simulating federated clients: partitions of rows, their sizes, dropout, leader election."""

from ._dropout import drop_clients
from ._gossip import GossipElection, elect_leader
from ._partition import (
    partition_by_sizes,
    partition_dirichlet,
    partition_feature_shift,
    partition_iid,
    partition_label_shards,
)
from ._sample_sizes import (
    SAMPLE_SIZE_LAWS,
    sample_client_sizes,
    sample_size_distribution,
)

__all__ = [
    "SAMPLE_SIZE_LAWS",
    "GossipElection",
    "drop_clients",
    "elect_leader",
    "partition_by_sizes",
    "partition_dirichlet",
    "partition_feature_shift",
    "partition_iid",
    "partition_label_shards",
    "sample_client_sizes",
    "sample_size_distribution",
]
