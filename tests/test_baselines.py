"""Gradient-based baselines: sklearn compatibility, fixed points, equivalences, bytes."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_fed import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FedNovaRegressor,
    FedProxRegressor,
)
from sklearn_fed.datasets import make_heterogeneous_regression

ALL = [FedAvgRegressor, FedProxRegressor, FedNovaRegressor, DPFedAvgRegressor]


# DP-FedAvg's default epsilon=1 adds noise of std ~48 per coordinate: no model
# fits the 200-row check data then (check_regressors_train wants R^2 > 0.5),
# so the checks run it with a huge budget; the noise code path still runs.
@parametrize_with_checks(
    [FedAvgRegressor(), FedProxRegressor(), FedNovaRegressor(), DPFedAvgRegressor(epsilon=1e7)]
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# ---------------------------------------------------------------- helpers
def _data(n=120, d=4, n_clients=3, t=None, seed=0, shift=0.5):
    """Clients with shifted feature means (heterogeneous), standardized scale."""
    rng = np.random.default_rng(seed)
    clients = rng.integers(0, n_clients, size=n)
    X = rng.normal(size=(n, d)) + shift * rng.normal(size=(n_clients, d))[clients] + 3.0
    coef = rng.normal(size=(d,) if t is None else (d, t))
    y = X @ coef + 1.5 + 0.1 * rng.normal(size=(n,) if t is None else (n, t))
    return X, y, clients


def _loop_reference(X, y, clients, sample_weight, *, alpha, lr, epochs, batch_size,
                    rounds, mu=0.0, nova=False, random_state=0):
    """Per-client Python loops: the textbook algorithms, one client at a time.

    Draws the same shuffling keys as the vectorized code (one (K, n_max) block
    per epoch), so with a seed the two must agree to round-off.
    """
    sw = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
    Xc = X - np.average(X, axis=0, weights=sw)
    yc = y - np.average(y, weights=sw)
    labels = np.unique(clients)
    rows = [np.flatnonzero(clients == label) for label in labels]
    n = np.array([len(r) for r in rows])
    S_k = np.array([sw[r].sum() for r in rows])
    S, p, n_max = S_k.sum(), S_k / S_k.sum(), n.max()
    B = n_max if batch_size is None else min(batch_size, n_max)
    rng = np.random.RandomState(random_state)
    coef = np.zeros(X.shape[1])
    for _ in range(rounds):
        keys = [rng.random_sample((len(rows), n_max)) if B < n_max else None
                for _ in range(epochs)]
        local, taus = [], []
        for k, r in enumerate(rows):
            w, tau = coef.copy(), 0
            for e in range(epochs):
                if keys[e] is None:
                    order = np.arange(n[k])
                else:
                    order = np.argsort(keys[e][k] + (np.arange(n_max) >= n[k]))[: n[k]]
                for j in range(-(-n[k] // B)):
                    idx = r[order[j * B:(j + 1) * B]]
                    residual = sw[idx] * (Xc[idx] @ w - yc[idx])
                    grad = Xc[idx].T @ residual * n[k] / (len(idx) * S_k[k])
                    grad += alpha / S * w + mu * (w - coef)
                    w -= lr * grad
                    tau += 1
            local.append(w)
            taus.append(tau)
        local, taus = np.array(local), np.array(taus, float)
        if nova:
            coef = coef - (p @ taus) * ((p / taus) @ (coef - local))
        else:
            coef = p @ local
    return coef


def _objective(est, X, y, alpha, sample_weight=None):
    sw = np.ones(len(y)) if sample_weight is None else sample_weight
    return sw @ (y - est.predict(X)) ** 2 + alpha * np.sum(np.asarray(est.coef_) ** 2)


# ---------------------------------------------------------------- fixed point
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_one_client_full_batch_converges_to_ridge(fit_intercept, weighted):
    X, y, _ = _data(n=80, d=4)
    if not fit_intercept:
        X = X - X.mean(axis=0)  # keep plain GD well conditioned without centering
    sw = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y)) if weighted else None
    fed = FedAvgRegressor(
        alpha=3.0, fit_intercept=fit_intercept, learning_rate=0.5, local_epochs=1,
        n_rounds=400,
    ).fit(X, y, sample_weight=sw)
    ridge = Ridge(alpha=3.0, fit_intercept=fit_intercept).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(fed.coef_, ridge.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fed.intercept_, ridge.intercept_, rtol=1e-10, atol=1e-12)


def test_multi_target_matches_ridge_shapes_and_values():
    X, y, clients = _data(n=90, d=3, t=2)
    fed = FedAvgRegressor(alpha=1.0, learning_rate=0.5, local_epochs=1, n_rounds=300)
    fed.fit(X, y)
    ridge = Ridge(alpha=1.0).fit(X, y)
    assert fed.coef_.shape == ridge.coef_.shape == (2, 3)
    assert fed.intercept_.shape == (2,)
    np.testing.assert_allclose(fed.coef_, ridge.coef_, rtol=1e-9)
    np.testing.assert_allclose(fed.predict(X), ridge.predict(X), rtol=1e-9)
    y_col = y[:, :1]  # (n, 1) keeps Ridge's (1, d) coef shape
    assert FedAvgRegressor(n_rounds=2).fit(X, y_col).coef_.shape == (1, 3)


@pytest.mark.parametrize(
    "cls, extra, ref",
    [
        (FedAvgRegressor, {}, {}),
        (FedProxRegressor, {"mu": 0.3}, {"mu": 0.3}),
        (FedNovaRegressor, {}, {"nova": True}),
    ],
)
@pytest.mark.parametrize("batch_size", [None, 7])
def test_vectorized_rounds_equal_per_client_loops(cls, extra, ref, batch_size):
    X, y, clients = _data(n=100, d=4, n_clients=4, seed=3)
    clients[:30] = 0  # unequal client sizes: unequal local steps with minibatches
    sw = np.random.default_rng(2).uniform(0.2, 3.0, size=len(y))
    est = cls(alpha=2.0, learning_rate=0.05, local_epochs=3, batch_size=batch_size,
              n_rounds=6, random_state=0, **extra)
    est.fit(X, y, sample_weight=sw, clients=clients)
    expected = _loop_reference(X, y, clients, sw, alpha=2.0, lr=0.05, epochs=3,
                               batch_size=batch_size, rounds=6, **ref)
    np.testing.assert_allclose(est.coef_, expected, rtol=1e-10, atol=1e-13)


def test_fedprox_with_mu_zero_is_fedavg():
    X, y, clients = _data(n=150, d=5, n_clients=5)
    params = dict(batch_size=8, client_fraction=0.6, n_rounds=15, random_state=4)
    prox = FedProxRegressor(mu=0.0, **params).fit(X, y, clients=clients)
    avg = FedAvgRegressor(**params).fit(X, y, clients=clients)
    np.testing.assert_array_equal(prox.coef_, avg.coef_)
    assert prox.history_ == avg.history_
    # and mu > 0 really changes the local steps
    other = FedProxRegressor(mu=1.0, **params).fit(X, y, clients=clients)
    assert np.abs(other.coef_ - avg.coef_).max() > 1e-3


def test_fednova_equals_fedavg_when_local_steps_are_equal():
    X, y, _ = _data(n=120, d=4)
    clients = np.repeat(np.arange(4), 30)  # equal sizes -> equal steps per round
    params = dict(batch_size=7, n_rounds=10, random_state=0, learning_rate=0.05)
    nova = FedNovaRegressor(**params).fit(X, y, clients=clients)
    avg = FedAvgRegressor(**params).fit(X, y, clients=clients)
    np.testing.assert_allclose(nova.coef_, avg.coef_, rtol=1e-12)
    unequal = np.repeat(np.arange(4), [10, 20, 30, 60])
    nova = FedNovaRegressor(**params).fit(X, y, clients=unequal)
    avg = FedAvgRegressor(**params).fit(X, y, clients=unequal)
    assert np.abs(nova.coef_ - avg.coef_).max() > 1e-4


def test_paper_setting_converges_toward_but_not_to_centralized():
    # A small version of the one-shot paper's default (Sec. V-A): eta=0.01, E=5.
    X, _, y, _, clients, _ = make_heterogeneous_regression(
        n_clients=5, n_samples_per_client=60, n_features=8, heterogeneity=1.0,
        random_state=0,
    )
    ridge_objective = _objective(Ridge(alpha=0.01).fit(X, y), X, y, 0.01)
    gaps = []
    for rounds in (10, 50, 300):
        fed = FedAvgRegressor(alpha=0.01, n_rounds=rounds).fit(X, y, clients=clients)
        gaps.append(_objective(fed, X, y, 0.01) / ridge_objective - 1)
    assert gaps[0] > gaps[1] > gaps[2] > 0  # monotone toward, never below
    assert gaps[2] < 1e-3


# ---------------------------------------------------------------- history, bytes
@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_history_lengths_and_bytes(cls, fit_intercept):
    X, y, clients = _data(n=100, d=6, n_clients=5, t=2)
    est = cls(n_rounds=7, client_fraction=0.6, fit_intercept=fit_intercept,
              batch_size=9, random_state=0)
    est.fit(X, y, clients=clients)
    K, m, d, t = 5, 3, 6, 2
    extra = 1 if cls is FedNovaRegressor else 0
    setup = K * (1 + fit_intercept * (d + t))
    assert len(est.history_) == est.n_rounds_ == 7
    assert [h["round"] for h in est.history_] == list(range(1, 8))
    assert all(h["n_participants"] == m for h in est.history_)
    assert est.history_[0]["uplink_bytes"] == 8 * (m * (d * t + extra) + setup)
    assert est.history_[0]["downlink_bytes"] == 8 * (m * d * t + setup)
    for h in est.history_[1:]:
        assert h["uplink_bytes"] == 8 * m * (d * t + extra)
        assert h["downlink_bytes"] == 8 * m * d * t
    # train_mse is the global model's MSE on the training rows
    mse = np.mean((est.predict(X) - y) ** 2)
    np.testing.assert_allclose(est.history_[-1]["train_mse"], mse, rtol=1e-10)


def test_paper_fedavg_bytes():
    # d=100, K=20, no intercept, R rounds: R * K * d float64 values each way,
    # the 1.60 MB of the paper's FedAvg-100 row (plus K setup values).
    X, _, y, _, clients, _ = make_heterogeneous_regression(
        n_clients=20, n_samples_per_client=10, n_features=100, random_state=0)
    est = FedAvgRegressor(fit_intercept=False, n_rounds=3).fit(X, y, clients=clients)
    uplink = sum(h["uplink_bytes"] for h in est.history_)
    assert uplink == 8 * (3 * 20 * 100 + 20)


# ---------------------------------------------------------------- partial_fit
@pytest.mark.parametrize("cls", ALL)
def test_partial_fit_is_exactly_one_more_round(cls):
    X, y, clients = _data(n=90, d=3, n_clients=3)
    params = dict(n_rounds=4, batch_size=10, client_fraction=0.7, random_state=0)
    est = cls(**params).fit(X, y, clients=clients)
    history = list(est.history_)
    est.partial_fit(X, y, clients=clients)
    assert len(est.history_) == 5 and est.history_[:4] == history
    # from scratch: R + 1 calls of partial_fit give the same model and history
    fresh = cls(**params)
    for _ in range(5):
        fresh.partial_fit(X, y, clients=clients)
    np.testing.assert_array_equal(fresh.coef_, est.coef_)
    assert fresh.history_ == est.history_
    if cls is not DPFedAvgRegressor:  # DP's noise scale depends on n_rounds
        longer = cls(**{**params, "n_rounds": 5}).fit(X, y, clients=clients)
        np.testing.assert_array_equal(est.coef_, longer.coef_)
        assert est.history_ == longer.history_


# ---------------------------------------------------------------- DP-FedAvg
def test_dp_noise_scale_and_accounting():
    dp = DPFedAvgRegressor(epsilon=2.0, delta=1e-6, clip_norm=0.5, n_rounds=25)
    X, y, clients = _data(n=40, d=2)
    dp.fit(X, y, clients=clients)
    eps0 = 2.0 / 5
    assert dp.epsilon_per_round_ == pytest.approx(eps0)
    assert dp.noise_std_ == pytest.approx(0.5 * np.sqrt(2 * np.log(1.25e6)) / eps0)
    expected = np.sqrt(50 * np.log(1e6)) * eps0 + 25 * eps0 * np.expm1(eps0)
    assert dp.epsilon_spent_ == pytest.approx(expected)
    assert dp.delta_spent_ == pytest.approx(26e-6)
    dp.partial_fit(X, y, clients=clients)  # past n_rounds: keeps spending
    assert dp.epsilon_spent_ > expected


def test_dp_noise_is_gaussian_with_the_calibrated_std():
    # No signal (y = 0, tiny steps): one round's model is the weighted mean of
    # the clients' noise, std = noise_std * sqrt(sum p_k^2) = noise_std / 2.
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(400, 500)), np.zeros(400)
    clients = np.repeat(np.arange(4), 100)
    dp = DPFedAvgRegressor(epsilon=1.0, n_rounds=1, learning_rate=1e-12, random_state=0)
    dp.fit(X, y, clients=clients)
    sample_std = np.std(dp.coef_)
    # 500 draws: the sample std is within 10% of the truth with overwhelming odds
    assert abs(sample_std / (dp.noise_std_ / 2) - 1) < 0.1
    assert abs(np.mean(dp.coef_)) < 4 * dp.noise_std_ / 2 / np.sqrt(500)


def test_dp_clipping_bounds_each_round_move():
    X, y, clients = _data(n=90, d=4, n_clients=3)
    dp = DPFedAvgRegressor(epsilon=1e9, clip_norm=0.05, learning_rate=0.1,
                           n_rounds=1, random_state=0)
    dp.fit(X, y, clients=clients)
    previous = dp.coef_.copy()
    for _ in range(5):
        dp.partial_fit(X, y, clients=clients)
        move = np.linalg.norm(dp.coef_ - previous)
        assert 0.04 < move <= 0.05 + 1e-6  # clipped (far from optimum), noise ~0
        previous = dp.coef_.copy()


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("cls", ALL)
def test_bad_input_errors(cls):
    X, y, clients = _data(n=30, d=3)
    with pytest.raises(ValueError, match="clients must hold one label per row"):
        cls().fit(X, y, clients=clients[:-1])
    with pytest.raises(ValueError, match="learning_rate"):
        cls(learning_rate=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="client_fraction"):
        cls(client_fraction=0.0).fit(X, y)
    with pytest.raises(ValueError, match="batch_size"):
        cls(batch_size=0).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        cls().fit(np.where(X > 3, np.nan, X), y)
    if cls is DPFedAvgRegressor:  # clipping bounds every move: it cannot blow up
        wild = cls(learning_rate=1e3, local_epochs=20, n_rounds=3)
        assert np.all(np.isfinite(wild.fit(X, y).coef_))
    else:
        with pytest.raises(ValueError, match="diverged in round [0-9]+: .* learning_rate"):
            cls(learning_rate=1e6, local_epochs=20).fit(X, y)


@pytest.mark.parametrize("cls", ALL)
def test_failed_partial_fit_leaves_estimator_unchanged(cls):
    X, y, clients = _data(n=60, d=3)
    est = cls(n_rounds=3, random_state=0).fit(X, y, clients=clients)
    before = pickle.dumps(est)
    coef, history = est.coef_.copy(), list(est.history_)
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:, :2], y, clients=clients)
    with pytest.raises(ValueError, match="targets"):
        est.partial_fit(X, np.c_[y, y], clients=clients)
    with pytest.raises(ValueError, match="1-D and 2-D"):
        est.partial_fit(X, y[:, None], clients=clients)
    if cls is not DPFedAvgRegressor:
        est.set_params(learning_rate=1e6, local_epochs=60)
        with pytest.raises(ValueError, match="diverged"):
            est.partial_fit(X, y, clients=clients)
        est.set_params(learning_rate=0.01, local_epochs=5)
    np.testing.assert_array_equal(est.coef_, coef)
    assert est.history_ == history
    # and it continues exactly as if nothing had happened
    est.partial_fit(X, y, clients=clients)
    again = pickle.loads(before).partial_fit(X, y, clients=clients)
    np.testing.assert_array_equal(est.coef_, again.coef_)


def test_clients_none_is_one_client_and_labels_are_reported():
    X, y, _ = _data(n=40, d=2)
    est = FedAvgRegressor(n_rounds=3).fit(X, y)
    assert est.n_clients_ == 1 and est.clients_.tolist() == [0]
    est = FedAvgRegressor(n_rounds=3).fit(X, y, clients=np.where(X[:, 0] > 3, "b", "a"))
    assert est.clients_.tolist() == ["a", "b"]
    with pytest.raises(ValueError, match="NaN"):
        FedAvgRegressor().fit(X, y, clients=np.full(len(y), np.nan))
    assert clone(est).get_params() == est.get_params()
