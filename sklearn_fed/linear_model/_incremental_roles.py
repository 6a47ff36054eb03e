"""The roles of IncrementalFederatedRidge: a site that keeps its rows, a server that never ends.

Every round, each site with enough new rows sends its
:class:`~sklearn_fed.statistics.ClientStatistics` (:func:`_site_statistics`),
which the server reads and validates with
:meth:`ClientStatistics.from_payload <sklearn_fed.statistics.ClientStatistics.from_payload>`
and merges into the model of :mod:`~sklearn_fed.linear_model._incremental_model`;
a site that holds its rows sends their count.
"""

import copy
import time

import numpy as np
import scipy.sparse as sp

from ..protocol import Client, InvalidClientMessage, Server, label_key, sorted_labels
from ..statistics import ClientStatistics
from ..statistics._kernels import few_rows_factor
from ._base import task_field
from ._incremental_election import (
    _add_positions,
    _append_labels,
    _elect_round_leader,
    _KnownPositions,
    _philox,
)
from ._incremental_model import _Contribution, _Model

__all__ = ["IncrementalClient", "IncrementalServer"]


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


class _SimulatedSites:
    """The roles of the simulated sites of one ``fit``/``partial_fit`` call.

    Every site of the round answers with a role of its own; a site that held
    rows at the end of an earlier call answers with a copy of its role (the
    kept one stays as it was if the round fails) and takes part even without
    new rows, as a deployed site keeps its rows and its client object.

    Parameters
    ----------
    estimator : IncrementalFederatedRidge
    held : dict
        ``{label_key: IncrementalClient}`` of the sites that hold rows.
    """

    def __init__(self, estimator, held):
        self.estimator = estimator
        self.held = held
        self.clients = {}

    def roles(self, labels, rows):
        """``(labels, rows, {label: role})`` of the round: the held sites added."""
        labels = [label.item() if isinstance(label, np.generic) else label for label in labels]
        clients = {label: self.estimator.make_client(site=label) for label in labels}
        if self.held:
            rows = list(rows)
            position = {label_key(label): label for label in labels}
            for key, role in self.held.items():
                label = position.get(key)
                if label is None:  # no new rows: it takes part with the rows it holds
                    label = role.site
                    labels.append(label)
                    rows.append(slice(0, 0))
                clients[label] = copy.copy(role)
        self.clients = clients
        return labels, rows, clients

    def holding(self):
        """``{label_key: role}`` of the sites that hold rows after the round."""
        return {label_key(label): role for label, role in self.clients.items() if role._pending}


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
        if state is None:
            state = _fresh_state(estimator, self.federation)
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
            state["nodes"], _KnownPositions(state["node_keys"], len(state["nodes"])), sites,
            site_keys,
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
            held = frame.fields["held"]
            if frame.arrays or not (type(held) is int and 0 <= held < 2**53):
                raise InvalidClientMessage(f"client {site!r}: malformed held-rows reply.", site)
            return held
        n_targets = frame.schema.get("n_targets")
        state = self._state
        if state["n_targets"] is not None and n_targets != state["n_targets"]:
            raise InvalidClientMessage(
                f"client {site!r}: has {n_targets} targets but earlier rounds had "
                f"{state['n_targets']}.",
                site,
            )
        if not (type(n_targets) is int and n_targets > 0):
            raise InvalidClientMessage(f"client {site!r}: the reply names no targets.", site)
        stats = ClientStatistics.from_payload(
            frame.fields, frame.arrays, client=site, n_features=frame.schema["n_features"],
            n_targets=n_targets,
        )
        if stats.centered is not state["centered"]:
            raise InvalidClientMessage(
                f"client {site!r}: statistics are {'' if stats.centered else 'un'}centered, but "
                f"the task asked for centered={state['centered']}.", site)
        return _Contribution(site, stats)

    def apply(self, replies, ledger):
        estimator, state, plan = self.estimator, self._state, self._round
        sites = sorted_labels(replies)
        arrived = [replies[site] for site in sites if isinstance(replies[site], _Contribution)]
        waiting = state["waiting"] + tuple(arrived)
        site_pending = dict(state["site_pending"])
        for site in sites:
            if isinstance(replies[site], int):
                site_pending[label_key(site)] = (site, replies[site])
            else:
                site_pending.pop(label_key(site), None)
        contributors = list({label_key(c.site): c.site for c in waiting}.values())
        n_targets = state["n_targets"]
        if arrived:
            n_targets = arrived[0].n_targets
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
            single = waiting[-1].single_target if model is None else model.single_target
            model = _Model.after_round(
                model, waiting, alpha=alpha, options=plan["options"],
                centered=state["centered"], single_target=single,
                dtype=self.round_dtype.type, record=record,
            )
            record["merge_seconds"] = time.perf_counter() - start
            waiting = ()
        d = self.schema.n_features
        ledger.n_parameters = estimator._n_parameters(d, n_targets or 1)
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


def _fresh_state(estimator, federation):
    """The state of a new stream (``fit``, or a server made without ``warm_start``)."""
    return {
        "federation": federation,
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

