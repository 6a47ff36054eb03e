"""FederatedRidgeCV: RidgeCV's choice rule in every mode, computed by the sites."""

import pickle

import numpy as np
from numpy.testing import assert_array_equal
import pytest
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.metrics import make_scorer, mean_absolute_error, mean_squared_error
from sklearn.model_selection import GroupKFold, KFold, LeaveOneGroupOut, ShuffleSplit

from sklearn_fed import (
    ClientStatistics,
    FederatedRidge,
    FederatedRidgeClassifierCV,
    FederatedRidgeCV,
    InvalidClientMessage,
)
from sklearn_fed.linear_model._ridge_cv_client import CVClient
from sklearn_fed.protocol import SitePolicy, simulate_through_bytes
from sklearn_fed.utils.estimator_checks import run_protocol_by_hand

ALPHAS = (0.01, 0.3, 3.0, 30.0)


def _data(n=150, d=5, t=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + rng.uniform(-3, 3, size=d)
    coef = rng.normal(size=(d,) if t is None else (d, t))
    y = X @ coef + 2.0 * rng.normal(size=(n,) if t is None else (n, t))
    return X, y, rng


def _held_out_sse(X, y, w, splits, alphas, fit_intercept):
    """Weighted held-out SSE per (fold, target, alpha) by refitting sklearn's Ridge."""
    y2 = y.reshape(len(y), -1)
    sse = np.zeros((len(splits), y2.shape[1], len(alphas)))
    for g, (train, test) in enumerate(splits):
        for a, alpha in enumerate(alphas):
            ridge = Ridge(alpha=alpha, fit_intercept=fit_intercept)
            ridge.fit(X[train], y[train], None if w is None else w[train])
            residual = (y2[test] - ridge.predict(X[test]).reshape(len(test), -1)) ** 2
            sse[g, :, a] = (np.ones(len(test)) if w is None else w[test]) @ residual
    return sse


# ------------------------------------------------------------ cv=None (LOO)
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("t", [None, 1, 3])
@pytest.mark.parametrize("n_clients", [1, 7])
def test_leave_one_out_equals_ridgecv(fit_intercept, weighted, t, n_clients):
    X, y, rng = _data(n=60, t=t)
    if t == 1:
        y = y.reshape(-1, 1)
    w = rng.uniform(0.5, 2, size=len(X)) if weighted else None
    clients = np.arange(len(X)) % n_clients
    params = dict(alphas=ALPHAS, fit_intercept=fit_intercept, store_cv_results=True)
    ours = FederatedRidgeCV(**params).fit(X, y, w, clients=clients)
    theirs = RidgeCV(**params).fit(X, y, sample_weight=w)
    assert ours.alpha_ == theirs.alpha_ and type(ours.alpha_) is float
    assert ours.best_score_ == pytest.approx(theirs.best_score_, rel=1e-10)
    assert ours.cv_results_.shape == theirs.cv_results_.shape
    np.testing.assert_allclose(ours.cv_results_, theirs.cv_results_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=1e-10)
    np.testing.assert_allclose(ours.intercept_, theirs.intercept_, rtol=1e-10, atol=1e-12)
    assert np.shape(ours.coef_) == np.shape(theirs.coef_)
    assert np.shape(ours.intercept_) == np.shape(theirs.intercept_)
    assert ours.communication_.rounds == 2


def test_no_intercept_leave_one_out_regression():
    """Issue 13: LOO with fit_intercept=False used to center: 55% off, another alpha (n=2, d=1)."""
    X, y = np.array([[1.0], [3.0]]), np.array([1.0, 2.0])
    alphas = (0.1, 1.0, 10.0)
    ours = FederatedRidgeCV(alphas=alphas, fit_intercept=False, store_cv_results=True).fit(X, y)
    theirs = RidgeCV(alphas=alphas, fit_intercept=False, store_cv_results=True).fit(X, y)
    np.testing.assert_allclose(ours.cv_results_, theirs.cv_results_, rtol=1e-12)
    assert ours.alpha_ == theirs.alpha_
    X, y, _ = _data(n=40, t=2)
    ours = FederatedRidgeCV(alphas=ALPHAS, fit_intercept=False, store_cv_results=True).fit(
        X, y, clients=np.arange(40) % 5)
    theirs = RidgeCV(alphas=ALPHAS, fit_intercept=False, store_cv_results=True).fit(X, y)
    np.testing.assert_allclose(ours.cv_results_, theirs.cv_results_, rtol=1e-10)


def _custom_error(y_true, y_pred, **kwargs):
    return np.mean(np.abs(y_true - y_pred) ** 3)


@pytest.mark.parametrize(
    "scoring",
    ["r2", "explained_variance", "neg_mean_squared_error", "neg_root_mean_squared_error",
     make_scorer(mean_squared_error, greater_is_better=False),
     make_scorer(_custom_error, greater_is_better=False), "neg_mean_absolute_error"],
)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("alpha_per_target", [False, True])
def test_leave_one_out_scoring_equals_ridgecv(scoring, weighted, alpha_per_target):
    X, y, rng = _data(n=50, t=2)
    w = rng.uniform(0.5, 2, size=len(X)) if weighted else None
    params = dict(alphas=ALPHAS, scoring=scoring, store_cv_results=True,
                  alpha_per_target=alpha_per_target)
    ours = FederatedRidgeCV(**params).fit(X, y, w, clients=np.arange(50) % 4)
    theirs = RidgeCV(**params).fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(ours.alpha_, theirs.alpha_)
    np.testing.assert_allclose(ours.best_score_, theirs.best_score_, rtol=1e-9)
    np.testing.assert_allclose(ours.cv_results_, theirs.cv_results_, rtol=1e-9)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=1e-10)


