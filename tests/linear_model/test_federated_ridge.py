"""FederatedRidge equals sklearn's Ridge on the same rows, whatever the clients."""

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import config_context
from sklearn.base import clone
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_fed import (
    ClientStatistics,
    FederatedRidge,
    FederatedRidgeCV,
    InvalidClientMessage,
    PrivateFederatedRidge,
)
from sklearn_fed.protocol import fedavg_bytes

RTOL64 = 1e-9


def _rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


def _assert_equal_to_ridge(fed, ridge, rtol=RTOL64):
    assert np.shape(fed.coef_) == np.shape(ridge.coef_)
    assert np.shape(fed.intercept_) == np.shape(ridge.intercept_)
    assert _rel_err(fed.coef_, ridge.coef_) <= rtol
    scale = max(np.abs(ridge.intercept_).max(), np.abs(ridge.coef_).max())
    assert np.abs(np.asarray(fed.intercept_) - ridge.intercept_).max() <= rtol * scale


def _data(n=120, d=6, t=None, seed=0, offset=0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + offset
    coef = rng.normal(size=(d,) if t is None else (d, t))
    y = (X - offset) @ coef + rng.normal(size=(n,) if t is None else (n, t)) + 3.0
    return X, y, rng


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_targets", [None, 3])
@pytest.mark.parametrize("n_clients", [1, 7, 120])
def test_equals_ridge(fit_intercept, weighted, n_targets, n_clients):
    X, y, rng = _data(t=n_targets)
    w = rng.uniform(0, 3, size=len(X)) if weighted else None
    clients = rng.integers(0, n_clients, size=len(X)) if n_clients > 1 else None
    if n_clients == 120:
        clients = rng.permutation(120)
    fed = FederatedRidge(alpha=0.7, fit_intercept=fit_intercept).fit(X, y, w, clients=clients)
    ridge = Ridge(alpha=0.7, fit_intercept=fit_intercept, solver="cholesky").fit(X, y, w)
    _assert_equal_to_ridge(fed, ridge)


def test_one_thousand_clients_and_offset_1e6():
    X, y, rng = _data(n=3000, d=8, offset=1e6)
    clients = rng.integers(0, 1000, size=len(X))
    fed = FederatedRidge(alpha=1.0).fit(X, y, clients=clients)
    # Reference on centered data (exactly the same problem): Ridge's own
    # centering of 1e6 offsets is itself only accurate to ~1e-10.
    ridge = Ridge(alpha=1.0).fit(X - 1e6, y)
    assert fed.n_clients_ == len(np.unique(clients))
    assert _rel_err(fed.coef_, ridge.coef_) <= RTOL64
    assert abs(fed.intercept_ - (ridge.intercept_ - 1e6 * ridge.coef_.sum())) <= 1e-9 * 1e6


def test_sparse_equals_ridge():
    X, y, rng = _data(n=200, d=10)
    X[rng.uniform(size=X.shape) < 0.7] = 0
    clients = rng.integers(0, 5, size=200)
    w = rng.uniform(size=200)
    ridge = Ridge(alpha=2.0).fit(X, y, w)
    for container in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix):
        fed = FederatedRidge(alpha=2.0).fit(container(X), y, w, clients=clients)
        _assert_equal_to_ridge(fed, ridge)


def test_more_features_than_rows():
    X, y, rng = _data(n=30, d=200)
    fed = FederatedRidge(alpha=0.5).fit(X, y, clients=np.arange(30) % 4)
    _assert_equal_to_ridge(fed, Ridge(alpha=0.5).fit(X, y))


def test_float32_input():
    X, y, rng = _data(n=500, d=5)
    X32, y32 = X.astype(np.float32), y.astype(np.float32)
    fed = FederatedRidge(alpha=1.0).fit(X32, y32, clients=np.arange(500) % 9)
    ridge = Ridge(alpha=1.0).fit(X32, y32)
    assert fed.coef_.dtype == ridge.coef_.dtype == np.float32
    _assert_equal_to_ridge(fed, ridge, rtol=1e-5)


