import math
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import optimize
from sklearn import config_context
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_fed import FESCRidge, InvalidClientMessage
from sklearn_fed.linear_model import fesc_weights
from sklearn_fed.protocol import decode, encode
from sklearn_fed.statistics import ClientStatistics
from sklearn_fed.utils.estimator_checks import run_protocol_by_hand


def eq_9_10(n):
    """Direct transcription of Eq. 9-10, loops and all, on sizes n (input order)."""
    n = [float(v) for v in n]
    m = len(n)
    order = sorted(range(m), key=lambda i: -n[i])
    ns = [n[i] for i in order]
    K = 1
    for k in range(1, m + 1):
        rhs = (2 + sum(1 / ns[j] for j in range(k))) / sum(ns[j] for j in range(k))
        if 1 / ns[k - 1] ** 2 <= rhs:
            K = k  # argmax over the k that satisfy the condition
    ratio = (2 + sum(1 / ns[j] for j in range(K))) / sum(ns[j] for j in range(K))
    w = [0.0] * m
    for r in range(K):
        w[order[r]] = ns[r] / 2 * ratio - 1 / (2 * ns[r])
    return np.array(w)


def bound(w, n):
    return np.sum(w**2 / n + w / n**2)


SIZE_VECTORS = [
    np.array([7]),
    np.array([5, 5, 5, 5]),
    np.array([1, 1, 1]),
    np.array([1, 2]),
    np.array([10_000, 1, 2, 3, 1, 1]),
    np.array([3, 1, 1, 1, 1, 1, 1, 1]),
    *[np.random.RandomState(s).lognormal(1.0, 1.2, size=30).round() + 1 for s in range(6)],
    *[np.random.RandomState(s).randint(1, 5, size=12) for s in range(3)],
]


@pytest.mark.parametrize("n", SIZE_VECTORS)
def test_weights_match_equations_9_10(n):
    w = fesc_weights(n)
    np.testing.assert_allclose(w, eq_9_10(n), rtol=1e-12, atol=1e-15)
    assert np.all(w >= 0)
    assert math.fsum(w) == pytest.approx(1.0, abs=1e-14)
    # equal sizes get equal weights; larger clients never get less
    for a in range(len(n)):
        for b in range(len(n)):
            if n[a] == n[b]:
                assert w[a] == w[b]
            if n[a] > n[b]:
                assert w[a] >= w[b]


def test_weights_special_cases():
    assert fesc_weights([42]).tolist() == [1.0]
    np.testing.assert_allclose(fesc_weights([9] * 6), 1 / 6, rtol=1e-15)
    w = fesc_weights([1_000_000, 1, 1, 1])
    assert w[0] == 1.0 and not w[1:].any()  # one giant client takes all
    # permutation equivariance
    n = SIZE_VECTORS[6]
    perm = np.random.RandomState(0).permutation(len(n))
    np.testing.assert_allclose(fesc_weights(n[perm]), fesc_weights(n)[perm], rtol=1e-14)


@pytest.mark.parametrize("n", SIZE_VECTORS[1:])
def test_weights_minimize_the_mse_bound(n):
    n = n.astype(float)
    m = n.shape[0]
    res = optimize.minimize(
        bound,
        np.full(m, 1 / m),
        args=(n,),
        method="SLSQP",
        bounds=[(0, 1)] * m,
        constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1, "jac": lambda w: np.ones(m)}],
        jac=lambda w, n: 2 * w / n + 1 / n**2,
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    assert res.success
    w = fesc_weights(n)
    assert bound(w, n) <= res.fun + 1e-12
    np.testing.assert_allclose(w, res.x, atol=1e-5)


@pytest.mark.parametrize("bad", [[], [3, 0, 2], [1, -1], [np.nan, 2], [[1, 2]]])
def test_weights_bad_input(bad):
    with pytest.raises(ValueError, match="n_samples|client"):
        fesc_weights(bad)


# ------------------------------------------------------------------ estimator
def _data(n=200, d=4, t=None, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, d)) + 3.0
    theta = rng.uniform(size=(d,) if t is None else (d, t))
    y = X @ theta + rng.normal(size=(n,) if t is None else (n, t)) + 1.5
    return X, y