def test_leave_one_out_replies_carry_no_rows_by_default():
    """Decomposable scoring, no stored results: sites send sums, never a value per row."""
    X, y, _ = _data(n=30)
    clients = np.arange(30) % 3
    seen = []

    def record(site, reply):
        seen.append(reply)
        return reply

    run_protocol_by_hand(FederatedRidgeCV(scoring="r2"), X, y, clients, tamper=record)
    assert len(seen) == 6  # two rounds of three sites
    for reply in seen:
        assert len(reply) < 8 * 30 * 3  # far less than one float per row and alpha
    stored, _ = run_protocol_by_hand(FederatedRidgeCV(store_cv_results=True), X, y, clients)
    assert stored.estimator.cv_results_.shape == (30, 3)


def test_tampered_leave_one_out_reply_names_the_site():
    X, y, _ = _data(n=30)
    clients = np.arange(30) % 3
    estimator = FederatedRidgeCV()
    before = pickle.dumps(estimator)
    state = {"round": 0}

    def tamper(site, reply):
        if site == 1:
            state["round"] += 1
            if state["round"] == 2:  # the leave-one-out round
                data = bytearray(reply)
                data[len(data) // 2] ^= 1
                return bytes(data)
        return reply

    with pytest.raises(InvalidClientMessage, match="client 1"):
        run_protocol_by_hand(estimator, X, y, clients, tamper=tamper)
    assert pickle.dumps(estimator) == before


# ------------------------------------------------------------- splitter cv
@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error", "explained_variance",
                                     make_scorer(mean_absolute_error, greater_is_better=False)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_kfold_equals_ridgecv(scoring, weighted, fit_intercept):
    X, y, rng = _data(n=80)
    w = rng.uniform(0.5, 2, size=len(X)) if weighted else None
    params = dict(alphas=(0.0,) + ALPHAS, scoring=scoring, cv=KFold(5),
                  fit_intercept=fit_intercept)
    ours = FederatedRidgeCV(**params).fit(X, y, w, clients=np.arange(80) % 7)
    theirs = RidgeCV(**params).fit(X, y, sample_weight=w)
    assert ours.alpha_ == theirs.alpha_
    assert ours.best_score_ == pytest.approx(theirs.best_score_, rel=1e-9)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=1e-9)
    assert ours.communication_.rounds == (2 if callable(scoring) else 1)