def test_alpha_per_target():
    X, y, _ = _data(t=3)
    alpha = np.array([0.1, 1.0, 10.0])
    fed = FederatedRidge(alpha=alpha).fit(X, y, clients=np.arange(len(X)) % 3)
    _assert_equal_to_ridge(fed, Ridge(alpha=alpha).fit(X, y))
    with pytest.raises(ValueError, match="Number of targets and number of penalties"):
        FederatedRidge(alpha=np.array([1.0, 2.0])).fit(X, y)


@pytest.mark.parametrize("chunks", [2, 5, 17])
def test_partial_fit_in_chunks_equals_fit(chunks):
    X, y, rng = _data(n=170, t=2)
    w = rng.uniform(size=170)
    clients = rng.integers(0, 6, size=170)
    stream = FederatedRidge(alpha=0.3)
    for idx in np.array_split(np.arange(170), chunks):
        stream.partial_fit(X[idx], y[idx], w[idx], clients=clients[idx])
    _assert_equal_to_ridge(stream, Ridge(alpha=0.3).fit(X, y, w))
    assert stream.n_clients_ == 6 and set(stream.clients_) == set(range(6))
    assert stream.communication_.rounds == chunks


def test_fit_statistics_from_bytes_and_dropout():
    X, y, rng = _data(n=400)
    clients = rng.integers(0, 10, size=400)
    messages = {
        f"site-{k}": ClientStatistics.from_data(X[clients == k], y[clients == k]).to_bytes()
        for k in range(10)
    }
    fed = FederatedRidge(alpha=1.0).fit_statistics(messages)
    _assert_equal_to_ridge(fed, Ridge(alpha=1.0).fit(X, y))
    # Theorem 8: with half the clients silent, the result is Ridge on the survivors' rows.
    survivors = [f"site-{k}" for k in range(0, 10, 2)]
    fed.fit_statistics({name: messages[name] for name in survivors})
    keep = np.isin(clients, range(0, 10, 2))
    _assert_equal_to_ridge(fed, Ridge(alpha=1.0).fit(X[keep], y[keep]))
    assert list(fed.clients_) == survivors
    assert fed.n_features_in_ == X.shape[1]


def test_communication_counts_real_message_sizes():
    X, y, rng = _data(n=90, d=4)
    clients = np.repeat(["a", "b", "c"], 30)
    fed = FederatedRidge().fit(X, y, clients=clients)
    server = FederatedRidge().make_server()
    tasks = server.next_tasks(["a", "b", "c"])
    site = FederatedRidge().make_client()
    replies = {s: site.respond(tasks[s], X[clients == s], y[clients == s]) for s in tasks}
    ledger = fed.communication_
    assert ledger.uplink_bytes_per_client == {s: len(replies[s]) for s in replies}
    assert ledger.downlink_bytes_per_client == {s: len(tasks[s]) for s in tasks}
    assert ledger.rounds == 1
    assert ledger.fedavg_equivalent(200) == fedavg_bytes(5, 200, 3)
    assert fedavg_bytes(5, 200, 3)["uplink_bytes"] == 5 * 200 * 3 * 8


def test_clone_and_pickle_round_trip():
    X, y, _ = _data()
    fed = FederatedRidge(alpha=2.0).fit(X, y, clients=np.arange(len(X)) % 4)
    again = pickle.loads(pickle.dumps(fed))
    np.testing.assert_array_equal(again.predict(X), fed.predict(X))
    again.partial_fit(X, y, clients=np.arange(len(X)) % 4)  # state survives pickling
    assert clone(fed).get_params() == fed.get_params()
    assert not hasattr(clone(fed), "coef_")


