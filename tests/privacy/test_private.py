"""PrivateFederatedRidge and the privacy module.

Calibration, clipping, noise, secure aggregation, accounting.
"""

import math
import pickle
import warnings

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from sklearn import config_context
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_fed import FederatedRidge, PrivateFederatedRidge
from sklearn_fed.linear_model._private import project_psd
from sklearn_fed.linear_model._private_release import (
    clip_rows,
    clipped_sums,
    joint_sensitivity,
    released_sums,
)
from sklearn_fed.privacy import (
    ClippingWarning,
    MaskingKey,
    PrivacyLedger,
    RangeScaler,
    SecureAggregator,
    analytic_gaussian_std,
    classic_gaussian_std,
    composed_noise_multiplier,
    gaussian_noise_std,
)
from sklearn_fed.privacy._secure_aggregation import (
    fixed_point_encode,
    mask_vector,
    max_abs_encoded,
    unmask_sum,
)
from sklearn_fed.protocol import InvalidClientMessage, SitePolicy, TaskRefused, decode, encode
from sklearn_fed.statistics import ClientStatistics


# Most tests here clip on purpose; the tests of the warning itself still see it.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn_fed.privacy.ClippingWarning")


def _data(n=300, d=4, t=None, seed=0, scale=0.6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * scale / np.sqrt(d)
    coef = rng.normal(size=(d,) if t is None else (d, t))
    y = X @ coef + 0.05 * rng.normal(size=(n,) if t is None else (n, t))
    clients = rng.integers(0, 4, size=n)
    return X, y, clients


@pytest.mark.filterwarnings("ignore::sklearn_fed.privacy.ClippingWarning")
@parametrize_with_checks([PrivateFederatedRidge()])  # no expected failures (issue 27)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# ------------------------------------------------------------ noise switched off
@pytest.mark.parametrize("noise", ["local", "distributed"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("t", [None, 2])
def test_infinite_epsilon_equals_federated_ridge_on_clipped_rows(noise, fit_intercept, t):
    X, y, clients = _data(t=t, scale=2.0)  # many rows outside the unit ball
    X[0] *= 1e4
    Xc, yc = clip_rows(X, y, 0.8, 1.5)
    private = PrivateFederatedRidge(
        alpha=0.3, epsilon=np.inf, feature_bound=0.8, target_bound=1.5, noise=noise,
        fit_intercept=fit_intercept,
    ).fit(X, y, clients=clients)
    exact = FederatedRidge(alpha=0.3, fit_intercept=fit_intercept).fit(Xc, yc, clients=clients)
    # The sums travel on a grid of 2^-30 of the sensitivity (64-bit fixed point).
    tol = 1e-8
    assert_allclose(private.coef_, exact.coef_, rtol=tol, atol=tol)
    assert_allclose(private.intercept_, exact.intercept_, rtol=tol, atol=tol)
    assert private.noise_std_ == 0.0
    assert private.privacy_spent_[0] == math.inf


def test_sparse_input_matches_dense():
    X, y, clients = _data(scale=2.0)
    X[X < 0] = 0
    kwargs = dict(epsilon=0.7, random_state=3)
    dense = PrivateFederatedRidge(**kwargs).fit(X, y, clients=clients)
    sparse = PrivateFederatedRidge(**kwargs).fit(sp.csr_matrix(X), y, clients=clients)
    assert_allclose(sparse.coef_, dense.coef_, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------- clipping
def test_clip_rows_enforces_bounds_and_keeps_inner_rows():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 5)) * rng.uniform(0.01, 3, size=(200, 1))
    y = rng.normal(size=200) * 3
    Xc, yc = clip_rows(X, y, 1.0, 2.0)
    norms = np.linalg.norm(X, axis=1)
    assert np.all(np.linalg.norm(Xc, axis=1) <= 1.0 + 1e-12)
    assert np.all(np.abs(yc) <= 2.0)
    inner = norms <= 1.0
    assert_array_equal(Xc[inner], X[inner])
    # Clipping only rescales: direction is kept.
    assert_allclose(Xc[~inner] * norms[~inner, None], X[~inner], rtol=1e-12)
    Y = rng.normal(size=(200, 3)) * 3
    _, Yc = clip_rows(X, Y, 1.0, 2.0)
    assert np.all(np.linalg.norm(Yc, axis=1) <= 2.0 + 1e-12)


def test_one_row_moves_release_by_at_most_the_sensitivity():
    """Brute force: for random rows (any scale), the released vector moves by <= Delta."""
    rng = np.random.default_rng(2)
    bx, by = 1.7, 0.6
    for fit_intercept in (True, False):
        delta = joint_sensitivity(bx, by, fit_intercept)
        worst = 0.0
        for _ in range(300):
            x = rng.normal(size=(1, 6)) * rng.uniform(0, 4)
            y = rng.normal(size=1) * rng.uniform(0, 4)
            xc, yc = clip_rows(x, y, bx, by)
            stats = ClientStatistics.from_data(xc, yc, centered=False)
            worst = max(worst, np.linalg.norm(released_sums(stats, fit_intercept)))
        assert worst <= delta + 1e-12
        # The bound is attained by an axis-aligned row at the bounds.
        x = np.zeros((1, 6))
        x[0, 2] = bx
        stats = ClientStatistics.from_data(x, np.array([by]), centered=False)
        assert_allclose(np.linalg.norm(released_sums(stats, fit_intercept)), delta)


# ------------------------------------------------------------------ calibration
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_analytic_sigma_matches_dp_accounting(epsilon):
    model = PrivateFederatedRidge(epsilon=epsilon, feature_bound=2.0, target_bound=0.5)
    X, y, clients = _data()
    model.fit(X, y, clients=clients)
    expected_delta = math.sqrt(1 + 4 + 0.25 + 16 + 4 * 0.25)
    # Plus the rounding of the sums to the grid: at most 2^-10 of Delta.
    assert expected_delta < model.sensitivity_ <= expected_delta * (1 + 2**-10)
    assert_allclose(
        model.noise_std_, model.sensitivity_ * dp_accounting.get_sigma_gaussian(epsilon, 1e-5)
    )
    # And the Gaussian mechanism with that noise multiplier spends exactly epsilon.
    spent = dp_accounting.get_epsilon_gaussian(model.noise_std_ / model.sensitivity_, 1e-5)
    assert_allclose(spent, epsilon, rtol=1e-6)
    assert_allclose(model.privacy_spent_[0], epsilon, rtol=1e-3)


def test_classic_calibration_formula_and_its_validity_range():
    assert_allclose(
        classic_gaussian_std(0.5, 1e-5, 3.0), 3.0 * math.sqrt(2 * math.log(1.25e5)) / 0.5
    )
    # The classic bound is looser than the analytic one where both hold.
    assert classic_gaussian_std(0.5, 1e-5) > analytic_gaussian_std(0.5, 1e-5)
    with pytest.warns(UserWarning, match="epsilon < 1"):
        classic_gaussian_std(2.0, 1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        classic_gaussian_std(0.9, 1e-5)
    with pytest.raises(ValueError, match="calibration"):
        gaussian_noise_std(1.0, 1e-5, calibration="laplace")
    with pytest.raises(ValueError, match="delta"):
        analytic_gaussian_std(1.0, 1.5)


@pytest.mark.parametrize("noise", ["local", "distributed"])
def test_empirical_noise_std_matches_calibration(noise):
    """Statistical test at fixed seeds: the noise on the aggregate has the promised std."""
    X, y, clients = _data(n=120, d=3)
    K = len(np.unique(clients))
    truth = PrivateFederatedRidge(epsilon=np.inf).fit(X, y, clients=clients)._noisy_sums
    errors = []
    for seed in range(150):
        model = PrivateFederatedRidge(epsilon=0.8, noise=noise, random_state=seed)
        model.fit(X, y, clients=clients)
        errors.append(model._noisy_sums - truth)
    errors = np.concatenate(errors)
    tau = model.noise_std_
    expected = tau * math.sqrt(K) if noise == "local" else tau
    # n = 150 * 15 = 2250 draws: relative std error of the std is 1/sqrt(2n) = 1.5%.
    assert abs(errors.std() / expected - 1) < 0.06
    assert abs(errors.mean()) < 4 * expected / math.sqrt(errors.size)


def test_distributed_noise_is_smaller_on_the_aggregate():
    X, y, clients = _data(n=400, d=3)
    local = [PrivateFederatedRidge(epsilon=0.3, random_state=s).fit(X, y, clients=clients)
             for s in range(30)]
    distributed = [
        PrivateFederatedRidge(epsilon=0.3, noise="distributed", random_state=s).fit(
            X, y, clients=clients)
        for s in range(30)
    ]
    exact = FederatedRidge(alpha=1.0).fit(*clip_rows(X, y, 1.0, 1.0), clients=clients).coef_
    err_local = np.mean([np.linalg.norm(m.coef_ - exact) for m in local])
    err_dist = np.mean([np.linalg.norm(m.coef_ - exact) for m in distributed])
    assert err_dist < err_local


# -------------------------------------------------------------- post-processing
def test_psd_projection():
    rng = np.random.default_rng(4)
    A = rng.normal(size=(6, 6))
    noisy = A + A.T
    projected = project_psd(noisy)
    assert np.linalg.eigvalsh(projected).min() > -1e-10
    assert_allclose(projected, projected.T)
    psd = A @ A.T
    assert_allclose(project_psd(psd), psd, atol=1e-10)
    # Nearest in Frobenius norm: no random PSD matrix is closer.
    best = np.linalg.norm(projected - noisy)
    for _ in range(50):
        B = rng.normal(size=(6, 6))
        assert np.linalg.norm(projected + 0.01 * B @ B.T - noisy) >= best - 1e-12


# ---------------------------------------------------------- secure aggregation
def test_secure_aggregation_masks_cancel_exactly_and_hide_each_message():
    rng = np.random.default_rng(5)
    K = 5
    values = [rng.normal(size=40) * 100 for _ in range(K)]
    agg = SecureAggregator(K, seed=11)
    masked = [agg.mask(k, v) for k, v in enumerate(values)]
    encoded = [agg.encode(v) for v in values]
    # Exact cancellation: the masked sum equals the sum of the encoded values bit for bit.
    plain_sum = np.zeros(40, dtype=np.uint64)
    for e in encoded:
        plain_sum += e
    masked_sum = np.zeros(40, dtype=np.uint64)
    for m in masked:
        masked_sum += m
    assert_array_equal(masked_sum, plain_sum)
    assert_allclose(agg.aggregate(masked), np.sum(values, axis=0), atol=K * 2.0**-24)
    for k in range(K):
        assert not np.any(masked[k] == encoded[k])
        assert np.abs(agg.decode(masked[k]) - values[k]).min() > 1e3
    # Different seeds give different masks; same seed gives the same.
    assert_array_equal(SecureAggregator(K, seed=11).mask(0, values[0]), masked[0])
    assert not np.any(SecureAggregator(K, seed=12).mask(0, values[0]) == masked[0])


def test_secure_aggregation_refuses_overflow_and_missing_clients():
    agg = SecureAggregator(4, seed=0)
    with pytest.raises(OverflowError, match="party 2"):
        agg.mask(2, np.array([agg.max_abs_value]))
    messages = [agg.mask(k, np.ones(3)) for k in range(3)]
    with pytest.raises(ValueError, match=r"site\(s\) \[3\] dropped"):
        agg.aggregate(messages)
    with pytest.raises(ValueError, match="non-finite"):
        agg.encode(np.array([np.nan]))


# ------------------------------------------------------------------- accounting
def test_two_releases_cost_more_than_one():
    ledger = PrivacyLedger()
    ledger.record(3.0)
    one = ledger.epsilon(1e-5)
    ledger.record(3.0)
    two = ledger.epsilon(1e-5)
    assert two > one
    # Tighter than naive composition (2 * one) for Gaussian mechanisms.
    assert two < 2 * one
    X, y, clients = _data()
    model = PrivateFederatedRidge(epsilon=1.0, random_state=0).fit(X, y, clients=clients)
    first = model.privacy_spent_[0]
    model.partial_fit(X, y, clients=clients)
    assert model.n_releases_ == 2
    assert model.privacy_spent_[0] > first * 1.3
    # Exact: two Gaussian releases are one with multiplier m / sqrt(2); the
    # PLD accountant's discretized answer is an upper bound, just above it.
    multiplier = model.noise_std_ / model.sensitivity_
    exact = dp_accounting.get_epsilon_gaussian(multiplier / math.sqrt(2), 1e-5)
    assert_allclose(model.privacy_spent_[0], exact, rtol=1e-12)
    assert exact <= two_releases(multiplier) <= exact * 1.01


def two_releases(multiplier):
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(dp_accounting.GaussianDpEvent(multiplier), 2)
    return accountant.get_epsilon(1e-5)


def test_partial_fit_sums_releases():
    X, y, clients = _data(n=400)
    full = PrivateFederatedRidge(epsilon=np.inf).fit(X, y, clients=clients)
    part = PrivateFederatedRidge(epsilon=np.inf)
    part.partial_fit(X[:150], y[:150], clients=clients[:150])
    part.partial_fit(X[150:], y[150:], clients=clients[150:])
    assert_allclose(part.coef_, full.coef_, rtol=1e-8)
    assert part.n_clients_ == full.n_clients_


# -------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "params, name",
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"feature_bound": 0.0}, "feature_bound"),
        ({"target_bound": -2.0}, "target_bound"),
        ({"noise": "central"}, "noise"),
        ({"calibration": "laplace"}, "calibration"),
    ],
)
def test_bad_parameters_raise_clear_errors(params, name):
    X, y, clients = _data(n=50)
    with pytest.raises(InvalidParameterError, match=name):
        PrivateFederatedRidge(**params).fit(X, y, clients=clients)


