"""IncrementalFederatedRidge: FedDelta rounds as a streaming protocol, solved by low-rank updates.

The estimator is here; its parts, by concept: the roles and their messages
(:mod:`~sklearn_fed.linear_model._incremental_roles`), the exact statistics
and the lazy solve (:mod:`~sklearn_fed.linear_model._incremental_model`), the
low-rank updates of the solver (:mod:`~sklearn_fed.linear_model._incremental_updates`)
and the nodes and leader election (:mod:`~sklearn_fed.linear_model._incremental_election`).
"""

import contextlib
import math
from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state

from .._compat import Interval, StrOptions
from ..base import set_federation_attributes
from ..protocol import run_simulation
from ._base import BaseFederatedRidge, fit_method
from ._incremental_model import _one_blas_thread
from ._incremental_roles import IncrementalClient, IncrementalServer, _SimulatedSites

__all__ = ["IncrementalFederatedRidge"]


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
        self._sites = sites.holding()
        return server, sites

    def _simulated_client(self, *, warm_start):
        # One role per site, and the roles of the sites holding rows carry over.
        return _SimulatedSites(self, self.__dict__.get("_sites", {}) if warm_start else {})

    def _simulate(self, server, sites, X, y, sample_weight, labels, rows, names):
        # (run_simulation itself: BaseFederatedRidge's wrapper is for the families
        # that leave the finite check of X to the statistics, and this one does not)
        labels, rows, clients = sites.roles(labels, rows)
        run_simulation(server, clients, X, y, sample_weight, labels, rows, names)

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
            + sum(c.n_samples for c in state["waiting"])
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
        stream = self.__dict__.get("_stream")
        model = None if stream is None else stream["model"]
        if model is None:
            raise AttributeError("IncrementalFederatedRidge has no model yet; coef_ is set "
                                 "by the first round that reaches quorum.")
        return model

    def __sklearn_is_fitted__(self):
        # Rounds may run (and be skipped for lack of quorum) before any model exists.
        stream = self.__dict__.get("_stream")
        return stream is not None and stream["model"] is not None


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

