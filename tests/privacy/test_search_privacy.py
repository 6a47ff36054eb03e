"""One privacy ledger per search: every candidate, fold and the refit; a budget; a site's budget."""

import numpy as np
import pytest

from sklearn_fed import FederatedRidge, PrivateFederatedRidge
from sklearn_fed.model_selection import FederatedGridSearchCV, federated_cross_validate
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.preprocessing import (
    FederatedStandardScaler,
    PrivateFederatedStandardScaler,
)
from sklearn_fed.privacy import PrivacyBudget, gaussian_noise_std
from sklearn_fed.protocol import SitePolicy, TaskRefused

dp_accounting = pytest.importorskip("dp_accounting")


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 3))
    return X, X @ [1.0, -2.0, 0.5] + rng.normal(size=n), np.arange(n) % 3


def _pipeline():
    return make_federated_pipeline(
        PrivateFederatedStandardScaler(bounds=(-2, 2), epsilon=1.0, random_state=0),
        PrivateFederatedRidge(feature_bound=3.5, target_bound=10.0, random_state=0))


def _pld_epsilon(epsilons, delta):
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(gaussian_noise_std(e, 1e-5, 1.0)) for e in epsilons]))
    return accountant.get_epsilon(delta)


def test_a_search_reports_every_candidate_fold_and_refit_composed():
    X, y, sites = _data()
    search = FederatedGridSearchCV(_pipeline(), {"privatefederatedridge__epsilon": [0.5, 2.0]},
                                   cv=2).fit(X, y, clients=sites)
    best = search.best_params_["privatefederatedridge__epsilon"]
    # each fit: the scaler at epsilon 1 and the ridge at the candidate's; 2 x 2 fits + refit
    releases = [1.0, 0.5] * 2 + [1.0, 2.0] * 2 + [1.0, best]
    epsilon, delta = search.privacy_spent_
    assert delta == pytest.approx(len(releases) * 1e-5)
    assert epsilon == pytest.approx(_pld_epsilon(releases, delta), rel=2e-3)
    by_step = search.privacy_spent_by_step_
    assert len(by_step) == len(releases)
    assert by_step["candidate1__fold0__privatefederatedridge"][0] == pytest.approx(2.0, rel=1e-6)
    assert by_step["refit__privatefederatedstandardscaler"][0] == pytest.approx(1.0, rel=1e-6)
    for i, (candidate, d) in enumerate(search.privacy_spent_by_candidate_):
        assert d == pytest.approx(4e-5)
        assert candidate == pytest.approx(_pld_epsilon([1.0, [0.5, 2.0][i]] * 2, d), rel=2e-3)


def test_the_search_budget_is_refused_before_any_task_and_charged_after():
    X, y, sites = _data()
    grid = {"privatefederatedridge__epsilon": [0.5, 2.0]}
    search = FederatedGridSearchCV(_pipeline(), grid, cv=2, privacy_budget=(3.0, 1e-5))
    server = search.make_server()
    with pytest.raises(ValueError, match=(
            r"privacy budget exceeded: this search's fits \(2 candidates x 2 folds and the "
            r"refit of the best\) would bring the total to epsilon=[\d.]+ at delta=1e-05, "
            r"over the budget's epsilon=3")):
        server.next_tasks([0, 1, 2])
    assert server.round == 0 and not hasattr(search, "privacy_spent_")
    with pytest.raises(ValueError, match="privacy budget exceeded"):  # the same, again
        server.next_tasks([0, 1, 2])
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5)
    fitted = FederatedGridSearchCV(_pipeline(), grid, cv=2, privacy_budget=budget).fit(
        X, y, clients=sites)
    assert fitted.privacy_spent_ == pytest.approx(budget.spent())
    assert fitted.privacy_spent_[1] == 1e-5 and len(budget.ledger_) == 10
    # a search of non-private fits releases exact statistics: no budget is enough
    with pytest.raises(ValueError, match="privacy budget exceeded"):
        FederatedGridSearchCV(FederatedRidge(), {"alpha": [1.0]}, cv=2,
                              privacy_budget=(10.0, 1e-5)).fit(X, y, clients=sites)
    plain = FederatedGridSearchCV(FederatedRidge(), {"alpha": [1.0]}, cv=2).fit(
        X, y, clients=sites)
    assert not hasattr(plain, "privacy_spent_")  # nothing private: nothing to report


def test_cross_validate_reports_its_folds_releases():
    X, y, sites = _data()
    out = federated_cross_validate(_pipeline(), X, y, clients=sites, cv=3)
    epsilon, delta = out["privacy_spent"]
    assert delta == pytest.approx(6e-5)
    assert epsilon == pytest.approx(_pld_epsilon([1.0] * 6, delta), rel=2e-3)
    assert set(out["privacy_spent_by_step"]) == {
        f"candidate0__fold{k}__{step}" for k in range(3)
        for step in ("privatefederatedstandardscaler", "privatefederatedridge")}
    with pytest.raises(ValueError, match=r"\(1 candidates x 3 folds\)"):
        federated_cross_validate(_pipeline(), X, y, clients=sites, cv=3,
                                 privacy_budget=(2.0, 1e-5))


def test_a_site_budget_refuses_a_release_beyond_it_naming_the_rule():
    X = np.random.default_rng(0).uniform(0, 1, size=(50, 2))
    budget = PrivacyBudget(epsilon=1.5, delta=1e-5)
    site = PrivateFederatedStandardScaler(bounds=(0, 1), epsilon=1.0).make_client(
        policy=SitePolicy(privacy_budget=budget), site="a")
    task = PrivateFederatedStandardScaler(bounds=(0, 1), epsilon=1.0).make_server().next_tasks(
        ["a"])["a"]
    site.respond(task, X)
    assert budget.spent()[0] == pytest.approx(1.0, rel=1e-6)
    site.respond(task, X)  # two releases at epsilon 1 compose to about 1.47 < 1.5
    assert len(budget.ledger_) == 2
    with pytest.raises(TaskRefused, match=(
            r"site 'a' refuses the '[\w.]+' task: rule privacy_budget=\(epsilon=1\.5, "
            r"delta=1e-05\): privacy budget exceeded: the '[\w.]+' release would bring the "
            r"total to epsilon=1\.8\d* at delta=1e-05, over the budget's epsilon=1\.5.* "
            r"What you can do: ask the server for a smaller epsilon")):
        site.respond(task, X)
    assert len(budget.ledger_) == 2  # the refused release is not charged
    # a task without noise is not charged (max_epsilon is the rule that refuses those)
    task = FederatedStandardScaler().make_server().next_tasks(["a"])["a"]
    FederatedStandardScaler().make_client(policy=SitePolicy(privacy_budget=budget)).respond(
        task, X)
    assert len(budget.ledger_) == 2
    with pytest.raises(TypeError, match="privacy_budget must be a"):
        SitePolicy(privacy_budget=(1.0, 1e-5))
