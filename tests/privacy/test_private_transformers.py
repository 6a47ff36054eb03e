"""Differentially private transformers: calibrated noise, one ledger per pipeline, a budget."""

import math

import numpy as np
import pytest
from scipy import stats
from sklearn.model_selection import GridSearchCV

from sklearn_fed import PrivateFederatedRidge
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.decomposition import PrivateFederatedPCA
from sklearn_fed.impute import PrivateFederatedSimpleImputer
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.preprocessing import (
    FederatedStandardScaler,
    PrivateFederatedOneHotEncoder,
    PrivateFederatedStandardScaler,
)
from sklearn_fed.privacy import PrivacyBudget, PrivacyLedger, gaussian_noise_std
from sklearn_fed.privacy._noise import discretized_sensitivity, grid_exponent
from sklearn_fed.protocol import SitePolicy, TaskRefused, decode

dp_accounting = pytest.importorskip("dp_accounting")

DRAWS = 300


def _site_noise(estimator, X, exact, read):
    """``reply - exact`` over DRAWS releases of one site (random_state = draw)."""
    noise = []
    for seed in range(DRAWS):
        model = estimator.set_params(random_state=seed)
        task = model.make_server().next_tasks(["a"])["a"]
        reply = decode(model.make_client(policy=SitePolicy.permissive()).respond(task, X))
        noise.append(read(reply) - exact)
    return np.concatenate(noise)


def _matches_normal(noise, std):
    """Mean 0 and standard deviation ``std``: z-test and chi-square test at the 0.1% level."""
    n = noise.size
    assert abs(noise.mean()) < 3.3 * std / math.sqrt(n)
    chi2 = float(np.sum(noise**2) / std**2)
    assert stats.chi2.ppf(0.0005, n) < chi2 < stats.chi2.ppf(0.9995, n)


def test_scaler_noise_matches_the_calibrated_scale():
    rng = np.random.default_rng(0)
    low, high = np.array([0.0, -5.0, 10.0]), np.array([10.0, 5.0, 30.0])
    X = rng.uniform(low, high, size=(500, 3))
    center, half = (low + high) / 2, (high - low) / 2
    mapped = (X - center) / half
    exact = np.concatenate([np.full(3, 500.0), mapped.sum(axis=0), (mapped**2).sum(axis=0)])
    scaler = PrivateFederatedStandardScaler(bounds=np.column_stack([low, high]), epsilon=0.7,
                                            delta=1e-6)
    noise = _site_noise(scaler, X, exact, lambda reply: reply.arrays["sums"].ravel())
    # the calibration: sensitivity sqrt(3 d) of the values on the grid
    exponent = grid_exponent(math.sqrt(9), 9, noisy=True)
    std = gaussian_noise_std(0.7, 1e-6, discretized_sensitivity(3.0, 9, exponent))
    _matches_normal(noise, std)


def test_imputer_mean_noise_matches_the_calibrated_scale():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 4, size=(300, 2))
    X[::7, 1] = np.nan
    present = ~np.isnan(X)
    mapped = np.where(present, (np.nan_to_num(X) - 2) / 2, 0.0)
    exact = np.concatenate([present.sum(axis=0), mapped.sum(axis=0)])
    imputer = PrivateFederatedSimpleImputer(bounds=(0, 4), epsilon=2.0, delta=1e-5)
    noise = _site_noise(imputer, X, exact, lambda reply: reply.arrays["sums"].ravel())
    exponent = grid_exponent(2.0, 4, noisy=True)
    _matches_normal(noise, gaussian_noise_std(2.0, 1e-5, discretized_sensitivity(2.0, 4,
                                                                                 exponent)))