def test_group_splitter_gets_clients_as_groups():
    X, y, rng = _data(n=120)
    clients = rng.integers(0, 8, size=len(X))
    splitter = GroupKFold(n_splits=4)
    ours = FederatedRidgeCV(alphas=ALPHAS, cv=splitter).fit(X, y, clients=clients)
    splits = list(splitter.split(X, y, groups=clients))
    theirs = RidgeCV(alphas=ALPHAS, cv=splits).fit(X, y)
    assert ours.alpha_ == theirs.alpha_
    assert ours.best_score_ == pytest.approx(theirs.best_score_, rel=1e-9)
    assert ours.n_clients_ == 8


def test_choice_rule_agrees_with_ridgecv_on_ordinary_data():
    """Issue 13 found alpha_ agreeing in 9 of 20 trials under the pooled rule."""
    alphas = np.logspace(-2, 3, 12)
    for seed in range(20):
        X, y, rng = _data(n=90, d=8, seed=seed)
        ours = FederatedRidgeCV(alphas=alphas, cv=KFold(4)).fit(X, y, clients=np.arange(90) % 5)
        theirs = RidgeCV(alphas=alphas, cv=KFold(4)).fit(X, y)
        assert ours.alpha_ == theirs.alpha_


# ------------------------------------------------- folds held by the sites
def _deploy(estimator, X, y, clients, folds=None, *, server_folds=None, n_folds=None,
            client_role=None):
    """Run ``estimator``'s roles by hand, through bytes: each site holds its rows and folds.

    ``folds`` (one entry or row of codes per row of ``X``) is cut by site as
    ``X`` is; ``server_folds`` instead has the server assign them.
    """
    labels = np.unique(clients).tolist()
    server = estimator.make_server()
    server.n_folds = n_folds
    if server_folds is not None:
        server.folds = {site: server_folds[clients == site] for site in labels}
    make_client = client_role or (  # permissive sites: small ones, compared with fit
        lambda folds: estimator.make_client(folds=folds, policy=SitePolicy.permissive()))
    sites = {site: make_client(folds=None if folds is None else folds[clients == site])
             for site in labels}
    tasks = server.next_tasks(labels)
    while tasks:
        server.receive({site: sites[site].respond(task, X[clients == site], y[clients == site])
                        for site, task in tasks.items()})
        tasks = server.next_tasks(labels)
    return server


def _codes(splits, n):
    codes = np.zeros((n, len(splits)), dtype=np.int8)
    for j, (train, test) in enumerate(splits):
        codes[train, j], codes[test, j] = 1, 2
    return codes