@pytest.mark.parametrize(
    "solver, path, rounds", [("cholesky", "eigen", 1), ("auto", "svd", 2), ("svd", "svd", 1)]
)
def test_singular_statistics_give_the_minimum_norm_solution(solver, path, rounds):
    X = np.ones((10, 3))
    X[:, 1] = 2.0 * X[:, 0]
    X[:, 2] = np.arange(10.0)
    y = np.arange(10.0) + 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fed = FederatedRidge(alpha=0.0, fit_intercept=False, solver=solver).fit(
            X, y, clients=np.arange(10) % 3
        )
    minimum_norm = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(fed.coef_, minimum_norm, rtol=1e-12)
    assert fed.solver_ == path and fed.communication_.rounds == rounds


# ------------------------------------------------------------------ pipelines
def test_clients_through_pipeline_and_grid_search_without_routing():
    X, y, rng = _data(n=150)
    clients = rng.integers(0, 5, size=150)
    pipe = make_pipeline(StandardScaler(), FederatedRidge())
    pipe.fit(X, y, federatedridge__clients=clients)
    assert pipe[-1].n_clients_ == 5
    search = GridSearchCV(pipe, {"federatedridge__alpha": [0.1, 10.0]}, cv=3)
    search.fit(X, y, federatedridge__clients=clients)
    assert search.best_estimator_[-1].n_clients_ == 5


def test_clients_through_pipeline_and_grid_search_with_routing():
    X, y, rng = _data(n=150)
    clients = rng.integers(0, 5, size=150)
    with config_context(enable_metadata_routing=True):
        ridge = FederatedRidge().set_fit_request(clients=True)
        pipe = make_pipeline(StandardScaler(), ridge)
        pipe.fit(X, y, clients=clients)
        assert pipe[-1].n_clients_ == 5
        # One array feeds both GroupKFold (as groups) and the estimator (as clients).
        grouped = FederatedRidge().set_fit_request(clients="groups")
        search = GridSearchCV(
            make_pipeline(StandardScaler(), grouped), {"federatedridge__alpha": [0.1, 10.0]},
            cv=GroupKFold(n_splits=5),
        )
        seen = []
        original = FederatedRidge.fit

        def spy(self, X, y, sample_weight=None, clients=None):
            seen.append(np.unique(clients))
            return original(self, X, y, sample_weight, clients)

        FederatedRidge.fit = spy
        try:
            search.fit(X, y, groups=clients)
        finally:
            FederatedRidge.fit = original
    # Each training fold sees exactly 4 of the 5 clients: whole clients held out.
    assert all(len(labels) == 4 for labels in seen[:-1])
    assert len(seen[-1]) == 5  # the refit on everything


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(X=np.array([[np.nan, 1.0], [1.0, 2.0]])), "NaN"),
        (dict(X=np.array([[np.inf, 1.0], [1.0, 2.0]])), "infinity"),
        (dict(clients=[0, 1, 2]), "one label per row"),
        (dict(X=np.ones((2, 3))), "3 features"),
        (dict(sample_weight=np.array([1.0, -1.0])), "(?i)negative"),
    ],
)
def test_failed_partial_fit_leaves_model_unchanged(kwargs, error):
    X, y, _ = _data(n=50, d=2)
    fed = FederatedRidge().partial_fit(X, y, clients=np.arange(50) % 3)
    before = pickle.dumps(fed)
    call = dict(X=X[:2], y=y[:2], sample_weight=None, clients=None) | kwargs
    with pytest.raises(ValueError, match=error):
        fed.partial_fit(call["X"], call["y"], call["sample_weight"], clients=call["clients"])
    assert pickle.dumps(fed) == before


def test_negative_alpha_is_rejected():
    X, y, _ = _data(n=20, d=2)
    with pytest.raises(ValueError, match="alpha"):
        FederatedRidge(alpha=-1.0).fit(X, y)