def test_failed_partial_fit_leaves_estimator_unchanged():
    X, y, clients = _data()
    model = PrivateFederatedRidge(random_state=0).fit(X, y, clients=clients)
    before = (model.coef_.copy(), model.privacy_spent_, model._noisy_sums.copy())
    with pytest.raises(ValueError):
        model.partial_fit(X[:, :2], y)
    with pytest.raises(ValueError, match="targets"):
        model.partial_fit(X, np.c_[y, y])
    assert_array_equal(model.coef_, before[0])
    assert model.privacy_spent_ == before[1]
    assert_array_equal(model._noisy_sums, before[2])


# -------------------------------------------------------------------- pipelines
def test_clients_through_pipeline_and_grid_search():
    X, y, clients = _data(n=200)
    pipe = make_pipeline(MaxAbsScaler(), PrivateFederatedRidge(epsilon=5.0, random_state=0))
    pipe.fit(X, y, privatefederatedridge__clients=clients)
    assert pipe[-1].n_clients_ == 4
    with config_context(enable_metadata_routing=True):
        ridge = PrivateFederatedRidge(epsilon=5.0, random_state=0).set_fit_request(
            clients="groups"
        )
        search = GridSearchCV(
            ridge, {"epsilon": [1.0, np.inf]}, cv=GroupKFold(n_splits=4)
        )
        search.fit(X, y, groups=clients)
    assert search.best_params_["epsilon"] == np.inf
    assert search.best_estimator_.n_clients_ == 4