def _integer_arrays(value, path="server", seen=None):
    """Paths of the integer arrays ``value`` holds in its attributes, dicts, lists and tuples."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return [path] if value.dtype.kind in "iub" else []
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple, set)):
        items = enumerate(value)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        items = vars(value).items()
    else:
        return []
    return [found for key, item in items
            for found in _integer_arrays(item, f"{path}.{key}", seen)]


@pytest.mark.parametrize("cv, params", [
    (None, dict(store_cv_results=True)),
    (None, dict(scoring="neg_mean_absolute_error", store_cv_results=True)),
    (KFold(5, shuffle=True, random_state=0), {}),
    (KFold(5, shuffle=True, random_state=0), dict(scoring="neg_mean_absolute_error")),
    (GroupKFold(3), dict(scoring="neg_mean_squared_error")),
])
def test_fit_server_holds_no_row_positions(monkeypatch, cv, params):
    """Issue 26: the server of a fit holds no row's position, nor any fold membership."""
    X, y, rng = _data(n=90, t=2 if params.get("scoring") else None)
    w = rng.uniform(0.5, 2, size=len(X))
    clients = rng.integers(0, 5, size=len(X))
    servers = []
    original = FederatedRidgeCV.make_server
    monkeypatch.setattr(FederatedRidgeCV, "make_server",
                        lambda self, **kw: servers.append(original(self, **kw)) or servers[-1])
    ours = FederatedRidgeCV(alphas=ALPHAS, cv=cv, **params).fit(X, y, w, clients=clients)
    (server,) = servers
    assert server.estimator is ours
    for name in ("positions", "test_order", "_row_positions"):
        assert not hasattr(server, name)
    assert server.folds is None
    held = {key: value for key, value in vars(server).items() if key != "estimator"}
    assert _integer_arrays(held) == []  # no row index, position or fold code anywhere
    # the model is RidgeCV's on the pooled rows, as before (and cv_results_ in X's order)
    splits = None if cv is None else list(cv.split(X, y, clients if isinstance(
        cv, GroupKFold) else None))
    theirs = RidgeCV(alphas=ALPHAS, cv=splits, **params).fit(X, y, sample_weight=w)
    assert ours.alpha_ == theirs.alpha_
    assert ours.best_score_ == pytest.approx(theirs.best_score_, rel=1e-9)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=1e-9)
    if cv is None:
        np.testing.assert_allclose(ours.cv_results_, theirs.cv_results_, rtol=1e-9)


@pytest.mark.parametrize("scoring", [None, "neg_mean_absolute_error"])
@pytest.mark.parametrize("form", ["test_fold", "codes"])
def test_deployed_sites_hold_their_folds_and_give_fit_model(scoring, form):
    """A deployment: each site holds its rows' folds; the server knows only their number."""
    X, y, rng = _data(n=90)
    clients = rng.integers(0, 4, size=len(X))
    splitter = KFold(5, shuffle=True, random_state=0)
    splits = list(splitter.split(X))
    if form == "test_fold":  # PredefinedSplit's column: the fold that holds each row out
        folds = np.empty(len(X), dtype=int)
        for j, (_, test) in enumerate(splits):
            folds[test] = j
    else:
        folds = _codes(splits, len(X))
    fitted = FederatedRidgeCV(alphas=ALPHAS, cv=splitter, scoring=scoring).fit(
        X, y, clients=clients)
    deployed = FederatedRidgeCV(alphas=ALPHAS, cv=5, scoring=scoring)  # n_folds from cv
    _deploy(deployed, X, y, clients, folds)
    assert deployed.alpha_ == fitted.alpha_
    assert deployed.best_score_ == fitted.best_score_  # the same sums, in the same order
    assert_array_equal(deployed.coef_, fitted.coef_)
    assert deployed.intercept_ == fitted.intercept_
    assert deployed.communication_.rounds == fitted.communication_.rounds


def test_deployed_classifier_sites_hold_their_folds():
    X, _, rng = _data(n=90)
    y = np.where(X[:, 0] + rng.normal(size=len(X)) > X[:, 0].mean(), "yes", "no")
    clients = rng.integers(0, 3, size=len(X))
    splitter = ShuffleSplit(4, test_size=0.25, random_state=0)  # some rows in neither set
    codes = _codes(list(splitter.split(X)), len(X))
    fitted = FederatedRidgeClassifierCV(alphas=ALPHAS, cv=splitter).fit(X, y, clients=clients)
    deployed = FederatedRidgeClassifierCV(alphas=ALPHAS, cv=splitter)
    _deploy(deployed, X, y, clients, codes)
    assert deployed.alpha_ == fitted.alpha_ and deployed.best_score_ == fitted.best_score_
    assert_array_equal(deployed.coef_, fitted.coef_)