def test_bad_message_rejects_whole_round():
    X, y, _ = _data(n=60, d=3)
    good = ClientStatistics.from_data(X[:30], y[:30]).to_bytes()
    other = ClientStatistics.from_data(X[30:, :2], y[30:]).to_bytes()
    fed = FederatedRidge().fit_statistics([good, good])
    before = pickle.dumps(fed)
    cases = [
        ({"ok": good, "broken": good[:-5]}, "client 'broken'.*truncated"),
        ({"ok": good, "wide": other}, "client 'wide'.*2 features, expected 3"),
        ({"ok": good, "junk": b"\x00" * len(good)}, "client 'junk'.*magic"),
        ({"ok": good, "obj": object()}, "client 'obj'.*expected ClientStatistics"),
    ]
    for messages, error in cases:
        with pytest.raises(InvalidClientMessage, match=error):
            fed.fit_statistics(messages)
        assert pickle.dumps(fed) == before
    zero = ClientStatistics.from_bytes(good)
    zero.n_samples = 0
    with pytest.raises(InvalidClientMessage, match="client 1: n_samples must be a positive integer"):
        fed.fit_statistics([good, zero])


def test_uncentered_message_with_intercept_is_rejected():
    X, y, _ = _data(n=20, d=2)
    raw = ClientStatistics.from_data(X, y, centered=False)
    with pytest.raises(InvalidClientMessage, match="uncentered but fit_intercept=True"):
        FederatedRidge().fit_statistics([raw])


def test_changing_fit_intercept_mid_stream_is_an_error():
    X, y, _ = _data(n=20, d=2)
    fed = FederatedRidge().partial_fit(X, y)
    fed.set_params(fit_intercept=False)
    with pytest.raises(ValueError, match="fit_intercept changed"):
        fed.partial_fit(X, y)


def test_no_warning_on_regular_fit():
    X, y, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FederatedRidge().fit(X, y, clients=np.arange(len(X)) % 3)


def test_mixed_type_client_labels_are_kept():
    X, y, _ = _data(n=40, d=2)
    clients = np.array([1, "a"] * 20, dtype=object)
    fed = FederatedRidge().fit(X, y, clients=clients)
    assert sorted(map(str, fed.clients_.tolist())) == ["1", "a"]
    assert 1 in fed.clients_.tolist() and "a" in fed.clients_.tolist()
    assert set(fed.communication_.uplink_bytes_per_client) == {1, "a"}


# ------------------------------------------------- near-singular regimes (issue 13)
def _objective(X, y, coef, intercept, alpha):
    """Ridge objective in long double: |y - X w - b|^2 + alpha |w|^2."""
    L = np.longdouble
    residual = y.astype(L) - X.astype(L) @ np.asarray(coef, dtype=L) - L(intercept)
    return float(residual @ residual + L(alpha) * (np.asarray(coef, dtype=L) @ coef))


