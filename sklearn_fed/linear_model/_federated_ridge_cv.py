"""FederatedRidgeCV: RidgeCV's interface, every mode (see the class docstring) a run of the
protocol of ``_ridge_cv_client`` (the site) and ``_ridge_cv_server``."""

import numbers
import warnings
from numbers import Real

import numpy as np
from sklearn.base import is_classifier
from sklearn.metrics import check_scoring, get_scorer_names
from sklearn.model_selection import check_cv
from sklearn.utils import check_scalar

from .._compat import Interval, StrOptions
from ..protocol import CommunicationLedger, RowsElsewhere, label_key
from ._base import BaseFederatedRidge, fit_method
from ._ridge_cv_algebra import _MEAN, POOLED, _scorer_kind
from ._ridge_cv_client import CVClient
from ._ridge_cv_server import FederatedRidgeCVServer

__all__ = ["FederatedRidgeCV"]


class FederatedRidgeCV(BaseFederatedRidge):
    """Federated ridge with alpha chosen by cross-validation; RidgeCV's interface.

    Every mode is a run of the protocol: sites compute everything from their
    own rows (statistics, held-out sums, predictions), the server only
    merges and chooses. The choice rule is :class:`sklearn.linear_model.RidgeCV`'s
    for the same ``cv`` and ``scoring``: with ``cv=None`` the scorer (by
    default the negative mean squared error) of all leave-one-out
    predictions; otherwise the mean over folds of the per-fold score (by
    default R^2), the first best alpha winning ties.

    - ``cv=None``: leave-one-row-out, with any clients: two rounds (the
      statistics, then every site evaluates its rows' leave-one-out residuals
      in closed form given the pooled spectrum, d^2 numbers per task).
    - ``cv="clients"``: leave-one-client-out from the statistics round alone
      (Proposition 5 of the one-shot paper): client k's held-out score comes
      from its own statistics against the merge of the others'.
    - ``cv`` an int, splitter or iterable (``clients`` is passed to it as
      ``groups``): ``fit`` runs the splitter on the pooled rows and hands
      each site its own rows' fold membership, as data the site holds next
      to its rows; the task tells the sites only the number of folds, and
      each returns the statistics of its rows in each fold's training and
      held-out sets (weighted, as GridSearchCV weights both the fits and
      the scores). The server never learns which pooled rows a site holds.

    Scorers that are sums over rows (``neg_mean_squared_error``,
    ``neg_root_mean_squared_error``, ``r2``, ``explained_variance`` and
    ``make_scorer`` of their functions) are computed from sums the sites
    send. Any other scorer (a callable, ...) takes a further round in which
    sites send every held-out row's prediction, target and weight: the
    server then sees row-level data, so prefer a decomposable scorer. It
    scores those rows site by site (in ``clients_`` order), not in ``X``'s
    order, which it does not know: the same rows, so the same score up to
    the order of its sums' round-off (exactly the same for an
    order-free one such as a median).

    Deployed (``make_server``, ``make_client``), a splitter ``cv`` needs
    two things a simulation takes from the pooled rows: every site's fold
    membership, which the site holds, ``make_client(folds=...)`` (per row,
    the fold that holds it out, or ``-1``; or codes per fold, see
    :meth:`make_client`), and the number of folds, which the server takes
    from ``cv`` (an int, ``KFold(5)``, ``GroupKFold(3)``, a list of splits)
    or from ``server.n_folds``. A server may instead assign the folds:
    ``server.folds = {site: codes}`` goes out in each site's tasks.

    Read more in the :ref:`User Guide <federated_ridge_cv>`.

    Parameters
    ----------
    alphas : array-like of shape (n_alphas,), default=(0.1, 1.0, 10.0)
        Candidate penalties; positive with ``cv=None`` (as RidgeCV), else
        non-negative.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    scoring : str, callable or None, default=None
        As in RidgeCV. ``None``: the negative mean of the (weighted) squared
        leave-one-out errors with ``cv=None``, R^2 per fold otherwise.
    cv : int, cross-validation generator, iterable, "clients" or None, default=None
        How rows are held out (see above).
    store_cv_results : bool, default=False
        Store ``cv_results_`` (only with ``cv=None`` or ``"clients"``, as
        RidgeCV stores them only for ``cv=None``). With ``cv=None`` sites
        then send one value per row and alpha.
    alpha_per_target : bool, default=False
        Choose one alpha per target (only with ``cv=None`` or ``"clients"``).
    solver : {"auto", "cholesky", "svd"}, default="auto"
        The form of the statistics, as in :class:`FederatedRidge`: ``"auto"``
        repeats the statistics round as factors when the pooled Gram is too
        ill-conditioned for the smallest alpha.
    criterion : {"mean_fold_score", "pooled_squared_error"}, default="mean_fold_score"
        ``"mean_fold_score"``: RidgeCV's rule, above. ``"pooled_squared_error"``:
        the one-shot paper's criterion, the weighted squared error of all
        held-out rows over their weight, whatever the fold sizes (``scoring``
        must be None); with ``cv="clients"`` this is Proposition 5. The two
        differ when clients differ in size or in how well they are predicted
        (see the User Guide for an example).

    Attributes
    ----------
    alpha_ : float or ndarray of shape (n_targets,)
        Selected penalty (per target with ``alpha_per_target``).
    best_score_ : float or ndarray of shape (n_targets,)
        Score of ``alpha_`` under the rule above.
    cv_results_ : ndarray
        With ``store_cv_results=True``. ``cv=None``: as RidgeCV, one value per
        row, ``(n_samples, n_alphas)`` for one-dimensional ``y`` and
        ``(n_samples, n_targets, n_alphas)`` otherwise: the weighted squared
        leave-one-out error (``scoring=None``) or the leave-one-out prediction;
        in ``X``'s row order after ``fit``, site by site in ``clients_`` order
        after a deployed run (each site's rows in its own order).
        ``cv="clients"``: one value per client (in ``clients_`` order): its
        score, ``(n_clients, n_alphas)`` (``(n_clients, n_targets, n_alphas)``
        with ``alpha_per_target``), or with ``criterion="pooled_squared_error"``
        its held-out weighted squared error (shaped like the ``cv=None`` case).
    solver_ : {"cholesky", "eigen", "svd"}
        How the final model was solved (see :class:`FederatedRidge`).
    coef_, intercept_, n_features_in_, feature_names_in_, clients_, n_clients_, communication_
        As in :class:`FederatedRidge`, for the final fit with ``alpha_``.

    See Also
    --------
    FederatedRidge : The same model with a fixed alpha.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import RidgeCV
    >>> from sklearn_fed import FederatedRidgeCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(90, 4))
    >>> y = X @ [1.0, -2.0, 0.0, 0.5] + 0.5 * rng.normal(size=90)
    >>> clients = np.arange(90) % 3
    >>> loo = FederatedRidgeCV(alphas=[0.1, 10.0, 100.0]).fit(X, y, clients=clients)
    >>> ridge_cv = RidgeCV(alphas=[0.1, 10.0, 100.0]).fit(X, y)
    >>> loo.alpha_ == ridge_cv.alpha_, bool(np.isclose(loo.best_score_, ridge_cv.best_score_))
    (True, True)
    >>> loo.communication_.rounds
    2
    >>> loco = FederatedRidgeCV(alphas=[0.1, 10.0, 100.0], cv="clients").fit(X, y, clients=clients)
    >>> loco.alpha_, loco.communication_.rounds
    (0.1, 1)
    """

    _parameter_constraints: dict = {
        "alphas": ["array-like", Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "scoring": [StrOptions(set(get_scorer_names())), callable, None],
        "cv": ["cv_object", StrOptions({"clients"})],
        "store_cv_results": ["boolean"],
        "alpha_per_target": ["boolean"],
        "solver": [StrOptions({"auto", "cholesky", "svd"})],
        "criterion": [StrOptions({_MEAN, POOLED})],
    }

    _server_role = FederatedRidgeCVServer
    _client_role = CVClient

    @property
    def _exact_federation(self):
        # Leave-one-row-out and folds of rows do not depend on how rows are
        # split among clients; leave-one-client-out does, by definition.
        return self.cv != "clients"

    # Without clients, cv="clients" refuses to fit (it needs two): no warning needed.
    _without_clients = None

    def __init__(
        self,
        alphas=(0.1, 1.0, 10.0),
        *,
        fit_intercept=True,
        scoring=None,
        cv=None,
        store_cv_results=False,
        alpha_per_target=False,
        solver="auto",
        criterion=_MEAN,
    ):
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.scoring = scoring
        self.cv = cv
        self.store_cv_results = store_cv_results
        self.alpha_per_target = alpha_per_target
        self.solver = solver
        self.criterion = criterion

    def _checked_alphas(self):
        """``alphas`` as a float64 array, checked as RidgeCV checks them (same messages)."""
        lower = "neither" if self.cv is None else "left"
        alphas = self.alphas
        sequence = isinstance(alphas, (np.ndarray, list, tuple)) and np.ndim(alphas) > 0
        values = list(alphas) if sequence else [alphas]
        names = [f"alphas[{i}]" for i in range(len(values))] if len(values) != 1 else ["alphas"]
        for value, name in zip(values, names):
            check_scalar(value, name, target_type=numbers.Real, min_val=0.0,
                         include_boundaries=lower)
        return np.asarray(values, dtype=np.float64).reshape(-1)

    def _check_before_rows(self, *, partial):
        splitter = self.cv is not None and not isinstance(self.cv, str)
        if splitter and self.store_cv_results:
            raise ValueError("cv!=None and store_cv_results=True are incompatible")
        if splitter and self.alpha_per_target:
            raise ValueError("cv!=None and alpha_per_target=True are incompatible")
        if self.criterion == POOLED and self.scoring is not None:
            raise ValueError(
                "criterion='pooled_squared_error' is the squared error itself; scoring must "
                f"be None, got {self.scoring!r}.")
        self._checked_alphas()

    def _scorer(self):
        return check_scoring(self, scoring=self.scoring, allow_none=True) if self.scoring else None

    @fit_method(clients="Client label of each row (``None``: one client). Passed to a ``cv`` "
                        "splitter as ``groups``.")
    def fit(self, X, y, sample_weight=None, clients=None):
        """Choose alpha by cross-validation, then fit on all rows."""
        return self._fit(X, y, sample_weight, clients)

    _dask_rows = "partitions"

    def _check_collection(self):
        if self.cv is not None and not isinstance(self.cv, str):
            raise ValueError(
                "FederatedRidgeCV on a Dask collection holds out rows (cv=None) or clients "
                f"(cv='clients'), not folds of a splitter (got cv={self.cv!r}): give each "
                "fold's rows their own clients label and use cv='clients' (e.g. "
                "clients=sklearn_fed.dask.partition_labels(X) holds out one partition at a "
                "time)."
            )

    def make_client(self, *, key=None, policy=None, site=None, folds=None):
        """The client role a site runs: answers tasks from its own rows (and folds).

        Parameters
        ----------
        key, policy, site
            As in :meth:`FederatedMixin.make_client
            <sklearn_fed.protocol.FederatedMixin.make_client>`.
        folds : array-like of shape (n_rows,) or (n_rows, n_folds), default=None
            With ``cv`` a splitter: the fold membership of the rows the site
            answers from, in their order. Per row, the fold in which it is
            held out (``-1``: none, as
            :class:`~sklearn.model_selection.PredefinedSplit`'s
            ``test_fold``), or per row and fold a code: 0 in neither set, 1
            training, 2 held out.

        Returns
        -------
        client : CVClient
        """
        return self._client_role(self, key=key, policy=policy, site=site, folds=folds)

    def _run_sites(self, X, y, sample_weight, labels, rows, *, warm_start=False, clients=None):
        """``fit``'s run: only it knows the pooled rows, so it draws a splitter's folds
        (the sites read their rows' entries of the client role's fold column, the
        server gets their number) and puts the per-row ``cv_results_`` in ``X``'s order."""
        names = self._server_feature_names(X)
        server = self.make_server(feature_names=names)
        folds = None
        if self.cv is not None and not isinstance(self.cv, str):
            folds = self._fold_membership(X, y, clients, rows)
            server.n_folds = folds.shape[1]
        client = self.make_client(folds=folds)
        self._simulate(server, client, X, y, sample_weight, labels, rows, names)
        if self.cv is None and "cv_results_" in self.__dict__:
            self.cv_results_ = self._in_row_order(self.cv_results_, X, labels, rows)
        return server, client

    def _fold_membership(self, X, y, clients, rows):
        """Codes (n_samples, n_splits) of the splitter's folds of the pooled rows, as in
        scikit-learn: stratified for a classifier, the clients the splitter's groups."""
        groups = None
        if clients is not None:
            groups = np.empty(X.shape[0], dtype=np.intp)
            for index, client_rows in enumerate(rows):
                groups[client_rows] = index
        with warnings.catch_warnings():  # clients always go in as groups
            warnings.filterwarnings("ignore", "The groups parameter is ignored")
            splitter = check_cv(self.cv, y, classifier=is_classifier(self))
            splits = list(splitter.split(X, y, groups=groups))
        codes = np.zeros((X.shape[0], len(splits)), dtype=np.int8)
        for j, (train, test) in enumerate(splits):
            codes[train, j] = 1
            codes[test, j] = 2
        return codes

    def _in_row_order(self, results, X, labels, rows):
        """Per-row ``results``, stacked site by site in ``clients_`` order, in ``X``'s order."""
        if isinstance(X, RowsElsewhere):  # Dask partitions
            positions = X.row_positions()
            if positions is None:  # one site: its rows are X's rows, in order
                return results
        else:
            everything = np.arange(X.shape[0])
            positions = {label_key(label): everything[r] for label, r in zip(labels, rows)}
        order = np.concatenate([positions[label_key(site)] for site in self.clients_])
        in_order = np.empty_like(results)
        in_order[np.argsort(np.argsort(order))] = results
        return in_order

    @fit_method(messages=("list or dict", (
        "At least two clients' :class:`~sklearn_fed.statistics.ClientStatistics` or their "
        "bytes.")))
    def fit_statistics(self, messages):
        """Leave-one-client-out CV and the fit from client messages alone (no rows).

        Only ``cv="clients"`` with a decomposable scorer is computable from
        the messages; each message is one client's statistics (see
        :meth:`FederatedRidge.fit_statistics`).
        """
        if self.cv != "clients":
            raise ValueError(
                "fit_statistics holds out one client at a time from the messages; set "
                f"cv='clients' (got cv={self.cv!r}).")
        self._check_before_rows(partial=False)
        if _scorer_kind(self._scorer()) is None:
            raise ValueError(
                f"scoring={self.scoring!r} needs every held-out row's prediction; "
                "fit_statistics has only the messages.")
        parsed = self._read_messages(messages)
        ledger = CommunicationLedger()
        ledger.record_round({}, {label: stats.nbytes for label, stats in parsed})
        server = self.make_server(max_rounds=1)
        server.apply({label: {"all": stats} for label, stats in parsed}, ledger)
        return self