def test_deployed_server_may_assign_the_folds():
    """``server.folds``: the server assigns each site codes, sent in its tasks."""
    X, y, rng = _data(n=90)
    clients = rng.integers(0, 4, size=len(X))
    splitter = GroupKFold(3)
    codes = _codes(list(splitter.split(X, y, groups=clients)), len(X))
    params = dict(alphas=ALPHAS, scoring="neg_mean_absolute_error")
    fitted = FederatedRidgeCV(cv=splitter, **params).fit(X, y, clients=clients)
    deployed = FederatedRidgeCV(cv=LeaveOneGroupOut(), **params)  # counts its folds from rows
    server = _deploy(deployed, X, y, clients, server_folds=codes)
    assert server.n_folds is None  # taken from the folds it assigns
    assert deployed.alpha_ == fitted.alpha_ and deployed.best_score_ == fitted.best_score_
    assert_array_equal(deployed.coef_, fitted.coef_)
    with pytest.raises(ValueError, match="holds its own"):  # folds from both sides
        _deploy(FederatedRidgeCV(cv=splitter, **params), X, y, clients, codes,
                server_folds=codes)
    disobedient = FederatedRidgeCV(cv=splitter, **params)

    class Disobedient(CVClient):  # answers for other folds than those it was assigned
        def membership(self, task, X, rows):
            codes = super().membership(task, X, rows)
            return None if codes is None else codes[:, ::-1]

    with pytest.raises(InvalidClientMessage, match="do not cover"):
        _deploy(disobedient, X, y, clients, server_folds=codes,
                client_role=lambda folds=None: Disobedient(disobedient, folds=folds))


def test_deployed_folds_say_what_is_missing():
    X, y, rng = _data(n=60)
    clients = rng.integers(0, 3, size=len(X))
    with pytest.raises(ValueError, match=r"set server.n_folds"):
        _deploy(FederatedRidgeCV(cv=LeaveOneGroupOut()), X, y, clients, np.zeros(len(X), int))
    with pytest.raises(ValueError, match=r"make_client\(folds=...\)"):
        _deploy(FederatedRidgeCV(cv=3), X, y, clients)
    with pytest.raises(ValueError, match="held-out fold in"):
        _deploy(FederatedRidgeCV(cv=3), X, y, clients, np.full(len(X), 3))
    deployed = FederatedRidgeCV(alphas=ALPHAS, cv=LeaveOneGroupOut())
    _deploy(deployed, X, y, clients, clients, n_folds=3)  # each site's rows: its own fold
    fitted = FederatedRidgeCV(alphas=ALPHAS, cv=LeaveOneGroupOut()).fit(X, y, clients=clients)
    assert deployed.alpha_ == fitted.alpha_
    assert_array_equal(deployed.coef_, fitted.coef_)


def test_site_fold_statistics_beyond_its_rows_are_refused():
    X, y, rng = _data(n=60)
    clients = rng.integers(0, 3, size=len(X))
    estimator = FederatedRidgeCV(cv=3)

    def make_client(folds=None):
        client = estimator.make_client(folds=folds, policy=SitePolicy.permissive())
        original = client._statistics

        def statistics(task, X, y, sample_weight, folds):
            named = original(task, X, y, sample_weight, folds)
            if task.site == 1:
                named["train0"] = named["all"]  # all its rows in training and held out
            return named
        client._statistics = statistics
        return client

    with pytest.raises(InvalidClientMessage, match="client 1: .* more than its"):
        _deploy(estimator, X, y, clients, np.arange(len(X)) % 3, client_role=make_client)