def test_single_client_equals_ridge():
    X, y = _data()
    for weighting in ("proportional", "fesc", "uniform"):
        est = FESCRidge(weighting=weighting).fit(X, y)
        ref = Ridge(alpha=1 / math.sqrt(len(y))).fit(X, y)
        np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-10)
        assert est.intercept_ == pytest.approx(ref.intercept_, rel=1e-10)
        assert est.alpha_ == 1 / math.sqrt(len(y))
    est = FESCRidge(alpha=2.5, weighting="proportional", fit_intercept=False).fit(X, y)
    ref = Ridge(alpha=2.5, fit_intercept=False).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-10)
    assert est.intercept_ == 0.0


@pytest.mark.parametrize("weighting", ["fesc", "proportional", "uniform"])
def test_combination_of_local_ridges(weighting):
    X, y = _data(n=150, t=2)
    clients = np.repeat(["c", "a", "b"], [100, 45, 5])
    est = FESCRidge(alpha=0.3, weighting=weighting).fit(X, y, clients=clients)
    assert est.clients_.tolist() == ["a", "b", "c"]
    sizes = np.array([45, 5, 100])
    np.testing.assert_array_equal(est.client_sizes_, sizes)
    expected_w = {
        "fesc": eq_9_10(sizes),
        "proportional": sizes / 150,
        "uniform": np.full(3, 1 / 3),
    }[weighting]
    np.testing.assert_allclose(est.client_weights_, expected_w, rtol=1e-12)
    assert est.n_selected_clients_ == np.count_nonzero(expected_w)
    coef = 0
    intercept = 0
    for k, label in enumerate(["a", "b", "c"]):
        ref = Ridge(alpha=0.3).fit(X[clients == label], y[clients == label])
        np.testing.assert_allclose(est.local_coefs_[k], ref.coef_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(est.local_intercepts_[k], ref.intercept_, rtol=1e-9)
        coef = coef + expected_w[k] * ref.coef_
        intercept = intercept + expected_w[k] * ref.intercept_
    np.testing.assert_allclose(est.coef_, coef, rtol=1e-9)
    np.testing.assert_allclose(est.intercept_, intercept, rtol=1e-9)
    assert est.local_coefs_.shape == (3, 2, 4)
    np.testing.assert_allclose(est.predict(X), X @ est.coef_.T + est.intercept_)


def test_fesc_drops_tiny_clients():
    X, y = _data(n=103)
    clients = np.repeat([0, 1, 2, 3], [100, 1, 1, 1])
    est = FESCRidge().fit(X, y, clients=clients)
    assert est.n_selected_clients_ == 1
    np.testing.assert_array_equal(est.client_weights_, [1.0, 0, 0, 0])
    np.testing.assert_allclose(est.coef_, est.local_coefs_[0])


@pytest.mark.parametrize("alpha, rounds", [("auto", 2), (0.5, 1)])
def test_clients_send_only_size_coefficients_and_intercept(alpha, rounds):
    # The paper's message (n_i, theta_i, b_i); alpha="auto" needs N first.
    X, y = _data(n=90)
    clients = np.repeat(["a", "b", "c"], 30)
    sent = []

    def record(site, reply):
        sent.append(decode(reply, client=site))
        return reply

    server, _ = run_protocol_by_hand(FESCRidge(alpha=alpha), X, y, clients, tamper=record)
    est = server.estimator
    assert est.communication_.rounds == rounds
    if rounds == 2:
        for frame in sent[:3]:
            assert frame.fields.keys() == {"size"} and not frame.arrays
    for frame in sent[-3:]:
        assert frame.fields == {"size": 30.0}
        assert {k: v.shape for k, v in frame.arrays.items()} == {"coef": (4,), "intercept": ()}
    np.testing.assert_array_equal(est.local_coefs_, [f.arrays["coef"] for f in sent[-3:]])
    assert est.alpha_ == (1 / math.sqrt(90) if alpha == "auto" else 0.5)


def test_fitted_model_holds_no_client_statistics():
    X, y = _data(n=120, t=2)
    est = FESCRidge().fit(X, y, clients=np.repeat([0, 1, 2], 40))
    saved = pickle.loads(pickle.dumps(est))
    assert "_site_states" in vars(est) and "_site_states" not in vars(saved)
    for name, value in vars(saved).items():
        assert not isinstance(value, (dict, ClientStatistics)) or name == "_sklearn_version", name
        if isinstance(value, np.ndarray):  # nothing d x d: only sizes, weights, models
            assert value.shape in {(3,), (3, 2, 4), (3, 2), (2, 4), (2,), (4,)}, name
    np.testing.assert_array_equal(saved.predict(X), est.predict(X))
    with pytest.raises(ValueError, match="unpickled.*Call fit on all rows"):
        saved.partial_fit(X, y, clients=np.zeros(120))


def test_tampered_size_is_rejected():
    X, y = _data(n=60)
    clients = np.repeat([0, 1], 30)

    def inflate(site, reply):
        frame = decode(reply, client=site)
        if site == 1 and "coef" in frame.arrays:  # claims more rows than it counted
            frame.fields["size"] = 1e6
        return encode(frame)

    with pytest.raises(InvalidClientMessage, match="client 1: sent size 1000000.0 in the "
                       "model round but 30.0 in the count round"):
        run_protocol_by_hand(FESCRidge(), X, y, clients, tamper=inflate)


def test_sparse_input_equals_dense():
    X, y = _data(n=80)
    X[X < 3.0] = 0.0
    clients = np.repeat([0, 1], 40)
    dense = FESCRidge().fit(X, y, clients=clients)
    sparse = FESCRidge().fit(sp.csr_matrix(X), y, clients=clients)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-9)
    np.testing.assert_allclose(sparse.intercept_, dense.intercept_, rtol=1e-9)