def test_pca_gram_noise_matches_the_calibrated_scale():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 3)) * 0.4
    clipped = X * np.minimum(1.0, 1.5 / np.linalg.norm(X, axis=1))[:, None]
    exact = np.concatenate([[400.0], clipped.sum(axis=0),
                            (clipped.T @ clipped)[np.triu_indices(3)]])
    pca = PrivateFederatedPCA(n_components=2, feature_bound=1.5, epsilon=1.0)
    noise = _site_noise(pca, X, exact, lambda reply: reply.arrays["sums"])
    sensitivity = math.sqrt(1 + 1.5**2 + 1.5**4)
    exponent = grid_exponent(sensitivity, 10, noisy=True)
    _matches_normal(noise, gaussian_noise_std(1.0, 1e-5, discretized_sensitivity(
        sensitivity, 10, exponent)))


def test_encoder_noisy_counts_match_the_calibrated_scale():
    X = np.array([["a"]] * 4000 + [["b"]] * 3000 + [["c"]] * 2500, dtype=object)
    encoder = PrivateFederatedOneHotEncoder(epsilon=1.0, delta=1e-5)
    noise = _site_noise(encoder, X, np.array([4000.0, 3000.0, 2500.0]),
                        lambda reply: reply.arrays["n0"].astype(float))
    # counts are integers: rounded Gaussian noise, of variance std^2 + 1/12
    std = gaussian_noise_std(1.0, 0.5e-5, 1.0)
    _matches_normal(noise, math.sqrt(std**2 + 1 / 12))


def test_encoder_selects_categories_above_the_noisy_threshold():
    X = np.array([["common"]] * 200 + [["rare"]] * 3, dtype=object)
    fitted = [PrivateFederatedOneHotEncoder(random_state=seed).fit(X).categories_[0].tolist()
              for seed in range(20)]
    assert all(categories == ["common"] for categories in fitted)


def _private_pipeline(epsilons, budget=None):
    return make_federated_pipeline(
        FederatedColumnTransformer([
            ("scale", PrivateFederatedStandardScaler(bounds=(-4, 4), epsilon=epsilons[0],
                                                     random_state=0), [0, 1, 2]),
            ("onehot", PrivateFederatedOneHotEncoder(epsilon=epsilons[1], sparse_output=False,
                                                     handle_unknown="ignore", random_state=0),
             [3])]),
        PrivateFederatedSimpleImputer(bounds=(-5, 5), epsilon=epsilons[2], random_state=0),
        PrivateFederatedRidge(epsilon=epsilons[3], feature_bound=3.0, target_bound=10.0,
                              random_state=0),
        privacy_budget=budget)


def _table(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    X = np.empty((n, 4), dtype=object)
    X[:, :3] = rng.normal(size=(n, 3))
    X[:, 3] = rng.choice(["x", "y", "z"], n)
    y = X[:, :3].astype(float) @ [1.0, -2.0, 0.5] + (X[:, 3] == "x") + rng.normal(size=n)
    return X, y, np.arange(n) % 3


def _dp_accounting_epsilon(multipliers, delta):
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(m) for m in multipliers]))
    return accountant.get_epsilon(delta)


def test_pipeline_privacy_spent_is_the_composition_of_its_steps_releases():
    epsilons = [0.5, 1.0, 0.8, 2.0]
    X, y, sites = _table()
    pipe = _private_pipeline(epsilons).fit(X, y, clients=sites)
    epsilon, delta = pipe.privacy_spent_
    # each step: one Gaussian release at its (epsilon, delta); the encoder's at delta/2,
    # plus delta/2 for selecting its categories
    assert delta == pytest.approx(4e-5)
    multipliers = [gaussian_noise_std(e, d, 1.0)
                   for e, d in zip(epsilons, [1e-5, 0.5e-5, 1e-5, 1e-5])]
    reference = _dp_accounting_epsilon(multipliers, delta - 0.5e-5)
    assert epsilon == pytest.approx(reference, rel=2e-3)
    by_step = pipe.privacy_spent_by_step_
    assert set(by_step) == {"federatedcolumntransformer__scale",
                            "federatedcolumntransformer__onehot",
                            "privatefederatedsimpleimputer", "privatefederatedridge"}
    for (step_epsilon, step_delta), planned in zip(by_step.values(), epsilons):
        assert step_epsilon == pytest.approx(planned, rel=1e-6)
        assert step_delta == pytest.approx(1e-5)
    assert epsilon < sum(epsilons)  # tighter than adding them up