# ------------------------------------------------------- cv="clients" (LOCO)
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("t", [None, 2])
def test_pooled_leave_one_client_out_matches_brute_force(fit_intercept, weighted, t):
    X, y, rng = _data(t=t)
    w = rng.uniform(0.2, 2, size=len(X)) if weighted else None
    clients = rng.integers(0, 7, size=len(X))
    cv = FederatedRidgeCV(alphas=ALPHAS, fit_intercept=fit_intercept, cv="clients",
                          criterion="pooled_squared_error", store_cv_results=True)
    cv.fit(X, y, w, clients=clients)
    splits = list(LeaveOneGroupOut().split(X, y, groups=clients))
    sse = _held_out_sse(X, y, w, splits, ALPHAS, fit_intercept)
    np.testing.assert_allclose(cv.cv_results_, sse[:, 0, :] if t is None else sse, rtol=1e-8)
    total_weight = len(X) if w is None else w.sum()
    criterion = sse.sum(axis=(0, 1)) / (total_weight * sse.shape[1])
    assert cv.alpha_ == ALPHAS[int(np.argmin(criterion))]
    assert cv.best_score_ == pytest.approx(-criterion.min(), rel=1e-8)
    np.testing.assert_allclose(cv.coef_, Ridge(alpha=cv.alpha_, fit_intercept=fit_intercept)
                               .fit(X, y, w).coef_, rtol=1e-9)
    assert cv.communication_.rounds == 1


@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error",
                                     make_scorer(mean_absolute_error, greater_is_better=False)])
def test_leave_one_client_out_mean_rule_equals_ridgecv_with_logo(scoring):
    X, y, rng = _data(n=120)
    clients = rng.integers(0, 6, size=len(X))
    ours = FederatedRidgeCV(alphas=ALPHAS, cv="clients", scoring=scoring).fit(
        X, y, clients=clients)
    theirs = RidgeCV(alphas=ALPHAS, cv=list(LeaveOneGroupOut().split(X, y, groups=clients)),
                     scoring=scoring).fit(X, y)
    assert ours.alpha_ == theirs.alpha_
    assert ours.best_score_ == pytest.approx(theirs.best_score_, rel=1e-9)


def test_pooled_and_mean_rules_disagree_on_unequal_clients():
    """The User Guide's example: one big, quiet client and three small, noisy ones."""
    rng = np.random.default_rng(8)
    sizes = [60, 8, 8, 8]
    X = rng.normal(size=(sum(sizes), 2))
    clients = np.repeat(np.arange(4), sizes)
    y = X @ [1.0, -1.0] + rng.normal(size=len(X)) * np.where(clients == 0, 0.1, 3.0)
    alphas = [0.1, 10.0, 1000.0]
    mean = FederatedRidgeCV(alphas=alphas, cv="clients", scoring="neg_mean_squared_error")
    pooled = FederatedRidgeCV(alphas=alphas, cv="clients", criterion="pooled_squared_error")
    assert mean.fit(X, y, clients=clients).alpha_ == 0.1
    assert pooled.fit(X, y, clients=clients).alpha_ == 10.0


def test_fit_statistics_equals_fit_on_rows():
    X, y, rng = _data()
    clients = rng.integers(0, 5, size=len(X))
    messages = {k: ClientStatistics.from_data(X[clients == k], y[clients == k]).to_bytes()
                for k in range(5)}
    params = dict(alphas=ALPHAS, cv="clients", store_cv_results=True)
    from_messages = FederatedRidgeCV(**params).fit_statistics(messages)
    from_rows = FederatedRidgeCV(**params).fit(X, y, clients=clients)
    np.testing.assert_allclose(from_messages.cv_results_, from_rows.cv_results_, rtol=1e-10)
    assert from_messages.alpha_ == from_rows.alpha_


def test_one_decomposition_per_client(monkeypatch):
    """Cost: K decompositions however many alphas (no factorization per pair)."""
    import sklearn_fed.linear_model._ridge_cv_algebra as module

    calls = []
    original = module.numerical_range
    monkeypatch.setattr(module, "numerical_range", lambda g: calls.append(1) or original(g))
    X, y, _ = _data()
    FederatedRidgeCV(alphas=np.logspace(-3, 3, 50), cv="clients").fit(
        X, y, clients=np.arange(len(X)) % 6)
    assert len(calls) == 6


def test_agrees_with_federated_ridge_at_chosen_alpha():
    X, y, rng = _data()
    clients = rng.integers(0, 4, size=len(X))
    for cv in (None, "clients", KFold(3)):
        fitted = FederatedRidgeCV(alphas=ALPHAS, cv=cv).fit(X, y, clients=clients)
        with simulate_through_bytes():  # site by site, as the CV's refit (fit pools it)
            fed = FederatedRidge(alpha=fitted.alpha_).fit(X, y, clients=clients)
        np.testing.assert_array_equal(fitted.coef_, fed.coef_)


