"""IncrementalFederatedRidge: FedDelta rounds as a streaming protocol, solved by low-rank updates.

The estimator and its roles: every round, each site with enough new rows
sends its :class:`~sklearn_fed.statistics.ClientStatistics`
(:func:`_site_statistics`), which the server validates and merges into the
model of :mod:`~sklearn_fed.linear_model._incremental_model` (exact
statistics, solved on first use by low-rank updates); a site that holds its
rows sends their count. FedDelta rotates the node that aggregates a round:
the server simulates that election every round (:func:`_elect_round_leader`)
among the nodes seen so far and the round's new sites.
"""

import contextlib
import copy
import math
import threading
import time
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from .._clients import label_array
from .._compat import Interval, StrOptions
from ..base import set_federation_attributes
from ..protocol import (
    Client,
    InvalidClientMessage,
    Server,
    label_key,
    run_simulation,
    sorted_labels,
)
from ..protocol._fields import reply_error, reply_keys, reply_number
from ..simulation import elect_leader
from ..statistics import ClientStatistics
from ..statistics._kernels import few_rows_factor
from ._base import BaseFederatedRidge, fit_method, task_field
from ._incremental_model import _Model, _one_blas_thread

__all__ = ["IncrementalFederatedRidge"]


def _elect_round_leader(nodes, index, sites, site_keys, *, fanout, n_rounds, dropout, rng):
    """``(leader, dropped, converged, new)`` of one round's election.

    ``nodes`` are the labels seen so far (``index`` their positions by label
    key, :func:`_add_positions`), ``sites`` this round's (``site_keys`` their
    :func:`~sklearn_fed.protocol.label_key`). A leader drops out with
    probability ``dropout`` and another is elected among the rest; ``dropped``
    lists them, ``converged`` is the fraction of nodes that heard the winning
    bid, ``new`` the sites not seen before. ``leader`` is None when every
    node dropped out.
    """
    n = len(nodes)  # (positions from n on are other states' nodes)
    new = [site for site, key in zip(sites, site_keys) if index.get(key, n) >= n]
    dropped, excluded = [], []
    while n + len(new) > len(excluded):
        election = elect_leader(_Roster(n + len(new), excluded), fanout=fanout,
                                n_rounds=n_rounds, random_state=rng)
        position = election.leader
        leader = nodes[position] if position < n else new[position - n]
        leader = leader.item() if isinstance(leader, np.generic) else leader
        if not (dropout > 0 and rng.random() < dropout):
            return leader, dropped, election.converged_fraction, new
        dropped.append(leader)
        excluded = sorted([*excluded, position])
    return None, dropped, 0.0, new


class _Roster:
    """The positions of the nodes that may lead a round (those seen so far, then this
    round's new ones), less the ``excluded`` ones (sorted): the leaders that dropped out.
    A sequence view; nothing is copied."""

    def __init__(self, n_nodes, excluded):
        self.n_nodes, self.excluded = n_nodes, excluded

    def __len__(self):
        return self.n_nodes - len(self.excluded)

    def __getitem__(self, i):
        for skipped in self.excluded:  # the i-th position that was not excluded
            if i >= skipped:
                i += 1
        return i


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
    if labels.dtype.kind == new.dtype.kind and labels.dtype.kind in "iubU":
        return np.concatenate([labels, new])
    if labels.size == 0:
        return new
    both = np.empty(labels.size + new.size, dtype=object)
    both[: labels.size] = labels.astype(object)
    both[labels.size :] = new.astype(object)
    return both


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


def _site_statistics(X, y, sample_weight, centered):
    """A site's :class:`~sklearn_fed.statistics.ClientStatistics` of its pending rows.

    In factor form (:func:`~sklearn_fed.statistics._kernels.few_rows_factor`)
    when the site has fewer rows than about half its features, so that its
    ``R`` (``n - 1`` rows when centered) has fewer values than the packed
    Gram; ``R^T R`` is the products of the rows, and ``R`` is fixed by them up
    to signs, so it tells the server nothing more. Otherwise in Gram form.
    """
    n, d = X.shape
    if 2 * (n - centered) >= d + 1:
        return ClientStatistics.from_data(X, y, sample_weight, centered=centered)
    weight_sum, x_mean, y_mean, factor = few_rows_factor(X, y, sample_weight, centered)
    return ClientStatistics(n, weight_sum, x_mean, y_mean, factor=factor,
                            centered=bool(centered), single_target=y.ndim == 1)