def test_sample_weight_is_size_and_duplication():
    X, y = _data(n=60)
    clients = np.repeat([0, 1], [50, 10])
    sw = np.random.RandomState(0).randint(0, 4, size=60)
    sw[[0, 55]] = 1
    est = FESCRidge().fit(X, y, sample_weight=sw, clients=clients)
    rep = np.repeat(np.arange(60), sw)
    ref = FESCRidge().fit(X[rep], y[rep], clients=clients[rep])
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-10)
    np.testing.assert_allclose(est.client_sizes_, [sw[:50].sum(), sw[50:].sum()])


def test_partial_fit_equals_fit():
    X, y = _data(n=300, t=2, seed=3)
    clients = np.random.RandomState(0).randint(0, 6, size=300)
    for alpha in ("auto", 0.7):
        full = FESCRidge(alpha=alpha).fit(X, y, clients=clients)
        inc = FESCRidge(alpha=alpha)
        for part in np.array_split(np.arange(300), 4):
            inc.partial_fit(X[part], y[part], clients=clients[part])
        order = np.argsort(inc.clients_)
        np.testing.assert_array_equal(inc.clients_[order], full.clients_)
        np.testing.assert_allclose(inc.client_weights_[order], full.client_weights_, rtol=1e-12)
        np.testing.assert_allclose(inc.local_coefs_[order], full.local_coefs_, rtol=1e-9)
        np.testing.assert_allclose(inc.coef_, full.coef_, rtol=1e-9)
        np.testing.assert_allclose(inc.intercept_, full.intercept_, rtol=1e-9)


def test_partial_fit_fixed_alpha_refits_only_affected_clients():
    X, y = _data(n=100)
    est = FESCRidge(alpha=1.0).fit(X[:80], y[:80], clients=np.repeat([0, 1], 40))
    before = est.local_coefs_.copy()
    est.partial_fit(X[80:], y[80:], clients=np.repeat([1, 2], 10))
    np.testing.assert_array_equal(est.local_coefs_[0], before[0])  # untouched client
    assert not np.allclose(est.local_coefs_[1], before[1])
    assert est.clients_.tolist() == [0, 1, 2]
    # client 0 had no new rows: it was not asked again
    tasks = est.communication_.downlink_bytes_per_client
    assert tasks.keys() == {0, 1, 2} and tasks[1] == tasks[0] + tasks[2]
    # a client refits on all its rows so far: equal to fit on everything
    full = FESCRidge(alpha=1.0).fit(X, y, clients=np.repeat([0, 1, 2], [40, 50, 10]))
    np.testing.assert_allclose(est.local_coefs_, full.local_coefs_, rtol=1e-10)
    np.testing.assert_allclose(est.coef_, full.coef_, rtol=1e-10)