def test_a_step_without_noise_makes_the_pipeline_spend_infinite_epsilon():
    X, y, sites = _table()
    X = X[:, :3].astype(float)
    pipe = make_federated_pipeline(FederatedStandardScaler(), PrivateFederatedRidge(
        feature_bound=3.0, target_bound=10.0, random_state=0)).fit(X, y, clients=sites)
    assert pipe.privacy_spent_[0] == math.inf
    assert pipe.privacy_spent_by_step_["federatedstandardscaler"] == (math.inf, 0.0)
    plain = make_federated_pipeline(FederatedStandardScaler()).fit(X, clients=sites)
    assert not hasattr(plain, "privacy_spent_")  # nothing private: nothing to report
    with pytest.raises(ValueError, match="privacy budget exceeded"):
        make_federated_pipeline(FederatedStandardScaler(), PrivateFederatedRidge(),
                                privacy_budget=(10.0, 1e-5)).fit(X, y, clients=sites)


def test_the_budget_is_enforced_before_any_release():
    X, y, sites = _table()
    pipe = _private_pipeline([1.0, 1.0, 1.0, 1.0], budget=(1.5, 1e-5))
    with pytest.raises(ValueError, match=r"privacy budget exceeded: this pipeline's fit would "
                                         r"bring the total to epsilon=[\d.]+ at delta=1e-05, "
                                         r"over the budget's epsilon=1\.5"):
        pipe.make_server()  # before any task is sent
    assert not hasattr(pipe, "privacy_spent_")
    fitted = _private_pipeline([1.0, 1.0, 1.0, 1.0], budget=(10.0, 1e-5)).fit(
        X, y, clients=sites)
    assert fitted.privacy_spent_[1] == 1e-5 and fitted.privacy_spent_[0] < 10


def test_a_search_charges_every_candidate_to_one_budget_and_stops_when_spent():
    X, y, sites = _table(600)
    X = X[:, :3].astype(float)
    budget = PrivacyBudget(epsilon=2.5, delta=1e-5)
    pipe = make_federated_pipeline(
        PrivateFederatedStandardScaler(bounds=(-4, 4), random_state=0),
        PrivateFederatedRidge(feature_bound=3.0, target_bound=10.0, random_state=0),
        privacy_budget=budget)
    search = GridSearchCV(pipe, {"privatefederatedridge__alpha": [1.0, 10.0]}, cv=2,
                          error_score="raise")
    with pytest.raises(ValueError, match="privacy budget exceeded"):
        search.fit(X, y, clients=sites)
    # every fit before the refusal was charged: 2 releases each
    charged = len(budget.charges_)
    assert charged >= 1 and len(budget.ledger_) == 2 * charged
    assert budget.spent()[0] <= 2.5
    ledger = PrivacyLedger()
    ledger.record(gaussian_noise_std(1.0, 1e-5, 1.0), count=2 * charged)
    assert budget.spent()[0] == pytest.approx(ledger.epsilon(1e-5))


def test_a_site_policy_caps_the_epsilon_of_a_private_transformer():
    X = np.random.default_rng(0).uniform(0, 1, size=(50, 2))
    scaler = PrivateFederatedStandardScaler(bounds=(0, 1), epsilon=5.0)
    task = scaler.make_server().next_tasks(["a"])["a"]
    with pytest.raises(TaskRefused, match="epsilon=5.0 exceeds the policy's maximum 1.0"):
        scaler.make_client(policy=SitePolicy(max_epsilon=1.0)).respond(task, X)
