"""Leader election by a simulated push-pull gossip of bids (FedDelta, Sec. 5.1)."""

from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["GossipElection", "elect_leader"]


@dataclass(frozen=True)
class GossipElection:
    """Outcome of one gossip election.

    Attributes
    ----------
    leader : hashable
        The node with the highest bid (ties broken at random).
    converged_fraction : float
        Fraction of nodes that had heard of the winning bid when gossip
        stopped. Below 1, some nodes still believed in another winner; the
        true winner always knows it holds the highest bid, and the others
        defer to it as soon as it contacts them.
    n_messages : int
        Bid exchanges performed (each push-pull contact counts two messages).
    """

    leader: object
    converged_fraction: float
    n_messages: int


def elect_leader(nodes, bids=None, *, fanout=3, n_rounds=3, random_state=None):
    """Elect a leader by push-pull gossip: the highest bid wins.

    Every node starts knowing only its own bid. In each of ``n_rounds``
    gossip rounds, each node (in random order) contacts ``fanout`` random
    peers; both sides of a contact keep the best bid either has seen
    (push-pull). Equal bids are ordered by a random priority drawn once per
    election, so ties are broken at random and reproducibly.

    Parameters
    ----------
    nodes : sequence of hashable
        Node labels; at least one.
    bids : array-like of shape (n_nodes,), default=None
        Each node's bid (e.g. its spare compute). ``None`` draws uniform bids.
    fanout : int, default=3
        Peers contacted by each node per gossip round.
    n_rounds : int, default=3
        Gossip rounds.
    random_state : int, RandomState instance or None, default=None
        Peer sampling, tie-breaking and (when ``bids=None``) the bids.

    Returns
    -------
    election : GossipElection

    Examples
    --------
    >>> from sklearn_fed.simulation import elect_leader
    >>> result = elect_leader(["a", "b", "c", "d"], bids=[1, 5, 5, 2], random_state=0)
    >>> result.leader in ("b", "c"), result.converged_fraction
    (True, 1.0)
    """
    nodes = list(nodes)
    k = len(nodes)
    if k == 0:
        raise ValueError("elect_leader needs at least one node.")
    rng = check_random_state(random_state)
    bids = rng.uniform(size=k) if bids is None else np.asarray(bids, dtype=np.float64)
    if bids.shape != (k,):
        raise ValueError(f"bids must have one value per node ({k}); got shape {bids.shape}.")
    priority = rng.permutation(k)  # random tie-break, fixed for this election
    # best[i]: index of the best (bid, priority) node that node i has heard of
    best = np.arange(k)

    def better(a, b):
        return a if (bids[a], priority[a]) > (bids[b], priority[b]) else b

    messages = 0
    fanout = min(int(fanout), k - 1)
    for _ in range(int(n_rounds)):
        for i in rng.permutation(k):
            if fanout <= 0:
                break
            peers = rng.choice(k - 1, size=fanout, replace=False)
            for j in peers + (peers >= i):  # skip self
                winner = better(best[i], best[j])
                best[i] = best[j] = winner
                messages += 2
    winner = int(np.lexsort((priority, bids))[-1])
    return GossipElection(
        leader=nodes[winner],
        converged_fraction=float(np.mean(best == winner)),
        n_messages=messages,
    )
