"""A pooled round (``Server.pools_round``) is the per-site protocol run, but cheaper.

``fit(X, y, clients=c)`` of FederatedRidge computes one reply from all rows
and counts each site's task and reply sizes in closed form. Compared here to
the per-site run through real bytes (``simulate_through_bytes``, which never
pools): the same ledger byte for byte, the same clients, path and rounds,
and the model to round-off; and every case the pooled reply cannot vouch
for runs per site.
"""

import numpy as np
import pytest

from sklearn_fed import FederatedRidge, InvalidClientMessage
from sklearn_fed.linear_model._base import StatisticsClient
from sklearn_fed.protocol import simulate_through_bytes


def _problem(n=300, d=5, offset=10.0, n_targets=1, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + offset
    coef = rng.normal(size=(d, n_targets))
    y = X @ coef + 0.1 * rng.normal(size=(n, n_targets))
    return X, y[:, 0] if n_targets == 1 else y


def _counting_replies(monkeypatch):
    """Count the replies sites compute (one for a pooled round)."""
    calls = []
    reply = StatisticsClient.reply

    def counted(self, task, X, y, sample_weight, rows, names):
        calls.append(rows)
        return reply(self, task, X, y, sample_weight, rows, names)

    monkeypatch.setattr(StatisticsClient, "reply", counted)
    return calls


def _per_site(estimator, *args, method="fit", **kwargs):
    with simulate_through_bytes():
        return getattr(estimator, method)(*args, **kwargs)


def _assert_same_run(pooled, per_site, rtol=1e-10):
    assert pooled.communication_.as_dict() == per_site.communication_.as_dict()
    assert pooled.clients_.tolist() == per_site.clients_.tolist()
    assert pooled.clients_.dtype == per_site.clients_.dtype
    assert (pooled.n_clients_, pooled.solver_) == (per_site.n_clients_, per_site.solver_)
    np.testing.assert_allclose(pooled.coef_, per_site.coef_, rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(pooled.intercept_, per_site.intercept_, rtol=rtol, atol=1e-9)
    assert pooled.coef_.dtype == per_site.coef_.dtype


LABELS = {
    "runs of ints": lambda n: np.repeat(np.arange(7), -(-n // 7))[:n],
    "shuffled ints": lambda n: np.random.default_rng(1).integers(0, 150, n),
    "large ints": lambda n: (np.arange(n) % 11) * 10**12 - 5,
    "strings": lambda n: np.array(["a", "bb", "é", 'q"uote', "ß\\"] * n)[:n],
    "mixed": lambda n: np.array([1, "a", 2.5] * n, dtype=object)[:n],
    "one row each": lambda n: np.arange(n),
}


@pytest.mark.parametrize("labels", LABELS, ids=list(LABELS))
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_pooled_fit_is_the_per_site_run(labels, fit_intercept, monkeypatch):
    X, y = _problem()
    clients = LABELS[labels](X.shape[0])
    calls = _counting_replies(monkeypatch)
    pooled = FederatedRidge(fit_intercept=fit_intercept).fit(X, y, clients=clients)
    assert calls == [None]  # one reply, from every row
    per_site = _per_site(FederatedRidge(fit_intercept=fit_intercept), X, y, clients=clients)
    assert len(calls) == 1 + pooled.n_clients_
    _assert_same_run(pooled, per_site)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pooled_multi_target_and_float32(dtype):
    X, y = _problem(n_targets=3)
    X = X.astype(dtype)
    clients = np.arange(X.shape[0]) % 9
    pooled = FederatedRidge(alpha=np.array([0.5, 1.0, 2.0])).fit(X, y, clients=clients)
    per_site = _per_site(FederatedRidge(alpha=np.array([0.5, 1.0, 2.0])), X, y, clients=clients)
    _assert_same_run(pooled, per_site, rtol=1e-10 if dtype == np.float64 else 1e-6)


def test_pooled_partial_fit_continues_the_ledger():
    X, y = _problem(n=400)
    pooled, per_site = FederatedRidge(), FederatedRidge()
    for batch, clients in ((slice(0, 200), np.arange(200) % 5),
                           (slice(200, 400), np.arange(200) % 8 + 3)):
        pooled.partial_fit(X[batch], y[batch], clients=clients)
        _per_site(per_site, X[batch], y[batch], clients=clients, method="partial_fit")
        _assert_same_run(pooled, per_site)
    assert pooled.communication_.rounds == 2


def test_escalation_to_factors_after_a_pooled_round(monkeypatch):
    """A Gram too ill-conditioned for Cholesky: the pooled round asks for factors, per site."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 30))
    clients = np.arange(12) % 4
    calls = _counting_replies(monkeypatch)
    pooled = FederatedRidge(alpha=1e-12).fit(X, X[:, 0], clients=clients)
    assert calls[0] is None and len(calls) == 1 + 4  # pooled Gram round, then 4 factors
    per_site = _per_site(FederatedRidge(alpha=1e-12), X, X[:, 0], clients=clients)
    assert pooled.solver_ == "svd" and pooled.communication_.rounds == 2
    _assert_same_run(pooled, per_site, rtol=1e-8)


@pytest.mark.parametrize("case", ["weights", "one client", "solver svd", "through bytes"])
def test_rounds_that_are_not_pooled(case, monkeypatch):
    X, y = _problem()
    clients = np.arange(X.shape[0]) % 3
    kwargs, estimator = {}, FederatedRidge()
    if case == "weights":
        kwargs["sample_weight"] = np.linspace(0.5, 2.0, X.shape[0])
    elif case == "one client":
        clients = None
    elif case == "solver svd":
        estimator = FederatedRidge(solver="svd")
    calls = _counting_replies(monkeypatch)
    if case == "through bytes":
        with simulate_through_bytes():
            estimator.fit(X, y, clients=clients)
    else:
        estimator.fit(X, y, clients=clients, **kwargs)
    assert all(rows is not None for rows in calls) and len(calls) == estimator.n_clients_


def test_a_site_beyond_a_cap_the_pool_keeps_runs_per_site(monkeypatch):
    """Two sites' means of +-2e75 pass as a pooled mean of 0; each site's own does not."""
    X = np.array([[2e75], [2e75], [-2e75], [-2e75]])
    calls = _counting_replies(monkeypatch)
    with pytest.raises(InvalidClientMessage, match="x_mean") as pooled:
        FederatedRidge().fit(X, np.zeros(4), clients=[0, 0, 1, 1])
    assert calls[0] is None and len(calls) > 1  # declined, then site by site
    with pytest.raises(InvalidClientMessage) as per_site:
        _per_site(FederatedRidge(), X, np.zeros(4), clients=[0, 0, 1, 1])
    assert str(pooled.value) == str(per_site.value)


def test_a_non_finite_X_gets_scikit_learns_error():
    X, y = _problem()
    X[17, 2] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        FederatedRidge().fit(X, y, clients=np.arange(X.shape[0]) % 4)


def test_pooled_ledger_matches_encoded_frames_for_many_sites():
    """Sizes in closed form across label lengths (1 to 6 digits) and row counts."""
    X, y = _problem(n=2000, d=3)
    clients = np.random.default_rng(0).choice([0, 7, 99, 1234, 55555, 123456], 2000)
    clients[::3] = np.arange(0, 2000, 3) * 61
    pooled = FederatedRidge().fit(X, y, clients=clients)
    per_site = _per_site(FederatedRidge(), X, y, clients=clients)
    _assert_same_run(pooled, per_site)


def test_a_large_pooled_reply_is_computed_in_parts_whatever_the_threads(monkeypatch):
    """Rows cut into parts by shape (4 here), summarized on the BLAS threads: same bits."""
    from threadpoolctl import threadpool_limits

    import sklearn_fed.protocol._simulate as simulate

    X, y = _problem(n=70_000, d=4)
    clients = np.arange(len(X)) % 50
    parts = []
    summarize = StatisticsClient.summarize
    monkeypatch.setattr(StatisticsClient, "summarize", lambda self, task, X, y, w, rows: (
        parts.append(rows) or summarize(self, task, X, y, w, rows)))
    with threadpool_limits(1):
        one = FederatedRidge().fit(X, y, clients=clients)
    assert parts == [slice(0, 17500), slice(17500, 35000), slice(35000, 52500),
                     slice(52500, 70000)]
    monkeypatch.setattr(simulate, "blas_threads", lambda: 2)
    two = FederatedRidge().fit(X, y, clients=clients)
    np.testing.assert_array_equal(one.coef_, two.coef_)
    np.testing.assert_array_equal(one.intercept_, two.intercept_)
    _assert_same_run(one, _per_site(FederatedRidge(), X, y, clients=clients))


@pytest.mark.parametrize("n_classes", [2, 3])
def test_the_ridge_classifier_pools_its_statistics_round(n_classes, monkeypatch):
    from sklearn_fed import FederatedRidgeClassifier

    X, target = _problem(n=400)
    y = np.digitize(target, np.quantile(target, np.linspace(0, 1, n_classes + 1)[1:-1]))
    clients = np.arange(len(X)) % 13
    calls = _counting_replies(monkeypatch)
    pooled = FederatedRidgeClassifier().fit(X, y, clients=clients)
    assert sum(rows is None for rows in calls) == 1  # classes per site, then one pooled reply
    per_site = _per_site(FederatedRidgeClassifier(), X, y, clients=clients)
    assert pooled.communication_.as_dict() == per_site.communication_.as_dict()
    np.testing.assert_array_equal(pooled.classes_, per_site.classes_)
    np.testing.assert_allclose(pooled.coef_, per_site.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(pooled.predict(X), per_site.predict(X))


def test_class_weights_are_not_pooled(monkeypatch):
    from sklearn_fed import FederatedRidgeClassifier

    X, target = _problem(n=200)
    calls = _counting_replies(monkeypatch)
    # 60 / 140 rows: balanced weights are not all one (equal classes would be)
    FederatedRidgeClassifier(class_weight="balanced").fit(
        X, target > np.quantile(target, 0.7), clients=np.arange(200) % 4)
    assert all(rows is not None for rows in calls)


class _WholeRowsClient(StatisticsClient):
    """Answers from all its rows at once: it replaces _compute, so it is not blockwise."""

    def compute(self, task, X, y, sample_weight, rows):
        self.computed = getattr(self, "computed", []) + [rows]
        return self.finish(task, self.summarize(task, X, y, sample_weight, rows))


def test_a_role_that_replaces_compute_is_pooled_whole_not_in_parts():
    class WholeRowsRidge(FederatedRidge):
        _client_role = _WholeRowsClient

    X, y = _problem(n=70_000, d=3)
    model = WholeRowsRidge()
    client = model.make_client()
    model.make_client = lambda **kwargs: client
    model.fit(X, y, clients=np.arange(len(X)) % 7)
    assert client.computed == [None]