class IncrementalClient(Client):
    """A site of :class:`IncrementalFederatedRidge`: it answers every round from its new rows.

    Rows it does not send yet (fewer than the task's ``min_samples``, or a
    round it sits out) stay with the site, in this object, and are sent with
    a later round's rows: one client object per site, kept across rounds.
    """

    protocol = "ridge.incremental"
    accepts_no_rows = True

    def __init__(self, estimator, *, key=None, policy=None, site=None):
        super().__init__(estimator, key=key, policy=policy, site=site)
        self._pending = ()  # (X, y, sample_weight) blocks not sent yet

    @property
    def n_pending(self):
        """Rows this site holds, not sent yet."""
        return sum(block[0].shape[0] for block in self._pending)

    def compute(self, task, X, y, sample_weight, rows):
        centered = task_field(task, "centered", bool)
        min_samples = task_field(task, "min_samples", int)
        hold = task_field(task, "hold", bool)
        if min_samples < 1:
            raise InvalidClientMessage("server: min_samples must be at least 1.", "server")
        if rows is not None:
            X, y = X[rows], y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        n_pending = self.n_pending + X.shape[0]
        if hold or n_pending < min_samples:
            if X.shape[0]:  # keep a copy: the caller may reuse its arrays
                block = (X.copy(), np.array(y), None if sample_weight is None else
                         np.array(sample_weight))
                self._pending = self._pending + (block,)
            return {"held": int(n_pending)}, {}
        if self._pending:
            X, y, sample_weight = _stack(self._pending + ((X, y, sample_weight),))
        payload = _site_statistics(X, y, sample_weight, centered).to_payload()
        self._pending = ()
        return payload


def _stack(blocks):
    Xs, ys, weights = zip(*blocks)
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs)
    y = np.concatenate(ys)
    weight = None
    if any(w is not None for w in weights):
        weight = np.concatenate(
            [np.ones(x.shape[0]) if w is None else w for x, w in zip(Xs, weights)]
        )
    return X, y, weight