@pytest.mark.filterwarnings("ignore::scipy.linalg.LinAlgWarning")  # Ridge's, the reference
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("solver", ["auto", "cholesky", "svd"])
@pytest.mark.parametrize("n_clients", [1, 7])
def test_alpha_1e16_on_wide_data_gives_ridges_minimum_norm_solution(
    fit_intercept, solver, n_clients
):
    """50 x 100, alpha=1e-16: used to miss Ridge by 0.7-2.4% in norm."""
    from sklearn.datasets import make_regression

    X, y = make_regression(n_samples=50, n_features=100, noise=0, bias=10, random_state=42)
    fed = FederatedRidge(alpha=1e-16, fit_intercept=fit_intercept, solver=solver).fit(
        X, y, clients=np.arange(50) % n_clients)
    ridge = Ridge(alpha=1e-16, fit_intercept=fit_intercept).fit(X, y)
    np.testing.assert_allclose(fed.coef_, ridge.coef_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(fed.intercept_, ridge.intercept_, rtol=0, atol=1e-10)


@pytest.mark.parametrize("solver", ["auto", "cholesky", "svd"])
@pytest.mark.parametrize("n_clients", [1, 7])
def test_alpha_1e16_on_centered_square_data(solver, n_clients):
    """50 x 50 with an intercept (rank 49 once centered), alpha=1e-16."""
    from sklearn.datasets import make_regression

    X, y = make_regression(n_samples=50, n_features=50, noise=0, bias=10, random_state=42)
    fed = FederatedRidge(alpha=1e-16, solver=solver).fit(X, y, clients=np.arange(50) % n_clients)
    ridge = Ridge(alpha=1e-16).fit(X, y)
    np.testing.assert_allclose(fed.coef_, ridge.coef_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(fed.intercept_, ridge.intercept_, rtol=0, atol=1e-10)


def _nineteen_constant_columns():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(98, 26))
    X[:, 7:] = rng.normal(size=19)  # 19 constant columns
    y = X @ rng.normal(size=26) + 0.5 * rng.normal(size=98)
    return X + 1e6, y


def _exact_ridge_without_intercept(X, y, alpha):
    """``(X^T X + alpha I)^-1 X^T y`` with 60 digits (mpmath), rounded to float64."""
    import mpmath

    with mpmath.workdps(60):
        Xm, ym = mpmath.matrix(X.tolist()), mpmath.matrix(y.reshape(-1, 1).tolist())
        A = Xm.T * Xm + alpha * mpmath.eye(X.shape[1])
        w = mpmath.lu_solve(A, Xm.T * ym)
        return np.array([float(w[i]) for i in range(X.shape[1])])


@pytest.mark.parametrize("n_clients", [1, 7])
def test_constant_columns_with_offsets_and_no_intercept(n_clients):
    """98 x 26, 19 constant columns, offsets of 1e6, no intercept: was 12.5% off with
    a higher objective than Ridge's; now within 1e-8 of the 60-digit solution.

    The reference is exact, not scikit-learn's Ridge: Ridge's Cholesky on this
    Gram (rcond 8e-18) is 5e-9 from the exact answer under OpenBLAS's Haswell
    kernel and 122% under SkylakeX (issue 27)."""
    X, y = _nineteen_constant_columns()
    fed = FederatedRidge(fit_intercept=False).fit(X, y, clients=np.arange(98) % n_clients)
    exact = _exact_ridge_without_intercept(X, y, 1.0)
    assert fed.solver_ == "svd" and fed.communication_.rounds == 2
    assert np.linalg.norm(fed.coef_ - exact) <= 1e-8 * np.linalg.norm(exact)
    ours, best = (_objective(X, y, coef, 0.0, 1.0) for coef in (fed.coef_, exact))
    assert ours <= best * (1 + 1e-12)


def test_one_row_with_offsets_and_no_intercept():
    """n=1, d=2, offsets of 1e6: was 3.3e-7 off; Ridge agrees with long double to 7e-17."""
    X, y = np.array([[1e6 + 0.3, 1e6 - 0.7]]), np.array([2.0])
    exact = X[0] * y[0] / (X[0] @ X[0] + 1.0)  # (x x^T + I)^-1 x y = x y / (|x|^2 + 1)
    for solver in ("auto", "cholesky", "svd"):
        fed = FederatedRidge(fit_intercept=False, solver=solver).fit(X, y)
        np.testing.assert_allclose(fed.coef_, exact, rtol=1e-15)


@pytest.mark.parametrize("estimator", [FederatedRidge(), FederatedRidgeCV()])
def test_shapes_and_types_are_ridges(estimator):
    """y of shape (n, 1) gives coef_ (d,) and intercept_ (1,), as Ridge; and so on."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 3)), rng.normal(size=12)
    reference = RidgeCV() if isinstance(estimator, FederatedRidgeCV) else Ridge()
    for fit_intercept in (True, False):
        for dtype in (np.float64, np.float32):
            for target in (y, y[:, None], np.c_[y, y + 1]):
                ours = clone(estimator).set_params(fit_intercept=fit_intercept).fit(
                    X.astype(dtype), target.astype(dtype), clients=np.arange(12) % 3)
                theirs = clone(reference).set_params(fit_intercept=fit_intercept).fit(
                    X.astype(dtype), target.astype(dtype))
                for name in ("coef_", "intercept_"):
                    a, b = getattr(ours, name), getattr(theirs, name)
                    assert np.shape(a) == np.shape(b) and type(a) is type(b), name
                    assert getattr(a, "dtype", None) == getattr(b, "dtype", None), name
                prediction = ours.predict(X.astype(dtype))
                assert prediction.shape == theirs.predict(X.astype(dtype)).shape
                assert prediction.dtype == dtype


def test_string_alpha_raises_like_ridge():
    X, y = np.ones((4, 2)), np.arange(4.0)
    for estimator in (FederatedRidge(alpha="1"), Ridge(alpha="1")):
        with pytest.raises(TypeError, match="alpha"):
            estimator.fit(X, y)


def test_sparse_factor_messages_equal_ridge():
    X, y, rng = _data(n=200, d=10, offset=30.0)
    X[rng.uniform(size=X.shape) < 0.6] = 0
    w = rng.uniform(size=200)
    for fit_intercept in (True, False):
        ridge = Ridge(alpha=0.5, fit_intercept=fit_intercept).fit(X, y, w)
        for solver in ("svd", "cholesky"):
            fed = FederatedRidge(alpha=0.5, fit_intercept=fit_intercept, solver=solver).fit(
                sp.csr_matrix(X), y, w, clients=np.arange(200) % 6)
            _assert_equal_to_ridge(fed, ridge)


def test_factor_and_gram_messages_mix_on_the_server():
    """A site answering a factor task with Gram statistics (an older site) is accepted."""
    X, y, _ = _data(n=90, d=4)
    parts = {k: (X[k::3], y[k::3]) for k in range(3)}
    messages = {k: ClientStatistics.from_data(*parts[k], factor=k != 1).to_bytes()
                for k in range(3)}
    fed = FederatedRidge(alpha=0.1).fit_statistics(messages)
    _assert_equal_to_ridge(fed, Ridge(alpha=0.1).fit(X, y))
    assert fed.solver_ == "cholesky"  # a Gram message makes the aggregate a Gram
    factors = {k: m for k, m in messages.items() if k != 1}
    fed.fit_statistics(factors)
    keep = np.arange(90) % 3 != 1
    _assert_equal_to_ridge(fed, Ridge(alpha=0.1).fit(X[keep], y[keep]))
    assert fed.solver_ == "svd"


def test_partial_fit_after_escalation_stays_in_factor_form():
    X, y, rng = _data(n=60, d=80)
    stream = FederatedRidge(alpha=1e-10)
    for part in np.array_split(np.arange(60), 3):
        stream.partial_fit(X[part], y[part], clients=part % 4)
    assert stream.solver_ == "svd"
    assert stream.communication_.rounds == 4  # the first call escalated once
    ridge = Ridge(alpha=1e-10, solver="svd").fit(X, y)
    np.testing.assert_allclose(stream.coef_, ridge.coef_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("make", [
    lambda: FederatedRidge(solver="auto"),
    lambda: FederatedRidge(solver="cholesky"),
    lambda: FederatedRidge(solver="svd"),
    lambda: PrivateFederatedRidge(feature_bound=2.0, target_bound=2.0, random_state=0),
    lambda: PrivateFederatedRidge(feature_bound=2.0, target_bound=2.0, noise="distributed",
                                  random_state=0),
], ids=["auto", "cholesky", "svd", "private local", "private distributed"])
@pytest.mark.parametrize("layout", ["one site", "three sites", "zero weight", "sparse"])
def test_non_finite_X_gets_scikit_learns_error(bad, make, layout):
    """fit proves a dense X finite through its statistics, not by a scan of its own;
    every path still ends in scikit-learn's error naming X, and nothing is fitted."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((30, 4)), rng.standard_normal(30)
    X[7, 2] = bad
    clients = np.arange(30) % 3 if layout != "one site" else None
    sample_weight = None
    if layout == "zero weight":  # a row no site's statistics read
        sample_weight = np.ones(30)
        sample_weight[7] = 0.0
    if layout == "sparse":
        X = sp.csr_matrix(np.where(rng.random((30, 4)) < 0.5, X, 0.0) + np.where(
            np.isfinite(X), 0.0, X))
    model = make()
    with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
        model.fit(X, y, sample_weight=sample_weight, clients=clients)
    assert not hasattr(model, "coef_")