def test_missing_dp_accounting_names_the_extra(monkeypatch):
    import sys

    from sklearn_fed.privacy import _calibration

    _calibration._analytic_multiplier.cache_clear()
    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    with pytest.raises(ImportError, match=r"sklearn-fed\[dp\]"):
        analytic_gaussian_std(0.37, 1e-5)
    # Classic calibration and ε = inf need no optional dependency.
    assert classic_gaussian_std(0.5, 1e-5) > 0
    X, y, clients = _data(n=60)
    model = PrivateFederatedRidge(epsilon=np.inf).fit(X, y, clients=clients)
    assert model.privacy_spent_[0] == math.inf


# ------------------------------------------------- secure aggregation (issue 14)
def test_masks_cancel_exactly_over_1000_random_trials():
    rng = np.random.default_rng(10)
    for trial in range(1000):
        K = int(rng.integers(1, 6))
        size = int(rng.integers(1, 20))
        limit = max_abs_encoded(K)
        encoded = [rng.integers(-limit, limit, size=size, endpoint=True) for _ in range(K)]
        keys = [MaskingKey() for _ in range(K)]
        table = np.array([np.frombuffer(k.public_bytes, dtype=np.uint8) for k in keys])
        context = b"trial %d" % trial
        masked = {k: mask_vector(encoded[k], keys[k], k, table, context) for k in range(K)}
        total = unmask_sum(masked, size, parties=range(K))
        assert total.tolist() == [sum(int(e[i]) for e in encoded) for i in range(size)]
        if K > 1:  # each masked vector hides its values
            assert not np.array_equal(masked[0].view(np.int64), encoded[0])