def test_ill_conditioned_statistics_are_repeated_as_factors():
    X, y, _ = _data(n=20, d=40)
    fitted = FederatedRidgeCV(alphas=(1e-14, 1.0)).fit(X, y, clients=np.arange(20) % 3)
    assert fitted.communication_.rounds == 3 and fitted.solver_ == "svd"
    theirs = RidgeCV(alphas=(1e-14, 1.0)).fit(X, y)
    assert fitted.alpha_ == theirs.alpha_


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "params, error, message",
    [
        (dict(alphas=(0.0, 1.0)), ValueError, r"alphas\[0\] == 0.0, must be > 0.0"),
        (dict(alphas=(1, -1, -100)), ValueError, r"alphas\[1\] == -1, must be > 0.0"),
        (dict(alphas=(1, 1.0, "1")), TypeError, r"alphas\[2\] must be an instance of float"),
        (dict(cv=3, store_cv_results=True), ValueError, "cv!=None and store_cv_results"),
        (dict(cv=3, alpha_per_target=True), ValueError, "cv!=None and alpha_per_target"),
        (dict(criterion="pooled_squared_error", scoring="r2"), ValueError, "scoring must be None"),
    ],
)
def test_bad_parameters_raise_like_ridgecv(params, error, message):
    X, y, _ = _data(n=40)
    with pytest.raises(error, match=message):
        FederatedRidgeCV(**params).fit(X, y)
    if error is not ValueError or "alphas" not in message:
        return
    with pytest.raises(error, match=message):  # RidgeCV says the same
        RidgeCV(**params).fit(X, y)


def test_alpha_zero_is_accepted_with_cv():
    X, y, _ = _data(n=40)
    for cv in (3, "clients"):
        FederatedRidgeCV(alphas=(0.0, 1.0), cv=cv).fit(X, y, clients=np.arange(40) % 4)


def test_leave_one_client_out_needs_two_clients():
    X, y, _ = _data(n=40)
    with pytest.raises(ValueError, match="at least 2 clients"):
        FederatedRidgeCV(cv="clients").fit(X, y, clients=np.zeros(40))
    message = ClientStatistics.from_data(X, y)
    with pytest.raises(ValueError, match="at least 2 clients"):
        FederatedRidgeCV(cv="clients").fit_statistics([message])
    with pytest.raises(ValueError, match="set cv='clients'"):
        FederatedRidgeCV().fit_statistics([message, message])


def test_robust_aggregation_guards_the_cv_server_too():
    """RobustAggregation on FederatedRidgeCV: bounds go out in the task, an outlier is dropped."""
    from sklearn_fed.linear_model import RobustAggregation

    rng = np.random.default_rng(0)
    sites = {}
    for k in range(8):
        X = rng.normal(size=(100, 3))
        sites[f"s{k}"] = (X, X @ [1.0, 2.0, 3.0] + rng.normal(size=100))
    X_bad = rng.normal(size=(100, 3))
    sites["evil"] = (X_bad, X_bad @ [-30.0, 20.0, -10.0])  # another relationship entirely
    honest = np.vstack([sites[f"s{k}"][0] for k in range(8)])
    target = np.concatenate([sites[f"s{k}"][1] for k in range(8)])
    for cv in ("clients", None):  # one round; two, the second without the dropped site
        estimator = FederatedRidgeCV(cv=cv)
        server = estimator.make_server(robust=RobustAggregation(outlier_threshold=3.0),
                                       on_invalid="drop")
        tasks = server.next_tasks(list(sites))
        while tasks:
            replies = {s: estimator.make_client(policy=SitePolicy.permissive()).respond(tasks[s], *sites[s])
                       for s in tasks}
            server.receive(replies)
            tasks = server.next_tasks(list(sites))
        assert "evil" in server.dropped_ and "evil" not in estimator.clients_.tolist()
        np.testing.assert_allclose(estimator.coef_, Ridge(alpha=estimator.alpha_).fit(
            honest, target).coef_, rtol=1e-9)