class IncrementalServer(Server):
    """Server of :class:`IncrementalFederatedRidge`: one round per ``receive``, forever.

    ``max_rounds`` bounds it (``fit`` runs one round, ``partial_fit`` one more
    with ``warm_start=True``). Each round it simulates the FedDelta election
    of the node that aggregates (recorded in ``leaders_``), collects every
    site's statistics, and merges them when at least ``min_clients`` sites
    contributed; otherwise it keeps them and merges them with the next round
    that reaches quorum (the model is the same as if the sites had waited).
    """

    protocol = "ridge.incremental"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        state = getattr(estimator, "_stream", None) if self.warm_start else None
        if state is None:  # a new stream: fit, or a server made without warm_start
            state = {
                "federation": self.federation,
                "model": None,
                "waiting": (),
                "site_pending": {},
                "nodes": np.empty(0, dtype=np.int64),
                "node_keys": {},
                "seed": estimator._draw_seed(),
                "centered": bool(estimator.fit_intercept),
                "n_targets": None,
                "leaders": [],
                "skipped": [],
                "history": [],
            }
        else:  # the next round of the same federation: partial_fit == a long-lived server
            self.federation = state["federation"]
            self.round = len(state["leaders"])
        self._state = state

    def plan(self, sites):
        estimator, state = self.estimator, self._state
        if state["centered"] != bool(estimator.fit_intercept):
            raise ValueError("fit_intercept changed since the first round; call fit to restart.")
        site_keys = [label_key(site) for site in sites]
        # The round's randomness derives from the seed and the round index: a
        # failed round draws nothing twice, and no generator is copied.
        leader, dropped, converged, new = _elect_round_leader(
            state["nodes"], state["node_keys"], sites, site_keys,
            fanout=estimator.gossip_fanout, n_rounds=estimator.gossip_rounds,
            dropout=estimator.leader_dropout, rng=_philox(state["seed"], self.round),
        )
        self._round = {
            "leader": leader,
            "dropped": dropped,
            "converged": converged,
            "new": new,
            "options": (estimator.update, estimator.refactor_every, estimator.tol),
        }
        fields = {"centered": state["centered"], "min_samples": int(estimator.min_samples)}
        sitting_out = {label_key(site) for site in dropped}
        return {
            site: (dict(fields, hold=key in sitting_out), {})
            for site, key in zip(sites, site_keys)
        }

    def read_reply(self, site, frame):
        if "held" in frame.fields and len(frame.fields) == 1:
            reply_keys(frame, site, fields=("held",))
            return reply_number(frame, "held", site, low=0, high=2**53 - 1, integer=True)
        n_targets = frame.schema.get("n_targets")
        state = self._state
        if state["n_targets"] is not None and n_targets != state["n_targets"]:
            reply_error(site, f"has {n_targets} targets but earlier rounds had "
                              f"{state['n_targets']}.")
        if not (type(n_targets) is int and n_targets > 0):
            raise InvalidClientMessage(f"client {site!r}: the reply names no targets.", site)
        stats = ClientStatistics.from_payload(
            frame.fields, frame.arrays, client=site, n_features=frame.schema["n_features"],
            n_targets=n_targets,
        )
        if stats.centered is not state["centered"]:
            reply_error(site, f"statistics are {'' if stats.centered else 'un'}centered, but "
                              f"the task asked for centered={state['centered']}.")
        return stats

    def apply(self, replies, ledger):
        estimator, state, plan = self.estimator, self._state, self._round
        sites = sorted_labels(replies)
        arrived = [(site, replies[site]) for site in sites
                   if isinstance(replies[site], ClientStatistics)]
        waiting = state["waiting"] + tuple(arrived)
        site_pending = dict(state["site_pending"])
        for site in sites:
            if isinstance(replies[site], int):
                site_pending[label_key(site)] = (site, replies[site])
            else:
                site_pending.pop(label_key(site), None)
        contributors = list({label_key(site): site for site, _ in waiting}.values())
        n_targets = arrived[0][1].n_targets if arrived else state["n_targets"]
        skipped = plan["leader"] is None or len(contributors) < estimator.min_clients
        up, down = ({}, {}) if self._ledger is None else (  # the rounds before this one
            self._ledger.uplink_bytes_per_client, self._ledger.downlink_bytes_per_client)
        record = {
            "leader": plan["leader"],
            "dropped_leaders": plan["dropped"],
            "contributors": [] if skipped else contributors,
            "skipped": skipped,
            "update": None,
            "rank": 0,
            "uplink_bytes": _round_bytes(ledger.uplink_bytes_per_client, up, replies),
            "downlink_bytes": _round_bytes(ledger.downlink_bytes_per_client, down,
                                           self.open_sites),
            "gossip_converged": plan["converged"],
            "merge_seconds": 0.0,
            "solve_seconds": 0.0,
        }
        model = state["model"]
        if not skipped:
            start = time.perf_counter()
            alpha = estimator._checked_alpha(n_targets)
            single = waiting[-1][1].single_target if model is None else model.single_target
            model = _Model.after_round(
                model, waiting, alpha=alpha, options=plan["options"],
                centered=state["centered"], single_target=single,
                dtype=self.round_dtype.type, record=record,
            )
            record["merge_seconds"] = time.perf_counter() - start
            waiting = ()
        ledger.n_parameters = estimator._n_parameters(self.schema.n_features, n_targets or 1)
        new_state = dict(
            state,
            model=model,
            waiting=waiting,
            site_pending=site_pending,
            n_targets=n_targets,
            leaders=state["leaders"] + [plan["leader"]],
            skipped=state["skipped"] + ([len(state["leaders"])] if skipped else []),
            history=state["history"] + [record],
        )
        if plan["new"]:
            new_state["node_keys"] = _add_positions(state, plan["new"])
            new_state["nodes"] = _append_labels(state["nodes"], plan["new"])
        # commit: nothing above touched the estimator
        self._state = new_state
        estimator._commit(new_state, self.schema, ledger)


def _round_bytes(totals, before, sites):
    """Bytes this round moved to or from ``sites``: the ledger's totals less those before."""
    return int(sum(totals.get(site, 0) - before.get(site, 0) for site in sites))