@pytest.mark.parametrize("K", [2048, 10_000])
def test_fixed_point_overflow_bound_is_exact(K):
    limit = max_abs_encoded(K)
    assert K * limit <= 2**63 - 1 < K * (limit + 1)
    # The largest allowed values, K times, sum without wrapping (mod 2^64 arithmetic).
    for sign in (1, -1):
        top = fixed_point_encode([sign * float(limit)], 0, K)
        assert top[0] == sign * limit
        total = np.zeros(1, dtype=np.uint64)
        for _ in range(K):
            total += top.view(np.uint64)
        assert int(total.view(np.int64)[0]) == sign * K * limit
    # One grid step more is refused: the check is done on integers, not rounded floats.
    with pytest.raises(OverflowError):
        fixed_point_encode([float(limit + 1)], 0, K)
    with pytest.raises(OverflowError):
        fixed_point_encode([math.ldexp(limit + 1, -24)], -24, K)
    agg = SecureAggregator(K, seed=0)
    with pytest.raises(OverflowError):
        agg.encode([agg.max_abs_value + 2.0**-24])


def test_unmask_refuses_short_float_and_replayed_vectors():
    agg = SecureAggregator(3, seed=1)
    good = [agg.mask(k, np.ones(4)) for k in range(3)]
    for bad, match in [
        (good[1][:1], "length 4"),
        (good[1].astype(np.float64), "uint64"),
        (good[0], "same masked vector"),
    ]:
        with pytest.raises(InvalidClientMessage, match=match):
            unmask_sum({0: good[0], 1: bad, 2: good[2]}, 4, parties=range(3))
    assert_allclose(agg.aggregate(good), 3 * np.ones(4))


