"""FederatedRidgeCV agrees with brute-force refits and with RidgeCV."""

import numpy as np
import pytest
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

from sklearn_fed import ClientStatistics, FederatedRidge, FederatedRidgeCV

ALPHAS = (0.01, 0.3, 3.0, 30.0)


def _brute_force(X, y, w, clients, alphas, fit_intercept, splits=None):
    """Held-out weighted SSE per (group, alpha) by refitting sklearn's Ridge."""
    if splits is None:
        splits = list(LeaveOneGroupOut().split(X, y, groups=clients))
    y2 = y.reshape(len(y), -1)
    sse = np.zeros((len(splits), y2.shape[1], len(alphas)))
    for g, (train, test) in enumerate(splits):
        for a, alpha in enumerate(alphas):
            ridge = Ridge(alpha=alpha, fit_intercept=fit_intercept)
            ridge.fit(X[train], y[train], None if w is None else w[train])
            residual = (y2[test] - ridge.predict(X[test]).reshape(len(test), -1)) ** 2
            weights = np.ones(len(test)) if w is None else w[test]
            sse[g, :, a] = weights @ residual
    return sse


def _data(n=150, d=5, t=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + rng.uniform(-3, 3, size=d)
    coef = rng.normal(size=(d,) if t is None else (d, t))
    y = X @ coef + 2.0 * rng.normal(size=(n,) if t is None else (n, t))
    return X, y, rng


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("t", [None, 2])
def test_leave_one_client_out_matches_brute_force(fit_intercept, weighted, t):
    X, y, rng = _data(t=t)
    w = rng.uniform(0.2, 2, size=len(X)) if weighted else None
    clients = rng.integers(0, 7, size=len(X))
    cv = FederatedRidgeCV(alphas=ALPHAS, fit_intercept=fit_intercept)
    cv.fit(X, y, w, clients=clients)
    sse = _brute_force(X, y, w, clients, ALPHAS, fit_intercept)
    expected_results = sse[:, 0, :] if t is None else sse
    np.testing.assert_allclose(cv.cv_results_, expected_results, rtol=1e-8)
    total_weight = len(X) if w is None else w.sum()
    criterion = sse.sum(axis=(0, 1)) / (total_weight * sse.shape[1])
    assert cv.alpha_ == ALPHAS[int(np.argmin(criterion))]
    assert cv.best_score_ == pytest.approx(-criterion.min(), rel=1e-8)
    ridge = Ridge(alpha=cv.alpha_, fit_intercept=fit_intercept).fit(X, y, w)
    np.testing.assert_allclose(cv.coef_, ridge.coef_, rtol=1e-9)


def test_fit_statistics_equals_fit_on_rows():
    X, y, rng = _data()
    clients = rng.integers(0, 5, size=len(X))
    messages = {k: ClientStatistics.from_data(X[clients == k], y[clients == k]).to_bytes() for k in range(5)}
    from_messages = FederatedRidgeCV(alphas=ALPHAS).fit_statistics(messages)
    from_rows = FederatedRidgeCV(alphas=ALPHAS).fit(X, y, clients=clients)
    np.testing.assert_allclose(from_messages.cv_results_, from_rows.cv_results_, rtol=1e-10)
    assert from_messages.alpha_ == from_rows.alpha_


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("t", [None, 3])
def test_without_clients_agrees_with_ridgecv(weighted, t):
    X, y, rng = _data(n=60, t=t)
    w = rng.uniform(0.5, 2, size=len(X)) if weighted else None
    ours = FederatedRidgeCV(alphas=ALPHAS).fit(X, y, w)
    theirs = RidgeCV(alphas=ALPHAS, store_cv_results=True).fit(X, y, sample_weight=w)
    assert ours.alpha_ == theirs.alpha_
    assert ours.best_score_ == pytest.approx(theirs.best_score_, rel=1e-8)
    np.testing.assert_allclose(ours.cv_results_, theirs.cv_results_, rtol=1e-8)
    np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=1e-9)


def test_cv_splitter_uses_clients_as_groups():
    X, y, rng = _data(n=120)
    clients = rng.integers(0, 8, size=len(X))
    splitter = GroupKFold(n_splits=4)
    cv = FederatedRidgeCV(alphas=ALPHAS, cv=splitter).fit(X, y, clients=clients)
    splits = list(splitter.split(X, y, groups=clients))
    sse = _brute_force(X, y, None, clients, ALPHAS, True, splits=splits)
    np.testing.assert_allclose(cv.cv_results_, sse[:, 0, :], rtol=1e-8)
    assert cv.n_clients_ == 8


def test_one_decomposition_per_client(monkeypatch):
    """Cost: K eigendecompositions however many alphas (no Cholesky per pair)."""
    import sklearn_fed.linear_model._federated_ridge_cv as module

    calls = []
    original = module.linalg.eigh
    monkeypatch.setattr(module.linalg, "eigh", lambda *a, **k: calls.append(1) or original(*a, **k))
    X, y, rng = _data()
    FederatedRidgeCV(alphas=np.logspace(-3, 3, 50)).fit(X, y, clients=np.arange(len(X)) % 6)
    assert len(calls) == 6


def test_agrees_with_federated_ridge_at_chosen_alpha():
    X, y, rng = _data()
    clients = rng.integers(0, 4, size=len(X))
    cv = FederatedRidgeCV(alphas=ALPHAS).fit(X, y, clients=clients)
    fed = FederatedRidge(alpha=cv.alpha_).fit(X, y, clients=clients)
    np.testing.assert_allclose(cv.coef_, fed.coef_, rtol=1e-12)


@pytest.mark.parametrize(
    "params, fit_kwargs, error",
    [
        (dict(alphas=(0.0, 1.0)), {}, "positive"),
        (dict(alphas=()), {}, "non-empty"),
        (dict(), dict(clients=np.zeros(40)), "at least 2 clients"),
    ],
)
def test_bad_input(params, fit_kwargs, error):
    X, y, _ = _data(n=40)
    with pytest.raises(ValueError, match=error):
        FederatedRidgeCV(**params).fit(X, y, **fit_kwargs)


def test_fit_statistics_rejects_cv_and_single_client():
    X, y, _ = _data(n=40)
    message = ClientStatistics.from_data(X, y)
    with pytest.raises(ValueError, match="at least 2 clients"):
        FederatedRidgeCV().fit_statistics([message])
    with pytest.raises(ValueError, match="cv must be None"):
        FederatedRidgeCV(cv=3).fit_statistics([message, message])
