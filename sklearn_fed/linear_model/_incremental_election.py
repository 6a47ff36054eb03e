"""The nodes of IncrementalFederatedRidge's stream, and the leader election among them.

FedDelta rotates the node that aggregates a round; the server simulates
that election every round (:func:`_elect_round_leader`, by
:func:`~sklearn_fed.simulation.elect_leader`'s push-pull gossip of bids,
with leader dropouts), among the nodes seen so far (an append-only index
shared by the stream's states, :func:`_add_positions`) and the round's new
sites. Each round's draws come from a counter-based generator keyed by the
stream's seed and the round id (:func:`_philox`).
"""

import threading

import numpy as np

from .._clients import label_array
from ..protocol import label_key
from ..simulation import elect_leader


def _elect_round_leader(nodes, known, sites, site_keys, *, fanout, n_rounds, dropout, rng):
    """``(leader, dropped, converged, new)`` of one round's election.

    ``nodes`` are the labels seen so far (``known`` their positions,
    :class:`_KnownPositions`), ``sites`` this round's (``site_keys`` their
    :func:`~sklearn_fed.protocol.label_key`). A leader drops out with
    probability ``dropout`` and another is elected among the rest; ``dropped``
    lists them, ``converged`` is the fraction of nodes that heard the winning
    bid, ``new`` the sites not seen before. ``leader`` is None when every
    node dropped out.
    """
    new = [site for site, key in zip(sites, site_keys) if key not in known]
    new_position = {key: i for i, key in enumerate(k for k in site_keys if k not in known)}
    dropped, excluded = [], []
    roster = _Roster(nodes, new, excluded)
    while len(roster):
        election = elect_leader(roster, fanout=fanout, n_rounds=n_rounds, random_state=rng)
        if dropout > 0 and rng.random() < dropout:
            key = label_key(election.leader)
            position = known.get(key)
            if position is None:
                position = len(nodes) + new_position[key]
            dropped.append(election.leader)
            roster = _Roster(nodes, new, excluded + [position])
            excluded = roster.excluded
            continue
        return election.leader, dropped, election.converged_fraction, new
    return None, dropped, 0.0, new


class _Roster:
    """The nodes that may lead a round: those seen so far, then this round's new ones,
    less the leaders that dropped out (a sequence view; nothing is copied)."""

    def __init__(self, known, new, excluded):
        self.known, self.new = known, new
        self.excluded = sorted(excluded)

    def __len__(self):
        return len(self.known) + len(self.new) - len(self.excluded)

    def index(self, i):
        for skipped in self.excluded:  # the i-th node that was not excluded
            if i >= skipped:
                i += 1
        return i

    def __getitem__(self, i):
        i = self.index(i)
        n = len(self.known)
        label = self.known[i] if i < n else self.new[i - n]
        return label.item() if isinstance(label, np.generic) else label



_THREAD = threading.local()


def _philox(key, counter):
    """``Generator(Philox(key=key, counter=counter))``, reusing this thread's generator.

    Building a Philox bit generator costs more than all of a small round's
    draws; setting the key and counter of one kept per thread gives the
    same stream (a fresh generator's buffers are empty, as set here).
    """
    if not (0 <= key < 2**64 and 0 <= counter < 2**64):
        return np.random.Generator(np.random.Philox(key=key, counter=counter))
    kept = getattr(_THREAD, "philox", None)
    if kept is None:
        kept = _THREAD.philox = np.random.Generator(np.random.Philox())
    kept.bit_generator.state = {
        "bit_generator": "Philox",
        "state": {"counter": np.array([counter, 0, 0, 0], dtype=np.uint64),
                  "key": np.array([key, 0], dtype=np.uint64)},
        "buffer": np.zeros(4, dtype=np.uint64), "buffer_pos": 4,
        "has_uint32": 0, "uinteger": 0,
    }
    return kept



def _append_labels(labels, new):
    """``labels`` (an array) followed by ``new``, keeping each label's type."""
    new = label_array(new)
    if labels.dtype.kind == new.dtype.kind and labels.dtype.kind in "iub":
        return np.concatenate([labels, new])
    if labels.dtype.kind == new.dtype.kind == "U":
        return np.concatenate([labels, new])
    if labels.size == 0:
        return new
    both = np.empty(labels.size + new.size, dtype=object)
    both[: labels.size] = labels.astype(object)
    both[labels.size :] = new.astype(object)
    return both


class _KnownPositions:
    """The node positions a state knows: its index's entries below its node count."""

    def __init__(self, index, n_nodes):
        self.index, self.n_nodes = index, n_nodes

    def get(self, key):
        position = self.index.get(key)
        return position if position is not None and position < self.n_nodes else None

    def __contains__(self, key):
        return self.get(key) is not None


def _add_positions(state, new_sites):
    """The index of ``state``'s nodes followed by ``new_sites``.

    States share one append-only index (label key -> position), each reading
    only the positions below its own node count, so a round that adds sites
    costs O(new sites), not a copy of every node seen. The index is copied
    only when another state already went on from this one (a copy of the
    estimator, or a round that failed after adding).
    """
    index, n_nodes = state["node_keys"], len(state["nodes"])
    if len(index) != n_nodes:
        index = {key: position for key, position in index.items() if position < n_nodes}
    for site in new_sites:
        index[label_key(site)] = len(index)
    return index