def _distributed_run(model, X, y, clients, *, drop=None):
    """Drive a distributed-noise model by hand; ``drop`` never answers the masked round."""
    labels = np.unique(clients).tolist()
    server = model.make_server()
    sites = {label: model.make_client(site=label) for label in labels}
    tasks = server.next_tasks(labels)
    while tasks:
        replies = {
            site: sites[site].respond(task, X[clients == site], y[clients == site])
            for site, task in tasks.items()
            if not (site == drop and server._stage == "release")
        }
        server.receive(replies)
        tasks = server.next_tasks(labels)
    return server


def test_site_dropping_after_masking_fails_the_round_cleanly_then_recovers():
    X, y, clients = _data(n=400)
    model = PrivateFederatedRidge(epsilon=2.0, noise="distributed", random_state=0)
    before = pickle.dumps(model)
    with pytest.raises(ValueError, match=r"site\(s\) \[2\] dropped after receiving the keys"):
        _distributed_run(model, X, y, clients, drop=2)
    assert pickle.dumps(model) == before  # nothing applied
    # Recovery: the server starts a new key round among the sites still reachable.
    server = model.make_server()
    labels = [0, 1, 3]
    sites = {label: model.make_client() for label in range(4)}
    keys_round = server.next_tasks([0, 1, 2, 3])
    server.receive({s: sites[s].respond(t, X[clients == s], y[clients == s])
                    for s, t in keys_round.items()})
    masked_round = server.next_tasks(labels)  # site 2 is gone before masking: re-key
    assert server._stage == "keys"
    tasks = masked_round
    while tasks:
        server.receive({s: sites[s].respond(t, X[clients == s], y[clients == s])
                        for s, t in tasks.items()})
        tasks = server.next_tasks(labels)
    assert server.estimator.clients_.tolist() == labels


def test_server_rejects_a_forged_masked_reply_naming_the_site():
    X, y, clients = _data(n=200)
    model = PrivateFederatedRidge(epsilon=2.0, noise="distributed", random_state=0)
    server = model.make_server()
    sites = {s: model.make_client() for s in range(4)}
    tasks = server.next_tasks(range(4))
    server.receive({s: sites[s].respond(t, X[clients == s], y[clients == s])
                    for s, t in tasks.items()})
    tasks = server.next_tasks(range(4))
    replies = {s: sites[s].respond(t, X[clients == s], y[clients == s])
               for s, t in tasks.items()}
    frame = decode(replies[1])
    frame.arrays = {"masked": frame.arrays["masked"].astype(np.float64)}
    replies[1] = encode(frame)
    with pytest.raises(InvalidClientMessage, match="client 1: a distributed release"):
        server.receive(replies)
    assert not hasattr(model, "coef_")


# ------------------------------------------------------------- noise (issue 14)
def test_a_fixed_seed_gives_the_same_release_for_the_same_rows_only():
    # issue 27: with an integer seed a release is a function of the seed and the site's
    # own data, so a refit is the same release (check_fit_idempotent)...
    X, y, clients = _data()
    truth = PrivateFederatedRidge(epsilon=np.inf).fit(X, y, clients=clients)._noisy_sums
    model = PrivateFederatedRidge(epsilon=1.0, random_state=0)
    first = model.fit(X, y, clients=clients)._noisy_sums - truth
    second = model.fit(X, y, clients=clients)._noisy_sums - truth
    assert np.abs(first).max() > 1e-3  # there is noise, and it is the same integers
    assert_array_equal(second, first)
    assert model.n_releases_ == 2  # still counted: the ledger does not know it is a copy
    again = PrivateFederatedRidge(epsilon=1.0, random_state=0).fit(X, y, clients=clients)
    assert_array_equal(again._noisy_sums - truth, first)
    # ...another seed, or None, draws other noise: reused noise correlates 1; independent
    # noise over these 20 values about N(0, 0.22^2), so above 0.9 with odds below 1e-7
    # (0.5 failed about once in 100 runs)
    other = PrivateFederatedRidge(epsilon=1.0, random_state=1).fit(X, y, clients=clients)
    assert np.corrcoef(other._noisy_sums - truth, first)[0, 1] < 0.9
    fresh = PrivateFederatedRidge(epsilon=1.0).fit(X, y, clients=clients)
    assert np.corrcoef(fresh._noisy_sums - truth, first)[0, 1] < 0.9


