"""Gradient-based baselines: sklearn compatibility, the protocol's messages, fixed points,
equivalences, convergence feedback, differential privacy."""

import math
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_fed import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FedNovaRegressor,
    FedProxRegressor,
)
from sklearn_fed.datasets import make_heterogeneous_regression
from sklearn_fed.privacy import analytic_gaussian_std
from sklearn_fed.protocol import InvalidClientMessage, SitePolicy, TaskRefused, decode, encode
from sklearn_fed.utils.estimator_checks import run_protocol_by_hand

ALL = [FedAvgRegressor, FedProxRegressor, FedNovaRegressor, DPFedAvgRegressor]
NOT_PRIVATE = ALL[:3]

# DP-FedAvg's default epsilon=1 adds noise of std 75 per coordinate: no model
# fits the 200-row check data then (check_regressors_train wants R^2 > 0.5),
# so the checks run it with a huge budget; the noise code path still runs.
# scikit-learn's weight checks use weights above 1: DP-FedAvg's checks declare a bound.
@parametrize_with_checks(
    [FedAvgRegressor(), FedProxRegressor(), FedNovaRegressor(),
     DPFedAvgRegressor(epsilon=1e7, max_sample_weight=100.0)],
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
    """The textbook algorithms, one client and one batch at a time.

    Draws the server's random numbers as the protocol does: each round one
    shuffling seed per participant, from which the site draws one permutation
    of its rows per epoch.
    """
    sw = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
    Xc = X - np.average(X, axis=0, weights=sw)
    yc = y - np.average(y, weights=sw)
    labels = np.unique(clients)
    rows = [np.flatnonzero(clients == label) for label in labels]
    n = np.array([len(r) for r in rows])
    S_k = np.array([sw[r].sum() for r in rows])
    S, p = S_k.sum(), S_k / S_k.sum()
    server = np.random.RandomState(random_state)
    coef = np.zeros(X.shape[1])
    for _ in range(rounds):
        seeds = server.randint(0, 2**32, size=len(rows), dtype=np.int64)
        local, taus = [], []
        for k, r in enumerate(rows):
            B = n[k] if batch_size is None else min(batch_size, n[k])
            site = np.random.default_rng(seeds[k])
            w, tau = coef.copy(), 0
            for _ in range(epochs):
                order = np.arange(n[k]) if B == n[k] else site.permutation(n[k])
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


def _replies(estimator, X, y, clients, **kwargs):
    """Run the protocol by hand; returns the server and every decoded reply, in order."""
    seen = []

    def record(site, reply):
        seen.append((site, decode(reply, client=site)))
        return reply

    server, _ = run_protocol_by_hand(estimator, X, y, clients, tamper=record, **kwargs)
    return server, seen


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
def test_protocol_rounds_equal_per_client_loops(cls, extra, ref, batch_size):
    X, y, clients = _data(n=100, d=4, n_clients=4, seed=3)
    clients[:30] = 0  # unequal client sizes: unequal local steps with minibatches
    clients[30:40] = 1
    clients[40:50] = 2  # two sites of 10 rows train together in the simulation
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
    assert [h["train_mse"] for h in prox.history_] == [h["train_mse"] for h in avg.history_]
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
    # full batches (the default): every client takes local_epochs steps, so equal again
    nova = FedNovaRegressor(n_rounds=10).fit(X, y, clients=unequal)
    avg = FedAvgRegressor(n_rounds=10).fit(X, y, clients=unequal)
    np.testing.assert_allclose(nova.coef_, avg.coef_, rtol=1e-12)


def test_paper_setting_converges_toward_but_not_to_centralized():
    # A small version of the one-shot paper's default (Sec. V-A): eta=0.01, E=5.
    X, _, y, _, clients, _ = make_heterogeneous_regression(
        n_clients=5, n_samples_per_client=60, n_features=8, heterogeneity=1.0,
        random_state=0,
    )
    ridge_objective = _objective(Ridge(alpha=0.01).fit(X, y), X, y, 0.01)
    gaps = []
    for rounds in (10, 50, 300):
        fed = FedAvgRegressor(alpha=0.01, learning_rate=0.01, n_rounds=rounds)
        fed.fit(X, y, clients=clients)
        gaps.append(_objective(fed, X, y, 0.01) / ridge_objective - 1)
    assert gaps[0] > gaps[1] > gaps[2] > 0  # monotone toward, never below
    assert gaps[2] < 1e-3


# ---------------------------------------------------------------- defaults
def test_auto_learning_rate_fits_any_feature_scale():
    # Features in the thousands with offsets: a fixed step of 0.01 diverges at
    # once, "auto" (1 / the sites' curvature bound) fits as well as Ridge.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 5)) * [1.0, 10.0, 100.0, 1000.0, 3.0] + [0, 50, 0, 5e3, 1]
    y = X @ [1.0, 0.1, 0.01, 0.001, -1.0] + rng.normal(size=600)
    X_std = (X - X.mean(axis=0)) / X.std(axis=0)
    clients = rng.integers(0, 4, size=600)
    ridge = Ridge(alpha=1.0).fit(X_std, y).score(X_std, y)
    fed = FedAvgRegressor().fit(X_std, y, clients=clients)
    assert fed.score(X_std, y) > ridge - 1e-3
    # the curvature bound: 1 / (max_k mean ||x - x_mean||^2 over site k + alpha / S)
    spread = max(((X_std[clients == k] - X_std.mean(axis=0)) ** 2).sum(axis=1).mean()
                 for k in range(4))
    assert fed.learning_rate_ == pytest.approx(1 / (spread + 1.0 / 600), rel=1e-12)
    with pytest.raises(ValueError, match=r"site \d: local training diverged in round \d+"):
        with pytest.warns(ConvergenceWarning, match="diverging"):
            FedAvgRegressor(learning_rate=0.01).fit(X, y, clients=clients)


# ---------------------------------------------------------------- messages, bytes
@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_messages_history_and_ledger(cls, fit_intercept):
    X, y, clients = _data(n=100, d=6, n_clients=5, t=2)
    est = cls(n_rounds=4, client_fraction=0.6, fit_intercept=fit_intercept,
              batch_size=9, random_state=0, learning_rate=0.01)
    server, replies = _replies(est, X, y, clients)
    est = server.estimator
    K, m, d, t = 5, 3, 6, 2
    private = cls is DPFedAvgRegressor
    setup, rounds = replies[:K], replies[K:]
    assert len(rounds) == 4 * m
    for _, frame in setup:  # S_k (and the means, to center: never when private)
        assert frame.fields.keys() == {"weight_sum", "y_ndim"}
        centered = fit_intercept and not private
        assert {k: v.shape for k, v in frame.arrays.items()} == (
            {"x_mean": (d,), "y_mean": (t,)} if centered else {})
    for _, frame in rounds:
        if private:  # a clipped, noised update; the intercept is one more coordinate
            assert frame.fields.keys() == {"steps"}
            assert frame.arrays["update"].shape == (d + fit_intercept, t)
        else:
            assert frame.fields.keys() == {"steps", "loss"}
            assert frame.arrays["coef"].shape == (d, t)
    ledger = est.communication_
    assert ledger.rounds == 5 and est.n_rounds_ == len(est.history_) == 4
    assert sum(h["uplink_bytes"] for h in est.history_) == ledger.uplink_bytes
    assert sum(h["downlink_bytes"] for h in est.history_) == ledger.downlink_bytes
    assert [h["n_participants"] for h in est.history_] == [m] * 4
    assert est.history_[0]["uplink_bytes"] == sum(
        frame.nbytes for _, frame in setup + rounds[:m])
    assert ledger.n_parameters == (d + fit_intercept) * t


def test_hostile_replies_are_refused_naming_the_site():
    X, y, clients = _data(n=60, d=3)

    def forge(change):
        def tamper(site, reply):
            frame = decode(reply, client=site)
            if site == 1 and change(frame):
                return encode(frame)
            return reply
        return tamper

    def huge_model(frame):
        if "coef" not in frame.arrays:
            return False
        frame.arrays["coef"] = np.full_like(frame.arrays["coef"], 1e200)
        return True

    def bad_steps(frame):
        if "steps" not in frame.fields:
            return False
        frame.fields["steps"] = -3
        return True

    for change, match in [(huge_model, "magnitude 1e\\+200"), (bad_steps, "'steps'")]:
        est = FedNovaRegressor(n_rounds=2)
        with pytest.raises(InvalidClientMessage, match=f"client 1: .*{match}"):
            run_protocol_by_hand(est, X, y, clients, tamper=forge(change))
        assert not hasattr(est, "coef_")


def test_train_mse_is_reported_by_the_sites():
    X, y, clients = _data(n=90, d=3)
    est = FedAvgRegressor(n_rounds=3, learning_rate=0.05).fit(X, y, clients=clients)
    first = np.mean((y - y.mean()) ** 2)  # the zero model (intercept: the mean)
    assert est.history_[0]["train_mse"] == pytest.approx(first, rel=1e-12)
    before_last = clone(est).set_params(n_rounds=2).fit(X, y, clients=clients)
    mse = np.mean((before_last.predict(X) - y) ** 2)
    assert est.history_[-1]["train_mse"] == pytest.approx(mse, rel=1e-10)


# ---------------------------------------------------------------- partial_fit
@pytest.mark.parametrize("cls", NOT_PRIVATE)
def test_partial_fit_is_exactly_one_more_round(cls):
    X, y, clients = _data(n=90, d=3, n_clients=3)
    params = dict(n_rounds=4, batch_size=10, client_fraction=0.7, random_state=0)
    est = cls(**params).fit(X, y, clients=clients)
    mse = [h["train_mse"] for h in est.history_]
    est.partial_fit(X, y, clients=clients)
    assert len(est.history_) == 5 and [h["train_mse"] for h in est.history_[:4]] == mse
    assert est.communication_.rounds == 5 + 2  # each call has its setup round
    # from scratch: R + 1 calls of partial_fit give the same model
    fresh = cls(**params)
    for _ in range(5):
        fresh.partial_fit(X, y, clients=clients)
    np.testing.assert_array_equal(fresh.coef_, est.coef_)
    longer = cls(**{**params, "n_rounds": 5}).fit(X, y, clients=clients)
    np.testing.assert_array_equal(est.coef_, longer.coef_)


@pytest.mark.parametrize("cls", ALL)
def test_partial_fit_validates_parameters_every_call(cls):
    X, y, clients = _data(n=60, d=3)
    est = cls(n_rounds=2).partial_fit(X, y, clients=clients)
    est.set_params(alpha=-50)
    with pytest.raises(ValueError, match="alpha"):
        est.partial_fit(X, y, clients=clients)


# ---------------------------------------------------------------- convergence
def test_divergence_warns_with_the_round_and_the_step():
    X, y, clients = _data(n=200, d=4)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    lr = 2.2 / np.linalg.eigvalsh(np.cov(X.T)).max()  # just unstable
    with pytest.warns(ConvergenceWarning, match=r"diverging: the training MSE .* grew from "
                      r".* in \d+ rounds\. Reduce learning_rate \(now [\d.]+\)"):
        FedAvgRegressor(learning_rate=lr, local_epochs=1, n_rounds=60).fit(
            X, y, clients=clients)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FedAvgRegressor(n_rounds=60).fit(X, y, clients=clients)  # "auto": no warning


# ---------------------------------------------------------------- sparse input
@pytest.mark.parametrize("cls", ALL)
def test_sparse_input_equals_dense(cls):
    X, y, clients = _data(n=90, d=5)
    X[X < 3.0] = 0.0
    params = dict(n_rounds=5, batch_size=8, random_state=0, learning_rate=0.01)
    if cls is DPFedAvgRegressor:
        params["epsilon"] = 1e7
    dense = cls(**params).fit(X, y, clients=clients)
    sparse = cls(**params).fit(sp.csr_matrix(X), y, clients=clients)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sparse.intercept_, dense.intercept_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sparse.predict(sp.csr_matrix(X)), dense.predict(X), rtol=1e-9)