class IncrementalFederatedRidge(BaseFederatedRidge):
    """Federated ridge built round by round (FedDelta) with low-rank solver updates.

    A streaming protocol: every call to :meth:`partial_fit` is one round
    (``make_server`` runs as many as it is given). Each site with enough new
    rows sends its :class:`~sklearn_fed.statistics.ClientStatistics` (its
    means and either the ``R`` of a QR of its centered rows ``[x, y]``, when
    it has fewer rows than about half its features, or its packed Gram,
    centered moment and target sums of squares), which the server validates
    like any statistics message; if at least ``min_clients`` sites contributed, the
    server merges them into the exact statistics of all rows so far. A leader
    among the known nodes is elected each round by a simulated push-pull
    gossip of bids (FedDelta's rotating aggregator, recorded in ``leaders_``).
    After every round ``coef_`` and ``intercept_`` equal
    :class:`sklearn.linear_model.Ridge` with that round's ``alpha`` fitted on
    all rows aggregated so far; the ridge system is solved when the model is
    first used after the round, by a low-rank update when that is cheaper.

    Read more in the :ref:`User Guide <incremental_ridge>`.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Non-negative L2 penalty. May be changed between rounds with
        ``set_params``; the next round then solves with the new value exactly.
    fit_intercept : bool, default=True
        Whether to fit an (unpenalized) intercept.
    min_clients : int, default=1
        Quorum: in a round with fewer contributing sites the server keeps
        their statistics and merges them in the next round that reaches quorum.
    min_samples : int, default=1
        A site with fewer pending rows than this holds them for later.
    update : {"auto", "woodbury", "spectral", "refactor"}, default="auto"
        How the solver follows ``G``. ``"woodbury"``: keep a Cholesky factor
        of ``P`` at some earlier round plus the low-rank update since then
        (SMW on the stacked client factors, ``O(d^2 m)`` for an update of rank
        ``m``). ``"spectral"``: the paper's route, an explicit ``P^{-1}``
        updated through an eigendecomposition of the update matrix
        ``U = A + delta_lambda I``. ``"refactor"``: Cholesky of ``G + alpha I``
        at every solve. ``"auto"``: woodbury when the update's rank is small
        against ``d`` (see the User Guide), otherwise refactor.
    refactor_every : int or None, default=None
        Rebuild the woodbury/spectral state from the exact statistics every
        this many solves. ``None``: only when the residual check fails (or,
        for woodbury, when the accumulated rank reaches ``d / 2``).
    tol : float or None, default=1e-11
        After a low-rank update, the normwise backward error of the solution
        against the exact statistics is checked; above ``tol`` the state is
        rebuilt. ``None`` disables the check (to measure drift).
    gossip_fanout : int, default=3
        Peers each node contacts per gossip round in the leader election.
    gossip_rounds : int, default=3
        Gossip rounds per election.
    leader_dropout : float, default=0.0
        Probability that an elected leader drops out of the round; another
        is then elected among the remaining nodes, and the dropped node sits
        the round out, holding its rows for a later round.
    random_state : int, RandomState instance or None, default=None
        Seeds the elections and leader dropouts (each round's draws are
        derived from this seed and the round's index).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients after the last aggregated round.
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept; ``0.0`` when ``fit_intercept=False``.
    n_features_in_ : int
        Number of features.
    feature_names_in_ : ndarray of shape (n_features,)
        Feature names, when ``X`` has string column names.
    clients_ : ndarray of shape (n_clients,)
        Labels of all nodes seen so far (the candidates for leader).
    n_clients_ : int
        Number of nodes.
    n_rounds_ : int
        Rounds run, skipped ones included.
    leaders_ : list
        Elected leader of each round.
    skipped_rounds_ : list of int
        Indices (0-based) of the rounds skipped for lack of quorum.
    n_samples_seen_ : int
        Rows aggregated into the model.
    n_samples_pending_ : int
        Rows not in the model yet: held by sites (``min_samples``, leader
        dropout) or sent in rounds that missed the quorum.
    communication_ : CommunicationLedger
        Bytes of every task and reply, from the messages' wire sizes.
    round_history_ : list of dict
        One dict per round: ``leader``, ``dropped_leaders``, ``contributors``
        (sites whose statistics were merged), ``skipped``, ``rank`` (rows of
        the round's Gram update), ``uplink_bytes``, ``downlink_bytes``,
        ``gossip_converged`` (fraction of nodes that heard the winning bid),
        ``merge_seconds``, and, once the round's model has been used,
        ``update`` (the solver route) and ``solve_seconds``. A round whose
        model was never used (another round came first) keeps ``update=None``.

    See Also
    --------
    FederatedRidge : One-shot fit from the same statistics.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn_fed import IncrementalFederatedRidge
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(180, 4)), rng.normal(size=180)
    >>> model = IncrementalFederatedRidge(alpha=0.5, random_state=0)
    >>> for batch in np.split(np.arange(180), 3):
    ...     _ = model.partial_fit(X[batch], y[batch], clients=batch % 5)
    >>> bool(np.allclose(model.coef_, Ridge(alpha=0.5).fit(X, y).coef_, rtol=1e-10))
    True
    >>> model.n_rounds_, len(model.leaders_), model.n_samples_seen_
    (3, 3, 180)

    The same rounds deployed: three sites, each with its own client object
    kept across rounds (20 new rows a round each: a deployed site's
    disclosure rules refuse a model of more than 0.33 parameters per row, see
    :doc:`/disclosure`), and a server that runs one round per ``receive``:

    >>> estimator = IncrementalFederatedRidge(alpha=0.5, random_state=0)
    >>> server = estimator.make_server()
    >>> sites = {s: estimator.make_client(site=s) for s in ("a", "b", "c")}
    >>> for batch in np.split(np.arange(180), 3):       # new rows arrive at every site
    ...     tasks = server.next_tasks(list(sites))     # {site: bytes}
    ...     replies = {s: sites[s].respond(tasks[s], X[batch][i::3], y[batch][i::3])
    ...                for i, s in enumerate(tasks)}
    ...     server.receive(replies)
    >>> bool(np.allclose(estimator.coef_, model.coef_, rtol=1e-10))
    True
    """

    _parameter_constraints: dict = {
        **BaseFederatedRidge._parameter_constraints,
        "min_clients": [Interval(Integral, 1, None, closed="left")],
        "min_samples": [Interval(Integral, 1, None, closed="left")],
        "update": [StrOptions({"auto", "woodbury", "spectral", "refactor"})],
        "refactor_every": [Interval(Integral, 1, None, closed="left"), None],
        "tol": [Interval(Real, 0, None, closed="left"), None],
        "gossip_fanout": [Interval(Integral, 1, None, closed="left")],
        "gossip_rounds": [Interval(Integral, 0, None, closed="left")],
        "leader_dropout": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    _server_role = IncrementalServer
    _client_role = IncrementalClient
    _protocol_rounds_in_fit = 1  # a streaming protocol: fit is one round

    @property
    def _without_clients(self):  # what fit does without clients (MissingClientsWarning)
        if self.min_clients > 1:
            return f"one node can never reach the quorum min_clients={self.min_clients}"
        if self.min_samples > 1 or self.leader_dropout > 0:
            return "all rows sit on one node, which holds or sends them all at once"
        return None  # every round aggregates every row: the same model for any split

    _dask_rows = "stream"

    def __init__(
        self,
        alpha=1.0,
        *,
        fit_intercept=True,
        min_clients=1,
        min_samples=1,
        update="auto",
        refactor_every=None,
        tol=1e-11,
        gossip_fanout=3,
        gossip_rounds=3,
        leader_dropout=0.0,
        random_state=None,
    ):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.min_clients = min_clients
        self.min_samples = min_samples
        self.update = update
        self.refactor_every = refactor_every
        self.tol = tol
        self.gossip_fanout = gossip_fanout
        self.gossip_rounds = gossip_rounds
        self.leader_dropout = leader_dropout
        self.random_state = random_state

    @fit_method
    def fit(self, X, y, sample_weight=None, clients=None):
        """Forget everything, then run one round on the given rows."""
        return self._fit(X, y, sample_weight, clients)

    @fit_method(partial="As in :meth:`fit`; ``clients`` may name new or known clients, and "
                        "known clients may be absent (those holding rows still take part).")
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Run one aggregation round with these new rows.

        A call that raises leaves the estimator unchanged.
        """
        return self._fit(X, y, sample_weight, clients, partial=True)

    # ------------------------------------------------------------- the fit template
    def _fitted_state(self):
        """The stream ``partial_fit`` continues, or None (its rounds may all have been
        skipped or held so far: there is a stream, but no model yet)."""
        return self.__dict__.get("_stream")

    def _check_more_rows(self, X, y):
        stream = self._stream
        if stream["n_targets"] is not None:  # (known once statistics arrived)
            self._check_seen(y, (stream["n_targets"], stream["centered"]))

    def _validate_X_y(self, X, y, *, reset):
        # A round is small: scikit-learn's validation would cost about a third
        # of it. A batch that validation returns unchanged (finite float
        # ndarrays of the fitted width, without feature names) is checked
        # here; any other batch takes the full path and its usual errors.
        if not reset and _returned_unchanged(self, X, y):
            return X, y
        return super()._validate_X_y(X, y, reset=reset)

    def _run_sites(self, X, y, sample_weight, labels, rows, *, warm_start=False, clients=None):
        """One round of the protocol in process (``fit`` starts a new stream).

        The simulated sites keep their roles between calls, as sites keep the
        rows they have not sent yet: those holding rows are kept in ``_sites``.
        """
        # A streaming round (at most d new rows) is small BLAS work too: the
        # sites' QRs and the merge's products and folds run on one thread.
        n_rows, n_features = getattr(X, "shape", (1, 0))
        with _one_blas_thread(n_features) if n_rows <= n_features else contextlib.nullcontext():
            server, sites = super()._run_sites(X, y, sample_weight, labels, rows,
                                               warm_start=warm_start, max_rounds=1)
        self._sites = {label_key(label): role for label, role in sites.items() if role._pending}
        return server, sites

    def _simulated_client(self, *, warm_start):
        return {}  # the round's roles by site label, filled by _simulate

    def _simulate(self, server, clients, X, y, sample_weight, labels, rows, names):
        # Every site of the round answers with a role of its own; a site that held
        # rows at the end of an earlier call answers with a copy of its role (the
        # kept one stays as it was if the round fails) and takes part even without
        # new rows, as a deployed site keeps its rows and its client object.
        held = dict(self.__dict__.get("_sites", {})) if server.warm_start else {}
        for label in labels:
            label = label.item() if isinstance(label, np.generic) else label
            role = held.pop(label_key(label), None) if held else None
            clients[label] = self.make_client(site=label) if role is None else copy.copy(role)
        for role in held.values():  # no new rows: it takes part with the rows it holds
            clients[role.site] = copy.copy(role)
        if held:
            rows = list(rows) + [slice(0, 0)] * len(held)
        # (run_simulation itself: BaseFederatedRidge's wrapper is for the families
        # that leave the finite check of X to the statistics, and this one does not)
        run_simulation(server, clients, X, y, sample_weight, list(clients), rows, names)

    def _draw_seed(self):
        """The seed of a new stream: from ``random_state``, or from OS entropy."""
        if self.random_state is None:
            return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
        rng = self.random_state
        if isinstance(rng, Integral):
            return int(rng)
        return int(check_random_state(rng).randint(np.iinfo(np.int32).max))

    def _commit(self, state, schema, ledger):
        """Set the fitted attributes from the server's state after a round."""
        self._stream = state
        self.n_rounds_ = len(state["leaders"])
        self.leaders_ = state["leaders"]
        self.skipped_rounds_ = state["skipped"]
        self.round_history_ = state["history"]
        model = state["model"]
        self.n_samples_seen_ = 0 if model is None else int(model.n_samples)
        self.n_samples_pending_ = int(
            sum(n for _, n in state["site_pending"].values())
            + sum(stats.n_samples for _, stats in state["waiting"])
        )
        set_federation_attributes(self, schema, ledger, state["nodes"])

    # The model of the latest round, solved on first use.
    @property
    def coef_(self):
        return self._fitted_model().coef

    @property
    def intercept_(self):
        return self._fitted_model().intercept

    def _fitted_model(self):
        model = (self._fitted_state() or {}).get("model")
        if model is None:
            raise AttributeError("IncrementalFederatedRidge has no model yet; coef_ is set "
                                 "by the first round that reaches quorum.")
        return model

    def __sklearn_is_fitted__(self):
        # Rounds may run (and be skipped for lack of quorum) before any model exists.
        return (self._fitted_state() or {}).get("model") is not None


def _returned_unchanged(estimator, X, y):
    """Whether ``validate_data(estimator, X, y, reset=False)`` returns them as is."""
    return (
        type(X) is np.ndarray and type(y) is np.ndarray
        and X.dtype.type in (np.float64, np.float32) and y.dtype.kind == "f"
        and X.ndim == 2 and (y.ndim == 1 or (y.ndim == 2 and y.shape[1] >= 1))
        and 1 <= X.shape[0] == y.shape[0]
        and X.shape[1] == getattr(estimator, "n_features_in_", None)
        and not hasattr(estimator, "feature_names_in_")  # validation would warn
        and math.isfinite(X.sum()) and math.isfinite(y.sum())  # else: its NaN errors
    )