def test_different_data_with_the_same_seed_get_independent_noise():
    # Data sets one row away at every site, with the same integer seed: the noise of each
    # is independent of the first's. Pooled over 20 data sets x 55 released values, the
    # correlation of independent noise is about N(0, 0.03^2); reused noise gives 1. (A
    # site whose rows did not change repeats its release, noise included: its own data.)
    X, y, clients = _data(n=200, d=8)
    model = PrivateFederatedRidge(epsilon=1.0, random_state=0)

    def noise(X, y):
        truth = PrivateFederatedRidge(epsilon=np.inf).fit(X, y, clients=clients)._noisy_sums
        return model.fit(X, y, clients=clients)._noisy_sums - truth
    base = noise(X, y)
    rng = np.random.default_rng(5)
    pairs = []
    for i in range(20):
        X2, y2 = X.copy(), y.copy()
        for site in np.unique(clients):  # one row of every site changes
            row = np.flatnonzero(clients == site)[i]
            X2[row] = rng.uniform(-0.2, 0.2, size=X.shape[1])
            y2[row] = rng.uniform(-0.5, 0.5)
        pairs.append((base, noise(X2, y2)))
    a = np.concatenate([p[0] for p in pairs]) / base.std()
    b = np.concatenate([p[1] for p in pairs])
    b = b / b.std()
    assert a.size >= 20 * 50
    r = np.corrcoef(a, b)[0, 1]
    assert abs(r) < 0.15, r
    assert not any(np.array_equal(p[0], p[1]) for p in pairs)


def test_noise_streams_of_different_releases_are_independent():
    from scipy import stats

    from sklearn_fed.privacy import noise_generator

    values = np.arange(50, dtype=np.int64)
    draws = []
    for i in range(200):
        released = values.copy()
        released[i % 50] += 1 + i // 50  # 200 releases, each one value away from the base
        draws.append(noise_generator(7, "site", "calibration", released).standard_normal(500))
    base = noise_generator(7, "site", "calibration", values).standard_normal(500)
    r = np.array([np.corrcoef(base, d)[0, 1] for d in draws])
    assert np.abs(r).max() < 0.25 and abs(r.mean()) < 0.02  # SE 0.045 and 0.003
    assert stats.kstest(np.concatenate(draws), "norm").pvalue > 1e-3
    # the same release, seed and site: the same stream; anything else changes it
    same = noise_generator(7, "site", "calibration", values).standard_normal(500)
    assert_array_equal(same, base)
    for other in [noise_generator(8, "site", "calibration", values),
                  noise_generator(7, "other", "calibration", values),
                  noise_generator(7, "site", "calibration 2", values),
                  noise_generator(7, "site", "calibration", values.astype(np.int32)),
                  noise_generator(None, "site", "calibration", values)]:
        assert abs(np.corrcoef(other.standard_normal(500), base)[0, 1]) < 0.25
    with pytest.raises(ValueError, match="non-negative int"):
        noise_generator(-1, "site")


def test_global_numpy_seed_does_not_reproduce_the_noise():
    X, y, clients = _data()
    fits = []
    for _ in range(2):
        np.random.seed(0)
        fits.append(PrivateFederatedRidge(epsilon=1.0).fit(X, y, clients=clients)._noisy_sums)
    assert not np.any(fits[0] == fits[1])


def test_refits_are_counted_by_the_accountant():
    X, y, clients = _data()
    model = PrivateFederatedRidge(epsilon=1.0).fit(X, y, clients=clients)
    assert_allclose(model.privacy_spent_[0], 1.0, rtol=1e-9)
    model.fit(X, y, clients=clients)
    assert model.n_releases_ == 2
    assert_allclose(model.privacy_spent_[0], 1.4651, rtol=1e-3)


def test_site_releases_integers_on_a_grid():
    """No float side channel: every released value is an int64 count of grid steps."""
    X, y, clients = _data(n=90)
    model = PrivateFederatedRidge(epsilon=1.0)
    server = model.make_server()
    task = server.next_tasks([0])[0]
    reply = decode(model.make_client().respond(task, X, y))
    assert reply.arrays["sums"].dtype == np.int64


def test_site_policy_refuses_a_larger_epsilon():
    X, y, _ = _data(n=90)
    model = PrivateFederatedRidge(epsilon=2.0)
    task = model.make_server().next_tasks(["a"])["a"]
    with pytest.raises(TaskRefused, match="epsilon=2.0 exceeds"):
        model.make_client(policy=SitePolicy(max_epsilon=1.0)).respond(task, X, y)


# ------------------------------------------------------- accounting (issue 15)
def test_equal_releases_compose_to_one_gaussian_in_closed_form():
    ledger = PrivacyLedger()
    ledger.record(3.0, count=10_000)
    for _ in range(1000):
        ledger.record(3.0)
    assert len(ledger) == 11_000
    assert_allclose(ledger.noise_multiplier, 3.0 / math.sqrt(11_000))
    assert_allclose(composed_noise_multiplier([3.0] * 4), 1.5)
    expected = dp_accounting.get_epsilon_gaussian(3.0 / math.sqrt(11_000), 1e-5)
    assert_allclose(ledger.epsilon(1e-5), expected, rtol=1e-12)