@pytest.mark.parametrize("cv", [None, 3])
def test_sites_on_parallel_threads_give_the_same_bits(sites_on_threads, cv):
    import threading

    X, y, _ = _data(n=240, d=6)
    clients = np.arange(240) % 4
    fits = {}
    for n_threads in (1, 2):
        threads = sites_on_threads(CVClient, n_threads)
        model = FederatedRidgeCV(alphas=(0.01, 1.0, 100.0), cv=cv, store_cv_results=cv is None)
        fits[n_threads] = model.fit(X, y, clients=clients)
        main = threading.get_ident()  # on 2 threads, on the pool (one may take every site)
        assert (main not in threads) if n_threads > 1 else (threads == {main})
    one, two = fits[1], fits[2]
    assert one.alpha_ == two.alpha_
    assert_array_equal(one.coef_, two.coef_)
    assert one.intercept_ == two.intercept_
    if cv is None:
        assert_array_equal(one.cv_results_, two.cv_results_)
    assert one.communication_.as_dict() == two.communication_.as_dict()


@pytest.mark.parametrize("solver", ["auto", "svd", "cholesky"])
@pytest.mark.parametrize("n_targets", [1, 2])
def test_leave_one_out_with_only_constant_columns(solver, n_targets):
    # two rows, one constant column, an intercept: the centered spectrum is
    # empty and reshape(0, -1) raised "cannot reshape array of size 0"
    X = np.array([[3.0], [3.0]])
    y = np.array([1.0, 2.5]) if n_targets == 1 else np.array([[1.0, 0.0], [2.5, 4.0]])
    pooled = RidgeCV(store_cv_results=True).fit(X, y, sample_weight=np.array([1.0, 2.0]))
    for clients in ([0, 0], [0, 1]):
        fed = FederatedRidgeCV(solver=solver, store_cv_results=True).fit(
            X, y, sample_weight=np.array([1.0, 2.0]), clients=clients)
        np.testing.assert_array_equal(fed.coef_, pooled.coef_)
        np.testing.assert_allclose(fed.intercept_, pooled.intercept_, rtol=1e-14)
        np.testing.assert_allclose(fed.cv_results_, pooled.cv_results_, rtol=1e-12)
        assert fed.alpha_ == pooled.alpha_


@pytest.mark.parametrize("name, change", [
    (name, change)
    for name in ("alphas", "eigenvalues", "basis", "projected", "x_mean", "y_mean")
    for change in ("missing", "extra_axis", "longer")
    if (name, change) != ("alphas", "longer")  # the number of alphas is the server's choice
])
def test_malformed_leave_one_out_task_names_the_array(name, change):
    """A site refuses a leave-one-out task with an array missing or of the wrong shape,
    naming the server and the array (not a KeyError or a broadcast error at the site)."""
    X, y, _ = _data(n=30)
    clients = np.arange(30) % 3
    estimator = FederatedRidgeCV(alphas=ALPHAS)

    class Tampered(CVClient):  # the leave-one-out task as a hostile server would send it
        def summarize(self, task, X, y, sample_weight, rows):
            if task.fields.get("step") == "leave_one_out":
                value = task.arrays.pop(name)
                if change == "extra_axis":
                    task.arrays[name] = value[..., None]
                elif change == "longer":
                    task.arrays[name] = np.concatenate([value, value])
            return super().summarize(task, X, y, sample_weight, rows)

    with pytest.raises(InvalidClientMessage, match=f"server: .*{name!r}"):
        _deploy(estimator, X, y, clients, client_role=lambda folds=None: Tampered(
            estimator, policy=SitePolicy.permissive()))