# ---------------------------------------------------------------- DP-FedAvg
def test_dp_calibration_and_accounting():
    dp = DPFedAvgRegressor(epsilon=2.0, delta=1e-6, clip_norm=0.5, n_rounds=24)
    X, y, clients = _data(n=40, d=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # epsilon >= 1: the analytic mechanism, no warning
        dp.fit(X, y, clients=clients)
    z = 5 * analytic_gaussian_std(2.0, 1e-6)  # 25 releases compose to one of z / 5
    assert dp.noise_multiplier_ == pytest.approx(z, rel=1e-12)
    assert dp.noise_std_ == pytest.approx(z * 2 * 0.5, rel=1e-3)  # plus the grid's rounding
    assert dp.n_releases_ == 25
    epsilon, delta = dp.privacy_spent_
    assert delta == 1e-6 and epsilon == pytest.approx(2.0, rel=1e-9)  # exact composition
    dp.partial_fit(X, y, clients=clients)  # a setup and a round: two more releases
    assert dp.n_releases_ == 27 and dp.privacy_spent_[0] > epsilon
    dp.fit(X, y, clients=clients)  # refitting spends again: nothing is reset
    assert dp.n_releases_ == 52
    # an int random_state is a key (issue 27): a refit of the same rows is the same
    # release, from the same or a new estimator; other rows get other noise
    seeded = DPFedAvgRegressor(n_rounds=2, random_state=0)
    first = seeded.fit(X, y, clients=clients).coef_.copy()
    np.testing.assert_array_equal(seeded.fit(X, y, clients=clients).coef_, first)
    again = DPFedAvgRegressor(n_rounds=2, random_state=0).fit(X, y, clients=clients)
    np.testing.assert_array_equal(again.coef_, first)
    assert not np.array_equal(
        DPFedAvgRegressor(n_rounds=2, random_state=1).fit(X, y, clients=clients).coef_, first)


def test_dp_releases_only_noised_values():
    # Issue: clients announced exact weights and means, so intercept_ moved by
    # exactly (changed value) / n between neighbouring datasets at any epsilon.
    X, y, clients = _data(n=60, d=3)
    dp = DPFedAvgRegressor(n_rounds=2, random_state=0)
    _, replies = _replies(dp, X, y, clients)
    sizes = np.bincount(clients).astype(float)
    for site, frame in replies[:3]:
        assert not frame.arrays  # no means
        steps = frame.fields["weight_sum"]  # integers on the grid 2^-10: no float side channel
        assert type(steps) is int and abs(steps / 1024 - sizes[site]) > 1e-6  # noised
    assert all(frame.arrays.keys() == {"update"} and frame.arrays["update"].dtype == np.int64
               for _, frame in replies[3:])
    # neighbouring datasets, same noise: the intercept no longer moves by 1000 / n
    y2 = y.copy()
    y2[0] += 1000.0
    a = DPFedAvgRegressor(n_rounds=2, random_state=0).fit(X, y, clients=clients)
    b = DPFedAvgRegressor(n_rounds=2, random_state=0).fit(X, y2, clients=clients)
    assert abs((b.intercept_ - a.intercept_) - 1000.0 / 60) > 1.0


def test_dp_noise_is_fresh_for_every_release():
    X = np.tile(np.random.default_rng(0).normal(size=(20, 3)), (2, 1))
    y, clients = np.zeros(40), np.repeat([0, 1], 20)  # two identical sites
    _, replies = _replies(DPFedAvgRegressor(n_rounds=2, random_state=0), X, y, clients)
    updates = [frame.arrays["update"] for _, frame in replies[2:]]
    for i in range(4):
        for j in range(i):
            assert not np.allclose(updates[i], updates[j])
    # random_state=None: OS entropy, not numpy's global seed
    fits = []
    for _ in range(2):
        np.random.seed(0)
        fits.append(DPFedAvgRegressor(n_rounds=1).fit(X, y, clients=clients).coef_)
    assert not np.array_equal(*fits)


def test_dp_noise_is_gaussian_with_the_calibrated_std():
    # No signal (y = 0, tiny steps): one round's model is the weighted mean of
    # the clients' noise, std = noise_std * sqrt(sum p_k^2) ~ noise_std / 2.
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
    dp = DPFedAvgRegressor(epsilon=1e7, clip_norm=0.05, learning_rate=0.1,
                           n_rounds=1, random_state=0)
    dp.fit(X, y, clients=clients)
    previous = np.r_[dp.coef_, dp.intercept_]
    for _ in range(5):
        dp.partial_fit(X, y, clients=clients)
        model = np.r_[dp.coef_, dp.intercept_]
        move = np.linalg.norm(model - previous)
        assert 0.02 < move <= 0.05 + 1e-6  # clipped (far from optimum), noise ~0
        previous = model


def test_site_policy_bounds_what_a_site_releases():
    X, y, clients = _data(n=40, d=3)
    policy = SitePolicy(max_epsilon=1.0)
    for estimator, reason in [(DPFedAvgRegressor(epsilon=2.0, n_rounds=1), "epsilon=2.0 exceeds"),
                              (FedAvgRegressor(n_rounds=1), "only differentially private")]:
        server = estimator.make_server()
        task = server.next_tasks([0])[0]
        with pytest.raises(TaskRefused, match=reason):
            estimator.make_client(policy=policy).respond(task, X, y)
    # within the policy: the site calibrates the noise itself from the task
    dp = DPFedAvgRegressor(epsilon=1.0, n_rounds=1)
    task = dp.make_server().next_tasks([0])[0]
    reply = decode(dp.make_client(policy=policy).respond(task, X, y))
    assert type(reply.fields["weight_sum"]) is int


def test_dp_refuses_weights_above_its_bound_and_noises_the_weight_in_proportion():
    X, y, clients = _data(n=30, d=3)
    with pytest.raises(ValueError, match=r"sample weights in \[0, max_sample_weight=1\].*"
                                         r"raise max_sample_weight"):
        DPFedAvgRegressor(n_rounds=1).fit(X, y, sample_weight=np.full(30, 2.0),
                                          clients=clients)
    heavy = DPFedAvgRegressor(n_rounds=1, max_sample_weight=2.0, random_state=0).fit(
        X, y, sample_weight=np.full(30, 2.0), clients=clients)
    assert np.all(np.isfinite(heavy.coef_))
    # the setup release's sensitivity is the bound: the same multiplier, twice the noise
    light, doubled = (DPFedAvgRegressor(max_sample_weight=b).make_server()._weight_release
                      for b in (1.0, 2.0))
    assert doubled.std == pytest.approx(2 * light.std)


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
        with pytest.raises(ValueError, match="learning_rate"):
            cls(learning_rate="auto").fit(X, y)  # it would read the data
        wild = cls(learning_rate=1e3, local_epochs=20, n_rounds=3)
        assert np.all(np.isfinite(wild.fit(X, y).coef_))
    else:
        with pytest.raises(ValueError, match="diverged in round [0-9]+: .* learning_rate"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                cls(learning_rate=1e6, local_epochs=20).fit(X, y)


@pytest.mark.parametrize("cls", ALL)
def test_failed_partial_fit_leaves_estimator_unchanged(cls):
    X, y, clients = _data(n=60, d=3)
    est = cls(n_rounds=3, random_state=0).fit(X, y, clients=clients)
    before = pickle.dumps(est)
    with pytest.raises(ValueError, match="features"):
        est.partial_fit(X[:, :2], y, clients=clients)
    with pytest.raises(ValueError, match="targets"):
        est.partial_fit(X, np.c_[y, y], clients=clients)
    with pytest.raises(ValueError, match="1-D and 2-D"):
        est.partial_fit(X, y[:, None], clients=clients)
    if cls is not DPFedAvgRegressor:
        est.set_params(learning_rate=1e6, local_epochs=60)
        with pytest.raises(ValueError, match="diverged"), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.partial_fit(X, y, clients=clients)
        est.set_params(learning_rate="auto", local_epochs=5)
    assert pickle.dumps(est) == before
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
    assert math.isfinite(est.learning_rate_)