def test_partial_fit_validates_parameters_every_call():
    X, y = _data(n=40)
    est = FESCRidge().partial_fit(X, y, clients=np.repeat([0, 1], 20))
    est.set_params(alpha=-50)
    with pytest.raises(ValueError, match="alpha"):
        est.partial_fit(X, y, clients=np.repeat([0, 1], 20))
    est.set_params(alpha=1.0, fit_intercept=False)  # even when only new clients come
    with pytest.raises(ValueError, match="fit_intercept changed"):
        est.partial_fit(X, y, clients=np.repeat([2, 3], 20))


def test_failed_partial_fit_leaves_estimator_unchanged():
    X, y = _data(n=100, t=2)
    est = FESCRidge().fit(X, y, clients=np.repeat([0, 1], 50))
    state = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in vars(est).items()}
    with pytest.raises(ValueError, match="targets"):
        est.partial_fit(X, y[:, 0], clients=np.zeros(100))
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:, :2], y, clients=np.zeros(100))
    with pytest.raises(ValueError, match="site 5 has total sample weight 0"):
        est.partial_fit(X[:4], y[:4], sample_weight=[0, 0, 0, 1.0], clients=[5, 5, 5, 0])
    with pytest.raises(ValueError, match="site 'b' has total sample weight 0"):
        est.fit(X[:4], y[:4], sample_weight=[0, 0, 0, 1.0], clients=["b", "b", "b", "a"])
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(vars(est)[key], value)
        elif key == "_site_states":
            assert vars(est)[key] is value
    assert est.communication_.uplink_bytes == state["communication_"].uplink_bytes


@pytest.mark.parametrize(
    "params, match",
    [
        ({"weighting": "median"}, "weighting"),
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": "sqrt"}, "alpha"),
        ({"fit_intercept": "yes"}, "fit_intercept"),
    ],
)
def test_bad_params(params, match):
    X, y = _data(n=20)
    with pytest.raises(ValueError, match=match):
        FESCRidge(**params).fit(X, y)


def test_bad_clients():
    X, y = _data(n=20)
    with pytest.raises(ValueError, match="clients must hold one label per row"):
        FESCRidge().fit(X, y, clients=np.zeros(19))


def test_pipeline_and_grid_search_routing_off():
    X, y = _data(n=240)
    clients = np.repeat(np.arange(6), 40)
    pipe = make_pipeline(StandardScaler(), FESCRidge())
    pipe.fit(X, y, fescridge__clients=clients)
    assert pipe[-1].n_clients_ == 6
    search = GridSearchCV(
        pipe, {"fescridge__weighting": ["fesc", "uniform"]}, cv=GroupKFold(3)
    )
    search.fit(X, y, groups=clients, fescridge__clients=clients)
    assert search.best_estimator_[-1].n_clients_ == 6


def test_pipeline_and_grid_search_routing_on():
    X, y = _data(n=240)
    clients = np.repeat(np.arange(6), 40)
    with config_context(enable_metadata_routing=True):
        est = FESCRidge().set_fit_request(clients=True, sample_weight=False)
        pipe = make_pipeline(StandardScaler(), est)
        pipe.fit(X, y, clients=clients)
        assert pipe[-1].n_clients_ == 6
        search = GridSearchCV(
            make_pipeline(
                StandardScaler(),
                FESCRidge().set_fit_request(clients="groups", sample_weight=False),
            ),
            {"fescridge__alpha": ["auto", 1.0]},
            cv=GroupKFold(3),
        )
        search.fit(X, y, groups=clients)
        # each training fold holds 4 of the 6 clients
        assert search.best_estimator_[-1].n_clients_ == 6
        fold_est = clone(search.estimator).fit(X[:160], y[:160], groups=clients[:160])
        assert fold_est[-1].n_clients_ == 4


def test_float32_and_pickle():
    X, y = _data(n=50)
    est = FESCRidge().fit(X.astype(np.float32), y, clients=np.repeat([0, 1], 25))
    assert est.coef_.dtype == np.float32
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict(X), est.predict(X))


@parametrize_with_checks(
    [FESCRidge(), FESCRidge(weighting="proportional"), FESCRidge(weighting="uniform", alpha=1.0)]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