def test_huge_epsilon_neither_allocates_nor_crashes(peak_memory):
    X, y, clients = _data()
    model = PrivateFederatedRidge(epsilon=1e9)

    def releases():
        model.fit(X, y, clients=clients)
        for _ in range(20):
            model.partial_fit(X[:20], y[:20], clients=clients[:20])

    assert peak_memory(releases) < 50 * 2**20
    assert model.n_releases_ == 21 and math.isfinite(model.privacy_spent_[0])
    ledger = PrivacyLedger()  # a subsampled release goes through a bounded PLD
    ledger.record(1e-6, count=50, sampling_probability=0.1)
    assert math.isfinite(ledger.epsilon(1e-5))


# ------------------------------------------------------ clipping (issues 15, 19)
def test_default_bounds_warn_and_report_the_clipped_share():
    X, y, clients = _data(scale=10.0)
    with pytest.warns(ClippingWarning, match="RangeScaler"):
        model = PrivateFederatedRidge(epsilon=np.inf).fit(X, y, clients=clients)
    assert model.clipped_share_ > 0.9
    ranges = [(-20, 20)] * X.shape[1]
    pipe = make_pipeline(RangeScaler(ranges), PrivateFederatedRidge(
        epsilon=np.inf, target_bound=float(np.abs(y).max() + 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippingWarning)
        pipe.fit(X, y, privatefederatedridge__clients=clients)
    assert pipe[-1].clipped_share_ == 0.0
    # epsilon = inf on rows of norm <= 1: Ridge on the scaled rows.
    Xs = RangeScaler(ranges).fit_transform(X)
    assert_allclose(pipe[-1].coef_, Ridge().fit(Xs, y).coef_, rtol=1e-7, atol=1e-9)


def test_a_deployed_site_warns_about_its_own_clipping():
    X, y, _ = _data(scale=10.0)
    model = PrivateFederatedRidge(epsilon=1.0)
    task = model.make_server().next_tasks(["a"])["a"]
    with pytest.warns(ClippingWarning, match="site 'a'"):
        model.make_client().respond(task, X, y)


def test_range_scaler_uses_stated_ranges_only():
    import pandas as pd

    frame = pd.DataFrame({"age": [20.0, 200.0, 50.0], "bmi": [10.0, 30.0, 60.0]})
    scaler = RangeScaler({"bmi": (10, 50), "age": (0, 100)}).fit(frame)
    out = scaler.transform(frame)
    assert np.all(np.linalg.norm(out, axis=1) <= 1 + 1e-15)
    assert_allclose(out[0] * math.sqrt(2), [-0.6, -1.0])
    # The data never sets the scale: other rows, same transform.
    assert_allclose(RangeScaler({"bmi": (10, 50), "age": (0, 100)}).fit(frame[:1])
                    .transform(frame), out)
    with pytest.raises(ValueError, match=r"missing \['bmi'\]"):
        RangeScaler({"age": (0, 100)}).fit(frame)
    with pytest.raises(ValueError, match="low < high"):
        RangeScaler([(1, 0), (0, 1)]).fit(frame.to_numpy())


@pytest.mark.parametrize("layout", ["contiguous", "shuffled"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("clipped", ["many", "few"])
def test_blockwise_clipped_sums_equal_the_reference(monkeypatch, layout, weighted, dtype,
                                                     clipped):
    from sklearn_fed.linear_model import _private_release

    monkeypatch.setattr(_private_release, "_BLOCK_BYTES", 8 * 7 * 13)  # 13 rows per block
    rng = np.random.default_rng(3)
    scale = rng.uniform(0.1, 3, size=(200, 1))
    if clipped == "few":  # at most one row in 13 clipped: blocks read in place, rows corrected
        scale = np.where(np.arange(200)[:, None] % 13 == 5, 3.0, 0.1)
    X = (rng.normal(size=(200, 5)) * scale).astype(dtype)
    y = rng.normal(size=(200, 1)) * 2
    w = rng.uniform(0, 2, size=200) if weighted else None
    rows = slice(20, 170) if layout == "contiguous" else np.sort(rng.permutation(200)[:150])
    got, n_clipped = clipped_sums(X, y, w, rows, 1.0, 1.5, True)
    Xc, yc = clip_rows(X[rows], y[rows], 1.0, 1.5)
    stats = ClientStatistics.from_data(Xc, yc, None if w is None else w[rows], centered=False)
    assert_allclose(got, released_sums(stats, True), rtol=1e-10, atol=1e-10)
    expected = np.count_nonzero((np.linalg.norm(X[rows].astype(float), axis=1) > 1.0)
                                | (np.abs(y[rows, 0]) > 1.5))
    assert n_clipped == expected
    sparse, _ = clipped_sums(sp.csr_matrix(X), y, w, rows, 1.0, 1.5, True)
    assert_allclose(sparse, got, rtol=1e-10, atol=1e-10)
    # A deployed site holds just its rows: the same bits as the simulated site's.
    own, _ = clipped_sums(X[rows], y[rows], None if w is None else w[rows], None,
                          1.0, 1.5, True)
    assert_array_equal(own, got)


def test_missing_cryptography_names_the_extra(monkeypatch):
    import sys

    from sklearn_fed.privacy import _secure_aggregation

    _secure_aggregation._crypto.cache_clear()
    monkeypatch.setitem(sys.modules, "cryptography", None)
    try:
        with pytest.raises(ImportError, match=r"sklearn-fed\[secure\]"):
            MaskingKey()
    finally:
        _secure_aggregation._crypto.cache_clear()


def test_the_same_release_under_two_sites_is_refused():
    X, y, clients = _data(n=200)
    model = PrivateFederatedRidge(epsilon=2.0)
    server = model.make_server()
    tasks = server.next_tasks(["a", "b"])
    reply = model.make_client().respond(tasks["a"], X, y)
    frame = decode(reply)
    frame.site = "b"
    with pytest.raises(InvalidClientMessage, match="client 'b': sent the same release"):
        server.receive({"a": reply, "b": encode(frame)})


@pytest.mark.parametrize("noise", ["local", "distributed"])
def test_sites_release_on_parallel_threads_with_the_same_bits(sites_on_threads, noise):
    # With several BLAS threads, local-noise sites compute their releases at
    # once (each its own stream); distributed noise shares masking keys, so
    # its sites run one after another. Either way the model is the same.
    import threading

    from sklearn_fed.linear_model._private_roles import PrivateClient

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 4)) / 2
    y = X @ [1.0, -1.0, 0.5, 0.0] + 0.1 * rng.normal(size=600)
    clients = np.repeat(np.arange(6), 100)
    fits = {}
    for n_threads in (1, 3):
        threads = sites_on_threads(PrivateClient, n_threads)
        model = PrivateFederatedRidge(epsilon=2.0, feature_bound=2.0, target_bound=4.0,
                                      noise=noise, random_state=0)
        fits[n_threads] = model.fit(X, y, clients=clients)
        on_pool = n_threads > 1 and noise == "local"
        main = threading.get_ident()
        assert (main not in threads) if on_pool else (threads == {main})
    assert_array_equal(fits[1].coef_, fits[3].coef_)
    assert fits[1].intercept_ == fits[3].intercept_


@pytest.mark.parametrize("alpha", [1.0, 1e-9, 0.0, np.array([1.0, 0.0])])
def test_projected_gram_is_solved_on_the_projections_own_spectrum(monkeypatch, alpha):
    from scipy import linalg

    from sklearn_fed.linear_model import _solver
    from sklearn_fed.linear_model._solver import _solve_gram, numerical_range, solve_ridge
    from sklearn_fed.linear_model._private import _psd_projection

    rng = np.random.default_rng(5)
    A = rng.normal(size=(30, 8))
    noisy = A.T @ A + 40 * np.diag(rng.normal(size=8))  # a few negative eigenvalues
    moment = rng.normal(size=(8, 2))
    projected, eigenpairs = _psd_projection(noisy)
    assert eigenpairs is not None and np.any(eigenpairs[0] == 0)
    expected = solve_ridge(projected, moment, alpha)
    calls, numpy_eigh = [], np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda *a, **k: calls.append(1) or numpy_eigh(*a, **k))
    monkeypatch.setattr(_solver.linalg, "eigh",
                        lambda *a, **k: calls.append(1) or linalg.eigh(*a, **k))
    spectrum = numerical_range(projected, eigenpairs=eigenpairs)
    got = _solve_gram(projected, moment, alpha, spectrum=spectrum)[0]
    assert calls == []  # no second eigendecomposition, whichever path each alpha takes
    assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_a_noisy_release_is_decomposed_once(monkeypatch):
    X, y, clients = _data(n=60, d=12)
    calls, numpy_eigh = [], np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda *a, **k: calls.append(1) or numpy_eigh(*a, **k))
    PrivateFederatedRidge(epsilon=0.05, alpha=1e-12, random_state=0).fit(X, y, clients=clients)
    assert calls == [1]  # the PSD projection's: the solve reuses its eigenpairs
