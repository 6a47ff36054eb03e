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
    synchronous gossip rounds, every node contacts ``fanout`` distinct random
    peers, and both sides of a contact keep the best bid either knew at the
    start of the round (push-pull). Equal bids are ordered by a random
    priority, so ties are broken at random and reproducibly.

    The outcome depends only on how far the *winning* bid spreads, so that is
    all that is simulated: with ``I`` of ``k`` nodes informed, each informed
    node pushes to ``fanout`` peers (drawn explicitly), and each other node
    pulls the bid with probability ``1 - C(k-1-I, f) / C(k-1, f)`` (drawn as
    one binomial count). This has exactly the distribution of simulating
    every node, and costs ``O(fanout * I)`` per gossip round instead of
    ``O(fanout * k)``: with the default 3 rounds of fanout 3, at most a few
    hundred draws however many nodes there are. With ``bids=None`` the bids
    are i.i.d. uniform, so the winner is a uniformly random node and no bid
    is drawn at all.

    Parameters
    ----------
    nodes : sequence of hashable
        Node labels; at least one. Only ``len(nodes)`` and the winner's
        ``nodes[i]`` are read, so a ``range`` or any sequence view will do.
    bids : array-like of shape (n_nodes,), default=None
        Each node's bid (e.g. its spare compute). ``None``: i.i.d. uniform bids.
    fanout : int, default=3
        Peers contacted by each node per gossip round.
    n_rounds : int, default=3
        Gossip rounds.
    random_state : int, RandomState or Generator instance, or None, default=None
        Peer sampling, tie-breaking and (when ``bids=None``) the winner.

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
    k = len(nodes)
    if k == 0:
        raise ValueError("elect_leader needs at least one node.")
    rng = random_state if isinstance(random_state, np.random.Generator) else (
        check_random_state(random_state)
    )
    if bids is None:
        winner = int(_draw(rng, k))
    else:
        bids = np.asarray(bids, dtype=np.float64)
        if bids.shape != (k,):
            raise ValueError(f"bids must have one value per node ({k}); got shape {bids.shape}.")
        best = np.flatnonzero(bids == bids.max())
        winner = int(best[0]) if best.size == 1 else int(best[_draw(rng, best.size)])
    fanout = min(int(fanout), k - 1)
    informed = _spread(k, fanout, int(n_rounds), rng) if fanout > 0 else 1
    n_messages = 2 * fanout * k * int(n_rounds) if fanout > 0 else 0
    return GossipElection(
        leader=nodes[winner], converged_fraction=informed / k, n_messages=n_messages
    )


def _draw(rng, high, size=None):
    """Integers in [0, high) from a Generator or a RandomState."""
    if isinstance(rng, np.random.Generator):
        return rng.integers(high, size=size)
    return rng.randint(high, size=size)


def _spread(k, fanout, n_rounds, rng):
    """How many of ``k`` nodes know the winning bid after ``n_rounds`` of push-pull.

    Nodes are exchangeable, so the informed ones are numbered ``0 .. I-1``.
    """
    if fanout >= k - 1:  # everyone contacts everyone: one round informs all
        return k if n_rounds > 0 else 1
    informed = 1
    for _ in range(n_rounds):
        if informed == k:
            break
        peers = _distinct_peers(informed, k, fanout, rng)
        pushed = len(set(peers[peers >= informed].tolist()))
        # A node that pushed nothing to still learns the bid if one of its own
        # fanout contacts is informed: C(k-1-I, f) / C(k-1, f) is the miss chance.
        miss = 1.0
        for j in range(fanout):
            miss *= (k - 1 - informed - j) / (k - 1 - j)
        rest = k - informed - pushed
        pulled = int(rng.binomial(rest, 1.0 - miss)) if rest > 0 else 0
        informed += pushed + pulled
    return informed


def _distinct_peers(n_senders, k, fanout, rng):
    """For senders ``0 .. n-1``: ``fanout`` distinct peers each, never themselves.

    Row ``i`` draws ``fanout`` values from the ``k - 1`` other nodes; rows
    with a repeated peer are drawn again (rare: with few nodes the peers are
    a random order of all the others instead).
    """
    senders = np.arange(n_senders)[:, None]
    if k - 1 < 4 * fanout:  # few nodes: a random order of the others, no rejections
        order = np.argsort(rng.random((n_senders, k - 1)), axis=1)[:, :fanout]
        return order + (order >= senders)
    peers = np.empty((n_senders, fanout), dtype=np.intp)
    redo = np.arange(n_senders)
    while redo.size:
        draw = _draw(rng, k - 1, size=(redo.size, fanout))
        draw += draw >= senders[redo]  # skip the sender itself
        peers[redo] = draw
        ordered = np.sort(draw, axis=1)
        repeated = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        redo = redo[repeated]
    return peers
